"""general.* metadata and the default file name, derived as llama.cpp derives them (gguf-py
metadata.py Metadata.load, utility.py size_label / naming_convention): from the README model card,
config.json's `_name_or_path`, the folder name and generation_config.json.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .safetensors import ConvertError

# (general.* key suffix, model card keys in llama.cpp's order of preference)
CARD_FIELDS = [
    ("name", ("name", "model_name")), ("author", ("author", "model_author", "model_creator")),
    ("version", ("version", "model_version")),
    ("organization", ("organization", "model_organization")),
    ("description", ("description", "model_description")),
    ("finetune", ("finetune", "model_finetune")),
    ("basename", ("basename", "model_basename", "model_type")),
    ("size_label", ("size_label", "model_size_label")),
    ("source.url", ("url", "model_url")), ("source.doi", ("doi", "model_doi")),
    ("source.uuid", ("uuid", "model_uuid")), ("source.repo_url", ("repo_url", "model_repo_url")),
]
# generation_config.json field -> (general.sampling.* key, GGUF value type: 'i' int32, 'f' float32)
SAMPLING_FIELDS = [
    ("sequence", "sequence", "s"), ("top_k", "top_k", "i"), ("top_p", "top_p", "f"),
    ("min_p", "min_p", "f"), ("xtc_probability", "xtc_probability", "f"),
    ("xtc_threshold", "xtc_threshold", "f"), ("temperature", "temp", "f"),
    ("penalty_last_n", "penalty_last_n", "i"), ("penalty_repeat", "penalty_repeat", "f"),
    ("mirostat", "mirostat", "i"), ("mirostat_tau", "mirostat_tau", "f"),
    ("mirostat_eta", "mirostat_eta", "f"),
]
ORDER = ["name", "author", "version", "organization", "finetune", "basename", "description",
         "quantized_by", "size_label", "license", "license.name", "license.link", "url", "doi",
         "uuid", "repo_url", "source.url", "source.doi", "source.uuid", "source.repo_url"]


def load_model_card(model_dir: Path) -> dict[str, Any]:
    """The README's YAML front matter (llama.cpp: Metadata.load_model_card)."""
    path = model_dir / "README.md"
    if not path.is_file():
        return {}
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0] != "---":
        return {}
    body = []
    for line in lines[1:]:
        if line == "---":
            break
        body.append(line)
    text = ("\n".join(body) + "\n").replace("- no\n", '- "no"\n').replace("\t", "  ")
    try:
        import yaml
    except ImportError:
        raise ConvertError("README.md has a YAML model card: install pyyaml to read it") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConvertError(f"README.md: bad YAML front matter ({e})") from None
    return data if isinstance(data, dict) else {}


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def id_to_title(s: str) -> str:
    return " ".join(w.title() if w.islower() and not re.match(r"^(v\d+(?:\.\d+)*|\d.*)$", w)
                    else w for w in s.strip().replace("-", " ").split())


def _size_part(part: str, total_params: int, types: set[str]) -> str:
    part = part.replace("_", ".")
    if part[-1].isdecimal():  # bloom-7b1 notation
        part = part[:-2] + "." + part[-1] + part[-2]
    if len(part) > 1 and part[-2].isdecimal() and part[-1] in "kmbt":
        part = part[:-1] + part[-1].upper()
    if total_params != 0:
        try:
            label = float(part[:-1]) * pow(1000, " KMBT".find(part[-1]))
            if (total_params < 0 and label < abs(total_params) // 8) or (
                    total_params > 0 and abs(label - total_params) > 7 * total_params // 8):
                types.add("finetune")  # likely a context length
                part = part[:-1] + part[-1].lower()
        except ValueError:
            pass
    if not types:
        types.add("size_label")
    return part


def _annotate(parts: list[str], total_params: int) -> list[set[str]]:
    types: list[set[str]] = [set() for _ in parts]
    for i, part in enumerate(parts):
        if re.fullmatch(r"(v|iter)?\d+([.]\d+)*", part, re.IGNORECASE):
            types[i].add("version")
        elif re.fullmatch(r"i?q\d(_\w)*|b?fp?(16|32)", part, re.IGNORECASE):
            types[i].add("type")
            parts[i] = part.upper()
        elif i > 0 and re.fullmatch(r"(([A]|\d+[x])?\d+([._]\d+)?[KMBT][\d]?|small|mini|medium"
                                    r"|large|x?xl)", part, re.IGNORECASE):
            parts[i] = _size_part(part, total_params, types[i])
        elif i > 0 and re.fullmatch(r"chat|instruct|vision|lora", part, re.IGNORECASE):
            types[i].add("type" if total_params < 0 and part.lower() == "lora" else "finetune")
    if any(c.isdecimal() for n, t in zip(parts, types) if "size_label" in t for c in n):
        for n, t in zip(parts, types):
            if "size_label" in t and all(c.isalpha() for c in n):
                t.remove("size_label")
    at_start = True
    for part, t in zip(parts, types):
        if at_start and ((not t and part[0].isalpha()) or "version" in t):
            t.add("basename")
        else:
            at_start = False
            if not t:
                t.add("finetune")
    for t in reversed(types):
        if "basename" in t and len(t) > 1:
            t.remove("basename")
        else:
            break
    return types


def model_id_components(model_id: str | None, total_params: int = 0) -> tuple:
    """(name, organization, basename, finetune, version, size_label) of a Hugging Face id
    (llama.cpp: Metadata.get_model_id_components)."""
    if model_id is None:
        return (None,) * 6
    if " " in model_id:
        return (model_id,) + (None,) * 5
    org, full = model_id.split("/", 1) if "/" in model_id else (None, model_id)
    if org and org[0] == ".":
        org = None
    parts = [p for p in full.split("-") if p]
    types = _annotate(parts, total_params)

    def join(kind: str, exclude: str = "") -> str | None:
        picked = [p for p, t in zip(parts, types) if kind in t and exclude not in t]
        return "-".join(dict.fromkeys(picked) if kind == "size_label" else picked) or None

    basename, size = join("basename"), join("size_label")
    finetune, version = join("finetune"), join("version", exclude="basename")
    if size is None and finetune is None and version is None:
        basename = None
    return full, org, basename, finetune, version, size


def _from_id(meta: dict[str, Any], model_id: str, total_params: int) -> None:
    full, org, basename, finetune, version, size = model_id_components(model_id, total_params)
    found = {"name": full and id_to_title(full), "organization": org and id_to_title(org),
             "basename": basename, "finetune": finetune, "version": version, "size_label": size}
    for key, value in found.items():
        if meta.get(key) is None and value is not None:
            meta[key] = value


def _sources(values: Any, total_params: int) -> list[dict]:
    """base_model / datasets entries: URLs, Hugging Face ids or dicts (apply_metadata_heuristic)."""
    out = []
    for item in [values] if isinstance(values, str) else list(values or []):
        entry: dict[str, Any] = {}
        if isinstance(item, dict):
            entry = item
        elif isinstance(item, str) and item.startswith(("http://", "https://", "ssh://")):
            entry["repo_url"] = item
            m = re.match(r"https?://huggingface.co/([^/]+/[^/]+)$", item)
            if "huggingface.co" in item and m:
                full, org, _, _, version, _ = model_id_components(m.group(1), total_params)
                entry.update(_title_fields(full, org, version))
        elif isinstance(item, str):
            full, org, _, _, version, _ = model_id_components(item, total_params)
            entry.update(_title_fields(full, org, version))
            if org is not None and full is not None:
                entry["repo_url"] = f"https://huggingface.co/{org}/{full}"
        out.append(entry)
    return out


def _title_fields(full: str | None, org: str | None, version: str | None) -> dict[str, str]:
    fields = {"name": full and id_to_title(full), "organization": org and id_to_title(org),
              "version": version}
    return {k: v for k, v in fields.items() if v is not None}


def _card_lists(meta: dict[str, Any], card: dict[str, Any], total_params: int) -> None:
    for key, names in (("base_models", ("base_model", "base_models", "base_model_sources")),
                       ("datasets", ("datasets", "dataset", "dataset_sources"))):
        if any(n in card for n in names):
            value = card.get(names[0], card.get(names[1], card.get(names[2])))
            meta[key] = _sources(value, total_params)
    for key, names in (("license", ("license",)), ("license.name", ("license_name",)),
                       ("license.link", ("license_link",))):
        if names[0] in card and meta.get(key) is None:
            meta[key] = card[names[0]]
    for key, names in (("tags", ("tags", "pipeline_tag")),
                       ("languages", ("languages", "language"))):
        for n in names:
            value = card.get(n)
            if value is not None:
                items = meta.setdefault(key, [])
                items.extend([value] if isinstance(value, str) else value if isinstance(value, list)
                             else [])


def derive_metadata(model_dir: Path, total_params: int, model_name: str | None = None
                    ) -> dict[str, Any]:
    """general.* fields, before the size label fallback (Metadata.load with no override file)."""
    card, meta = load_model_card(model_dir), {}
    for key, names in CARD_FIELDS:
        for n in names:
            if n in card and meta.get(key) is None:
                meta[key] = card[n]
    _card_lists(meta, card, total_params)
    name_or_path = _json(model_dir / "config.json").get("_name_or_path")
    if isinstance(name_or_path, str) and name_or_path.count("/") <= 1:
        _from_id(meta, name_or_path, total_params)
    _from_id(meta, model_dir.name, total_params)
    gen = _json(model_dir / "generation_config.json")
    repeat = gen.get("penalty_repeat", gen.get("repetition_penalty"))
    for field, key, _ in SAMPLING_FIELDS:
        value = repeat if key == "penalty_repeat" else gen.get(field)
        if value is not None:
            meta[f"sampling.{key}"] = value
    if model_name is not None:
        meta["name"] = model_name
    return meta


def weight_count_label(n: int, min_digits: int = 2) -> str:
    """llama.cpp's model_weight_count_rounded_notation: 135M, 1.5B, 23M."""
    for limit, scale, suffix in ((1e12, 1e-12, "T"), (1e9, 1e-9, "B"), (1e6, 1e-6, "M")):
        if n > limit:
            break
    else:
        scale, suffix = 1e-3, "K"
    scaled = n * scale
    fix = max(min_digits - len(str(round(scaled)).lstrip("0")), 0)
    return f"{scaled:.{fix}f}{suffix}"


def naming_convention(meta: dict[str, Any], output_type: str | None, kind: str | None = None,
                      with_size: bool = True) -> str:
    """llama.cpp's default output name: <basename|name>-<size>-<finetune>-<version>-<TYPE>."""
    base = meta.get("basename") or meta.get("name")
    name = base.strip().replace(" ", "-").replace("/", "-") if base else "ggml-model"
    parts = [name]
    if with_size and meta.get("size_label"):
        parts.append(meta["size_label"])
    for key in ("finetune", "version"):
        if meta.get(key) is not None:
            parts.append(meta[key].strip().replace(" ", "-"))
    if output_type is not None:
        parts.append(output_type.strip().replace(" ", "-").upper())
    if kind is not None:
        parts.append(kind)
    return "-".join(parts)


SOURCE_KEYS = ("name", "author", "version", "organization", "description", "url", "doi", "uuid",
               "repo_url")


def write_general(kv, meta: dict[str, Any]) -> None:
    """general.* keys in Metadata.set_gguf_meta_model's order and value types."""
    for _, key, kind in SAMPLING_FIELDS:
        value = meta.get(f"sampling.{key}")
        if value is not None:
            {"s": kv.string, "i": kv.put_i32, "f": kv.f32}[kind](f"general.sampling.{key}", value)
    for key in ORDER:
        value = meta.get(key)
        if value is None:
            continue
        if key == "license" and isinstance(value, list):
            value = ",".join(value)
        kv.string(f"general.{key}", str(value) if not isinstance(value, str) else value)
    for group, prefix in (("base_models", "base_model"), ("datasets", "dataset")):
        entries = meta.get(group)
        if entries is None:
            continue
        kv.u32(f"general.{prefix}.count", len(entries))
        for i, entry in enumerate(entries):
            for field in SOURCE_KEYS:
                if field in entry:
                    kv.string(f"general.{prefix}.{i}.{field}", entry[field])
    for key in ("tags", "languages"):
        if meta.get(key) is not None:
            kv.array(f"general.{key}", meta[key])
