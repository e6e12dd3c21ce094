"""Speech to text over HTTP: OpenAI's POST /v1/audio/transcriptions and /v1/audio/translations,
and whisper.cpp's POST /inference and /load (examples/server/server.cpp), for whisper-server
and for llama-server started with a whisper model.

A request is a multipart form. Its fields are checked and its audio decoded before anything is
queued, so a bad upload is a 400 that touches nothing else; then one worker thread, the only
user of the model and its caches, transcribes the queued jobs in turn. OpenAI's routes answer
in llama.cpp's error shape, whisper.cpp's in its own ({"error": "..."}).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import queue
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from ..audio.formats import to_srt, to_txt, to_vtt
from .app import Gate, cors, error
from .params import RequestError

MAX_UPLOAD = 512 << 20  # bytes of one request (an hour of 16-bit 48 kHz stereo is ~660 MB)
FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
TOKEN_TIMES = {"max_len": 0, "split_on_word": False, "thold_pt": 0.01}  # whisper.cpp's defaults
PROGRESS_STEP = 5  # percent between progress lines (whisper.cpp's progress_step)
WHISPER_LANGUAGES = (  # whisper's LANGUAGES (code:name, _ for a space), for verbose_json
    "en:english zh:chinese de:german es:spanish ru:russian ko:korean fr:french ja:japanese "
    "pt:portuguese tr:turkish pl:polish ca:catalan nl:dutch ar:arabic sv:swedish it:italian "
    "id:indonesian hi:hindi fi:finnish vi:vietnamese he:hebrew uk:ukrainian el:greek ms:malay "
    "cs:czech ro:romanian da:danish hu:hungarian ta:tamil no:norwegian th:thai ur:urdu "
    "hr:croatian bg:bulgarian lt:lithuanian la:latin mi:maori ml:malayalam cy:welsh sk:slovak "
    "te:telugu fa:persian lv:latvian bn:bengali sr:serbian az:azerbaijani sl:slovenian "
    "kn:kannada et:estonian mk:macedonian br:breton eu:basque is:icelandic hy:armenian "
    "ne:nepali mn:mongolian bs:bosnian kk:kazakh sq:albanian sw:swahili gl:galician "
    "mr:marathi pa:punjabi si:sinhala km:khmer sn:shona yo:yoruba so:somali af:afrikaans "
    "oc:occitan ka:georgian be:belarusian tg:tajik sd:sindhi gu:gujarati am:amharic "
    "yi:yiddish lo:lao uz:uzbek fo:faroese ht:haitian_creole ps:pashto tk:turkmen nn:nynorsk "
    "mt:maltese sa:sanskrit lb:luxembourgish my:myanmar bo:tibetan tl:tagalog mg:malagasy "
    "as:assamese tt:tatar haw:hawaiian ln:lingala ha:hausa ba:bashkir jw:javanese "
    "su:sundanese yue:cantonese")
LANGUAGE_NAMES = dict(p.replace("_", " ").split(":") for p in WHISPER_LANGUAGES.split())


class NotSupported(RequestError):
    def __init__(self, message: str):
        super().__init__(message, "not_supported_error")


# -- the worker ---------------------------------------------------------------------------------

class WhisperWorker:
    """The one thread that owns the whisper model: jobs (transcriptions, a /load) run in the
    order they were queued, so no two ever use the model's caches at once."""

    def __init__(self, load: Callable[[str], Any], log: Callable[[str], None]):
        self.load_fn, self.log = load, log
        self.jobs: queue.Queue = queue.Queue()
        self.loaded: Any = None  # what load_fn returned: (GGUFFile, WhisperModel)
        self.thread = threading.Thread(target=self._run, name="llamacpy-whisper", daemon=True)
        self.thread.start()

    def submit(self, fn: Callable[[Any], Any]) -> Future:
        """Run fn(loaded) on the worker; the future holds its result or its exception."""
        future: Future = Future()
        self.jobs.put((fn, future))
        return future

    def load(self, path: str) -> Future:
        """Swap in another model once the jobs queued before it are done."""
        def swap(_old):
            self.loaded = self.load_fn(path)
            return self.loaded
        return self.submit(swap)

    def _run(self) -> None:
        from ..kernels import apply_threads_here

        apply_threads_here()  # -t: numba's thread count is per thread
        while True:
            fn, future = self.jobs.get()
            if fn is None:
                return
            if not future.set_running_or_notify_cancel():
                continue  # its client went away while it waited
            try:
                future.set_result(fn(self.loaded))
            except BaseException as e:  # noqa: BLE001 - the job's failure is its request's
                future.set_exception(e)

    def stop(self) -> None:
        self.jobs.put((None, None))


# -- the state -----------------------------------------------------------------------------------

@dataclass
class AudioConfig:
    model_path: str
    alias: str = ""
    api_keys: list[str] = field(default_factory=list)
    defaults: dict = field(default_factory=dict)  # TranscribeOptions fields from the command line
    tool: str = "whisper-server"
    verbosity: int = 3
    inference_path: str = "/inference"
    request_path: str = ""  # --request-path: a prefix for every route
    print_progress: bool = False  # -pp: progress lines for every file, not only long ones
    offset_n: int = 0  # -on: SRT numbers start at 1 + offset_n
    token_times: dict = field(default_factory=lambda: dict(TOKEN_TIMES))  # -ml, -sow, -wt
    warmup: bool = False  # llama-server's warm-up: a second of silence transcribed at load


class AudioState:
    """What the routes share: the configuration, the worker and the loaded model's facts."""

    def __init__(self, cfg: AudioConfig):
        self.cfg = cfg
        self.api_keys = set(cfg.api_keys)
        self.alias = cfg.alias or os.path.basename(cfg.model_path)
        self.ready = False
        self.t_start = time.time()
        self.worker = WhisperWorker(load_whisper, self.log)

    def log(self, message: str) -> None:
        if self.cfg.verbosity >= 3:
            print(f"{self.cfg.tool}: {message}", file=sys.stderr, flush=True)

    def load(self) -> None:
        """Load the model on the worker thread and wait for it (call from a background thread);
        the command line's options must suit it (a ValueError names the first that does not)."""
        from ..audio.transcribe import SpecialTokens, check_options, transcribe

        g, _ = self.worker.load(self.cfg.model_path).result()
        options = make_options(self.cfg.defaults)
        check_options(options, SpecialTokens.from_gguf(g))
        if self.cfg.warmup:
            silence = np.zeros(16000, np.float32)
            self.worker.submit(lambda m: transcribe(m[0], m[1], silence, options)).result()
        self.ready = True

    @property
    def model(self):
        return self.worker.loaded[1]

    def stop(self) -> None:
        self.worker.stop()


# llama-server flags that mean something for a whisper model (llama-server refuses the others)
SPEECH_FLAGS = {"model", "alias", "api_key", "api_key_file", "host", "port", "threads",
                "threads_http", "timeout", "verbose", "verbosity", "log_disable", "warmup"}


def is_whisper(model: str | None) -> bool:
    """Whether a path or catalogue name is a whisper GGUF (one header read; any failure: no)."""
    from ..format import GGUFError, open_gguf
    from ..hub import resolve_model

    try:
        with open_gguf(resolve_model(model)) as g:
            return g.get("general.architecture") == "whisper"
    except (OSError, GGUFError, ValueError, KeyError, TypeError):
        return False


def load_whisper(path: str):
    """(GGUFFile, WhisperModel) of a whisper GGUF; anything else is a ValueError."""
    from ..format import open_gguf
    from ..models.whisper import WhisperModel

    g = open_gguf(path)
    if g.get("general.architecture") != "whisper":
        raise ValueError(f"{path} is not a whisper model (architecture "
                         f"'{g.get('general.architecture')}')")
    return g, WhisperModel(g)


# -- request fields ------------------------------------------------------------------------------

async def read_form(request: Request) -> dict[str, list]:
    """The multipart (or url-encoded) form, each field's values in order; a body that is not a
    form, too large or malformed is a RequestError."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind not in ("multipart/form-data", "application/x-www-form-urlencoded"):
        raise RequestError(f"the request must be multipart/form-data with an audio 'file' "
                           f"field, not {kind or 'a body without a Content-Type'}")
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > MAX_UPLOAD:
        raise RequestError(f"the request body is larger than {MAX_UPLOAD >> 20} MiB", status=413)
    try:
        form = await request.form(max_files=8, max_fields=128)
    except HTTPException as e:
        raise RequestError(f"malformed form data: {e.detail}") from None
    except Exception as e:  # noqa: BLE001 - python-multipart's parse errors vary
        raise RequestError(f"malformed form data: {e}") from None
    fields: dict[str, list] = {}
    for key, value in form.multi_items():
        fields.setdefault(key, []).append(value)
    return fields


async def upload(fields: dict[str, list]) -> tuple[str, bytes]:
    """(file name, bytes) of the 'file' field."""
    files = fields.pop("file", [])
    if not files:
        raise RequestError("no 'file' field in the request")
    if len(files) > 1 or not isinstance(files[0], UploadFile):
        raise RequestError("'file' must be one uploaded audio file")
    data = await files[0].read()
    if len(data) > MAX_UPLOAD:
        raise RequestError(f"the file is larger than {MAX_UPLOAD >> 20} MiB", status=413)
    if not data:
        raise RequestError("the uploaded file is empty")
    return files[0].filename or "audio", data


def text_field(fields: dict[str, list], name: str) -> str | None:
    values = fields.pop(name, [])
    if len(values) > 1:
        raise RequestError(f"'{name}' is given {len(values)} times")
    if values and not isinstance(values[0], str):
        raise RequestError(f"'{name}' must be a text field, not a file")
    return values[0] if values else None


def number(fields: dict[str, list], name: str, kind: type, low: float | None = None,
           high: float | None = None):
    """A numeric form field (None when absent) within [low, high]."""
    text = text_field(fields, name)
    if text is None:
        return None
    try:
        value = kind(text.strip())
    except ValueError:
        raise RequestError(f"'{name}' must be {'an integer' if kind is int else 'a number'}, "
                           f"not {text!r}") from None
    if not np.isfinite(value) or (low is not None and value < low) or \
            (high is not None and value > high):
        raise RequestError(f"'{name}' must be between {low} and {high}, not {text}")
    return value


def flag(fields: dict[str, list], name: str) -> bool | None:
    """whisper.cpp's parse_str_to_bool: true, 1, yes and y are true, anything else false."""
    text = text_field(fields, name)
    return None if text is None else text.strip().lower() in ("true", "1", "yes", "y")


def response_format(fields: dict[str, list], default: str) -> str:
    fmt = text_field(fields, "response_format") or default
    if fmt not in FORMATS:
        raise RequestError(f"unknown response_format '{fmt}' (one of {', '.join(FORMATS)})")
    return fmt


def refuse_unknown(fields: dict[str, list]) -> None:
    if fields:
        raise RequestError(f"unknown field{'s' if len(fields) > 1 else ''}: "
                           f"{', '.join(sorted(fields))}")


# -- audio -----------------------------------------------------------------------------------

def decode_audio(data: bytes, filename: str) -> np.ndarray:
    """16 kHz mono float32 samples of an uploaded file (WAV, or what ffmpeg reads when it is on
    PATH); anything else is a RequestError."""
    from ..audio.wav import AudioError, load_audio

    suffix = os.path.splitext(filename)[1][:16] if "." in filename else ""
    with tempfile.NamedTemporaryFile(suffix=suffix) as fh:
        fh.write(data)
        fh.flush()
        try:
            audio = load_audio(fh.name)
        except (AudioError, OSError, ValueError) as e:
            raise RequestError(f"failed to read audio: {str(e).replace(fh.name, filename)}") \
                from None
    if audio.size == 0:
        raise RequestError("failed to read audio: the file holds no samples")
    return audio


# -- transcription ---------------------------------------------------------------------------

@dataclass
class Job:
    """One validated request: its audio, options and how to answer."""

    audio: np.ndarray  # float32 [samples] at 16 kHz
    options: Any  # audio.transcribe.TranscribeOptions
    response_format: str
    name: str  # the upload's file name, for the log
    offset_n: int = 0  # whisper.cpp's -on: the first SRT number is 1 + offset_n
    oai: bool = True  # OpenAI's shapes (else whisper.cpp's)
    token_times: dict | None = None  # with_token_times' thold_pt, max_len, split_on_word


def make_options(defaults: dict, **given):
    """TranscribeOptions from the server's defaults and a request's fields (None: not given)."""
    from ..audio.transcribe import TranscribeOptions

    return TranscribeOptions(**{**defaults, **{k: v for k, v in given.items() if v is not None}})


def check_job(state: AudioState, options) -> None:
    """Options the loaded model cannot honour are a 400 before anything is queued."""
    from ..audio.transcribe import SpecialTokens, check_options, languages

    g = state.worker.loaded[0]
    sp = SpecialTokens.from_gguf(g)
    try:
        check_options(options, sp)
    except ValueError as e:
        raise NotSupported(str(e)) from None
    known = languages(g)
    if sp.multilingual and options.language != "auto" and options.language not in known:
        raise RequestError(f"unknown language '{options.language}'")


def progress_logger(state: AudioState, job: Job) -> Callable[[int], None] | None:
    """Progress lines every PROGRESS_STEP percent, for audio longer than one 30 s window (or
    every file with -pp)."""
    if len(job.audio) <= 30 * 16000 and not state.cfg.print_progress:
        return None
    last = [0]

    def report(percent: int) -> None:
        if percent >= last[0] + PROGRESS_STEP:
            last[0] = percent - percent % PROGRESS_STEP
            state.log(f"'{job.name}': progress = {percent:3d}%")
    return report


async def run_job(state: AudioState, job: Job):
    """Queue the job on the worker and wait for its TranscribeResult."""
    from ..audio.transcribe import transcribe

    check_job(state, job.options)
    o = job.options
    state.log(f"processing '{job.name}' ({len(job.audio)} samples, {len(job.audio) / 16000:.1f} "
              f"sec), lang = {o.language}, task = {'translate' if o.translate else 'transcribe'}"
              f", timestamps = {int(not o.no_timestamps)}")
    report = progress_logger(state, job)
    t0 = time.perf_counter()

    def work(loaded):
        result = transcribe(loaded[0], loaded[1], job.audio, o, report)
        return result if job.token_times is None else timed(loaded[0], result, job)
    try:
        result = await asyncio.wrap_future(state.worker.submit(work))
    except ValueError as e:  # an option the model swapped in by /load cannot take
        raise RequestError(str(e)) from None
    state.log(f"'{job.name}': {len(result.segments)} segments in "
              f"{time.perf_counter() - t0:.2f} s")
    return result


def timed(g, result, job: Job):
    """The result with whisper.cpp's token times (and its segments wrapped at max_len)."""
    from ..audio.token_times import with_token_times
    from ..audio.transcribe import SpecialTokens

    segments = with_token_times(result.segments, job.audio, g.require("tokenizer.ggml.tokens"),
                                SpecialTokens.from_gguf(g), **job.token_times)
    return dataclasses.replace(result, segments=segments)


def words(result) -> list[dict]:
    """OpenAI's `words`: tokens joined into words (a new one at a leading space), each from its
    first token's start to its last token's end (whisper.cpp's token times)."""
    out: list[dict] = []
    for s in result.segments:
        for i, t in enumerate(text_tokens(s)):
            if i == 0 or t.text.startswith(" "):
                out.append({"word": "", "start": t.t0, "end": t.t1})
            out[-1]["word"] += t.text
            out[-1]["end"] = t.t1
    return [{**w, "word": w["word"].strip()} for w in out]


def text_tokens(segment) -> list:
    return [t for t in segment.tokens if t.id < segment.eot]


def verbose_json(result, job: Job) -> dict:
    """OpenAI's verbose_json (openai-whisper's transcribe() result) or whisper.cpp's (its
    server's: `words` with each token's probability)."""
    task = "translate" if job.options.translate else "transcribe"
    body = {"task": task, "language": LANGUAGE_NAMES.get(result.language, result.language),
            "duration": result.duration,
            "text": result.text.strip() if job.oai else to_txt(result.segments),
            "segments": []}
    for i, s in enumerate(result.segments):
        seg = {"id": i, "text": s.text}
        if job.oai:
            seg = {"id": i, "seek": s.seek, "start": s.start, "end": s.end, "text": s.text,
                   "tokens": [t.id for t in text_tokens(s)], "temperature": s.temperature,
                   "avg_logprob": s.avg_logprob, "compression_ratio": s.compression_ratio,
                   "no_speech_prob": s.no_speech_prob}
        else:
            if not job.options.no_timestamps:
                seg |= {"start": s.start, "end": s.end}
            seg |= {"tokens": [t.id for t in text_tokens(s)],
                    "words": [token_word(t) for t in text_tokens(s)],
                    "temperature": s.temperature, "avg_logprob": s.avg_logprob}
        body["segments"].append(seg)
    if job.oai and job.token_times is not None:
        body["words"] = words(result)
    if job.oai:
        body["usage"] = usage(result)
    return body


def token_word(t) -> dict:
    """whisper.cpp's per-token "word" entry; its times only where token timestamps exist."""
    word = {"word": t.text}
    if t.t0 is not None and t.t1 is not None:
        word |= {"start": t.t0, "end": t.t1}
    return word | {"probability": t.p}


def usage(result) -> dict:
    return {"type": "duration", "seconds": int(np.ceil(result.duration))}


def answer(result, job: Job) -> Response:
    """The transcript in the asked format (OpenAI's or whisper.cpp's shapes and media types)."""
    fmt, segments = job.response_format, result.segments
    if fmt == "text":
        body = result.text.strip() + "\n" if job.oai else to_txt(segments)
        return PlainTextResponse(body, media_type="text/plain" if job.oai else "text/html",
                                 headers=cors())
    if fmt == "srt":
        return PlainTextResponse(to_srt(segments, job.offset_n), headers=cors(),
                                 media_type="text/plain" if job.oai else "application/x-subrip")
    if fmt == "vtt":
        return PlainTextResponse(to_vtt(segments), media_type="text/vtt", headers=cors())
    if fmt == "verbose_json":
        return JSONResponse(verbose_json(result, job), headers=cors())
    if job.oai:
        return JSONResponse({"text": result.text.strip(), "usage": usage(result)},
                            headers=cors())
    return JSONResponse({"text": to_txt(segments)}, headers=cors())


# -- routes ------------------------------------------------------------------------------------

OAI_FIELDS = ("model", "language", "prompt", "response_format", "temperature")


def granularities(fields: dict[str, list], fmt: str) -> bool:
    """timestamp_granularities[]: "segment" is what every answer has; True when "word" asks
    for `words` too."""
    values = fields.pop("timestamp_granularities[]", []) + \
        fields.pop("timestamp_granularities", [])
    for v in values:
        if v not in ("segment", "word"):
            raise RequestError(f"unknown timestamp granularity '{v}' (segment or word)")
    if values and fmt != "verbose_json":
        raise RequestError("timestamp_granularities needs response_format 'verbose_json'")
    return "word" in values


def oai_job(state: AudioState, fields: dict[str, list], task: str, audio: np.ndarray,
            name: str) -> Job:
    text_field(fields, "model")  # any name: apps send whisper-1, the loaded model answers
    language = text_field(fields, "language") if task == "transcribe" else None
    prompt = text_field(fields, "prompt")
    fmt = response_format(fields, "json")
    temperature = number(fields, "temperature", float, 0.0, 1.0)
    word_times = granularities(fields, fmt)
    if flag(fields, "stream"):
        raise NotSupported("stream: streamed transcriptions are not supported")
    refuse_unknown(fields)
    if language is None:  # OpenAI detects the spoken language (translations never name it)
        language = "auto" if state.worker.loaded[0].get("whisper.multilingual") else "en"
    options = make_options(state.cfg.defaults, language=language, prompt=prompt,
                           temperature=temperature, translate=task == "translate")
    return Job(audio, options, fmt, name,
               token_times={"thold_pt": 0.01} if word_times else None)


def oai_route(task: str):
    async def route(request: Request) -> Response:
        """POST /v1/audio/transcriptions or /v1/audio/translations (OpenAI's API)."""
        state: AudioState = request.app.state.audio
        fields = await read_form(request)
        name, data = await upload(fields)
        audio = await asyncio.to_thread(decode_audio, data, name)
        job = oai_job(state, fields, task, audio, name)
        return answer(await run_job(state, job), job)
    return route


def inference_job(state: AudioState, fields: dict[str, list], audio: np.ndarray,
                  name: str) -> Job:
    """whisper.cpp's get_req_parameters: the fields its /inference reads, over the server's
    defaults; the ones that need what llamacpy lacks are refused when they ask for it."""
    for name_, needs in (("diarize", "stereo diarization"), ("tinydiarize", "a tdrz model"),
                         ("debug_mode", "debug dumps")):
        if flag(fields, name_):
            raise NotSupported(f"{name_} needs {needs}, which llamacpy does not support")
    wrap = {"max_len": number(fields, "max_len", int, 0),
            "split_on_word": flag(fields, "split_on_word"),
            "thold_pt": number(fields, "word_thold", float, 0.0, 1.0)}
    max_context = number(fields, "max_context", int, -1)
    beam_size = number(fields, "beam_size", int, -1, 8)
    detect = flag(fields, "detect_language")
    o = make_options(
        state.cfg.defaults, offset_ms=number(fields, "offset_t", int, 0),
        duration_ms=number(fields, "duration", int, 0),
        n_max_text_ctx=max_context if max_context is not None and max_context >= 0 else None,
        best_of=number(fields, "best_of", int, 1, 8),
        beam_size=None if beam_size is None else max(1, beam_size),
        audio_ctx=number(fields, "audio_ctx", int, 0),
        entropy_thold=number(fields, "entropy_thold", float),
        logprob_thold=number(fields, "logprob_thold", float),
        no_speech_thold=number(fields, "no_speech_thold", float),
        translate=flag(fields, "translate"), no_timestamps=flag(fields, "no_timestamps"),
        suppress_nst=flag(fields, "suppress_nst"),
        language="auto" if detect else text_field(fields, "language"),
        prompt=text_field(fields, "prompt"),
        temperature=number(fields, "temperature", float, 0.0, 1.0),
        temperature_inc=number(fields, "temperature_inc", float, 0.0, 1.0))
    offset_n = number(fields, "offset_n", int)
    fmt = response_format(fields, "json")
    refuse_unknown(fields)
    return Job(audio, o, fmt, name, state.cfg.offset_n if offset_n is None else offset_n, False,
               inference_token_times(state, fmt, o, wrap))


def inference_token_times(state: AudioState, fmt: str, o, wrap: dict) -> dict | None:
    """whisper.cpp's server computes token times for verbose_json with timestamps only, and
    wraps its segments at max_len (0: 60 characters) there; elsewhere these fields do nothing,
    so asking for them there is refused."""
    wrap = {k: state.cfg.token_times[k] if v is None else v for k, v in wrap.items()}
    if fmt == "verbose_json" and not o.no_timestamps:
        return {**wrap, "max_len": wrap["max_len"] or 60}
    given = [k for k, v in wrap.items() if v != TOKEN_TIMES[k]]
    if given:
        raise NotSupported(f"{given[0].replace('thold_pt', 'word_thold')} applies only to "
                           "verbose_json with timestamps (the token times whisper.cpp computes)")
    return None


async def inference(request: Request) -> Response:
    """POST /inference (whisper.cpp's server)."""
    state: AudioState = request.app.state.audio
    fields = await read_form(request)
    name, data = await upload(fields)
    audio = await asyncio.to_thread(decode_audio, data, name)
    job = inference_job(state, fields, audio, name)
    return answer(await run_job(state, job), job)


async def load(request: Request) -> Response:
    """POST /load: another model (a path or a catalogue name) replaces the loaded one once the
    queued requests are done; a file that does not load leaves the old model in place."""
    from ..hub import resolve_model

    state: AudioState = request.app.state.audio
    fields = await read_form(request)
    model = text_field(fields, "model")
    if not model:
        raise RequestError("no 'model' field in the request")
    refuse_unknown(fields)
    try:
        path = str(resolve_model(model))
    except (OSError, ValueError, KeyError):
        path = model
    if not os.path.isfile(path):
        raise RequestError("model not found!")
    try:
        await asyncio.wrap_future(state.worker.load(path))
    except Exception as e:  # noqa: BLE001 - the old model stays; the reason is the answer
        raise RequestError(f"cannot load '{model}': {e}") from None
    state.cfg.model_path, state.alias = path, state.cfg.alias or os.path.basename(path)
    state.log(f"loaded {path}")
    return PlainTextResponse("Load was successful!", media_type="application/text")


async def health(request: Request) -> Response:
    state: AudioState = request.app.state.audio
    if not state.ready:
        return JSONResponse({"error": {"code": 503, "message": "Loading model",
                                       "type": "unavailable_error"}}, 503)
    if not state.worker.thread.is_alive():
        return error("the whisper worker has stopped", "unavailable_error")
    return JSONResponse({"status": "ok"})


async def models(request: Request) -> Response:
    state: AudioState = request.app.state.audio
    entry = {"id": state.alias, "object": "model", "created": int(state.t_start),
             "owned_by": "llamacpp", "meta": {"architecture": "whisper"}}
    return JSONResponse({"object": "list", "data": [entry]})


PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>whisper-server</title></head>
<body><h1>whisper-server (llamacpy)</h1>
<form action="{path}" method="POST" enctype="multipart/form-data">
<p><label>Audio file: <input type="file" name="file" accept="audio/*" required></label></p>
<p><label>Temperature: <input type="number" name="temperature" value="0.0" step="0.01"></label></p>
<p><label>Response format: <select name="response_format"><option>json</option>
<option>verbose_json</option><option>text</option><option>srt</option><option>vtt</option>
</select></label></p><p><button type="submit">Transcribe</button></p></form></body></html>
"""


async def index(request: Request) -> Response:
    state: AudioState = request.app.state.audio
    return HTMLResponse(PAGE.format(path=state.cfg.request_path + state.cfg.inference_path))


def oai_errors(fn):
    """llama.cpp's error shape; whatever escapes is a 500 of the request alone."""
    async def wrapped(request: Request) -> Response:
        try:
            return await fn(request)
        except RequestError as e:
            return error(str(e), e.kind, e.status)
        except Exception as e:  # noqa: BLE001 - a bad request never takes the server down
            return error(f"{type(e).__name__}: {e}", "server_error")
    return wrapped


def whisper_errors(fn):
    """whisper.cpp's error shape, {"error": "..."}, with a 4xx / 500 status."""
    async def wrapped(request: Request) -> Response:
        try:
            return await fn(request)
        except RequestError as e:
            return JSONResponse({"error": str(e)}, e.status, headers=cors())
        except Exception as e:  # noqa: BLE001 - a bad request never takes the server down
            return JSONResponse({"error": f"{type(e).__name__}: {e}"}, 500, headers=cors())
    return wrapped


async def llm_only(request: Request) -> Response:
    state: AudioState = request.app.state.audio
    return error(f"{request.url.path} needs a language model; '{state.alias}' is a speech-to-"
                 f"text (whisper) model: use /v1/audio/transcriptions or /inference")


def routes(cfg: AudioConfig) -> list[Route]:
    from . import app as llm
    from .embeddings import ROUTES as EMBEDDINGS

    pre = cfg.request_path
    own = [("/health", health, ["GET"], oai_errors), ("/v1/health", health, ["GET"], oai_errors),
           ("/models", models, ["GET"], oai_errors), ("/v1/models", models, ["GET"], oai_errors),
           ("/v1/audio/transcriptions", oai_route("transcribe"), ["POST"], oai_errors),
           ("/v1/audio/translations", oai_route("translate"), ["POST"], oai_errors),
           (cfg.inference_path, inference, ["POST"], whisper_errors),
           ("/load", load, ["POST"], whisper_errors), ("/", index, ["GET"], oai_errors)]
    taken = {p for p, *_ in own}
    out = [Route(pre + p, wrap(fn), methods=m) for p, fn, m, wrap in own]
    return out + [Route(p, llm_only, methods=m) for p, _, m in llm.ROUTES + EMBEDDINGS
                  if p not in taken]


def build_audio_app(state: AudioState):
    """The ASGI app: API keys and the loading state first (server/app.py's Gate)."""
    from . import app as llm

    app = Starlette(routes=routes(state.cfg),
                    exception_handlers={404: llm.not_found, Exception: llm.internal_error})
    app.state.audio = state
    app.state.static = (False, "")
    return Gate(app, state)
