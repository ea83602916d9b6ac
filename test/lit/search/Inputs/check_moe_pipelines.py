"""Checks the pipelines of `placec search` for a mixture of experts from its JSON results.

    check_moe_pipelines.py LAYERS one-thread.json two-threads.json 1f1b.json
        The pipelines of the accepted plans, grouped by stage count, each derived here from the
        layers: an even split over p stages (p divides LAYERS) runs 1f1b or interleaved with any
        v > 1 dividing LAYERS / p; a counted one (p divides LAYERS + 2) interleaved with any v > 1
        dividing (LAYERS + 2) / p. Prints what the plans use, checks each interleaved plan's
        m % p = 0, that both thread counts list the same plans in the same order, and that
        `--schedules 1f1b` keeps to 1f1b.
    check_moe_pipelines.py --written best.json report.json
        The plan written with -o reports the search's step and peak memory."""
import json
import sys


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def pipeline(c):
    if c["pp"] == 1:
        return None
    if c["schedule"] == "interleaved":
        return ("interleaved", c["chunks"], c["embedding_loss_layers"])
    return (c["schedule"], 1, False)


def describe(pipelines):
    parts = []
    for stages in sorted({p for p, _ in pipelines}):
        kinds = sorted(k for p, k in pipelines if p == stages)
        plain = [k for k in kinds if k[0] != "interleaved"]
        even = [k[1] for k in kinds if k[0] == "interleaved" and not k[2]]
        counted = [k[1] for k in kinds if k[0] == "interleaved" and k[2]]
        for k in plain:
            parts.append(f"{k[0]} over {stages} stages")
        if even:
            parts.append(f"interleaved({', '.join(map(str, even))}) over {stages}")
        if counted:
            parts.append(f"interleaved({', '.join(map(str, counted))})(emb+loss) over {stages}")
    return ", ".join(parts)


if sys.argv[1] == "--written":
    best = json.load(open(sys.argv[2]))["top"][0]
    report = json.load(open(sys.argv[3]))["runs"][0]
    assert best["pp"] > 1 and best["schedule"] == "interleaved", best
    assert abs(report["time"]["step_s"] - best["step_seconds"]) <= 1e-9 * best["step_seconds"], \
        (report["time"]["step_s"], best["step_seconds"])
    assert report["memory"]["device"]["peak"] == best["peak_bytes"], \
        (report["memory"]["device"]["peak"], best["peak_bytes"])
    print(f"the plan written out: interleaved over {best['pp']} stages, "
          "the search's step and peak memory")
    sys.exit(0)

layers = int(sys.argv[1])
one, two, only1f1b = (json.load(open(path))["top"] for path in sys.argv[2:5])
allowed = set()
for p in range(2, layers + 3):
    if layers % p == 0:
        allowed.add((p, ("1f1b", 1, False)))
        allowed |= {(p, ("interleaved", v, False)) for v in divisors(layers // p) if v > 1}
    if (layers + 2) % p == 0:
        allowed |= {(p, ("interleaved", v, True)) for v in divisors((layers + 2) // p) if v > 1}
used = {(c["pp"], pipeline(c)) for c in one if c["pp"] > 1}
assert used <= allowed, used - allowed
print("pipelines: " + describe(used))
for c in one:
    if c["pp"] > 1 and c["schedule"] == "interleaved":
        assert c["microbatches"] % c["pp"] == 0, c
print("interleaved plans: m % p = 0")
assert one == two
print(f"one thread and two: the same {len(one)} plans in the same order")
used1f1b = {(c["pp"], pipeline(c)) for c in only1f1b if c["pp"] > 1}
assert all(k == ("1f1b", 1, False) for _, k in used1f1b), used1f1b
print("1f1b only: pipelines " + describe(used1f1b))
