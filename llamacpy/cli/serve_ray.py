"""llamacpy serve-ray: llama-server's API on a Ray Serve application.

usage: llamacpy serve-ray (-m MODEL | --models-dir DIR | --models-preset FILE)
                          [--replicas N | --autoscale MIN:MAX] [--target-ongoing-requests R]
                          [--max-ongoing-requests N] [--num-cpus C] [--address ADDR]
                          [--host HOST] [--port PORT] [llama-server flags...]

Starts a local Ray instance (or joins the cluster at --address, else $RAY_ADDRESS), then the
application: an ingress on --host:--port that answers as llama-server does, and N replicas of
the model deployment (C CPUs each, -t C threads unless -t is given), each serving up to
--models-max models by name. Needs `pip install llamacpy[ray]`. docs/SCALING.md has more.
"""

from __future__ import annotations

import signal
import sys
import threading

APP_NAME = "llamacpy"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if {"-h", "--help"} & set(argv):
        print(__doc__.strip() + "\n\nllama-server's flags: `llama-server --help`.")
        return 0
    from ..serve_ray.config import PROG, config_from_argv

    cfg = config_from_argv(argv, __doc__)  # a bad command line ends here, before Ray starts
    try:
        import ray
        from ray import serve
    except ImportError:
        print(f"{PROG}: error: Ray Serve is not installed: pip install 'llamacpy[ray]'",
              file=sys.stderr)
        return 1
    from ..serve_ray.app import build

    ray.init(address=cfg.address, include_dashboard=False, logging_level="WARNING",
             log_to_driver=False)
    stop = stop_on_signals()  # after ray.init, which installs handlers of its own
    try:
        serve.start(http_options={"host": cfg.host, "port": cfg.port,
                                  "keep_alive_timeout_s": cfg.timeout})
        serve.run(build(cfg), name=APP_NAME, route_prefix="/")
        print(f"{PROG}: serving {', '.join(cfg.models)} on http://{cfg.host}:{cfg.port} "
              f"({replicas_text(cfg)}); Ctrl-C stops", file=sys.stderr, flush=True)
        while not stop.wait(1.0):
            pass
    finally:
        if cfg.address:  # a shared cluster: remove our application (and its board) only
            serve.delete(APP_NAME)
            forget_board(ray)
        else:
            serve.shutdown()
        ray.shutdown()
    return 0


def forget_board(ray) -> None:
    from ..serve_ray.board import board_name

    try:
        ray.kill(ray.get_actor(board_name(APP_NAME), namespace="llamacpy"))
    except ValueError:
        pass  # never created: no replica started


def replicas_text(cfg) -> str:
    if cfg.autoscale is not None:
        return f"{cfg.autoscale[0]} to {cfg.autoscale[1]} replicas, autoscaled"
    return f"{cfg.replicas} replica{'s' if cfg.replicas > 1 else ''}"


def stop_on_signals() -> threading.Event:
    """An event that SIGINT or SIGTERM sets."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


if __name__ == "__main__":
    sys.exit(main())
