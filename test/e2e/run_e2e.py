#!/usr/bin/env python3
"""End-to-end test of one .place run: compile it with placec, build the generated program against
placert (the one next to placec that the generated CMakeLists.txt finds by itself, or
--placert-dir), run it under mpirun, and demand that it trains like one device (--check), that it
records the placec that generated it, and that the bytes each collective moved and the persistent
memory of each state equal what `placec report --format=json` predicts, exactly. Activation memory is not compared: the report
uses Korthikanti et al.'s per-layer formula, the CPU runtime keeps other buffers
(docs/runtime.md).

Modes:
  equivalence     the run above (the default)
  rejected        placec compile must refuse the run (exit 1, a diagnostic, no main.cpp)
  skip-reduction  with --skip-grad-reduction the --check must fail
  rank-dies       with --die-at-step/--die-rank the job must fail, in bounded time, naming it
  demo            equivalence, printing the predicted and counted bytes side by side
"""
import argparse
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


def fail(message):
    print(f"e2e: FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def run(command, timeout=300, env=None, check=True, echo=True, merge_stderr=True):
    print("e2e: $ " + " ".join(command), flush=True)
    # The report's JSON is stdout alone: its warnings (stderr) are printed apart.
    result = subprocess.run(command, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merge_stderr else None, text=True,
                            timeout=timeout, env=env)
    if result.stdout and (echo or result.returncode != 0):
        print(result.stdout, end="" if result.stdout.endswith("\n") else "\n", flush=True)
    if check and result.returncode != 0:
        fail(f"exit code {result.returncode}: {' '.join(command)}")
    return result


_session_base = None


def mpi_session_base():
    """A session directory of this test's own for mpirun. Open MPI keeps its session files under
    one directory per user and host in the system's temporary directory and removes it when its
    last job ends; two tests that run mpirun at once (ctest -j) can then remove it under each
    other ("orte_session_dir failed")."""
    global _session_base
    if _session_base is None:
        _session_base = tempfile.mkdtemp(prefix="placec-mpi-")
        atexit.register(shutil.rmtree, _session_base, True)
    return _session_base


def mpi_env():
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1",
               OMPI_MCA_orte_tmpdir_base=mpi_session_base(),
               PRTE_MCA_prte_tmpdir_base=mpi_session_base())
    # Under the sanitizer build, memory errors are still caught, but leak checking is off for the
    # MPI ranks: Open MPI's plugins keep allocations until exit and are unloaded before
    # LeakSanitizer runs, so their stacks cannot be told apart from placert's.
    env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS", ""), "detect_leaks=0"]))
    return env


def placec_version(placec):
    """The version `placec --version` prints on its first line ("placec version 0.1.0")."""
    first = run([placec, "--version"], echo=False).stdout.splitlines()[0]
    if not first.startswith("placec version "):
        fail(f"placec --version printed '{first}'")
    return first.split()[-1]


def configure(source, build, placert_dir, extra=()):
    """Configures a generated project, with -Dplacert_DIR when `placert_dir` is given; returns
    the placert directory the project says it found, which must be `placert_dir` when given."""
    flags = [f"-Dplacert_DIR={placert_dir}"] if placert_dir else []
    output = run(["cmake", "-S", source, "-B", build] + flags + list(extra)).stdout
    found = [line.split(": ", 1)[1].strip() for line in output.splitlines()
             if line.startswith("-- Found placert ")]
    if len(found) != 1:
        fail("configuring the generated project did not say which placert it found")
    if placert_dir and os.path.realpath(found[0]) != os.path.realpath(placert_dir):
        fail(f"-Dplacert_DIR={placert_dir} was not used: the project found {found[0]}")
    return found[0]


def compare(metrics, report_run):
    """Bytes per (stage, axis, collective, state, phase) and persistent bytes per state per rank."""
    expected_by_stage = {}
    for entry in report_run["communication"]:
        key = (entry["axis"], entry["collective"], entry["state"], entry["phase"])
        expected_by_stage.setdefault(entry["stage"], {})[key] = entry
    stages = {stage["stage"]: stage for stage in report_run["memory"]["stages"]}
    problems = []
    for rank in metrics["per_rank"]:
        stage = rank["stage"]
        expected = expected_by_stage.get(stage, {})
        counted = {(e["axis"], e["collective"], e["state"], e["phase"]): e
                   for e in rank["communication"]}
        for key in sorted(set(expected) | set(counted)):
            want, got = expected.get(key), counted.get(key)
            if want is None:
                problems.append(f"rank {rank['rank']} stage {stage}: {key} moved "
                                f"{got['total_bytes']} bytes that the report does not predict")
            elif got is None:
                problems.append(f"rank {rank['rank']} stage {stage}: {key} predicted "
                                f"{want['total_bytes']} bytes but the run made no such call")
            elif got["total_bytes"] != want["total_bytes"] or got["count"] != want["count"]:
                problems.append(f"rank {rank['rank']} stage {stage}: {key} moved "
                                f"{got['total_bytes']} bytes in {got['count']} calls, the report "
                                f"predicts {want['total_bytes']} in {want['count']}")
        for tier in ("device", "host"):
            for state in ("params", "grads", "optimizer"):
                want = stages[stage][tier][state]
                got = rank["memory"][tier][state]
                if got != want:
                    problems.append(f"rank {rank['rank']} stage {stage}: {tier} {state} peak "
                                    f"persistent bytes {got}, the report predicts {want}")
    return problems


def print_table(metrics, report_run):
    """Rank 0's counted bytes per step next to the report's prediction."""
    rank = metrics["per_rank"][0]
    counted = {(e["stage"], e["axis"], e["collective"], e["state"], e["phase"]): e
               for e in rank["communication"]}
    print(f"\nbytes per step on rank 0 (stage {rank['stage']}): predicted by placec report, "
          f"counted by placert")
    print(f"  {'axis':<10} {'collective':<15} {'state':<12} {'phase':<9} {'calls':>6} "
          f"{'predicted':>12} {'counted':>12}")
    for entry in report_run["communication"]:
        if entry["stage"] != rank["stage"]:
            continue
        key = (entry["stage"], entry["axis"], entry["collective"], entry["state"], entry["phase"])
        got = counted.get(key, {}).get("total_bytes", 0)
        print(f"  {entry['axis']:<10} {entry['collective']:<15} {entry['state']:<12} "
              f"{entry['phase']:<9} {entry['count']:>6} {entry['total_bytes']:>12.0f} "
              f"{got:>12.0f}")
    stage = next(s for s in report_run["memory"]["stages"] if s["stage"] == rank["stage"])
    for state in ("params", "grads", "optimizer"):
        print(f"  memory {state:<10} predicted {stage['device'][state]:>10.0f} B   counted "
              f"{rank['memory']['device'][state]:>10} B")
    print()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--placec", required=True)
    parser.add_argument("--placert-dir", default=None,
                        help="pass -Dplacert_DIR (default: let the project find placert itself)")
    parser.add_argument("--mpiexec", default="mpirun")
    parser.add_argument("--place", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--np", type=int, required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--mode", default="equivalence",
                        choices=["equivalence", "rejected", "skip-reduction", "rank-dies", "demo"])
    args = parser.parse_args()

    if os.path.isdir(args.work):
        shutil.rmtree(args.work)
    os.makedirs(args.work)
    source = os.path.join(args.work, "src")
    compiled = run([args.placec, "compile", args.place, "--run", args.run, "-o", source],
                   check=args.mode != "rejected")
    if args.mode == "rejected":
        if compiled.returncode != 1 or "error:" not in compiled.stdout:
            fail("placec compile accepted a strategy the verifier rejects")
        if os.path.exists(os.path.join(source, "main.cpp")):
            fail("placec compile wrote main.cpp for a rejected strategy")
        print("e2e: ok: the rejected strategy was not compiled")
        return

    build = os.path.join(args.work, "build")
    configure(source, build, args.placert_dir,
              ["-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_CXX_FLAGS_RELEASE=-O1"])
    run(["cmake", "--build", build])
    program = os.path.join(build, args.run)
    metrics_path = os.path.join(args.work, "metrics.json")
    # One rank runs without mpirun (MPI starts as a singleton).
    launcher = [] if args.np == 1 else [args.mpiexec, "--oversubscribe", "-np", str(args.np)]
    command = launcher + [program, "--steps", str(args.steps), "--check", "--metrics",
                          metrics_path, "--timeout", "20"]

    if args.mode == "skip-reduction":
        result = run(command + ["--skip-grad-reduction"], env=mpi_env(), check=False)
        if result.returncode == 0 or "differs from the single-device" not in result.stdout:
            fail("--check did not catch the skipped gradient reductions")
        print("e2e: ok: --check caught the broken gradient integrity")
        return
    if args.mode == "rank-dies":
        start = time.monotonic()
        result = run(command + ["--die-at-step", "1", "--die-rank", "1", "--timeout", "5"],
                     env=mpi_env(), check=False, timeout=120)
        elapsed = time.monotonic() - start
        if result.returncode == 0:
            fail("the job succeeded although a rank died")
        if "fault injection: exiting" not in result.stdout:
            fail("the output does not name the failed rank")
        if elapsed > 60:
            fail(f"the job took {elapsed:.1f}s to fail")
        print(f"e2e: ok: the job failed in {elapsed:.1f}s, naming the dead rank")
        return

    run(command, env=mpi_env())
    with open(metrics_path) as file:
        metrics = json.load(file)
    report = json.loads(run([args.placec, "report", "--format=json", args.place, "--run",
                             args.run], echo=False, merge_stderr=False).stdout)
    report_run = next(r for r in report["runs"] if r["name"] == args.run)
    if not metrics.get("check", {}).get("passed"):
        fail("the run differs from the single-device reference")
    if metrics.get("placec_version") != placec_version(args.placec):
        fail(f"the metrics name placec {metrics.get('placec_version')}, not the placec that "
             f"generated the program")
    if len(metrics["per_rank"]) != args.np:
        fail(f"metrics from {len(metrics['per_rank'])} ranks, expected {args.np}")
    if args.mode == "demo":
        print_table(metrics, report_run)
    problems = compare(metrics, report_run)
    for problem in problems:
        print("e2e: mismatch: " + problem, file=sys.stderr)
    if problems:
        fail(f"{len(problems)} differences between the run and the report")
    entries = sum(len(rank["communication"]) for rank in metrics["per_rank"])
    print(f"e2e: ok: {args.run} on {args.np} ranks equals one device (params relative error "
          f"{metrics['check']['params_relative_error']:.2e}); {entries} counted entries and "
          f"the persistent memory of every rank equal the report")


if __name__ == "__main__":
    main()
