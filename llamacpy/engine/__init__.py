"""The engine: contexts that run a model over batches, prompts, one sequence's generation and the scheduler that batches many."""
