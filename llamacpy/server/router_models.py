"""The router's models and their child processes (llama.cpp's server_models, server-models.cpp).

Each loaded model is a child llama-server (`python -m llamacpy server -m FILE ...`) on a free
loopback port, in a session of its own and set to get SIGTERM when the router dies, so a crash
or an out-of-memory kill in one model never takes the router down and a router that dies takes
its children with it. Everything here runs on the router's event loop: status changes need no
locks, and waiters wake on `changed`.

Statuses follow llama.cpp: unloaded, loading, loaded, sleeping. A child that exits without the
router asking is unloaded with failed and its exit code (128 + N for signal N, as a shell
reports it), and loads again on the next request. A model idle for --sleep-idle-seconds has its
child stopped (its memory returned) and sleeps until the next request for it.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field

import httpx

from ..hub.models_dir import ModelSpec, discover
from .audio import is_whisper

CHILD_HOST = "127.0.0.1"  # children listen on loopback whatever --host the router has
RUNNING = ("loading", "loaded", "sleeping")  # llama.cpp's is_running()
PR_SET_PDEATHSIG = 1


class RouterError(Exception):
    """A request the router refuses: llama.cpp's message, error type and status."""

    def __init__(self, message: str, kind: str = "invalid_request_error",
                 status: int | None = None):
        super().__init__(message)
        self.kind, self.status = kind, status


@dataclass
class Instance:
    """One model: its spec and, while it has one, its child process."""

    spec: ModelSpec
    status: str = "unloaded"
    port: int = 0
    proc: asyncio.subprocess.Process | None = None
    args: list[str] = field(default_factory=list)
    exit_code: int = 0
    failed: bool = False
    loaded_info: dict = field(default_factory=dict)  # the child's /v1/models entry
    last_used: float = 0.0  # monotonic seconds: LRU order and the idle timer
    req_count: int = 0  # proxied requests in flight
    stop_as: str = ""  # "" while running; "unloaded" or "sleeping" once asked to stop

    @property
    def name(self) -> str:
        return self.spec.name


def free_port() -> int:
    with socket.socket() as s:
        s.bind((CHILD_HOST, 0))
        return s.getsockname()[1]


def die_with_parent() -> None:
    """In the child before exec: SIGTERM when the router's main thread dies (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the router still stops its children when it exits normally


def exit_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


@dataclass
class RouterConfig:
    models_dir: str | None
    preset: str | None
    models_max: int
    autoload: bool
    sleep_idle_seconds: int
    child_flags: list[str]  # the router's own flags that every child gets
    child_env: dict[str, str]
    log: object = print  # a line for the router's log
    host: str = "127.0.0.1"  # --host: on loopback the Ollama routes check the Host header
    speech_child_flags: list[str] | None = None  # what of child_flags a whisper model takes


class Models:
    """The model table and the child processes, on the event loop."""

    def __init__(self, cfg: RouterConfig):
        self.cfg = cfg
        self.table: dict[str, Instance] = {
            name: Instance(spec) for name, spec in discover(cfg.models_dir, cfg.preset).items()}
        self.changed = asyncio.Event()
        self.load_lock = asyncio.Lock()  # one capacity decision at a time
        self.tasks: set[asyncio.Task] = set()
        self.sleeper: asyncio.Task | None = None  # the --sleep-idle-seconds loop
        self.http = httpx.AsyncClient(timeout=5.0)

    # -- lookup and listing --------------------------------------------------------------

    def get(self, name: str) -> Instance | None:
        """A model by name or alias."""
        inst = self.table.get(name)
        if inst is None:
            inst = next((i for i in self.table.values() if name in i.spec.aliases), None)
        return inst

    def child_argv(self, inst: Instance, port: int) -> list[str]:
        """The child's command line: model files and preset options, the router's flags
        (which win), then the loopback address and the model's name as its alias."""
        flags = self.cfg.child_flags
        if self.cfg.speech_child_flags is not None and is_whisper(inst.spec.path):
            flags = self.cfg.speech_child_flags  # the LLM flags do not apply to it
        return [sys.executable, "-m", "llamacpy", "server", *inst.spec.child_args(),
                *flags, "--host", CHILD_HOST, "--port", str(port),
                "--alias", inst.name]

    def running(self) -> list[Instance]:
        """Models that hold a process (stopping ones too, until they exit)."""
        return [i for i in self.table.values() if i.proc is not None]

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    async def wait_change(self, timeout: float = 0.5) -> None:
        try:
            await asyncio.wait_for(self.changed.wait(), timeout)
        except asyncio.TimeoutError:
            pass

    # -- loading ---------------------------------------------------------------------------

    async def load(self, inst: Instance, wait_for_room: bool = False) -> None:
        """Start the model's child (after evicting the least recently used model if
        --models-max is reached); returns once it is spawned, not loaded."""
        async with self.load_lock:
            if inst.proc is not None:
                return
            await self.make_room(inst, wait_for_room)
            await self.spawn(inst)

    async def make_room(self, inst: Instance, wait: bool) -> None:
        limit = self.cfg.models_max
        while limit > 0 and len(self.running()) >= limit:
            victim = self.lru_victim(inst)
            if victim is not None:
                self.cfg.log(f"models_max limit reached, removing LRU name={victim.name}")
                await self.stop(victim, "unloaded", wait=True)
            elif not wait:
                raise RouterError("model limit reached, try again later", "server_error")
            else:  # every model is busy: wait for a request to end
                await self.wait_change()

    def lru_victim(self, keep: Instance) -> Instance | None:
        """The least recently used idle model (server_lru_sched::pick_victim)."""
        idle = [i for i in self.running() if i is not keep and i.status == "loaded"
                and i.req_count == 0 and not i.stop_as]
        return min(idle, key=lambda i: i.last_used, default=None)

    async def spawn(self, inst: Instance) -> None:
        port = free_port()
        argv = self.child_argv(inst, port)
        self.cfg.log(f"spawning server instance with name={inst.name} on port {port}")
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env=self.cfg.child_env, start_new_session=True,
            preexec_fn=die_with_parent, limit=1 << 20)
        inst.proc, inst.port, inst.args, inst.status = proc, port, argv, "loading"
        inst.failed, inst.exit_code, inst.stop_as = False, 0, ""
        inst.loaded_info, inst.last_used = {}, time.monotonic()
        self.background(self.watch(inst, proc))
        self.notify()

    def background(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def watch(self, inst: Instance, proc) -> None:
        """Forward the child's log, mark it loaded when its /health says so, and record how it
        ended."""
        ready = asyncio.get_running_loop().create_task(self.wait_ready(inst, proc))
        await forward_log(proc.stdout, inst.port)
        code = exit_status(await proc.wait())
        ready.cancel()
        if inst.proc is not proc:
            return
        asked = inst.stop_as
        inst.proc, inst.status = None, asked or "unloaded"
        inst.failed, inst.exit_code = not asked and code != 0, 0 if asked else code
        if inst.status == "unloaded":
            inst.loaded_info = {}
        self.cfg.log(f"instance name={inst.name} exited with status {code}")
        self.notify()

    async def wait_ready(self, inst: Instance, proc) -> None:
        base = f"http://{CHILD_HOST}:{inst.port}"
        while inst.proc is proc and not inst.stop_as:
            try:
                if (await self.http.get(base + "/health")).status_code == 200:
                    info = (await self.http.get(base + "/v1/models")).json()["data"][0]
                    break
            except (httpx.HTTPError, ValueError, KeyError, IndexError):
                pass
            await asyncio.sleep(0.1)
        else:
            return
        inst.status, inst.loaded_info, inst.last_used = "loaded", info, time.monotonic()
        self.cfg.log(f"model name={inst.name} is loaded on port {inst.port}")
        self.notify()

    async def ensure_ready(self, inst: Instance) -> None:
        """Wait until the model is loaded, loading it if it is unloaded or sleeping (a request
        for it waits, as llama.cpp's ensure_model_ready)."""
        started = False
        while not (inst.status == "loaded" and not inst.stop_as):
            if inst.proc is None:
                if started:
                    if inst.failed:
                        raise RouterError(f"model name={inst.name} failed to load",
                                          "server_error")
                    raise RouterError(f"model name={inst.name} is not running")
                await self.load(inst, wait_for_room=True)
                started = True
            else:
                await self.wait_change()

    # -- stopping ----------------------------------------------------------------------------

    async def stop(self, inst: Instance, status: str = "unloaded", wait: bool = False) -> None:
        """Ask the child to exit (SIGTERM: it shuts down cleanly), kill it after the spec's
        stop-timeout; `status` is what the model becomes once it has exited."""
        proc = inst.proc
        if proc is None:
            if inst.status == "sleeping":  # no process left to stop
                inst.status = status
                self.notify()
            return
        if not inst.stop_as:
            inst.stop_as = status
            self.cfg.log(f"stopping model instance name={inst.name}")
            signal_group(proc, signal.SIGTERM)
            self.background(self.kill_after(inst, proc, inst.spec.stop_timeout))
            self.notify()
        while wait and inst.proc is proc:
            await self.wait_change()

    async def kill_after(self, inst: Instance, proc, seconds: float) -> None:
        try:
            await asyncio.wait_for(proc.wait(), seconds)
        except asyncio.TimeoutError:
            self.cfg.log(f"force-killing model instance name={inst.name} after timeout")
            signal_group(proc, signal.SIGKILL)

    async def stop_all(self) -> None:
        """Every child stops (the router is shutting down)."""
        if self.sleeper is not None:
            self.sleeper.cancel()
        running = self.running()
        for inst in running:
            await self.stop(inst)
        for inst in running:
            while inst.proc is not None:
                await self.wait_change()
        await self.http.aclose()

    def kill_all(self) -> None:
        """Last resort when the loop is gone: kill what is left."""
        for inst in self.running():
            signal_group(inst.proc, signal.SIGKILL)

    # -- requests and idleness ---------------------------------------------------------------

    def begin(self, inst: Instance, touch: bool) -> None:
        inst.req_count += 1
        if touch:
            inst.last_used = time.monotonic()

    def end(self, inst: Instance, touch: bool) -> None:
        inst.req_count -= 1
        if touch:
            inst.last_used = time.monotonic()
        self.notify()

    async def sleep_idle(self) -> None:
        """--sleep-idle-seconds: stop children idle that long; they sleep until a request."""
        limit = self.cfg.sleep_idle_seconds
        while limit >= 0:
            now = time.monotonic()
            for inst in self.running():
                if inst.status == "loaded" and inst.req_count == 0 and not inst.stop_as \
                        and now - inst.last_used >= limit:
                    self.cfg.log(f"model name={inst.name} idle for {limit} s: sleeping")
                    await self.stop(inst, "sleeping")
            await asyncio.sleep(min(1.0, max(limit / 4, 0.1)))

    # -- reload ------------------------------------------------------------------------------

    async def reload(self) -> None:
        """Rescan the sources (GET /models?reload=1): a running model whose files or options
        changed, or that is gone, is unloaded; the others take their new spec."""
        found = discover(self.cfg.models_dir, self.cfg.preset)
        for name, inst in list(self.table.items()):
            spec = found.get(name)
            if spec == inst.spec:
                if inst.proc is None and inst.status == "unloaded":
                    inst.failed, inst.exit_code = False, 0  # may be loaded again
                continue
            if inst.proc is not None:
                self.cfg.log(f"(reload) unloading model name={name} (source updated or removed)")
                await self.stop(inst, wait=True)
            if spec is None:
                del self.table[name]
            else:
                inst.spec, inst.status, inst.failed, inst.exit_code = spec, "unloaded", False, 0
        for name, spec in found.items():
            self.table.setdefault(name, Instance(spec))
        self.notify()


async def forward_log(stream, port: int) -> None:
    """The child's output into the router's log, each line after its port (as llama.cpp's
    monitor does), until the child closes it."""
    while True:
        try:
            line = await stream.readline()
        except ValueError:  # a line longer than the stream's limit: its rest follows
            continue
        if not line:
            return
        try:
            sys.stderr.write(f"[{port:5d}] {line.decode(errors='replace')}")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass  # no log to write to: the child's status still counts


def signal_group(proc, sig: int) -> None:
    """Signal the child's process group (its own session: the child and anything it runs)."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
