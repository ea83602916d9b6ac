#!/usr/bin/env python3
"""The GPU benchmark of placec (bench/README.md, "GPU"). On a machine with one or more NVIDIA GPUs,
CUDA (nvcc), cuBLAS, NCCL, CMake and PyTorch, and none of placec's Debian packages:

  1. builds placert_cuda from source (cmake -S runtime/cuda: no MPI, OpenBLAS or LLVM needed),
  2. runs placert-cuda-kernel-test (every CUDA kernel against the CPU reference) and, where MPI
     and OpenBLAS let the CPU placert build, placert-cuda-gpt-test (the trainer end to end),
  3. builds each generated program (bench/gpu/generated/<run>: `placec compile --target=cuda`
     output and `placec report --format=json`, made on a CPU machine; regenerated when --placec is
     given) and runs it,
  4. runs the same GPT and batch in PyTorch (bench/gpu/torch_gpt.py), eager and torch.compile,
  5. prints and writes a table: tokens/s, MFU, ratio to PyTorch, peak memory against the report.

    python3 bench/gpu/run.py [--runs gpt350m_1gpu,gpt1300m_1gpu] [--steps 10] [--out DIR]
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SOURCES = {"gpt350m_1gpu": "gpt-350m.place", "gpt1300m_1gpu": "gpt-1.3b.place"}


def run(command, log, cwd=None, check=True, env=None, timeout=None):
    print("+ " + " ".join(command), flush=True)
    with open(log, "w") as out:
        try:
            result = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                    env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            out.write(f"\nrun.py: stopped after {timeout} s\n")
            return 124
    if check and result.returncode != 0:
        sys.stdout.write(open(log).read()[-4000:])
        raise SystemExit(f"run.py: '{' '.join(command)}' failed ({result.returncode}); see {log}")
    return result.returncode


def nccl_in_wheel():
    """nccl.h and libnccl of the nvidia-nccl wheel that PyTorch images carry, when the CUDA
    toolkit has none: (include dir, library path) or None."""
    try:
        import importlib.util
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    root = list(spec.submodule_search_locations)[0]
    include, lib = os.path.join(root, "include"), os.path.join(root, "lib")
    libraries = sorted(f for f in os.listdir(lib) if f.startswith("libnccl.so")) \
        if os.path.isdir(lib) else []
    if not os.path.exists(os.path.join(include, "nccl.h")) or not libraries:
        return None
    return include, os.path.join(lib, libraries[0])


def cmake_args():
    args = ["-DCMAKE_BUILD_TYPE=Release"]
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if os.path.exists(nvcc):
        args.append("-DCMAKE_CUDA_COMPILER=" + nvcc)
        toolkit = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
        has_nccl = any(os.path.exists(os.path.join(toolkit, d, "nccl.h"))
                       for d in ("include", "targets/x86_64-linux/include"))
        wheel = None if has_nccl or os.environ.get("NCCL_ROOT") else nccl_in_wheel()
        if wheel:
            args += ["-DPLACERT_NCCL_INCLUDE_DIR=" + wheel[0], "-DPLACERT_NCCL_LIBRARY=" + wheel[1]]
    return args


def shape_of(main_cpp):
    """The model and batch of a generated main.cpp (shape.X = N; spec.Y = N;)."""
    text = open(main_cpp).read()
    values = dict(re.findall(r"(?:shape|spec)\.(\w+) = (-?[0-9.e+]+);", text))
    return {k: float(v) if "." in v or "e" in v else int(v) for k, v in values.items()}


def sanitizer_path():
    return shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"


def profile_kernels(program, name, out_dir, skip, count):
    """Times `count` kernel launches after the first `skip` under Nsight Compute, with the card's
    clocks left as they are, and writes a table of time per kernel name."""
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    csv_path = os.path.join(out_dir, name + "-ncu.csv")
    print(f"+ ncu {program} (launches {skip} to {skip + count})", flush=True)
    with open(csv_path, "w") as out:
        try:
            subprocess.run([ncu, "--clock-control", "none", "--metrics",
                            "gpu__time_duration.sum", "--csv", "--print-units", "base",
                            "--launch-skip", str(skip), "--launch-count", str(count), program,
                            "--steps", "1", "--warmup", "1", "--quiet"], stdout=out,
                           stderr=subprocess.DEVNULL, check=False, timeout=300)
        except subprocess.TimeoutExpired:
            print(f"{name}: ncu stopped after 300 s")
            return
    import csv
    totals, counts = {}, {}
    with open(csv_path) as f:
        rows = [r for r in csv.reader(f) if len(r) > 10]
    if not rows:
        print(f"{name}: ncu wrote no table (see {csv_path})")
        return
    header = rows[0]
    k_name, k_value = header.index("Kernel Name"), header.index("Metric Value")
    for r in rows[1:]:
        try:
            ns = float(r[k_value].replace(",", ""))
        except ValueError:
            continue
        kernel = r[k_name].split("(")[0][:90]
        totals[kernel] = totals.get(kernel, 0.0) + ns
        counts[kernel] = counts.get(kernel, 0) + 1
    whole = sum(totals.values())
    lines = [f"{name}: launches {skip} to {skip + count} under ncu: {whole / 1e6:.2f} ms of "
             "kernel time", "", "| kernel | launches | ms | share |", "|---|---|---|---|"]
    for kernel, ns in sorted(totals.items(), key=lambda kv: -kv[1]):
        lines.append(f"| `{kernel}` | {counts[kernel]} | {ns / 1e6:.3f} | "
                     f"{100 * ns / whole:.1f}% |")
    text = "\n".join(lines) + "\n"
    open(os.path.join(out_dir, name + "-kernels.md"), "w").write(text)
    print("\n".join(lines[:30]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="gpt350m_1gpu,gpt1300m_1gpu")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(ROOT, "build-gpu-bench"))
    parser.add_argument("--placec", help="regenerate the programs and reports with this placec")
    parser.add_argument("--peak-tflops", type=float, default=989.0,
                        help="dense bf16 peak per GPU (H100/H200 SXM: 989 TFLOPS)")
    parser.add_argument("--skip-torch", action="store_true")
    parser.add_argument("--build-only", action="store_true",
                        help="build placert_cuda, the tests and the programs; run nothing")
    parser.add_argument("--torch-attention", default="sdpa", choices=["sdpa", "math"])
    parser.add_argument("--sanitize", action="store_true",
                        help="also run compute-sanitizer (memcheck, racecheck) on the kernel test "
                        "and the trainer test")
    parser.add_argument("--profile", metavar="SKIP:COUNT",
                        help="also time COUNT kernel launches of each program under ncu, after "
                        "the first SKIP, and write <run>-kernels.md (time per kernel name, "
                        "largest first); ncu replays each launch, so keep COUNT to a few hundred")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    logs = os.path.join(args.out, "logs")
    os.makedirs(logs, exist_ok=True)

    # 1. placert_cuda from source.
    build = os.path.join(args.out, "placert_cuda")
    run(["cmake", "-S", os.path.join(ROOT, "runtime", "cuda"), "-B", build] + cmake_args(),
        os.path.join(logs, "configure.log"))
    run(["cmake", "--build", build, "-j", str(os.cpu_count() or 4)],
        os.path.join(logs, "build.log"))

    # 2. The kernels against the CPU reference.
    kernel_log = os.path.join(logs, "kernel-test.log")
    if args.build_only:
        kernel_rc, kernel_summary = 0, ["not run (--build-only)"]
    else:
        kernel_rc = run([os.path.join(build, "placert-cuda-kernel-test")], kernel_log, check=False)
        kernel_summary = open(kernel_log).read().strip().splitlines()[-1:] or ["(no output)"]
    print("kernel test:", kernel_summary[0], f"(exit {kernel_rc})")

    # 2b. The trainer end to end against the CPU reference: needs the CPU placert (MPI and
    # OpenBLAS), so only where they are installed.
    full = os.path.join(args.out, "placert_full")
    gpt_summary = "skipped (the CPU placert does not configure here: no MPI or OpenBLAS?)"
    if run(["cmake", "-S", os.path.join(ROOT, "runtime"), "-B", full] + cmake_args(),
           os.path.join(logs, "configure-full.log"), check=False) == 0:
        built = run(["cmake", "--build", full, "-j", str(os.cpu_count() or 4), "--target",
                     "placert-cuda-gpt-test"], os.path.join(logs, "build-full.log"), check=False)
        gpt_log = os.path.join(logs, "gpt-test.log")
        if built != 0:
            gpt_summary = "skipped (the CPU placert did not build; see logs/build-full.log)"
        elif args.build_only:
            gpt_summary = "built, not run (--build-only)"
        else:
            gpt_rc = run([os.path.join(full, "cuda", "placert-cuda-gpt-test")], gpt_log,
                         check=False)
            gpt_summary = (open(gpt_log).read().strip().splitlines() or ["(no output)"])[-1]
            gpt_summary += f" (exit {gpt_rc})"
    print("trainer against the CPU reference:", gpt_summary)

    # 2c. compute-sanitizer on both tests.
    sanitizer_summary = []
    if args.sanitize and not args.build_only:
        tools = [("kernel", [os.path.join(build, "placert-cuda-kernel-test"), "--quick"]),
                 ("trainer", [os.path.join(full, "cuda", "placert-cuda-gpt-test")])]
        for tool in ["memcheck", "racecheck"]:
            for what, binary in tools:
                if not os.path.exists(binary[0]):
                    continue
                log = os.path.join(logs, f"sanitizer-{tool}-{what}.log")
                # NCCL's initialization probes for kernel images of other architectures and
                # handles the errors it gets; memcheck would count those API errors as its own.
                quiet_api = ["--report-api-errors", "no"] if what == "trainer" else []
                rc = run([sanitizer_path(), "--tool", tool, "--error-exitcode", "3"] + quiet_api
                         + binary, log, check=False, timeout=240)
                tail = [line for line in open(log).read().splitlines()
                        if line.startswith("========= ")][-1:]
                sanitizer_summary.append(f"{tool} on the {what} test: exit {rc}"
                                         + (f" ({tail[0][10:]})" if tail else ""))
                print(sanitizer_summary[-1])

    rows = []
    for name in [r for r in args.runs.split(",") if r]:
        # 3. The generated program.
        project = os.path.join(args.out, "gen", name)
        shutil.rmtree(project, ignore_errors=True)
        if args.placec:
            source = os.path.join(HERE, SOURCES[name])
            run([args.placec, "compile", source, "--run", name, "-o", project, "--target=cuda"],
                os.path.join(logs, name + "-compile.log"))
            with open(os.path.join(project, "report.json"), "w") as out:
                subprocess.run([args.placec, "report", source, "--run", name, "--format=json"],
                               stdout=out, check=True)
        else:
            shutil.copytree(os.path.join(HERE, "generated", name), project)
        run(["cmake", "-S", project, "-B", os.path.join(project, "build"),
             "-Dplacert_cuda_DIR=" + build] + cmake_args(),
            os.path.join(logs, name + "-configure.log"))
        run(["cmake", "--build", os.path.join(project, "build")],
            os.path.join(logs, name + "-build.log"))
        if args.build_only:
            print(f"{name}: built {os.path.join(project, 'build', name)}")
            continue
        metrics = os.path.join(args.out, name + "-placert.json")
        run([os.path.join(project, "build", name), "--steps", str(args.steps), "--warmup",
             str(args.warmup), "--metrics", metrics, "--peak-tflops", str(args.peak_tflops)],
            os.path.join(logs, name + "-run.log"))
        placert = json.load(open(metrics))
        if args.profile:
            skip, count = (int(x) for x in args.profile.split(":"))
            profile_kernels(os.path.join(project, "build", name), name, args.out, skip, count)
        report = json.load(open(os.path.join(project, "report.json")))["runs"][0]
        row = {"run": name, "placert": placert,
               "predicted_peak_bytes": report["memory"]["device"]["peak"],
               "predicted_tokens_per_second": report["time"].get("tokens_per_s")}

        # 4. PyTorch on the same model and batch.
        shape = shape_of(os.path.join(project, "main.cpp"))
        if not args.skip_torch:
            for mode in ["eager", "compile"]:
                out = os.path.join(args.out, f"{name}-torch-{mode}.json")
                command = [sys.executable, os.path.join(HERE, "torch_gpt.py"),
                           "--layers", str(shape["layers"]), "--hidden", str(shape["hidden"]),
                           "--heads", str(shape["heads"]), "--seq", str(shape["seq"]),
                           "--vocab", str(shape["vocab"]), "--ffn", str(shape["ffn"]),
                           "--micro-batch", str(shape["microBatch"]),
                           "--global-batch", str(shape["globalBatch"]),
                           "--steps", str(args.steps), "--warmup", str(args.warmup),
                           "--attention", args.torch_attention,
                           "--peak-tflops", str(args.peak_tflops), "--json", out]
                if mode == "compile":
                    command.append("--compile")
                rc = run(command, os.path.join(logs, f"{name}-torch-{mode}.log"), check=False,
                         timeout=300)
                row["torch_" + mode] = json.load(open(out)) if rc == 0 else {"error": rc}
        rows.append(row)

    if args.build_only:
        return 0

    # 5. The table.
    gib = float(1 << 30)
    lines = ["| run | placert tokens/s | MFU | vs torch eager | vs torch.compile | peak GiB "
             "(placert) | peak GiB (report) | peak GiB (torch eager) |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        p = row["placert"]
        eager, compiled = row.get("torch_eager", {}), row.get("torch_compile", {})

        def ratio(other):
            tps = other.get("tokens_per_second")
            return f"{p['tokens_per_second'] / tps:.2f}×" if tps else "-"

        lines.append(
            f"| {row['run']} | {p['tokens_per_second']:.0f} | {100 * p['mfu']:.1f}% | "
            f"{ratio(eager)} | {ratio(compiled)} | {p['peak_device_bytes'] / gib:.2f} | "
            f"{row['predicted_peak_bytes'] / gib:.2f} | "
            + (f"{eager['peak_device_bytes'] / gib:.2f}" if "peak_device_bytes" in eager else "-")
            + " |")
    table = "\n".join(lines)
    print("\nkernel test: " + kernel_summary[0])
    print("trainer against the CPU reference: " + gpt_summary)
    for line in sanitizer_summary:
        print(line)
    print(table)
    with open(os.path.join(args.out, "results.md"), "w") as out:
        out.write("kernel test: " + kernel_summary[0] + "\n\ntrainer against the CPU reference: "
                  + gpt_summary + "\n\n" + table + "\n")
    with open(os.path.join(args.out, "results.json"), "w") as out:
        json.dump({"kernel_test": {"exit": kernel_rc, "summary": kernel_summary[0]},
                   "gpt_test": gpt_summary,
                   "runs": rows}, out, indent=2)
    print("written: " + os.path.join(args.out, "results.md") + ", results.json")
    return 0 if kernel_rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
