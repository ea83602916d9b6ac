"""Checks `placec search --ep-overlap false,true` against the same search without it
(`python3 check_ep_overlap.py without.json with.json`), from the two JSON results alone:
 - without the flag no plan has ep_overlap;
 - with it, every plan that has it meets Megatron-Core's conditions (an expert axis, no
   pipeline or an interleaved one, no full recomputation);
 - each such plan is timed no slower than its twin without the overlap (only exposed all-to-all
   time can fall), and holds more memory at more than one micro-batch (one layer's activations,
   and under interleaving one chunk's more) wherever the micro-batches in flight do not already
   reach all m: without a pipeline, or at m ≥ 2p (interleaving holds at most p + p/v + 1/v of a
   stage's micro-batches at its first stage, under 2p − 1 for v ≥ 2);
 - the best step with the flag is no slower than without it (its space holds the other);
 - given a third file, the report of the best plan as the search wrote it (`-o`), that its step
   and peak memory are the search's."""
import json
import sys

from written_plan import check_written_plan

without, with_ = (json.load(open(path)) for path in sys.argv[1:3])
assert not any(c["ep_overlap"] for c in without["top"])


def key(c):
    return tuple(sorted((k, json.dumps(v)) for k, v in c.items()
                        if k not in ("ep_overlap", "step_seconds", "peak_bytes", "mfu",
                                     "tflops_per_device", "inter_node_bytes")))


twins = {key(c): c for c in with_["top"] if not c["ep_overlap"]}
overlapped = [c for c in with_["top"] if c["ep_overlap"]]
assert overlapped, "no plan with ep_overlap"
paired = 0
for c in overlapped:
    assert c["ep"] > 1 and c["activations"] != "recompute", c
    assert c["pp"] == 1 or (c["schedule"] == "interleaved" and c["chunks"] > 1), c
    twin = twins.get(key(c))
    if twin is None:
        continue
    paired += 1
    assert c["step_seconds"] <= twin["step_seconds"], (c, twin)
    assert c["peak_bytes"] >= twin["peak_bytes"], (c, twin)
    if c["microbatches"] > 1 and (c["pp"] == 1 or c["microbatches"] >= 2 * c["pp"]):
        assert c["peak_bytes"] > twin["peak_bytes"], (c, twin)
assert paired > 0
assert with_["top"][0]["step_seconds"] <= without["top"][0]["step_seconds"]
print(f"ep_overlap plans: {len(overlapped)}, all under Megatron-Core's conditions")
print("each no slower than its twin, larger at m > 1 (m >= 2p pipelined)")
pipelined = [c for c in overlapped if c["pp"] > 1]
print(f"interleaved ep_overlap plans: {len(pipelined)}")
print(f"best: ep_overlap {json.dumps(with_['top'][0]['ep_overlap'])}, "
      f"{without['top'][0]['step_seconds'] / with_['top'][0]['step_seconds']:.3f} times as fast")

if len(sys.argv) > 3:
    check_written_plan(sys.argv[3], with_["top"][0])
