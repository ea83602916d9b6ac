"""Checks `grad_reduce` against the communication tables and memory of
test/lit/report/grad-reduce.place's runs (`python3 check_grad_reduce.py report.json`)."""
import json
import sys

report = json.load(open(sys.argv[1]))
runs = {run["name"]: run for run in report["runs"]}


def close(a, b):
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b))


def step(run, state, collective=None):
    return [entry for entry in runs[run]["communication"]
            if entry["phase"] == "step" and entry["state"] == state
            and (collective is None or entry["collective"] == collective)]


def total(entries, key):
    return sum(entry[key] for entry in entries)


# ZeRO-1 over 16 ranks: one collective kind each, over the same message.
scatter = step("z1", "grads")
reduce = step("z1_ar", "grads")
assert scatter and {e["collective"] for e in scatter} == {"reduce-scatter"}, scatter
assert reduce and {e["collective"] for e in reduce} == {"all-reduce"}, reduce
assert all(e["group_size"] == 16 for e in scatter + reduce)
assert close(total(scatter, "total_bytes"), total(reduce, "total_bytes"))
assert close(total(reduce, "sent_bytes"), 2 * total(scatter, "sent_bytes")), (
    total(reduce, "sent_bytes"), total(scatter, "sent_bytes"))
assert runs["z1"]["strategy"]["grad_reduce"] == "reduce_scatter"
assert runs["z1_ar"]["strategy"]["grad_reduce"] == "all_reduce"
print("z1: all_reduce sends twice the reduce-scatter's bytes of the same message")

gathers = step("z1", "params", "all-gather")
assert gathers and close(total(gathers, "total_bytes"),
                         total(step("z1_ar", "params", "all-gather"), "total_bytes"))
assert runs["z1"]["memory"]["device"] == runs["z1_ar"]["memory"]["device"]
time, time_ar = runs["z1"]["time"], runs["z1_ar"]["time"]
assert close(time["compute_s"], time_ar["compute_s"])
difference = total(reduce, "time_s") - total(scatter, "time_s")
assert difference > 0
assert close(time_ar["step_s"] - time["step_s"], difference), (
    time_ar["step_s"] - time["step_s"], difference)
print("z1: same all-gather, memory and compute; step longer by the collectives' difference")

# Sharded over the inner axis: reduce-scatter over dp, then the eighth all-reduced over dp_out;
# under all_reduce one all-reduce of the whole gradient over both axes.
inner = step("outer", "grads", "reduce-scatter")
across = step("outer", "grads", "all-reduce")
assert inner and all(e["axis"] == "dp" and e["group_size"] == 8 for e in inner), inner
assert across and all(e["axis"] == "dp_out" and e["group_size"] == 2 for e in across), across
assert close(total(across, "total_bytes") * 8, total(inner, "total_bytes"))
both = step("outer_ar", "grads")
assert both and all(e["collective"] == "all-reduce" and e["group_size"] == 16 for e in both), both
assert close(total(both, "total_bytes"), total(inner, "total_bytes"))
print("outer: reduce-scatter over dp and all-reduce over dp_out, or one all-reduce over 16 ranks")

# Optimizer on the host: the gradients copied to the host are the shard this rank updates.
to_host = step("host", "grads", "device-to-host")
to_host_ar = step("host_ar", "grads", "device-to-host")
assert to_host and close(total(to_host, "total_bytes"), total(to_host_ar, "total_bytes"))
assert close(total(to_host, "total_bytes") * 16, total(step("host", "grads", "reduce-scatter"),
                                                       "total_bytes"))
print("host: the same shard goes to the host")

assert runs["ddp"]["strategy"]["grad_reduce"] is None
print("ddp: no grad_reduce")
