"""A script written for llama-cpp-python. It runs unchanged against llamacpy: only the class
passed in differs (`from llama_cpp import Llama` vs `from llamacpy import Llama`)."""

from __future__ import annotations


def run(Llama, model_path: str) -> dict:  # noqa: N803 - the class, as the import names it
    llm = Llama(model_path=model_path, n_ctx=1024, n_threads=2, n_batch=256, seed=1234,
                verbose=False)
    out: dict = {"n_ctx": llm.n_ctx(), "n_vocab": llm.n_vocab(), "bos": llm.token_bos(),
                 "eos": llm.token_eos()}
    tokens = llm.tokenize(b"Hello, world! How are you?")
    out["tokens"] = tokens
    out["tokens_special"] = llm.tokenize(b"<|im_start|>user", add_bos=False, special=True)
    out["detokenized"] = llm.detokenize(tokens)
    completion = llm("Q: Name the planets in the solar system? A: ", max_tokens=24,
                     stop=["Q:"], echo=True, temperature=0.0)
    out["completion"] = completion
    out["streamed"] = [chunk for chunk in llm.create_completion(
        "The quick brown fox", max_tokens=12, stream=True, temperature=0.0)]
    out["chat"] = llm.create_chat_completion(
        messages=[{"role": "system", "content": "You are a helpful assistant."},
                  {"role": "user", "content": "What is 2 + 2?"}],
        max_tokens=16, temperature=0.0)
    out["chat_stream"] = list(llm.create_chat_completion(
        messages=[{"role": "user", "content": "Say hi."}], max_tokens=8, temperature=0.0,
        stream=True))
    sampled = llm("Once upon a time", max_tokens=8, temperature=0.8, top_p=0.9, top_k=40,
                  repeat_penalty=1.1, seed=7)
    out["sampled_reproducible"] = sampled["choices"][0]["text"] == llm(
        "Once upon a time", max_tokens=8, temperature=0.8, top_p=0.9, top_k=40,
        repeat_penalty=1.1, seed=7)["choices"][0]["text"]
    llm.reset()
    llm.eval(llm.tokenize(b"The sky is"))
    out["n_tokens_after_eval"] = llm.n_tokens
    return out
