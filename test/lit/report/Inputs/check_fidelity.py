# Recomputes `placec fidelity --format=json`'s summaries from its rows' predicted and measured
# values: each row's error, and the mean |error|, mean signed error, max |error|, worst run and
# rows over 10 % of every set, every source file, every device, every kind of model and the whole
# step; that the kinds are what the sources' models are (Narayanan et al.'s GPTs dense, GPT-OSS a
# mixture of experts); and that each
# row's predicted parts (compute, optimizer step, exposed communication, bubble) add up to its
# predicted step, which the analysis sums separately. `python3 check_fidelity.py < fidelity.json`.
import json
import sys

data = json.load(sys.stdin)
groups = {"all": [], "set": {}, "file": {}, "device": {}, "model": {}}
for row in data["rows"]:
    parts = (row["predicted_compute_s"] + row["predicted_optimizer_s"] +
             row["predicted_exposed_comm_s"] + row["predicted_bubble_s"])
    assert min(row["predicted_compute_s"], row["predicted_optimizer_s"],
               row["predicted_exposed_comm_s"], row["predicted_bubble_s"]) >= 0, row
    assert abs(parts - row["predicted_step_s"]) <= 1e-9 * row["predicted_step_s"], row
    if "measured_step_s" not in row:
        continue
    error = (row["predicted_step_s"] - row["measured_step_s"]) / row["measured_step_s"]
    assert abs(error - row["step_error"]) <= 1e-12, row
    groups["all"].append((error, row["file"] + ":" + row["run"]))
    groups["set"].setdefault(row["set"], []).append((error, row["file"] + ":" + row["run"]))
    groups["file"].setdefault(row["file"], []).append((error, row["run"]))
    groups["device"].setdefault(row["device"], []).append((error, row["file"] + ":" + row["run"]))
    groups["model"].setdefault(row["model_kind"], []).append((error, row["file"] + ":" + row["run"]))
    if row["file"] == "narayanan2021-table1.place":
        assert row["model_kind"] == "dense transformer", row
    if row["run"].startswith("gpt_oss_") or row["run"].startswith("qwen3_"):
        assert row["model_kind"] == "mixture of experts", row


def check(summary, errors, what):
    assert summary["rows"] == len(errors), what
    mean_abs = sum(abs(e) for e, _ in errors) / len(errors)
    mean = sum(e for e, _ in errors) / len(errors)
    worst_error, worst = max(errors, key=lambda item: abs(item[0]))
    assert abs(summary["mean_abs_error"] - mean_abs) <= 1e-12, what
    assert abs(summary["mean_error"] - mean) <= 1e-12, what
    assert abs(summary["max_abs_error"] - abs(worst_error)) <= 1e-12, what
    assert summary["rows_over_10_percent"] == sum(abs(e) > 0.10 for e, _ in errors), what
    assert summary["worst"] == worst or abs(
        abs(dict((n, e) for e, n in errors)[summary["worst"]]) - abs(worst_error)) <= 1e-15, what


check(data["step"], groups["all"], "all")
assert sorted(data["step_by_set"]) == sorted(groups["set"])
for name, errors in groups["set"].items():
    check(data["step_by_set"][name], errors, name)
assert sorted(data["step_by_file"]) == sorted(groups["file"])
for name, errors in groups["file"].items():
    check(data["step_by_file"][name], errors, name)
assert sorted(data["step_by_device"]) == sorted(groups["device"])
for name, errors in groups["device"].items():
    check(data["step_by_device"][name], errors, name)
assert sorted(data["step_by_model"]) == sorted(groups["model"])
for name, errors in groups["model"].items():
    check(data["step_by_model"][name], errors, name)
print("fidelity summaries agree with the rows:", len(groups["all"]), "rows,",
      len(groups["file"]), "files,", len(groups["device"]), "devices,", len(groups["model"]),
      "kinds of model")
