"""SamplingParams.validate: what the sampler chain needs, refused at construction (the server's
requests and llama-cli's --samplers both go through it), never later in the engine thread."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llamacpy.sampling import Sampler, SamplingParams
from llamacpy.sampling.params import CANONICAL, NOT_IMPLEMENTED, UnsupportedSampler


@pytest.mark.parametrize("samplers", [["infill"], ["top_k", "adaptive_p"], "ki", "a"])
def test_samplers_not_implemented_are_refused(samplers):
    with pytest.raises(UnsupportedSampler, match="not implemented"):
        SamplingParams(samplers=samplers)
    assert issubclass(UnsupportedSampler, ValueError)


def test_every_other_sampler_builds():
    """NOT_IMPLEMENTED is exactly what Sampler._make cannot build."""
    for name in CANONICAL:
        if name in NOT_IMPLEMENTED:
            continue
        sampler = Sampler(SamplingParams(samplers=[name]), n_vocab=8, pieces=[b"a"] * 8,
                          tokenize=lambda text: [0])
        logits = np.linspace(-1, 1, 8, dtype=np.float32)
        assert 0 <= sampler.sample(logits) < 8
    for name in NOT_IMPLEMENTED:
        params = SamplingParams()
        params.samplers = [name]  # past validation on purpose
        with pytest.raises(NotImplementedError):
            Sampler(params)


@pytest.mark.parametrize("samplers", [[1, 2], [None], ["top_k", 3.5]])
def test_sampler_names_must_be_strings(samplers):
    with pytest.raises(ValueError, match="must be strings"):
        SamplingParams(samplers=samplers)


@pytest.mark.parametrize("field, value", [
    ("temperature", math.nan), ("temperature", math.inf), ("top_p", -math.inf),
    ("min_p", "0.1"), ("typical_p", None), ("dynatemp_range", True), ("mirostat_tau", 10**400),
    ("xtc_probability", [0.5]), ("top_k", 1.5), ("top_k", "40"), ("repeat_last_n", True),
    ("seed", "x"), ("min_keep", -1), ("n_probs", -3), ("mirostat", 3),
    ("repeat_penalty", 0.0), ("dry_sequence_breakers", ["\n", 5]),
    ("logit_bias", {1: math.nan}), ("logit_bias", {"1": 1.0}),
])
def test_bad_values_are_refused(field, value):
    with pytest.raises(ValueError):
        SamplingParams(**{field: value})


def test_good_values_pass():
    p = SamplingParams(temperature=np.float32(0.5), top_k=np.int32(5), top_p=1, seed=-1,
                       logit_bias={3: -math.inf, 4: 2.0}, samplers=["top_k", "temperature"])
    assert p.seed == 0xFFFFFFFF and p.samplers == ["top_k", "temperature"]
    # the request path: from_dict over the server's defaults validates the same way
    with pytest.raises(UnsupportedSampler):
        SamplingParams.from_dict({"samplers": ["infill"]}, base=p)
    with pytest.raises(ValueError):
        SamplingParams.from_dict({"temperature": math.nan}, base=p)
