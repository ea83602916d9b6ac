# Checks an HTML report (docs/report-html.md) against the JSON report of the same file: the page is
# well formed and loads nothing from outside; each bar chart has one bar per run, one segment per
# nonzero figure, with heights proportional to the JSON's numbers (the same scale for every
# segment of a chart) and a <title> naming the run.
#   usage: check_html.py REPORT.html REPORT.json
import json
import re
import sys
from html.parser import HTMLParser

VOID = {"meta", "br", "hr", "img", "input", "link", "rect", "line", "circle", "path", "stop"}


class Page(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack = []
        self.charts = {}  # id -> {run: [(class, height, title)]}
        self.chart = None
        self.bar = None
        self.segment = None
        self.title_text = None
        self.errors = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("script", "link", "img", "iframe", "object", "embed"):
            self.errors.append(f"<{tag}> loads or runs something")
        for name, value in attrs:
            if name in ("src", "href") or (value and re.search(r"url\((?!#)", value)):
                self.errors.append(f"external reference {name}={value}")
        if tag == "svg" and "bar-chart" in a.get("class", ""):
            self.chart = self.charts.setdefault(a["id"], {})
        elif tag == "g" and a.get("class") == "bar" and self.chart is not None:
            self.bar = self.chart.setdefault(a["data-run"], [])
        elif tag == "rect" and a.get("class", "").startswith("segment") and self.bar is not None:
            self.segment = [a["class"].split()[1], float(a["height"]), None]
            self.bar.append(self.segment)
        elif tag == "title":
            self.title_text = ""
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag):
        if tag in VOID:
            if tag == "rect":
                self.segment = None
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
            return
        self.stack.pop()
        if tag == "title" and self.segment is not None and self.segment[2] is None:
            self.segment[2] = self.title_text
        if tag == "title":
            self.title_text = None
        elif tag == "g" and self.bar is not None:
            self.bar = None
        elif tag == "svg":
            self.chart = None

    def handle_data(self, data):
        if self.title_text is not None:
            self.title_text += data


page = Page()
with open(sys.argv[1], encoding="utf-8") as f:
    html = f.read()
assert html.startswith("<!DOCTYPE html>"), html[:40]
page.feed(html)
page.close()
assert not page.errors, page.errors[:5]
assert page.stack == [], page.stack
with open(sys.argv[2], encoding="utf-8") as f:
    report = json.load(f)
runs = [run["name"] for run in report["runs"]]


def check(chart_id, expected):
    """expected: run -> {segment class: value}; zero values draw no segment."""
    bars = page.charts[chart_id]
    assert list(bars) == runs, (chart_id, list(bars), runs)
    ratios = []
    for run in runs:
        want = {k: v for k, v in expected[run].items() if v > 0}
        got = {cls: height for cls, height, _ in bars[run]}
        assert set(got) == set(want), (chart_id, run, sorted(got), sorted(want))
        for cls, height, title in bars[run]:
            assert title and title.startswith(run + ": "), (chart_id, run, title)
            ratios.append((height, want[cls], run, cls))
    # Heights are printed to 0.1 px: each must be its value times one scale, within rounding.
    scale = max(ratios, key=lambda r: r[0])[0] / max(ratios, key=lambda r: r[0])[1]
    for height, value, run, cls in ratios:
        assert abs(height - value * scale) <= 0.11, (chart_id, run, cls, height, value * scale)
    return len(ratios)


def memory(key, per_node):
    out = {}
    for run in report["runs"]:
        m = run["memory"][key]
        factor = run["cluster"]["devices_per_node"] if per_node else 1
        out[run["name"]] = {name: (m[field] or 0) * factor for name, field in
                            (("params", "params"), ("grads", "grads"), ("optimizer", "optimizer"),
                             ("activations", "activations"), ("transient", "transient"))}
    return out


segments = check("device-memory", memory("device", False))
print(f"device-memory: {len(runs)} bars, {segments} segments")
if "host-memory" in page.charts:
    segments = check("host-memory", memory("host", True))
    print(f"host-memory: {len(runs)} bars, {segments} segments")
time = {run["name"]: {"compute": run["time"]["compute_s"] or 0,
                      "exposed-comm": run["time"]["exposed_comm_s"],
                      "bubble": run["time"]["bubble_s"]} for run in report["runs"]}
segments = check("time", time)
print(f"time: {len(runs)} bars, {segments} segments")

# Communication: each bar's segments add up to the time of the stage that sends the most, over
# groups of more than one device (point-to-point sends and host transfers always count).
COLLECTIVES = {"all-reduce", "all-gather", "reduce-scatter", "broadcast", "all-to-all"}
bars = page.charts["communication"]
assert list(bars) == runs, list(bars)
pairs = []
for run in report["runs"]:
    sent, seconds = {}, {}
    for entry in run["communication"]:
        if entry["collective"] in COLLECTIVES and entry["group_size"] == 1:
            continue
        sent[entry["stage"]] = sent.get(entry["stage"], 0) + entry["sent_bytes"]
        seconds[entry["stage"]] = seconds.get(entry["stage"], 0) + entry["time_s"]
    total = seconds[max(sorted(sent), key=lambda s: sent[s])] if sent else 0
    segments = bars[run["name"]]
    pairs.append((sum(h for _, h, _ in segments), total, run["name"], len(segments)))
tallest = max(pairs, key=lambda p: p[1])
for height, total, name, count in pairs:
    expected = total * tallest[0] / tallest[1] if tallest[1] > 0 else 0
    assert abs(height - expected) <= 0.11 * max(1, count), (name, height, expected)
print(f"communication: {len(runs)} bars")
print("ok")
