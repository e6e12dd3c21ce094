"""/metrics over every replica: the replicas' own llama.cpp Prometheus texts
(ServerState.prometheus), combined metric by metric. Counters and load gauges add up (the
cluster's tokens, its throughput, its busy slots); the longest sequence is the largest;
the busy slots per decode call are an average. `llamacpp:replicas` says how many reported."""

from __future__ import annotations

LARGEST = {"llamacpp:n_tokens_max"}
AVERAGED = {"llamacpp:n_busy_slots_per_decode"}


def parse(text: str) -> tuple[list[str], dict[str, list[str]], dict[str, float]]:
    """A Prometheus text as its metric names in order, their # lines and their values."""
    order: list[str] = []
    comments: dict[str, list[str]] = {}
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("# "):
            name = line.split()[2]
            if name not in comments:
                order.append(name)
            comments.setdefault(name, []).append(line)
        elif line.strip():
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return order, comments, values


def combine(name: str, values: list[float]) -> float:
    if name in LARGEST:
        return max(values)
    if name in AVERAGED:
        return sum(values) / len(values)
    return sum(values)


def aggregate(texts: list[str]) -> str:
    """One Prometheus text for the replicas' texts (all from the same llama-server build)."""
    parsed = [parse(t) for t in texts]
    order = parsed[0][0] if parsed else []
    comments = parsed[0][1] if parsed else {}
    lines = ["# HELP llamacpp:replicas Number of model replicas that reported",
             "# TYPE llamacpp:replicas gauge", f"llamacpp:replicas {len(texts)}"]
    for name in order:
        found = [p[2][name] for p in parsed if name in p[2]]
        lines += comments[name]
        if found:
            lines.append(f"{name} {combine(name, found):g}")
    return "\n".join(lines) + "\n"
