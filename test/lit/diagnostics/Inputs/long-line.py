"""Helpers for long-line.test.

  long-line.py generate OUT      writes a valid program whose only line is over 1 MB long, with
                                 one error (the unknown field `layers`) near its end
  long-line.py check TOKEN       reads placec's diagnostics on stdin and checks that every source
                                 line shown is short (a window, not the whole line) and that the
                                 caret under it points at TOKEN
"""
import sys


def generate(path):
    parts = []
    size = 0
    index = 0
    while size < (1 << 20):
        decl = "model m%d { params = 1B; } " % index
        parts.append(decl)
        size += len(decl)
        index += 1
    parts.append("model bad { params = 1B; layers = 3; }")
    with open(path, "w") as out:
        out.write("".join(parts) + "\n")


def check(token):
    lines = sys.stdin.read().split("\n")
    checked = 0
    for i, line in enumerate(lines):
        if len(line) > 400:
            sys.exit("line %d of the output is %d characters long" % (i + 1, len(line)))
        if line.strip() == "^" and i > 0:
            caret = line.index("^")
            shown = lines[i - 1]
            if not shown.startswith(token, caret):
                sys.exit("the caret points at %r, not at %r" % (shown[caret:caret + 20], token))
            checked += 1
    if checked == 0:
        sys.exit("no caret line in the output")


if __name__ == "__main__":
    if sys.argv[1] == "generate":
        generate(sys.argv[2])
    else:
        check(sys.argv[2])
