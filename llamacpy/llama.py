"""`Llama`: the high-level API of llama-cpp-python, so code written for it runs after changing
`from llama_cpp import Llama` to `from llamacpy import Llama`.

Same constructor arguments, the same methods and the same OpenAI-style return dictionaries
(llama_cpp/llama.py, llama_chat_format.py). GPU placement arguments warn and run on the CPU; an
argument whose effect llamacpy does not provide raises NotSupportedError, never runs on as if
it were absent. Generation runs through the engine's scheduler (engine/scheduler.py), the same
code as llama-server's.
"""

from __future__ import annotations

import abc
import json
import time
import uuid
import warnings
from collections import deque
from collections.abc import Iterator
from typing import Any

import numpy as np

from .chat import CHATML_TEMPLATE, ChatTemplate, template_source
from .hub import default_chat_template
from .engine.context import Context
from .engine.prompt import Prompt
from .engine.scheduler import Scheduler
from .engine.sequence import Request
from .engine.draft_model import build_speculator
from .engine.embedding import Embedder, normalize
from .engine.speculative import CallableDrafter, SpecConfig, Speculator, prompt_lookup_draft
from .format import open_gguf
from .chat.tools import ToolCallParser, detect_format, plan_tools, prepare_messages, \
    template_extras
from .grammar import Grammar, LazyGrammarMask
from .kernels import set_threads
from .memory.kv_cache import kv_type_name, resolve_flash_attn
from .models import load_model
from .sampling import SamplingParams
from .tokenizer import Tokenizer

LLAMA_DEFAULT_SEED = 0xFFFFFFFF


class NotSupportedError(ValueError):
    """A llama-cpp-python argument whose effect llamacpy does not provide (yet)."""


class LlamaDraftModel(abc.ABC):
    """llama_cpp.llama_speculative.LlamaDraftModel: `draft_model(input_ids) -> draft tokens`,
    called with the sequence's tokens and the token just sampled."""

    @abc.abstractmethod
    def __call__(self, input_ids: np.ndarray, /, **kwargs: Any) -> np.ndarray:
        raise NotImplementedError


class LlamaPromptLookupDecoding(LlamaDraftModel):
    """llama-cpp-python's prompt-lookup drafts: the tokens that followed the longest earlier
    match (up to max_ngram_size) of the last tokens, at most num_pred_tokens of them."""

    def __init__(self, max_ngram_size: int = 2, num_pred_tokens: int = 10):
        self.max_ngram_size, self.num_pred_tokens = max_ngram_size, num_pred_tokens

    find_candidate_pred_tokens = staticmethod(prompt_lookup_draft)

    def __call__(self, input_ids: np.ndarray, /, **kwargs: Any) -> np.ndarray:
        return prompt_lookup_draft(input_ids, self.max_ngram_size, self.num_pred_tokens)


def speculator_for(draft_model, llm: Llama) -> Speculator | None:
    """Llama(draft_model=...): a LlamaDraftModel (any callable input_ids -> tokens), one of
    the engine's drafters (engine/speculative.py: `draft(seq, history, n_max)`), or a
    SpecConfig (llama-cli's --spec-type / -md flags)."""
    if draft_model is None:
        return None
    if isinstance(draft_model, SpecConfig):
        return build_speculator(draft_model, llm._tokenizer, llm._n_ctx, 1, llm.n_threads,
                                llm.n_threads_batch, llm._model)
    if hasattr(draft_model, "draft") and hasattr(draft_model, "n_max"):
        return Speculator([draft_model])
    if isinstance(draft_model, LlamaPromptLookupDecoding):
        return Speculator([CallableDrafter(draft_model, draft_model.num_pred_tokens)])
    if callable(draft_model):
        return Speculator([CallableDrafter(draft_model)])
    raise NotSupportedError(f"Llama: draft_model={draft_model!r} is not supported: give a "
                            f"LlamaDraftModel (input_ids -> draft tokens) or a drafter")


class LlamaGrammar:
    """llama_cpp.LlamaGrammar: a GBNF grammar (or a JSON schema) for `grammar=`; a bad one
    raises GrammarError (a ValueError) saying where."""

    def __init__(self, grammar: Grammar, source: str, find=None):
        self.grammar, self._grammar = grammar, source
        self._find = find  # lazy: where in the text the grammar starts (tool calls)

    def mask(self, tokenizer):
        if self._find is not None:
            return LazyGrammarMask(self.grammar, tokenizer, self._find)
        return self.grammar.mask(tokenizer)

    @classmethod
    def from_string(cls, grammar: str, verbose: bool = True) -> LlamaGrammar:
        return cls(Grammar.from_gbnf(grammar), grammar)

    @classmethod
    def from_file(cls, file: str, verbose: bool = True) -> LlamaGrammar:
        with open(file, encoding="utf-8") as fh:
            return cls.from_string(fh.read(), verbose)

    @classmethod
    def from_json_schema(cls, json_schema: str | dict, verbose: bool = True) -> LlamaGrammar:
        text = json_schema if isinstance(json_schema, str) else json.dumps(json_schema)
        return cls(Grammar.from_json_schema(json_schema), text)


def response_format_grammar(response_format: dict | None) -> LlamaGrammar | None:
    """llama-cpp-python's response_format: json_object (optionally with "schema"), or OpenAI's
    json_schema {"json_schema": {"schema"}}; "text" is free text."""
    if response_format is None:
        return None
    kind = response_format.get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return LlamaGrammar.from_json_schema(response_format.get("schema", {"type": "object"}))
    if kind == "json_schema":
        wrapper = response_format.get("json_schema") or {}
        return LlamaGrammar.from_json_schema(wrapper.get("schema", {}))
    raise ValueError(f"response_format type must be 'text', 'json_object' or 'json_schema', "
                     f"not {kind!r}")


# llama-cpp-python arguments that only say where layers run: no GPU here, so they warn
GPU_ARGS = {"n_gpu_layers": 0, "split_mode": None, "main_gpu": 0, "tensor_split": None,
            "offload_kqv": True, "op_offload": None}
# arguments llamacpy takes only at llama-cpp-python's default (what llamacpy does anyway)
DEFAULT_ONLY = {"kv_overrides": None,
                "rope_scaling_type": -1, "rope_freq_base": 0.0,
                "rope_freq_scale": 0.0, "yarn_ext_factor": -1.0, "yarn_attn_factor": 1.0,
                "yarn_beta_fast": 32.0, "yarn_beta_slow": 1.0, "yarn_orig_ctx": 0,
                "swa_full": None, "no_perf": False,
                "last_n_tokens_size": 64, "lora_base": None, "lora_scale": 1.0,
                "lora_path": None, "numa": False, "chat_handler": None,
                "tokenizer": None, "spm_infill": False, "tfs_z": 1.0, "suffix": None,
                "logits_processor": None, "stopping_criteria": None,
                "functions": None, "function_call": None}


def check_arguments(where: str, kwargs: dict) -> None:
    """Warn for GPU placement, refuse what llamacpy would otherwise have to ignore."""
    for name, value in kwargs.items():
        if name in GPU_ARGS:
            if name == "n_gpu_layers" and value not in (0, None):
                warnings.warn(f"no GPU available: n_gpu_layers={value} runs on the CPU",
                              stacklevel=3)
        elif name in DEFAULT_ONLY:
            if value is not None and value != DEFAULT_ONLY[name]:
                raise NotSupportedError(f"{where}: {name}={value!r} is not supported by "
                                        f"llamacpy")
        else:
            raise TypeError(f"{where}() got an unexpected keyword argument {name!r}")


def legacy_load_mode(use_mmap: bool, use_mlock: bool) -> str:
    """llama-cpp-python's use_mmap / use_mlock as a load mode (its Llama.__init__ mapping)."""
    if use_mlock:
        return "mmap+mlock" if use_mmap else "mlock"
    return "mmap" if use_mmap else "none"


class Llama:
    """Load a GGUF model and generate from it (llama_cpp.Llama compatible)."""

    def __init__(self, model_path: str, *, n_ctx: int = 512, n_batch: int = 512,
                 n_ubatch: int = 512, n_threads: int | None = None,
                 n_threads_batch: int | None = None, seed: int = LLAMA_DEFAULT_SEED,
                 vocab_only: bool = False, logits_all: bool = False, verbose: bool = True,
                 chat_format: str | None = None, repack: bool = False,
                 type_k: str | int | None = None, type_v: str | int | None = None,
                 flash_attn: bool | str = False, draft_model: LlamaDraftModel | None = None,
                 use_mmap: bool = True, use_mlock: bool = False, load_mode: str | None = None,
                 context_shift: bool = False, embedding: bool = False,
                 pooling_type: int = -1, **kwargs: Any):
        check_arguments("Llama", kwargs)
        # ggml type ids (llama-cpp-python) or -ctk names; flash_attn=False is -fa off there too
        type_k, type_v = kv_type_name(type_k), kv_type_name(type_v)
        resolve_flash_attn({True: "on", False: "off"}.get(flash_attn, flash_attn), type_k, type_v)
        self.draft_model = draft_model
        if chat_format is not None:
            raise NotSupportedError("Llama: chat_format is not supported by llamacpy: the "
                                    "model's own chat template is used")
        self.model_path, self.verbose, self.seed = str(model_path), verbose, seed
        self._file = open_gguf(model_path, load_mode or legacy_load_mode(use_mmap, use_mlock))
        self.metadata = {k: str(v) for k, v in self._file.metadata.items()
                         if not k.startswith("tokenizer.ggml.")}
        self._tokenizer = Tokenizer.from_gguf(self._file)
        self.chat_format = None
        self.n_batch, self.n_threads = n_batch, n_threads
        self.context_params = {"n_ctx": n_ctx, "n_batch": n_batch, "n_ubatch": n_ubatch}
        self._logits_all = logits_all
        if n_threads:
            set_threads(n_threads)
        self.n_threads_batch = n_threads_batch
        self._model = None if vocab_only else load_model(self._file, repack=repack)
        if self._model is not None:
            self._n_ctx = n_ctx or self._model.args.n_ctx_train
            self._ctx = Context(self._model, n_ctx=self._n_ctx, n_ubatch=min(n_ubatch, n_batch),
                                type_k=type_k, type_v=type_v, n_threads=n_threads,
                                n_threads_batch=n_threads_batch)
            self._scheduler = Scheduler(self._ctx, self._tokenizer, n_batch,
                                        speculator=speculator_for(draft_model, self),
                                        context_shift=context_shift)
            self._slot = self._scheduler.slots[0]
            # as llama-cpp-python: rows only for logits_all (pages are touched only when written)
            rows = self._n_ctx if logits_all else n_batch
            self.scores = np.empty((rows, self._model.args.n_vocab), np.float32)
        else:
            self._n_ctx = n_ctx
        # embedding=True: as llama-cpp-python, up to n_batch tokens and min(n_batch, 256)
        # sequences per decode; pooling_type -1 takes the model's own
        self._embedder = Embedder(self._model, pooling_type, n_ubatch=n_batch,
                                  n_seq_max=min(n_batch, 256), n_threads=n_threads) \
            if embedding and self._model is not None else None
        self.input_ids = np.zeros(self._n_ctx, np.intc)
        self.n_tokens = 0
        self._last_logits: np.ndarray | None = None  # float32 [n_vocab] after the last eval

    # -- vocabulary -------------------------------------------------------------------------

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        return self._tokenizer.tokenize(text, add_special=add_bos, parse_special=special)

    def detokenize(self, tokens: list[int], prev_tokens: list[int] | None = None,
                   special: bool = False) -> bytes:
        return self._tokenizer.detokenize(tokens, remove_special=False, unparse_special=special)

    def n_ctx(self) -> int:
        return self._n_ctx

    def n_vocab(self) -> int:
        return self._tokenizer.n_vocab

    def n_embd(self) -> int:
        return self._model.args.n_embd if self._model else 0

    def token_bos(self) -> int:
        return self._tokenizer.bos

    def token_eos(self) -> int:
        return self._tokenizer.eos

    def token_nl(self) -> int:
        return self._tokenizer.nl

    def tokenizer(self) -> Tokenizer:
        return self._tokenizer

    def pooling_type(self) -> int:
        """llama_pooling_type of the embedding context (-1 without embedding=True)."""
        return self._embedder.pooling if self._embedder is not None else -1

    # -- embeddings -------------------------------------------------------------------------

    def embed(self, input: str | list[str], normalize: bool = False, truncate: bool = True,
              return_count: bool = False):
        """llama-cpp-python's Llama.embed: a vector (list of floats) per input, or per token
        with pooling none; Euclidean-normalised only with normalize=True. Inputs are batched
        together (n_batch tokens a decode)."""
        if self._embedder is None:
            raise RuntimeError("Llama model must be created with embedding=True to call this "
                               "method")
        inputs = [input] if isinstance(input, str) else list(input)
        seqs = []
        for text in inputs:
            tokens = self.tokenize(text.encode("utf-8"))
            tokens = tokens[: self.n_batch] if truncate else tokens
            if len(tokens) > self.n_batch:
                raise ValueError(f"Requested tokens ({len(tokens)}) exceed batch size of "
                                 f"{self.n_batch}")
            seqs.append(tokens)
        data = [as_lists(v, normalize) for v in self._embedder.embed(seqs)]
        output = data[0] if isinstance(input, str) else data
        return (output, sum(map(len, seqs))) if return_count else output

    def create_embedding(self, input: str | list[str], model: str | None = None) -> dict:
        """llama-cpp-python's CreateEmbeddingResponse (vectors not normalised)."""
        embeds, total = self.embed(input if isinstance(input, list) else [input],
                                   return_count=True)
        return {"object": "list",
                "data": [{"object": "embedding", "embedding": e, "index": i}
                         for i, e in enumerate(embeds)],
                "model": model if model is not None else self.model_path,
                "usage": {"prompt_tokens": total, "total_tokens": total}}

    # -- evaluation -------------------------------------------------------------------------

    @property
    def eval_tokens(self) -> deque:
        return deque(self.input_ids[: self.n_tokens].tolist(), maxlen=self._n_ctx)

    @property
    def eval_logits(self) -> deque:
        rows = self.scores[: self.n_tokens] if self._logits_all else \
            ([] if self._last_logits is None else [self._last_logits])
        return deque([list(map(float, r)) for r in rows],
                     maxlen=self._n_ctx if self._logits_all else 1)

    @property
    def _input_ids(self) -> np.ndarray:
        return self.input_ids[: self.n_tokens]

    @property
    def _scores(self) -> np.ndarray:
        return self.scores[: self.n_tokens]

    def reset(self) -> None:
        self.n_tokens = 0
        self._slot.tokens = []
        self._ctx.cache.clear()

    def eval(self, tokens: list[int]) -> None:
        """Evaluate tokens after those already evaluated; logits land in `scores`."""
        self._sync_cache()
        for start in range(0, len(tokens), self.n_batch):
            chunk = list(tokens[start : start + self.n_batch])
            logits = self._slot.evaluate(chunk, all_logits=self._logits_all)
            n0, n = self.n_tokens, len(chunk)
            self.input_ids[n0 : n0 + n] = chunk
            if self._logits_all:
                self.scores[n0 : n0 + n] = logits
            self._last_logits = logits[-1]
            self.n_tokens += n

    def _sync_cache(self) -> None:
        """`n_tokens` may have been lowered by the caller (llama-cpp-python allows it)."""
        if len(self._slot.tokens) != self.n_tokens:
            self._slot.tokens = self._slot.tokens[: self.n_tokens]
            self._ctx.cache.trim(0, self.n_tokens)

    def set_seed(self, seed: int) -> None:
        self.seed = seed

    # -- completion ---------------------------------------------------------------------------

    def __call__(self, prompt: str | list[int], **kwargs: Any):
        return self.create_completion(prompt, **kwargs)

    def create_completion(self, prompt: str | list[int], suffix: str | None = None,
                          max_tokens: int | None = 16, temperature: float = 0.8,
                          top_p: float = 0.95, min_p: float = 0.05, typical_p: float = 1.0,
                          logprobs: int | None = None, echo: bool = False,
                          stop: str | list[str] | None = None, frequency_penalty: float = 0.0,
                          presence_penalty: float = 0.0, repeat_penalty: float = 1.0,
                          top_k: int = 40, stream: bool = False, seed: int | None = None,
                          mirostat_mode: int = 0, mirostat_tau: float = 5.0,
                          mirostat_eta: float = 0.1, model: str | None = None,
                          logit_bias: dict | None = None, grammar: LlamaGrammar | None = None,
                          **kwargs: Any):
        """A text completion dict (or an iterator of chunks when stream=True)."""
        check_arguments("create_completion", {"suffix": suffix, **kwargs})
        params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                                typical_p=typical_p, repeat_penalty=repeat_penalty,
                                frequency_penalty=frequency_penalty,
                                presence_penalty=presence_penalty, mirostat=mirostat_mode,
                                mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta,
                                seed=self._seed_for(seed), logit_bias=logit_bias or {})
        mask = grammar.mask(self._tokenizer) if grammar is not None else None
        run = self._completion(prompt, params, max_tokens, stop, logprobs, echo, model, mask)
        return run if stream else collect_completion(run)

    def _seed_for(self, seed: int | None) -> int:
        return self.seed if seed is None else seed

    def _prompt_tokens(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            return self.tokenize(prompt.encode("utf-8"), add_bos=True, special=True) \
                if prompt else [self.token_bos()]
        return list(prompt)

    def _completion(self, prompt, params: SamplingParams, max_tokens, stop, logprobs, echo,
                    model, mask=None) -> Iterator[dict]:
        if getattr(self._model, "encoder", False):  # llama.cpp: a memory-less context
            raise RuntimeError("the current context does not support logits computation: "
                               f"a {self._model.args.arch} model only gives embeddings")
        tokens = self._prompt_tokens(prompt)
        if len(tokens) >= self._n_ctx:
            raise ValueError(f"Requested tokens ({len(tokens)}) exceed context window of "
                             f"{self._n_ctx}")
        if max_tokens is None or max_tokens <= 0:
            max_tokens = self._n_ctx - len(tokens)
        max_tokens = min(max_tokens, self._n_ctx - len(tokens))
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        request = Request(Prompt(tokens), params, n_predict=max_tokens, stop=stops,
                          return_logits=True, token_mask=mask)
        cid, created = f"cmpl-{uuid.uuid4()}", int(time.time())
        name = model or self.model_path
        self._sync_cache()
        if echo:
            text = self.detokenize(tokens).decode("utf-8", errors="ignore")
            yield completion_chunk(cid, created, name, text, None, None)
        for event in self._scheduler.generate(request):
            if event["type"] == "error":
                raise RuntimeError(event["message"])
            if event["type"] == "token":
                self._last_logits = event["logits"]
            if event["text"]:
                token = event.get("token", -1)
                lp = token_logprobs(self, self._last_logits, token, event["text"], logprobs) \
                    if logprobs else None
                yield completion_chunk(cid, created, name, event["text"], lp, None)
            if event["type"] == "done":
                done = event
        self.n_tokens = len(self._slot.tokens)
        self.input_ids[: self.n_tokens] = self._slot.tokens
        n_gen = done["n_decoded"]
        usage = {"prompt_tokens": done["n_prompt"], "completion_tokens": n_gen,
                 "total_tokens": done["n_prompt"] + n_gen}
        reason = "stop" if done["stop_type"] in ("eos", "word") else "length"
        final = completion_chunk(cid, created, name, "", None, reason)
        final["usage"] = usage
        yield final

    # -- chat ---------------------------------------------------------------------------------

    def chat_template(self) -> ChatTemplate:
        tok = self._tokenizer
        source = template_source(self._file.get("tokenizer.chat_template")
                                 or default_chat_template(self.model_path) or CHATML_TEMPLATE)
        return ChatTemplate(source, tok.bos_token, tok.eos_token, add_bos=tok.add_bos,
                            add_eos=tok.add_eos)

    def create_chat_completion(self, messages: list[dict], tools: list | None = None,
                               temperature: float = 0.2, top_p: float = 0.95, top_k: int = 40,
                               min_p: float = 0.05, typical_p: float = 1.0,
                               stream: bool = False, stop: str | list[str] | None = None,
                               seed: int | None = None, max_tokens: int | None = None,
                               presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
                               repeat_penalty: float = 1.0, logprobs: bool = False,
                               top_logprobs: int | None = None, model: str | None = None,
                               logit_bias: dict | None = None,
                               chat_template_kwargs: dict | None = None,
                               tool_choice: str | dict | None = None,
                               response_format: dict | None = None, mirostat_mode: int = 0,
                               mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                               grammar: LlamaGrammar | None = None,
                               parallel_tool_calls: bool | None = None, **kwargs: Any):
        """A chat.completion dict (or an iterator of chat.completion.chunk dicts)."""
        check_arguments("create_chat_completion", kwargs)
        from_format = response_format_grammar(response_format)
        if grammar is not None and from_format is not None:
            raise ValueError("create_chat_completion: give grammar or response_format, not both")
        grammar = grammar or from_format
        template = self.chat_template()
        plan = plan_tools(template, tools, tool_choice, parallel_tool_calls)
        if plan is not None and grammar is not None:
            raise ValueError("create_chat_completion: tools cannot be combined with a grammar or "
                             "a response_format")
        messages = prepare_messages(messages, plan.fmt if plan else detect_format(
            template.source), plan.tools if plan else None, tool_choice, template)
        extras = template_extras() if plan is not None else {}
        prompt = template.render(messages, add_generation_prompt=True,
                                 tools=plan.tools if plan else None,
                                 **{**extras, **(chat_template_kwargs or {})})
        parser = None
        if plan is not None:
            parser = plan.parser()
            stop = ([stop] if isinstance(stop, str) else list(stop or [])) + plan.grammar.stops
            grammar = LlamaGrammar(Grammar.from_lark(plan.grammar.lark), plan.grammar.lark,
                                   plan.grammar.find_trigger if plan.grammar.lazy else None)
        chunks = self.create_completion(
            prompt, max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
            min_p=min_p, typical_p=typical_p, stream=True, stop=stop, seed=seed,
            presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
            repeat_penalty=repeat_penalty, logprobs=(top_logprobs or 1) if logprobs else None,
            model=model, logit_bias=logit_bias, mirostat_mode=mirostat_mode,
            mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, grammar=grammar)
        run = chat_chunks(chunks, parser)
        return run if stream else collect_chat(run)


def as_lists(v: np.ndarray, unit: bool) -> list:
    """One embedding as Python floats (a list per token for pooling none)."""
    if v.ndim == 2:
        return [as_lists(row, unit) for row in v]
    return (normalize(v, 2) if unit else v).tolist()


def completion_chunk(cid: str, created: int, model: str, text: str, logprobs, finish) -> dict:
    return {"id": cid, "object": "text_completion", "created": created, "model": model,
            "choices": [{"text": text, "index": 0, "logprobs": logprobs,
                         "finish_reason": finish}]}


def token_logprobs(llm: Llama, logits: np.ndarray, token: int, text: str, n: int) -> dict:
    """llama-cpp-python's logprobs block for one token (log-softmax of the raw logits); token
    -1 is text released at the end without a token of its own."""
    lp = logits.astype(np.float64)
    lp -= lp.max()
    lp -= np.log(np.exp(lp).sum())
    top = np.argsort(-lp)[:n]
    piece = lambda t: llm.detokenize([int(t)]).decode("utf-8", errors="ignore")  # noqa: E731
    return {"tokens": [text], "text_offset": [0],
            "token_logprobs": [float(lp[token]) if token >= 0 else None],
            "top_logprobs": [{piece(t): float(lp[t]) for t in top}]}


def collect_completion(chunks: Iterator[dict]) -> dict:
    text, logprobs, last = "", None, None
    for chunk in chunks:
        choice = chunk["choices"][0]
        text += choice["text"]
        if choice["logprobs"]:
            logprobs = merge_logprobs(logprobs, choice["logprobs"])
        last = chunk
    out = dict(last)
    out["choices"] = [{"text": text, "index": 0, "logprobs": logprobs,
                       "finish_reason": last["choices"][0]["finish_reason"]}]
    return out


def merge_logprobs(acc: dict | None, new: dict) -> dict:
    if acc is None:
        return {k: list(v) for k, v in new.items()}
    offset = sum(len(t) for t in acc["tokens"])
    acc["tokens"] += new["tokens"]
    acc["text_offset"] += [offset + o for o in new["text_offset"]]
    acc["token_logprobs"] += new["token_logprobs"]
    acc["top_logprobs"] += new["top_logprobs"]
    return acc


def chat_chunks(chunks: Iterator[dict], parser: ToolCallParser | None = None
                ) -> Iterator[dict]:
    """Completion chunks re-shaped as chat.completion.chunk (role first, then content deltas;
    with tools, the parser turns the text into content and tool-call deltas)."""
    first = True
    for chunk in chunks:
        base = {"id": "chat" + chunk["id"], "object": "chat.completion.chunk",
                "created": chunk["created"], "model": chunk["model"]}
        if first:
            yield {**base, "choices": [{"index": 0, "delta": {"role": "assistant"},
                                        "logprobs": None, "finish_reason": None}]}
            first = False
        choice = chunk["choices"][0]
        if parser is not None:
            deltas = parser.feed(choice["text"])
            if choice["finish_reason"] is not None:
                deltas += parser.finish()
            for delta in deltas:
                yield {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                            "finish_reason": None}]}
        elif choice["finish_reason"] is None:
            yield {**base, "choices": [{"index": 0, "delta": {"content": choice["text"]},
                                        "logprobs": choice["logprobs"], "finish_reason": None}]}
        if choice["finish_reason"] is not None:
            reason = choice["finish_reason"]
            if parser is not None and parser.tool_calls and reason == "stop":
                reason = "tool_calls"
            final = {**base, "choices": [{"index": 0, "delta": {}, "logprobs": None,
                                          "finish_reason": reason}]}
            if "usage" in chunk:
                final["usage"] = chunk["usage"]
            yield final


def collect_chat(chunks: Iterator[dict]) -> dict:
    content, calls, last = "", [], None
    for chunk in chunks:
        delta = chunk["choices"][0]["delta"]
        content += delta.get("content", "") or ""
        for part in delta.get("tool_calls", []):  # the first part opens a call
            if part["index"] == len(calls):
                calls.append({"id": part["id"], "type": "function",
                              "function": {"name": part["function"]["name"], "arguments": ""}})
            calls[part["index"]]["function"]["arguments"] += part["function"]["arguments"]
        last = chunk
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {"id": last["id"], "object": "chat.completion", "created": last["created"],
            "model": last["model"],
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": last["choices"][0]["finish_reason"]}],
            "usage": last.get("usage")}
