"""Checks `placec search --expert-tensor split,fold` against the same search without it
(`python3 check_expert_tensor.py without.json with.json [report.json]`), from the JSON alone:
 - without the flag every plan splits its experts;
 - with it, every folded plan has an expert and a tensor axis whose devices together divide the
   model's experts (64 here), and the split plans are exactly the plans of the search without it;
 - each folded plan holds no more memory than its split twin (its router and routed rows keep a
   rank's own tokens, its experts' intermediates the same bytes);
 - the best step with the flag is no slower than without it (its space holds the other);
 - given a third file, the report of the best plan as the search wrote it (`-o`), that its step
   and peak memory are the search's."""
import json
import sys

from written_plan import check_written_plan

EXPERTS = 64
without, with_ = (json.load(open(path)) for path in sys.argv[1:3])
assert all(c["expert_tensor"] == "split" for c in without["top"])


def key(c):
    return tuple(sorted((k, json.dumps(v)) for k, v in c.items()
                        if k not in ("expert_tensor", "step_seconds", "peak_bytes", "mfu",
                                     "tflops_per_device", "inter_node_bytes")))


split = [c for c in with_["top"] if c["expert_tensor"] == "split"]
folded = [c for c in with_["top"] if c["expert_tensor"] == "fold"]
assert folded, "no folded plan"
assert sorted(map(key, split)) == sorted(map(key, without["top"])), "the split plans differ"
twins = {key(c): c for c in split}
paired = 0
for c in folded:
    assert c["ep"] > 1 and c["tp"] > 1 and EXPERTS % (c["ep"] * c["tp"]) == 0, c
    twin = twins.get(key(c))
    if twin is None:
        continue
    paired += 1
    assert c["peak_bytes"] <= twin["peak_bytes"], (c, twin)
assert paired > 0
assert with_["top"][0]["step_seconds"] <= without["top"][0]["step_seconds"]
print(f"folded plans: {len(folded)}, each over ep x tp dividing the experts")
print(f"each no larger than its split twin ({paired} paired)")
print(f"best: expert_tensor {with_['top'][0]['expert_tensor']}, "
      f"{without['top'][0]['step_seconds'] / with_['top'][0]['step_seconds']:.3f} times as fast")

if len(sys.argv) > 3:
    check_written_plan(sys.argv[3], with_["top"][0])
