# Checks the plans of `placec search --format=json` for uneven-stages.place: 14 layers on 8
# devices, so 1 or 2 stages split evenly and 4 and 8 stages have their first and last stage one
# layer short (3 and 1 layers), with 1f1b or zero_bubble.
#   usage: check_uneven.py SEARCH.json
import json
import sys

top = json.load(open(sys.argv[1]))["top"]
expected = {1: 0, 2: 0, 4: 3, 8: 1}
seen = set()
for plan in top:
    pp, edge = plan["pp"], plan["first_last_layers"]
    assert pp in expected and edge == expected[pp], plan
    if edge:
        assert plan["schedule"] in ("1f1b", "zero_bubble") and plan["chunks"] == 1, plan
        seen.add(pp)
for pp in sorted(seen):
    print(f"pp = {pp}: first = last = {expected[pp]}")
assert seen == {4, 8}, seen
