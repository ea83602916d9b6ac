"""Checks the cross-entropy figures of test/lit/report/cross-entropy-vocab-parallel.place's runs
against the bytes per logit counted there (`python3 check_cross_entropy.py report.json`)."""
import json
import sys

from report_checks import check, figures, close, finish

report = json.load(open(sys.argv[1]))
runs = {run["name"]: run for run in report["runs"]}

loss = {name: figures(runs[name]["explain"], {}) for name in runs}
for name, forward, backward in (("megatron", 9.5, 3.5), ("pytorch", 4.5, 5.5)):
    label = "vocab_parallel" if name == "megatron" else "unfused"
    check(close(loss[name]["cross-entropy"][0] / loss["fused"]["cross-entropy"][0], forward),
          f"{label} forward: {forward} of fused")
    check(close(loss[name]["cross-entropy backward"][0] /
                loss["fused"]["cross-entropy backward"][0], backward),
          f"{label} backward: {backward} of fused")
memory = [runs[name]["memory"]["device"] for name in ("megatron", "fused")]
check(memory[0] == memory[1], "vocab_parallel memory: fused's")
# The figures are the kernels' seconds: the step grows by what the loss's kernels add (up to what
# the gradient reductions' overlap with the longer backward hides).
added = (loss["megatron"]["cross-entropy"][0] - loss["fused"]["cross-entropy"][0] +
         loss["megatron"]["cross-entropy backward"][0] -
         loss["fused"]["cross-entropy backward"][0])
step = runs["megatron"]["time"]["step_s"] - runs["fused"]["time"]["step_s"]
check(added > 0 and abs(step - added) <= 0.05 * added, "step: longer by the added bytes")
finish()
