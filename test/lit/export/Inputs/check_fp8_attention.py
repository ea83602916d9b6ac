"""Reads `placec report --format=json` of Inputs/fp8-attention.place and prints how the run with
`attention = fp8` differs from the same run without it: its activation memory and its step."""

import json
import sys

runs = {r["name"]: r for r in json.load(sys.stdin)["runs"]}
plain, fp8 = runs["fp4_bf16_attention"], runs["fp4_fp8_attention"]
saved = plain["memory"]["device"]["activations"] - fp8["memory"]["device"]["activations"]
faster = plain["time"]["step_s"] - fp8["time"]["step_s"]
# 8,192 tokens × 2 sequences × (32 + 8 + 8) heads × 128 × 1 byte × 32 layers.
expected = 8192 * 2 * (32 + 8 + 8) * 128 * 32
if abs(saved - expected) > 1:
    sys.exit(f"fp8 attention keeps {saved} bytes less, {expected} expected")
if faster <= 0:
    sys.exit(f"fp8 attention is not faster ({faster} s)")
print(f"fp8 attention keeps {saved / 1e9:.2f} GB less and runs {1e3 * faster:.1f} ms faster")
