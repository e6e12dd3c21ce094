"""SamplingParams: llama.cpp's common_params_sampling under the server's request field names."""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from llamacpy.sampling.rng import LLAMA_DEFAULT_SEED

# common_params_sampling::samplers, the default chain (dist, or mirostat, comes after it)
DEFAULT_SAMPLERS = ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc",
                    "temperature")  # fmt: skip
CANONICAL = ("dry", "top_k", "top_p", "top_n_sigma", "typ_p", "min_p", "temperature", "xtc",
             "infill", "penalties", "adaptive_p")  # fmt: skip
# llama.cpp samplers that sampler.py does not build yet: refused by validate()
NOT_IMPLEMENTED = ("infill", "adaptive_p")
# GGUF keys a model may set its recommended sampling with (LLM_KV_GENERAL_SAMPLING_*)
GGUF_SAMPLING_SEQUENCE = "general.sampling.sequence"  # sampler names joined by ';'
GGUF_SAMPLING_KEYS = {
    "general.sampling.top_k": "top_k",
    "general.sampling.top_p": "top_p",
    "general.sampling.min_p": "min_p",
    "general.sampling.xtc_probability": "xtc_probability",
    "general.sampling.xtc_threshold": "xtc_threshold",
    "general.sampling.temp": "temperature",
    "general.sampling.penalty_last_n": "repeat_last_n",
    "general.sampling.penalty_repeat": "repeat_penalty",
    "general.sampling.mirostat": "mirostat",
    "general.sampling.mirostat_tau": "mirostat_tau",
    "general.sampling.mirostat_eta": "mirostat_eta",
}
SAMPLER_CHARS = {
    "d": "dry",
    "k": "top_k",
    "y": "typ_p",
    "p": "top_p",
    "s": "top_n_sigma",
    "m": "min_p",
    "t": "temperature",
    "x": "xtc",
    "i": "infill",
    "e": "penalties",
    "a": "adaptive_p",
}


def _sampler_aliases() -> dict[str, str]:
    """common_sampler_types_from_names' table: kebab-case, no-dash and a few misc aliases."""
    table = {name: name for name in CANONICAL}
    for name in CANONICAL:
        table.setdefault(name.replace("_", "-"), name)
        table.setdefault(name.replace("_", ""), name)
    table.update(nucleus="top_p", temp="temperature", typ="typ_p")
    return table


SAMPLER_ALIASES = _sampler_aliases()


def sampler_names(spec: str | Iterable[str]) -> list[str]:
    """Canonical sampler names from a list of names/aliases or a string of sampler chars;
    unknown entries are skipped with a warning, as llama.cpp does."""
    table, items = (SAMPLER_CHARS, spec) if isinstance(spec, str) else (SAMPLER_ALIASES, spec)
    out = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"sampler names must be strings, got {item!r}")
        key = item if isinstance(spec, str) else item.lower()
        if key in table:
            out.append(table[key])
        else:
            warnings.warn(f"unable to match sampler {item!r}", stacklevel=2)
    return out


@dataclass
class SamplingParams:
    """Sampling settings with llama.cpp's defaults (common_params_sampling).

    Names are the server's; `temp`, `typ_p`, `penalty_*` and `logprobs` are accepted by
    `from_dict`. logit_bias maps token -> bias (-inf, or False in a request, bans the token).
    seed LLAMA_DEFAULT_SEED (0xFFFFFFFF) means a random seed.
    """

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = 64
    dry_sequence_breakers: list[str] = field(default_factory=lambda: ["\n", ":", '"', "*"])
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    top_n_sigma: float = -1.0
    seed: int = LLAMA_DEFAULT_SEED
    logit_bias: dict[int, float] = field(default_factory=dict)
    n_probs: int = 0
    post_sampling_probs: bool = False
    min_keep: int = 0
    n_prev: int = 64
    samplers: list[str] = field(default_factory=lambda: list(DEFAULT_SAMPLERS))

    @property
    def temp(self) -> float:
        return self.temperature

    @temp.setter
    def temp(self, value: float) -> None:
        self.temperature = value

    def __post_init__(self) -> None:
        self.samplers = sampler_names(self.samplers)
        self.seed = int(self.seed) & 0xFFFFFFFF  # -1 in a request is LLAMA_DEFAULT_SEED
        self.validate()

    def validate(self) -> None:
        """common_sampler_init's checks, and what the chain needs to run: real numbers (finite,
        but logit biases may be -inf), integers, and samplers that sampler.py implements."""
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "float" and not _real(value):
                raise ValueError(f"{f.name} must be a finite number, got {value!r}")
            if f.type == "int" and not _integer(value):
                raise ValueError(f"{f.name} must be an integer, got {value!r}")
        missing = [name for name in self.samplers if name in NOT_IMPLEMENTED]
        if missing:
            raise UnsupportedSampler(f"sampler {missing[0]!r} is not implemented in llamacpy")
        if not all(isinstance(b, str) for b in self.dry_sequence_breakers):
            raise ValueError("dry_sequence_breakers must be strings")
        if not all(_integer(t) and isinstance(b, numbers.Real) and not math.isnan(b)
                   for t, b in self.logit_bias.items()):
            raise ValueError("logit_bias maps token ids to numbers")
        if self.min_keep < 0 or self.n_probs < 0:
            raise ValueError("min_keep and n_probs must not be negative")
        r = self.repeat_penalty
        if not math.isfinite(r) or r <= 0 or not math.isfinite(1.0 / r):
            raise ValueError("repeat_penalty must be finite and greater than 0")
        if not math.isfinite(self.frequency_penalty):
            raise ValueError("frequency_penalty must be finite")
        if not math.isfinite(self.presence_penalty):
            raise ValueError("presence_penalty must be finite")
        if self.mirostat not in (0, 1, 2):
            raise ValueError(f"unknown mirostat version {self.mirostat}")

    @classmethod
    def from_gguf(cls, metadata: Any, **overrides: Any) -> SamplingParams:
        """Defaults, then the model's general.sampling.* metadata, then overrides: the order of
        common_init_sampler_from_model (metadata: anything with .get(key), e.g. a GGUFFile)."""
        values = {f: metadata.get(k) for k, f in GGUF_SAMPLING_KEYS.items()}
        values = {f: v for f, v in values.items() if v is not None}
        sequence = metadata.get(GGUF_SAMPLING_SEQUENCE)
        if sequence:
            values["samplers"] = sequence.split(";")
        return cls(**{**values, **overrides})

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], base: SamplingParams | None = None
    ) -> SamplingParams:
        """From a server request body (or llama-cli style keys) over base (the server's own
        settings; default: llama.cpp's defaults). Unknown keys are ignored."""
        known = {f.name for f in fields(cls)}
        kwargs = {}
        for key, value in data.items():
            name = _FIELD_ALIASES.get(key, key)
            if name in known and (key == name or name not in data):  # the canonical key wins
                kwargs[name] = value
        if "logit_bias" in kwargs:
            kwargs["logit_bias"] = parse_logit_bias(kwargs["logit_bias"])
        base = base or cls()
        if kwargs.get("dry_base", 1.0) < 1.0:
            kwargs["dry_base"] = base.dry_base  # the server keeps its own for dry_base < 1
        return replace(base, **kwargs)


class UnsupportedSampler(ValueError):
    """A llama.cpp sampler name that llamacpy knows but does not implement (NOT_IMPLEMENTED)."""


def _real(value: Any) -> bool:
    """A finite real number (numpy scalars too; not a bool)."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _integer(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


_FIELD_ALIASES = {
    "temp": "temperature",
    "typ_p": "typical_p",
    "penalty_last_n": "repeat_last_n",
    "penalty_repeat": "repeat_penalty",
    "penalty_freq": "frequency_penalty",
    "penalty_present": "presence_penalty",
    "logprobs": "n_probs",
}


def parse_logit_bias(value: Any) -> dict[int, float]:
    """The server's logit_bias forms with integer tokens: {"15043": 1.0}, [[15043, -1.0]], and
    False as a bias to ban. String keys (text to tokenize) need a tokenizer: the caller's job."""
    items = value.items() if isinstance(value, Mapping) else value
    out: dict[int, float] = {}
    for item in items:
        token, bias = item
        if isinstance(bias, bool):
            if bias:
                continue
            bias = -math.inf
        out[int(token)] = out.get(int(token), 0.0) + float(bias)  # repeated tokens add up
    return out
