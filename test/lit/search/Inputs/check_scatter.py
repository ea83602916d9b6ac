# Checks the scatter of `placec search --format=html`: the chosen plan is the fastest point and
# lies on or under the memory budget line, as do the other fastest plans; every point has a title.
#   usage: check_scatter.py SEARCH.html
import re
import sys

html = open(sys.argv[1], encoding="utf-8").read()
svg = html[html.index('<svg xmlns="http://www.w3.org/2000/svg" class="scatter"'):]
svg = svg[:svg.index("</svg>")]
points = re.findall(r'<circle class="(\w+)" cx="([\d.]+)" cy="([\d.]+)"[^>]*><title>([^<]+)</title>',
                    svg)
budget = re.search(r'<line class="capacity" x1="[\d.]+" y1="([\d.]+)"', svg)
assert points and budget, "no points or no budget line"
budget_y = float(budget.group(1))
kinds = [kind for kind, _, _, _ in points]
assert kinds.count("chosen") == 1, kinds.count("chosen")
chosen = next(p for p in points if p[0] == "chosen")
fastest_x = min(float(x) for _, x, _, _ in points)
# SVG y grows downwards: under the budget is at or below its line.
for kind, x, y, title in points:
    assert float(y) >= budget_y - 0.1, (kind, y, budget_y, title)
assert float(chosen[1]) <= fastest_x + 0.1, (chosen, fastest_x)
print(f"points: {kinds.count('candidate')} sampled, {kinds.count('top')} fastest, 1 chosen")
print("chosen:", chosen[3])
