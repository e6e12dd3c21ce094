"""std::mt19937 with libstdc++'s distributions, so seeded runs draw what llama.cpp draws.

numpy's legacy MT19937 seeding is the reference `init_genrand`, the same as `std::mt19937(seed)`;
the distributions below follow libstdc++'s `generate_canonical` and `discrete_distribution`.
"""

from __future__ import annotations

import secrets

import numpy as np

LLAMA_DEFAULT_SEED = 0xFFFFFFFF  # "pick a random seed"
_TWO_32 = 4294967296.0
_ONE_BELOW_F32 = np.nextafter(np.float32(1), np.float32(0))
_ONE_BELOW_F64 = float(np.nextafter(1.0, 0.0))


def get_rng_seed(seed: int) -> int:
    """get_rng_seed (llama-sampler.cpp): LLAMA_DEFAULT_SEED means a fresh random seed."""
    if seed == LLAMA_DEFAULT_SEED:
        return secrets.randbits(32)
    return seed & 0xFFFFFFFF


class MT19937:
    """std::mt19937 seeded like llama.cpp's samplers; `seed_cur` is the seed actually used."""

    def __init__(self, seed: int = LLAMA_DEFAULT_SEED) -> None:
        self.seed = seed
        self.reset()

    def reset(self) -> None:
        """The samplers' reset: re-seed, drawing a new random seed for LLAMA_DEFAULT_SEED."""
        self.seed_cur = get_rng_seed(self.seed)
        state = np.random.RandomState(self.seed_cur).get_state(legacy=False)
        self._gen = np.random.MT19937()
        self._gen.state = state

    def raw(self, n: int) -> np.ndarray:
        """n raw 32-bit outputs, as uint64."""
        return self._gen.random_raw(n)

    def uniform_double(self) -> float:
        """std::uniform_real_distribution<double>(0, 1): generate_canonical<double, 53> (2 draws)."""
        lo, hi = self._gen.random_raw(2)
        value = (float(lo) + float(hi) * _TWO_32) / (_TWO_32 * _TWO_32)
        return value if value < 1.0 else _ONE_BELOW_F64

    def uniform_float(self) -> np.float32:
        """std::uniform_real_distribution<float>(0, 1): generate_canonical<float, 24> (1 draw)."""
        value = np.float32(self._gen.random_raw()) / np.float32(_TWO_32)
        return value if value < 1 else _ONE_BELOW_F32

    def discrete(self, weights: np.ndarray) -> int:
        """std::discrete_distribution<int>(weights)(rng): cumulative double probabilities with the
        last forced to 1, then lower_bound; fewer than 2 weights return 0 without drawing."""
        if len(weights) < 2:
            return 0
        w = weights.astype(np.float64)
        cp = np.cumsum(w / np.cumsum(w)[-1])
        cp[-1] = 1.0
        return int(np.searchsorted(cp, self.uniform_double(), side="left"))
