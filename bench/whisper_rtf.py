"""Speech-to-text speed at one thread: our whisper against faster-whisper (CTranslate2) and
whisper.cpp (pywhispercpp) on the same 60-90 s espeak-ng recording, interleaved rounds.

    .venv/bin/python bench/whisper_rtf.py [--model whisper-tiny.en] [--rounds 3] [--beams 1,5]
        [--engines ours,ours-q8,fw-f32,fw-int8,wcpp] [--blas-avx512] [--whisper-cpp-src DIR]

Each engine runs in its own process with OMP/OPENBLAS/MKL/NUMBA threads at 1, loads its model,
transcribes the file once to warm up (numba compiles, caches fill), then waits; the rounds ask
each engine in turn (a rotated order every round) for one full transcription (English, the
engine's default fallback and previous-text conditioning) and read its wall and CPU seconds
(time.process_time of that process: every thread of it). Printed: medians, RTF (seconds per
second of audio), and the speed of ours against each reference (their seconds / ours).
Run it with `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE`, as the other benchmarks: this VM's
environment forces OpenBLAS onto its Haswell (AVX2) kernels, which a user's machine does not (on
Zen 5 OpenBLAS picks SkylakeX itself). `--blas-avx512` starts ours with OPENBLAS_CORETYPE=SkylakeX
whatever the environment says; the engine `ours-avx512` is that beside the default one. whisper.cpp needs pywhispercpp and a ggml-*.bin: made once from the
CTranslate2 folder with whisper.cpp's models/convert-pt-to-ggml.py (--whisper-cpp-src, the
pywhispercpp sdist's whisper.cpp folder), cached in ~/.cache/llamacpy/ggml/.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path.home() / ".cache" / "llamacpy"
SENTENCES = [
    "The birch canoe slid on the smooth planks.", "Glue the sheet to the dark blue background.",
    "It's easy to tell the depth of a well.", "These days a chicken leg is a rare dish.",
    "Rice is often served in round bowls.", "The juice of lemons makes fine punch.",
    "The box was thrown beside the parked truck.", "The hogs were fed chopped corn and garbage.",
    "Four hours of steady work faced us.", "A large size in stockings is hard to sell.",
    "The boy was there when the sun rose.", "A rod is used to catch pink salmon.",
    "The source of the huge river is the clear spring.", "Kick the ball straight and follow through.",
    "Help the woman get back to her feet.", "A pot of tea helps to pass the evening.",
    "Smoky fires lack flame and heat.", "The soft cushion broke the man's fall.",
    "The salt breeze came across from the sea.", "The girl at the booth sold fifty bonds.",
]
ONE_THREAD = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                               "NUMBA_NUM_THREADS")}


def speech_file(seconds: float) -> Path:
    """espeak-ng reading the sentences (repeated) until the recording is at least `seconds`."""
    path = CACHE / "bench" / f"whisper_rtf_{int(seconds)}s.wav"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    text, n = "", 0
    while n * 2.6 < seconds:  # espeak-ng speaks one of these in about 2.6 s
        text += " " + SENTENCES[n % len(SENTENCES)]
        n += 1
    subprocess.run(["espeak-ng", "-w", str(path), text.strip()], check=True)
    return path


def q8_0_gguf(name: str) -> Path:
    """Our GGUF with every projection re-encoded as Q8_0 (tests/whisper/test_quantized's)."""
    path = CACHE / "bench" / f"{name}-q8_0.gguf"
    if not path.exists():
        sys.path.insert(0, str(ROOT))
        from llamacpy.format import open_gguf
        from llamacpy.format.constants import GGMLType
        from llamacpy.hub import resolve_model
        from tests.whisper.test_quantized import _requantized

        _requantized(open_gguf(resolve_model(name)), path, GGMLType.Q8_0)
    return path


def ggml_model(name: str, src: Path) -> Path:
    """whisper.cpp's ggml-model.bin (F16) of the catalogue model, converted once."""
    out = CACHE / "ggml" / name
    if (out / "ggml-model.bin").exists():
        return out / "ggml-model.bin"
    import dataclasses

    import torch
    import whisper

    sys.path.insert(0, str(ROOT))
    from tests.whisper.openai_reference import openai_whisper_model

    out.mkdir(parents=True, exist_ok=True)
    m = openai_whisper_model(Path.home() / ".cache" / "llama.cpp" / f"{name}-ct2")
    pt = out / "model.pt"
    state = m.half().state_dict()  # the script writes F16 headers and assumes F16 data
    torch.save({"dims": dataclasses.asdict(m.dims), "model_state_dict": state}, pt)
    subprocess.run([sys.executable, str(src / "models" / "convert-pt-to-ggml.py"), str(pt),
                    str(Path(whisper.__file__).parent.parent), str(out)], check=True)
    pt.unlink()
    return out / "ggml-model.bin"


# --- the worker: one engine, one model, transcriptions on request ---------------------------


def _ours(model: str, beam: int):
    from llamacpy.audio.transcribe import TranscribeOptions, transcribe
    from llamacpy.format import open_gguf
    from llamacpy.hub import resolve_model
    from llamacpy.models.whisper import WhisperModel

    g = open_gguf(resolve_model(model))
    m = WhisperModel(g)
    o = TranscribeOptions(language="en", beam_size=beam)
    return lambda audio: transcribe(g, m, audio, o).text


def _faster_whisper(model: str, beam: int, compute_type: str):
    from faster_whisper import WhisperModel

    m = WhisperModel(str(Path.home() / ".cache" / "llama.cpp" / f"{model}-ct2"), device="cpu",
                     compute_type=compute_type, cpu_threads=1, num_workers=1)
    return lambda audio: "".join(s.text for s in m.transcribe(audio, beam_size=beam,
                                                              language="en")[0])


def _whisper_cpp(model: str, beam: int):
    from pywhispercpp.model import Model

    m = Model(model, n_threads=1, params_sampling_strategy=1 if beam > 1 else 0,
              redirect_whispercpp_logs_to=None, print_progress=False, print_realtime=False,
              language="en", greedy={"best_of": 5},
              beam_search={"beam_size": beam if beam > 1 else -1, "patience": -1.0})
    return lambda audio: "".join(s.text for s in m.transcribe(audio))


def worker(engine: str, model: str, beam: int, wav: str) -> None:
    import time

    sys.path.insert(0, str(ROOT))
    from llamacpy.audio.wav import load_audio

    audio = load_audio(wav)
    run = {"ours": lambda: _ours(model, beam),
           "fw-f32": lambda: _faster_whisper(model, beam, "float32"),
           "fw-int8": lambda: _faster_whisper(model, beam, "int8"),
           "wcpp": lambda: _whisper_cpp(model, beam)}[engine]()
    run(audio)  # warm-up: compiles and caches
    print(json.dumps({"ready": True}), flush=True)
    for _ in sys.stdin:
        w0, c0 = time.perf_counter(), time.process_time()
        text = run(audio)
        print(json.dumps({"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0,
                          "text": text}), flush=True)


# --- the driver ---------------------------------------------------------------------------


def _start(label: str, engine: str, model: str, beam: int, wav: Path, env: dict):
    cmd = [sys.executable, __file__, "--worker", engine, model, str(beam), str(wav)]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env={**os.environ, **ONE_THREAD, **env}, cwd=ROOT)
    line = p.stdout.readline()
    if not line or not json.loads(line).get("ready"):
        raise RuntimeError(f"{label}: the worker did not start")
    return p


def _configs(args) -> list[tuple[str, str, str, int, dict]]:
    """(label, engine, model file or name, beam, extra env) for each engine and beam."""
    blas = {"OPENBLAS_CORETYPE": "SkylakeX"} if args.blas_avx512 else {}
    out = []
    for beam in args.beams:
        for e in args.engines:
            if e == "ours":
                out.append((f"ours f16->f32 bs{beam}", "ours", args.model, beam, blas))
            elif e == "ours-avx512":
                out.append((f"ours f16->f32 AVX-512 sgemm bs{beam}", "ours", args.model, beam,
                            {"OPENBLAS_CORETYPE": "SkylakeX"}))
            elif e == "ours-q8":
                out.append((f"ours q8_0 bs{beam}", "ours", str(q8_0_gguf(args.model)), beam, blas))
            elif e in ("fw-f32", "fw-int8"):
                out.append((f"faster-whisper {e[3:]} bs{beam}", e, args.model, beam, {}))
            elif e == "wcpp":
                path = ggml_model(args.model, args.whisper_cpp_src)
                out.append((f"whisper.cpp f16 bs{beam}", "wcpp", str(path), beam, {}))
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="whisper-tiny.en")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=75.0)
    p.add_argument("--beams", type=lambda s: [int(x) for x in s.split(",")], default=[1, 5])
    p.add_argument("--engines", type=lambda s: s.split(","),
                   default=["ours", "ours-q8", "fw-f32", "fw-int8", "wcpp"])
    p.add_argument("--blas-avx512", action="store_true")
    p.add_argument("--whisper-cpp-src", type=Path,
                   default=Path("/tmp/pywhispercpp-src/pywhispercpp-1.5.1/whisper.cpp"))
    args = p.parse_args()
    wav = speech_file(args.seconds)
    from llamacpy.audio.wav import load_audio

    duration = len(load_audio(wav)) / 16000
    configs = _configs(args)
    workers = {c[0]: _start(*c[:4], wav, c[4]) for c in configs}
    times: dict[str, list[dict]] = {c[0]: [] for c in configs}
    for r in range(args.rounds):
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        for label, *_ in order:
            workers[label].stdin.write("run\n")
            workers[label].stdin.flush()
            times[label].append(json.loads(workers[label].stdout.readline()))
    for w in workers.values():
        w.stdin.close()
        w.wait()
    _report(times, duration, args)


def _report(times: dict, duration: float, args) -> None:
    med = {k: (statistics.median(t["wall"] for t in v), statistics.median(t["cpu"] for t in v))
           for k, v in times.items()}
    print(f"\n{args.model}, {duration:.1f} s of espeak-ng speech, 1 thread, {args.rounds} "
          "interleaved rounds, medians\n")
    print("| engine | wall s | CPU s | RTF (CPU) | ours bs-same vs it (wall / CPU) |")
    print("|---|---|---|---|---|")
    for label, (wall, cpu) in med.items():
        beam = label.rsplit(" ", 1)[1]
        ours = med.get(f"ours f16->f32 {beam}")
        ratio = f"{wall / ours[0]:.2f}x / {cpu / ours[1]:.2f}x" if ours else "-"
        print(f"| {label} | {wall:.2f} | {cpu:.2f} | {cpu / duration:.3f} | {ratio} |")
    print()
    for label, runs in times.items():
        print(f"{label}: {runs[-1]['text'][:120]!r}")


if __name__ == "__main__":
    main()
