#!/usr/bin/env python3
"""The kernels of a mixture-of-experts layer, timed on one NVIDIA GPU through PyTorch, for the
cost model's grouped products and token routing (bench/README.md, "Kernels of a mixture of
experts").

placec times a layer's routed experts as grouped products: `batch` local experts, each a product
of its rows (passes/CostModel.cpp, layerProjectionShapes), all tiles of all experts filling the
device's SMs in waves as one kernel would. This bench measures, for every such product of the
fidelity rows (bench/gpu/moe-shapes.json, from `kernel_shapes.py --experts`) and for a sweep of
rows per expert:

  grouped  one launch for all experts: torch._grouped_mm (CUTLASS's grouped kernel on Hopper),
           the products laid out as the training step runs them (forward X·Wᵀ, input gradient
           dY·W, weight gradient dYᵀ·X with the experts' rows as the reduced dimension)
  loop     one cuBLAS product per expert, back to back (torch.mm)
  dense    one product of the same FLOPs with the experts' rows concatenated: the packed ideal

each with its output checked against the loop's, and the token routing at one layer's shape:
the router's softmax and top-k, the permutation of tokens to their experts (a gather) and its
inverse weighted by the routing probabilities (a scatter-add), and fused causal attention with
grouped keys and values.

  python3 bench/gpu/moe_kernels.py --shapes bench/gpu/moe-shapes.json --out DIR [--budget 360]
      [--sections routing,attention,grouped,single]

Writes DIR/moe-kernels.json (every measurement) and prints a summary; every section is saved as it
ends, so that a deadline loses only the section it interrupts.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels import (Timer, attention_flops, gemm_case, log, run_section,  # noqa: E402
                     smi)

BF16 = torch.bfloat16


def operands(groups, m, n, k, layout, dev):
    """The inputs of `groups` products C_e[m×n] = A_e[m×k]·B_e[k×n] in a layer's layout.

    forward          A = X (the experts' rows stacked), B_e = W_eᵀ of W [groups, n, k]
    input_gradient   A = dY (stacked), B_e = W_e of W [groups, k, n]
    weight_gradient  A_e = dY_eᵀ, B_e = X_e: the experts' rows are k, stacked in dY [k·g, m] and
                     X [k·g, n]; the result is one [m, n] per expert
    """
    if layout == "weight_gradient":
        dy = torch.randn(groups * k, m, device=dev, dtype=BF16)
        x = torch.randn(groups * k, n, device=dev, dtype=BF16)
        return dy, x
    a = torch.randn(groups * m, k, device=dev, dtype=BF16)
    if layout == "forward":
        w = torch.randn(groups, n, k, device=dev, dtype=BF16)
        return a, w.transpose(1, 2)
    return a, torch.randn(groups, k, n, device=dev, dtype=BF16)


def implementations(groups, m, n, k, layout, a, b, dev):
    """Callables for the grouped, per-expert and dense forms of the same products."""
    if layout == "weight_gradient":
        offs = torch.arange(1, groups + 1, device=dev, dtype=torch.int32) * k
        at = a.t()  # [m, k·g], column-major: dYᵀ
        grouped = lambda: torch._grouped_mm(at, b, offs=offs, out_dtype=BF16)  # noqa: E731

        def loop():
            return [torch.mm(at[:, e * k:(e + 1) * k], b[e * k:(e + 1) * k]) for e in range(groups)]

        dense = lambda: torch.mm(at, b)  # noqa: E731 - one m×n×(k·g) product
        return grouped, loop, dense
    offs = torch.arange(1, groups + 1, device=dev, dtype=torch.int32) * m
    grouped = lambda: torch._grouped_mm(a, b, offs=offs, out_dtype=BF16)  # noqa: E731

    def loop():
        return [torch.mm(a[e * m:(e + 1) * m], b[e]) for e in range(groups)]

    dense = lambda: torch.mm(a, b[0])  # noqa: E731 - one (m·g)×n×k product
    return grouped, loop, dense


def relative_error(got, want):
    got, want = got.float(), want.float()
    return (torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want)).item()


def bench_grouped(shapes, dev, timer, deadline):
    rows = []
    for i, (groups, m, n, k, layout, source) in enumerate(shapes):
        if time.time() > deadline:
            log(f"  grouped: budget reached after {i} of {len(shapes)} shapes")
            break
        row = dict(batch=groups, m=m, n=n, k=k, layout=layout, source=source)
        try:
            a, b = operands(groups, m, n, k, layout, dev)
            grouped, loop, dense = implementations(groups, m, n, k, layout, a, b, dev)
            want = loop()
            got = grouped()
            if layout == "weight_gradient":
                row["grouped_error"] = max(relative_error(got[e], want[e]) for e in range(groups))
            else:
                row["grouped_error"] = relative_error(got, torch.cat(want))
            for name, fn in (("grouped", grouped), ("loop", loop), ("dense", dense)):
                row[name + "_seconds"] = timer(fn)
            flops = 2.0 * groups * m * n * k
            for name in ("grouped", "loop", "dense"):
                row[name + "_tflops"] = flops / row[name + "_seconds"] / 1e12
            del a, b, want, got
        except RuntimeError as error:  # An unsupported layout: recorded, not fatal.
            row["error"] = str(error).splitlines()[0]
        rows.append(row)
        torch.cuda.empty_cache()
    return rows


def bench_routing(dev, timer, tokens, hidden, experts, top_k, local_experts):
    """One layer's routing at `tokens` tokens of `hidden`: what Megatron-Core's token dispatcher
    does around the all-to-all, each kernel timed alone. Bytes as each input read once and each
    output written once."""
    rows = []

    def add(name, fn, bytes_moved, **extra):
        seconds = timer(fn)
        rows.append(dict(kernel=name, tokens=tokens, hidden=hidden, experts=experts,
                         top_k=top_k, bytes=bytes_moved, seconds=seconds,
                         gbps=bytes_moved / seconds / 1e9, **extra))

    x = torch.randn(tokens, hidden, device=dev, dtype=BF16)
    w = torch.randn(experts, hidden, device=dev, dtype=BF16)
    logits = F.linear(x, w).float()
    add("router softmax", lambda: torch.softmax(logits, dim=-1), 8 * tokens * experts)
    probs = torch.softmax(logits, dim=-1)
    add("router top-k", lambda: torch.topk(probs, top_k, dim=-1), 4 * tokens * experts
        + 12 * tokens * top_k)
    scores, chosen = torch.topk(probs, top_k, dim=-1)
    # Tokens sorted by expert, as the permutation orders them.
    flat = chosen.reshape(-1)
    order = torch.argsort(flat, stable=True)
    source = (order // top_k).to(torch.int64)
    add("routing sort", lambda: torch.argsort(flat, stable=True), 16 * tokens * top_k)
    rows_out = tokens * top_k
    add("permute (gather)", lambda: x.index_select(0, source), 4 * rows_out * hidden)
    y = x.index_select(0, source)
    weights = scores.reshape(-1)[order].to(BF16).unsqueeze(1)
    out = torch.zeros(tokens, hidden, device=dev, dtype=BF16)

    def unpermute():
        out.zero_()
        out.index_add_(0, source, y * weights)
        return out

    add("unpermute (weighted scatter-add)", unpermute,
        2 * rows_out * hidden * 3 + 2 * tokens * hidden * 3)
    # The receiving side of expert parallelism: rows from every source rank regrouped by local
    # expert (Megatron-Core's sort_chunks_by_idxs), a gather of every row.
    regroup = torch.randperm(rows_out, device=dev)
    add("regroup by local expert (gather)", lambda: y.index_select(0, regroup),
        4 * rows_out * hidden, local_experts=local_experts)
    return rows


def bench_attention(dev, timer, cases):
    """Fused causal attention through SDPA's cuDNN and FlashAttention-2 backends, keys and values
    grouped where kv < heads."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
    for (batch, heads, kv_heads, seq, d), name in ((c, b) for c in cases for b in backends):
        backend = backends[name]
        row = dict(backend=name, batch=batch, heads=heads, kv_heads=kv_heads, queries=seq,
                   keys=seq, head_dim=d, causal=True)
        try:
            q = torch.randn(batch, heads, seq, d, device=dev, dtype=BF16, requires_grad=True)
            k = torch.randn(batch, kv_heads, seq, d, device=dev, dtype=BF16, requires_grad=True)
            v = torch.randn(batch, kv_heads, seq, d, device=dev, dtype=BF16, requires_grad=True)
            gqa = kv_heads != heads
            with sdpa_kernel([backend]):
                with torch.no_grad():
                    row["forward_seconds"] = timer(lambda: F.scaled_dot_product_attention(
                        q, k, v, is_causal=True, enable_gqa=gqa))
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
                grad = torch.randn_like(out)
                row["backward_seconds"] = timer(lambda: torch.autograd.grad(
                    out, (q, k, v), grad, retain_graph=True))
            flops = attention_flops(batch, heads, seq, seq, d, True)
            row["forward_tflops"] = flops / row["forward_seconds"] / 1e12
            row["backward_tflops"] = 2.5 * flops / row["backward_seconds"] / 1e12
            del q, k, v, out, grad
        except RuntimeError as error:
            row["error"] = str(error).splitlines()[0]
        rows.append(row)
        torch.cuda.empty_cache()
    return rows


def sweep():
    """Rows per expert from 64 to 4096 at one shape (GPT-OSS's gate and up, 16 local experts),
    forward and weight gradient; 4 to 64 experts at 1,024 rows each; and 16 weight gradients of
    8192×8192 over 256 to 4,096 rows."""
    out = []
    for m in (64, 128, 256, 512, 1024, 2048, 4096):
        out.append((16, m, 5760, 2880, "forward", "rows sweep"))
        out.append((16, 2880, 5760, m, "weight_gradient", "rows sweep"))
    for groups in (4, 8, 32, 64):
        out.append((groups, 1024, 5760, 2880, "forward", "experts sweep"))
    for k in (256, 1024, 4096):
        out.append((16, 8192, 8192, k, "weight_gradient", "rows sweep 8192"))
    return out


def bench_single(dev, timer):
    """Single products in the three layouts of a training step over a sweep of k, at an expert's
    weight shape (2880×5760, GPT-OSS's gate and up) and at 8192×8192, and single forward products
    of few rows: whether a grouped product's short k or few rows cost what one product of that
    shape costs (kernels.gemm_case rotates inputs through several copies, above L2)."""
    rows = []
    cases = [(m, n, k, layout) for m, n in ((2880, 5760), (8192, 8192))
             for k in (256, 512, 1024, 2048, 4096, 8192)
             for layout in ("forward", "input_gradient", "weight_gradient")]
    cases += [(m, 5760, 2880, "forward") for m in (64, 128, 256, 512, 1024, 2048)]
    for m, n, k, layout in cases:
        seconds = timer(gemm_case(m, n, k, layout, False, dev))
        rows.append(dict(m=m, n=n, k=k, layout=layout, seconds=seconds,
                         tflops=2.0 * m * n * k / seconds / 1e12))
        torch.cuda.empty_cache()
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", help="JSON of products (bench/gpu/moe-shapes.json)")
    parser.add_argument("--out", required=True, help="directory for moe-kernels.json")
    parser.add_argument("--sections", default="routing,attention,grouped,single",
                        help="comma-separated sections to run")
    parser.add_argument("--budget", type=float, default=360,
                        help="seconds after which the remaining shapes are skipped")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("moe_kernels.py: no CUDA device")
    if not hasattr(torch, "_grouped_mm"):
        sys.exit(f"moe_kernels.py: PyTorch {torch.__version__} has no torch._grouped_mm")
    os.makedirs(args.out, exist_ok=True)
    began = time.time()
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    result = dict(
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), device=props.name,
        sms=props.multi_processor_count, memory_bytes=props.total_memory,
        torch=torch.__version__, cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
        timer="burst: median of 5 batches of about 5 ms after a warm-up (kernels.Timer)",
        smi_before=smi("name,driver_version,clocks.max.sm,clocks.sm,power.limit,power.draw,"
                       "temperature.gpu"))
    log(json.dumps(result, indent=1))
    path = os.path.join(args.out, "moe-kernels.json")

    def save():
        with open(path, "w") as f:
            json.dump(result, f, indent=1)

    timer = Timer()
    shapes = []
    if args.shapes:
        with open(args.shapes) as f:
            for g in json.load(f).get("gemms", []):
                if g.get("batch", 1) > 1 and g.get("name", "").startswith("experts"):
                    key = (g["batch"], g["m"], g["n"], g["k"], g["layout"])
                    if all(s[:5] != key for s in shapes):
                        shapes.append(key + (g.get("source", "shapes"),))
    shapes += sweep()
    log(f"{len(shapes)} grouped products")

    def grouped():
        result["grouped"] = bench_grouped(shapes, dev, timer, began + args.budget * 0.8)

    def routing():
        # GPT-OSS 120B on H100 (bench/fidelity/holdout/megatron-bridge-gpt-oss-120b.place): 4,096
        # tokens a micro-batch, hidden 2880, 128 experts, top-4, 16 of them on each of 8 ranks.
        result["routing"] = bench_routing(dev, timer, 4096, 2880, 128, 4, 16)
        # Qwen3 30B-A3B on H100: 8,192 tokens (micro-batch 2 of 4,096), hidden 2048, 128, top-8.
        result["routing"] += bench_routing(dev, timer, 8192, 2048, 128, 8, 8)

    def attention():
        # GPT-OSS's full layers (64 heads of 64 over 8 key/value heads, 4,096 tokens) and the
        # same without grouping; Qwen3's (32 over 4, d 128).
        result["attention"] = bench_attention(dev, timer, [(1, 64, 8, 4096, 64),
                                                           (1, 64, 64, 4096, 64),
                                                           (2, 32, 4, 4096, 128)])

    def single():
        result["single"] = bench_single(dev, timer)

    wanted = set(args.sections.split(","))
    for name, fn in (("routing", routing), ("attention", attention), ("grouped", grouped),
                     ("single", single)):
        if name in wanted:
            run_section(result, name, fn, save)
    result["smi_after"] = smi("clocks.sm,power.draw,temperature.gpu")
    result["wall_seconds"] = time.time() - began
    save()

    log("\nsummary (TFLOP/s; error: grouped against the per-expert loop)")
    for r in result.get("grouped", []):
        head = f"  {r['batch']:3d} x {r['m']:5d} {r['n']:5d} {r['k']:5d} {r['layout']:15s}"
        if "error" in r:
            log(f"{head} {r['error']}")
        else:
            log(f"{head} grouped {r['grouped_tflops']:6.1f} loop {r['loop_tflops']:6.1f} "
                f"dense {r['dense_tflops']:6.1f} err {r['grouped_error']:.1e}")
    for r in result.get("single", []):
        log(f"  single {r['m']:5d} {r['n']:5d} {r['k']:5d} {r['layout']:15s} "
            f"{r['tflops']:6.1f} TFLOP/s")
    for r in result.get("routing", []):
        log(f"  {r['kernel']:34s} {r['tokens']:5d}x{r['hidden']} {r['seconds'] * 1e6:8.1f} us "
            f"{r['gbps']:6.0f} GB/s")
    for r in result.get("attention", []):
        if "error" in r:
            log(f"  attention {r['backend']} {r['heads']}/{r['kv_heads']} d{r['head_dim']}: "
                f"{r['error']}")
        else:
            log(f"  attention {r['backend']} {r['heads']}/{r['kv_heads']} d{r['head_dim']} "
                f"s{r['queries']}: "
                f"fwd {r['forward_seconds'] * 1e6:.0f} us ({r['forward_tflops']:.0f} TFLOP/s) "
                f"bwd {r['backward_seconds'] * 1e6:.0f} us ({r['backward_tflops']:.0f})")
    log(f"wall {result['wall_seconds']:.0f} s; failed: {sorted(result.get('failed', {}))}")


if __name__ == "__main__":
    main()
