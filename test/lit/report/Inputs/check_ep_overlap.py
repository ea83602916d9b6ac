"""Checks what `ep_overlap` exposes against the all-to-alls' times in the communication table of
test/lit/report/ep-overlap.place's runs (`python3 check_ep_overlap.py report.json`)."""
import json
import sys

# The compute's slowdown beside communication: Lee et al. 2025, "Characterizing
# Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning", arXiv:2507.03114,
# §1 (18.9 % on average).
KAPPA = 0.189

report = json.load(open(sys.argv[1]))
runs = {run["name"]: run for run in report["runs"]}


def all_to_alls(run):
    return sum(entry["time_s"] for entry in run["communication"]
               if entry["collective"] == "all-to-all")


def close(a, b):
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1e-12)


def exposed(name):
    return runs[name]["time"]["exposed_comm_s"]


for on, off in (("overlap", "plain"), ("overlap_one", "plain_one"),
                ("overlap_fold", "plain_fold")):
    a = all_to_alls(runs[off])
    assert a > 0 and close(a, all_to_alls(runs[on])), (on, a)
    m = runs[off]["batch"]["microbatches_per_step"]
    # Everything else the two runs move and compute is the same.
    assert close(runs[on]["time"]["compute_s"], runs[off]["time"]["compute_s"]), on
    fall = exposed(off) - exposed(on)
    expected = a * (1 - 1 / m) / (1 + KAPPA)
    assert close(fall, expected), (on, fall, expected)
    if m > 1:
        print(f"{on}: exposed falls by A·(1 - 1/m)/(1 + κ), m = {m}")
    else:
        print(f"{on}: exposed unchanged, m = {m}")



def layers_in_flight(run, overlap):
    """Layer activations the first stage holds at its peak, in layers, counted from the schedule:
    1F1B without a pipeline one micro-batch's layers, interleaved the chunk forwards of the
    warm-up and the first of the steady state (Megatron-Core's schedules.py), each of n/v layers;
    under the overlap one more warm-up forward (interleaved) and one more layer, paired;
    DualPipeV p + 1 micro-batches (DeepSeek-AI 2024, Table 2), overlapped or not."""
    stages = len(run["memory"]["stages"])
    m = run["batch"]["microbatches_per_step"]
    n = run["model"]["layers"] // stages
    if run["strategy"]["pipeline"] and run["strategy"]["pipeline"]["schedule"] == "dualpipev":
        return min(stages + 1, m) * n
    if stages == 1:
        layers = n
        chunk = 0
    else:
        v = run["strategy"]["pipeline"]["chunks"]
        warmup = 2 * (stages - 1) + (v - 1) * stages + (1 if overlap else 0)
        layers = min(warmup + 1, m * v) * n // v
    if overlap and m > 1:
        layers += 1
    return min(layers, m * n)


for on, off in (("overlap", "plain"), ("overlap_one", "plain_one"), ("overlap_pp", "plain_pp"),
                ("overlap_fold", "plain_fold"), ("overlap_dv", "plain_dv")):
    first = [runs[name]["memory"]["stages"][0]["device"]["activations"] for name in (on, off)]
    counted = [layers_in_flight(runs[on], True), layers_in_flight(runs[off], False)]
    assert close(first[0] * counted[1], first[1] * counted[0]), (on, first, counted)
    ratio = f"{counted[0]}/{counted[1]}" if counted[0] != counted[1] else "1"
    print(f"{on}: layer activations × {ratio}, m = {runs[on]['batch']['microbatches_per_step']}")

print("settings: " + " ".join(
    json.dumps(runs[name]["strategy"]["ep_overlap"])
    for name in ("overlap", "plain", "overlap_one", "plain_one", "overlap_pp", "plain_pp")))
