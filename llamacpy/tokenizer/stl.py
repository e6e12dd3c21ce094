"""The two places where llama.cpp's results depend on libstdc++ (GCC 12) internals, reproduced:

- `unordered_map_order`: the iteration order of llama_vocab's `token_to_id` (an
  std::unordered_map<std::string, int>); its first match wins when several tokens could be the
  EOT or FIM token and the GGUF names none.
- `std_sort`: std::sort (introsort, not stable) orders equal-length special tokens in
  `cache_special_tokens`, which decides which of two overlapping special tokens is split first.
"""

from __future__ import annotations

import bisect
import math

import numpy as np

_MUL = np.uint64(0xC6A4A7935BD1E995)
_SEED = 0xC70F6907
_S47 = np.uint64(47)

# std::__detail::__prime_list of libstdc++ (64-bit), read from libstdc++.so.6.0.30 (GCC 12);
# the entries below 2**31, far more than any vocabulary needs.
_PRIMES = [
    2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89,
    97, 103, 109, 113, 127, 137, 139, 149, 157, 167, 179, 193, 199, 211, 227, 241, 257, 277,
    293, 313, 337, 359, 383, 409, 439, 467, 503, 541, 577, 619, 661, 709, 761, 823, 887, 953,
    1031, 1109, 1193, 1289, 1381, 1493, 1613, 1741, 1879, 2029, 2179, 2357, 2549, 2753, 2971,
    3209, 3469, 3739, 4027, 4349, 4703, 5087, 5503, 5953, 6427, 6949, 7517, 8123, 8783, 9497,
    10273, 11113, 12011, 12983, 14033, 15173, 16411, 17749, 19183, 20753, 22447, 24281, 26267,
    28411, 30727, 33223, 35933, 38873, 42043, 45481, 49201, 53201, 57557, 62233, 67307, 72817,
    78779, 85229, 92203, 99733, 107897, 116731, 126271, 136607, 147793, 159871, 172933, 187091,
    202409, 218971, 236897, 256279, 277261, 299951, 324503, 351061, 379787, 410857, 444487,
    480881, 520241, 562841, 608903, 658753, 712697, 771049, 834181, 902483, 976369, 1056323,
    1142821, 1236397, 1337629, 1447153, 1565659, 1693859, 1832561, 1982627, 2144977, 2320627,
    2510653, 2716249, 2938679, 3179303, 3439651, 3721303, 4026031, 4355707, 4712381, 5098259,
    5515729, 5967347, 6456007, 6984629, 7556579, 8175383, 8844859, 9569143, 10352717, 11200489,
    12117689, 13109983, 14183539, 15345007, 16601593, 17961079, 19431899, 21023161, 22744717,
    24607243, 26622317, 28802401, 31160981, 33712729, 36473443, 39460231, 42691603, 46187573,
    49969847, 54061849, 58488943, 63278561, 68460391, 74066549, 80131819, 86693767, 93793069,
    101473717, 109783337, 118773397, 128499677, 139022417, 150406843, 162723577, 176048909,
    190465427, 206062531, 222936881, 241193053, 260944219, 282312799, 305431229, 330442829,
    357502601, 386778277, 418451333, 452718089, 489790921, 529899637, 573292817, 620239453,
    671030513, 725980837, 785430967, 849749479, 919334987, 994618837, 1076067617, 1164186217,
    1259520799, 1362662261, 1474249943, 1594975441, 1725587117, 1866894511, 2019773507,
]
_FAST_BKT = (2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13)

def hash_bytes(joined: bytes, lens: np.ndarray) -> np.ndarray:
    """uint64 [len(lens)]: std::hash<std::string> (std::_Hash_bytes, 64-bit MurmurHash2 with seed
    0xc70f6907) of each key, the keys given back to back in `joined` with byte lengths `lens`."""
    lens = np.asarray(lens, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]) if len(lens) else lens
    buf = np.frombuffer(joined + bytes(8), dtype=np.uint8)
    windows = np.lib.stride_tricks.sliding_window_view(buf, 8)
    with np.errstate(over="ignore"):
        h = np.uint64(_SEED) ^ (lens.astype(np.uint64) * _MUL)
        for k in range(int(lens.max(initial=0)) // 8):
            rows = np.nonzero(lens // 8 > k)[0]
            data = windows[starts[rows] + 8 * k].copy().view("<u8")[:, 0]
            data = _shift_mix(data * _MUL) * _MUL
            h[rows] = (h[rows] ^ data) * _MUL
        rows = np.nonzero(lens % 8)[0]
        tail = windows[starts[rows] + (lens[rows] // 8) * 8].copy().view("<u8")[:, 0]
        keep = (np.uint64(1) << (8 * (lens[rows] % 8)).astype(np.uint64)) - np.uint64(1)
        h[rows] = (h[rows] ^ (tail & keep)) * _MUL
        return _shift_mix(_shift_mix(h) * _MUL)

def _shift_mix(v: np.ndarray) -> np.ndarray:
    return v ^ (v >> _S47)

def _next_bkt(n: int) -> tuple[int, int]:
    """_Prime_rehash_policy::_M_next_bkt: (bucket count, next resize) for max_load_factor 1."""
    if n < len(_FAST_BKT):
        return (1, 0) if n == 0 else (_FAST_BKT[n], _FAST_BKT[n])

    i = bisect.bisect_left(_PRIMES, n, lo=6)
    if i >= len(_PRIMES):
        raise ValueError("unordered_map emulation covers fewer than 2**31 keys")
    return _PRIMES[i], _PRIMES[i]

def _rehash_points(n: int) -> list[tuple[int, int]]:
    """(element count, new bucket count) at each rehash while inserting n keys one by one
    (_Prime_rehash_policy::_M_need_rehash)."""
    points, n_bkt, next_resize, elt = [], 1, 0, 0
    while elt < n:
        if elt + 1 > next_resize:
            min_bkts = max(elt + 1, 0 if next_resize else 11)
            if min_bkts >= n_bkt:
                n_bkt, next_resize = _next_bkt(max(math.floor(min_bkts) + 1, n_bkt * 2))
                points.append((elt, n_bkt))
            else:
                next_resize = n_bkt
        elt = max(elt + 1, min(next_resize, n))
    return points

def _first_rank(b: np.ndarray) -> np.ndarray:
    """For each element, the index where its value first appears in b."""
    _, first, inverse = np.unique(b, return_index=True, return_inverse=True)
    return first[inverse]


def _phase(order: np.ndarray, new: np.ndarray, bkt_of: np.ndarray) -> np.ndarray:
    """List order after inserting `new` (in order) into a table whose list is `order`: a node for an
    empty bucket goes to the list front, else to the front of its bucket's run."""
    old_b, new_b = bkt_of[order], bkt_of[new]
    in_old = np.isin(new_b, old_b)
    # fresh buckets: runs ordered by latest first insertion, each run newest first
    fresh = new[~in_old]
    rank = _first_rank(new_b[~in_old])
    front = fresh[np.lexsort((-np.arange(len(fresh)), -rank))]
    # old buckets keep their place; new members go before the old ones, newest first
    merged = np.concatenate([new[in_old][::-1], order])
    buckets, first = np.unique(old_b, return_index=True)
    run_pos = first[np.searchsorted(buckets, bkt_of[merged])]
    return np.concatenate([front, merged[np.argsort(run_pos, kind="stable")]])


def _rehash(order: np.ndarray, bkt_of: np.ndarray) -> np.ndarray:
    """_M_rehash_aux: buckets in reverse order of first appearance, members reversed."""
    rank = _first_rank(bkt_of[order])
    return order[np.lexsort((-np.arange(len(order)), -rank))]


def unordered_map_order(joined: bytes, lens: np.ndarray) -> np.ndarray:
    """int64 [n]: the order in which an std::unordered_map<std::string, int> filled by
    `map[key_i] = i` (i ascending) iterates its n keys (given as for hash_bytes)."""
    hashes = hash_bytes(joined, lens)
    n = len(hashes)
    order = np.zeros(0, dtype=np.int64)
    points = _rehash_points(n) + [(n, 0)]
    for (start, n_bkt), (stop, _) in zip(points, points[1:]):
        bkt_of = (hashes % np.uint64(n_bkt)).astype(np.int64)
        order = _phase(_rehash(order, bkt_of), np.arange(start, stop), bkt_of)
    return order

def std_sort(items: list, key: list) -> list:
    """std::sort(items) with comparator `key[a] > key[b]` (descending), reproducing libstdc++'s
    introsort exactly, so that equal keys end in the same (unspecified) order as in llama.cpp."""
    a = list(items)
    n = len(a)
    if n > 1:
        _introsort_loop(a, 0, n, 2 * (n.bit_length() - 1), key)
        _final_insertion_sort(a, 0, n, key)
    return a

def _less(key, x, y) -> bool:
    return key[x] > key[y]

def _introsort_loop(a, first, last, depth, key) -> None:
    while last - first > 16:
        if depth == 0:
            _heap_sort(a, first, last, key)
            return
        depth -= 1
        cut = _partition_pivot(a, first, last, key)
        _introsort_loop(a, cut, last, depth, key)
        last = cut

def _partition_pivot(a, first, last, key) -> int:
    mid = first + (last - first) // 2
    _move_median_to_first(a, first, first + 1, mid, last - 1, key)
    lo, hi, pivot = first + 1, last, key[a[first]]
    while True:
        while key[a[lo]] > pivot:
            lo += 1
        hi -= 1
        while pivot > key[a[hi]]:
            hi -= 1
        if not lo < hi:
            return lo
        a[lo], a[hi] = a[hi], a[lo]
        lo += 1

def _move_median_to_first(a, result, x, y, z, key) -> None:
    kx, ky, kz = key[a[x]], key[a[y]], key[a[z]]
    if kx > ky:
        pick = y if ky > kz else z if kx > kz else x
    else:
        pick = x if kx > kz else z if ky > kz else y
    a[result], a[pick] = a[pick], a[result]

def _final_insertion_sort(a, first, last, key) -> None:
    if last - first > 16:
        _insertion_sort(a, first, first + 16, key)
        for i in range(first + 16, last):
            _linear_insert(a, i, key)
    else:
        _insertion_sort(a, first, last, key)

def _insertion_sort(a, first, last, key) -> None:
    for i in range(first + 1, last):
        if key[a[i]] > key[a[first]]:
            val = a[i]
            a[first + 1 : i + 1] = a[first:i]
            a[first] = val
        else:
            _linear_insert(a, i, key)

def _linear_insert(a, last, key) -> None:
    val, kv = a[last], key[a[last]]
    j = last - 1
    while kv > key[a[j]]:
        a[j + 1] = a[j]
        j -= 1
    a[j + 1] = val

def _heap_sort(a, first, last, key) -> None:
    # std::__partial_sort(first, last, last): make_heap, then sort_heap
    n = last - first
    for parent in range((n - 2) // 2, -1, -1):
        _adjust_heap(a, first, parent, n, a[first + parent], key)
    while last - first > 1:
        last -= 1
        val = a[last]
        a[last] = a[first]
        _adjust_heap(a, first, 0, last - first, val, key)

def _adjust_heap(a, first, hole, n, val, key) -> None:
    top, child = hole, hole
    while child < (n - 1) // 2:
        child = 2 * (child + 1)
        if key[a[first + child]] > key[a[first + child - 1]]:
            child -= 1
        a[first + hole] = a[first + child]
        hole = child
    if n % 2 == 0 and child == (n - 2) // 2:
        child = 2 * (child + 1)
        a[first + hole] = a[first + child - 1]
        hole = child - 1
    parent = (hole - 1) // 2
    while hole > top and key[a[first + parent]] > key[val]:
        a[first + hole] = a[first + parent]
        hole = parent
        parent = (hole - 1) // 2
    a[first + hole] = val
