"""llama-perplexity: perplexity and KL divergence over a text, as llama.cpp's tools/perplexity.

    llama-perplexity -m MODEL -f TEXT [-c 512] [-b 2048] [--chunks N] [--ppl-output-type 0|1]
    llama-perplexity -m BASE -f TEXT --kl-divergence-base FILE        (also writes FILE)
    llama-perplexity -m MODEL --kl-divergence-base FILE --kl-divergence

The text is tokenized whole (BOS as the model adds it) and cut into chunks of -c tokens; the
first token of each chunk becomes BOS when the model adds one; each chunk is decoded alone in
batches of -b tokens (-b // -c chunks side by side as sequences) and only its second half is
scored. The base file and every printed line follow perplexity.cpp (see `write_header`).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterator

import numpy as np

from ..engine.context import Context, ubatch_bounds
from ..format import open_gguf
from ..hub import resolve_model
from ..memory.batch import Batch, concat
from ..models import load_model
from ..tokenizer import Tokenizer
from .args import LOG_INFO, cache_types, fail, parse_args, verbosity

TOOL = "llama-perplexity"
DEFAULT_CTX = 512  # llama_perplexity sets params.n_ctx = 512 before parsing
MAGIC = b"_logits_"
LOG_WARN = 2  # -lv 2: warnings and errors
ROWS = 16  # rows of logits scored at once: bounds the [rows, n_vocab] temporaries
# perplexity.cpp's other tasks and its strided mode (whose window depends on llama.cpp padding
# the context to 256 cells) are not here
UNSUPPORTED = ("--hellaswag", "--hellaswag-tasks", "--winogrande", "--winogrande-tasks",
               "--multiple-choice", "--multiple-choice-tasks", "--ppl-stride")


class ToolError(Exception):
    """A run that cannot go on: its message is printed as llama.cpp words it, exit status 1."""


# -- how the work is split (llama_perplexity's n_parallel, perplexity()'s batches) -------------

@dataclass(frozen=True)
class Plan:
    n_ctx: int  # tokens per chunk
    n_batch: int  # tokens per decode of one sequence
    n_seq: int  # chunks decoded side by side
    n_chunk: int

    @property
    def first(self) -> int:
        return self.n_ctx // 2  # the first position whose logits are scored

    @property
    def n_scored(self) -> int:
        return self.n_ctx - 1 - self.first  # tokens scored per chunk

    @property
    def num_batches(self) -> int:
        return (self.n_ctx + self.n_batch - 1) // self.n_batch


def parallel(n_ctx: int, n_batch: int) -> tuple[int, int]:
    """(n_parallel, n_batch) as llama_perplexity sets them: -b // -c sequences share a context
    of n_parallel * -c cells, and -b is capped at that."""
    n_parallel = max(1, n_batch // n_ctx)
    return n_parallel, min(n_batch, n_parallel * n_ctx)


def chunk_batch(tokens: np.ndarray, plan: Plan, i: int, n_seq_batch: int, j: int,
                bos: int | None) -> Batch:
    """Batch j of chunks i.. (perplexity()'s inner loop): sequence s holds chunk i + s at
    positions j * n_batch..; BOS replaces each chunk's first token; logits from `first` on."""
    size = min(plan.n_ctx - j * plan.n_batch, plan.n_batch)
    parts = []
    for s in range(n_seq_batch):
        start = (i + s) * plan.n_ctx + j * plan.n_batch
        toks = tokens[start:start + size].copy()
        if bos is not None and j == 0:
            toks[0] = bos
        b = Batch.from_tokens(toks, pos0=j * plan.n_batch, seq=s, all_logits=True)
        b.logits = b.positions >= plan.first
        parts.append(b)
    return concat(parts)


@dataclass
class Perf:
    """What llama_perf_context_print reports (times in seconds)."""

    t_start: float = field(default_factory=time.perf_counter)
    t_load: float = 0.0
    t_eval: float = 0.0
    n_eval: int = 0


def evaluate(ctx: Context, tokens: np.ndarray, plan: Plan, i: int, n_seq_batch: int,
             bos: int | None, perf: Perf) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Decode chunks i..i + n_seq_batch - 1 on a cleared cache; yields (seq, target token
    indices into `tokens`, logits float32 [rows, n_vocab]) for the rows that are scored, one
    ubatch at a time (never a chunk's worth of logits at once)."""
    ctx.cache.clear()
    for j in range(plan.num_batches):
        batch = chunk_batch(tokens, plan, i, n_seq_batch, j, bos)
        for start, stop in ubatch_bounds(batch, ctx.n_ubatch):
            part = batch.slice(start, stop)
            t0 = time.perf_counter()
            logits = ctx.decode(part)
            perf.t_eval += time.perf_counter() - t0
            perf.n_eval += len(part)
            seqs, pos = part.seq_ids[part.logits], part.positions[part.logits]
            for s in np.unique(seqs):
                # a sequence's rows are one run (batches are sequence-major): a view of them,
                # less the last position, which predicts nothing
                rows = np.flatnonzero((seqs == s) & (pos <= plan.n_ctx - 2))
                if len(rows):
                    run = slice(rows[0], rows[-1] + 1)
                    yield int(s), (i + s) * plan.n_ctx + pos[run] + 1, logits[run]


# -- scoring: numpy twins of perplexity.cpp's log_softmax overloads ----------------------------

def _max_and_sum_exp(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row maxima (float) and sum of expf(logit - max) accumulated in double."""
    mx = logits.max(axis=1)
    return mx, np.exp(logits - mx[:, None]).sum(axis=1, dtype=np.float64)


def token_nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """-log p(target) float64 [rows] (log_softmax(n_vocab, logits, tok): float difference,
    double log of the double sum)."""
    out = np.empty(len(logits))
    for a in range(0, len(logits), ROWS):
        block, tgt = logits[a:a + ROWS], targets[a:a + ROWS]
        mx, sum_exp = _max_and_sum_exp(block)
        out[a:a + ROWS] = -((block[np.arange(len(block)), tgt] - mx) - np.log(sum_exp))
    return out


def packed_width(n_vocab: int) -> int:
    """uint16 words per scored token in the base file: scale and min (two floats), the
    n_vocab quantized log-probs, padded to an even count (perplexity.cpp's nv)."""
    return 2 * ((n_vocab + 1) // 2) + 4


def pack_log_probs(logits: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(-log p(target) float32 as double [rows], packed uint16 [rows, nv]): the base file's rows
    (log_softmax(n_vocab, logits, log_prob, tok): log-probs within 16 of the top one quantized
    to 16 bits above their minimum, nearest_int rounding half to even)."""
    n, n_vocab = logits.shape
    nll = np.empty(n)
    packed = np.zeros((n, packed_width(n_vocab)), np.uint16)
    for a in range(0, n, ROWS):
        block, tgt = logits[a:a + ROWS], targets[a:a + ROWS]
        mx, sum_exp = _max_and_sum_exp(block)
        mn = np.maximum(block.min(axis=1), mx - np.float32(16))
        lse = np.log(sum_exp).astype(np.float32)
        min_log_prob = mn - mx - lse
        scale = (mx - mn) / np.float32(65535)
        with np.errstate(divide="ignore"):
            inv = np.where(scale != 0, np.float32(1) / scale, np.float32(0))
        q = np.rint(inv[:, None] * (block - mn[:, None])).astype(np.int32)
        q[block <= mn[:, None]] = 0
        packed[a:a + ROWS, :4] = np.stack([scale, min_log_prob], 1).astype("<f4").view("<u2")
        packed[a:a + ROWS, 4:4 + n_vocab] = q.astype(np.uint16)
        nll[a:a + ROWS] = (mx + lse) - block[np.arange(len(block)), tgt]
    return nll, packed


@dataclass
class KldSums:
    """kl_divergence_result: running sums over scored tokens."""

    sum_nll: float = 0.0
    sum_nll2: float = 0.0
    sum_nll_base: float = 0.0
    sum_nll_base2: float = 0.0
    sum_nll_nll_base: float = 0.0
    sum_kld: float = 0.0
    sum_kld2: float = 0.0
    sum_p_diff: float = 0.0
    sum_p_diff2: float = 0.0
    sum_p_diff4: float = 0.0
    max_p_diff: float = 0.0
    n_same_top: int = 0
    count: int = 0

    def add(self, other: KldSums) -> None:
        for name in self.__dataclass_fields__:
            if name == "max_p_diff":
                self.max_p_diff = max(self.max_p_diff, other.max_p_diff)
            else:
                setattr(self, name, getattr(self, name) + getattr(other, name))


def kld_rows(logits: np.ndarray, targets: np.ndarray, base: np.ndarray,
             sums: KldSums) -> tuple[np.ndarray, np.ndarray]:
    """(KLD float32 [rows], Δp float32 [rows]) of logits against base rows uint16 [rows, nv],
    adding to `sums` (log_softmax(n_vocab, logits, base_log_prob, tok, kld): floats as there,
    the divergence summed in double over base log-probs above -16)."""
    n, n_vocab = logits.shape
    kld, p_diff = np.empty(n, np.float32), np.empty(n, np.float32)
    for a in range(0, n, ROWS):
        block, tgt = logits[a:a + ROWS], targets[a:a + ROWS]
        rows = np.arange(len(block))
        mx, sum_exp = _max_and_sum_exp(block)
        lse = np.log(sum_exp).astype(np.float32)
        head = np.ascontiguousarray(base[a:a + ROWS, :4]).view("<f4")
        scale, min_log_prob = head[:, 0], head[:, 1]
        log_base = scale[:, None] * base[a:a + ROWS, 4:4 + n_vocab] + min_log_prob[:, None]
        nll = (mx + lse) - block[rows, tgt]
        nll_base = -log_base[rows, tgt]
        terms = np.exp(log_base) * ((log_base - block) + (mx + lse)[:, None])
        k = np.where(log_base > np.float32(-16), terms, 0).sum(axis=1, dtype=np.float64)
        d = np.exp(-nll) - np.exp(-nll_base)
        kld[a:a + ROWS], p_diff[a:a + ROWS] = k, d
        nll64, base64 = nll.astype(np.float64), nll_base.astype(np.float64)
        sums.sum_nll += nll64.sum()
        sums.sum_nll2 += (nll * nll).astype(np.float64).sum()
        sums.sum_nll_base += base64.sum()
        sums.sum_nll_base2 += (nll_base * nll_base).astype(np.float64).sum()
        sums.sum_nll_nll_base += (nll * nll_base).astype(np.float64).sum()
        sums.sum_kld += k.sum()
        sums.sum_kld2 += (k * k).sum()
        d2 = (d * d).astype(np.float64)
        sums.sum_p_diff += d.astype(np.float64).sum()
        sums.sum_p_diff2 += d2.sum()
        sums.sum_p_diff4 += (d2 * d2).sum()
        sums.max_p_diff = max(sums.max_p_diff, float(np.abs(d).max()))
        sums.n_same_top += int((block.argmax(axis=1) == log_base.argmax(axis=1)).sum())
        sums.count += len(block)
    return kld, p_diff


# -- statistics (kl_divergence's lambdas), in C's IEEE arithmetic: 0/0 is nan, not an error ----

def mean_and_uncertainty(total: float, total2: float, count: int) -> tuple[float, float]:
    if count < 1:
        return 0.0, 0.0
    with np.errstate(all="ignore"):
        f = np.float64(total) / count
        df = np.float64(total2) / count - f * f
        df = np.sqrt(df / (count - 1)) if df > 0 and count > 10 else np.float64(0)
    return f, df


def covariance(total_a: float, total_b: float, total_ab: float, count: int) -> float:
    if count < 10:
        return 0.0
    var = np.float64(total_ab) / count - (np.float64(total_a) / count) * (total_b / count)
    return var / (count - 1)


def percentile(values: np.ndarray, fraction: float) -> np.float32:
    """Linear interpolation between sorted float values, in float as kl_divergence does."""
    if fraction <= 0:
        return values[0]
    if fraction >= 1:
        return values[-1]
    p = np.float32(fraction) * np.float32(len(values) - 1)
    ip = int(p)
    p -= np.float32(ip)
    return (np.float32(1) - p) * values[ip] + p * values[min(ip + 1, len(values) - 1)]


def median(values: np.ndarray) -> np.float32:
    n = len(values)
    return np.float32(0.5) * (values[n // 2] + values[n // 2 - 1]) if n % 2 == 0 else \
        values[n // 2]


def chunk_line(chunk: int, k: KldSums) -> str:
    """One row of kl_divergence's per-chunk table (running values over chunks 1..chunk)."""
    with np.errstate(all="ignore"):
        f, df = mean_and_uncertainty(k.sum_nll, k.sum_nll2, k.count)
        fb, dfb = mean_and_uncertainty(k.sum_nll_base, k.sum_nll_base2, k.count)
        cov = covariance(k.sum_nll, k.sum_nll_base, k.sum_nll_nll_base, k.count)
        ratio_unc = np.sqrt(df * df + dfb * dfb - 2.0 * cov)
        kl, dkl = mean_and_uncertainty(k.sum_kld, k.sum_kld2, k.count)
        mse, dmse = mean_and_uncertainty(k.sum_p_diff2, k.sum_p_diff4, k.count)
        rms = np.sqrt(mse)
        top = np.float64(k.n_same_top) / k.count
        dtop = np.sqrt(top * (1 - top) / np.float64(k.count - 1))
        return (f"{chunk:4d}    {np.exp(f):9.4f} ± {np.exp(f) * df:9.4f}"
                f"    {f - fb:10.5f} ± {ratio_unc:10.5f}    {kl:10.5f} ± {dkl:10.5f}"
                f"    {100 * rms:6.3f} ± {100 * (0.5 / rms * dmse):6.3f} %"
                f"    {100 * top:6.3f} ± {100 * dtop:6.3f} %")


def summary(k: KldSums, klds: np.ndarray, p_diffs: np.ndarray) -> list[str]:
    """kl_divergence's closing statistics, line for line."""
    with np.errstate(all="ignore"):
        f, df = mean_and_uncertainty(k.sum_nll, k.sum_nll2, k.count)
        fb, dfb = mean_and_uncertainty(k.sum_nll_base, k.sum_nll_base2, k.count)
        ppl, ppl_unc = np.exp(f), np.exp(f) * df
        ppl_base, ppl_base_unc = np.exp(fb), np.exp(fb) * dfb
        cov = covariance(k.sum_nll, k.sum_nll_base, k.sum_nll_nll_base, k.count)
        ratio, ratio_unc = f - fb, np.sqrt(df * df + dfb * dfb - 2.0 * cov)
        ppl_cov = ppl * ppl_base * cov
        diff_unc = np.sqrt(ppl_unc * ppl_unc + ppl_base_unc * ppl_base_unc - 2.0 * ppl_cov)
        kl, dkl = mean_and_uncertainty(k.sum_kld, k.sum_kld2, k.count)
        pd, dpd = mean_and_uncertainty(k.sum_p_diff, k.sum_p_diff2, k.count)
        mse, dmse = mean_and_uncertainty(k.sum_p_diff2, k.sum_p_diff4, k.count)
        rms = np.sqrt(mse)
        top = np.float64(k.n_same_top) / k.count
        lines = [
            "====== Perplexity statistics ======",
            f"Mean PPL(Q)                   : {ppl:10.6f} ± {ppl_unc:10.6f}",
            f"Mean PPL(base)                : {ppl_base:10.6f} ± {ppl_base_unc:10.6f}",
            f"Cor(ln(PPL(Q)), ln(PPL(base))): {100.0 * cov / (df * dfb):6.2f}%",
            f"Mean ln(PPL(Q)/PPL(base))     : {ratio:10.6f} ± {ratio_unc:10.6f}",
            f"Mean PPL(Q)/PPL(base)         : {np.exp(ratio):10.6f} ± "
            f"{np.exp(ratio) * ratio_unc:10.6f}",
            f"Mean PPL(Q)-PPL(base)         : {ppl - ppl_base:10.6f} ± {diff_unc:10.6f}",
            "",
            "====== KL divergence statistics ======",
            f"Mean    KLD: {kl:10.6f} ± {dkl:10.6f}",
            f"Maximum KLD: {klds[-1]:10.6f}",
            *(f"{name}   KLD: {percentile(klds, q):10.6f}" for name, q in
              (("99.9%", .999), ("99.0%", .99), ("95.0%", .95), ("90.0%", .9))),
            f"Median  KLD: {median(klds):10.6f}",
            *(f"{name}   KLD: {percentile(klds, q):10.6f}" for name, q in
              (("10.0%", .1), (" 5.0%", .05), (" 1.0%", .01), (" 0.1%", .001))),
            f"Minimum KLD: {klds[0]:10.6f}",
            "",
            "====== Token probability statistics ======",
            f"Mean    Δp: {100.0 * pd:6.3f} ± {100.0 * dpd:5.3f} %",
            f"Maximum Δp: {100.0 * p_diffs[-1]:6.3f}%",
            *(f"{name}   Δp: {100.0 * percentile(p_diffs, q):6.3f}%" for name, q in
              (("99.9%", .999), ("99.0%", .99), ("95.0%", .95), ("90.0%", .9), ("75.0%", .75))),
            f"Median  Δp: {100.0 * median(p_diffs):6.3f}%",
            *(f"{name}   Δp: {100.0 * percentile(p_diffs, q):6.3f}%" for name, q in
              (("25.0%", .25), ("10.0%", .1), (" 5.0%", .05), (" 1.0%", .01), (" 0.1%", .001))),
            f"Minimum Δp: {100.0 * p_diffs[0]:6.3f}%",
            f"RMS Δp    : {100.0 * rms:6.3f} ± {100.0 * (0.5 / rms * dmse):5.3f} %",
            f"Same top p: {100.0 * top:6.3f} ± "
            f"{100.0 * np.sqrt(top * (1.0 - top) / np.float64(k.count - 1)):5.3f} %",
        ]
    return lines


# -- the runs ----------------------------------------------------------------------------------

@dataclass
class Log:
    """llama.cpp's streams: LOG (results) to stdout, LOG_INF and LOG_ERR to stderr."""

    level: int = LOG_INFO

    def out(self, text: str, end: str = "\n") -> None:
        if self.level >= 0:
            sys.stdout.write(text + end)
            sys.stdout.flush()

    def info(self, text: str, end: str = "\n") -> None:
        if self.level >= LOG_INFO:
            sys.stderr.write(text + end)
            sys.stderr.flush()

    def warn(self, text: str) -> None:
        if self.level >= LOG_WARN:
            print(text, file=sys.stderr)


def log_eta(log: Log, func: str, seconds: float, plan: Plan) -> None:
    """The first pass's time and the estimate for all (split across streams as llama.cpp)."""
    log.info(f"{func}: {seconds:.2f} seconds per pass - ETA ", end="")
    total = int(seconds * plan.n_chunk / plan.n_seq)
    if total >= 3600:
        log.out(f"{total // 3600} hours ", end="")
        total %= 3600
    log.out(f"{total / 60.0:.2f} minutes")


def perplexity(ctx: Context, tokens: np.ndarray, plan: Plan, bos: int | None, log: Log,
               perf: Perf, output_type: int = 0, base: BinaryIO | None = None) -> float:
    """perplexity(): running estimates per chunk, then the final estimate; returns the PPL.
    With `base`, the scored rows' log-probs go there too (--kl-divergence-base)."""
    nll = nll2 = 0.0
    count = 0
    t0 = time.perf_counter()
    for i in range(0, plan.n_chunk, plan.n_seq):
        n_seq_batch = min(plan.n_seq, plan.n_chunk - i)
        parts = np.zeros((n_seq_batch, 2))  # per chunk: sum and sum of squares of -log p
        for s, targets, logits in evaluate(ctx, tokens, plan, i, n_seq_batch, bos, perf):
            if base is None:
                v = token_nll(logits, tokens[targets])
            else:
                v, packed = pack_log_probs(logits, tokens[targets])
                base.write(packed.tobytes())
            parts[s] += v.sum(), (v * v).sum()
        if i == 0:
            log_eta(log, "perplexity", time.perf_counter() - t0, plan)
        for s in range(n_seq_batch):
            nll, nll2, count = nll + parts[s, 0], nll2 + parts[s, 1], count + plan.n_scored
            if output_type == 0:
                log.out(f"[{i + s + 1}]{math.exp(nll / count):.4f},", end="")
            else:
                av = nll / count
                av2 = nll2 / count - av * av
                av2 = math.sqrt(av2 / (count - 1)) if av2 > 0 else av2
                log.out(f"{i * plan.n_ctx:8d}  {math.exp(nll / count):.4f}  {av:4f}  {av2:4f}")
    log.out("")
    with np.errstate(all="ignore"):
        mean = np.float64(nll) / count
        var = np.float64(nll2) / count - mean * mean
        ppl = np.exp(mean)
    if var > 0:
        log.info(f"Final estimate: PPL = {ppl:.4f} +/- {math.sqrt(var / (count - 1)) * ppl:.5f}")
    else:
        print("Unexpected negative standard deviation of log(prob)", file=sys.stderr)
    return float(ppl)


def write_header(out: BinaryIO, n_ctx: int, n_vocab: int, n_chunk: int,
                 tokens: np.ndarray) -> None:
    """The base file's head, as perplexity() writes it (line numbers: perplexity.cpp in
    llama.cpp as vendored by llama-cpp-python 0.3.36): "_logits_" and int32 n_ctx (466-467),
    int32 n_vocab, int32 n_chunk, int32 tokens[n_chunk * n_ctx] as tokenized, BOS not put in
    (521-523). Then, per chunk in order, its n_ctx - 1 - n_ctx/2 scored rows of nv =
    packed_width(n_vocab) uint16 (process_logits, 144-173: `out.write` at 172; each row from
    log_softmax, 79-107: float scale and float min_log_prob in the first four words, 95-96,
    the quantized log-probs, then a zero pad word when n_vocab is odd). Host order, which is
    little-endian on every machine llama.cpp's files come from. kl_divergence reads the same
    fields back (1690-1717, rows at 1842)."""
    out.write(MAGIC + np.array([n_ctx, n_vocab, n_chunk], "<i4").tobytes())
    out.write(np.ascontiguousarray(tokens[:n_chunk * n_ctx], "<i4").tobytes())


@dataclass
class BaseFile:
    """A base file opened for --kl-divergence (kl_divergence's reads): tokens and rows."""

    n_ctx: int
    n_vocab: int
    n_chunk: int
    tokens: np.ndarray  # int32 [n_chunk * n_ctx]
    rows: np.ndarray  # uint16 memmap [chunks present, n_scored, nv]

    @classmethod
    def open(cls, path: str) -> BaseFile:
        try:
            with open(path, "rb") as fh:
                head = fh.read(20)
        except OSError:
            raise ToolError(f"kl_divergence: failed to open {path}") from None
        if head[:8] != MAGIC:
            raise ToolError(f"kl_divergence: {path} does not look like a file containing "
                            f"log-probabilities")
        if len(head) < 20:
            raise ToolError(f"kl_divergence: failed reading n_vocab, n_chunk from {path}")
        n_ctx, n_vocab, n_chunk = (int(v) for v in np.frombuffer(head[8:], "<i4"))
        size, offset = Path(path).stat().st_size, 20 + 4 * n_ctx * n_chunk
        if n_ctx < 2 or n_chunk < 0 or size < offset:
            raise ToolError(f"kl_divergence: failed reading evaluation tokens from {path}")
        tokens = np.fromfile(path, "<i4", n_ctx * n_chunk, offset=20).astype(np.int32)
        shape = (n_ctx - 1 - n_ctx // 2, packed_width(n_vocab))
        present = min(n_chunk, (size - offset) // (2 * shape[0] * shape[1]))
        rows = np.memmap(path, "<u2", "r", offset, (present, *shape)) if present else \
            np.empty((0, *shape), np.uint16)
        return cls(n_ctx, n_vocab, n_chunk, tokens, rows)


def kl_divergence(ctx: Context, base: BaseFile, plan: Plan, bos: int | None, log: Log,
                  perf: Perf) -> None:
    """kl_divergence(): the per-chunk table, then (over 100 tokens or more) the statistics."""
    total = KldSums()
    klds: list[np.ndarray] = []
    p_diffs: list[np.ndarray] = []
    t0 = time.perf_counter()
    for i in range(0, plan.n_chunk, plan.n_seq):
        n_seq_batch = min(plan.n_seq, plan.n_chunk - i)
        if i + n_seq_batch > len(base.rows):
            raise ToolError(f"kl_divergence: failed reading log-probs for chunk "
                            f"{len(base.rows)}")
        parts = [KldSums() for _ in range(n_seq_batch)]
        for s, targets, logits in evaluate(ctx, base.tokens, plan, i, n_seq_batch, bos, perf):
            rows = base.rows[i + s][targets - (i + s) * plan.n_ctx - plan.first - 1]
            k, d = kld_rows(logits, base.tokens[targets], rows, parts[s])
            klds.append(k)
            p_diffs.append(d)
        if i == 0:
            log_eta(log, "kl_divergence", time.perf_counter() - t0, plan)
            log.out("")
            log.out("chunk             PPL               ln(PPL(Q)/PPL(base))          "
                    "KL Divergence              Δp RMS            Same top p")
        for s in range(n_seq_batch):
            total.add(parts[s])
            log.out(chunk_line(i + s + 1, total))
    log.out("")
    if total.count < 100:
        return  # "we do not wish to do statistics on so few values"
    for line in summary(total, np.sort(np.concatenate(klds)), np.sort(np.concatenate(p_diffs))):
        log.out(line)


# -- the tool ----------------------------------------------------------------------------------

def read_text(args) -> bytes:
    """-f FILE (one trailing newline dropped, as common/arg.cpp's -f) or -p TEXT."""
    if args.file:
        try:
            with open(args.file, "rb") as fh:
                text = fh.read()
        except OSError:
            raise ToolError(f"error: failed to open file '{args.file}'") from None
        return text[:-1] if text.endswith(b"\n") else text
    return (args.prompt or "").encode()


def load(args, perf: Perf):
    """(model, tokenizer, BOS to put at each chunk's start or None)."""
    if not args.model:
        raise ToolError("llama_perplexity: unable to load model: no model given (-m MODEL)")
    try:
        gguf = open_gguf(resolve_model(args.model))
    except (OSError, ValueError) as e:
        raise ToolError(f"llama_perplexity: unable to load model: {e}") from None
    model = load_model(gguf, repack=bool(args.repack))
    tok = Tokenizer.from_gguf(gguf)
    if tok.vocab.add_eos:  # GGML_ASSERT(!llama_vocab_get_add_eos(vocab))
        raise ToolError("llama_perplexity: models that add EOS are not supported")
    if model.args.n_vocab != tok.n_vocab:
        raise ToolError(f"llama_perplexity: the model has {model.args.n_vocab} logits, its "
                        f"vocabulary {tok.n_vocab} tokens")
    perf.t_load = time.perf_counter() - perf.t_start
    return model, tok, tok.bos if tok.add_bos else None


def make_context(args, model, plan: Plan) -> Context:
    type_k, type_v = cache_types(args)
    return Context(model, n_ctx=plan.n_seq * plan.n_ctx, n_seq=plan.n_seq,
                   n_ubatch=min(args.ubatch_size, plan.n_batch), type_k=type_k, type_v=type_v,
                   n_threads=args.threads if args.threads > 0 else None,
                   n_threads_batch=args.threads_batch if args.threads_batch > 0 else None)


def run_perplexity(args, log: Log, perf: Perf, n_ctx: int) -> None:
    text = read_text(args)
    model, tok, bos = load(args, perf)
    n_parallel, n_batch = parallel(n_ctx, args.batch_size)
    warn_train_ctx(log, model, n_parallel * n_ctx)
    log.info("perplexity: tokenizing the input ..")
    t0 = time.perf_counter()
    tokens = np.array(tok.tokenize(text, add_special=True, parse_special=False), np.int32)
    log.info(f"perplexity: tokenization took {(time.perf_counter() - t0) * 1e3:g} ms")
    if len(tokens) < 2 * n_ctx:
        raise ToolError(f"perplexity: you need at least {2 * n_ctx} tokens to evaluate "
                        f"perplexity with a context of {n_ctx}\nperplexity: the data file you "
                        f"provided tokenizes to only {len(tokens)} tokens")
    n_chunk = len(tokens) // n_ctx if args.chunks < 0 else min(args.chunks, len(tokens) // n_ctx)
    plan = Plan(n_ctx, n_batch, n_parallel, n_chunk)
    ctx = make_context(args, model, plan)
    log.info(f"perplexity: calculating perplexity over {n_chunk} chunks, n_ctx={n_ctx}, "
             f"batch_size={n_batch}, n_seq={plan.n_seq}")
    if not args.logits_file:
        perplexity(ctx, tokens, plan, bos, log, perf, args.ppl_output_type)
        return
    try:
        out = open(args.logits_file, "wb")  # noqa: SIM115 (closed below)
    except OSError:
        raise ToolError(f"perplexity: failed to open {args.logits_file} for writing") from None
    with out:
        log.info(f"perplexity: saving all logits to {args.logits_file}")
        write_header(out, n_ctx, tok.n_vocab, n_chunk, tokens)
        perplexity(ctx, tokens, plan, bos, log, perf, args.ppl_output_type, base=out)


def run_kl_divergence(args, log: Log, perf: Perf, n_ctx: int) -> None:
    if not args.logits_file:
        raise ToolError("kl_divergence: you must provide a name of a file containing the log "
                        "probabilities of the base model")
    base = BaseFile.open(args.logits_file)
    model, tok, bos = load(args, perf)
    n_parallel, n_batch = parallel(n_ctx, args.batch_size)
    if base.n_ctx > -(-n_parallel * n_ctx // 256) * 256:  # llama_n_ctx: padded to 256 cells
        raise ToolError(f"kl_divergence: {args.logits_file} has been computed with "
                        f"{base.n_ctx}, while the current context is {n_parallel * n_ctx}. "
                        f"Increase it with -c and retry")
    if base.n_vocab != tok.n_vocab:
        raise ToolError(f"kl_divergence: inconsistent vocabulary ({base.n_vocab} vs "
                        f"{tok.n_vocab})")
    warn_train_ctx(log, model, n_parallel * n_ctx)
    n_seq = max(1, n_batch // base.n_ctx)
    if n_seq > n_parallel:
        log.warn(f"kl_divergence: calculated n_seq={n_seq} exceeds context's n_seq_max="
                 f"{n_parallel}, capping at {n_parallel}")
        n_seq = n_parallel
    plan = Plan(base.n_ctx, n_batch, n_seq, base.n_chunk)
    ctx = make_context(args, model, plan)
    log.info(f"kl_divergence: computing over {base.n_chunk} chunks, n_ctx={base.n_ctx}, "
             f"batch_size={n_batch}, n_seq={n_seq}")
    kl_divergence(ctx, base, plan, bos, log, perf)


def warn_train_ctx(log: Log, model, n_ctx: int) -> None:
    n_train = getattr(model.args, "n_ctx_train", 0)
    if n_train and n_ctx > n_train:
        log.warn(f"llama_perplexity: model was trained on only {n_train} context tokens ({n_ctx} "
                 f"specified)")


def print_perf(log: Log, perf: Perf) -> None:
    """llama_perf_context_print's lines (every decode here is a prompt batch)."""
    t_p, n_p = perf.t_eval * 1e3, max(perf.n_eval, 1)
    with np.errstate(all="ignore"):
        log.info(f"llama_perf_context_print:        load time = {perf.t_load * 1e3:10.2f} ms")
        log.info(f"llama_perf_context_print: prompt eval time = {t_p:10.2f} ms / {n_p:5d} tokens "
                 f"({t_p / n_p:8.2f} ms per token, {np.float64(1e3) / t_p * n_p:8.2f} tokens "
                 f"per second)")
        log.info(f"llama_perf_context_print:        eval time = {0:10.2f} ms / {1:5d} runs   "
                 f"({0:8.2f} ms per token, {np.float64(1e3) / 0.0:8.2f} tokens per second)")
        total = (time.perf_counter() - perf.t_start) * 1e3
        log.info(f"llama_perf_context_print:       total time = {total:10.2f} ms / "
                 f"{perf.n_eval:5d} tokens")


def main(argv: list[str] | None = None) -> int:
    """llama-perplexity's entry point; 0 on success, 1 when the run cannot go on (llama.cpp's
    message on stderr), 2 for a flag that llamacpy does not support."""
    argv = sys.argv[1:] if argv is None else argv
    for arg in argv:
        if arg.split("=", 1)[0] in UNSUPPORTED:
            fail(TOOL, f"{arg.split('=', 1)[0]} is not supported by llamacpy yet")
    args = parse_args("perplexity", TOOL, __doc__, argv)
    log, perf = Log(verbosity(args)), Perf()
    n_ctx = args.ctx_size if "ctx_size" in args.given else DEFAULT_CTX
    try:
        if n_ctx <= 0:
            raise ToolError("llama_perplexity: perplexity tool requires '--ctx-size' > 0")
        if args.kl_divergence:
            run_kl_divergence(args, log, perf, n_ctx)
        else:
            run_perplexity(args, log, perf, n_ctx)
    except ToolError as e:
        print(e, file=sys.stderr)
        return 1
    except ValueError as e:  # a bad -ctk/-ctv
        print(f"{TOOL}: error: {e}", file=sys.stderr)
        return 1
    log.out("")
    print_perf(log, perf)
    return 0


if __name__ == "__main__":
    sys.exit(main())
