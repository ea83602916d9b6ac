#!/usr/bin/env python3
"""Kernel microbenchmarks for the cost model's device-family constants (docs/plan.md, "Calibration").

Measures, on one NVIDIA GPU through PyTorch (cuBLAS/cuBLASLt, FlashAttention-2 and cuDNN behind
scaled_dot_product_attention), what placec's cost model times by formula:

  gemm       BF16 products C[m×n] = A[m×k]·B[k×n] in the three layouts of a linear layer's training
             step (forward X·Wᵀ, input gradient dY·W, weight gradient dYᵀ·X), and FP8 (e4m3, one
             scale per tensor, torch._scaled_mm) where the device has it
  attention  fused causal and full attention, forward and backward, per SDPA backend
  memory     a device-to-device copy and the streaming kernels of a transformer layer
  launch     the host's cost of one small eager operator
  sustained  an 8192³ BF16 product repeated for several seconds, with the SM clock and power

The shapes come from a JSON file (bench/gpu/kernel-shapes.json: the products and attention cores
of the fidelity rows that run on Hopper, as `placec report --explain` lists them; made by
bench/gpu/kernel_shapes.py) plus a fixed grid that varies one dimension at a time. Needs
only PyTorch; writes kernels.json (every measurement) and prints a summary.

  python3 bench/gpu/kernels.py --shapes bench/gpu/kernel-shapes.json --out DIR [--budget 300]
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F


def log(*args):
    print(*args, flush=True)


def time_once(fn):
    """Warms `fn` up, then times one call with CUDA events: the events and the milliseconds."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start, end, max(start.elapsed_time(end), 1e-3)


class Timer:
    """Times a callable with CUDA events: warm-up, then the median of several timed batches."""

    def __init__(self, target_ms=25.0, trials=5):
        self.target_ms = target_ms
        self.trials = trials

    def __call__(self, fn):
        start, end, once = time_once(fn)
        reps = max(1, min(1000, int(self.target_ms / self.trials / once)))
        for _ in range(min(reps, 3)):
            fn()
        times = []
        for _ in range(self.trials):
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / reps)
        times.sort()
        return times[len(times) // 2] / 1e3  # seconds


class HoldTimer:
    """Times a callable the way a training step runs it: back to back for `hold` seconds, so that
    the GPU reaches the clock its power limit allows under that load, in windows of about 20 ms;
    the median of the second half of the windows. Also reads the SM clock and the power draw
    (NVML) while the last window still runs."""

    def __init__(self, hold):
        self.hold = hold
        self.last = {}
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        except Exception:  # noqa: BLE001 - clocks are extra information
            self.nvml = None

    def read(self):
        if not self.nvml:
            return {}
        n = self.nvml
        return dict(sm_mhz=n.nvmlDeviceGetClockInfo(self.handle, n.NVML_CLOCK_SM),
                    watts=n.nvmlDeviceGetPowerUsage(self.handle) / 1e3)

    def __call__(self, fn):
        start, end, once = time_once(fn)
        reps = max(1, min(2000, int(20.0 / once)))
        windows = []
        stop = time.time() + self.hold
        while True:
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            last = time.time() >= stop
            if last:
                self.last = self.read()
            end.synchronize()
            windows.append(start.elapsed_time(end) / reps)
            if last and len(windows) >= 2:
                break
        tail = sorted(windows[len(windows) // 2:])
        return tail[len(tail) // 2] / 1e3


def run_section(result, name, fn, save):
    """Runs one section of a bench and saves the results; a failure is recorded under
    result["failed"][name] and the caller's next section still runs."""
    try:
        fn()
    except Exception:  # noqa: BLE001 - one broken section must not lose the others
        import traceback

        result.setdefault("failed", {})[name] = traceback.format_exc()
        log(f"  {name}: failed\n{traceback.format_exc()}")
    save()


def rotating(make, bytes_each, floor=256 << 20):
    """Enough copies of the inputs that consecutive calls do not find them in L2."""
    count = max(1, min(8, math.ceil(floor / max(bytes_each, 1))))
    return [make() for _ in range(count)]


def gemm_case(m, n, k, layout, fp8, dev):
    """A callable computing one product of the given layout, cycling through input copies."""
    m, n, k = int(m), int(n), int(k)
    if fp8:
        # torch._scaled_mm wants A row-major and B column-major; one scale per tensor.
        def make():
            a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
            b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()
            return a, b

        sets = rotating(make, (m * k + n * k))
        one = torch.ones((), device=dev)
        state = [0]

        def fn():
            a, b = sets[state[0] % len(sets)]
            state[0] += 1
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                    use_fast_accum=layout == "forward")

        return fn
    bf = torch.bfloat16
    if layout == "forward":  # Y[m×n] = X[m×k] · W[n×k]ᵀ
        def make():
            return torch.randn(m, k, device=dev, dtype=bf), torch.randn(n, k, device=dev, dtype=bf)

        op = lambda x, w: F.linear(x, w)
    elif layout == "input_gradient":  # dX[m×n] = dY[m×k] · W[k×n]
        def make():
            return torch.randn(m, k, device=dev, dtype=bf), torch.randn(k, n, device=dev, dtype=bf)

        op = lambda g, w: torch.mm(g, w)
    else:  # weight gradient: dW[m×n] = dY[k×m]ᵀ · X[k×n]
        def make():
            return torch.randn(k, m, device=dev, dtype=bf), torch.randn(k, n, device=dev, dtype=bf)

        op = lambda g, x: torch.mm(g.t(), x)
    sets = rotating(make, 2 * (m * k + k * n))
    state = [0]

    def fn():
        a, b = sets[state[0] % len(sets)]
        state[0] += 1
        return op(a, b)

    return fn


def grid_gemms():
    """Shapes that vary one dimension at a time around large, well-shaped products."""
    out = []
    for k in (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768):
        out.append((8192, 8192, k, "forward", "k sweep"))
    for s in (512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384):
        out.append((s, s, 8192, "forward", "square sweep"))
    for n in range(1024, 8192 + 1, 512):
        out.append((4096, n, 4096, "forward", "n sweep"))
    for n in (4224, 4352, 4480, 4608, 4736):
        out.append((4096, n, 4096, "forward", "n sweep"))
    for layout in ("forward", "input_gradient", "weight_gradient"):
        out.append((8192, 8192, 8192, layout, "layouts"))
        out.append((16384, 4096, 4096, layout, "layouts"))
    return out


def bench_gemms(shapes, dev, timer, fp8_ok, deadline):
    rows = []
    for i, (m, n, k, layout, source, batch, fp8) in enumerate(shapes):
        if time.time() > deadline:
            log(f"  gemm: budget reached after {i} of {len(shapes)} shapes")
            break
        if fp8 and not fp8_ok:
            continue
        try:
            fn = gemm_case(m, n, k, layout, fp8, dev)
            seconds = timer(fn) * batch
        except RuntimeError as error:  # An unsupported FP8 shape: recorded, not fatal.
            rows.append(dict(m=m, n=n, k=k, batch=batch, layout=layout, fp8=fp8, source=source,
                             error=str(error).splitlines()[0]))
            torch.cuda.empty_cache()
            continue
        flops = 2.0 * m * n * k * batch
        rows.append(dict(m=m, n=n, k=k, batch=batch, layout=layout, fp8=fp8, source=source,
                         seconds=seconds, tflops=flops / seconds / 1e12,
                         **getattr(timer, "last", {})))
        del fn
        torch.cuda.empty_cache()
    return rows


def attention_flops(b, h, q, kv, d, causal):
    # Two products of q×kv×d per head; a causal mask leaves about half when q = kv.
    flops = 4.0 * b * h * q * kv * d
    return flops * (0.5 if causal else 1.0)


def bench_attention(cases, dev, timer, deadline):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    rows = []
    for b, h, q, kv, d, causal, source in cases:
        for name, backend in backends.items():
            if time.time() > deadline:
                log("  attention: budget reached")
                return rows
            row = dict(backend=name, batch=b, heads=h, queries=q, keys=kv, head_dim=d,
                       causal=causal, source=source)
            try:
                qt = torch.randn(b, h, q, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
                kt = torch.randn(b, h, kv, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
                vt = torch.randn(b, h, kv, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
                with sdpa_kernel([backend]):
                    with torch.no_grad():
                        fwd = timer(lambda: F.scaled_dot_product_attention(qt, kt, vt,
                                                                           is_causal=causal))
                    out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
                    grad = torch.randn_like(out)
                    bwd = timer(lambda: torch.autograd.grad(out, (qt, kt, vt), grad,
                                                            retain_graph=True))
            except RuntimeError as error:
                row["error"] = str(error).splitlines()[0]
                rows.append(row)
                torch.cuda.empty_cache()
                continue
            flops = attention_flops(b, h, q, kv, d, causal)
            row.update(clocks=getattr(timer, "last", {}))
            row.update(forward_seconds=fwd, backward_seconds=bwd,
                       forward_tflops=flops / fwd / 1e12, backward_tflops=2.5 * flops / bwd / 1e12)
            rows.append(row)
            del qt, kt, vt, out, grad
            torch.cuda.empty_cache()
    return rows


def bench_memory(dev, timer):
    """Achieved bandwidth of streaming kernels, bytes counted as each input read once and each
    output written once."""
    rows = []
    n = 1 << 28  # 256 Mi elements: 512 MiB in BF16, far above L2.
    x = torch.randn(n, device=dev, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    z = torch.randn_like(x)

    def add(name, fn, bytes_moved):
        seconds = timer(fn)
        rows.append(dict(kernel=name, bytes=bytes_moved, seconds=seconds,
                         gbps=bytes_moved / seconds / 1e9))

    add("copy bf16", lambda: y.copy_(x), 4 * n)
    add("add bf16", lambda: torch.add(x, z, out=y), 6 * n)
    add("gelu bf16", lambda: F.gelu(x), 4 * n)
    rows_h = 8192 * 4
    h = n // rows_h
    x2 = x.view(rows_h, h)
    w = torch.ones(h, device=dev, dtype=torch.bfloat16)
    add("layer_norm forward bf16", lambda: F.layer_norm(x2, (h,), w, w), 4 * n)
    add("rms_norm forward bf16", lambda: F.rms_norm(x2, (h,), w), 4 * n)
    xg = x2.detach().clone().requires_grad_(True)
    out = F.layer_norm(xg, (h,), w, w)
    go = torch.randn_like(out)
    add("layer_norm backward bf16", lambda: torch.autograd.grad(out, xg, go, retain_graph=True),
        6 * n)
    # Adam over fp32 master weights, fused (one kernel per group of tensors): reads parameter,
    # gradient and two moments, writes parameter and two moments, 4 bytes each.
    params = [torch.randn(1 << 24, device=dev, requires_grad=True) for _ in range(16)]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.Adam(params, lr=1e-4, fused=True)
    opt.step()
    elements = sum(p.numel() for p in params)
    add("adam fused fp32", lambda: opt.step(), 28 * elements)
    return rows


def bench_launch(dev):
    """Host time per eager operator: many tiny adds, timed on the host after a synchronize."""
    a = torch.ones(16, device=dev)
    for _ in range(100):
        a.add_(1)
    torch.cuda.synchronize()
    count = 20000
    start = time.perf_counter()
    for _ in range(count):
        a.add_(1)
    torch.cuda.synchronize()
    return dict(operator="add_ on 16 elements", count=count,
                seconds_per_launch=(time.perf_counter() - start) / count)


def smi(fields):
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=" + fields, "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError) as error:
        return f"nvidia-smi failed: {error}"


def bench_sustained(dev, seconds):
    """An 8192³ BF16 product back to back for `seconds`, TFLOP/s per half second, then clocks."""
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    flops = 2.0 * 8192**3
    windows = []
    end_at = time.time() + seconds
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    clocks = []
    while time.time() < end_at:
        start.record()
        for _ in range(400):
            torch.mm(a, b)
        end.record()
        end.synchronize()
        windows.append(flops * 400 / (start.elapsed_time(end) / 1e3) / 1e12)
        clocks.append(smi("clocks.sm,power.draw,temperature.gpu"))
    return dict(tflops_per_window=windows, smi_per_window=clocks)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", help="JSON of products and attention cores to time")
    parser.add_argument("--out", required=True, help="directory for kernels.json")
    parser.add_argument("--budget", type=float, default=300,
                        help="seconds after which the remaining shapes are skipped")
    parser.add_argument("--sustained", type=float, default=20,
                        help="seconds of the sustained product (0: none)")
    parser.add_argument("--hold", type=float, default=0,
                        help="time each kernel back to back for this many seconds (the clock a "
                             "sustained load allows) instead of in short bursts; the grid is then "
                             "the k sweep only")
    parser.add_argument("--skip", default="", help="comma-separated sections to skip")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("kernels.py: no CUDA device")
    os.makedirs(args.out, exist_ok=True)
    began = time.time()
    deadline = began + args.budget
    skip = set(filter(None, args.skip.split(",")))
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    fp8_ok = props.major * 10 + props.minor >= 89
    result = dict(
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        device=props.name, sms=props.multi_processor_count,
        memory_bytes=props.total_memory, torch=torch.__version__, cuda=torch.version.cuda,
        cudnn=torch.backends.cudnn.version(),
        smi_before=smi("name,driver_version,clocks.max.sm,clocks.sm,power.limit,power.draw,"
                       "temperature.gpu"))
    log(json.dumps({k: v for k, v in result.items()}, indent=1))
    path = os.path.join(args.out, "kernels.json")

    def save():
        with open(path, "w") as f:
            json.dump(result, f, indent=1)

    spec = {"gemms": [], "attention": []}
    if args.shapes:
        with open(args.shapes) as f:
            spec = json.load(f)
    timer = HoldTimer(args.hold) if args.hold > 0 else Timer()
    result["timer"] = f"hold {args.hold} s" if args.hold > 0 else "burst"

    def section(name, fn):
        if name not in skip:
            run_section(result, name, fn, save)

    def memory():
        result["memory"] = bench_memory(dev, timer)
        result["launch"] = bench_launch(dev)
        for row in result["memory"]:
            log(f"  {row['kernel']:28s} {row['gbps']:8.0f} GB/s")
        log(f"  launch: {result['launch']['seconds_per_launch'] * 1e6:.2f} us per eager operator")

    def sustained():
        result["sustained"] = bench_sustained(dev, args.sustained)
        windows = result["sustained"]["tflops_per_window"]
        log(f"  sustained 8192^3: first {windows[0]:.0f}, last {windows[-1]:.0f} TFLOP/s over "
            f"{len(windows)} windows; {result['sustained']['smi_per_window'][-1]}")

    section("memory", memory)
    if args.sustained > 0:
        section("sustained", sustained)
    gemm_shapes = []
    for g in spec.get("gemms", []):
        gemm_shapes.append((g["m"], g["n"], g["k"], g["layout"], g.get("source", "shapes"),
                            g.get("batch", 1), g.get("fp8", False)))
    def gemm():
        # The listed shapes in BF16 first, then each FP8 one; the grid also in FP8.
        grid_fp8 = [(m, n, k, "forward", source + " fp8", 1, True)
                    for m, n, k, layout, source in grid_gemms() if layout == "forward"]
        grid = [(m, n, k, layout, source, 1, False) for m, n, k, layout, source in grid_gemms()
                if not args.hold or source == "k sweep"]
        if args.hold:
            grid_fp8 = [g for g in grid_fp8 if g[4] == "k sweep fp8"]
        result["gemm"] = bench_gemms(gemm_shapes + grid + grid_fp8, dev, timer, fp8_ok,
                                     began + args.budget * 0.6)
        log(f"  gemm: {len(result['gemm'])} measured")

    section("gemm", gemm)
    # Context parallelism attends a rank's queries to every rank's keys one ring step at a time:
    # a causal block on the diagonal and full blocks off it, each queries × queries. SDPA's
    # causal mask is aligned to the top left, so a core with more keys than queries is timed as
    # those two blocks.
    cases = []
    for a in spec.get("attention", []):
        q, kv = a["queries"], a["keys"]
        blocks = [(q, True), (q, False)] if kv != q and a["causal"] else [(kv, a["causal"])]
        for keys, causal in blocks:
            case = (a["batch"], a["heads"], q, keys, a["head_dim"], causal,
                    a.get("source", "shapes"))
            if all(c[:6] != case[:6] for c in cases):
                cases.append(case)
    for s in (1024, 2048, 4096, 8192, 16384, 32768):
        cases.append((max(1, 16384 // s), 32, s, s, 128, True, "seq sweep d128"))
    for s in (8192, 32768):
        cases.append((1, 32, s, s, 128, False, "full d128"))
    cases.append((8, 16, 1024, 1024, 64, True, "d64"))
    def attention():
        result["attention"] = bench_attention(cases, dev, timer, deadline)
        log(f"  attention: {len(result['attention'])} measured")

    section("attention", attention)
    result["smi_after"] = smi("clocks.sm,power.draw,temperature.gpu")
    result["wall_seconds"] = time.time() - began
    save()

    log("\nsummary")
    for row in result.get("gemm", []):
        if "tflops" in row and row["source"] in ("k sweep", "layouts", "k sweep fp8"):
            log(f"  {row['source']:12s} {row['layout']:15s} {row['m']:6d} {row['n']:6d} "
                f"{row['k']:6d} {row['tflops']:7.1f} TFLOP/s")
    for row in result.get("attention", []):
        if "forward_tflops" in row:
            log(f"  attn {row['backend']:5s} b{row['batch']} h{row['heads']} {row['queries']}x"
                f"{row['keys']} d{row['head_dim']} causal={row['causal']}: fwd "
                f"{row['forward_tflops']:.0f} bwd {row['backward_tflops']:.0f} TFLOP/s")
        else:
            log(f"  attn {row['backend']} {row['queries']}: {row.get('error')}")
    log(f"wall {result['wall_seconds']:.0f} s")


if __name__ == "__main__":
    main()
