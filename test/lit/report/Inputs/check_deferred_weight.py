"""Checks deferred-weight.place's report: each stage's activation bytes from the closed forms of
its header (Korthikanti et al. 2022, Table 2; Qi et al. 2024, Table 1) and its schedule's order."""
import json
import sys

s, b, h, a, v, layers, p, m = 1024, 2, 1024, 16, 32768, 8, 4, 16
per_stage = layers // p
sbh = s * b * h
checkpoint = 2 * sbh  # full recomputation: the layer's input
operands = 32 * sbh  # what a deferred weight pass reads (Qi et al. 2024, Table 1)
kept = 34 * sbh + 5 * a * s * s * b  # Korthikanti et al. 2022, Table 2, t = 1
head = s * b * (h + v) * 2  # the head's input and the logits' gradient


def zero_bubble(stage, whole_bytes, deferred_bytes):
    held = min(p, m)
    deferred = min(stage + 1, held)
    total = per_stage * ((held - deferred) * whole_bytes + deferred * deferred_bytes)
    return total + (deferred * head if stage == p - 1 else 0)


expected = {
    "zb_recompute": [zero_bubble(x, checkpoint, max(checkpoint, operands)) for x in range(p)],
    "ob_recompute": [per_stage * min(p - x, m) * checkpoint for x in range(p)],
    "zb_keep": [zero_bubble(x, kept, max(kept, operands)) for x in range(p)],
}
runs = {run["name"]: run for run in json.load(open(sys.argv[1]))["runs"]}
got = {}
for name, values in expected.items():
    stages = runs[name]["memory"]["stages"]
    got[name] = [stage["device"]["activations"] for stage in stages]
    assert len(stages) == p, (name, len(stages))
    for x, (have, want) in enumerate(zip(got[name], values)):
        assert abs(have - want) <= 1e-9 * want, (name, x, have, want)
    print(f"{name}: {len(stages)} stages as computed")
assert all(z > o for z, o in zip(got["zb_recompute"][1:], got["ob_recompute"][1:]))
print("zero_bubble with recomputation holds more than 1f1b on every stage but the first")
