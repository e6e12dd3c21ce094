"""What a model's forward reads and writes besides its weights: the Batch of rows to decode, the
KV cache, and the recurrent state of hybrid models (llama.cpp: llama-batch, llama-memory).

It sits below ops/ and models/, so models never import the engine that drives them."""
