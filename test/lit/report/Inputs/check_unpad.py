"""Checks what `unpad = true` and `train_metrics = 2` add to a run against the byte counts
computed in test/lit/report/unpad-train-metrics.place, and the time of the metrics' synchronization."""
import json
import sys

from report_checks import check, figures, close, finish

report = json.load(open(sys.argv[1]))
runs = {run["name"]: run for run in report["runs"]}

unpadded = figures(runs["unpadded"]["explain"], {})
padded = figures(runs["padded"]["explain"], {})
norms = unpadded["norms"][0]
check(close(unpadded["attention inputs unpadded (unpad)"][0] / norms, 1.5),
      "unpadded forward: 1.5 of the norms")
check(close(unpadded["attention gradients padded (unpad)"][0] / norms, 1.625),
      "unpadded backward: 1.625 of the norms")
metrics = unpadded["training metrics (2 cross-entropies of the logits)"]
check(len(metrics) == 1 and close(metrics[0] / norms, 140.625),
      "training metrics: 140.625 of the norms")
check(not any("unpad" in name or "training metrics" in name for name in padded),
      "padded: no unpadding, no metrics")
activations = (runs["unpadded"]["memory"]["device"]["activations"],
               runs["padded"]["memory"]["device"]["activations"])
check(activations == (130154496, 121765888),
      "activations: %d and %d" % activations)
# The metrics' synchronization at the step's end over the 2 ranks of one H100 node, per state:
# the barrier (a ring all-reduce of one element, 8.4 us + 2 NVLink steps × 3.4 us), 2 zeros_like,
# the all-gather (8.4 + 3.4 us) beside 2 copies, the stack and the sum, at 10.9 us per host
# operator; 2 metrics × 2 states. The bytes add under a nanosecond.
host = 10.9e-6
sync = 4 * ((8.4e-6 + 2 * 3.4e-6) + 2 * host + max(8.4e-6 + 3.4e-6, 2 * host) + 2 * host)
synced = unpadded["metrics sync"]
check(len(synced) == 1 and abs(synced[0] - sync) <= 1e-9,
      "metrics sync: %.1f us" % (sync * 1e6))
check("metrics sync" not in padded, "padded: no metrics sync")
added = (unpadded["attention inputs unpadded (unpad)"][0] +
         unpadded["attention gradients padded (unpad)"][0]) * 2 + metrics[0] + synced[0]
step = runs["unpadded"]["time"]["step_s"] - runs["padded"]["time"]["step_s"]
check(close(step, added) or abs(step - added) <= 1e-3 * added,
      "step: longer by the added work")
finish()
