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


inputs, gradients = 14 * sbh, 18 * sbh  # the operands' two parts (Qi et al. 2024, Table 1)


def zbv_order(rank):
    """Rank `rank`'s passes under PyTorch's ScheduleZBVZeroBubble (torch/distributed/pipelining/
    schedules.py, _calculate_single_rank_operations): (pass, chunk), chunk 0 its first stage and
    chunk 1 its second, pass F (forward), I (input gradient) or W (weight pass)."""
    n = max(2 * p - 1, m)
    order = [("F", 0)] * (2 * (p - rank) - 1) + [("F", 1), ("F", 0)] * rank
    order += [("F", 1), ("I", 1), ("W", 1)] * (p - rank)
    f0 = 2 * (p - rank) - 1 + rank
    f1 = rank + p - rank
    while f1 < f0 or f0 < n:
        if f0 < n:
            order.append(("F", 0))
            f0 += 1
        order += [("I", 0), ("W", 0), ("F", 1), ("I", 1), ("W", 1)]
        f1 += 1
    order += [("I", 0), ("I", 1)] * rank + [("I", 0), ("W", 0)] * (p - rank)
    waiting = {c: sum(x == ("I", c) for x in order) - sum(x == ("W", c) for x in order)
               for c in (0, 1)}
    return order + [("W", 1)] * waiting[1] + [("W", 0)] * waiting[0]


def zbv(rank, whole, deferred):
    """The most rank `rank` holds over its order: a chunk (one layer here) `whole` from its
    forward to its input gradient, `deferred` from then to its weight pass; the first rank's
    second chunk is the last stage, whose input gradient leaves the head's operands until its
    weight pass. PyTorch keeps the autograd graph for the weight pass (stage_backward_input's
    retain_graph=True) and the products' output gradients beside it."""
    held = peak = 0
    for kind, chunk in zbv_order(rank):
        last = rank == 0 and chunk == 1
        held += {"F": whole, "I": deferred - whole + (head if last else 0),
                 "W": -deferred - (head if last else 0)}[kind]
        peak = max(peak, held)
    assert held == 0
    return peak


expected = {
    "zb_recompute": [zero_bubble(x, checkpoint, max(checkpoint, operands)) for x in range(p)],
    "ob_recompute": [per_stage * min(p - x, m) * checkpoint for x in range(p)],
    "zb_keep": [zero_bubble(x, kept, max(kept, operands)) for x in range(p)],
    "zbv_keep": [zbv(x, kept, kept + gradients) for x in range(p)],
    "zbv_recompute": [zbv(x, checkpoint, max(checkpoint, inputs) + gradients) for x in range(p)],
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
