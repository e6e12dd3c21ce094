"""The model deployment: each replica holds up to --models-max models, loaded on demand by
name through Serve's multiplexing (the least recently used one unloads first), and runs each
one as a whole llama-server: its ServerState (the GGUF memory-mapped, so replicas on one host
share the page cache; its own engine thread, slots and batching) and its Starlette app, which
answers the requests the ingress forwards (asgi.call)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator

from ray import serve

from . import asgi
from .board import BEAT, board
from .config import PROG

UNLOAD_WAIT = 60.0  # seconds an evicted model's requests in flight get to finish


class LoadedModel:
    """One model in a replica: llama-server's state and app, from its llama-server flags."""

    def __init__(self, name: str, argv: list[str]):
        from ..cli.args import parse_args
        from ..cli.server import server_config, with_http_threads
        from ..kernels import set_threads
        from ..server.app import build_app
        from ..server.state import ServerState

        args = parse_args("server", PROG, "", argv)
        cfg = server_config(args)
        cfg.alias = cfg.alias or name  # the name requests route by is the one answers carry
        if args.threads > 0:
            set_threads(args.threads)
        self.name, self.state = name, ServerState(cfg)
        self.app = with_http_threads(build_app(self.state), cfg.n_threads_http)
        self.active = 0  # requests in flight

    def load(self) -> None:
        from ..kernels import apply_threads_here

        apply_threads_here()
        self.state.load()

    async def unload(self) -> None:
        """Evicted: let requests in flight finish (up to UNLOAD_WAIT), then stop the engine."""
        for _ in range(int(UNLOAD_WAIT * 10)):
            if self.active == 0:
                break
            await asyncio.sleep(0.1)
        await asyncio.to_thread(self.state.stop)


@serve.deployment(name="LlamaModel")
class LlamaModel:
    """A replica: models by name (ModelSpec files and flags), each a llama-server."""

    async def __init__(self, specs: dict, flags: list[str], models_max: int, metrics: bool,
                       preload: tuple[str, ...] = ()):
        self.specs, self.flags, self.metrics = specs, flags, metrics
        ctx = serve.get_replica_context()
        self.replica_id = ctx.replica_id.unique_id
        self.tag = f"{self.replica_id}@{socket.gethostname()}:{os.getpid()}"
        self.board = board(ctx.app_name)

        async def loader(model_id: str) -> LoadedModel:
            return await self.load_model(model_id)

        # the per-replica limit is the application's, so the multiplexed loader is made here
        self.get_model = serve.multiplexed(max_num_models_per_replica=models_max)(loader)
        self.loaded: dict[str, LoadedModel] = {}
        self.beats = asyncio.get_running_loop().create_task(self.beat())
        for name in preload:  # -m: the model is loaded before the replica takes requests
            await self.get_model(name)

    @serve.multiplexed(max_num_models_per_replica=1)
    async def get_model(self, model_id: str) -> LoadedModel:
        """Marks this deployment as multiplexed for Serve; __init__ replaces it per replica."""
        raise NotImplementedError  # never called: the instance attribute shadows it

    async def load_model(self, name: str) -> LoadedModel:
        spec = self.specs.get(name)
        if spec is None:
            raise KeyError(f"model '{name}' is not served by this application")
        model = LoadedModel(name, spec.child_args() + self.flags)
        await asyncio.to_thread(model.load)
        self.loaded[name] = model
        await self.announce()  # the board knows before the first answer goes out

        async def evicted() -> None:
            self.loaded.pop(name, None)
            await self.announce()
            await model.unload()

        # Serve's LRU eviction calls a model's __del__ (awaited when a coroutine); an instance
        # attribute, so the garbage collector never calls it
        model.__del__ = evicted
        return model

    async def forward(self, req: dict) -> AsyncIterator[dict | bytes]:
        """One forwarded HTTP request through its model's llama-server app, as a stream."""
        model = await self.get_model(serve.get_multiplexed_model_id())
        model.active += 1
        try:
            first = True
            async for part in asgi.call(model.app, req):
                if first and isinstance(part, dict):
                    part["headers"].append(("x-llamacpy-replica", self.tag))
                    first = False
                yield part
        finally:
            model.active -= 1

    async def describe(self) -> dict:
        """Which replica this is and what it holds (tests, and people debugging a cluster)."""
        return {"replica": self.replica_id, "pid": os.getpid(), "models": list(self.loaded)}

    async def beat(self) -> None:
        """Tell the board this replica is alive and with which models; answer a scrape with
        the models' /metrics texts (the engines' throughput windows end at each scrape, as in
        llama-server)."""
        answered = 0
        while True:
            with contextlib.suppress(Exception):  # the board restarting: beat again later
                epoch = await self.board.beat.remote(self.replica_id, list(self.loaded))
                if epoch != answered:
                    texts = {name: model.state.prometheus() for name, model in
                             list(self.loaded.items()) if self.metrics and model.state.ready}
                    await self.board.post.remote(self.replica_id, epoch, texts)
                answered = epoch
            await asyncio.sleep(BEAT)

    async def announce(self) -> None:
        """Beat now: a model loaded or unloaded (/v1/models and /metrics see it at once)."""
        with contextlib.suppress(Exception):
            await self.board.beat.remote(self.replica_id, list(self.loaded))
