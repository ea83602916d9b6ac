"""Checks `placec search --expert-context split,fold` against the same search without it
(`python3 check_expert_context.py without.json with.json both.json [report.json]`), from the JSON
alone:
 - without the flag every plan keeps `expert_context = split`;
 - with it, every folded plan has an expert and a context axis whose devices (times the tensor
   axis where `expert_tensor = fold` too) divide the model's experts (64 here), and the split plans
   are exactly the plans of the search without it;
 - each folded plan holds no more memory than its split twin (each device keeps ep·cp's share of
   the experts' states, the same tokens);
 - the best step with the flag is no slower than without it (its space holds the other);
 - with `--expert-tensor split,fold` too (both.json), some plan folds both axes, and every plan
   still divides the experts among its group;
 - given a fourth file, the report of the best plan as the search wrote it (`-o`), that its step
   and peak memory are the search's."""
import json
import sys

from written_plan import check_folds, check_written_plan

EXPERTS = 64
without, with_, both = (json.load(open(path)) for path in sys.argv[1:4])


def group(c):
    return (c["ep"] * (c["cp"] if c["expert_context"] == "fold" else 1) *
            (c["tp"] if c["expert_tensor"] == "fold" else 1))


def valid(c):
    assert c["ep"] > 1 and c["cp"] > 1 and EXPERTS % group(c) == 0, c


folded, paired = check_folds(without, with_, "expert_context", valid)
print(f"folded plans: {len(folded)}, each over ep x cp dividing the experts")
print(f"each no larger than its split twin ({paired} paired)")
print(f"best: expert_context {with_['top'][0]['expert_context']}, "
      f"{without['top'][0]['step_seconds'] / with_['top'][0]['step_seconds']:.3f} times as fast")

double = [c for c in both["top"]
          if c["expert_context"] == "fold" and c["expert_tensor"] == "fold"]
assert double, "no plan folds both axes"
assert all(EXPERTS % group(c) == 0 for c in both["top"] if c["ep"] > 1)
assert both["top"][0]["step_seconds"] <= with_["top"][0]["step_seconds"]
print(f"both folds: {len(double)} plans, best expert_context {both['top'][0]['expert_context']}, "
      f"expert_tensor {both['top'][0]['expert_tensor']}")

if len(sys.argv) > 4:
    check_written_plan(sys.argv[4], with_["top"][0])
