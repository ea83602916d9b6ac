"""Checks the exposed communication of `async_tp = false | forward | true` against the times of
the collectives listed in the same report (test/lit/report/async-tp-forward.place)."""
import json
import sys

from report_checks import check, finish

report = json.load(open(sys.argv[1]))
runs = {run["name"]: run for run in report["runs"]}


def exposed(name):
    return runs[name]["time"]["exposed_comm_s"]


def collectives(name, phase, state):
    return sum(entry["time_s"] for entry in runs[name]["communication"]
               if entry["phase"] == phase and entry["state"] == state)


def close(a, b, relative):
    return abs(a - b) <= relative * max(abs(a), abs(b))

# One device group, no data-parallel traffic: with async_tp off the activations' collectives
# (tensor and sequence parallelism) are exposed in full; the norms' gradient all-reduces run
# beside the backward like any gradient reduction.
forward = collectives("off_keep", "forward", "activations")
backward = collectives("off_keep", "backward", "activations")
grads = collectives("off_keep", "backward", "grads")
check(forward + backward - 1e-12 <= exposed("off_keep") <= forward + backward + grads + 1e-12,
      "off: every collective in full")
# Forward: the backward's collectives in full, some of the forward's hidden.
check(exposed("fwd_keep") >= backward - 1e-12 and
      exposed("fwd_keep") < backward + grads + forward,
      "forward: the backward's in full, the forward's beside their products")
check(exposed("all_keep") < exposed("fwd_keep") < exposed("off_keep"),
      "forward: between false and true")
# With full recomputation the backward phase also carries the recomputed forward's collectives.
# They run beside the recomputed products as the forward's run beside the forward's: what they add
# is more than nothing (the compute's slowdown beside communication), less than half their time,
# and no more than the forward pass exposes (which also has the embedding's scatter, not
# recomputed). On the critical path they would add their whole time.
recomputed = (collectives("fwd_recompute", "backward", "activations") -
              collectives("fwd_keep", "backward", "activations"))
added = exposed("fwd_recompute") - exposed("fwd_keep")
forward_share = exposed("fwd_keep") - backward - (exposed("off_keep") - forward - backward)
check(recomputed > 0 and 0 < added < 0.5 * recomputed and added <= forward_share,
      "recompute: the recomputed forward adds what the forward exposes")
finish()
