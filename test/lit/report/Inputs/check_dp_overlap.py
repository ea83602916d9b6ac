"""Checks what `dp_overlap` exposes against the step collectives' times in the communication
table of test/lit/report/dp-overlap.place's runs (`python3 check_dp_overlap.py report.json`)."""
import json
import sys

report = json.load(open(sys.argv[1]))
runs = {run["name"]: run for run in report["runs"]}


def step_time(run, collective):
    return sum(entry["time_s"] for entry in run["communication"]
               if entry["phase"] == "step" and entry["collective"] == collective)


def close(a, b):
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b))


def exposed(name):
    return runs[name]["time"]["exposed_comm_s"]


for name in ("zero1_none", "zero1_none_m4"):
    run = runs[name]
    assert run["strategy"]["dp_overlap"] == "none", name
    # Nothing is reduced or gathered inside a micro-batch.
    assert all(entry["phase"] == "step" for entry in run["communication"]), name
    total = step_time(run, "reduce-scatter") + step_time(run, "all-gather")
    assert total > 0 and close(exposed(name), total), (name, exposed(name), total)
    print(f"{name}: exposed = step reduce-scatters + all-gathers")

grads = runs["zero1_grads"]
assert grads["strategy"]["dp_overlap"] == "grads"
gathers = step_time(grads, "all-gather")
total = step_time(grads, "reduce-scatter") + gathers
assert gathers < exposed("zero1_grads") < total, (exposed("zero1_grads"), gathers, total)
print("zero1_grads: all-gathers < exposed < step reduce-scatters + all-gathers")

every = runs["zero1_all"]
assert every["strategy"]["dp_overlap"] == "all"
entries = [entry for entry in every["communication"]
           if entry["phase"] == "step" and entry["collective"] == "all-gather"]
# The embedding's all-gather is the first unit's: 32000 × 2048 bf16 values over 16 ranks, timed
# as one call of that message among the table's calls (their mean message is the table's).
first = entries[0]["time_s"] / entries[0]["count"] * (32000 * 2048 * 2 / entries[0]["message_bytes"])
assert first > 0 and first <= exposed("zero1_all") < exposed("zero1_grads"), (
    first, exposed("zero1_all"), exposed("zero1_grads"))
print("zero1_all: first all-gather <= exposed < zero1_grads")

ddp_none, ddp_grads = runs["ddp_none"], runs["ddp_grads"]
reduces = step_time(ddp_none, "all-reduce")
assert reduces > 0 and close(exposed("ddp_none"), reduces), (exposed("ddp_none"), reduces)
print("ddp_none: exposed = step all-reduces")
assert 0 < exposed("ddp_grads") < step_time(ddp_grads, "all-reduce")
print("ddp_grads: exposed < step all-reduces")

assert runs["single"]["strategy"]["dp_overlap"] is None
print("single: no dp_overlap")
