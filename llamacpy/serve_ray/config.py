"""What a serve-ray application serves, read from llama-server's own command line (the CLI's
argv, or a serve_config.yaml's `args.argv`), with nothing of Ray imported: the models by name
(-m MODEL, or --models-dir / --models-preset discovered as router mode does it), each
replica's llama-server flags, and the deployments' replicas or autoscaling.

Every flag is honoured or refused: llama-server's go to each replica as given (checked here
first, as llama-server checks them at start); the router's --models-max is the per-replica
model limit; the flags Serve cannot honour (--no-models-autoload, --sleep-idle-seconds,
--log-file) end the tool with one line.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

from ..cli.args import ArgumentParser, fail, parse_args
from ..hub.models_dir import ROUTER_DESTS, ModelSpec, PresetError, discover

PROG = "llamacpy serve-ray"
INGRESS_MAX_ONGOING = 1024  # HTTP requests one ingress replica relays at once
# our deployments never block their event loop (loads and engines run in threads), so Serve
# need not hand every streamed chunk between its loop and a user-code thread
SERVE_ENV = {"RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0"}
REFUSED = {  # dest -> why serve-ray cannot honour it
    "models_autoload": "Serve loads a model on a replica when a request names it",
    "sleep_idle_seconds": "Serve keeps each replica's models until its LRU limit evicts them",
    "log_file": "replicas log to Ray's session folder (/tmp/ray/session_latest/logs)",
}


@dataclass
class AppConfig:
    """One serve-ray application: its models and how its two deployments are sized."""

    models: dict[str, ModelSpec]  # name -> files and per-model flags
    flags: list[str]  # llama-server flags every replica gets (no -m, address or keys)
    single: bool  # -m: every request goes to the one model, whatever its "model" says
    api_keys: list[str] = field(default_factory=list)
    metrics: bool = False
    webui: bool = True
    static_path: str = ""
    host: str = "127.0.0.1"
    port: int = 8080
    timeout: int = 600  # --timeout: HTTP keep-alive seconds
    models_max: int = 1  # models one replica holds (LRU beyond)
    replicas: int = 1
    autoscale: tuple[int, int] | None = None
    target_ongoing: float = 0  # autoscaling: requests per replica (0: its -np slots)
    max_ongoing: int = 0  # requests a replica takes at once (0: twice its -np slots)
    num_cpus: float = 1.0  # CPUs Ray reserves per model replica
    n_parallel: int = 1
    address: str | None = None  # --address: join this Ray cluster
    env: dict[str, str] = field(default_factory=dict)  # LLAMA_ARG_* for the replicas

    def model_options(self) -> dict:
        """The model deployment's Serve options."""
        opts = {"max_ongoing_requests": self.max_ongoing or 2 * self.n_parallel,
                "ray_actor_options": {"num_cpus": self.num_cpus,
                                      "runtime_env": {"env_vars": {**SERVE_ENV, **self.env}}}}
        if self.autoscale is None:
            opts["num_replicas"] = self.replicas
        else:
            lo, hi = self.autoscale
            opts["autoscaling_config"] = {
                "min_replicas": lo, "max_replicas": hi, "initial_replicas": lo,
                "target_ongoing_requests": self.target_ongoing or self.n_parallel}
        return opts

    def default_model(self) -> str | None:
        return next(iter(self.models)) if self.single else None


def own_parser() -> argparse.ArgumentParser:
    """serve-ray's own flags; everything else is llama-server's."""
    p = ArgumentParser(prog=PROG, add_help=False, allow_abbrev=False)
    p.add_argument("--replicas", type=int, default=None)
    p.add_argument("--autoscale", type=autoscale_range, default=None)
    p.add_argument("--target-ongoing-requests", dest="target_ongoing", type=float, default=0)
    p.add_argument("--max-ongoing-requests", dest="max_ongoing", type=int, default=0)
    p.add_argument("--num-cpus", dest="num_cpus", type=float, default=1.0)
    p.add_argument("--address", default=None)
    return p


def autoscale_range(text: str) -> tuple[int, int]:
    lo, sep, hi = text.partition(":")
    if not (sep and lo.isdigit() and hi.isdigit()) or not 0 <= int(lo) <= int(hi) or \
            int(hi) < 1:
        raise argparse.ArgumentTypeError(f"--autoscale takes MIN:MAX replicas (0 <= MIN <= MAX, "
                                         f"MAX >= 1), not '{text}'")
    return int(lo), int(hi)


def config_from_argv(argv: list[str], description: str = "") -> AppConfig:
    """The application a serve-ray command line describes (ends the tool on a bad one)."""
    own, rest = own_parser().parse_known_args(argv)
    if own.replicas is not None and own.autoscale is not None:
        fail(PROG, "give --replicas N or --autoscale MIN:MAX, not both")
    if own.replicas is not None and own.replicas < 1:
        fail(PROG, f"--replicas must be at least 1, not {own.replicas}")
    if own.num_cpus <= 0:
        fail(PROG, f"--num-cpus must be above 0, not {own.num_cpus:g}")
    args = parse_args("server", PROG, description, rest)
    for dest, why in REFUSED.items():
        if dest in args.given:
            fail(PROG, f"{flag_name(dest)} is not supported with serve-ray: {why}")
    if "threads" not in args.given:  # a replica's share, not every core of its host
        rest = rest + ["-t", str(max(1, int(own.num_cpus)))]
    try:
        models, flags = served_models(args, rest)
    except (ValueError, OSError) as e:
        fail(PROG, str(e))
    from ..cli.server import api_keys

    return AppConfig(
        models=models, flags=flags, single=bool(args.model), api_keys=api_keys(args),
        metrics=args.metrics, webui=args.webui, static_path=args.static_path, host=args.host,
        port=args.port, timeout=args.timeout,
        models_max=1 if args.model else max(0, args.models_max) or len(models),
        replicas=own.replicas or 1, autoscale=own.autoscale, target_ongoing=own.target_ongoing,
        max_ongoing=own.max_ongoing, num_cpus=own.num_cpus, n_parallel=max(1, args.parallel),
        address=own.address, env=replica_env())


def served_models(args: argparse.Namespace, argv: list[str]) -> tuple[dict, list[str]]:
    """name -> ModelSpec, and the flags every replica gets; the flags are checked now, as a
    replica would check them at its load."""
    from ..cli.server import server_config
    from ..server.audio import is_whisper
    from ..server.router import ROUTER_ONLY, check_child_flags, child_flags

    if args.model:
        for dest in ROUTER_ONLY:
            if dest in args.given:
                fail(PROG, f"{flag_name(dest)} goes with --models-dir: -m serves one model")
        cfg = server_config(args)  # resolves (or pulls) the model, checks every flag
        name = cfg.alias or cfg.model_path.rsplit("/", 1)[-1]
        flags = child_flags(argv, ROUTER_DESTS | {"model"})
        return {name: ModelSpec(name, "model", cfg.model_path)}, flags
    if not (args.models_dir or args.models_preset):
        raise ValueError("give -m MODEL or --models-dir DIR (or --models-preset FILE)")
    check_child_flags(args)
    try:
        models = discover(args.models_dir, args.models_preset)
    except PresetError as e:
        raise ValueError(str(e)) from None
    # speech models (router mode routes /v1/audio/* to them) have no llama-server replica here
    speech = [name for name, spec in models.items() if is_whisper(spec.path)]
    for name in speech:
        print(f"{PROG}: skipping '{name}': a whisper model (serve it with whisper-server or "
              "llama-server)", file=sys.stderr)
        del models[name]
    if not models:
        raise ValueError(f"no models found in '{args.models_dir}'")
    return models, child_flags(argv)


def flag_name(dest: str) -> str:
    from ..server.router import flag_names

    return flag_names(dest)


def replica_env() -> dict[str, str]:
    """The LLAMA_ARG_* variables of this shell, for replicas on any node (a local Ray would
    inherit them; a cluster's nodes would not)."""
    from ..server.router import child_env

    return {k: v for k, v in child_env().items() if k.startswith("LLAMA_ARG_")}

