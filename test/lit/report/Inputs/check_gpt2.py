# Checks the JSON report of examples/gpt2-xl.place: key presence (docs/report-json.md) and values
# computed here from the model's shape and the placements (REFERENCE-NUMBERS §1-3).
import json
import sys

report = json.load(sys.stdin)
for key in ("schema_version", "generator", "file", "runs", "diagnostics"):
    assert key in report, key

RUN_KEYS = ("name", "model", "cluster", "strategy", "devices", "mesh", "batch", "precision",
            "optimizer", "memory", "communication", "time", "diagnostics")
BREAKDOWN = ("params", "grads", "optimizer", "model_states", "activations", "transient", "peak")
COMM = ("stage", "axis", "group_size", "collective", "state", "phase", "count", "message_bytes",
        "total_bytes", "sent_bytes", "link", "time_s")
TIME = ("known", "compute_s", "exposed_comm_s", "bubble_s", "step_s", "mfu", "tokens_per_s",
        "flops_per_step")

L, h, a, s, V = 48, 1600, 25, 1024, 50257
psi = 12 * L * h * h + 13 * L * h + (V + s) * h + 2 * h
assert psi == 1557611200

runs = {run["name"]: run for run in report["runs"]}
assert list(runs) == ["gpt2_dp", "gpt2_zero3", "gpt2_pp4_zero1"], list(runs)
for run in runs.values():
    for key in RUN_KEYS:
        assert key in run, (run["name"], key)
    assert run["model"]["params"] == psi
    # The example writes `attention = materialized`; the key names the kernel (docs/report-json.md).
    assert run["model"]["attention"] == "materialized", run["model"]
    assert run["model"]["kv_heads"] == a, run["model"]
    # GPT-2 XL writes neither: its positions are learned and its projections fused.
    assert run["model"]["kv_repeat"] is False, run["model"]
    assert run["model"]["rope_complex"] is False, run["model"]
    assert run["model"]["projections"] == "fused", run["model"]
    assert run["devices"] == 64
    for axis in run["mesh"]:
        assert set(axis) >= {"name", "kind", "size", "link"}, axis
    for where in ("device", "host"):
        for key in BREAKDOWN:
            assert isinstance(run["memory"][where][key], (int, float)), (run["name"], where, key)
    for entry in run["communication"]:
        for key in COMM:
            assert key in entry, (run["name"], key)
        assert entry["total_bytes"] == entry["message_bytes"] * entry["count"] or \
            abs(entry["total_bytes"] - entry["message_bytes"] * entry["count"]) < 1e-6 * entry["total_bytes"]
    for key in TIME:
        assert key in run["time"], key
    t = run["time"]
    assert abs(t["step_s"] - (t["compute_s"] + t["exposed_comm_s"] + t["bubble_s"])) < 1e-9 * t["step_s"]
    # Model FLOPs: three times the forward, the logits 2·s·h·V per sample.
    flops = 72 * 512 * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h))
    assert abs(t["flops_per_step"] - flops) < 1e-9 * flops, (t["flops_per_step"], flops)
    assert abs(t["mfu"] - flops / (t["step_s"] * 64 * 312e12)) < 1e-9
    assert abs(t["tokens_per_s"] - 512 * s / t["step_s"]) < 1e-6 * t["tokens_per_s"]

# Data parallelism: 16Ψ per device, one all-reduce of 2Ψ gradient bytes per step (ZeRO §7: 2Ψ
# elements of traffic, ring factor 2(n - 1)/n).
dp = runs["gpt2_dp"]
d = dp["memory"]["device"]
assert (d["params"], d["grads"], d["optimizer"]) == (2 * psi, 2 * psi, 12 * psi), d
(allreduce,) = dp["communication"]
assert (allreduce["collective"], allreduce["axis"], allreduce["state"], allreduce["phase"]) == \
    ("all-reduce", "dp", "grads", "step")
assert allreduce["total_bytes"] == 2 * psi
assert abs(allreduce["sent_bytes"] - 2 * 63 / 64 * 2 * psi) < 1
assert allreduce["link"] == "inter" and dp["mesh"][0]["link"] == "inter"
# Activations: L · s·b·h·(34 + 5as/h), b = 4, no pipeline, no recomputation.
assert d["activations"] == L * s * 4 * h * (34 + 5 * a * s / h)

# ZeRO-3: 16Ψ/64, and 3 × (n - 1)/n × 2Ψ bytes per micro-batch (two all-gathers, one
# reduce-scatter), 2 micro-batches per step.
z3 = runs["gpt2_zero3"]
d = z3["memory"]["device"]
assert d["params"] == 2 * psi / 64 and d["grads"] == 2 * psi / 64 and d["optimizer"] == 12 * psi / 64
assert z3["batch"]["microbatches_per_step"] == 2
kinds = [(e["collective"], e["state"], e["phase"]) for e in z3["communication"]]
assert kinds == [("all-gather", "params", "forward"), ("all-gather", "params", "backward"),
                 ("reduce-scatter", "grads", "backward")], kinds
for entry in z3["communication"]:
    assert entry["total_bytes"] == 2 * psi * 2
    assert abs(entry["sent_bytes"] - 63 / 64 * 2 * psi * 2) < 1
sent = sum(e["sent_bytes"] for e in z3["communication"])
assert abs(sent / allreduce["sent_bytes"] - 3.0) < 1e-9  # 1.5 × per step, × 2 micro-batches

# Pipeline (4 stages, 1F1B, 8 micro-batches) with ZeRO-1 over 16 and selective recomputation:
# stage 0 holds 12 layers × 34·s·b·h × min(p, m) = 4 micro-batches in flight.
pp = runs["gpt2_pp4_zero1"]
assert pp["strategy"]["pipeline"] == {"schedule": "1f1b", "microbatches": 8, "chunks": 1,
                                      "stages": 4}
stage0 = pp["memory"]["stages"][0]["device"]
assert stage0["activations"] == 12 * 34 * s * 4 * h * 4, stage0["activations"]
assert pp["memory"]["stage"] == 0 and len(pp["memory"]["stages"]) == 4
sends = [e for e in pp["communication"] if e["collective"] == "send"]
assert sends and all(e["message_bytes"] == 4 * s * h * 2 for e in sends)  # b·s·h, 2 B each
print("ok")
