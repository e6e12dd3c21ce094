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
from ..engine.generate import GenerationStats, generate
from ..engine.prompt import Prompt
from ..hub import default_chat_template, resolve_model
from ..llama import Llama
from ..sampling import Sampler, SamplingParams
from .args import build_parser, check_cpu_only, csv_values, drop_unsupported

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

    def add(self, s: GenerationStats) -> None:
        self.n_prompt += s.n_prompt - s.n_cached
        self.t_prompt += s.t_prompt
        self.t_image += s.t_image
        self.n_gen += s.n_generated
        self.t_gen += s.t_generate


def sampling_params(args) -> SamplingParams:
    return SamplingParams(temperature=args.temp, top_k=args.top_k, top_p=args.top_p,
                          min_p=args.min_p, typical_p=args.typical_p,
                          repeat_penalty=args.repeat_penalty, repeat_last_n=args.repeat_last_n,
                          presence_penalty=args.presence_penalty,
                          frequency_penalty=args.frequency_penalty, mirostat=args.mirostat,
                          mirostat_tau=args.mirostat_tau, mirostat_eta=args.mirostat_eta,
                          seed=args.seed if args.seed >= 0 else 0xFFFFFFFF)


def run_turn(llm: Llama, args, prompt_tokens: list[int] | Prompt, totals: Totals) -> str:
    """Generate one answer, streaming it to stdout; returns its text."""
    n_room = llm.n_ctx() - len(prompt_tokens)
    if n_room <= 0:
        raise SystemExit(f"{TOOL}: error: prompt is {len(prompt_tokens)} tokens, the context "
                         f"holds {llm.n_ctx()}")
    max_tokens = n_room if args.n_predict < 0 else min(args.n_predict, n_room)
    sampler = Sampler(sampling_params(args), llm.tokenizer())
    sampler.prime(prompt_tokens.text_tokens if isinstance(prompt_tokens, Prompt) else prompt_tokens)
    stats = GenerationStats()
    stops = [args.reverse_prompt] if args.reverse_prompt else []
    for step in generate(llm._seq, llm.tokenizer(), sampler, prompt_tokens, max_tokens, stops,
                         ignore_eos=args.ignore_eos, stats=stats):
        sys.stdout.write(step.text)
        sys.stdout.flush()
    totals.add(stats)
    return stats.text


def chat_template(llm: Llama, args) -> ChatTemplate:
    """--chat-template (a builtin name or the text) or --chat-template-file, else the model's."""
    source = args.chat_template
    if args.chat_template_file:
        with open(args.chat_template_file, encoding="utf-8") as fh:
            source = fh.read()
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
        prompt = template.render(messages, add_generation_prompt=True)
        tokens = llm.tokenize(prompt.encode(), add_bos=True, special=True)
        answer = run_turn(llm, args, tokens, totals)
        print("\n")
        messages.append({"role": "assistant", "content": answer})
        if args.single_turn:
            return


def print_timings(t: Totals) -> None:
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
    return chat_template(llm, args).render(messages, add_generation_prompt=True)


def read_file(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def main(argv: list[str] | None = None) -> int:
    argv = drop_unsupported(sys.argv[1:] if argv is None else argv, TOOL)
    args = build_parser("cli", TOOL, __doc__).parse_args(argv)
    check_cpu_only(args, TOOL)
    if not args.model:
        print(f"{TOOL}: error: a model is required (-m FILE or a catalogue name)", file=sys.stderr)
        return 1
    if args.file:
        with open(args.file, encoding="utf-8") as fh:
            args.prompt = fh.read()
    totals, t0 = Totals(), time.perf_counter()
    threads = args.threads if args.threads > 0 else None
    llm = Llama(str(resolve_model(args.model)), n_ctx=args.ctx_size, n_batch=args.batch_size,
                n_ubatch=args.ubatch_size, n_threads=threads, verbose=False,
                repack=bool(args.repack))
    totals.t_load = time.perf_counter() - t0
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
