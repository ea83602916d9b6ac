"""Checks the exposed communication of `async_tp = wgrad` against the times of the collectives
listed in the same report (test/lit/report/async-tp-wgrad.place)."""
import json
import sys

from report_checks import check, finish

report = json.load(open(sys.argv[1]))
runs = {run["name"]: run for run in report["runs"]}

# The compute's slowdown beside communication (Lee et al. 2025, arXiv:2507.03114, §1): a
# collective beside compute still adds κ/(1 + κ) of its time.
KAPPA = 0.189
FLOOR = KAPPA / (1 + KAPPA)
EPS = 1e-12


def exposed(name):
    return runs[name]["time"]["exposed_comm_s"]


def collectives(name, phase, kinds, state="activations"):
    return sum(entry["time_s"] for entry in runs[name]["communication"]
               if entry["phase"] == phase and entry["state"] == state and
               entry["collective"] in kinds)

# Plain tensor parallelism: the activation collectives are all-reduces (and the forward's gather
# of the vocabulary-parallel loss's statistics); in the backward each sums a column-parallel
# product's input gradient. One device group, no gradient reductions.
forward = collectives("off_plain", "forward", {"all-reduce", "all-gather"})
backward = collectives("off_plain", "backward", {"all-reduce"})
check(abs(exposed("off_plain") - (forward + backward)) <= 1e-9 * (forward + backward) and
      forward + FLOOR * backward - EPS <= exposed("wgrad_plain") < forward + backward,
      "plain: the forward's all-reduces in full, the backward's beside the weight gradients")

# Sequence parallelism: the backward's all-gathers of the row-parallel products' output gradients
# stay in full, its reduce-scatters hide. The column-parallel products gather their inputs again
# beside their input gradients whatever async_tp says (sp_inputs = regather, Korthikanti et al.
# 2022, §4.2.2): QKV's and the MLP's in each of the 8 layers and the output layer's, 17 of the
# backward's all-gathers, all of b·s·h, so 17/count of their time, exposed at least by the floor;
# the norms' gradient all-reduces run beside the backward like any gradient reduction, so they
# bound the rest from above.
LAYERS = 8
forward_sp = collectives("off_sp", "forward", {"all-gather", "reduce-scatter"})
gather_entries = [entry for entry in runs["off_sp"]["communication"]
                  if entry["phase"] == "backward" and entry["state"] == "activations" and
                  entry["collective"] == "all-gather"]
gathers = sum(entry["time_s"] for entry in gather_entries)
again = gathers * (2 * LAYERS + 1) / sum(entry["count"] for entry in gather_entries)
scatters = collectives("off_sp", "backward", {"reduce-scatter"})
grads = collectives("off_sp", "backward", {"all-reduce"}, state="grads")
check(forward_sp + gathers - again + FLOOR * (scatters + again) - EPS <= exposed("wgrad_sp") <
      forward_sp + gathers + scatters and exposed("wgrad_sp") <= exposed("off_sp") - (1 - FLOOR) *
      scatters + grads + EPS,
      "sp: the forward's and the backward's gathers in full, the reduce-scatters beside the "
      "weight gradients")
check(exposed("all_sp") < exposed("wgrad_sp") < exposed("off_sp"), "sp: between false and true")

# The report says which setting each run has (sp_inputs only with sequence parallelism).
settings = {name: runs[name]["strategy"]["async_tp"] for name in runs}
inputs = {name: runs[name]["strategy"]["sp_inputs"] for name in runs}
check(settings == {"off_plain": "false", "wgrad_plain": "wgrad", "off_sp": "false",
                   "wgrad_sp": "wgrad", "all_sp": "true"} and
      inputs == {"off_plain": None, "wgrad_plain": None, "off_sp": "regather",
                 "wgrad_sp": "regather", "all_sp": "regather"} and
      all(runs[name]["strategy"]["context"] is None for name in runs),
      "report: async_tp as written, no context without a sequence axis")
finish()
