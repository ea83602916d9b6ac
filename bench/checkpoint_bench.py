#!/usr/bin/env python3
"""Save and load throughput of placert checkpoints (docs/checkpoints.md).

Compiles an mlp run under two placements (zero3 on 4 ranks, and tp 2 x dp 2), trains one step
and saves, then resumes: under the same placement, and resharded into the other. Prints the
checkpoint's bytes and the median save and load times and throughputs the programs report
("saved checkpoint ... (X ms)", "resumed from ... (X ms)": the collective save or load, from the
first rank's point of view, fsyncs included).

  python3 bench/checkpoint_bench.py --placec build/tools/placec --placert-dir build/runtime \
      [--width 1024] [--layers 8] [--repeat 3] [--work /tmp/placec-ckpt-bench]
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess

PLACE = """model bench : mlp {{ layers = {layers}; width = {width}; input = {width}; output = {width}; }}
cluster cpu4 {{
  nodes = 1; devices_per_node = 4; device_memory = 64 GiB; peak = 1 TFLOPS;
  intra_bandwidth = 10 GB/s; inter_bandwidth = 1 GB/s; host_bandwidth = 10 GB/s;
}}
strategy tp_dp = dp(dp = 2) * tp(2);
run bench_zero3 {{
  model = bench; cluster = cpu4; strategy = zero3(dp = 4); micro_batch = 1; global_batch = 4;
  precision = fp32; optimizer = adam;
}}
run bench_tp_dp {{
  model = bench; cluster = cpu4; strategy = tp_dp; micro_batch = 2; global_batch = 4;
  precision = fp32; optimizer = adam;
}}
"""


def sh(command, env=None):
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)
    if result.returncode != 0:
        raise SystemExit(f"failed: {' '.join(command)}\n{result.stdout}")
    return result.stdout


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--placec", required=True)
    parser.add_argument("--placert-dir", required=True)
    parser.add_argument("--mpiexec", default="mpirun")
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work", default="/tmp/placec-ckpt-bench")
    args = parser.parse_args()

    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    place = os.path.join(args.work, "bench.place")
    with open(place, "w") as file:
        file.write(PLACE.format(layers=args.layers, width=args.width))
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OPENBLAS_NUM_THREADS="1")
    programs = {}
    for run in ("bench_zero3", "bench_tp_dp"):
        source, build = os.path.join(args.work, run), os.path.join(args.work, run, "build")
        sh([args.placec, "compile", place, "--run", run, "-o", source])
        sh(["cmake", "-S", source, "-B", build, f"-Dplacert_DIR={args.placert_dir}",
            "-DCMAKE_BUILD_TYPE=Release"])
        sh(["cmake", "--build", build])
        programs[run] = [args.mpiexec, "--oversubscribe", "-np", "4", os.path.join(build, run),
                         "--timeout", "600"]

    def milliseconds(pattern, text):
        return float(re.search(pattern + r".*\(([0-9.]+) ms\)", text).group(1))

    saves, loads = {}, {}
    size = 0
    for _ in range(args.repeat):
        for run in programs:
            directory = os.path.join(args.work, "ckpt-" + run)
            shutil.rmtree(directory, ignore_errors=True)
            out = sh(programs[run] + ["--steps", "1", "--save", directory], env)
            saves.setdefault(run, []).append(milliseconds("saved checkpoint", out))
            step = os.path.join(directory, "step-00000001")
            size = sum(os.path.getsize(os.path.join(step, f)) for f in os.listdir(step)
                       if f.startswith("rank-"))
            for target in programs:
                out = sh(programs[target] + ["--steps", "2", "--resume", directory], env)
                loads.setdefault((run, target), []).append(milliseconds("resumed from", out))
    # Peak resident memory per rank (the largest of the 4), a fresh run against a resumed one:
    # the difference is what loading holds beyond the trainer's own state.
    rss = {}
    for run in programs:
        directory = os.path.join(args.work, "ckpt-" + run)
        for label, extra in (("fresh", []), ("resumed", ["--resume", directory])):
            command = programs[run][:4] + ["/usr/bin/time", "-f", "maxrss %M"] + \
                programs[run][4:] + ["--steps", "2"] + extra
            out = sh(command, env)
            rss[(run, label)] = max(int(k) for k in re.findall(r"maxrss (\d+)", out)) / 1024
    mib = size / 2**20
    print(f"checkpoint: mlp width {args.width}, {args.layers} layers, fp32 params + Adam m and v: "
          f"{mib:.1f} MiB in shard files; median of {args.repeat}")
    print(f"{'operation':<40} {'ms':>9} {'MiB/s':>9}")
    for run, times in saves.items():
        t = statistics.median(times)
        print(f"{'save ' + run + ' (4 ranks)':<40} {t:>9.1f} {mib / (t / 1e3):>9.0f}")
    for (run, target), times in loads.items():
        t = statistics.median(times)
        label = f"load {run} -> {target}"
        print(f"{label:<40} {t:>9.1f} {mib / (t / 1e3):>9.0f}")
    for run in programs:
        print(f"peak RSS per rank, {run}: fresh {rss[(run, 'fresh')]:.1f} MiB, resumed "
              f"{rss[(run, 'resumed')]:.1f} MiB")


if __name__ == "__main__":
    main()
