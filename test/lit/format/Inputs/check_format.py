"""For each .place file given: `placec format` succeeds, changes only whitespace (so every comment
and token is kept, in order), and is idempotent: formatting the output again gives it back."""
import re
import subprocess
import sys

placec = sys.argv[1]
failures = 0
for path in sys.argv[2:]:
    source = open(path, encoding="utf-8").read()
    first = subprocess.run([placec, "format", path], capture_output=True, text=True)
    if first.returncode != 0:
        print(f"FAIL {path}: placec format failed: {first.stderr}")
        failures += 1
        continue
    second = subprocess.run([placec, "format", "-"], input=first.stdout, capture_output=True,
                            text=True)
    if second.stdout != first.stdout:
        print(f"FAIL {path}: not idempotent")
        failures += 1
    if re.sub(r"\s+", "", source) != re.sub(r"\s+", "", first.stdout):
        print(f"FAIL {path}: more than whitespace changed")
        failures += 1
    comments = re.findall(r"//[^\n]*|/\*.*?\*/", source, re.S)
    if [c.rstrip() for c in comments] != re.findall(r"//[^\n]*|/\*.*?\*/", first.stdout, re.S):
        print(f"FAIL {path}: comments changed")
        failures += 1
print(f"{len(sys.argv) - 2} files, {failures} failures")
sys.exit(1 if failures else 0)
