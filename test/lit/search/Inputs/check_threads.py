# Checks that `placec search --format=json` outputs of the same search on different thread
# counts agree in everything but `seconds`, `threads` and `pruned_by_step` (each thread leaves
# untimed the accepted candidates slower than the plans it keeps itself), and that each ran on the threads asked
# for: N itself when N is at most the CPUs this process may run on, that count when N is 0 or
# more (os.sched_getaffinity, which LLVM's hardware_concurrency also reads on Linux).
#   usage: check_threads.py A.json THREADS_A B.json THREADS_B ...
import json
import os
import sys

cpus = len(os.sched_getaffinity(0))
args = sys.argv[1:]
outputs = []
for path, asked in zip(args[0::2], args[1::2]):
    with open(path) as f:
        result = json.load(f)
    asked = int(asked)
    expected = cpus if asked == 0 else min(asked, cpus)
    assert result["threads"] == expected, (path, result["threads"], expected)
    outputs.append(result)

VARY = ("seconds", "threads", "pruned_by_step")
first = {k: v for k, v in outputs[0].items() if k not in VARY}
for other in outputs[1:]:
    rest = {k: v for k, v in other.items() if k not in VARY}
    for key in sorted(set(first) | set(rest)):
        assert first.get(key) == rest.get(key), (key, first.get(key), rest.get(key))
assert first["top"], "nothing fits: the comparison would be empty"
print(f"{len(outputs)} searches agree: space {first['space']}, accepted {first['accepted']}, "
      f"rejected by capacity {first['rejected'].get('capacity', 0)}")
print("threads: " + ", ".join(str(o["threads"]) for o in outputs))
