#!/usr/bin/env python3
"""Lists the products and attention cores that placec times for the fidelity rows of one device
family, as `placec report --explain` prints them, for bench/gpu/kernels.py to measure.

  python3 bench/gpu/kernel_shapes.py --placec build/tools/placec bench/fidelity \
      --devices h100_sxm,h200 -o bench/gpu/kernel-shapes.json

With --experts, only the routed experts' grouped products (for bench/gpu/moe_kernels.py):

  python3 bench/gpu/kernel_shapes.py bench/fidelity --experts \
      --devices h100_sxm,h200,b200,b300,gb200,gb300 -o bench/gpu/moe-shapes.json
"""

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

GEMM = re.compile(r"gemm = (?P<name>[^(]+?) \(m×n×k (?:(?P<batch>[\d.e+]+) × )?(?P<m>[\d.e+]+)×"
                  r"(?P<n>[\d.e+]+)×(?P<k>[\d.e+]+)\).*?FLOP / \((?P<peak>[^×]+) × "
                  r"(?P<eff>[\d.]+) ×")
ATTENTION = re.compile(r"attention = fused attention(?P<bwd> backward)? \((?P<bh>[\d.e+]+) heads × "
                       r"(?P<q>[\d.e+]+)×(?P<kv>[\d.e+]+) × d (?P<d>\d+)(?P<causal>, causal)?")


def layout_of(name):
    if name.endswith("weight gradient"):
        return "weight_gradient"
    if name.endswith("input gradient"):
        return "input_gradient"
    return "forward"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", help="fidelity files or directories")
    parser.add_argument("--placec", default="build/tools/placec")
    parser.add_argument("--devices", default="h100_sxm,h200",
                        help="comma-separated device presets whose rows to list")
    parser.add_argument("--fp8-efficiency", default="0.709",
                        help="the FP8 GEMM efficiency the explanation shows for the family")
    parser.add_argument("--experts", action="store_true",
                        help="list only the routed experts' grouped products")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args()
    devices = set(args.devices.split(","))
    fidelity = subprocess.run([args.placec, "fidelity", *args.paths, "--format=json"],
                              capture_output=True, text=True)
    if not fidelity.stdout:
        sys.exit(f"kernel_shapes.py: placec fidelity failed: {fidelity.stderr}")
    rows = json.loads(fidelity.stdout)["rows"]
    files = {}
    for path in args.paths:
        p = Path(path)
        for f in ([p] if p.is_file() else sorted(p.rglob("*.place"))):
            files[f.name] = f
    gemms, attention = {}, {}
    for row in rows:
        if row["device"] not in devices:
            continue
        source = f"{row['file']}:{row['run']}"
        explain = subprocess.run([args.placec, "report", str(files[row["file"]]), "--run",
                                  row["run"], "--explain"], capture_output=True, text=True,
                                 check=True).stdout
        for match in GEMM.finditer(explain):
            m, n, k = (int(float(match[x])) for x in "mnk")
            batch = int(float(match["batch"])) if match["batch"] else 1
            fp8 = match["eff"] == args.fp8_efficiency
            if args.experts and not (batch > 1 and match["name"].startswith("experts")):
                continue
            layout = layout_of(match["name"].strip())
            key = (m, n, k, batch, layout, fp8)
            gemms.setdefault(key, dict(m=m, n=n, k=k, batch=batch, layout=layout, fp8=fp8,
                                       name=match["name"].strip(), source=source))
        # --experts lists no attention cores.
        for match in [] if args.experts else ATTENTION.finditer(explain):
            bh, q, kv, d = (int(float(match[x])) for x in ("bh", "q", "kv", "d"))
            key = (bh, q, kv, d, bool(match["causal"]))
            attention.setdefault(key, dict(batch=1, heads=bh, queries=q, keys=kv, head_dim=d,
                                           causal=bool(match["causal"]), source=source))
    out = dict(devices=sorted(devices), gemms=list(gemms.values()),
               attention=list(attention.values()))
    with open(args.output, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"{len(out['gemms'])} products, {len(out['attention'])} attention cores")


if __name__ == "__main__":
    main()
