"""16 concurrent streaming clients against llama-server for a minute: every response complete and
well-formed, none lost, memory stable.

    python bench/server_soak.py [MODEL] [-c 16] [-s 60] [-np 4] [-t 2]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.server.conftest import start_server, stop_server  # noqa: E402
from tests.server.load import rss_mib, run_load  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default="smollm2-135m")
    ap.add_argument("-c", "--clients", type=int, default=16)
    ap.add_argument("-s", "--seconds", type=float, default=60)
    ap.add_argument("-np", "--parallel", type=int, default=4)
    ap.add_argument("-t", "--threads", type=int, default=2)
    args = ap.parse_args()
    log = Path(tempfile.mkdtemp()) / "server.log"
    server = start_server(["-m", args.model, "-np", str(args.parallel), "-t", str(args.threads),
                           "-c", str(args.parallel * 1024)], str(log))
    try:
        asyncio.run(run_load(server.url, 2, 3))  # warm-up
        before = rss_mib(server.proc.pid)
        result = asyncio.run(run_load(server.url, args.clients, args.seconds))
        after = rss_mib(server.proc.pid)
    finally:
        code = stop_server(server)
    print(f"{args.clients} clients, {result.seconds:.0f} s, {args.parallel} slots: "
          f"{result.completed} responses complete, {len(result.failures)} failed, "
          f"{result.tokens} tokens ({result.tokens / result.seconds:.1f} tokens/s aggregate); "
          f"server RSS {before:.0f} -> {after:.0f} MiB; exit status {code}")
    for failure in result.failures[:5]:
        print("  failure:", failure)
    sys.exit(1 if result.failures or code != 0 else 0)


if __name__ == "__main__":
    main()
