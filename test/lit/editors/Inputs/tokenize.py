"""Tokenizes .place text with the TextMate grammar, using Python's re in place of Oniguruma (the
patterns use nothing the two treat differently), and prints one `scope<TAB>text` per token.

At each position the pattern whose match starts first wins, ties going to the earlier pattern, as
in TextMate; `begin`/`end` rules span lines."""
import json
import re
import sys

grammar = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()


def flatten(patterns):
    for pattern in patterns:
        if "include" in pattern:
            yield from flatten(grammar["repository"][pattern["include"][1:]]["patterns"])
        else:
            yield pattern


rules = []
for pattern in flatten(grammar["patterns"]):
    if "match" in pattern:
        rules.append(("match", re.compile(pattern["match"], re.M), pattern))
    else:
        rules.append(("begin", re.compile(pattern["begin"], re.M), pattern))

position = 0
while position < len(text):
    best = None
    for kind, regex, pattern in rules:
        match = regex.search(text, position)
        if match and match.end() > match.start() and (best is None or match.start() < best[1].start()):
            best = (kind, match, pattern)
    if best is None:
        break
    kind, match, pattern = best
    if kind == "begin":
        end = re.compile(pattern["end"]).search(text, match.end())
        stop = end.end() if end else len(text)
        print(f"{pattern['name']}\t{text[match.start():stop]!r}")
        position = stop
        continue
    if "name" in pattern:
        print(f"{pattern['name']}\t{match.group(0)!r}")
    for group, capture in sorted(pattern.get("captures", {}).items(), key=lambda c: int(c[0])):
        if match.group(int(group)) is not None:
            print(f"{capture['name']}\t{match.group(int(group))!r}")
    position = match.end()
