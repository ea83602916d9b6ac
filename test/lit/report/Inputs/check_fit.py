# Checks `placec fidelity --fit --format=json` (argv[1]) against the plain report of the same rows
# (argv[2]) and against the constants written in include/placec/passes/CostModel.h (argv[3]):
# the grid is the documented one (tile overhead 0 to 512 by 32, kernel efficiency 0.70 to 1.00
# by 0.01); the fit is over the `calibration` rows when there are any, the others held out;
# "best" is the grid's lowest mean |error| over the fitted rows (then lowest max); the code's
# point is the header's constants and, timed through the fit's override, gives the plain report's
# errors; and the header's constants are the best point, so that they are the fit of the rows
# they name. Prints the best point for FileCheck.
import json
import re
import sys

fit = json.load(open(sys.argv[1]))
plain = json.load(open(sys.argv[2]))
header = open(sys.argv[3]).read()
tile = float(re.search(r"kGemmTileOverheadK = ([0-9.]+);", header).group(1))
efficiency = float(re.search(r"kTrainingKernelEfficiency = ([0-9.]+);", header).group(1))

grid = fit["grid"]
points = {(p["tile_overhead_k"], round(p["kernel_efficiency"], 2)) for p in grid}
expected = {(t, round(e / 100, 2)) for t in range(0, 513, 32) for e in range(70, 101)}
assert points == expected, "the grid is not tile 0..512 by 32 × efficiency 0.70..1.00 by 0.01"
assert len(grid) == len(expected)

best = min(grid, key=lambda p: (p["fitted"]["mean_abs_error"], p["fitted"]["max_abs_error"]))
assert fit["best"] == best, (fit["best"], best)
code = fit["code"]
assert (code["tile_overhead_k"], code["kernel_efficiency"]) == (tile, efficiency), code


def summary(rows):
    errors = [(abs(r["step_error"]), r["file"] + ":" + r["run"]) for r in rows]
    largest = max(e for e, _ in errors)
    return {"rows": len(errors), "mean_abs_error": sum(e for e, _ in errors) / len(errors),
            "max_abs_error": largest, "worst": [n for e, n in errors if e == largest][-1],
            "rows_over_10_percent": sum(1 for e, _ in errors if e > 0.10)}


measured = [r for r in plain["rows"] if "step_error" in r]
calibration = [r for r in measured if r["set"] == "calibration"]
if calibration:
    assert fit["fitted_on"] == "calibration"
    held = [r for r in measured if r["set"] != "calibration"]
    expected_parts = {"fitted": summary(calibration)}
    if held:
        expected_parts["held_out"] = summary(held)
else:
    assert fit["fitted_on"] == "all"
    expected_parts = {"fitted": summary(measured)}
for part, want in expected_parts.items():
    got = code[part]
    assert got["rows"] == want["rows"] and got["worst"] == want["worst"], (part, got, want)
    assert got["rows_over_10_percent"] == want["rows_over_10_percent"], (part, got, want)
    for key in ("mean_abs_error", "max_abs_error"):
        assert abs(got[key] - want[key]) <= 1e-12, (part, key, got[key], want[key])
assert set(code) - {"tile_overhead_k", "kernel_efficiency"} == set(expected_parts), code
assert fit["code_is_best"] == (best == code)
assert best == code, ("the code's constants are not the fit", best, code)
print(f"fit on {fit['fitted_on']}: {len(grid)} points, best tile overhead "
      f"{best['tile_overhead_k']:g}, kernel efficiency {best['kernel_efficiency']:.2f}, "
      f"the code's constants")
