"""Checks `placec search --dispatcher alltoall,deepep,hybridep` against the same search without it
(`python3 check_dispatcher.py without.json with.json [report.json]`), from the JSON alone:
 - without the flag every plan keeps the run's dispatcher, alltoall;
 - with it, the alltoall plans are exactly the plans of the search without it, and every deepep
   and hybridep plan has an expert axis of more than one device and an alltoall twin of the same
   layout and the same peak memory (the dispatcher moves the exchanges, not what a device holds);
 - the model routes each token to one group of 4 experts, which lies on one rank: DeepEP and
   HybridEP send a token's hidden state once to that rank where the all-to-all sends its 4 routed
   rows, so every flex plan is faster than its twin, and the best plan is a flex one;
 - given a third file, the report of the best plan as the search wrote it (`-o`), that its step
   and peak memory are the search's."""
import json
import sys

from written_plan import check_written_plan

without, with_ = (json.load(open(path)) for path in sys.argv[1:3])
assert all(c["dispatcher"] == "alltoall" for c in without["top"])


def key(c):
    return tuple(sorted((k, json.dumps(v)) for k, v in c.items()
                        if k not in ("dispatcher", "bridges", "step_seconds", "peak_bytes", "mfu",
                                     "tflops_per_device", "inter_node_bytes")))


all_to_all = [c for c in with_["top"] if c["dispatcher"] == "alltoall"]
flex = [c for c in with_["top"] if c["dispatcher"] != "alltoall"]
assert flex, "no flex plan"
assert sorted(map(key, all_to_all)) == sorted(map(key, without["top"])), "the alltoall plans differ"
twins = {key(c): c for c in all_to_all}
for c in flex:
    assert c["ep"] > 1, c
    twin = twins[key(c)]
    assert c["peak_bytes"] == twin["peak_bytes"], (c, twin)
    assert c["step_seconds"] < twin["step_seconds"], (c, twin)
print(f"flex plans: {len(flex)}, each with an alltoall twin of the same memory, each faster")
best = with_["top"][0]
print(f"best: dispatcher {best['dispatcher']}, "
      f"{without['top'][0]['step_seconds'] / best['step_seconds']:.3f} times as fast")

if len(sys.argv) > 3:
    check_written_plan(sys.argv[3], best)
