"""The engine: batches, the KV cache, and the context that runs a model over them."""
