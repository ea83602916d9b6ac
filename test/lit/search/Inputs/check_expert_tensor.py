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

from written_plan import check_folds, check_written_plan

EXPERTS = 64
without, with_ = (json.load(open(path)) for path in sys.argv[1:3])


def valid(c):
    assert c["ep"] > 1 and c["tp"] > 1 and EXPERTS % (c["ep"] * c["tp"]) == 0, c


folded, paired = check_folds(without, with_, "expert_tensor", valid)
print(f"folded plans: {len(folded)}, each over ep x tp dividing the experts")
print(f"each no larger than its split twin ({paired} paired)")
print(f"best: expert_tensor {with_['top'][0]['expert_tensor']}, "
      f"{without['top'][0]['step_seconds'] / with_['top'][0]['step_seconds']:.3f} times as fast")

if len(sys.argv) > 3:
    check_written_plan(sys.argv[3], with_["top"][0])
