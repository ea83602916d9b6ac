# Checks the plans of `placec search --format=json` for uneven-stages.place: 14 layers on 8
# devices, so 1 or 2 stages split evenly and 4 and 8 stages have their first and last stage one
# layer short (3 and 1 layers), with 1f1b or zero_bubble; interleaved plans either split the 14
# layers evenly (pp·v divides 14: pp = 2, v = 7) or count the embedding and the loss as layers
# (pp·v divides 16: pp = 2, v = 2, 4 or 8; pp = 4, v = 2 or 4; pp = 8, v = 2; with pp·v = 16 the
# chunks hold one layer, and the first and the last hold the embedding and the output layer alone).
#   usage: check_uneven.py SEARCH.json
import json
import sys

top = json.load(open(sys.argv[1]))["top"]
expected = {1: 0, 2: 0, 4: 3, 8: 1}
COUNTED = {(2, 2), (2, 4), (2, 8), (4, 2), (4, 4), (8, 2)}
seen = set()
counted = set()
for plan in top:
    pp, edge = plan["pp"], plan["first_last_layers"]
    if plan["embedding_loss_layers"]:
        assert edge == 0 and plan["schedule"] == "interleaved", plan
        assert (pp, plan["chunks"]) in COUNTED, plan
        assert plan["microbatches"] % pp == 0, plan
        counted.add((pp, plan["chunks"]))
        continue
    assert pp in expected and edge == expected[pp], plan
    if plan["schedule"] == "interleaved":
        assert pp * plan["chunks"] in (2, 7, 14) and 14 % (pp * plan["chunks"]) == 0, plan
    if edge:
        assert plan["schedule"] in ("1f1b", "zero_bubble") and plan["chunks"] == 1, plan
        seen.add(pp)
for pp in sorted(seen):
    print(f"pp = {pp}: first = last = {expected[pp]}")
for pp, chunks in sorted(counted):
    print(f"pp = {pp}: interleaved({chunks}), embedding and loss counted")
if len(sys.argv) > 2 and sys.argv[2] == "--interleaved":
    assert not seen and counted == COUNTED, (seen, counted)
else:
    assert seen == {4, 8}, seen
