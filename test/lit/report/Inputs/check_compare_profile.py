"""Checks bench/gpu/compare_profile.py's JSON against two independent sums.

argv: the script's JSON, the profile it read, placec's JSON report of the same run (without
--explain). The measured products must be the profile's aten::mm and aten::addmm device time per
step (its only matrix-product operators); the predicted kinds must add up to the analysis's
compute and optimizer time, which placec sums over every unit and micro-batch on its own.
"""
import json
import sys

compared = json.load(open(sys.argv[1]))
profile = json.load(open(sys.argv[2]))
report = json.load(open(sys.argv[3]))
kinds = {k["kind"]: k for k in compared["kinds"]}

steps = profile["profile"]["steps"]
products = sum(op["device_us"] for op in profile["profile"]["ops"]
               if op["name"] in ("aten::mm", "aten::addmm")) * 1e-6 / steps
got = kinds["matrix products"]["measured_s"]
assert abs(got - products) <= 1e-9 * products, (got, products)

[run] = report["runs"]
time = run["time"]
# step = compute + optimizer + exposed communication + bubble; one device: no communication.
assert time["exposed_comm_s"] == 0 and time["bubble_s"] == 0, time
predicted = sum(k["predicted_s"] for k in compared["kinds"])
assert abs(predicted - time["step_s"]) <= 1e-9 * time["step_s"], (predicted, time["step_s"])
assert abs(compared["predicted_step_s"] - time["step_s"]) <= 1e-12 * time["step_s"]
assert abs(compared["measured_step_s"] - profile["seconds_per_step"]) == 0
print("ok", len(compared["measured_ops"]), "operators")
