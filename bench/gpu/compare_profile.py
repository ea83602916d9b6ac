#!/usr/bin/env python3
"""Compare a profiled training step with placec's prediction for it, kernel by kernel kind.

`torch_gpt.py --profile` writes each operator's calls and device time over a few steps; `placec
report --explain --format=json` writes each kernel the cost model times. This script puts the two
side by side per step, in four kinds: the matrix products, the fused attention, the optimizer
step and every other kernel (the memory-bound work: norms, activation functions, casts, residual
additions, the loss, reductions). The step's prediction can be right while its parts are not;
this shows which part carries the error.

    python3 bench/gpu/compare_profile.py bench/gpu/results/h100-2026-11-27/profile-gpt1.3b.json \\
        --placec build/tools/placec \\
        bench/fidelity/holdout/placec-bench-gpu-h100.place --run gpt1300m_torch_eager

The profile must be of an eager step (torch_gpt.py records PyTorch's operators, not the kernels
TorchInductor generates) and the run must say `kernels = eager`. It counts only leaf operators (those that launch kernels themselves): the composite ones
PyTorch decomposes (`aten::linear` into `aten::addmm`, `aten::to` into `aten::copy_`, ...) would
count their kernels twice. A run must be on one device (no collectives), without a pipeline.
"""

import argparse
import json
import subprocess
import sys

# Operators that only call others: their device time is their children's.
COMPOSITE = {
    "aten::linear", "aten::matmul", "aten::to", "aten::_to_copy", "aten::layer_norm",
    "aten::rms_norm", "aten::group_norm", "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::_scaled_dot_product_cudnn_attention_backward",
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_flash_attention_backward",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_efficient_attention_backward", "aten::cross_entropy_loss",
    "aten::log_softmax", "aten::nll_loss", "aten::nll_loss_nd", "aten::embedding",
    "aten::embedding_backward", "aten::dropout", "aten::contiguous", "aten::clone",
    "aten::reshape", "aten::view", "aten::t", "aten::transpose", "aten::expand",
    "aten::flatten", "aten::chunk", "aten::split", "aten::to_dtype", "aten::type_as",
    "aten::zero_", "aten::zeros", "aten::zeros_like", "aten::ones_like", "aten::full",
    "aten::new_zeros",
}
PRODUCTS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm",
            "aten::addmv", "aten::mv"}
ATTENTION = {"aten::_cudnn_attention_forward", "aten::_cudnn_attention_backward",
             "aten::_flash_attention_forward", "aten::_flash_attention_backward",
             "aten::_efficient_attention_forward", "aten::_efficient_attention_backward"}
KINDS = ["matrix products", "fused attention", "optimizer step", "other kernels"]


class Error(Exception):
    pass


def measured_kind(name):
    if name in PRODUCTS:
        return "matrix products"
    if name in ATTENTION:
        return "fused attention"
    if name.startswith("aten::_fused_adam") or name.startswith("aten::_foreach_"):
        return "optimizer step"
    return "other kernels"


def read_profile(path):
    try:
        with open(path) as f:
            data = json.load(f)
        profile = data["profile"]
        steps = float(profile["steps"])
        ops = profile["ops"]
        step_s = float(data["seconds_per_step"])
        mode = str(data.get("mode", "eager"))
    except OSError as e:
        raise Error(f"{path}: {e.strerror}")
    except (ValueError, KeyError, TypeError):
        raise Error(f"{path}: not a profile written by torch_gpt.py --profile "
                    "(needs seconds_per_step and profile.steps, profile.ops)")
    if steps <= 0:
        raise Error(f"{path}: profile.steps is {steps:g}")
    if mode.split()[0] != "eager":
        raise Error(f"{path}: a '{mode}' step; torch_gpt.py --profile records PyTorch's operators "
                    "only, which leaves out the kernels TorchInductor generates: compare an eager "
                    "profile")
    by_name = {}
    for op in ops:
        try:
            name, device_us = op["name"], float(op["device_us"])
        except (KeyError, TypeError, ValueError):
            raise Error(f"{path}: an operator without name or device_us")
        if name in COMPOSITE:
            continue
        by_name[name] = by_name.get(name, 0.0) + device_us * 1e-6 / steps
    return step_s, by_name


def unit_multiplicity(figure, layers):
    """How many times per micro-batch the explained unit runs: a layer stands for every layer."""
    words = figure.split(" of ")
    if len(words) != 2:
        raise Error(f"placec explained an unexpected unit '{figure}'")
    pass_name, unit = words
    if pass_name not in ("forward", "backward", "recompute"):
        raise Error(f"placec explained an unexpected pass '{figure}'")
    return layers if unit.startswith("layer.") else 1


def read_prediction(placec, place, run):
    command = [placec, "report", place, "--run", run, "--explain", "--format=json"]
    try:
        result = subprocess.run(command, capture_output=True, text=True)
    except OSError as e:
        raise Error(f"{placec}: {e.strerror}")
    if result.returncode != 0:
        raise Error(f"'{' '.join(command)}' failed:\n{result.stderr.strip()}")
    try:
        [entry] = json.loads(result.stdout)["runs"]
    except (ValueError, KeyError, TypeError):
        raise Error(f"'{' '.join(command)}' did not write one run's JSON report")
    if entry["devices"] != 1:
        raise Error(f"run '{run}' is on {entry['devices']} devices; this compares a one-device "
                    "run, whose profile has no collectives")
    if entry.get("kernels") != "eager":
        raise Error(f"run '{run}' says kernels = {entry.get('kernels')}, and the profile is of "
                    "an eager step")
    if entry["model"].get("kind") != "transformer":
        raise Error(f"run '{run}' is not a transformer")
    layers = entry["model"]["layers"]
    microbatches = entry["batch"]["microbatches_per_step"]
    kinds = dict.fromkeys(KINDS, 0.0)
    lines = {}
    for unit in entry["explain"]["compute"]:
        figure = unit["figure"]
        if not figure.startswith(("forward of", "backward of", "recompute of")):
            raise Error(f"placec explained '{figure}', which a one-device run does not have")
        times = unit_multiplicity(figure, layers) * microbatches
        for line in unit["lines"]:
            name, value = line["figure"], line["value"]
            if name == "total" or value is None:
                continue
            seconds = value * times
            if name == "gemm":
                kinds["matrix products"] += seconds
            elif name == "attention":
                kinds["fused attention"] += seconds
            else:
                kinds["other kernels"] += seconds
                lines[name] = lines.get(name, 0.0) + seconds
    time = {t["figure"]: t["value"] for t in entry["explain"]["time"]}
    kinds["optimizer step"] = time.get("optimizer") or 0.0
    return kinds, lines, time.get("step"), entry["precision"]


def ratio(predicted_s, measured_s):
    return f"{predicted_s / measured_s:.2f}" if measured_s > 0 else "-"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", help="a torch_gpt.py --profile JSON file")
    parser.add_argument("place", help="the .place file of the profiled run")
    parser.add_argument("--run", required=True, help="the run in PLACE that was profiled")
    parser.add_argument("--placec", default="placec", help="the placec to ask (default: PATH's)")
    parser.add_argument("--format", choices=["text", "json"], default="text")
    args = parser.parse_args()
    step_s, ops = read_profile(args.profile)
    predicted, lines, predicted_step, precision = read_prediction(args.placec, args.place,
                                                                  args.run)
    measured = dict.fromkeys(KINDS, 0.0)
    for name, seconds in ops.items():
        measured[measured_kind(name)] += seconds
    if args.format == "json":
        json.dump({"run": args.run, "measured_step_s": step_s, "predicted_step_s": predicted_step,
                   "kinds": [{"kind": k, "measured_s": measured[k], "predicted_s": predicted[k]}
                             for k in KINDS],
                   "measured_ops": ops, "predicted_lines": lines}, sys.stdout, indent=1)
        print()
        return
    print(f"{args.run} ({precision}): per step, the profile's kernels against placec's")
    print(f"{'kind':<18}{'measured':>11}{'predicted':>11}{'ratio':>8}")
    for kind in KINDS:
        print(f"{kind:<18}{measured[kind] * 1e3:>8.1f} ms{predicted[kind] * 1e3:>8.1f} ms"
              f"{ratio(predicted[kind], measured[kind]):>8}")
    busy, total = sum(measured.values()), sum(predicted.values())
    print(f"{'all kernels':<18}{busy * 1e3:>8.1f} ms{total * 1e3:>8.1f} ms{ratio(total, busy):>8}")
    print(f"{'step':<18}{step_s * 1e3:>8.1f} ms{predicted_step * 1e3:>8.1f} ms"
          f"{ratio(predicted_step, step_s):>8}")
    print("measured: the profile's device time per step; predicted: the cost model's kernel times "
          "(placec report --explain); under params = fp32 placec's optimizer step includes the "
          "micro-batches' fp32 gradients summed, which the profile counts among the other "
          "kernels (aten::add_)")
    print()
    print("other kernels, measured (ms per step)")
    for name, seconds in sorted(ops.items(), key=lambda item: -item[1]):
        if measured_kind(name) == "other kernels" and seconds >= 5e-5:
            print(f"  {seconds * 1e3:8.2f}  {name}")
    print("other kernels, predicted (ms per step)")
    for name, seconds in sorted(lines.items(), key=lambda item: -item[1]):
        print(f"  {seconds * 1e3:8.2f}  {name}")


if __name__ == "__main__":
    try:
        main()
    except Error as e:
        print(f"compare_profile.py: {e}", file=sys.stderr)
        sys.exit(1)
