#!/usr/bin/env python3
"""The fused causal attention of placert's CUDA trainer beside PyTorch's on one GPU (bench/README.md,
"GPU"): placert-cuda-attention-bench (runtime/cuda/CudaAttentionBench.cu) for each shape, and
torch.nn.functional.scaled_dot_product_attention with each backend that runs the shape
(FlashAttention-2, cuDNN, memory-efficient), on q, k and v sliced from one packed qkv tensor as
both trainers keep them. Rates count the causal half of the products: forward 2·2·b·h·s²·d / 2,
backward 2.5 times that. Each call is timed alone between two events, synchronized after, so a
time includes what runs between the events besides the kernels (PyTorch's dispatch and copies;
its backward is the forward and backward less the forward, autograd's gradient copies included).

    python3 bench/gpu/attention.py --placert BUILD/placert-cuda-attention-bench \
        [--baseline OTHER_BUILD/placert-cuda-attention-bench] [--json OUT.json]

Each --baseline times another build of the bench (another version of FlashAttention.cu) in the
same invocation.
"""

import argparse
import json
import os
import re
import subprocess
import sys

# (batch, seq, heads, head_dim): the two GPU bench configs' attention (bench/gpu/*.place), and a
# longer sequence at the 1.3B model's heads.
SHAPES = [(8, 1024, 16, 64), (4, 2048, 16, 128), (1, 8192, 16, 128)]
LINE = re.compile(r"forward ([0-9.]+) ms ([0-9.]+) TFLOP/s, backward ([0-9.]+) ms ([0-9.]+) TFLOP/s")


def placert(binary, shape, repeats):
    command = [binary] + [str(x) for x in shape] + [str(repeats)]
    result = subprocess.run(command, capture_output=True, text=True)
    match = LINE.search(result.stdout)
    if result.returncode != 0 or not match:
        return {"error": (result.stderr or result.stdout).strip()[-400:] or f"exit {result.returncode}"}
    fwd_ms, fwd_tflops, bwd_ms, bwd_tflops = (float(x) for x in match.groups())
    return {"forward_ms": fwd_ms, "forward_tflops": fwd_tflops, "backward_ms": bwd_ms,
            "backward_tflops": bwd_tflops}


def torch_backends(shape, repeats):
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as error:
        return {"torch_flash": {"error": f"PyTorch: {error}"}}

    b, s, h, d = shape
    flops = 2.0 * b * h * s * s * d
    results = {}
    for name, backend in [("torch_flash", SDPBackend.FLASH_ATTENTION),
                          ("torch_cudnn", SDPBackend.CUDNN_ATTENTION),
                          ("torch_efficient", SDPBackend.EFFICIENT_ATTENTION)]:
        gen = torch.Generator(device="cuda").manual_seed(1)
        qkv = (torch.rand(b, s, h, 3, d, device="cuda", generator=gen, dtype=torch.float32) * 2 - 1)
        qkv = qkv.to(torch.bfloat16).requires_grad_(True)
        dout = (torch.rand(b, h, s, d, device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)
        q, k, v = (qkv[:, :, :, i].transpose(1, 2) for i in range(3))

        def forward():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        try:
            with sdpa_kernel([backend]):
                for _ in range(2):
                    out = forward()
                    torch.autograd.grad(out, qkv, dout)
                torch.cuda.synchronize()
                fwd, both = [], []
                for _ in range(repeats):
                    start, mid, stop = (torch.cuda.Event(enable_timing=True) for _ in range(3))
                    start.record()
                    out = forward()
                    mid.record()
                    torch.autograd.grad(out, qkv, dout)
                    stop.record()
                    stop.synchronize()
                    fwd.append(start.elapsed_time(mid))
                    both.append(start.elapsed_time(stop))
        except RuntimeError as error:
            results[name] = {"error": str(error).splitlines()[0][:200]}
            continue
        fwd.sort()
        both.sort()
        f, total = fwd[len(fwd) // 2], both[len(both) // 2]
        results[name] = {"forward_ms": f, "forward_tflops": flops / (f * 1e-3) / 1e12,
                         "backward_ms": total - f,
                         "backward_tflops": 2.5 * flops / ((total - f) * 1e-3) / 1e12}
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--placert", required=True, help="placert-cuda-attention-bench")
    parser.add_argument("--baseline", action="append", default=[],
                        help="another build of placert-cuda-attention-bench (repeatable)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--skip-torch", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats: expected a positive count, got {args.repeats}")
    for binary in [args.placert] + args.baseline:
        if not os.access(binary, os.X_OK):
            parser.error(f"'{binary}' is not an executable file")

    rows = []
    for shape in SHAPES:
        row = {"shape": dict(zip(["batch", "seq", "heads", "head_dim"], shape)),
               "placert": placert(args.placert, shape, args.repeats)}
        for i, baseline in enumerate(args.baseline):
            row[f"placert_baseline_{i}"] = placert(baseline, shape, args.repeats)
        if not args.skip_torch:
            row.update(torch_backends(shape, args.repeats))
        rows.append(row)

    names = [n for n in ["placert"] + [f"placert_baseline_{i}" for i in range(len(args.baseline))]
             + ["torch_flash", "torch_cudnn", "torch_efficient"] if any(n in r for r in rows)]
    print("| b, s, h, d | " + " | ".join(f"{n} fwd / bwd (ms, TFLOP/s)" for n in names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for row in rows:
        cells = []
        for n in names:
            r = row.get(n, {})
            cells.append("error: " + r["error"] if "error" in r else
                         f"{r['forward_ms']:.3f} ({r['forward_tflops']:.0f}) / "
                         f"{r['backward_ms']:.3f} ({r['backward_tflops']:.0f})" if r else "-")
        s = row["shape"]
        print(f"| {s['batch']}, {s['seq']}, {s['heads']}, {s['head_dim']} | " + " | ".join(cells)
              + " |")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=2)
    failed = any("error" in row["placert"] for row in rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
