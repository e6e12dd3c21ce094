"""Command-line flags with llama.cpp's names, defined once for every tool (common/arg.cpp).

Each flag may also come from its LLAMA_ARG_* environment variable. Every flag a tool accepts takes
effect in that tool (tests/cli/test_flags.py walks them all). A llama.cpp flag that llamacpy does
not support, or a setting it cannot honour (-nocb, --no-jinja), ends the tool with one line on
stderr and exit status 2, as argparse does for a bad flag: a script that relies on the flag must
know it did not take effect.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import warnings
from dataclasses import dataclass

from ..sampling import SamplingParams


@dataclass(frozen=True)
class Flag:
    names: tuple[str, ...]
    dest: str
    type: object = str  # None: a switch (store_const); list: repeatable (append)
    default: object = None
    env: str | None = None
    help: str = ""
    tools: tuple[str, ...] = ("cli", "server")
    const: object = True  # value stored by a switch


def f(*names, dest, type=str, default=None, env=None, help="", tools=("cli", "server"),
      const=True) -> Flag:
    return Flag(tuple(names), dest, type, default, env, help, tools, const)


def pooling_name(value: str) -> str:
    """--pooling VALUE: one of llama.cpp's pooling types."""
    if value not in ("none", "mean", "cls", "last", "rank"):
        raise argparse.ArgumentTypeError(f"invalid pooling type '{value}' "
                                         f"(use none, mean, cls, last or rank)")
    return value


def flash_attn_value(value: str) -> str:
    """-fa VALUE as on, off or auto (common_arg_utils: is_truthy, is_falsey, is_autoy)."""
    for name, words in (("on", ("on", "enabled", "true", "1")),
                        ("off", ("off", "disabled", "false", "0")), ("auto", ("auto", "-1"))):
        if value in words:
            return name
    raise argparse.ArgumentTypeError(f"unknown value for --flash-attn: '{value}'")


def load_mode(value: str) -> str:
    """-lm MODE: one of llama.cpp's load modes."""
    from ..format.reader import check_load_mode

    try:
        return check_load_mode(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


# the older load-mode switches: llama.cpp's warning when one is given (common/arg.cpp)
DEPRECATED = {
    "--mmap": "--mmap and --no-mmap are deprecated. use --load-mode mmap instead",
    "--no-mmap": "--mmap and --no-mmap are deprecated. use --load-mode mmap instead",
    "--mlock": "--mlock is deprecated. use --load-mode mlock instead",
    "-dio": "--direct-io and --no-direct-io are deprecated. use --load-mode dio instead",
    "--direct-io": "--direct-io and --no-direct-io are deprecated. use --load-mode dio instead",
}


def warn_deprecated(argv: list[str], prog: str) -> None:
    """One llama.cpp deprecation line per old switch given (each line once)."""
    lines = dict.fromkeys(DEPRECATED[a] for a in argv if a in DEPRECATED)
    for line in lines:
        print(f"{prog}: warning: DEPRECATED: {line}", file=sys.stderr)


def semicolon_list(value: str) -> list[str]:
    """--samplers top_k;top_p;temperature"""
    return [v for v in value.split(";") if v]


SWITCH = None
FLAGS = [
    # model and context
    f("-m", "--model", dest="model", env="LLAMA_ARG_MODEL", help="model path or catalogue name"),
    f("-hf", "-hfr", "--hf-repo", dest="hf_repo", env="LLAMA_ARG_HF_REPO",
      help="Hugging Face repository (no hub is reachable: use `llamacpy pull`)"),
    f("-c", "--ctx-size", dest="ctx_size", type=int, default=4096, env="LLAMA_ARG_CTX_SIZE",
      help="context size (0 = from model)"),
    f("-n", "--predict", "--n-predict", dest="n_predict", type=int, default=-1,
      env="LLAMA_ARG_N_PREDICT", help="tokens to predict (-1 = until end of generation)"),
    f("-b", "--batch-size", dest="batch_size", type=int, default=2048, env="LLAMA_ARG_BATCH"),
    f("-ub", "--ubatch-size", dest="ubatch_size", type=int, default=512, env="LLAMA_ARG_UBATCH"),
    f("-t", "--threads", dest="threads", type=int, default=-1, env="LLAMA_ARG_THREADS",
      help="threads for single-token steps (-1: every core)"),
    f("-tb", "--threads-batch", dest="threads_batch", type=int, default=-1,
      help="threads for prompt batches, every decode of more than one token (-1: as -t)"),
    f("-ngl", "--gpu-layers", "--n-gpu-layers", dest="n_gpu_layers", default="0",
      env="LLAMA_ARG_N_GPU_LAYERS", help="GPU layers: llamacpy runs on the CPU"),
    f("-dev", "--device", dest="device", env="LLAMA_ARG_DEVICE", help="only 'none' (CPU)"),
    f("--jinja", dest="jinja", type=SWITCH, default=True, env="LLAMA_ARG_JINJA",
      help="chat templates are always rendered with Jinja"),
    f("--no-jinja", dest="jinja", type=SWITCH, const=False,
      help="refused: llamacpy has no non-Jinja template engine"),
    f("--chat-template", dest="chat_template", env="LLAMA_ARG_CHAT_TEMPLATE"),
    f("--chat-template-file", dest="chat_template_file", env="LLAMA_ARG_CHAT_TEMPLATE_FILE"),
    f("--warmup", dest="warmup", type=SWITCH, default=True,
      help="run a warm-up decode at load (default)"),
    f("--no-warmup", dest="warmup", type=SWITCH, const=False, help="skip the warm-up decode"),
    # prompt and conversation (llama-cli)
    f("-p", "--prompt", dest="prompt", tools=("cli",)),
    f("-f", "--file", dest="file", tools=("cli",)),
    f("-sys", "--system-prompt", dest="system_prompt", tools=("cli",)),
    f("-cnv", "--conversation", dest="conversation", type=SWITCH, tools=("cli",)),
    f("-no-cnv", "--no-conversation", dest="conversation", type=SWITCH, const=False,
      tools=("cli",)),
    f("-st", "--single-turn", dest="single_turn", type=SWITCH, default=False, tools=("cli",)),
    f("-r", "--reverse-prompt", dest="reverse_prompt", tools=("cli",)),
    f("--ignore-eos", dest="ignore_eos", type=SWITCH, default=False,
      help="generate past end-of-generation tokens (llama-server: every request's default)"),
    # sampling (common_params_sampling; None: SamplingParams' default)
    f("--grammar", dest="grammar", help="a GBNF grammar the output must match"),
    f("--grammar-file", dest="grammar_file", help="a file holding a GBNF grammar"),
    f("-j", "--json-schema", dest="json_schema",
      help="a JSON schema the output must match (e.g. '{}' for any JSON value)"),
    f("-jf", "--json-schema-file", dest="json_schema_file",
      help="a file holding a JSON schema the output must match"),
    f("--samplers", dest="samplers", type=semicolon_list,
      help="samplers in order, separated by ';' (default: penalties;dry;top_n_sigma;top_k;"
           "typ_p;top_p;min_p;xtc;temperature)"),
    f("--sampling-seq", "--sampler-seq", dest="samplers",
      help="the sampler order as characters (default: edskypmxt)"),
    f("-s", "--seed", dest="seed", type=int, default=-1),
    f("--temp", "--temperature", dest="temp", type=float, default=0.8,
      env="LLAMA_ARG_TEMPERATURE"),
    f("--top-k", dest="top_k", type=int, default=40, env="LLAMA_ARG_TOP_K"),
    f("--top-p", dest="top_p", type=float, default=0.95, env="LLAMA_ARG_TOP_P"),
    f("--min-p", dest="min_p", type=float, default=0.05, env="LLAMA_ARG_MIN_P"),
    f("--top-nsigma", dest="top_n_sigma", type=float, help="top-n-sigma (-1.0 = disabled)"),
    f("--xtc-probability", dest="xtc_probability", type=float,
      help="XTC probability (0.0 = disabled)"),
    f("--xtc-threshold", dest="xtc_threshold", type=float, help="XTC threshold (default: 0.1)"),
    f("--typical", "--typical-p", dest="typical_p", type=float, default=1.0),
    f("--repeat-last-n", dest="repeat_last_n", type=int, default=64),
    f("--repeat-penalty", dest="repeat_penalty", type=float, default=1.0,
      env="LLAMA_ARG_REPEAT_PENALTY"),
    f("--presence-penalty", dest="presence_penalty", type=float, default=0.0,
      env="LLAMA_ARG_PRESENCE_PENALTY"),
    f("--frequency-penalty", dest="frequency_penalty", type=float, default=0.0,
      env="LLAMA_ARG_FREQUENCY_PENALTY"),
    f("--dry-multiplier", dest="dry_multiplier", type=float,
      help="DRY multiplier (0.0 = disabled)"),
    f("--dry-base", dest="dry_base", type=float, help="DRY base, at least 1.0 (default: 1.75)"),
    f("--dry-allowed-length", dest="dry_allowed_length", type=int,
      help="DRY allowed length (default: 2)"),
    f("--dry-penalty-last-n", dest="dry_penalty_last_n", type=int,
      help="tokens DRY scans (0 = disabled, -1 = context size)"),
    f("--dry-sequence-breaker", dest="dry_sequence_breakers", type=list,
      help="a DRY sequence breaker, repeatable; the first replaces the defaults (\\n : \" *); "
           "'none' for no breakers"),
    f("--dynatemp-range", dest="dynatemp_range", type=float,
      help="dynamic temperature range (0.0 = disabled)"),
    f("--dynatemp-exp", dest="dynatemp_exponent", type=float,
      help="dynamic temperature exponent (default: 1.0)"),
    f("--mirostat", dest="mirostat", type=int, default=0),
    f("--mirostat-lr", dest="mirostat_eta", type=float, default=0.1),
    f("--mirostat-ent", dest="mirostat_tau", type=float, default=5.0),
    f("-l", "--logit-bias", dest="logit_bias", type=list,
      help="TOKEN_ID(+/-)BIAS, repeatable: 15043+1 raises token 15043, 15043-inf bans it"),
    f("-ctk", "--cache-type-k", dest="cache_type_k", default="f16",
      env="LLAMA_ARG_CACHE_TYPE_K", help="KV cache data type for K; allowed values: f32, f16, "
      "bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1 (default: f16)"),
    f("-ctv", "--cache-type-v", dest="cache_type_v", default="f16",
      env="LLAMA_ARG_CACHE_TYPE_V", help="KV cache data type for V; allowed values: f32, f16, "
      "bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1 (default: f16)"),
    f("-fa", "--flash-attn", dest="flash_attn", type=flash_attn_value, default="auto",
      env="LLAMA_ARG_FLASH_ATTN", help="set Flash Attention use ('on', 'off', or 'auto', "
      "default: 'auto'); a quantized V cache needs it on"),
    f("--repack", dest="repack", type=SWITCH, default=None, env="LLAMA_ARG_REPACK",
      help="re-encode Q5_0/IQ4_NL weights as Q8_0: faster batched decoding, more memory "
           "(default: only llama-server with --parallel > 1)"),
    f("-nr", "--no-repack", dest="repack", type=SWITCH, const=False,
      help="keep Q5_0/IQ4_NL (and Q6_K) weights as the file has them: less memory (a draft "
           "model's too, which is otherwise repacked)"),
    # model loading (llama.cpp's --load-mode; --mmap, --no-mmap, --mlock and -dio are its older,
    # deprecated spellings)
    f("-lm", "--load-mode", dest="load_mode", type=load_mode, default="auto",
      env="LLAMA_ARG_LOAD_MODE",
      help="model loading mode (default: auto): auto (mmap), none (read into private memory), "
           "mmap (memory-map the file), mlock (private memory, locked in RAM), mmap+mlock "
           "(mmap, locked in RAM), dio (read with direct I/O if available)"),
    f("--mmap", dest="load_mode", type=SWITCH, const="mmap",
      help="DEPRECATED in favor of `--load-mode`: memory-map the model"),
    f("--no-mmap", dest="load_mode", type=SWITCH, const="none",
      help="DEPRECATED in favor of `--load-mode`: read the model into private memory"),
    f("--mlock", dest="load_mode", type=SWITCH, const="mlock",
      help="DEPRECATED in favor of `--load-mode`: keep the model in RAM (private, locked)"),
    f("-dio", "--direct-io", dest="load_mode", type=SWITCH, const="dio",
      help="DEPRECATED in favor of `--load-mode`: read the model with direct I/O"),
    # context controls (llama.cpp's defaults: no context shift, no chunk reuse, 8 GiB of RAM
    # for idle slots' prompts)
    f("--context-shift", dest="context_shift", type=SWITCH, default=False,
      env="LLAMA_ARG_CONTEXT_SHIFT",
      help="whether to use context shift on infinite text generation (default: disabled): a "
           "full context keeps --keep tokens and drops half of the rest"),
    f("--no-context-shift", dest="context_shift", type=SWITCH, const=False),
    f("--keep", dest="n_keep", type=int, default=0,
      help="number of tokens to keep from the initial prompt (default: 0, -1 = all)"),
    f("--cache-reuse", dest="cache_reuse", type=int, default=0, env="LLAMA_ARG_CACHE_REUSE",
      tools=("server",),
      help="min chunk size to attempt reusing from the cache via KV shifting, requires prompt "
           "caching to be enabled (default: 0)"),
    f("-cram", "--cache-ram", dest="cache_ram", type=int, default=8192,
      env="LLAMA_ARG_CACHE_RAM", tools=("server",),
      help="set the maximum cache size in MiB (default: 8192, -1 - no limit, 0 - disable)"),
    # server
    f("--host", dest="host", default="127.0.0.1", env="LLAMA_ARG_HOST", tools=("server",)),
    f("--port", dest="port", type=int, default=8080, env="LLAMA_ARG_PORT", tools=("server",)),
    f("-np", "--parallel", dest="parallel", type=int, default=1, env="LLAMA_ARG_N_PARALLEL",
      tools=("server",)),
    f("-a", "--alias", dest="alias", env="LLAMA_ARG_ALIAS", tools=("server",)),
    f("--api-key", dest="api_key", env="LLAMA_API_KEY", tools=("server",),
      help="API keys, comma separated"),
    f("--api-key-file", dest="api_key_file", env="LLAMA_ARG_API_KEY_FILE", tools=("server",)),
    f("--webui", "--ui", dest="webui", type=SWITCH, default=True, env="LLAMA_ARG_UI",
      tools=("server",)),
    f("--no-webui", "--no-ui", dest="webui", type=SWITCH, const=False, tools=("server",)),
    f("--path", dest="static_path", default="", env="LLAMA_ARG_STATIC_PATH", tools=("server",),
      help="path to serve static files from (default: the built-in web page)"),
    f("--ollama", dest="ollama", type=SWITCH, default=False, tools=("server",),
      help="listen where Ollama does: OLLAMA_HOST, else 127.0.0.1:11434 (--host and --port "
           "still win); the Ollama API (/api/*) is always served"),
    # router mode (llama-server without -m: one child llama-server per model, server/router.py)
    f("--models-dir", dest="models_dir", env="LLAMA_ARG_MODELS_DIR", tools=("server",),
      help="router mode: a folder of models (*.gguf, or one subfolder per model)"),
    f("--models-preset", dest="models_preset", env="LLAMA_ARG_MODELS_PRESET", tools=("server",),
      help="router mode: an INI file of model presets ([*] for every model, [name] for one)"),
    f("--models-max", dest="models_max", type=int, default=4, env="LLAMA_ARG_MODELS_MAX",
      tools=("server",), help="router mode: models loaded at once (default: 4, 0 = unlimited)"),
    f("--models-autoload", dest="models_autoload", type=SWITCH, default=True,
      env="LLAMA_ARG_MODELS_AUTOLOAD", tools=("server",),
      help="router mode: load a model when a request names it (default)"),
    f("--no-models-autoload", dest="models_autoload", type=SWITCH, const=False,
      tools=("server",), help="router mode: a request for an unloaded model is a 400"),
    f("--sleep-idle-seconds", dest="sleep_idle_seconds", type=int, default=-1,
      env="LLAMA_ARG_SLEEP_IDLE_SECONDS", tools=("server",),
      help="router mode: unload a model idle this long; it sleeps until the next request "
           "(-1 = never)"),
    # embeddings (issue 14): an embedding server answers /v1/embeddings, /embedding, /rerank
    f("--embedding", "--embeddings", dest="embedding", type=SWITCH, default=False,
      env="LLAMA_ARG_EMBEDDINGS", tools=("server",),
      help="restrict to only support embedding use case; use only with dedicated embedding "
           "models"),
    f("--rerank", "--reranking", dest="rerank", type=SWITCH, default=False,
      env="LLAMA_ARG_RERANKING", tools=("server",),
      help="enable reranking endpoint on server (--embedding with --pooling rank)"),
    f("--pooling", dest="pooling", type=pooling_name, env="LLAMA_ARG_POOLING", tools=("server",),
      help="{none,mean,cls,last,rank}: pooling type for embeddings (default: the model's)"),
    f("--embd-normalize", dest="embd_normalize", type=int, default=2, tools=("server",),
      help="normalisation for embeddings (-1=none, 0=max absolute int16, 1=taxicab, "
           "2=euclidean, >2=p-norm)"),
    f("--metrics", dest="metrics", type=SWITCH, default=False, env="LLAMA_ARG_ENDPOINT_METRICS",
      tools=("server",)),
    f("--slots", dest="slots", type=SWITCH, default=True, env="LLAMA_ARG_ENDPOINT_SLOTS",
      tools=("server",)),
    f("--no-slots", dest="slots", type=SWITCH, const=False, tools=("server",)),
    f("-to", "--timeout", dest="timeout", type=int, default=600, env="LLAMA_ARG_TIMEOUT",
      tools=("server",), help="seconds an idle connection is kept open"),
    f("--threads-http", dest="threads_http", type=int, default=-1, env="LLAMA_ARG_THREADS_HTTP",
      tools=("server",), help="threads for request work off the event loop (-1: the default "
                              "pool)"),
    f("-cb", "--cont-batching", dest="cont_batching", type=SWITCH, default=True,
      env="LLAMA_ARG_CONT_BATCHING", tools=("server",),
      help="continuous batching: always on"),
    f("-nocb", "--no-cont-batching", dest="cont_batching", type=SWITCH, const=False,
      tools=("server",), help="refused: llamacpy always batches continuously"),
    f("--chat-template-kwargs", dest="chat_template_kwargs",
      env="LLAMA_ARG_CHAT_TEMPLATE_KWARGS", tools=("server",)),
    f("--reasoning-format", dest="reasoning_format", default="auto", env="LLAMA_ARG_THINK",
      tools=("server",),
      help="none, deepseek, deepseek-legacy or auto"),
    f("-rea", "--reasoning", dest="reasoning", default="auto", env="LLAMA_ARG_REASONING",
      tools=("server", "cli"), help="thinking on, off or auto (the template's default)"),
    f("--reasoning-budget", dest="reasoning_budget", type=int, default=-1,
      env="LLAMA_ARG_THINK_BUDGET", tools=("server",),
      help="thinking tokens before the end of thinking is forced (-1: unlimited)"),
    # multimodal (tools/mtmd): the projector always runs on the CPU
    f("-mm", "--mmproj", dest="mmproj", env="LLAMA_ARG_MMPROJ",
      help="multimodal projector file (mmproj GGUF) for image input"),
    f("--mmproj-offload", dest="mmproj_offload", type=SWITCH, env="LLAMA_ARG_MMPROJ_OFFLOAD",
      help="no GPU: the projector runs on the CPU (a warning says so)"),
    f("--no-mmproj-offload", dest="mmproj_offload", type=SWITCH, const=False,
      help="keep the projector on the CPU (where it always runs)"),
    f("-mmdev", "--mmproj-device", dest="mmproj_device", env="MTMD_BACKEND_DEVICE",
      help="only 'none' (CPU)"),
    f("--image-min-tokens", dest="image_min_tokens", type=int, default=-1,
      env="LLAMA_ARG_IMAGE_MIN_TOKENS", help="fewest tokens an image may take (dynamic-"
      "resolution projectors; default: from the model)"),
    f("--image-max-tokens", dest="image_max_tokens", type=int, default=-1,
      env="LLAMA_ARG_IMAGE_MAX_TOKENS", help="most tokens an image may take"),
    f("--image", dest="image", type=list, tools=("cli",),
      help="image file for the prompt; repeat or comma-separate for several"),
    # speculative decoding (common_params_speculative; llama.cpp's defaults)
    f("--spec-type", dest="spec_type", env="LLAMA_ARG_SPEC_TYPE",
      help="comma-separated speculative decoding types: none, ngram-simple, draft-simple, "
           "draft-mtp (the model's own MTP block) (default: none; draft-simple when -md is "
           "given)"),
    f("-md", "--model-draft", "--spec-draft-model", dest="model_draft",
      env="LLAMA_ARG_SPEC_DRAFT_MODEL", help="draft model for speculative decoding"),
    f("--spec-draft-n-max", "--draft-max", "--draft", "--draft-n", dest="draft_max", type=int,
      default=3, env="LLAMA_ARG_SPEC_DRAFT_N_MAX",
      help="tokens a draft model drafts per step (default: 3)"),
    f("--spec-draft-n-min", "--draft-min", "--draft-n-min", dest="draft_min", type=int,
      default=0, env="LLAMA_ARG_SPEC_DRAFT_N_MIN",
      help="a draft model's shorter drafts are dropped (default: 0)"),
    f("--spec-draft-p-min", "--draft-p-min", dest="draft_p_min", type=float, default=0.0,
      env="LLAMA_ARG_SPEC_DRAFT_P_MIN",
      help="a draft model stops at a token less likely than this (greedy; default: 0.00)"),
    f("--spec-draft-vocab", dest="draft_vocab", type=int, default=32768,
      env="LLAMA_ARG_SPEC_DRAFT_VOCAB",
      help="a draft model's (or MTP block's) output head covers the first N token ids and "
           "those in the sequences; the target verifies every draft, so the output is the same "
           "(llamacpy's own; 0: the whole vocabulary; default: 32768)"),
    f("-cd", "--ctx-size-draft", dest="ctx_size_draft", type=int, default=0,
      help="the draft model's context size (0: the same as -c)"),
    f("-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", "--spec-draft-ngl",
      dest="n_gpu_layers_draft", default="auto", env="LLAMA_ARG_N_GPU_LAYERS_DRAFT",
      help="only 0 or auto: the draft model runs on the CPU"),
    f("--spec-ngram-simple-size-n", dest="spec_ngram_size_n", type=int, default=12,
      help="ngram-simple: length of the n-gram looked up (default: 12)"),
    f("--spec-ngram-simple-size-m", dest="spec_ngram_size_m", type=int, default=48,
      help="ngram-simple: length of the draft that follows it (default: 48)"),
    # logging
    f("-v", "--verbose", "--log-verbose", dest="verbose", type=SWITCH, default=False,
      help="log everything (debug messages included)"),
    f("-lv", "--verbosity", "--log-verbosity", dest="verbosity", type=int, default=3,
      env="LLAMA_ARG_LOG_VERBOSITY",
      help="log threshold: 0 output, 1 errors, 2 warnings, 3 info (default), 4 debug"),
    f("--log-disable", dest="log_disable", type=SWITCH, default=False, help="no log messages"),
    f("--log-file", dest="log_file", env="LLAMA_ARG_LOG_FILE", help="log to this file"),
]

# llama-perplexity (tools/perplexity): its own flags, and the shared ones it reads
FLAGS += [
    f("--chunks", dest="chunks", type=int, default=-1, tools=("perplexity",),
      help="max number of chunks to process (-1 = all)"),
    f("--kl-divergence", dest="kl_divergence", type=SWITCH, default=False, tools=("perplexity",),
      help="computes KL-divergence to logits provided via --kl-divergence-base"),
    f("--save-all-logits", "--kl-divergence-base", dest="logits_file", tools=("perplexity",),
      help="base log-probabilities file: written, or read with --kl-divergence"),
    f("--ppl-output-type", dest="ppl_output_type", type=int, default=0, tools=("perplexity",),
      help="output type for perplexity calculation: 0 [1]PPL,... or 1 one line per chunk"),
]
PERPLEXITY_SHARED = {"model", "hf_repo", "ctx_size", "batch_size", "ubatch_size", "threads",
                     "threads_batch", "n_gpu_layers", "device", "prompt", "file", "cache_type_k",
                     "cache_type_v", "flash_attn", "repack", "verbose", "verbosity",
                     "log_disable", "log_file"}
FLAGS = [Flag(fl.names, fl.dest, fl.type, fl.default, fl.env, fl.help,
              fl.tools + ("perplexity",), fl.const) if fl.dest in PERPLEXITY_SHARED else fl
         for fl in FLAGS]

# llama.cpp flags llamacpy does not support yet -> whether they take a value
NOT_SUPPORTED = {
    **{k: True for k in ("--lora", "--lora-scaled", "--control-vector",
                         "--rope-scaling",
                         "--rope-scale", "--rope-freq-base", "--rope-freq-scale", "-ot", "--override-tensor",
                         "--override-kv", "--numa", "-sm", "--split-mode",
                         "-ts", "--tensor-split", "-mg", "--main-gpu",
                         "--audio", "--video", "-mmu", "--mmproj-url", "--prompt-cache",
                         "--media-path",
                         "--slot-save-path",
                         "-gan", "-gaw", "--in-prefix", "--in-suffix")},
    **{k: False for k in ("--swa-full", "-i",
                          "--interactive", "-if", "--interactive-first",
                          "--check-tensors", "-e", "--escape",
                          "--mmproj-auto", "--no-mmproj", "--no-mmproj-auto")},
}

# settings a flag (or its environment variable) can ask for that llamacpy cannot honour
REFUSED = {
    "jinja": (False, "--no-jinja is not supported: llamacpy renders every chat template with "
                     "Jinja"),
    "cont_batching": (False, "-nocb / --no-cont-batching is not supported: llamacpy always "
                             "batches continuously"),
}

LOG_INFO, LOG_DEBUG, LOG_ALL = 3, 4, sys.maxsize  # llama.cpp's -lv levels; -v logs everything


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line (no usage dump), still with status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(tool: str, prog: str, description: str,
                 defaults: bool = True) -> argparse.ArgumentParser:
    """The tool's parser; without `defaults`, a flag absent from the command line is absent
    from the result (how `given_dests` learns what the user set)."""
    parser = ArgumentParser(prog=prog, description=description, allow_abbrev=False)
    for flag in FLAGS:
        if tool not in flag.tools:
            continue
        default = env_default(flag) if defaults else argparse.SUPPRESS
        if flag.type is SWITCH:
            parser.add_argument(*flag.names, dest=flag.dest, action="store_const",
                                const=flag.const, default=default, help=flag.help)
        elif flag.type is list:  # repeatable
            parser.add_argument(*flag.names, dest=flag.dest, action="append", default=default,
                                help=flag.help)
        else:
            parser.add_argument(*flag.names, dest=flag.dest, type=flag.type, default=default,
                                help=flag.help)
    return parser


def parse_args(tool: str, prog: str, description: str, argv: list[str]) -> argparse.Namespace:
    """Parse a tool's command line; unsupported flags and refused settings exit with status 2,
    -ngl / --device / --mmproj-offload warn that everything runs on the CPU."""
    refuse_unsupported(argv, prog)
    args = build_parser(tool, prog, description).parse_args(argv)
    warn_deprecated(argv, prog)
    args.given = given_dests(tool, prog, description, argv)
    if getattr(args, "ollama", False):
        ollama_address(args)
    redirect_log(args)
    for dest, (value, message) in REFUSED.items():
        if getattr(args, dest, None) is value:
            fail(prog, message)
    check_cpu_only(args, prog)
    return args


OLLAMA_PORT = 11434


def ollama_address(args: argparse.Namespace) -> None:
    """--ollama: host and port from OLLAMA_HOST ("host", "host:port", "http://host:port",
    ":port"), else Ollama's 127.0.0.1:11434; a --host or --port given explicitly stays."""
    value = os.environ.get("OLLAMA_HOST", "").strip()
    value = value.split("://", 1)[-1].rstrip("/")
    host, sep, port = value.rpartition(":") if value.count(":") == 1 else (value, "", "")
    host = host if sep else value
    if "host" not in args.given:
        args.host = host.strip("[]") or "127.0.0.1"
    if "port" not in args.given:
        args.port = int(port) if port.isdigit() else OLLAMA_PORT


def given_dests(tool: str, prog: str, description: str, argv: list[str]) -> set[str]:
    """The dests the user set, on the command line or through LLAMA_ARG_* (a flag given at
    its default value still counts: it beats model metadata, as in llama.cpp)."""
    parsed = build_parser(tool, prog, description, defaults=False).parse_args(argv)
    from_env = {f.dest for f in FLAGS if tool in f.tools and f.env and f.env in os.environ}
    return set(vars(parsed)) | from_env


def sampling_given(args: argparse.Namespace) -> set[str]:
    """The SamplingParams fields the user set (all of them when `given` is unknown)."""
    given = getattr(args, "given", None)
    return {field for dest, field in SAMPLING.items() if given is None or dest in given}


def grammar_from_args(args: argparse.Namespace, prog: str):
    """(Grammar, its source) from --grammar / --grammar-file / -j / -jf, or (None, ""); a bad
    grammar or an unreadable file ends the tool with one line."""
    from ..grammar import Grammar, GrammarError

    def read(path: str) -> str:
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read()
        except OSError as e:
            fail(prog, f"cannot read {path}: {e.strerror}")

    gbnf = args.grammar if args.grammar is not None else (
        read(args.grammar_file) if args.grammar_file else None)
    schema = args.json_schema if args.json_schema is not None else (
        read(args.json_schema_file) if args.json_schema_file else None)
    if gbnf is not None and schema is not None:
        fail(prog, "give a grammar (--grammar, --grammar-file) or a JSON schema (-j, -jf), "
                   "not both")
    try:
        if gbnf is not None:
            return Grammar.from_gbnf(gbnf), gbnf
        if schema is not None:
            return Grammar.from_json_schema(schema), schema
    except GrammarError as e:
        fail(prog, f"invalid {'grammar' if gbnf is not None else 'JSON schema'}: {e}")
    return None, ""


def fail(prog: str, message: str) -> None:
    """End the tool with one line on stderr and argparse's status 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def csv_values(values: list[str] | None) -> list[str]:
    """A repeatable flag's values, each split at commas (--image a.jpg,b.png --image c.jpg)."""
    return [v.strip() for value in values or [] for v in value.split(",") if v.strip()]


def env_default(flag: Flag):
    """The flag's LLAMA_ARG_* value when set (typed like the flag), else its default."""
    raw = os.environ.get(flag.env) if flag.env else None
    if raw is None:
        return flag.default
    if flag.type is SWITCH:
        return raw.lower() in ("1", "true", "on", "yes", "enabled")
    return flag.type(raw)


def refuse_unsupported(argv: list[str], prog: str) -> None:
    """A llama.cpp flag llamacpy does not support ends the tool: one line, status 2."""
    for arg in argv:
        name = arg.split("=", 1)[0]
        if name in NOT_SUPPORTED:
            fail(prog, f"{name} is not supported by llamacpy yet")


def check_cpu_only(args: argparse.Namespace, tool: str) -> None:
    """-ngl N, --device X and --mmproj-offload have no GPU to use: say so once and run on the
    CPU (llama.cpp's CPU build does the same); -hf has no hub to reach: refuse."""
    ngl = str(getattr(args, "n_gpu_layers", "0"))
    if ngl not in ("0", "auto", "") and ngl is not None:
        print(f"{tool}: warning: no GPU available; -ngl {ngl} ignored, running on the CPU",
              file=sys.stderr)
    device = getattr(args, "device", None)
    if device and device.lower() not in ("none", "cpu"):
        print(f"{tool}: warning: device '{device}' not available; running on the CPU",
              file=sys.stderr)
    mmdev = getattr(args, "mmproj_device", None)
    if mmdev and mmdev.lower() not in ("none", "cpu"):
        print(f"{tool}: warning: mmproj device '{mmdev}' not available; the projector runs on "
              f"the CPU", file=sys.stderr)
    if getattr(args, "mmproj_offload", None):
        print(f"{tool}: warning: no GPU available; --mmproj-offload has no effect, the projector "
              f"runs on the CPU", file=sys.stderr)
    ngld = str(getattr(args, "n_gpu_layers_draft", "auto"))
    if ngld not in ("0", "auto"):
        fail(tool, f"-ngld {ngld} is not supported: no GPU is available and the draft model "
                   f"runs on the CPU (give 0 or auto)")
    if getattr(args, "hf_repo", None):
        fail(tool, "no model hub is reachable from here; install a model with `llamacpy pull "
                   "NAME` and pass -m NAME")


def redirect_log(args: argparse.Namespace) -> None:
    """--log-file: the tool's log (stderr) goes to this file, appended."""
    if args.log_file:
        sys.stderr = open(args.log_file, "a", buffering=1, encoding="utf-8")  # noqa: SIM115


def verbosity(args: argparse.Namespace) -> int:
    """The log threshold: --log-disable -1 (nothing), -v everything, else -lv (default 3)."""
    if args.log_disable:
        return -1
    return LOG_ALL if args.verbose else args.verbosity


def cache_types(args: argparse.Namespace) -> tuple[str, str]:
    """-ctk and -ctv, checked (ValueError naming an unsupported type), with llama.cpp's -fa rule:
    a quantized V cache turns -fa auto on (and says so), and -fa off refuses to start."""
    from ..memory.kv_cache import resolve_flash_attn

    args.flash_attn, note = resolve_flash_attn(args.flash_attn, args.cache_type_k,
                                               args.cache_type_v)
    if note and verbosity(args) >= LOG_INFO:
        print(f"llama_init_from_model: {note}", file=sys.stderr)
    return args.cache_type_k, args.cache_type_v


def chat_template_text(args: argparse.Namespace) -> str | None:
    """--chat-template-file's text, else --chat-template (a builtin name or a template)."""
    if args.chat_template_file:
        with open(args.chat_template_file, encoding="utf-8") as fh:
            return fh.read()
    return args.chat_template


# flag dest -> SamplingParams field, for the sampling flags
SAMPLING = {"temp": "temperature", "seed": "seed", "samplers": "samplers", "top_k": "top_k",
            "top_p": "top_p", "min_p": "min_p", "top_n_sigma": "top_n_sigma",
            "xtc_probability": "xtc_probability", "xtc_threshold": "xtc_threshold",
            "typical_p": "typical_p", "repeat_last_n": "repeat_last_n",
            "repeat_penalty": "repeat_penalty", "presence_penalty": "presence_penalty",
            "frequency_penalty": "frequency_penalty", "dry_multiplier": "dry_multiplier",
            "dry_base": "dry_base", "dry_allowed_length": "dry_allowed_length",
            "dry_penalty_last_n": "dry_penalty_last_n",
            "dry_sequence_breakers": "dry_sequence_breakers",
            "dynatemp_range": "dynatemp_range", "dynatemp_exponent": "dynatemp_exponent",
            "mirostat": "mirostat", "mirostat_eta": "mirostat_eta",
            "mirostat_tau": "mirostat_tau", "logit_bias": "logit_bias"}


def sampling_params(args: argparse.Namespace) -> SamplingParams:
    """The sampling flags as SamplingParams (common/arg.cpp's checks; ValueError on a bad
    value). Flags left unset keep SamplingParams' defaults."""
    values = {field: getattr(args, dest) for dest, field in SAMPLING.items()
              if getattr(args, dest, None) is not None}
    values["temperature"] = max(values["temperature"], 0.0)  # as llama.cpp's --temp
    for name in ("repeat_last_n", "dry_penalty_last_n"):
        if values.get(name, 0) < -1:
            raise ValueError(f"invalid --{name.replace('_', '-')} = {values[name]}")
    if values.get("dry_base", 1.0) < 1.0:
        raise ValueError(f"--dry-base must be at least 1.0 (got {values['dry_base']})")
    if "dry_sequence_breakers" in values:
        values["dry_sequence_breakers"] = sequence_breakers(values["dry_sequence_breakers"])
    if "logit_bias" in values:
        values["logit_bias"] = logit_biases(values["logit_bias"])
    with warnings.catch_warnings():  # a sampler name that matches none would drop silently
        warnings.simplefilter("error", UserWarning)
        try:
            return SamplingParams(**values)
        except UserWarning as w:
            raise ValueError(f"--samplers / --sampling-seq: {w}") from None


def sequence_breakers(values: list[str]) -> list[str]:
    """--dry-sequence-breaker values: they replace the defaults; "none" clears the list."""
    out: list[str] = []
    for value in values:
        if value == "none":
            out.clear()
        else:
            out.append(value)
    return out


def logit_biases(values: list[str]) -> dict[int, float]:
    """-l TOKEN_ID(+/-)BIAS values (15043+1, 15043-1, 15043-inf); a token given twice adds up."""
    out: dict[int, float] = {}
    for value in values:
        digits = len(value) - len(value.lstrip("0123456789"))
        sign, rest = value[digits:digits + 1], value[digits + 1:]
        try:
            if not digits or sign not in ("+", "-"):
                raise ValueError
            bias = float(rest) * (-1.0 if sign == "-" else 1.0)
        except ValueError:
            raise ValueError(f"invalid --logit-bias '{value}' (expected TOKEN_ID(+/-)BIAS, "
                             f"e.g. 15043+1)") from None
        if math.isnan(bias):
            raise ValueError(f"invalid --logit-bias '{value}'")
        token = int(value[:digits])
        out[token] = out.get(token, 0.0) + bias
    return out


def spec_config(args: argparse.Namespace):
    """The speculative-decoding flags as a SpecConfig (-md may name a catalogue model), or
    None when none is asked for (ValueError for an unknown or unsupported --spec-type, a draft
    type without -md, or a draft flag that nothing would use)."""
    from ..engine.speculative import SpecConfig, parse_spec_types

    for name in ("spec_ngram_size_n", "spec_ngram_size_m"):
        if not 1 <= getattr(args, name) <= 1024:
            raise ValueError("ngram size must be between 1 and 1024 inclusive")
    if args.draft_max < 0 or args.ctx_size_draft < 0 or args.draft_vocab < 0:
        raise ValueError("--spec-draft-n-max, --spec-draft-vocab and -cd must not be negative")
    from ..hub import resolve_model

    draft = str(resolve_model(args.model_draft)) if args.model_draft else None
    cfg = SpecConfig(types=parse_spec_types(args.spec_type or ""), draft_model=draft,
                     n_max=args.draft_max, n_min=args.draft_min, p_min=args.draft_p_min,
                     n_ctx_draft=args.ctx_size_draft, draft_vocab=args.draft_vocab,
                     repack_draft=args.repack is not False,
                     ngram_size_n=args.spec_ngram_size_n, ngram_size_m=args.spec_ngram_size_m)
    types = cfg.resolved_types()
    users = {"draft": ("draft-simple", "draft-mtp"), "ctx": ("draft-simple",),
             "spec": ("ngram-simple",)}  # the types that read each flag
    unused = [DRAFT_FLAGS[d] for d in DRAFT_FLAGS if d in getattr(args, "given", ())
              and not set(users[d.split("_")[0]]) & set(types)]
    if unused:
        needs = "-md or --spec-type draft-mtp" if unused[0] in DRAFT_ONLY else \
            "-md" if unused[0] == "-cd" else "--spec-type ngram-simple"
        raise ValueError(f"{unused[0]} has no effect without {needs}")
    return cfg if types else None


# flags that only a speculative type uses: given without it, they would do nothing
DRAFT_FLAGS = {"draft_max": "--spec-draft-n-max", "draft_min": "--spec-draft-n-min",
               "draft_p_min": "--spec-draft-p-min", "ctx_size_draft": "-cd",
               "draft_vocab": "--spec-draft-vocab",
               "spec_ngram_size_n": "--spec-ngram-simple-size-n",
               "spec_ngram_size_m": "--spec-ngram-simple-size-m"}
DRAFT_ONLY = {"--spec-draft-n-max", "--spec-draft-n-min", "--spec-draft-p-min",
              "--spec-draft-vocab"}


def template_kwargs(args: argparse.Namespace) -> dict:
    """-rea on|off as the chat template's enable_thinking (auto: the template's default)."""
    if args.reasoning not in ("on", "off", "auto"):
        raise ValueError("--reasoning must be on, off or auto")
    return {} if args.reasoning == "auto" else {"enable_thinking": args.reasoning == "on"}
