"""Checks the MLPerf rows' measured steps against the block times of their result logs.

Usage: check_mlperf_steps.py BLOCKS.json FILE.place...

BLOCKS.json is bench/fidelity/mlperf/blocks.json (extract.py's output: every run's seconds per step
in each training block of its log, or, where the log times every step, their median). For each row
it names, the row's measured_step must be the mean over the system's runs of each run's median, to
the digits written, and its global_batch the logs' global_batch_size; every run of the .place files
must have its blocks. One line per row.
"""

import json
import re
import statistics
import sys

RUN = re.compile(r"^run\s+(\w+)\s*\{(.*?)^\}", re.S | re.M)


def field(body, name):
    match = re.search(r"\b%s\s*=\s*([0-9.]+)" % name, body)
    return match.group(1) if match else None


def main(blocks_path, places):
    rows = {}
    for path in places:
        text = open(path).read()
        for name, body in RUN.findall(text):
            rows[name] = (field(body, "global_batch"), field(body, "measured_step"))
    status = 0
    seen = set()
    for system in json.load(open(blocks_path)):
        name = system["run"]
        seen.add(name)
        if name not in rows:
            print("error: %s: no such run in the .place files" % name)
            status = 1
            continue
        batch, written = rows[name]
        medians = [statistics.median(r["step_seconds"]) if "step_seconds" in r
                   else r["median_step_seconds"] for r in system["runs"]]
        mean = statistics.mean(medians)
        # Half a unit of the last digit written.
        decimals = len(written.split(".")[1]) if "." in written else 0
        tolerance = 0.5 * 10 ** -decimals
        if abs(float(written) - mean) > tolerance + 1e-9:
            print("error: %s: measured_step %s s, the logs give %.5f s" % (name, written, mean))
            status = 1
        batches = {r["global_batch"] for r in system["runs"]}
        if batches != {int(batch)}:
            print("error: %s: global_batch %s, the logs say %s" % (name, batch, sorted(batches)))
            status = 1
        spread = (max(medians) - min(medians)) / min(medians)
        print("%s: measured step %s s = the mean of %d runs' medians (%.5f s; the runs within "
              "%.1f %%), global batch %s" % (name, written, len(medians), mean, 100 * spread,
                                             batch))
    for name in sorted(set(rows) - seen):
        print("error: %s: no blocks in %s" % (name, blocks_path))
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
