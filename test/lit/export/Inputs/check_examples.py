"""Exports every run of every example to every target. Each export either succeeds with output
that parses (JSON, TOML, shell words) or is refused with `[export]` diagnostics only."""
import json
import re
import shlex
import subprocess
import sys
import tomllib

placec = sys.argv[1]
problems = 0
exported = refused = 0
for path in sys.argv[2:]:
    runs = re.findall(r"^run\s+(\w+)", open(path, encoding="utf-8").read(), re.M)
    for run in runs:
        for target in ["deepspeed", "megatron", "torchtitan"]:
            result = subprocess.run([placec, "compile", path, "--run", run, f"--target={target}"],
                                    capture_output=True, text=True)
            errors = [line for line in result.stderr.splitlines() if ": error: " in line]
            if result.returncode == 0:
                exported += 1
                try:
                    if target == "deepspeed":
                        json.loads(result.stdout)
                    elif target == "torchtitan":
                        tomllib.loads(result.stdout)
                    else:
                        assert all(w.startswith("--") or not w.startswith("-")
                                   for w in shlex.split(result.stdout))
                except Exception as error:  # noqa: BLE001 - report any parse failure
                    print(f"PROBLEM {path} {run} {target}: output does not parse: {error}")
                    problems += 1
            elif errors and all(line.endswith("[export]") for line in errors):
                refused += 1
            else:
                print(f"PROBLEM {path} {run} {target}: rc {result.returncode}: {result.stderr[:500]}")
                problems += 1
print(f"exported {exported}, refused {refused}, problems {problems}")
sys.exit(1 if problems else 0)
