"""llama.cpp's samplers through llama-cpp-python's ctypes API, on numpy candidate arrays.

Import only where `llama_cpp` is importable (tests mark themselves `llamacpp` and skip otherwise).
"""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np

# llama_token_data: {int32 id; float logit; float p}
TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])


class CSampler:
    """Owns one llama_sampler*; frees it when garbage-collected."""

    def __init__(self, ptr) -> None:
        assert ptr, "llama_sampler_init_* returned NULL"
        self.ptr = ptr

    def __del__(self) -> None:
        llama_cpp.llama_sampler_free(self.ptr)

    def accept(self, token: int) -> None:
        llama_cpp.llama_sampler_accept(self.ptr, int(token))

    def reset(self) -> None:
        llama_cpp.llama_sampler_reset(self.ptr)

    def apply(self, ids, logits, probs=None, is_sorted: bool = False) -> dict:
        """llama_sampler_apply on a fresh llama_token_data_array; returns what survived."""
        buf = np.zeros(len(ids), dtype=TOKEN_DATA)
        buf["id"], buf["logit"] = ids, logits
        if probs is not None:
            buf["p"] = probs
        base = buf.ctypes.data
        cur = llama_cpp.llama_token_data_array(
            ctypes.cast(base, llama_cpp.llama_token_data_p), len(ids), -1, is_sorted
        )
        llama_cpp.llama_sampler_apply(self.ptr, ctypes.byref(cur))
        # XTC advances the data pointer, so read from wherever it now points
        start = (ctypes.cast(cur.data, ctypes.c_void_p).value - base) // TOKEN_DATA.itemsize
        out = buf[start : start + cur.size]
        return {
            "ids": out["id"].copy(),
            "logits": out["logit"].copy(),
            "probs": out["p"].copy(),
            "selected": int(cur.selected),
            "sorted": bool(cur.sorted),
        }


def chain(*samplers: CSampler) -> CSampler:
    """llama_sampler_chain_init + chain_add; the chain takes ownership of the parts."""
    params = llama_cpp.llama_sampler_chain_default_params()
    params.no_perf = True
    ptr = llama_cpp.llama_sampler_chain_init(params)
    for s in samplers:
        llama_cpp.llama_sampler_chain_add(ptr, s.ptr)
        s.ptr = None  # owned by the chain now
    return CSampler(ptr)


def logit_bias(n_vocab: int, bias: list[tuple[int, float]]) -> CSampler:
    arr = (llama_cpp.llama_logit_bias * len(bias))(
        *[llama_cpp.llama_logit_bias(t, b) for t, b in bias]
    )
    return CSampler(llama_cpp.llama_sampler_init_logit_bias(n_vocab, len(bias), arr))


def dry(
    vocab, multiplier: float, base: float, allowed: int, last_n: int, breakers: list[str]
) -> CSampler:
    arr = (ctypes.c_char_p * max(1, len(breakers)))(*[b.encode() for b in breakers])
    return CSampler(
        llama_cpp.llama_sampler_init_dry(
            vocab, multiplier, base, allowed, last_n, arr, len(breakers)
        )
    )


def make(name: str, *args) -> CSampler:
    """CSampler from llama_sampler_init_<name>(*args), e.g. make("top_k", 40)."""
    return CSampler(getattr(llama_cpp, f"llama_sampler_init_{name}")(*args))


# llama_sampler_init_* that also take n_vocab first
_WITH_N_VOCAB = {"penalties", "mirostat"}


def build_ref(case) -> CSampler:
    """llama.cpp's sampler for a tests/sampling/cases.py Case (kwargs are in init order)."""
    if case.sampler == "logit_bias":
        return logit_bias(case.n_vocab, case.kwargs["bias"])
    args = list(case.kwargs.values())
    if case.sampler in _WITH_N_VOCAB:
        args.insert(0, case.n_vocab)
    return make(case.sampler, *args)


def run_ref(case, sampler: CSampler | None = None) -> list[dict]:
    sampler = sampler or build_ref(case)
    for token in case.history:
        sampler.accept(token)
    return [
        sampler.apply(ids, logits, None, case.is_sorted)
        for ids, logits in zip(case.ids, case.logits)
    ]


def chain_from_params(params, n_vocab: int, vocab=None, suppress=()) -> CSampler:
    """common_sampler_init's chain for SamplingParams (without grammar / reasoning budget)."""
    p, keep = params, params.min_keep
    bias = list(p.logit_bias.items()) + [(t, -float("inf")) for t in suppress]
    parts = [logit_bias(n_vocab, bias)] if bias else []
    if p.mirostat:
        parts.append(make("temp", p.temperature))
        parts.append(
            make("mirostat", n_vocab, p.seed, p.mirostat_tau, p.mirostat_eta, 100)
            if p.mirostat == 1
            else make("mirostat_v2", p.seed, p.mirostat_tau, p.mirostat_eta)
        )
        return chain(*parts)
    build = {
        "penalties": lambda: make(
            "penalties",
            n_vocab,
            p.repeat_last_n,
            p.repeat_penalty,
            p.frequency_penalty,
            p.presence_penalty,
        ),
        "dry": lambda: dry(
            vocab,
            p.dry_multiplier,
            p.dry_base,
            p.dry_allowed_length,
            p.dry_penalty_last_n,
            p.dry_sequence_breakers,
        ),
        "top_n_sigma": lambda: make("top_n_sigma", p.top_n_sigma),
        "top_k": lambda: make("top_k", p.top_k),
        "typ_p": lambda: make("typical", p.typical_p, keep),
        "top_p": lambda: make("top_p", p.top_p, keep),
        "min_p": lambda: make("min_p", p.min_p, keep),
        "xtc": lambda: make("xtc", p.xtc_probability, p.xtc_threshold, keep, p.seed),
        "temperature": lambda: make(
            "temp_ext", p.temperature, p.dynatemp_range, p.dynatemp_exponent
        ),
    }
    parts += [build[name]() for name in p.samplers]
    return chain(*parts, make("dist", p.seed))


class Vocab:
    """A model's llama_vocab loaded vocab_only, with the piece table and tokenizer DRY needs."""

    def __init__(self, path) -> None:
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        params.use_extra_bufts = False  # the AMX/repack path crashes here
        self.model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        assert self.model, f"could not load {path}"
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)

    def __del__(self) -> None:
        llama_cpp.llama_model_free(self.model)

    def piece(self, token: int) -> bytes:
        """vocab.detokenize({token}, special=true), as get_overlapping_token_sequences reads."""
        buf = ctypes.create_string_buffer(256)
        tokens = (llama_cpp.llama_token * 1)(token)
        n = llama_cpp.llama_detokenize(self.vocab, tokens, 1, buf, 256, False, True)
        assert n >= 0, f"piece of {token} longer than 256 bytes"
        return buf.raw[:n]

    def pieces(self) -> list[bytes]:
        return [self.piece(t) for t in range(self.n_vocab)]

    def tokenize(self, text: bytes, add_special: bool = False) -> list[int]:
        out = (llama_cpp.llama_token * (len(text) + 8))()
        n = llama_cpp.llama_tokenize(self.vocab, text, len(text), out, len(out), add_special, False)
        assert n >= 0
        return list(out[:n])
