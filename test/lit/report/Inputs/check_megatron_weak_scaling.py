"""Checks bench/fidelity/holdout/megatron-core-r0.8-h100-weak-scaling.place against its source,
Megatron-LM's weak-scaling table on H100 (README.md, images/model_table.png, commit f2e5db402c):
each row's measured step is Megatron-LM's FLOP count of a step (megatron/training/training.py,
num_floating_point_operations) over the table's teraFLOP/s per GPU and GPUs, the table's MFU is
that rate over the H100's 989 dense BF16 TFLOP/s, and the model placec builds has the table's
parameter count. `python3 check_megatron_weak_scaling.py report.json fidelity.json` (the outputs of
`placec report --format=json` and `placec fidelity --format=json` on the file)."""
import json
import sys

# The table's rows: size label, heads, hidden, layers, TP, GPUs, batch, teraFLOP/s per GPU, MFU.
TABLE = {
    "gpt_1_7b_48": ("1.7B", 16, 2048, 24, 1, 48, 192, 408.8, 0.41),
    "gpt_7_1b_96": ("7.1B", 32, 4096, 30, 2, 96, 192, 465.9, 0.47),
}
SEQ, VOCAB, PEAK = 4096, 131072, 989e12

report = json.load(open(sys.argv[1]))
runs = {run["name"]: run for run in report["runs"]}
rows = {row["run"]: row for row in json.load(open(sys.argv[2]))["rows"]}
assert sorted(rows) == sorted(TABLE), sorted(rows)
assert sorted(runs) == sorted(TABLE), sorted(runs)
for name, (label, heads, h, layers, tp, gpus, batch, tflops, mfu) in TABLE.items():
    run = runs[name]
    model = run["model"]
    assert (model["heads"], model["hidden"], model["layers"], model["seq"], model["vocab"]) == (
        heads, h, layers, SEQ, VOCAB), name
    assert run["devices"] == gpus and run["batch"]["global_batch"] == batch, name
    sizes = {axis["name"]: axis["size"] for axis in run["mesh"]}
    assert sizes.get("tp", 1) == tp and sizes["dp"] == gpus // tp, (name, sizes)
    # Megatron-LM's count for a GPT layer with a 4h MLP and as many key/value heads as heads.
    flops = 12 * batch * SEQ * layers * h * h * (2 + SEQ / h + 4 + VOCAB / (2 * layers * h))
    step = flops / (tflops * 1e12 * gpus)
    measured = rows[name]["measured_step_s"]
    assert abs(measured - step) <= 5e-4 * step, (name, measured, step)
    assert round(tflops * 1e12 / PEAK, 2) == mfu, (name, tflops * 1e12 / PEAK)
    # The parameter count, cut to a tenth of a billion, is the table's label (untied embeddings,
    # learned positions; tied embeddings would make the first 1.48B).
    assert f"{model['params'] // 10**8 / 10:.1f}B" == label, (name, model["params"])
    print(f"{name}: measured step {measured:.4f} s = Megatron-LM's count / "
          f"({tflops} TFLOP/s x {gpus}), {model['params'] / 1e9:.2f}B parameters")
