"""Checks what `unpad = true` and `train_metrics = 2` add to a run against the byte counts
computed in test/lit/report/unpad-train-metrics.place."""
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
added = (unpadded["attention inputs unpadded (unpad)"][0] +
         unpadded["attention gradients padded (unpad)"][0]) * 2 + metrics[0]
step = runs["unpadded"]["time"]["step_s"] - runs["padded"]["time"]["step_s"]
check(close(step, added) or abs(step - added) <= 1e-3 * added,
      "step: longer by the added work")
finish()
