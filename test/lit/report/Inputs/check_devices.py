"""Checks `placec devices --format=json` against the sources its presets cite: each device's
large-GEMM rate (efficiency × dense peak) is the TFLOP/s that the MAMF tables of Bekman's
"Machine Learning Engineering" (compute/accelerator, commit 744d01e) measured on it, within 1 %,
its dense FP4 peak the same source's TFLOPS table's fp4 column, and every field a cluster can take
from a preset is there."""

import json
import sys

# Measured TFLOP/s, BF16 and FP8 (None: no FP8 tensor cores). The H200's BF16 is the H100 SXM's
# ("H200 is the same"); the A100 40 GB and the H100 PCIe take their family's fraction, the MI350X
# the MI355X's. The MI355X's FP8 rate is not MAMF's but AMD's hipBLASLt measurement at
# M = N = K = 8192 (ROCm blogs, "FP8 GEMM Optimization on AMD CDNA 4 Architecture", Table 5).
MAMF = {
    "a100_80gb": (271.2, None),
    "h100_sxm": (794.5, 1402.6),
    "h200": (794.5, 1453.4),
    "b200": (1745.0, 3432.5),
    "gb200": (1822.0, 3615.6),
    "b300": (1769.0, 3353.3),
    "mi300x": (668.4, None),
    "mi325x": (784.9, None),
    "mi355x": (1565.0, 3130.21),
}
# Dense FP4 TFLOPS (the same chapter's TFLOPS comparison table, its fp4 column); the devices
# not named have no FP4 tensor cores.
FP4 = {"b200": 9000, "gb200": 10000, "b300": 12600, "gb300": 15000}
FIELDS = ("name", "description", "family", "memory_bytes", "peak_bf16_flops", "peak_tf32_flops",
          "peak_fp8_flops", "peak_fp4_flops", "hbm_bandwidth", "intra_bandwidth", "inter_bandwidth",
          "host_bandwidth", "host_memory_bandwidth_per_device", "compute_units", "latency_s",
          "gemm_efficiency_bf16", "gemm_efficiency_fp8", "source")

devices = {d["name"]: d for d in json.load(sys.stdin)["devices"]}
for name, device in devices.items():
    missing = [f for f in FIELDS if f not in device]
    if missing:
        sys.exit(f"{name}: no {', '.join(missing)}")
    if (device["peak_fp8_flops"] is None) != (device["gemm_efficiency_fp8"] is None):
        sys.exit(f"{name}: an FP8 efficiency without an FP8 peak, or the other way")
for name, device in devices.items():
    peak = device["peak_fp4_flops"]
    expected = FP4.get(name)
    if (peak is None) != (expected is None) or (peak is not None and
                                                abs(peak / 1e12 - expected) > 1e-6 * expected):
        sys.exit(f"{name}: FP4 peak {peak}, the table gives {expected} TFLOPS")
for name, (bf16, fp8) in MAMF.items():
    device = devices[name]
    rate = device["gemm_efficiency_bf16"] * device["peak_bf16_flops"] / 1e12
    if abs(rate - bf16) > 0.01 * bf16:
        sys.exit(f"{name}: BF16 GEMMs at {rate:.1f} TFLOP/s, MAMF measured {bf16}")
    if fp8 is not None:
        rate = device["gemm_efficiency_fp8"] * device["peak_fp8_flops"] / 1e12
        if abs(rate - fp8) > 0.01 * fp8:
            sys.exit(f"{name}: FP8 GEMMs at {rate:.1f} TFLOP/s, MAMF measured {fp8}")
print(f"devices agree with their sources: {len(devices)} presets, {len(MAMF)} measured")
