"""What the report checks of this directory share: each check prints its message, or FAIL: and the
message, and `finish()` exits 1 after any failure (so a failing check fails its test whatever
FileCheck matches); `figures` lists a run's explained figures by name; `close` compares two
computed values."""
import sys

failures = []


def check(ok, message):
    """Prints the message, or FAIL: and the message, and remembers a failure for finish()."""
    print(message if ok else "FAIL: " + message)
    if not ok:
        failures.append(message)


def finish():
    sys.exit(1 if failures else 0)


def close(a, b):
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b))


def figures(node, out=None):
    """Every explained figure of a run, by name, in the order the explanation lists them."""
    if out is None:
        out = {}
    if isinstance(node, dict):
        if "figure" in node and "value" in node:
            out.setdefault(node["figure"], []).append(node["value"])
        for value in node.values():
            figures(value, out)
    elif isinstance(node, list):
        for value in node:
            figures(value, out)
    return out
