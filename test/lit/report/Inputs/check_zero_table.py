# Checks the JSON report of examples/zero-7.5b.place against ZeRO's formulas (REFERENCE-NUMBERS §1),
# computed here independently: mixed-precision Adam, K = 12, Ψ = 7.5e9.
#   zero1: 4Ψ + KΨ/N    zero2: 2Ψ + (2 + K)Ψ/N    zero3: (2 + 2 + K)Ψ/N
# and against the published Table 1 values within their rounding.
import json
import sys

report = json.load(sys.stdin)
assert report["schema_version"] == 1, report["schema_version"]
psi, k = 7.5e9, 12
published = {  # N: (zero1, zero2, zero3) in GB
    1: (120, 120, 120), 4: (52.5, 41.3, 30), 16: (35.6, 21.6, 7.5),
    64: (31.4, 16.6, 1.88), 256: (30.4, 15.4, 0.47), 1024: (30.1, 15.1, 0.12),
}
runs = {run["name"]: run for run in report["runs"]}
assert len(runs) == 18, sorted(runs)
for n, cells in published.items():
    for stage, paper in zip((1, 2, 3), cells):
        run = runs[f"zero{stage}_n{n}"]
        device = run["memory"]["device"]
        exact = {1: 4 * psi + k * psi / n, 2: 2 * psi + (2 + k) * psi / n,
                 3: (2 + 2 + k) * psi / n}[stage]
        states = device["params"] + device["grads"] + device["optimizer"]
        assert abs(states - exact) <= 1, (run["name"], states, exact)
        assert abs(device["model_states"] - exact) <= 1, (run["name"], device["model_states"])
        # The paper rounds to three significant digits (it truncates 41.25 to 41.3 and 1.875 to
        # 1.88): within half a unit of the last digit shown.
        digits = len(str(paper).split(".")[1]) if "." in str(paper) else 0
        assert abs(exact / 1e9 - paper) <= 0.5 * 10 ** -digits + 1e-9, (run["name"], exact, paper)
        assert run["devices"] == n and run["mesh"][0]["size"] == n, run["name"]
        assert device["activations"] is None and not run["memory"]["activations_known"]
        assert run["time"]["known"] is False and run["time"]["mfu"] is None
        # Capacity: a warning on exactly the runs whose peak exceeds 32 GB.
        over = device["peak"] > 32e9
        assert run["memory"]["fits_device"] == (not over), run["name"]
        rules = [d["rule"] for d in run["diagnostics"]]
        assert rules == (["capacity"] if over else []), (run["name"], rules)
        assert all(d["severity"] == "warning" for d in run["diagnostics"])
print("ok")
