"""Checks the zero-bubble schedules of `placec search` for a mixture of experts from its JSON.

    check_moe_zero_bubble.py LAYERS default.json named.json
        Without --schedules the search keeps Megatron-Core's 1f1b and interleaved. With
        `--schedules 1f1b,zero_bubble,zbv,dualpipev --ep-overlap false,true`, every pipelined plan
        runs one of them under its preconditions, derived here: zero_bubble and zbv at least as
        many micro-batches as stages, zbv and dualpipev two chunks a stage (2·pp dividing LAYERS),
        dualpipev an even pp and m >= 2·pp; ep_overlap over stages only under dualpipev (the one
        named schedule that pairs a forward chunk with a backward one); and each dualpipev plan
        with the overlap is no slower than its twin without it and holds the same memory
        (DualPipeV's p + 1 micro-batches in flight are those of its paired schedule).
    check_moe_zero_bubble.py --written best.json report.json
        The best plan is dualpipev with the overlap, and its Place text, as written with -o,
        reports the search's step and peak memory."""
import json
import sys

from written_plan import check_written_plan

ZERO_BUBBLE = {"zero_bubble", "zbv", "dualpipev"}

if sys.argv[1] == "--written":
    best = json.load(open(sys.argv[2]))["top"][0]
    assert best["pp"] > 1 and best["schedule"] == "dualpipev" and best["ep_overlap"], best
    print(f"best: dualpipev over {best['pp']} stages with ep_overlap")
    check_written_plan(sys.argv[3], best)
    sys.exit(0)

layers = int(sys.argv[1])
default, named = (json.load(open(path))["top"] for path in sys.argv[2:4])
assert not [c for c in default if c["pp"] > 1 and c["schedule"] not in ("1f1b", "interleaved")]
print("default: 1f1b and interleaved only")


def key(c):
    return tuple(sorted((k, json.dumps(v)) for k, v in c.items()
                        if k not in ("ep_overlap", "step_seconds", "peak_bytes", "mfu",
                                     "tflops_per_device", "inter_node_bytes", "bridges")))


used = set()
for c in named:
    if c["pp"] == 1:
        continue
    p, m, schedule = c["pp"], c["microbatches"], c["schedule"]
    assert schedule in ZERO_BUBBLE | {"1f1b"}, c
    used.add(schedule)
    if schedule in ("zero_bubble", "zbv"):
        assert m >= p, c
    if schedule in ("zbv", "dualpipev"):
        assert c["chunks"] == 2 and layers % (2 * p) == 0, c
    if schedule == "dualpipev":
        assert p % 2 == 0 and m >= 2 * p, c
    if c["ep_overlap"]:
        assert schedule == "dualpipev", c
print("schedules: " + ", ".join(sorted(used)))

plain = {key(c): c for c in named if c["pp"] > 1 and not c["ep_overlap"]}
overlapped = [c for c in named if c["pp"] > 1 and c["ep_overlap"]]
assert overlapped, "no dualpipev plan with ep_overlap"
paired = 0
for c in overlapped:
    twin = plain.get(key(c))
    if twin is None:
        continue
    paired += 1
    assert c["step_seconds"] <= twin["step_seconds"], (c, twin)
    assert c["peak_bytes"] == twin["peak_bytes"], (c, twin)
assert paired > 0
print(f"dualpipev with ep_overlap: {len(overlapped)} plans, each as large as its twin "
      f"and no slower ({paired} paired)")
