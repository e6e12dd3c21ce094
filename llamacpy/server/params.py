"""Request bodies to engine tasks: field names, defaults and validation as llama.cpp's server
(tools/server/server-task.cpp params_from_json_cmpl, server-common.cpp oaicompat parsers).

A bad field raises RequestError, answered as 400 invalid_request_error.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

from ..sampling import SamplingParams


class RequestError(ValueError):
    """A malformed request: 400 invalid_request_error with this message."""


def parse_body(raw: bytes) -> dict:
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RequestError(f"Invalid JSON in request body: {e}") from None
    if not isinstance(data, dict):
        raise RequestError("the request body must be a JSON object")
    return data


def expect(data: dict, key: str, kinds: tuple, default: Any = None) -> Any:
    """data[key] if it has one of `kinds` (bool is not an int here), else the default."""
    if key not in data or data[key] is None:
        return default
    value = data[key]
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if not ok:
        names = "/".join(k.__name__ for k in kinds)
        raise RequestError(f"'{key}' must be of type {names}")
    return value


NUMBER = (int, float)


@dataclass
class Completion:
    """What a completion or chat request asks for, before tokenization."""

    params: SamplingParams
    n_predict: int = -1
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    ignore_eos: bool = False
    n_probs: int = 0
    post_sampling_probs: bool = False
    logprobs: bool = False  # OpenAI-style logprobs requested
    cache_prompt: bool = True
    id_slot: int = -1
    return_tokens: bool = False
    model: str = ""


SAMPLING_NUMBERS = ("temperature", "temp", "top_p", "min_p", "typical_p", "typ_p",
                    "repeat_penalty", "presence_penalty", "frequency_penalty", "dry_multiplier",
                    "dry_base", "xtc_probability", "xtc_threshold", "mirostat_tau",
                    "mirostat_eta", "dynatemp_range", "dynatemp_exponent", "top_n_sigma")
SAMPLING_INTS = ("top_k", "repeat_last_n", "dry_allowed_length", "dry_penalty_last_n",
                 "mirostat", "seed", "min_keep")


def sampling_from(data: dict, base: SamplingParams) -> SamplingParams:
    for key in SAMPLING_NUMBERS:
        expect(data, key, NUMBER)
    for key in SAMPLING_INTS:
        expect(data, key, (int,))
    fields = {k: v for k, v in data.items() if v is not None}
    if "samplers" in fields and not isinstance(fields["samplers"], (list, str)):
        raise RequestError("'samplers' must be a list of sampler names or a string")
    try:
        return SamplingParams.from_dict(fields, base=base)
    except (ValueError, TypeError, KeyError) as e:
        raise RequestError(str(e)) from None


def stop_list(data: dict) -> list[str]:
    stop = data.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return stop
    raise RequestError("'stop' must be a string or a list of strings")


def completion_from(data: dict, base: SamplingParams, default_n_predict: int,
                    oaicompat: bool, ignore_eos: bool = False) -> Completion:
    """Shared fields of /completion, /v1/completions and /v1/chat/completions (ignore_eos: the
    server's default, --ignore-eos)."""
    n_predict = expect(data, "n_predict", (int,), None)
    for key in ("max_tokens", "max_completion_tokens"):
        n_predict = expect(data, key, (int,), n_predict)
    c = Completion(params=sampling_from(data, base))
    c.n_predict = default_n_predict if n_predict is None else n_predict
    c.stop = stop_list(data)
    c.stream = bool(expect(data, "stream", (bool,), False))
    options = expect(data, "stream_options", (dict,), {})
    c.include_usage = bool(options.get("include_usage", False))
    c.ignore_eos = bool(expect(data, "ignore_eos", (bool,), ignore_eos))
    c.cache_prompt = bool(expect(data, "cache_prompt", (bool,), True))
    c.id_slot = expect(data, "id_slot", (int,), -1)
    c.post_sampling_probs = bool(expect(data, "post_sampling_probs", (bool,), False))
    c.return_tokens = bool(expect(data, "return_tokens", (bool,), False))
    c.model = expect(data, "model", (str,), "")
    c.n_probs = expect(data, "n_probs", (int,), 0)
    if oaicompat:
        logprobs = data.get("logprobs")
        if isinstance(logprobs, bool):  # chat: logprobs + top_logprobs
            c.logprobs = logprobs
            c.n_probs = expect(data, "top_logprobs", (int,), 0) if logprobs else 0
        elif isinstance(logprobs, int):  # completions: logprobs = number of alternatives
            c.logprobs, c.n_probs = True, logprobs
        c.params.n_probs = c.n_probs
    if c.n_probs < 0 or c.n_probs > 100:
        raise RequestError("n_probs / top_logprobs must be between 0 and 100")
    return c


def messages_from(data: dict) -> list[dict]:
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' is required and must be a non-empty array")
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RequestError("each message must be an object with a string 'role'")
        content = m.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise RequestError("message 'content' must be a string or an array of parts")
        for part in content if isinstance(content, list) else []:
            if not isinstance(part, dict) or "type" not in part:
                raise RequestError("each content part must be an object with a 'type'")
            if part["type"] not in ("text", "image_url", "input_audio"):
                raise RequestError(f"unsupported content part type '{part['type']}'")
    return messages


NO_IMAGES = ("image input is not supported - hint: if this is unexpected, you may need to "
             "provide the mmproj")
NO_AUDIO = ("audio input is not supported - hint: if this is unexpected, you may need to "
            "provide the mmproj")


def load_media(messages: list[dict], allow_image: bool, marker: str) -> tuple[list[dict],
                                                                               list[bytes]]:
    """Messages with each image part replaced by a media-marker text part, and the images'
    bytes in prompt order (server-common.cpp: oaicompat_content_load_media)."""
    out, files = [], []
    for m in messages:
        if isinstance(m.get("content"), list):
            m = dict(m, content=[media_part(p, allow_image, marker, files) for p in m["content"]])
        out.append(m)
    return out, files


def media_part(part: dict, allow_image: bool, marker: str, files: list[bytes]) -> dict:
    if part["type"] == "input_audio":
        raise RequestError(NO_AUDIO)
    if part["type"] != "image_url":
        return part
    if not allow_image:
        raise RequestError(NO_IMAGES)
    image_url = part.get("image_url")
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    if not isinstance(url, str) or not url:
        raise RequestError("'image_url' must have a non-empty 'url'")
    files.append(media_bytes(url))
    return {"type": "media_marker", "text": marker}


def media_bytes(url: str) -> bytes:
    """The file a URL carries: a base64 data URL or raw base64 (handle_media). Remote and local
    URLs are refused: this server has no network and no --media-path."""
    if url.startswith("http"):
        raise RequestError("Failed to download image: llamacpy does not fetch remote URLs; "
                           "send the image as a base64 data URL")
    if url.startswith("file://"):
        raise RequestError("file:// URLs are not allowed unless --media-path is specified")
    if url.startswith("data:"):
        parts = url.split(",")
        if len(parts) != 2:
            raise RequestError("Invalid uri-encoded base64 value")
        if not parts[0].startswith(("data:image/", "data:video/", "data:audio/")):
            raise RequestError(f"Invalid uri format: {parts[0]}")
        if not parts[0].endswith("base64"):
            raise RequestError("uri must be base64 encoded")
        url = parts[1]
    return base64_decode(url)


def base64_decode(text: str) -> bytes:
    try:
        data = base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise RequestError("Invalid base64 value") from None
    if not data:
        raise RequestError("Invalid base64 value")
    return data
