"""Recomputes what `ep_overlap`'s four windows expose from the numbers `placec report --explain`
prints for them (test/lit/report/ep-overlap-windows.place), reading the report on stdin."""
import re
import sys

# The compute's slowdown beside communication: Lee et al. 2025, "Characterizing
# Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning", arXiv:2507.03114,
# §1 (18.9 % on average).
KAPPA = 0.189
UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
TIME = r"([0-9.]+) (s|ms|us|ns)"

text = sys.stdin.read()
match = re.search(r"per micro-batch: (.*?) \(paired, " + TIME + r" exposed\)", text)
if not match:
    sys.exit("no ep_overlap windows in the report")


def seconds(value, unit):
    return float(value) * UNITS[unit]


windows = re.findall(r"(the combine gradient|the dispatch gradient|the dispatch|the combine) " +
                     TIME + r" beside (the [a-z' ]+?) " + TIME, match.group(1))
expected = [("the combine gradient", "the forward's attention side"),
            ("the dispatch", "the backward's routed experts"),
            ("the dispatch gradient", "the forward's routed experts"),
            ("the combine", "the backward's attention side")]
if [(w[0], w[3]) for w in windows] != expected:
    sys.exit("windows out of order: %s" % windows)
total = 0.0
for i, (_, a, au, _, c, cu) in enumerate(windows, 1):
    comm, compute = seconds(a, au), seconds(c, cu)
    excess = comm - compute
    floor = comm * KAPPA / (1 + KAPPA)
    total += max(excess, floor)
    print("window %d: %s" % (i, "excess" if excess > floor else "hidden"))
printed = seconds(match.group(2), match.group(3))
# The printed figures carry three significant digits.
ok = abs(total - printed) <= 0.01 * printed
print("windows: %d, exposed %s" % (len(windows), "as printed" if ok else
                                    "%.4g s against %.4g s printed" % (total, printed)))
