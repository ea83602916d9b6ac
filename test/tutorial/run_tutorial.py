#!/usr/bin/env python3
# Runs docs/tutorial.md as written, in an empty folder: writes each file the tutorial shows after
# a `<!-- file: NAME -->` comment, runs each ```sh block with bash (-e -o pipefail) in order, and
# checks that every line of a ```text block after `<!-- output -->` appears in the output of the
# command block before it (spaces collapsed; `...` matches anything within a line). Blocks after
# `<!-- skip -->` (building placec, setting PATH) are not run: this build's placec is put on PATH
# and PLACEC_BUILD names its build folder instead. Fails on the first command that fails or the
# first stated output line that is missing.
import argparse
import os
import re
import shutil
import subprocess
import sys

FENCE = re.compile(r"^```(\w*)\s*$")
DIRECTIVE = re.compile(r"^<!--\s*(file:\s*(\S+)|skip|output)\s*-->\s*$")


def parse(text):
    """Yields (kind, argument, body, line) for files, commands and expected outputs."""
    lines = text.splitlines()
    pending = None  # the directive of the next fenced block
    i = 0
    while i < len(lines):
        directive = DIRECTIVE.match(lines[i])
        if directive:
            pending = directive.group(1)
            i += 1
            continue
        fence = FENCE.match(lines[i])
        if not fence:
            if lines[i].strip():
                pending = None
            i += 1
            continue
        start = i + 1
        end = start
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        if end == len(lines):
            sys.exit(f"tutorial: line {i + 1}: unterminated code block")
        body = "\n".join(lines[start:end]) + "\n"
        language = fence.group(1)
        if pending and pending.startswith("file:"):
            yield ("file", pending.split(":", 1)[1].strip(), body, i + 1)
        elif pending == "output":
            yield ("output", None, body, i + 1)
        elif pending == "skip":
            pass
        elif language == "sh":
            yield ("command", None, body, i + 1)
        pending = None
        i = end + 1


def normalize(line):
    return " ".join(line.split())


def line_matches(expected, actual):
    parts = [normalize(part) for part in expected.split("...")]
    position = 0
    for part in parts:
        found = actual.find(part, position)
        if found < 0:
            return False
        position = found + len(part)
    return True


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tutorial", required=True)
    parser.add_argument("--placec", required=True)
    parser.add_argument("--placert-dir", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--timeout", type=int, default=240, help="seconds per command block")
    args = parser.parse_args()

    with open(args.tutorial, encoding="utf-8") as f:
        steps = list(parse(f.read()))
    counts = {kind: sum(1 for step in steps if step[0] == kind) for kind in
              ("file", "command", "output")}
    # A tutorial that lost its markers would pass vacuously.
    if counts["command"] < 5 or counts["file"] < 2 or counts["output"] < 3:
        sys.exit(f"tutorial: too few steps found: {counts}")

    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    work = os.path.abspath(args.work)
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(os.path.abspath(args.placec)) + os.pathsep + env["PATH"]
    env["PLACEC_BUILD"] = os.path.dirname(os.path.abspath(args.placert_dir))
    env["PLACEC_SOURCE"] = os.path.abspath(args.source_dir)
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    # Open MPI's session files under the work directory rather than its per-user directory in
    # /tmp, which another test's mpirun (ctest -j) may create or remove at the same moment.
    session = os.path.join(work, "mpi-session")
    os.makedirs(session)
    env.setdefault("OMPI_MCA_orte_tmpdir_base", session)
    env.setdefault("PRTE_MCA_prte_tmpdir_base", session)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    # As in test/e2e/run_e2e.py: under the sanitizer build, Open MPI's plugins keep allocations that
    # LeakSanitizer cannot tell from placert's, so leak checking is off (memory errors still fail).
    env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS", ""), "detect_leaks=0"]))

    last_output = None
    for kind, argument, body, line in steps:
        if kind == "file":
            path = os.path.join(work, argument)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(body)
            print(f"tutorial.md:{line}: wrote {argument}")
        elif kind == "command":
            print(f"tutorial.md:{line}: $ " + body.strip().replace("\n", "\n    $ "))
            try:
                result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", body], cwd=work,
                                        env=env, capture_output=True, text=True,
                                        timeout=args.timeout)
            except subprocess.TimeoutExpired:
                print(f"FAIL: tutorial.md:{line}: the commands took over {args.timeout} s")
                return 1
            last_output = result.stdout + result.stderr
            if result.returncode != 0:
                print(last_output)
                print(f"FAIL: tutorial.md:{line}: exit code {result.returncode}")
                return 1
        elif kind == "output":
            if last_output is None:
                print(f"FAIL: tutorial.md:{line}: expected output before any command")
                return 1
            actual = [normalize(text) for text in last_output.splitlines()]
            for expected in body.splitlines():
                if not expected.strip():
                    continue
                if not any(line_matches(expected, text) for text in actual):
                    print(last_output)
                    print(f"FAIL: tutorial.md:{line}: this line is not in the output above:\n"
                          f"  {expected}")
                    return 1
            print(f"tutorial.md:{line}: output as stated")
    print(f"PASS: {counts['file']} files, {counts['command']} command blocks, "
          f"{counts['output']} outputs checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
