"""The deployment files against their own references: deploy/serve_config.yaml and the
RayService's serveConfigV2 through Ray Serve's ServeDeploySchema and llamacpy's builder,
deploy/rayservice.yaml through KubeRay's RayService CRD schema (tests/serve_ray/data, from
ray-project/kuberay ray-operator/config/crd/bases at feeaf72f), the Dockerfile through
dockerfile-parse, and the base install's dependencies (no Ray)."""

from __future__ import annotations

import gzip
import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def ray_pin() -> str:
    pins = [d for d in PYPROJECT["project"]["optional-dependencies"]["ray"]
            if d.startswith("ray[")]
    return pins[0].split("==")[1]


def test_base_install_does_not_pull_ray():
    names = [re.split(r"[\[<>=!~; ]", d, maxsplit=1)[0].lower()
             for d in PYPROJECT["project"]["dependencies"]]
    assert "ray" not in names and names  # Ray only comes with the extra
    assert any(d.startswith("ray[serve]==") for d in
               PYPROJECT["project"]["optional-dependencies"]["ray"])
    assert PYPROJECT["project"]["optional-dependencies"]["ray"][0] in \
        PYPROJECT["project"]["optional-dependencies"]["test"]


def test_package_imports_without_ray():
    import subprocess
    import sys

    code = ("import sys, importlib.abc\n"
            "class NoRay(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path, target=None):\n"
            "        if name == 'ray' or name.startswith('ray.'): raise ImportError(name)\n"
            "sys.meta_path.insert(0, NoRay())\n"
            "import llamacpy.serve_ray, llamacpy.serve_ray.config, llamacpy.cli.main\n"
            "from llamacpy.cli import serve_ray\n"
            "sys.exit(serve_ray.main(['-m', 'smollm2-135m']))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       check=False)
    assert r.returncode == 1 and "pip install 'llamacpy[ray]'" in r.stderr


def serve_schema():
    return pytest.importorskip("ray.serve.schema", reason="Ray Serve (llamacpy[ray])")


def check_serve_config(config: dict, model_paths) -> None:
    """Ray's own schema accepts it, and its application builds with the deployments named."""
    schema = serve_schema()
    deploy = schema.ServeDeploySchema.model_validate(config)
    [app] = deploy.applications
    assert app.import_path == "llamacpy.serve_ray:app_builder"
    from llamacpy.serve_ray import app_builder

    built = app_builder(app.args)
    names = {d["name"] for d in config["applications"][0]["deployments"]}
    assert names == {"LlamaModel", "Ingress"}
    assert built._bound_deployment.name == "Ingress"


def test_serve_config_yaml(model_paths):
    check_serve_config(yaml.safe_load((ROOT / "deploy/serve_config.yaml").read_text()),
                       model_paths)


@pytest.fixture(scope="module")
def rayservice_spec():
    """A validator of KubeRay's v1 RayService spec (the CRD's openAPIV3Schema)."""
    jsonschema = pytest.importorskip("jsonschema")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # 1 MB of YAML: libyaml's parser
    crd = yaml.load(gzip.decompress((DATA / "ray.io_rayservices.yaml.gz").read_bytes()),
                    Loader=loader)
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return jsonschema.Draft4Validator(version["schema"]["openAPIV3Schema"]["properties"]["spec"])


def test_rayservice_manifest(model_paths, rayservice_spec):
    manifest = yaml.safe_load((ROOT / "deploy/rayservice.yaml").read_text())
    assert manifest["apiVersion"] == "ray.io/v1" and manifest["kind"] == "RayService"
    rayservice_spec.validate(manifest["spec"])
    cluster = manifest["spec"]["rayClusterConfig"]
    assert cluster["rayVersion"] == ray_pin()
    images = {c["image"] for g in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
              for c in g["template"]["spec"]["containers"]}
    assert len(images) == 1
    check_serve_config(yaml.safe_load(manifest["spec"]["serveConfigV2"]), model_paths)


def test_rayservice_schema_rejects_a_broken_manifest(rayservice_spec):
    broken = yaml.safe_load((ROOT / "deploy/rayservice.yaml").read_text())["spec"]
    broken["rayClusterConfig"]["workerGroupSpecs"][0]["replicas"] = "two"
    assert not rayservice_spec.is_valid(broken)
    del broken["rayClusterConfig"]["headGroupSpec"]["template"]
    errors = {e.message for e in rayservice_spec.iter_errors(broken)}
    assert "'template' is a required property" in errors


def test_dockerfile_names_existing_files():
    parse = pytest.importorskip("dockerfile_parse", reason="dockerfile-parse (test extra)")
    df = parse.DockerfileParser(path=str(ROOT / "Dockerfile"))
    steps = [s for s in df.structure if s["instruction"] != "COMMENT"]
    assert [s["instruction"] for s in steps[:2]] == ["ARG", "FROM"]
    assert re.fullmatch(r"python:3\.1[1-9]-slim", df.baseimage)  # requires-python >= 3.11
    copied = [s["value"].split()[:-1] for s in steps if s["instruction"] == "COPY"]
    sources = [src for srcs in copied for src in srcs]
    for src in sources:
        assert (ROOT / src).exists(), src
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    for src in sources:  # the context keeps what the Dockerfile copies
        assert f"!{src.rstrip('/')}/" in ignore or f"!{src}" in ignore, src
    run = " ".join(s["value"] for s in steps if s["instruction"] == "RUN")
    for script in re.findall(r"scripts/\S+", run):
        assert (ROOT / script).is_file()
    from llamacpy.hub import CATALOG, DEFAULT_MODEL

    assert df.args["MODEL"] == DEFAULT_MODEL and DEFAULT_MODEL in CATALOG
    assert "llamacpy pull" in run and "llamacpy warmup" in run
    cmd = next(s["value"] for s in steps if s["instruction"] == "CMD")
    argv = json.loads(cmd)
    port = next(s["value"] for s in steps if s["instruction"] == "EXPOSE")
    assert "llama-server" in argv[-1] and f"--port {port}" in argv[-1]
    scripts = PYPROJECT["project"]["scripts"]
    assert {"llama-server", "llamacpy"} <= set(scripts)
