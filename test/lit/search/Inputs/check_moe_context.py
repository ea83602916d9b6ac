"""Checks the context parallelism of `placec search` for a mixture of experts from its JSON.

    check_moe_context.py SEQ HEADS KV_HEADS one-thread.json two-threads.json
        Every accepted plan's context method against the divisibility derived here from the
        model (ring and all_gather: 2·cp divides SEQ; all_to_all: tp·cp divides HEADS and
        KV_HEADS, cp divides SEQ), no micro-batch a multiple of cp > 1, the context degrees and
        methods in use, plans with the experts replicated over dp and cp, and that both thread
        counts list the same plans in the same order.
    check_moe_context.py --only METHOD plans.json
        Every plan with a context axis uses METHOD (none: there is none), and the context
        degrees in use.
    check_moe_context.py --written best.json report.json
        The plan written with -o has a context axis and reports the search's step and peak
        memory."""
import json
import sys

if sys.argv[1] == "--written":
    best = json.load(open(sys.argv[2]))["top"][0]
    report = json.load(open(sys.argv[3]))["runs"][0]
    assert best["cp"] > 1, best
    assert abs(report["time"]["step_s"] - best["step_seconds"]) <= 1e-9 * best["step_seconds"], \
        (report["time"]["step_s"], best["step_seconds"])
    assert report["memory"]["device"]["peak"] == best["peak_bytes"], \
        (report["memory"]["device"]["peak"], best["peak_bytes"])
    print(f"the plan written out: cp = {best['cp']}, the search's step and peak memory")
    sys.exit(0)

if sys.argv[1] == "--only":
    method, plans = sys.argv[2], json.load(open(sys.argv[3]))["top"]
    assert plans
    for c in plans:
        assert c["context"] in ("none", method), c
    print(f"only {method}: context degrees " +
          ", ".join(map(str, sorted({c["cp"] for c in plans}))))
    sys.exit(0)

seq, heads, kv_heads = (int(x) for x in sys.argv[1:4])
one, two = (json.load(open(path))["top"] for path in sys.argv[4:6])
methods = {}
for c in one:
    cp, tp, method = c["cp"], c["tp"], c["context"]
    if cp == 1:
        assert method == "none", c
        continue
    if method in ("ring", "all_gather"):
        assert seq % (2 * cp) == 0, c
    else:
        assert method == "all_to_all", c
        assert heads % (tp * cp) == 0 and kv_heads % (tp * cp) == 0 and seq % cp == 0, c
    assert c["micro_batch"] % cp != 0, c
    methods.setdefault(method, set()).add(cp)
print("context degrees: " + ", ".join(map(str, sorted({c["cp"] for c in one}))))
print("methods: " + "; ".join(f"{m} over cp {', '.join(map(str, sorted(cps)))}"
                              for m, cps in sorted(methods.items())))
print("divisibility: every method's, and no micro-batch a multiple of cp > 1")
replicated = [c for c in one if c["cp"] > 1 and c["experts_replicated"]]
assert replicated
print(f"experts replicated over dp and cp: {len(replicated)} plans with cp > 1")
assert one == two
print(f"one thread and two: the same {len(one)} plans in the same order")
