"""The application's notice board, a small named Ray actor: each model replica beats every
BEAT seconds with the models it holds, and posts its /metrics text when the ingress asks for a
scrape. Serve routes each request to one replica, so this is how the ingress hears from all
of them: /metrics sums what they post, /v1/models and /api/ps say which models are loaded."""

from __future__ import annotations

import time

import ray

BEAT = 0.5  # seconds between a replica's beats (a scrape waits about this long)
LIVE = 3 * BEAT  # a replica silent this long is gone (killed, or scaled down)


@ray.remote(num_cpus=0)
class Board:
    def __init__(self):
        self.epoch = 0
        self.seen: dict[str, tuple[float, list[str]]] = {}  # replica -> (time, its models)
        self.posts: dict[str, tuple[int, dict[str, str]]] = {}  # replica -> model -> text

    def beat(self, replica: str, models: list[str]) -> int:
        """A replica is alive with these models; returns the scrape it should answer."""
        self.seen[replica] = (time.monotonic(), models)
        return self.epoch

    def post(self, replica: str, epoch: int, texts: dict[str, str]) -> None:
        """A replica's answer to a scrape: each of its models' /metrics text."""
        self.posts[replica] = (epoch, texts)

    def live(self) -> dict[str, list[str]]:
        now = time.monotonic()
        for replica in [r for r, (t, _) in self.seen.items() if now - t > LIVE]:
            del self.seen[replica]
            self.posts.pop(replica, None)
        return {r: models for r, (_, models) in self.seen.items()}

    def scrape(self) -> tuple[int, list[str]]:
        """A new scrape: its number and the live replicas it waits for."""
        self.epoch += 1
        return self.epoch, list(self.live())

    def collected(self, epoch: int) -> dict[str, dict[str, str]]:
        return {r: texts for r, (e, texts) in self.posts.items() if e == epoch}


def board(app_name: str):
    """The application's board, created by whichever replica asks first; detached, so it
    outlives any one replica (Ray's shutdown ends it; serve-ray --address kills it on exit)."""
    return Board.options(name=board_name(app_name), namespace="llamacpy",
                         get_if_exists=True, lifetime="detached").remote()


def board_name(app_name: str) -> str:
    return f"llamacpy-board:{app_name}"
