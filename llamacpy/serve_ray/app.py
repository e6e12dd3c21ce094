"""The application: the ingress bound to the model deployment, from an AppConfig (the CLI) or
from a serve_config.yaml's args (`serve run` / `serve deploy`, import_path
llamacpy.serve_ray:app_builder)."""

from __future__ import annotations

import contextlib
import io
import shlex

from ray.serve import Application

from .config import AppConfig, config_from_argv
from .ingress import Ingress
from .replica import LlamaModel

ARGS = {"argv"}  # the keys a serve_config.yaml's `args:` may hold


def build(cfg: AppConfig) -> Application:
    """Ingress -> LlamaModel, sized as the config says (a YAML's `deployments:` may resize)."""
    models = LlamaModel.options(**cfg.model_options()).bind(
        cfg.models, cfg.flags, cfg.models_max, cfg.metrics,
        (cfg.default_model(),) if cfg.single else ())
    return Ingress.bind(models, cfg)


def app_builder(args: dict) -> Application:
    """`serve run` / `serve deploy`'s builder: args.argv is a serve-ray command line (a list,
    or one string), e.g. ["-m", "qwen2.5-coder-0.5b", "-np", "4", "--metrics"]."""
    unknown = set(args) - ARGS
    if unknown:
        raise ValueError(f"unknown serve-ray args {sorted(unknown)}: give `argv`, a serve-ray "
                         f"command line")
    argv = args.get("argv", [])
    argv = shlex.split(argv) if isinstance(argv, str) else [str(a) for a in argv]
    return build(checked_config(argv))


def checked_config(argv: list[str]) -> AppConfig:
    """config_from_argv, its one-line refusal raised as a ValueError (Serve shows it)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return config_from_argv(argv)
    except SystemExit:
        raise ValueError(err.getvalue().strip() or "bad serve-ray arguments") from None
