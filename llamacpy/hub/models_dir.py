"""The models a router serves (llama-server without -m), from llama.cpp's three sources in its
order: the model cache (`llamacpy pull` models), --models-dir, then --models-preset's INI file
(common/preset.cpp: load_from_cache, load_from_models_dir, load_from_ini, cascade).

Each model becomes a ModelSpec: its files and the child llama-server options its preset gives.
Preset keys are flag names without dashes (long or short) or LLAMA_ARG_* names; a key llamacpy
does not know, cannot honour, or that the router sets itself is an error, never dropped.
"""

from __future__ import annotations

import configparser
from dataclasses import dataclass, field
from pathlib import Path

from .catalog import CATALOG, cache_dir

DRAFT_PREFIXES = ("mtp-", "dspark-", "dflash-")  # draft sidecars (preset.cpp draft_prefixes)
PRESET_ONLY = {"load-on-startup", "stop-timeout"}  # options of the router, not of the child
DEFAULT_STOP_TIMEOUT = 10  # seconds an unloading child has before it is killed
# dests the router sets for each child, or holds itself: a preset may not set them
ROUTER_DESTS = {"host", "port", "api_key", "api_key_file", "models_dir", "models_preset",
                "models_max", "models_autoload", "sleep_idle_seconds", "hf_repo", "log_file"}
FILE_DESTS = {"model": "path", "mmproj": "mmproj", "model_draft": "draft"}
TOP = "\0top"  # the INI section of the keys before the first [section]


class PresetError(ValueError):
    """A models folder or preset file the router cannot serve as written."""


@dataclass
class ModelSpec:
    """One model the router can start: its files, where it came from, its preset options."""

    name: str
    source: str  # "cache", "models_dir" or "preset" (llama.cpp's server_model_source)
    path: str = ""
    mmproj: str = ""
    draft: str = ""
    options: list[str] = field(default_factory=list)  # child flags from the preset
    aliases: list[str] = field(default_factory=list)
    load_on_startup: bool = False
    stop_timeout: int = DEFAULT_STOP_TIMEOUT

    def child_args(self) -> list[str]:
        """The flags that pick this model's files, then its preset options."""
        args = ["-m", self.path]
        if self.mmproj:
            args += ["--mmproj", self.mmproj]
        if self.draft:
            args += ["-md", self.draft]
        return args + self.options


def is_mmproj(name: str) -> bool:
    return "mmproj" in name


def is_draft(name: str) -> bool:
    return name.startswith(DRAFT_PREFIXES)


def cached_models() -> dict[str, ModelSpec]:
    """Catalogue models already in the cache (what `llamacpy pull` put there), by their name;
    the speech models too (their llama-server answers the audio routes)."""
    root = cache_dir()
    return {e.name: ModelSpec(e.name, "cache", str(root / e.file))
            for e in CATALOG.values() if (root / e.file).is_file()}


def scan_models_dir(folder: str | Path) -> dict[str, ModelSpec]:
    """llama.cpp's --models-dir scan, one level deep: a top-level *.gguf is a model named after
    its file; a subfolder is a model named after the folder, holding its projector (a name with
    'mmproj'), a draft (mtp-/dspark-/dflash-), the first shard of a split model (-00001-of-), or
    else its one model file."""
    folder = Path(folder)
    if not folder.is_dir():
        raise PresetError(f"'{folder}' does not exist or is not a directory")
    out: dict[str, ModelSpec] = {}
    for entry in sorted(folder.iterdir()):
        if entry.is_dir():
            spec = scan_subdir(entry)
            if spec is not None:
                out[spec.name] = spec
        elif entry.name.endswith(".gguf") and not is_mmproj(entry.name) \
                and not is_draft(entry.name):
            name = entry.name.replace(".gguf", "")
            out[name] = ModelSpec(name, "models_dir", str(entry))
    return out


def scan_subdir(folder: Path) -> ModelSpec | None:
    model = shard = mmproj = draft = ""
    for file in sorted(folder.iterdir()):
        if not file.name.endswith(".gguf") or file.is_dir():
            continue
        if is_mmproj(file.name):
            mmproj = str(file)
        elif is_draft(file.name):
            draft = draft or str(file)
        elif "-00001-of-" in file.name:
            shard = str(file)
        else:
            model = str(file)
    path = shard or model
    return ModelSpec(folder.name, "models_dir", path, mmproj, draft) if path else None


# -- presets ---------------------------------------------------------------------------------

def read_ini(path: str | Path) -> dict[str, dict[str, str]]:
    """Sections of an INI file (keys before the first section go to the default one)."""
    parser = configparser.ConfigParser(interpolation=None, strict=False,
                                       comment_prefixes=(";", "#"), default_section="\0")
    parser.optionxform = str  # keys keep their case (LLAMA_ARG_* names)
    try:
        text = Path(path).read_text(encoding="utf-8")
        parser.read_string(f"[{TOP}]\n" + text, source=str(path))
    except (OSError, configparser.Error) as e:
        raise PresetError(f"cannot read the preset file {path}: {e}") from None
    return {name: dict(parser[name]) for name in parser.sections()}


def flag_for_key(key: str):
    """The llama-server Flag a preset key names (a flag name without dashes, or its env)."""
    from ..cli.args import FLAGS

    for flag in FLAGS:
        if "server" in flag.tools and (key == flag.env or key in
                                       {n.lstrip("-") for n in flag.names}):
            return flag
    return None


def truthy(value: str) -> bool | None:
    v = value.strip().lower()
    return True if v in ("1", "true", "on", "yes", "enabled") else \
        False if v in ("0", "false", "off", "no", "disabled") else None


def switch_args(flag, key: str, value: str) -> list[str]:
    """A switch set to true or false: its own name, or the switch of the same setting that
    says the opposite (jinja = false -> --no-jinja)."""
    from ..cli.args import FLAGS, SWITCH

    on = truthy(value)
    if on is None:
        raise PresetError(f"option '{key}' takes true or false, not '{value}'")
    want = flag.const if on else not flag.const
    match = next((f for f in FLAGS if f.dest == flag.dest and f.type is SWITCH
                  and "server" in f.tools and f.const == want), None)
    if match is None:
        raise PresetError(f"option '{key}' cannot be set to '{value}'")
    return [match.names[-1]]


def apply_option(spec: ModelSpec, section: str, key: str, value: str) -> None:
    """One preset key into the spec: a file, the router's own option, or child flags."""
    from ..cli.args import NOT_SUPPORTED, SWITCH

    if key == "version":
        return
    if key in PRESET_ONLY:
        if key == "load-on-startup":
            on = truthy(value)
            if on is None:
                raise PresetError(f"option '{key}' takes true or false, not '{value}'")
            spec.load_on_startup = on
        else:
            try:
                spec.stop_timeout = int(value)
            except ValueError:
                raise PresetError(f"option 'stop-timeout' takes seconds, not '{value}'") from None
        return
    if "--" + key in NOT_SUPPORTED or "-" + key in NOT_SUPPORTED:
        raise PresetError(f"option '{key}' in preset '{section}' is not supported by "
                          f"llamacpy yet")
    flag = flag_for_key(key)
    if flag is None:
        raise PresetError(f"option '{key}' not recognized in preset '{section}'")
    if flag.dest in ROUTER_DESTS:
        raise PresetError(f"option '{key}' in preset '{section}' is the router's to set, not "
                          f"a model's")
    if flag.dest in FILE_DESTS:
        setattr(spec, FILE_DESTS[flag.dest], value)
    elif flag.dest == "alias":
        spec.aliases = [a.strip() for a in value.split(",") if a.strip()]
    elif flag.type is SWITCH:
        spec.options += switch_args(flag, key, value)
    else:
        spec.options += [flag.names[-1], value]


def read_preset(path: str | Path) -> tuple[ModelSpec, dict[str, ModelSpec]]:
    """(the [*] section's options, {name: spec}) from an INI preset file."""
    sections = read_ini(path)
    glob = ModelSpec("*", "preset")
    out: dict[str, ModelSpec] = {}
    for name, items in sections.items():
        if name == TOP and not set(items) - {"version"}:
            continue
        name = "default" if name == TOP else name  # keys before any section: llama.cpp's name
        spec = glob if name == "*" else ModelSpec(name, "preset")
        for key, value in items.items():
            apply_option(spec, name, key, value.strip())
        if name != "*":
            out[name] = spec
    return glob, out


def merge(base: ModelSpec, extra: ModelSpec) -> ModelSpec:
    """`extra`'s settings over `base`'s (options later on the command line win), named
    after `extra`."""
    return ModelSpec(extra.name, extra.source, extra.path or base.path,
                     extra.mmproj or base.mmproj, extra.draft or base.draft,
                     base.options + extra.options, extra.aliases or base.aliases,
                     extra.load_on_startup or base.load_on_startup,
                     extra.stop_timeout if extra.stop_timeout != DEFAULT_STOP_TIMEOUT
                     else base.stop_timeout)


def discover(models_dir: str | None, preset: str | None) -> dict[str, ModelSpec]:
    """Every model the router serves, by name: the cache, then --models-dir (a name in both is
    the folder's), then the preset's sections (merged into a model of that name, else new: a
    new one needs `model`); the [*] section goes under every model's own options."""
    found = cached_models()
    if models_dir:
        found.update(scan_models_dir(models_dir))
    glob = ModelSpec("*", "preset")
    if preset:
        glob, sections = read_preset(preset)
        for name, spec in sections.items():
            if name in found:
                found[name] = merge(found[name], spec)
            elif not spec.path:
                raise PresetError(f"preset '{name}' names no known model: give it `model = "
                                  f"PATH`")
            else:
                found[name] = spec
    if glob.path or glob.mmproj or glob.draft:
        raise PresetError("the [*] preset section cannot set model files")
    out = {name: merge(glob, spec) for name, spec in found.items()}
    check_names(out)
    return out


def check_names(models: dict[str, ModelSpec]) -> None:
    """Aliases route requests, so none may name another model (server_models::add_model)."""
    seen: dict[str, str] = {}
    for name, spec in models.items():
        for alias in spec.aliases:
            if alias in models or alias in seen:
                raise PresetError(f"alias '{alias}' for model '{name}' conflicts with model "
                                  f"'{seen.get(alias, alias)}'")
            seen[alias] = name
