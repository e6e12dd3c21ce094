"""llama-server's HTTP API on a Ray Serve application (`pip install llamacpy[ray]`): an ingress
deployment in front of a model deployment whose replicas each run llama-server's engine and
app, several models multiplexed by name. `llamacpy serve-ray` starts it; serve_config.yaml's
import_path is llamacpy.serve_ray:app_builder. docs/SCALING.md has the cluster recipes."""


def app_builder(args: dict):
    """`serve run` / `serve deploy` entry point (imports Ray only when called)."""
    from .app import app_builder as build

    return build(args)
