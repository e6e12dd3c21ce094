"""/health tells the truth about the engine: when the engine thread dies, /health answers 503
within a second, waiting requests fail instead of hanging, and the process is told to exit
(llama-server then exits non-zero). The engine here runs a stub model."""

from __future__ import annotations

import threading
import time

from starlette.testclient import TestClient

from llamacpy.engine.prompt import Prompt
from llamacpy.engine.scheduler import Scheduler
from llamacpy.engine.sequence import Request
from llamacpy.sampling import SamplingParams
from llamacpy.server.app import build_app
from llamacpy.server.state import ServerConfig, ServerState
from tests.engine.stub import stub_context


def stub_state() -> ServerState:
    ctx, tok = stub_context(lambda h: 300, n_seq=2)
    state = ServerState(ServerConfig(model_path="stub.gguf"))
    state.engine, state.tokenizer = Scheduler(ctx, tok), tok
    state.thread = threading.Thread(target=state._run_engine, daemon=True)
    state.thread.start()
    state.ready = True
    return state


def test_health_turns_503_when_the_engine_thread_dies():
    state = stub_state()
    told = []
    state.on_engine_failure = told.append
    client = TestClient(build_app(state))
    assert client.get("/health").json() == {"status": "ok"}
    events = []
    done = state.engine.submit(Request(Prompt([1, 2]), SamplingParams(temperature=0),
                                       n_predict=3), events.append)
    deadline = time.monotonic() + 5
    while not done.finished and time.monotonic() < deadline:
        time.sleep(0.01)
    assert events[-1]["type"] == "done"  # it served before the fault

    def broken():
        raise RuntimeError("injected fault")

    state.engine._admit = broken  # the scheduler's own code fails: the thread ends
    waiting = []
    state.engine.submit(Request(Prompt([3]), SamplingParams(temperature=0)), waiting.append)
    t0 = time.monotonic()
    while client.get("/health").status_code == 200:
        assert time.monotonic() - t0 < 1.0, "/health still says ok a second after the fault"
        time.sleep(0.02)
    r = client.get("/health")
    assert r.status_code == 503
    err = r.json()["error"]
    assert err["code"] == 503 and err["type"] == "unavailable_error"
    assert "injected fault" in err["message"]
    assert waiting and waiting[-1]["type"] == "error"  # failed, not left hanging
    state.thread.join(2)
    assert told and "injected fault" in told[0]
