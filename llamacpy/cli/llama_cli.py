"""llama-cli: chat with a model in the terminal, or complete one prompt (-no-cnv).

Conversation mode is on when the model has a chat template (as llama.cpp decides with
conversation "auto"); -st answers one turn and exits. Timings in llama.cpp's format at the end.
With --mmproj and --image, one question about the images (llama-mtmd-cli's single turn): the
prompt becomes a user message with a media marker in front for each image that it does not
place itself.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from ..chat import ChatTemplate, template_source
from ..engine.prompt import Prompt
from ..engine.sequence import Request
from ..engine.warmup import warm_up as engine_warm_up
from ..hub import default_chat_template, resolve_model
from ..llama import Llama
from .args import (LOG_DEBUG, LOG_INFO, cache_types, chat_template_text, csv_values,
                   grammar_from_args, parse_args, sampling_params, spec_config, template_kwargs,
                   verbosity)

TOOL = "llama-cli"


@dataclass
class Totals:
    t_load: float = 0.0
    n_prompt: int = 0
    t_prompt: float = 0.0
    n_gen: int = 0
    t_gen: float = 0.0
    n_images: int = 0
    t_image: float = 0.0
    verbosity: int = LOG_INFO  # the timings are info-level messages (-lv, --log-disable)

    def add(self, done: dict) -> None:
        """A finished generation's counts (its "done" event; times in ms)."""
        t = done["timings"]
        self.n_prompt += t["prompt_n"]
        self.t_prompt += t["prompt_ms"] / 1000
        self.t_image += t["image_ms"] / 1000
        self.n_gen += done["n_decoded"]
        self.t_gen += t["predicted_ms"] / 1000


def llama_kwargs(args) -> dict:
    """The Llama(...) keyword arguments the flags ask for (ValueError for a bad cache type)."""
    type_k, type_v = cache_types(args)
    return {"n_ctx": args.ctx_size, "n_batch": args.batch_size, "n_ubatch": args.ubatch_size,
            "n_threads": args.threads if args.threads > 0 else None,
            "n_threads_batch": args.threads_batch if args.threads_batch > 0 else None,
            "type_k": type_k, "type_v": type_v, "flash_attn": args.flash_attn,
            "repack": bool(args.repack),
            "load_mode": args.load_mode, "context_shift": bool(args.context_shift),
            "verbose": verbosity(args) >= LOG_DEBUG, "draft_model": spec_config(args)}


def warm_up(llm: Llama) -> list[tuple[str, float]]:
    """The server's warm-up (engine/warmup.py: prompt, few-token and one-token decodes), then
    forget them, so the first prompt's timing holds no kernel compilation; --no-warmup skips
    it. Returns (step, seconds) per step."""
    timings = engine_warm_up(llm._ctx, llm.tokenizer())
    llm.reset()
    return timings


def log_settings(llm: Llama, args) -> None:
    """-v: what the flags made of the context and the sampler (llama.cpp logs these at load)."""
    n_threads, n_threads_batch = llm._ctx.thread_counts()
    p = sampling_params(args)
    print(f"{TOOL}: n_ctx = {llm.n_ctx()}, n_batch = {args.batch_size}, n_ubatch = "
          f"{args.ubatch_size}, type_k = {args.cache_type_k}, type_v = {args.cache_type_v}, "
          f"flash_attn = {args.flash_attn}\n{TOOL}: {llm._ctx.cache.describe()}\n"
          f"{TOOL}: n_threads = {n_threads}, n_threads_batch = {n_threads_batch}\n"
          f"{TOOL}: sampler chain: {' -> '.join(p.samplers)}; seed = {p.seed}, temp = "
          f"{p.temperature}, top_k = {p.top_k}, top_p = {p.top_p}, min_p = {p.min_p}",
          file=sys.stderr)


def run_turn(llm: Llama, args, prompt_tokens: list[int] | Prompt, totals: Totals) -> str:
    """Generate one answer, streaming it to stdout; returns its text."""
    n_room = llm.n_ctx() - len(prompt_tokens)
    if n_room <= 0:
        raise SystemExit(f"{TOOL}: error: prompt is {len(prompt_tokens)} tokens, the context "
                         f"holds {llm.n_ctx()}")
    if args.context_shift:  # a full context shifts (keeping --keep tokens) instead of ending
        max_tokens = args.n_predict
    else:
        max_tokens = n_room if args.n_predict < 0 else min(args.n_predict, n_room)
    prompt = prompt_tokens if isinstance(prompt_tokens, Prompt) else Prompt(list(prompt_tokens))
    stops = [args.reverse_prompt] if args.reverse_prompt else []
    mask = args.grammar_compiled.mask(llm._tokenizer) if args.grammar_compiled else None
    request = Request(prompt, sampling_params(args), n_predict=max_tokens, stop=stops,
                      ignore_eos=args.ignore_eos, token_mask=mask, n_keep=args.n_keep)
    text = ""
    for event in llm._scheduler.generate(request):
        if event["type"] == "error":
            raise SystemExit(f"{TOOL}: error: {event['message']}")
        text += event["text"]
        sys.stdout.write(event["text"])
        sys.stdout.flush()
        if event["type"] == "done":
            totals.add(event)
    return text


def chat_template(llm: Llama, args) -> ChatTemplate:
    """--chat-template (a builtin name or the text) or --chat-template-file, else the model's."""
    source = chat_template_text(args)
    if not source:
        return llm.chat_template()
    tok = llm.tokenizer()
    return ChatTemplate(template_source(source), tok.bos_token, tok.eos_token,
                        add_bos=tok.add_bos, add_eos=tok.add_eos)


def conversation(llm: Llama, args, totals: Totals) -> None:
    template = chat_template(llm, args)
    messages = [{"role": "system", "content": args.system_prompt}] if args.system_prompt else []
    first = args.prompt
    while True:
        if first is not None:
            user, first = first, None
            print(f"> {user}")
        else:
            try:
                user = input("> ")
            except EOFError:
                print()
                return
        messages.append({"role": "user", "content": user})
        prompt = template.render(messages, add_generation_prompt=True, **template_kwargs(args))
        tokens = llm.tokenize(prompt.encode(), add_bos=True, special=True)
        answer = run_turn(llm, args, tokens, totals)
        print("\n")
        messages.append({"role": "assistant", "content": answer})
        if args.single_turn:
            return


def print_timings(t: Totals) -> None:
    if t.verbosity < LOG_INFO:
        return

    def rate(n, s):
        return (s * 1000 / n if n else 0.0), (n / s if s > 0 else 0.0)

    pp_ms, pp_tps = rate(t.n_prompt, t.t_prompt)
    tg_ms, tg_tps = rate(t.n_gen, t.t_gen)
    err = sys.stderr
    print(f"\nllama_perf_context_print:        load time = {t.t_load * 1000:10.2f} ms", file=err)
    if t.n_images:
        print(f"llama_perf_context_print: image encode time = {t.t_image * 1000:10.2f} ms / "
              f"{t.n_images:5d} images", file=err)
    print(f"llama_perf_context_print: prompt eval time = {t.t_prompt * 1000:10.2f} ms / "
          f"{t.n_prompt:5d} tokens ({pp_ms:8.2f} ms per token, {pp_tps:8.2f} tokens per second)",
          file=err)
    print(f"llama_perf_context_print:        eval time = {t.t_gen * 1000:10.2f} ms / "
          f"{t.n_gen:5d} runs   ({tg_ms:8.2f} ms per token, {tg_tps:8.2f} tokens per second)",
          file=err)
    total = t.t_load + t.t_image + t.t_prompt + t.t_gen
    print(f"llama_perf_context_print:       total time = {total * 1000:10.2f} ms / "
          f"{t.n_prompt + t.n_gen:5d} tokens", file=err)


def with_images(llm: Llama, args, totals: Totals) -> int:
    """One question about --image files (llama-mtmd-cli's single turn), then the timings."""
    from ..vision import ImageError, load_projector
    from ..vision.mtmd import MtmdContext

    images = csv_values(args.image)
    if not args.mmproj:
        print(f"{TOOL}: error: --image needs a multimodal projector (--mmproj FILE)",
              file=sys.stderr)
        return 1
    if not images or args.prompt is None:
        print(f"{TOOL}: error: with --mmproj, pass --image FILE and -p PROMPT (interactive "
              f"image chat is not supported yet)", file=sys.stderr)
        return 1
    try:
        t0 = time.perf_counter()
        projector = load_projector(args.mmproj, args.image_min_tokens, args.image_max_tokens)
        mtmd = MtmdContext(projector, llm.tokenizer(), llm._model)
        totals.t_load += time.perf_counter() - t0
        prompt = mtmd.tokenize(image_prompt(llm, args, mtmd.marker, len(images)),
                               [read_file(path) for path in images])
    except (OSError, ValueError) as e:  # ImageError is a ValueError
        kind = "image" if isinstance(e, (ImageError, OSError)) else "projector"
        print(f"{TOOL}: error: cannot load {kind}: {e}", file=sys.stderr)
        return 1
    totals.n_images = len(images)
    run_turn(llm, args, prompt, totals)
    print()
    print_timings(totals)
    return 0


def image_prompt(llm: Llama, args, marker: str, n_images: int) -> str:
    """The chat prompt: a user message with the images' markers (before the text, as
    llama-mtmd-cli puts them when the prompt has none) and -sys as the system message."""
    text = args.prompt if marker in args.prompt else marker * n_images + args.prompt
    messages = [{"role": "system", "content": args.system_prompt}] if args.system_prompt else []
    messages.append({"role": "user", "content": text})
    return chat_template(llm, args).render(messages, add_generation_prompt=True,
                                           **template_kwargs(args))


def read_file(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def main(argv: list[str] | None = None) -> int:
    args = parse_args("cli", TOOL, __doc__, sys.argv[1:] if argv is None else argv)
    if not args.model:
        print(f"{TOOL}: error: a model is required (-m FILE or a catalogue name)", file=sys.stderr)
        return 1
    if args.file:
        with open(args.file, encoding="utf-8") as fh:
            args.prompt = fh.read()
    try:  # every setting is checked before the model loads
        kwargs = llama_kwargs(args)
        sampling_params(args), template_kwargs(args)
        args.grammar_compiled = grammar_from_args(args, TOOL)[0]
        model_path = str(resolve_model(args.model))
    except (ValueError, OSError) as e:
        print(f"{TOOL}: error: {e}", file=sys.stderr)
        return 1
    totals, t0 = Totals(verbosity=verbosity(args)), time.perf_counter()
    llm = Llama(model_path, **kwargs)
    if args.warmup:
        warm_up(llm)
    totals.t_load = time.perf_counter() - t0
    if totals.verbosity >= LOG_DEBUG:
        log_settings(llm, args)
    if args.image or args.mmproj:
        return with_images(llm, args, totals)
    use_chat = args.conversation
    if use_chat is None:  # llama.cpp's "auto": chat when the model carries a template
        use_chat = bool(llm._file.get("tokenizer.chat_template")
                        or default_chat_template(llm.model_path))
    try:
        if use_chat:
            conversation(llm, args, totals)
        else:
            prompt = args.prompt or ""
            sys.stdout.write(prompt)
            run_turn(llm, args, llm.tokenize(prompt.encode(), add_bos=True, special=True), totals)
            print()
    except KeyboardInterrupt:
        print()
    print_timings(totals)
    return 0


if __name__ == "__main__":
    sys.exit(main())
