#!/usr/bin/env python3
# Browser test of the HTML report (docs/report-html.md): renders `placec report --format=html` and
# `placec search --format=html` in headless Chromium (Debian package `chromium`, installed by
# scripts/setup.sh), and checks that the page logs no console error, that the browser's DOM holds
# the charts' elements (svg, rect, circle, title: as many as placec wrote, as SVG elements with a
# size on screen), and that a screenshot comes out at the asked size. A page without its charts
# must fail the same check (the test's own negative control). Exits 77 (skipped) when Chromium is
# not installed.
import argparse
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
from html.parser import HTMLParser

SKIP = 77

# Appended to a copy of the page: checks the DOM as the browser built it and leaves a marker that
# --dump-dom prints. Any problem is also logged with console.error.
CHECK_SCRIPT = """<script>
(function () {
  var problems = [];
  var svgs = document.querySelectorAll("svg");
  if (svgs.length === 0) problems.push("no svg");
  svgs.forEach(function (svg) {
    if (!(svg instanceof SVGSVGElement)) problems.push("svg not parsed as SVG");
    var box = svg.getBoundingClientRect();
    if (box.width < 200 || box.height < 200)
      problems.push("svg " + svg.id + " is " + box.width + "x" + box.height);
  });
  var shapes = document.querySelectorAll("svg rect.segment, svg circle");
  shapes.forEach(function (shape) {
    var box = shape.getBBox();
    if (!(box.width > 0 && box.height > 0)) problems.push("empty " + shape.getAttribute("class"));
  });
  if (shapes.length === 0) problems.push("no bars or points");
  var marker = document.createElement("p");
  marker.id = "browser-check";
  marker.textContent = problems.length ? "FAIL " + problems.join("; ")
                                       : "PASS svg=" + svgs.length + " shapes=" + shapes.length;
  document.body.appendChild(marker);
  if (problems.length) console.error("placec browser check: " + problems.join("; "));
})();
</script>
"""


class Counter(HTMLParser):
    """Counts elements by tag (and rect.segment) in a document."""

    def __init__(self):
        super().__init__()
        self.counts = {}

    def handle_starttag(self, tag, attrs):
        self.counts[tag] = self.counts.get(tag, 0) + 1
        if tag == "rect" and (dict(attrs).get("class") or "").startswith("segment"):
            self.counts["rect.segment"] = self.counts.get("rect.segment", 0) + 1

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)


def count(html):
    counter = Counter()
    counter.feed(html)
    return counter.counts


def chromium_command(browser, profile, extra):
    return [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-dev-shm-usage", "--hide-scrollbars", f"--user-data-dir={profile}",
            "--enable-logging=stderr", "--v=0"] + extra


def run_browser(browser, work, extra, timeout):
    """Runs Chromium in its own process group with a fresh profile and HOME; on a timeout the
    whole group (the browser and its helper processes) is killed."""
    profile = tempfile.mkdtemp(prefix="profile-", dir=work)
    env = dict(os.environ, HOME=work, XDG_CONFIG_HOME=work, XDG_CACHE_HOME=work)
    process = subprocess.Popen(chromium_command(browser, profile, extra), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        sys.exit(f"FAIL: chromium did not finish within {timeout} s: {' '.join(extra)}")
    finally:
        # Helpers that outlive the browser would hold the profile open.
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        shutil.rmtree(profile, ignore_errors=True)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def console_errors(stderr):
    """Console messages and uncaught exceptions, as Chromium logs them (`INFO:CONSOLE(LINE)
    "message", source: URL`, whatever the message's level). The pages have no script of their
    own, so any console message is a problem: a failed load, a parse error, or the check's own
    console.error."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def check_page(browser, work, name, html, timeout):
    """Loads the page with the check script; returns (marker, counts in the browser's DOM)."""
    page = os.path.join(work, name)
    with open(page, "w", encoding="utf-8") as f:
        f.write(html.replace("</body>", CHECK_SCRIPT + "</body>"))
    result = run_browser(browser, work, ["--dump-dom", "file://" + page], timeout)
    if result.returncode != 0:
        sys.exit(f"FAIL: chromium --dump-dom {name} exited {result.returncode}:\n{result.stderr}")
    marker = re.search(r'<p id="browser-check">([^<]*)</p>', result.stdout)
    return (marker.group(1) if marker else "no marker (the script did not run)",
            count(result.stdout), console_errors(result.stderr))


def png_size(path):
    with open(path, "rb") as f:
        header = f.read(24)
    if len(header) < 24 or header[:8] != b"\x89PNG\r\n\x1a\n" or header[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", header[16:24])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--placec", required=True)
    parser.add_argument("--examples", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--timeout", type=int, default=90)
    args = parser.parse_args()

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        print("SKIP: chromium is not installed (scripts/setup.sh installs the Debian package "
              "'chromium')")
        return SKIP
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    work = os.path.abspath(args.work)

    flagship = os.path.join(args.examples, "gpt3-175b-ptdp.place")
    report = os.path.join(work, "report.html")
    subprocess.run([args.placec, "report", flagship, "--format=html", "-o", report], check=True,
                   timeout=60)
    search = subprocess.run([args.placec, "search", flagship, "--run", "gpt3_1f1b", "--top", "5",
                             "--format=html"], check=True, timeout=120, capture_output=True,
                            text=True).stdout
    with open(report, encoding="utf-8") as f:
        report_html = f.read()

    failures = []
    # The flagship has 3 runs and no host memory: device memory, communication and time charts
    # of 3 bars each; the search page has one scatter with 4 fastest points and the chosen one.
    for name, html, svgs, min_circles in (("report", report_html, 3, 0),
                                          ("search", search, 1, 5)):
        written = count(html)
        marker, dom, errors = check_page(browser, work, f"{name}-checked.html", html, args.timeout)
        print(f"{name}: {marker}")
        if not marker.startswith("PASS"):
            failures.append(f"{name}: {marker}")
        if errors:
            failures.append(f"{name}: console errors: {errors}")
        if written.get("svg", 0) != svgs:
            failures.append(f"{name}: placec wrote {written.get('svg', 0)} svg, expected {svgs}")
        if written.get("circle", 0) < min_circles:
            failures.append(f"{name}: {written.get('circle', 0)} circles, expected {min_circles}+")
        # The browser's DOM holds every element placec wrote (the check script adds none of
        # these tags): nothing was dropped or re-parented out of the SVG.
        for tag in ("svg", "rect", "rect.segment", "circle", "line", "title", "table"):
            if dom.get(tag, 0) != written.get(tag, 0):
                failures.append(f"{name}: {tag}: {written.get(tag, 0)} written, "
                                f"{dom.get(tag, 0)} in the browser's DOM")
        print(f"{name}: " + ", ".join(f"{tag}={dom.get(tag, 0)}" for tag in
                                      ("svg", "rect.segment", "circle", "title", "table")))

    # Negative control: the same check on a page whose charts were removed must fail.
    stripped = re.sub(r"<svg.*?</svg>", "", report_html, flags=re.S)
    marker, _, errors = check_page(browser, work, "no-charts.html", stripped, args.timeout)
    print(f"negative control: {marker}")
    if not marker.startswith("FAIL") or not errors:
        failures.append("the check passed a page without charts (or logged no console error)")

    # A screenshot at the asked size.
    png = os.path.join(work, "report.png")
    result = run_browser(browser, work, [f"--screenshot={png}", "--window-size=1300,1500",
                                         "file://" + report], args.timeout)
    size = png_size(png) if os.path.exists(png) else None
    print(f"screenshot: {size}, {os.path.getsize(png) if size else 0} bytes")
    if size != (1300, 1500) or os.path.getsize(png) < 20000:
        failures.append(f"screenshot {png}: {size} (chromium exit {result.returncode})")

    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
