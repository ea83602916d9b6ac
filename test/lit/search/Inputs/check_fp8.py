# Checks `placec search --format=json` with FP8 against the same search in BF16 alone: the
# fastest FP8-enabled plan is FP8, and the ratio of the step times is above 1 and below 2 (FP8
# doubles only the linear layers' peak; see fp8.place).
#   usage: check_fp8.py FP8.json BF16.json
import json
import sys

fp8 = json.load(open(sys.argv[1]))["top"][0]
bf16 = json.load(open(sys.argv[2]))["top"][0]
assert fp8["precision"].startswith("mixed(fp8"), fp8
assert bf16["precision"] == "mixed(bf16)", bf16
ratio = bf16["step_seconds"] / fp8["step_seconds"]
assert 1 < ratio < 2, ratio
print("fastest fp8 plan:", fp8["precision"], fp8["mesh"])
print(f"bf16 / fp8 step time: {ratio:.3f}")
