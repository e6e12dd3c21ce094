"""The bigram-merge loops shared by SPM and BPE (llm_tokenizer_spm_session::tokenize and
llm_tokenizer_bpe_session::tokenize).

Both repeatedly merge the best adjacent pair (SPM: highest token score; BPE: lowest merge rank),
the leftmost one on ties, until no pair qualifies. A list scan does this for short words; long
ones use a heap with llama.cpp's lazy invalidation, which gives the same result.
"""

from __future__ import annotations

import heapq

_HEAP_FROM = 48  # symbols; below this the O(n^2) scan is faster in Python
_NONE = float("inf")


def merge_by_score(syms: list, ids: dict, scores: list[float]) -> list:
    """SPM: merge while some adjacent pair forms a token (ids: text -> id); best token score
    first, then leftmost."""
    get, none = ids.get, -_NONE

    def score(text) -> float:
        tid = get(text)
        return none if tid is None else scores[tid]

    if len(syms) >= _HEAP_FROM:
        return _heap_merge(syms, lambda a, b: _neg(score(a + b)), lambda a, b, t: True)
    pri = [score(syms[i] + syms[i + 1]) for i in range(len(syms) - 1)]
    while pri:
        best = max(pri)
        if best == none:
            break
        i = pri.index(best)
        syms[i] += syms.pop(i + 1)
        del pri[i]
        if i < len(pri):
            pri[i] = score(syms[i] + syms[i + 1])
        if i:
            pri[i - 1] = score(syms[i - 1] + syms[i])
    return syms


def _neg(score: float) -> float | None:
    return None if score == -_NONE else -score


def merge_by_rank(syms: list[str], ranks: dict[str, int]) -> list[str]:
    """BPE: merge while some adjacent pair has a merge rank; lowest rank first, then leftmost."""
    if len(syms) >= _HEAP_FROM:
        return _heap_merge(syms, lambda a, b: ranks.get(a + " " + b), lambda a, b, t: a + b == t)
    get = ranks.get
    pri = [get(syms[i] + " " + syms[i + 1], _NONE) for i in range(len(syms) - 1)]
    while pri:
        best = min(pri)
        if best == _NONE:
            break
        i = pri.index(best)
        syms[i] += syms.pop(i + 1)
        del pri[i]
        if i < len(pri):
            pri[i] = get(syms[i] + " " + syms[i + 1], _NONE)
        if i:
            pri[i - 1] = get(syms[i - 1] + " " + syms[i], _NONE)
    return syms


def _heap_merge(syms: list[str], priority, still_valid) -> list[str]:
    # llama.cpp's work queue: (priority, left) ordered; stale entries are skipped when popped
    n = len(syms)
    nxt, prv = list(range(1, n + 1)), list(range(-1, n - 1))
    nxt[-1] = -1
    heap: list = []

    def push(left: int, right: int) -> None:
        if left >= 0 and right >= 0:
            p = priority(syms[left], syms[right])
            if p is not None:
                heapq.heappush(heap, (p, left, right, syms[left] + syms[right]))

    for i in range(n - 1):
        push(i, i + 1)
    while heap:
        _, left, right, text = heapq.heappop(heap)
        a, b = syms[left], syms[right]
        if not a or not b or len(a) + len(b) != len(text) or not still_valid(a, b, text):
            continue
        syms[left], syms[right] = text, ""
        nxt[left] = nxt[right]
        if nxt[right] >= 0:
            prv[nxt[right]] = left
        push(prv[left], left)
        push(left, nxt[left])
    return [s for s in syms if s]
