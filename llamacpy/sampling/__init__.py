"""Token sampling with llama.cpp's semantics and its default chain order.

`Sampler(SamplingParams(...))` runs logit bias, then penalties, DRY, top-n-sigma, top-k, typical,
top-p, min-p, XTC and temperature (or the order in `samplers`), then dist; mirostat 1/2 replace
the chain after temperature; temperature <= 0 is greedy (argmax, still drawing dist's random
number as llama.cpp does). Seeded runs draw llama.cpp's std::mt19937 numbers. Each sampler is
also usable alone on a `Candidates` array; `find_stop` is the server's stop-string search.
"""

from llamacpy.sampling.candidates import Candidates, softmax, sort_top
from llamacpy.sampling.params import DEFAULT_SAMPLERS, SamplingParams, sampler_names
from llamacpy.sampling.penalties import Dry, Penalties, dry_breakers
from llamacpy.sampling.rng import LLAMA_DEFAULT_SEED, MT19937
from llamacpy.sampling.sampler import Sampler, TokenProb, pre_sampling_probs
from llamacpy.sampling.samplers import (
    greedy,
    logit_bias,
    min_p,
    temp,
    temp_ext,
    top_k,
    top_n_sigma,
    top_p,
    typical,
)
from llamacpy.sampling.stochastic import Dist, Mirostat, MirostatV2, Xtc
from llamacpy.sampling.stop import find_partial_stop, find_stop

__all__ = [
    "DEFAULT_SAMPLERS",
    "LLAMA_DEFAULT_SEED",
    "MT19937",
    "Candidates",
    "Dist",
    "Dry",
    "Mirostat",
    "MirostatV2",
    "Penalties",
    "Sampler",
    "SamplingParams",
    "TokenProb",
    "Xtc",
    "dry_breakers",
    "find_partial_stop",
    "find_stop",
    "greedy",
    "logit_bias",
    "min_p",
    "pre_sampling_probs",
    "sampler_names",
    "softmax",
    "sort_top",
    "temp",
    "temp_ext",
    "top_k",
    "top_n_sigma",
    "top_p",
    "typical",
]
