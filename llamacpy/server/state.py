"""Everything the routes share: configuration, the loaded model and tokenizer, the chat template,
the engine thread, and the documents behind /props and /metrics."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..chat import CHATML_TEMPLATE, ChatTemplate, template_source
from ..chat.tools import ToolPlan, detect_format, plan_tools, prepare_messages, template_extras
from ..hub import default_chat_template
from ..format import open_gguf
from ..grammar import Grammar
from ..models import load_model
from ..sampling import SamplingParams
from ..tokenizer import Tokenizer
from ..engine.prompt import Prompt
from ..engine.warmup import Source, warm_up
from ..kernels import apply_threads_here
from ..vision import ImageError, load_projector
from ..vision.mtmd import MtmdContext, media_marker
from ..engine.context import Context
from ..engine.embedding import Embedder, EmbeddingWorker
from ..engine.draft_model import build_speculator
from ..engine.scheduler import Scheduler
from ..engine.speculative import SpecConfig
from .params import NO_IMAGES, Completion, RequestError, base64_decode, load_media, messages_from


@dataclass
class ServerConfig:
    model_path: str
    alias: str = ""
    n_ctx: int = 4096
    n_parallel: int = 1
    n_batch: int = 2048
    n_ubatch: int = 512
    n_predict: int = -1
    type_k: str = "f16"
    type_v: str = "f16"
    flash_attn: str = "auto"  # -fa on / off / auto (a quantized V cache turned auto on)
    repack: bool = False
    load_mode: str = "auto"  # -lm: how the model's weights are held (format/reader.py)
    context_shift: bool = False  # --context-shift: a full context drops old tokens, goes on
    n_keep: int = 0  # --keep: prompt tokens a context shift keeps (-1: all); requests' default
    cache_reuse: int = 0  # --cache-reuse: least cached chunk moved into place (0: off)
    cache_ram: int = 8192  # --cache-ram MiB for idle slots' prompts (0: off, -1: no limit)
    api_keys: list[str] = field(default_factory=list)
    host: str = "127.0.0.1"  # --host: on loopback the Ollama routes check the Host header
    webui: bool = True
    static_path: str = ""  # --path: a folder served at / instead of the built-in page
    metrics: bool = False
    slots: bool = True
    chat_template: str | None = None
    chat_template_kwargs: dict = field(default_factory=dict)
    reasoning_format: str = "auto"
    reasoning: str = "auto"  # on / off / auto: enable_thinking in the template
    reasoning_budget: int = -1
    sampling: SamplingParams = field(default_factory=SamplingParams)
    sampling_given: set[str] | None = None  # fields the command line set; None: those != default
    mmproj: str | None = None  # --mmproj: the vision projector
    image_min_tokens: int = -1
    image_max_tokens: int = -1
    warmup: bool = True  # --no-warmup skips the load-time warm-up decode
    n_threads: int = -1  # -t: decode threads (-1: every core)
    n_threads_batch: int = -1  # -tb: prompt-batch threads (-1: as n_threads)
    n_threads_http: int = -1  # --threads-http: request worker threads (-1: the default pool)
    ignore_eos: bool = False  # --ignore-eos: the default for every request
    verbosity: int = 3  # -lv / -v (verbose: debug logs) / --log-disable (-1: no logs)
    grammar: Grammar | None = None  # --grammar / -j: for requests that bring none of their own
    grammar_source: str = ""
    speculative: SpecConfig | None = None  # --spec-type / -md: drafts verified in each step
    embedding: bool = False  # --embedding: serve embeddings (completion routes refuse)
    pooling: str | None = None  # --pooling (None: the model's); --rerank sets "rank"
    embd_normalize: int = 2  # --embd-normalize: the default for embedding requests


class ServerState:
    def __init__(self, cfg: ServerConfig):
        self.cfg = cfg
        self.api_keys = set(cfg.api_keys)
        self.alias = cfg.alias or cfg.model_path.rsplit("/", 1)[-1]
        self.ready = False
        self.load_error: str | None = None
        self.t_start = time.time()
        self.engine: Scheduler | None = None
        self.on_engine_failure = lambda reason: None  # the process decides (llama-server exits)
        self.thread: threading.Thread | None = None
        self.mtmd: MtmdContext | None = None
        self.grammar = cfg.grammar
        self.embeddings: EmbeddingWorker | None = None  # --embedding: server/embeddings.py

    # -- loading ---------------------------------------------------------------------------------

    def load(self) -> None:
        """Open the model and start the engine thread (call from a background thread)."""
        cfg = self.cfg
        self.gguf = open_gguf(cfg.model_path, cfg.load_mode)
        self.tokenizer = Tokenizer.from_gguf(self.gguf)
        self.model = load_model(self.gguf, repack=cfg.repack)
        if cfg.mmproj:
            projector = load_projector(cfg.mmproj, cfg.image_min_tokens, cfg.image_max_tokens)
            self.mtmd = MtmdContext(projector, self.tokenizer, self.model)
        n_ctx = cfg.n_ctx or self.model.args.n_ctx_train
        ctx = Context(self.model, n_ctx=n_ctx, n_seq=cfg.n_parallel, n_ubatch=cfg.n_ubatch,
                      type_k=cfg.type_k, type_v=cfg.type_v, n_threads=cfg.n_threads,
                      n_threads_batch=cfg.n_threads_batch)
        speculator = build_speculator(cfg.speculative, self.tokenizer, n_ctx, cfg.n_parallel,
                                      cfg.n_threads, cfg.n_threads_batch, self.model) \
            if cfg.speculative else None
        self.engine = Scheduler(ctx, self.tokenizer, cfg.n_batch, speculator=speculator,
                                context_shift=cfg.context_shift, n_cache_reuse=cfg.cache_reuse,
                                cache_ram_mib=cfg.cache_ram)
        source = template_source(cfg.chat_template or self.gguf.get("tokenizer.chat_template")
                                 or default_chat_template(cfg.model_path) or CHATML_TEMPLATE)
        tok = self.tokenizer
        self.template = ChatTemplate(source, tok.bos_token, tok.eos_token, add_bos=tok.add_bos,
                                     add_eos=tok.add_eos)
        self.think_end_tokens = tok.tokenize("\n</think>\n\n", add_special=False,
                                             parse_special=True)
        self.sampling_defaults = SamplingParams.from_gguf(self.gguf, **sampling_overrides(cfg))
        # embeddings batch up to 64 sequences of n_ubatch tokens (llama.cpp: one ubatch each)
        embedder = Embedder(self.model, cfg.pooling, cfg.n_ubatch, 64) if cfg.embedding else None
        self.warm_up(embedder)
        if embedder is not None:
            self.embeddings = EmbeddingWorker(embedder, apply_threads_here)
        self.thread = threading.Thread(target=self._run_engine, name="llamacpy-engine",
                                       daemon=True)
        self.thread.start()
        self.ready = True

    def _run_engine(self) -> None:
        apply_threads_here()  # -t: numba's thread count is per thread
        try:
            self.engine.run()
        except BaseException:  # noqa: BLE001 - recorded in engine.failure; /health turns 503
            pass
        if self.engine.failure is not None:
            self.on_engine_failure(self.engine.failure)

    @property
    def engine_failure(self) -> str | None:
        """Why the engine thread is gone, while the server still runs; None when it is fine."""
        if self.engine is None or self.thread is None:
            return None
        if self.engine.failure is not None:
            return self.engine.failure
        if not self.thread.is_alive() and not self.engine.stopping:
            return "the engine thread has stopped"
        return None

    def warm_up(self, embedder: Embedder | None = None) -> None:
        """The warm-up decodes (engine/warmup.py: prompt, few-token, one-token and batched
        steps) before `ready`, so /health says 503 until every kernel is compiled and the
        first request runs at speed; --no-warmup (cfg.warmup False) skips them. Also loads
        the anyio modules that starlette's streamed responses would load at the first one
        (anyio imports lazily: 20-50 ms on the first streamed reply otherwise)."""
        if self.cfg.warmup and embedder is not None:  # embedding mode generates nothing
            embedder.embed([[0] * 8, [0] * 3])
        elif self.cfg.warmup:
            warm_up(self.engine.ctx, self.tokenizer,
                    source=Source(self.cfg.model_path, self.cfg.repack))
            import anyio

            for name in dir(anyio):
                getattr(anyio, name, None)

    def stop(self) -> None:
        if self.embeddings is not None:
            self.embeddings.stop()
        if self.engine is not None:
            self.engine.stop()
        if self.thread is not None:
            self.thread.join(timeout=5)

    # -- prompts ---------------------------------------------------------------------------------

    def prompt_tokens(self, prompt: Any) -> list[int]:
        """A prompt as a string, a token list, or a mix (llama.cpp's tokenize_mixed)."""
        if isinstance(prompt, str):
            return self.tokenizer.tokenize(prompt, add_special=True, parse_special=True)
        if isinstance(prompt, list) and all(isinstance(p, (int, str)) for p in prompt):
            out: list[int] = []
            for i, p in enumerate(prompt):
                if isinstance(p, int):
                    if not 0 <= p < self.tokenizer.n_vocab:
                        raise RequestError(f"invalid token id {p} in prompt")
                    out.append(p)
                else:
                    out += self.tokenizer.tokenize(p, add_special=i == 0, parse_special=True)
            return out
        raise RequestError("'prompt' must be a string or a list of tokens and strings")

    def multimodal_prompt(self, text: str, files: list[bytes]) -> Prompt:
        """mtmd's tokenization of a prompt with media markers (images decoded and checked now;
        a bad one is a RequestError)."""
        if self.mtmd is None:
            raise RequestError(NO_IMAGES)
        try:
            return self.mtmd.tokenize(text, files)
        except ImageError as e:
            raise RequestError(f"Failed to load image: {e}") from None
        except ValueError as e:
            raise RequestError(str(e)) from None

    def completion_prompt(self, prompt: Any) -> list[int] | Prompt:
        """/completion's prompt: llama.cpp's shapes plus {"prompt_string", "multimodal_data"}."""
        if not isinstance(prompt, dict):
            return self.prompt_tokens(prompt)
        text = prompt.get("prompt_string")
        if not isinstance(text, str):
            raise RequestError("a prompt object needs a string 'prompt_string'")
        data = prompt.get("multimodal_data")
        if data is None:
            return self.prompt_tokens(text)
        if self.mtmd is None:
            raise RequestError("Multimodal data provided, but model does not support "
                               "multimodal requests.")
        if not isinstance(data, list) or not all(isinstance(d, str) for d in data):
            raise RequestError("'multimodal_data' must be a list of base64 strings")
        return self.multimodal_prompt(text, [base64_decode(d) for d in data])

    def chat_prompt(self, text: str, files: list[bytes]) -> list[int] | Prompt:
        if files:
            return self.multimodal_prompt(text, files)
        return self.tokenizer.tokenize(text, add_special=True, parse_special=True)

    def render_chat(self, data: dict) -> tuple[str, dict, list[bytes], ToolPlan | None]:
        """The prompt for a chat request: the template with server and request kwargs, image
        parts replaced by media markers, tool calls in the history made renderable; the
        images' bytes; and the request's tool-calling plan (None without tools)."""
        try:
            plan = plan_tools(self.template, data.get("tools"), data.get("tool_choice"),
                              data.get("parallel_tool_calls"))
            fmt = plan.fmt if plan else detect_format(self.template.source)
            messages = prepare_messages(messages_from(data), fmt, plan.tools if plan else None,
                                        data.get("tool_choice"), self.template)
        except ValueError as e:
            raise RequestError(str(e)) from None
        if plan is not None and (data.get("grammar") or data.get("json_schema") is not None or
                                 (data.get("response_format") or {}).get("type", "text")
                                 != "text"):
            raise RequestError("Cannot use custom grammar constraints with tools.")
        messages, files = load_media(messages, self.mtmd is not None, media_marker())
        kwargs = dict(self.cfg.chat_template_kwargs)
        if self.cfg.reasoning in ("on", "off"):
            kwargs["enable_thinking"] = self.cfg.reasoning == "on"
        request_kwargs = data.get("chat_template_kwargs") or {}
        if not isinstance(request_kwargs, dict):
            raise RequestError("'chat_template_kwargs' must be an object")
        kwargs.update(request_kwargs)
        if plan is not None:
            kwargs = {**template_extras(), **kwargs}
        text = self.template.render(messages, add_generation_prompt=True,
                                    tools=plan.tools if plan else None, **kwargs)
        return text, kwargs, files, plan

    # -- documents -------------------------------------------------------------------------------

    def generation_settings(self, c: Completion | None = None) -> dict:
        p = c.params if c else self.sampling_defaults
        settings = {k: v for k, v in vars(p).items() if k != "logit_bias"}
        settings["n_predict"] = c.n_predict if c else self.cfg.n_predict
        settings["stop"] = c.stop if c else []
        settings["n_keep"] = c.n_keep if c and c.n_keep is not None else self.cfg.n_keep
        settings["grammar"] = c.grammar_source if c else self.cfg.grammar_source
        settings.update(self.speculative_settings(c))
        return settings

    def speculative_settings(self, c: Completion | None = None) -> dict:
        """llama.cpp's speculative.* entries: the types, and the request's draft limits (the
        drafters' own where it sets none)."""
        spec = self.engine.speculator if self.engine else None
        req = c.speculative if c and c.speculative else None
        n_max = spec.n_max if spec else 0
        return {"speculative.types": ",".join(spec.types) if spec else "none",
                "speculative.n_max": req.n_max if req and req.n_max is not None else n_max,
                "speculative.n_min": req.n_min if req else 0,
                "speculative.p_min": req.p_min if req and req.p_min is not None
                else (self.cfg.speculative.p_min if self.cfg.speculative else 0.0)}

    def props(self) -> dict:
        tok = getattr(self, "tokenizer", None)
        return {
            "default_generation_settings": {"n_ctx": self.engine.n_ctx_slot if self.engine
                                            else self.cfg.n_ctx,
                                            "params": self.generation_settings()
                                            if self.ready else {}},
            "total_slots": self.cfg.n_parallel, "model_path": self.cfg.model_path,
            "model_alias": self.alias,
            "chat_template": self.template.source if self.ready else "",
            "bos_token": tok.bos_token if tok else "", "eos_token": tok.eos_token if tok else "",
            "modalities": {"vision": self.mtmd is not None, "audio": False},
            "media_marker": media_marker(),
            "build_info": "llamacpy", "is_sleeping": False,
            "webui": self.cfg.webui, "api_key_required": bool(self.api_keys),
            "cache_type_k": self.cfg.type_k, "cache_type_v": self.cfg.type_v,
            "flash_attn": self.cfg.flash_attn, **self.thread_counts(),
        }

    def thread_counts(self) -> dict:
        """-t and -tb as decode runs them (before the model loads: as configured, -1 = default)."""
        if self.engine is None:
            return {"n_threads": self.cfg.n_threads, "n_threads_batch": self.cfg.n_threads_batch}
        n_threads, n_threads_batch = self.engine.ctx.thread_counts()
        return {"n_threads": n_threads, "n_threads_batch": n_threads_batch}

    def model_meta(self) -> dict:
        if not self.ready:
            return {}
        a = self.model.args
        return {"vocab_type": 2, "n_vocab": a.n_vocab, "n_ctx_train": a.n_ctx_train,
                "n_embd": a.n_embd, "n_params": sum(t.n_elements for t in
                                                    self.gguf.tensors.values()),
                "size": sum(t.nbytes for t in self.gguf.tensors.values())}

    def prometheus(self) -> str:
        m, e = self.engine.metrics, self.engine
        busy = sum(s.busy for s in e.slots)
        rate = lambda b: b[0] / b[1] if b[1] else 0.0  # noqa: E731
        counters = [
            ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens",
             m.n_prompt_tokens),
            ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache",
             m.n_prompt_cached),
            ("prompt_seconds_total", "Total time spent processing prompts", m.t_prompt),
            ("tokens_predicted_total", "Number of generation tokens processed", m.n_predicted),
            ("tokens_predicted_seconds_total", "Total time spent generating tokens",
             m.t_predicted),
            ("n_decode_total", "Total number of llama_decode() calls", m.n_decode),
            ("n_tokens_max", "Largest observed sequence length (prompt + generation)",
             m.n_tokens_max),
        ]
        gauges = [
            ("prompt_tokens_seconds", "Average prompt throughput in tokens/s",
             rate(m.bucket_prompt)),
            ("predicted_tokens_seconds", "Average generation throughput in tokens/s",
             rate(m.bucket_predict)),
            ("requests_processing", "Number of requests processing", busy),
            ("requests_deferred", "Number of requests deferred", e.n_deferred),
            ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call",
             m.n_busy_slots / max(m.n_decode, 1)),
        ]
        m.bucket_prompt[:] = [0, 0.0]  # the gauges average over the window between scrapes
        m.bucket_predict[:] = [0, 0.0]
        lines = []
        for kind, items in (("counter", counters), ("gauge", gauges)):
            for name, help_text, value in items:
                lines += [f"# HELP llamacpp:{name} {help_text}", f"# TYPE llamacpp:{name} {kind}",
                          f"llamacpp:{name} {float(value):g}"]
        return "\n".join(lines) + "\n"


def sampling_overrides(cfg: ServerConfig) -> dict:
    """The sampling fields the command line set: they beat the model's general.sampling.*
    metadata, even at llama.cpp's default value (common_params_sampling's user_sampling_config)."""
    p, base = cfg.sampling, SamplingParams()
    if cfg.sampling_given is None:
        return {k: v for k, v in vars(p).items() if v != getattr(base, k)}
    return {k: getattr(p, k) for k in cfg.sampling_given}


def parse_kwargs(text: str | None) -> dict:
    if not text:
        return {}
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("--chat-template-kwargs must be a JSON object")
    return value
