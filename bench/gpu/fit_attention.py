#!/usr/bin/env python3
"""Fits the fused-attention constants of placec's cost model (FusedAttentionConstants in
include/placec/passes/CostModel.h) to measured kernel rates.

placec times a fused attention kernel as

    seconds = FLOP × (1 + K / attended keys) × (1 + H / d) / (peak × efficiency)

(CostModel::getAttentionSeconds; FLOP = 4·heads·q·k·d, halved when causal, 2.5 times that
backward; the attended keys are k, halved when causal). For each backend and pass this script
finds the efficiency (steps of 0.005) and the key overhead K (steps of 20, to 4000) that
minimize the mean |error| of that rate against the measurements, at a head-dimension overhead H
given or searched (0 to 64 in steps of 8, the smallest total error), over shapes of 1K to 32K
keys unless told otherwise.

A source that times each call alone adds a per-call overhead T to every time it records:
cudnn-frontend's benchmark records a CUDA event, calls PyTorch's attention (or autograd's
backward) from Python and records another, so the interval holds the host's dispatch of the
call as well as the kernel, about 0.1 ms, which a 1K-key kernel is no longer than. A training
step queues its kernels ahead of the GPU and pays none of it, so for such a source the fit
measures each shape as `T + seconds` and searches T too (0 to 300 µs in steps of 5), per
backend and pass; T is reported and is not one of placec's constants. placec's kernel bench
holds each kernel back to back (`kernels.py --hold`), where T is 0.

Inputs, either:
  - placec's kernel bench (bench/gpu/kernels.py --out), its "attention" list;
  - a CSV with the columns of NVIDIA cudnn-frontend's SDPA training benchmark
    (benchmark/sdpa_benchmark_training: batch_size, q_seqlen, kv_seqlen, num_q_heads, head_dim,
    is_causal, backend, fwd_tflops_per_sec, bwd_tflops_per_sec), which counts FLOPs the same way;
    its FP8 benchmark (benchmark_fp8_sdpa.py) writes a `precision` column, fp8 or bf16, instead
    of `backend`: cuDNN's SDPA graph in that type, `cudnn-fp8` and `cudnn` here, the FP8 rows
    fitted against the FP8 peak (--fp8-peak).

  python3 bench/gpu/fit_attention.py bench/gpu/results/h100-2026-11-27/kernels-hold.json \\
      --peak 989.4
  python3 bench/gpu/fit_attention.py bench/gpu/results/b200-cudnn-frontend/sdpa-bf16.csv \\
      --peak 2250 --head-overhead 32
  python3 bench/gpu/fit_attention.py bench/gpu/results/b200-cudnn-frontend/sdpa-fp8.csv \\
      --peak 2250 --fp8-peak 4500 --head-overhead 32
"""

import argparse
import csv
import json
import sys

# cudnn-frontend's backend names, and placec's kernel bench's, to placec's attention kinds.
BACKENDS = {"pyt_cudnn": "cudnn", "pyt_flash_attention": "flash", "cudnn": "cudnn",
            "flash": "flash"}


CSV_COLUMNS = ("batch_size", "q_seqlen", "kv_seqlen", "num_q_heads", "head_dim", "is_causal",
               "backend", "fwd_tflops_per_sec", "bwd_tflops_per_sec")
# cudnn-frontend's FP8 benchmark names the type its cuDNN graph runs in, not a backend.
PRECISIONS = {"fp8": "cudnn-fp8", "bf16": "cudnn"}


def load(path, min_keys, max_keys):
    """The shapes, (kernel, heads, queries, keys, d, causal, forward TFLOP/s, backward TFLOP/s)
    each, and whether the source times each call alone (a cudnn-frontend CSV)."""
    points = []
    per_call = not path.endswith(".json")
    try:
        with open(path) as f:
            text = f.read()
        if path.endswith(".json"):
            for r in json.loads(text)["attention"]:
                if "forward_tflops" not in r:
                    continue  # A shape the backend refused.
                points.append((BACKENDS.get(r["backend"]), r["heads"] * r["batch"],
                               r["queries"], r["keys"], r["head_dim"], bool(r["causal"]),
                               float(r["forward_tflops"]), float(r["backward_tflops"])))
        else:
            rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
            by_precision = "precision" in (rows.fieldnames or []) and \
                "backend" not in (rows.fieldnames or [])
            missing = [c for c in CSV_COLUMNS if c not in (rows.fieldnames or []) and
                       not (c == "backend" and by_precision)]
            if missing:
                sys.exit(f"fit_attention.py: {path}: not a kernels.py JSON file nor an SDPA "
                         f"benchmark CSV (no column {', '.join(missing)})")
            for line, r in enumerate(rows, start=2):
                try:
                    kind = PRECISIONS.get(r["precision"]) if by_precision else \
                        BACKENDS.get(r["backend"])
                    points.append((kind,
                                   int(r["batch_size"]) * int(r["num_q_heads"]),
                                   int(r["q_seqlen"]), int(r["kv_seqlen"]), int(r["head_dim"]),
                                   r["is_causal"] == "True", float(r["fwd_tflops_per_sec"]),
                                   float(r["bwd_tflops_per_sec"])))
                except (TypeError, ValueError) as e:
                    sys.exit(f"fit_attention.py: {path}: data row {line - 1}: {e}")
    except OSError as e:
        sys.exit(f"fit_attention.py: {e}")
    except (ValueError, KeyError, TypeError) as e:
        sys.exit(f"fit_attention.py: {path}: not a kernels.py JSON file ({e!r})")
    return [p for p in points
            if p[0] and min_keys <= p[3] <= max_keys and p[6] > 0 and p[7] > 0], per_call


def predicted(peak, efficiency, key_overhead, head_overhead, keys, causal, head_dim):
    """placec's rate for one kernel, TFLOP/s."""
    attended = keys * (0.5 if causal else 1)
    return peak * efficiency / ((1 + key_overhead / attended) * (1 + head_overhead / head_dim))


def as_timed(rate, tflop, call_overhead):
    """The rate a source records for a kernel of `tflop` TFLOP run at `rate` TFLOP/s when each
    call's time holds `call_overhead` seconds besides the kernel."""
    return tflop / (call_overhead + tflop / rate)


def fit(points, peak, head_overhead, call_overheads):
    """(efficiency, key overhead, call overhead, mean |error|, max |error|) minimizing the mean
    |error|; points are (keys, causal, d, TFLOP, measured TFLOP/s)."""
    best = None
    for call_overhead in call_overheads:
        for k_step in range(0, 201):
            key_overhead = 20 * k_step
            # placec's rate per shape at efficiency 1, which the efficiency scales.
            unit = [(predicted(peak, 1, key_overhead, head_overhead, keys, causal, d), tflop, rate)
                    for keys, causal, d, tflop, rate in points]
            for e_step in range(1, 201):
                efficiency = 0.005 * e_step
                errors = [abs(as_timed(efficiency * model, tflop, call_overhead) / rate - 1)
                          for model, tflop, rate in unit]
                mean = sum(errors) / len(errors)
                if best is None or mean < best[3]:
                    best = (efficiency, key_overhead, call_overhead, mean, max(errors))
    return best


def tflop(heads, queries, keys, d, causal, backward):
    """The kernel's TFLOP as placec and cudnn-frontend count them."""
    forward = 4 * heads * queries * keys * d * (0.5 if causal else 1) / 1e12
    return forward * (2.5 if backward else 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", help="kernels.py JSON or a cudnn-frontend SDPA CSV")
    parser.add_argument("--peak", type=float, required=True,
                        help="the device's dense BF16 peak, TFLOP/s")
    parser.add_argument("--fp8-peak", type=float,
                        help="the device's dense FP8 peak, TFLOP/s, for the FP8 rows of "
                             "cudnn-frontend's FP8 benchmark")
    parser.add_argument("--head-overhead", type=float,
                        help="fix H (default: search 0 to 64 in steps of 8)")
    parser.add_argument("--min-keys", type=int, default=1024,
                        help="leave out shapes of fewer keys (launch-bound; default 1024)")
    parser.add_argument("--call-overhead", type=float,
                        help="fix the per-call overhead T, µs (default: search 0 to 300 for a "
                             "source that times each call alone, 0 for placec's kernel bench)")
    parser.add_argument("--max-keys", type=int, default=32768,
                        help="leave out shapes of more keys (default 32768: the range of "
                             "placec's kernel bench)")
    args = parser.parse_args()
    if args.peak <= 0:
        parser.error("--peak must be positive")
    if args.fp8_peak is not None and args.fp8_peak <= 0:
        parser.error("--fp8-peak must be positive")
    if args.call_overhead is not None and not 0 <= args.call_overhead <= 10000:
        parser.error("--call-overhead must be 0 to 10000 µs")
    points, per_call = load(args.input, args.min_keys, args.max_keys)
    if not points:
        sys.exit(f"fit_attention.py: no attention rates in {args.input}")
    heads = [args.head_overhead] if args.head_overhead is not None else range(0, 65, 8)
    if args.call_overhead is not None:
        call_overheads = [args.call_overhead * 1e-6]
    else:
        call_overheads = [5e-6 * step for step in range(61)] if per_call else [0.0]
    if any(p[0] == "cudnn-fp8" for p in points) and args.fp8_peak is None:
        sys.exit(f"fit_attention.py: {args.input} has FP8 kernels: give the FP8 peak, --fp8-peak")
    for backend in sorted({p[0] for p in points}):
        mine = [p for p in points if p[0] == backend]
        peak = args.fp8_peak if backend == "cudnn-fp8" else args.peak
        passes = {"forward": [(p[3], p[5], p[4], tflop(*p[1:6], False), p[6]) for p in mine],
                  "backward": [(p[3], p[5], p[4], tflop(*p[1:6], True), p[7]) for p in mine]}
        choice = None
        for h in heads:
            fits = {name: fit(pts, peak, h, call_overheads) for name, pts in passes.items()}
            total = sum(f[3] for f in fits.values())
            if choice is None or total < choice[0]:
                choice = (total, h, fits)
        _, h, fits = choice
        print(f"{backend}: {len(mine)} shapes, head-dimension overhead {h:g}")
        for name, (efficiency, key_overhead, call, mean, worst) in fits.items():
            timed = f", call overhead {1e6 * call:.0f} us" if per_call else ""
            print(f"  {name}: efficiency {efficiency:.3f}, key overhead {key_overhead}{timed}, "
                  f"mean |error| {100 * mean:.1f} %, max {100 * worst:.1f} %")
            for keys, causal, d, work, rate in passes[name]:
                model = predicted(peak, efficiency, key_overhead, h, keys, causal, d)
                seen = as_timed(model, work, call)
                kernel = f" (the kernel alone {model:.0f})" if per_call else ""
                print(f"    {keys:>6} keys{' causal' if causal else ''}, d {d}: measured "
                      f"{rate:.0f}, placec {seen:.0f}{kernel} TFLOP/s "
                      f"({100 * (seen / rate - 1):+.1f} %)")


if __name__ == "__main__":
    main()
