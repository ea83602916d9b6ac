#!/usr/bin/env python3
"""Writes a checkpoint in placert's format (docs/checkpoints.md) by hand, with zlib's CRC-32, so
that `placec inspect` is tested against an independent writer. Usage: make_checkpoint.py DIR
[good|flip|truncate|missing|gap|beyond|stride|no-manifest|v1|newer|older|unversioned|bad-latest|
huge-shape|huge-offset|huge-stride|huge-blocks]."""
import json
import os
import struct
import sys
import zlib

directory, damage = sys.argv[1], sys.argv[2]
step = os.path.join(directory, "step-00000005")
os.makedirs(step, exist_ok=True)
# Tensor "w" [4, 3] split over two ranks (7 and 5 elements), tensor "b" [4] on rank 1.
w = [float(i) / 8 for i in range(12)]
b = [-1.0, -2.0, -3.0, -4.0]
rank0 = struct.pack("<7f", *w[:7])
rank1_w = struct.pack("<5f", *w[7:])
rank1_b = struct.pack("<4f", *b)
# Tensor "s" [3, 4] split by columns: rank 0 has columns 0-1 of every row, rank 1 columns 2-3,
# each as one strided shard (3 blocks of 2 elements, stride 4).
s = [100.0 + i for i in range(12)]
rank0_s = struct.pack("<6f", *[s[r * 4 + c] for r in range(3) for c in (0, 1)])
rank1_s = struct.pack("<6f", *[s[r * 4 + c] for r in range(3) for c in (2, 3)])
rank1 = rank1_w + rank1_b + rank1_s
rank0_w = rank0
rank0 = rank0_w + rank0_s
crc = lambda data: "%08x" % zlib.crc32(data)
manifest = {
    "format": "placert-checkpoint", "format_version": 2, "placec_version": "1.2.3",
    "placert_version": "4.5.6",
    "model": {"name": "toy", "kind": "mlp"}, "run": "train_toy", "strategy": "zero1(dp = 2)",
    "mesh": [{"name": "dp", "kind": "batch", "size": 2}], "optimizer": "sgd", "ranks": 2,
    "scalars": {"step": 5, "data_position": 80, "seed": 3},
    "files": [{"rank": 0, "path": "rank-00000.bin", "bytes": len(rank0)},
              {"rank": 1, "path": "rank-00001.bin", "bytes": len(rank1)}],
    "tensors": [
        {"name": "b", "shape": [4], "shards": [
            {"offset": 0, "elements": 4, "rank": 1, "file_offset": 20, "crc32": crc(rank1_b)}]},
        {"name": "w", "shape": [4, 3], "shards": [
            {"offset": 0, "elements": 7, "rank": 0, "file_offset": 0, "crc32": crc(rank0_w)},
            {"offset": 7, "elements": 5, "rank": 1, "file_offset": 0, "crc32": crc(rank1_w)}]},
        {"name": "s", "shape": [3, 4], "shards": [
            {"offset": 0, "elements": 2, "blocks": 3, "stride": 4, "rank": 0, "file_offset": 28,
             "crc32": crc(rank0_s)},
            {"offset": 2, "elements": 2, "blocks": 3, "stride": 4, "rank": 1, "file_offset": 36,
             "crc32": crc(rank1_s)}]},
    ],
}
if damage == "flip":
    rank1 = rank1[:21] + bytes([rank1[21] ^ 1]) + rank1[22:]
if damage == "truncate":
    rank1 = rank1[:30]
if damage == "stride":  # Blocks at 2 and 7: element 6 is in no shard, 8 in two.
    manifest["tensors"][2]["shards"][1]["stride"] = 5
    manifest["tensors"][2]["shards"][1]["blocks"] = 2
if damage == "gap":  # Element 7 of "w" is in no shard.
    manifest["tensors"][1]["shards"][1]["offset"] = 8
    manifest["tensors"][1]["shards"][1]["elements"] = 4
if damage == "beyond":  # The second shard of "w" ends past its 12 elements.
    manifest["tensors"][1]["shards"][1]["offset"] = 8
# Numbers that overflowed the reader's arithmetic before it checked them without overflow.
if damage == "huge-shape":
    manifest["tensors"][1]["shape"] = [4611686018427387904, 4]
if damage == "huge-offset":
    manifest["tensors"][1]["shards"][1]["file_offset"] = 9223372036854775807
if damage == "huge-stride":
    manifest["tensors"][2]["shards"][1]["stride"] = 4611686018427387904
if damage == "huge-blocks":
    manifest["tensors"][2]["shards"][1]["blocks"] = 4294967296
if damage == "v1":  # Format 1: its version under "version", no placec or placert version.
    for key in ("format_version", "placec_version", "placert_version"):
        del manifest[key]
    manifest["version"] = 1
if damage == "newer":
    manifest["format_version"] = 3
if damage == "older":
    manifest["format_version"] = 0
if damage == "unversioned":
    del manifest["format_version"]
with open(os.path.join(step, "rank-00000.bin"), "wb") as file:
    file.write(rank0)
if damage != "missing":
    with open(os.path.join(step, "rank-00001.bin"), "wb") as file:
        file.write(rank1)
if damage != "no-manifest":
    with open(os.path.join(step, "manifest.json"), "w") as file:
        json.dump(manifest, file, indent=1)
    with open(os.path.join(directory, "latest"), "w") as file:
        file.write("../step-00000005\n" if damage == "bad-latest" else "step-00000005\n")
