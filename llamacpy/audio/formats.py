"""whisper.cpp's output files, byte for byte (examples/cli/cli.cpp: output_txt, output_vtt,
output_srt, output_csv, output_json, output_lrc, output_score).

Every writer takes segments with `.start` and `.end` (seconds) and `.text` (the segment's text as
whisper.cpp keeps it, usually with a leading space) and returns the file's text. whisper.cpp
counts time in 10 ms ticks; seconds are rounded to those first.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, Protocol

from ..tokenizer.unicode import CHAR_TO_BYTE

# whisper.cpp's g_lang, in id order (the same as OpenAI whisper's LANGUAGES)
_LANGUAGE_CODES = (
    "en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no "
    "th ur hr bg lt la mi ml cy sk te fa lv bn sr az sl kn et mk br eu is hy ne mn bs kk sq sw "
    "gl mr pa si km sn yo so af oc ka be tg sd gu am yi lo uz fo ht ps tk nn mt sa lb my bo tl "
    "mg as tt haw ln ha ba jw su yue")
LANGUAGES = _LANGUAGE_CODES.split()


class Segment(Protocol):
    start: float  # seconds
    end: float  # seconds
    text: str


def ticks(seconds: float) -> int:
    """Seconds as whisper.cpp's int64 10 ms ticks (segment t0 / t1)."""
    return round(seconds * 100)


def timestamp(seconds: float, comma: bool = False) -> str:
    """to_timestamp (examples/common-whisper.cpp): HH:MM:SS.mmm, or HH:MM:SS,mmm for SRT."""
    ms = ticks(seconds) * 10
    sep = "," if comma else "."
    return f"{ms // 3600000:02d}:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d}{sep}{ms % 1000:03d}"


def to_txt(segments: Sequence[Segment]) -> str:
    """output_txt: each segment's text on its own line."""
    return "".join(f"{s.text}\n" for s in segments)


def to_vtt(segments: Sequence[Segment]) -> str:
    """output_vtt: WEBVTT header, then `start --> end` and the text, a blank line after each."""
    cues = (f"{timestamp(s.start)} --> {timestamp(s.end)}\n{s.text}\n\n" for s in segments)
    return "WEBVTT\n\n" + "".join(cues)


def to_srt(segments: Sequence[Segment], offset_n: int = 0) -> str:
    """output_srt: numbered from 1 (+ -on), HH:MM:SS,mmm times, a blank line after each."""
    return "".join(f"{i + 1 + offset_n}\n{timestamp(s.start, True)} --> "
                   f"{timestamp(s.end, True)}\n{s.text}\n\n" for i, s in enumerate(segments))


def to_csv(segments: Sequence[Segment]) -> str:
    """output_csv: start,end in milliseconds, the text quoted with "" for a quote (RFC 4180)."""
    rows = (f'{10 * ticks(s.start)},{10 * ticks(s.end)},"{s.text.replace(chr(34), 2 * chr(34))}"\n'
            for s in segments)
    return "start,end,text\n" + "".join(rows)


def to_lrc(segments: Sequence[Segment]) -> str:
    """output_lrc: `[mm:ss.xx]text` at each segment's start (minutes do not wrap at 60)."""
    def lrc_time(seconds: float) -> str:
        cs = ticks(seconds)
        return f"{cs // 6000:02d}:{cs // 100 % 60:02d}.{cs % 100:02d}"
    return "[by:whisper.cpp]\n" + "".join(f"[{lrc_time(s.start)}]{s.text}\n" for s in segments)


def c_float(x: float) -> str:
    """A float32 as C++'s `ostream << float` prints it (%g, six significant digits)."""
    return f'{struct.unpack("<f", struct.pack("<f", x))[0]:g}'


def to_json(header: dict[str, Any], transcription: list[dict[str, Any]]) -> str:
    """output_json's layout: tab-indented, `"key": value` lines; `header` holds systeminfo,
    model, params and result in that order (see json_header), `transcription` one object
    per segment (see json_segment)."""
    out: list[str] = []
    _json_obj(out, None, {**header, "transcription": transcription}, 0, True)
    return "".join(out)


def json_header(systeminfo: str, model: dict[str, Any], model_path: str, language: str,
                translate: bool, result_language: str) -> dict[str, Any]:
    """The fields before "transcription"; `model` is {type, multilingual, vocab, audio{ctx,
    state, head, layer}, text{ctx, state, head, layer}, mels, ftype} as whisper.cpp names them."""
    return {"systeminfo": systeminfo, "model": model,
            "params": {"model": model_path, "language": language, "translate": translate},
            "result": {"language": result_language}}


def times(start: float, end: float) -> dict[str, Any]:
    """times_o: timestamps{from,to} as HH:MM:SS,mmm and offsets{from,to} in milliseconds."""
    return {"timestamps": {"from": timestamp(start, True), "to": timestamp(end, True)},
            "offsets": {"from": 10 * ticks(start), "to": 10 * ticks(end)}}


def json_segment(seg: Segment, tokens: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One "transcription" entry; with -ojf `tokens` (see json_token) follow the text."""
    entry = {**times(seg.start, seg.end), "text": seg.text}
    return entry if tokens is None else {**entry, "tokens": tokens}


def json_token(text: str, token_id: int, p: float, t0: float | None = None,
               t1: float | None = None, t_dtw: float = -1.0) -> dict[str, Any]:
    """One -ojf token: text, its times when token timestamps are known, id, p and t_dtw
    (-1: no DTW timestamps)."""
    entry: dict[str, Any] = {"text": text}
    if t0 is not None and t1 is not None:
        entry.update(times(t0, t1))
    return {**entry, "id": token_id, "p": CFloat(p), "t_dtw": CFloat(t_dtw)}


class CFloat(float):
    """A float that output_json writes with C++'s stream format (value_f), not as an int."""


def _escape(s: str) -> str:
    # escape_double_quotes_and_backslashes: nothing else (control characters pass through)
    return s.replace("\\", "\\\\").replace('"', '\\"')


def _json_obj(out: list[str], name: str | None, obj: dict[str, Any], indent: int,
              last: bool) -> None:
    out.append("\t" * indent + ("{\n" if name is None else f'"{name}": {{\n'))
    items = list(obj.items())
    for i, (key, value) in enumerate(items):
        _json_value(out, key, value, indent + 1, i == len(items) - 1)
    out.append("\t" * indent + ("}\n" if last else "},\n"))


def _json_value(out: list[str], key: str, value: Any, indent: int, last: bool) -> None:
    if isinstance(value, dict):
        return _json_obj(out, key, value, indent, last)
    if isinstance(value, list):
        out.append("\t" * indent + f'"{key}": [\n')
        for i, item in enumerate(value):
            _json_obj(out, None, item, indent + 1, i == len(value) - 1)
        out.append("\t" * indent + ("]\n" if last else "],\n"))
        return None
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, CFloat):
        text = c_float(value)
    elif isinstance(value, int):
        text = str(value)
    else:
        text = f'"{_escape(str(value))}"'
    out.append("\t" * indent + f'"{key}": {text}' + ("\n" if last else ",\n"))
    return None


def to_score(tokens: Sequence[tuple[str, float]]) -> str:
    """output_score (-ls): each token's text, a tab and its probability."""
    return "".join(f"{text}\t{c_float(p)}\n" for text, p in tokens)


def cpp_token_bytes(vocab: list[str], sp, token_id: int) -> bytes:
    """whisper_token_to_str as whisper.cpp's own model files give it: the text of a text token,
    and for ids from <|endoftext|> on the names whisper_model_load makes up ([_BEG_], [_TT_n],
    [_LANG_en], ...), which -ojf, -ps and -pc print. `sp` is audio.vocab.SpecialTokens."""
    if token_id < sp.eot:
        return bytes(CHAR_TO_BYTE[ch] for ch in vocab[token_id])
    if token_id > sp.timestamp_begin:
        return f"[_TT_{token_id - sp.timestamp_begin}]".encode()
    names = {sp.eot: "EOT", sp.sot: "SOT", sp.translate: "TRANSLATE", sp.transcribe: "TRANSCRIBE",
             sp.sot_lm: "SOLM", sp.sot_prev: "PREV", sp.no_speech: "NOSP",
             sp.no_timestamps: "NOT", sp.timestamp_begin: "BEG"}
    if token_id in names:
        return f"[_{names[token_id]}_]".encode()
    lang = token_id - sp.sot - 1
    if 0 <= lang < len(LANGUAGES) and token_id < sp.translate:
        return f"[_LANG_{LANGUAGES[lang]}]".encode()
    return f"[_extra_token_{token_id}]".encode()
