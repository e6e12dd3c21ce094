"""The generation core without a real model: a stub whose logits are scripted per sequence
drives engine/sequence.py and engine/scheduler.py through every finish reason, stop strings
with held-back text, batching, slot choice, cancellation and failures."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from llamacpy.engine.prompt import Prompt
from llamacpy.engine.scheduler import EngineError, Scheduler
from llamacpy.engine.sequence import Request
from llamacpy.sampling import SamplingParams
from tests.engine.stub import POISON, script, stub_context

GREEDY = SamplingParams(temperature=0.0)


def words(tok, text: str) -> list[int]:
    return tok.tokenize(text, add_special=False)


def make(next_token, n_seq: int = 1, n_ctx: int = 256, n_batch: int = 2048, **kw):
    ctx, tok = stub_context(next_token, n_ctx=n_ctx, n_seq=n_seq)
    return Scheduler(ctx, tok, n_batch=n_batch, **kw), tok


def request(tokens: list[int], **kw) -> Request:
    return Request(Prompt(list(tokens)), kw.pop("params", GREEDY), **kw)


def run_one(sched: Scheduler, req: Request) -> tuple[str, list[int], dict]:
    text, tokens, done = "", [], None
    for ev in sched.generate(req):
        assert ev["type"] != "error", ev
        text += ev["text"]
        if ev["type"] == "token":
            tokens.append(ev["token"])
        else:
            done = ev
    return text, tokens, done


def test_greedy_follows_the_script_to_eos(request_text=None):
    sched, tok = make(lambda h: 0)
    prompt, cont = [1, 2, 3], None
    cont = words(sched.tokenizer, "Hello world")
    sched.ctx.model.next_token = script((prompt, cont))
    text, tokens, done = run_one(sched, request(prompt))
    assert tokens == cont and text == "Hello world"
    assert done["stop_type"] == "eos" and done["n_decoded"] == len(cont) + 1  # EOS counts
    assert done["n_prompt"] == 3 and done["timings"]["predicted_n"] == len(cont) + 1


def test_n_predict_and_context_limits():
    sched, tok = make(lambda h: 300, n_ctx=32)
    _, tokens, done = run_one(sched, request([1, 2, 3], n_predict=5))
    assert len(tokens) == 5 and done["stop_type"] == "limit"
    _, tokens, done = run_one(sched, request([1, 2, 3]))  # until the context is full
    assert done["stop_type"] == "limit" and 3 + len(tokens) == 32


def test_stop_string_cuts_and_holds_back_text():
    sched, tok = make(lambda h: 0)
    prompt, cont = [1, 2], words(sched.tokenizer, "one, two. three")
    sched.ctx.model.next_token = script((prompt, cont))
    events = list(sched.generate(request(prompt, stop=[". "])))
    done = events[-1]
    assert "".join(e["text"] for e in events) == "one, two"
    assert done["stop_type"] == "word" and done["stopping_word"] == ". "
    # "." was held back while ". " could still be starting
    assert all("." not in e["text"] for e in events)


def test_held_back_text_is_released_at_eos():
    """ "Hello\\n" then EOS with a stop string "\\n\\n": the held "\\n" still ends the text (as
    llama.cpp's server and llama-cpp-python both give it)."""
    sched, tok = make(lambda h: 0)
    prompt, cont = [1, 2], words(sched.tokenizer, "Hello\n")
    sched.ctx.model.next_token = script((prompt, cont))
    events = list(sched.generate(request(prompt, stop=["\n\n"])))
    assert "".join(e["text"] for e in events) == "Hello\n"
    assert events[-1]["stop_type"] == "eos" and events[-1]["text"] == "\n"


def test_batched_sequences_match_their_single_runs():
    conts = {(5,): [40, 41, 42, 43], (6, 6): [50, 51], (8, 9, 10): [60, 61, 62, 63, 64, 65]}
    nt = script(*[(list(p), c) for p, c in conts.items()])
    singles = {}
    for p in conts:
        sched, _ = make(nt)
        singles[p] = run_one(sched, request(list(p)))[1]
        assert singles[p] == conts[p]
    sched, _ = make(nt, n_seq=2)
    got, threads = {}, []
    events = {p: [] for p in conts}
    seqs = {p: sched.submit(request(list(p)), events[p].append) for p in conts}
    while not all(s.finished for s in seqs.values()):
        assert sched.step()
    for p in conts:
        got[p] = [e["token"] for e in events[p] if e["type"] == "token"]
        assert events[p][-1]["type"] == "done"
    assert got == singles
    assert max(sched.ctx.model.calls) > 1 and sched.metrics.n_busy_slots > sched.metrics.n_decode
    assert not any(s.busy for s in sched.slots) and not sched.waiting


def test_a_request_for_a_busy_slot_does_not_block_the_queue():
    sched, _ = make(lambda h: 300, n_seq=2)
    long = sched.submit(request([1], n_predict=50, id_slot=0), lambda e: None)
    sched.step()
    assert long.slot.id == 0
    waiting_for_0 = sched.submit(request([2], n_predict=2, id_slot=0), lambda e: None)
    behind = sched.submit(request([3], n_predict=2), lambda e: None)
    sched.step()
    assert behind.slot is not None and behind.slot.id == 1
    assert waiting_for_0.slot is None and waiting_for_0 in sched.waiting
    while not (long.finished and waiting_for_0.finished and behind.finished):
        sched.step()
    assert waiting_for_0.slot.id == 0


def test_slot_choice_by_prefix_and_prefix_reuse():
    sched, _ = make(lambda h: 300, n_seq=2)
    a = list(range(20, 40))
    b = list(range(60, 80))
    for p in (a, b):
        run_one(sched, request(p, n_predict=2))
    slot_of_b = next(s.id for s in sched.slots if s.tokens[:20] == b)
    _, _, done = run_one(sched, request(b + [90, 91], n_predict=2))
    assert done["id_slot"] == slot_of_b and done["n_cached"] == 20
    assert done["timings"]["prompt_n"] == 2
    _, _, done = run_one(sched, request(b + [90, 91], n_predict=2, cache_prompt=False))
    assert done["n_cached"] == 0


def test_out_of_range_requests_are_refused_before_queuing():
    sched, tok = make(lambda h: 300, n_seq=2, n_ctx=16, max_queue=1)
    with pytest.raises(EngineError, match="id_slot"):
        sched.submit(request([1], id_slot=2), lambda e: None)
    with pytest.raises(EngineError, match="context size") as e:
        sched.submit(request(list(range(1, 17))), lambda e: None)
    assert e.value.kind == "exceed_context_size_error"
    with pytest.raises(EngineError, match="empty"):
        sched.submit(request([]), lambda e: None)
    with pytest.raises(EngineError, match="vocabulary"):
        sched.submit(request([tok.n_vocab]), lambda e: None)
    with pytest.raises(ValueError, match="infill"):  # refused where the settings are made
        SamplingParams(samplers=["infill"])
    params = SamplingParams()
    params.samplers = ["infill"]  # and again, unqueued, if one slips past
    with pytest.raises(EngineError, match="infill"):
        sched.submit(request([1], params=params), lambda e: None)
    sched.submit(request([1]), lambda e: None)
    with pytest.raises(EngineError, match="busy") as e:
        sched.submit(request([1]), lambda e: None)
    assert e.value.kind == "unavailable_error"


class Mask:
    """Allows only even token ids; finished after four tokens; optionally raises."""

    def __init__(self, n_vocab: int, fail_after: int = -1):
        self.n_vocab, self.taken, self.fail_after = n_vocab, [], fail_after

    def allowed(self):
        if len(self.taken) == self.fail_after:
            raise RuntimeError("mask broke")
        return np.arange(self.n_vocab) % 2 == 0

    def accept(self, token: int) -> None:
        self.taken.append(token)

    def is_finished(self) -> bool:
        return len(self.taken) >= 4


def test_token_mask_constrains_sampling_and_can_end_it():
    sched, tok = make(lambda h: 301)  # 301 is masked: the runner-up 302 wins
    mask = Mask(tok.n_vocab)
    _, tokens, done = run_one(sched, request([1], token_mask=mask))
    assert tokens == [302] * 4 and mask.taken == tokens and done["stop_type"] == "eos"


def test_a_failing_sequence_fails_alone():
    sched, tok = make(lambda h: 300, n_seq=2)
    bad_events, good_events = [], []
    bad = sched.submit(request([1], n_predict=20, token_mask=Mask(tok.n_vocab, 2)),
                       bad_events.append)
    good = sched.submit(request([2], n_predict=8), good_events.append)
    while not (bad.finished and good.finished):
        sched.step()
    assert bad_events[-1]["type"] == "error" and "mask broke" in bad_events[-1]["message"]
    assert good_events[-1]["type"] == "done" and good_events[-1]["n_decoded"] == 8
    assert not any(s.busy for s in sched.slots)
    _, tokens, _ = run_one(sched, request([3], n_predict=3))  # still serving
    assert tokens == [300] * 3


def test_a_failing_decode_fails_its_batch_and_the_scheduler_goes_on():
    sched, _ = make(lambda h: 300)
    events = list(sched.generate(request([1, POISON, 2])))
    assert events[-1]["type"] == "error" and "poisoned" in events[-1]["message"]
    assert sched.slots[0].tokens == [] and not sched.slots[0].busy
    assert run_one(sched, request([1], n_predict=2))[1] == [300, 300]


def test_cancel_frees_the_slot_at_the_next_step():
    sched, _ = make(lambda h: 300)
    events = []
    seq = sched.submit(request([1, 2], n_predict=100), events.append)
    for _ in range(3):
        sched.step()
    sched.cancel(seq)
    sched.step()
    assert not sched.slots[0].busy and len(sched.slots[0].tokens) <= 2 + 3
    gen = sched.generate(request([5], n_predict=100))
    next(gen)
    gen.close()  # the caller stopped reading: cancelled and released
    assert not sched.slots[0].busy


def test_engine_thread_death_fails_requests_and_is_recorded():
    sched, _ = make(lambda h: 300)
    events = []

    def broken():
        raise RuntimeError("scheduler bug")

    sched._admit = broken
    seq = sched.submit(request([1]), events.append)
    thread = threading.Thread(target=lambda: pytest.raises(RuntimeError, sched.run))
    thread.start()
    thread.join(5)
    assert not thread.is_alive() and "scheduler bug" in sched.failure
    assert events and events[-1]["type"] == "error" and seq.finished
    with pytest.raises(EngineError) as e:
        sched.submit(request([1]), lambda e: None)
    assert e.value.kind == "unavailable_error"


def test_run_thread_serves_submissions_from_other_threads():
    conts = {i: [100 + i, 101 + i, 102 + i] for i in range(6)}
    sched, _ = make(script(*[([i + 1], c) for i, c in conts.items()]), n_seq=3)
    thread = threading.Thread(target=sched.run, daemon=True)
    thread.start()
    results = {i: [] for i in conts}
    done = threading.Event()
    count = [0]

    def emit(i):
        def f(ev):
            results[i].append(ev)
            if ev["type"] == "done":
                count[0] += 1
                if count[0] == len(conts):
                    done.set()
        return f

    for i in conts:
        sched.submit(request([i + 1]), emit(i))
    assert done.wait(30)
    sched.stop()
    thread.join(5)
    for i, c in conts.items():
        assert [e["token"] for e in results[i] if e["type"] == "token"] == c
    assert sched.failure is None and not thread.is_alive()
