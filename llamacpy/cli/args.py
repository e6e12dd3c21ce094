"""Command-line flags with llama.cpp's names, defined once for every tool (common/arg.cpp).

Each flag may also come from its LLAMA_ARG_* environment variable. Flags llama.cpp has but
llamacpy does not support yet are recognised and answered with one line saying so, never
silently dropped.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Flag:
    names: tuple[str, ...]
    dest: str
    type: type | None = str  # None: a switch (store_true)
    default: object = None
    env: str | None = None
    help: str = ""
    tools: tuple[str, ...] = ("cli", "server")
    const: object = True  # value stored by a switch


def f(*names, dest, type=str, default=None, env=None, help="", tools=("cli", "server"),
      const=True) -> Flag:
    return Flag(tuple(names), dest, type, default, env, help, tools, const)


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
    f("-t", "--threads", dest="threads", type=int, default=-1, env="LLAMA_ARG_THREADS"),
    f("-tb", "--threads-batch", dest="threads_batch", type=int, default=-1),
    f("-ngl", "--gpu-layers", "--n-gpu-layers", dest="n_gpu_layers", default="0",
      env="LLAMA_ARG_N_GPU_LAYERS", help="GPU layers: llamacpy runs on the CPU"),
    f("-dev", "--device", dest="device", env="LLAMA_ARG_DEVICE", help="only 'none' (CPU)"),
    f("--jinja", dest="jinja", type=SWITCH, default=True, env="LLAMA_ARG_JINJA"),
    f("--no-jinja", dest="jinja", type=SWITCH, const=False),
    f("--chat-template", dest="chat_template", env="LLAMA_ARG_CHAT_TEMPLATE"),
    f("--chat-template-file", dest="chat_template_file", env="LLAMA_ARG_CHAT_TEMPLATE_FILE"),
    # prompt and conversation (llama-cli)
    f("-p", "--prompt", dest="prompt", tools=("cli",)),
    f("-f", "--file", dest="file", tools=("cli",)),
    f("-sys", "--system-prompt", dest="system_prompt", tools=("cli",)),
    f("-cnv", "--conversation", dest="conversation", type=SWITCH, tools=("cli",)),
    f("-no-cnv", "--no-conversation", dest="conversation", type=SWITCH, const=False,
      tools=("cli",)),
    f("-st", "--single-turn", dest="single_turn", type=SWITCH, default=False, tools=("cli",)),
    f("-r", "--reverse-prompt", dest="reverse_prompt", tools=("cli",)),
    f("--ignore-eos", dest="ignore_eos", type=SWITCH, default=False),
    # sampling
    f("-s", "--seed", dest="seed", type=int, default=-1),
    f("--temp", "--temperature", dest="temp", type=float, default=0.8,
      env="LLAMA_ARG_TEMPERATURE"),
    f("--top-k", dest="top_k", type=int, default=40, env="LLAMA_ARG_TOP_K"),
    f("--top-p", dest="top_p", type=float, default=0.95, env="LLAMA_ARG_TOP_P"),
    f("--min-p", dest="min_p", type=float, default=0.05, env="LLAMA_ARG_MIN_P"),
    f("--typical", "--typical-p", dest="typical_p", type=float, default=1.0),
    f("--repeat-last-n", dest="repeat_last_n", type=int, default=64),
    f("--repeat-penalty", dest="repeat_penalty", type=float, default=1.0,
      env="LLAMA_ARG_REPEAT_PENALTY"),
    f("--presence-penalty", dest="presence_penalty", type=float, default=0.0,
      env="LLAMA_ARG_PRESENCE_PENALTY"),
    f("--frequency-penalty", dest="frequency_penalty", type=float, default=0.0,
      env="LLAMA_ARG_FREQUENCY_PENALTY"),
    f("--mirostat", dest="mirostat", type=int, default=0),
    f("--mirostat-lr", dest="mirostat_eta", type=float, default=0.1),
    f("--mirostat-ent", dest="mirostat_tau", type=float, default=5.0),
    f("-ctk", "--cache-type-k", dest="cache_type_k", default="f16",
      env="LLAMA_ARG_CACHE_TYPE_K", help="KV cache type for K: f16 or f32"),
    f("-ctv", "--cache-type-v", dest="cache_type_v", default="f16",
      env="LLAMA_ARG_CACHE_TYPE_V", help="KV cache type for V: f16 or f32"),
    f("--repack", dest="repack", type=SWITCH, default=None, env="LLAMA_ARG_REPACK",
      help="re-encode Q5_0/IQ4_NL weights as Q8_0: faster batched decoding, more memory "
           "(default: only llama-server with --parallel > 1)"),
    f("--no-repack", dest="repack", type=SWITCH, const=False),
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
    f("--metrics", dest="metrics", type=SWITCH, default=False, env="LLAMA_ARG_ENDPOINT_METRICS",
      tools=("server",)),
    f("--slots", dest="slots", type=SWITCH, default=True, env="LLAMA_ARG_ENDPOINT_SLOTS",
      tools=("server",)),
    f("--no-slots", dest="slots", type=SWITCH, const=False, tools=("server",)),
    f("-to", "--timeout", dest="timeout", type=int, default=600, env="LLAMA_ARG_TIMEOUT",
      tools=("server",), help="seconds an idle connection is kept open"),
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
    f("--no-mmproj-offload", dest="mmproj_offload", type=SWITCH, const=False, default=True,
      env="LLAMA_ARG_MMPROJ_OFFLOAD"),
    f("--mmproj-offload", dest="mmproj_offload", type=SWITCH, default=True),
    f("-mmdev", "--mmproj-device", dest="mmproj_device", env="MTMD_BACKEND_DEVICE",
      help="only 'none' (CPU)"),
    f("--image-min-tokens", dest="image_min_tokens", type=int, default=-1,
      env="LLAMA_ARG_IMAGE_MIN_TOKENS", help="fewest tokens an image may take (dynamic-"
      "resolution projectors; default: from the model)"),
    f("--image-max-tokens", dest="image_max_tokens", type=int, default=-1,
      env="LLAMA_ARG_IMAGE_MAX_TOKENS", help="most tokens an image may take"),
    f("--image", dest="image", type=list, tools=("cli",),
      help="image file for the prompt; repeat or comma-separate for several"),
    f("-cb", "--cont-batching", dest="cont_batching", type=SWITCH, default=True,
      tools=("server",)),
    f("--threads-http", dest="threads_http", type=int, default=-1, tools=("server",)),
    # logging
    f("-v", "--verbose", "--log-verbose", dest="verbose", type=SWITCH, default=False),
    f("-lv", "--verbosity", "--log-verbosity", dest="verbosity", type=int, default=3,
      env="LLAMA_ARG_LOG_VERBOSITY"),
    f("--log-file", dest="log_file", env="LLAMA_ARG_LOG_FILE"),
]

# llama.cpp flags llamacpy does not support yet -> whether they take a value
NOT_SUPPORTED = {
    **{k: True for k in ("--grammar", "--grammar-file", "-j", "--json-schema", "-jf",
                         "--json-schema-file", "--lora", "--lora-scaled", "--control-vector",
                         "--rope-scaling",
                         "--rope-scale", "--rope-freq-base", "--rope-freq-scale", "-md",
                         "--model-draft", "--spec-type", "-ot", "--override-tensor",
                         "--override-kv", "-lm", "--load-mode", "--numa", "-sm", "--split-mode",
                         "-ts", "--tensor-split", "-mg", "--main-gpu", "--dry-multiplier",
                         "--xtc-probability", "-l", "--logit-bias", "--samplers", "--keep",
                         "--audio", "--video", "-mmu", "--mmproj-url", "--prompt-cache",
                         "--media-path",
                         "--models-dir", "--models-preset", "--slot-save-path", "-fa",
                         "--flash-attn", "--embd-normalize", "--cache-reuse",
                         "-gan", "-gaw", "--pooling", "--in-prefix", "--in-suffix")},
    **{k: False for k in ("--swa-full", "--context-shift", "-i", "--embedding", "--embeddings",
                          "--rerank", "--reranking",
                          "--interactive", "-if", "--interactive-first", "--no-warmup",
                          "--mlock", "--no-mmap", "--check-tensors", "-e", "--escape",
                          "--mmproj-auto", "--no-mmproj", "--no-mmproj-auto")},
}


def build_parser(tool: str, prog: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description, allow_abbrev=False)
    for flag in FLAGS:
        if tool not in flag.tools:
            continue
        default = env_default(flag)
        if flag.type is SWITCH:
            parser.add_argument(*flag.names, dest=flag.dest, action="store_const",
                                const=flag.const, default=default, help=flag.help)
        elif flag.type is list:  # repeatable, each value comma-separated (parse_csv_row)
            parser.add_argument(*flag.names, dest=flag.dest, action="append", default=default,
                                help=flag.help)
        else:
            parser.add_argument(*flag.names, dest=flag.dest, type=flag.type, default=default,
                                help=flag.help)
    return parser


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


def drop_unsupported(argv: list[str], tool: str) -> list[str]:
    """Remove flags llamacpy does not support yet, saying so once per flag on stderr."""
    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        if name in NOT_SUPPORTED:
            print(f"{tool}: {name} is not supported by llamacpy yet; ignoring it", file=sys.stderr)
            i += 2 if NOT_SUPPORTED[name] and "=" not in arg else 1
            continue
        out.append(arg)
        i += 1
    return out


def check_cpu_only(args: argparse.Namespace, tool: str) -> None:
    """-ngl N and --device X have no GPU to use: say so once and run on the CPU."""
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
    if getattr(args, "hf_repo", None):
        raise SystemExit(f"{tool}: error: no model hub is reachable from here; install a model "
                         f"with `llamacpy pull NAME` and pass -m NAME")
