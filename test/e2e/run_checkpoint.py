#!/usr/bin/env python3
"""End-to-end tests of checkpoints (docs/checkpoints.md): programs compiled from
configs/checkpoint.place (the mlp), configs/checkpoint_gpt.place (mode gpt),
configs/checkpoint_gqa.place (mode gqa) and configs/checkpoint_cp.place (mode cp) save, resume and
reshard, and refuse bad checkpoints.

Modes:
  resume   a run stopped at step 2 and resumed equals the uninterrupted run bit for bit: the
           losses, and every byte of the step-4 checkpoint (params and optimizer state), under
           zero3, pp x zero1, tp x dp, zero1 with bf16, and SGD with momentum on one rank
  reshard  a checkpoint of zero3 on 4 ranks continues under other placements and rank counts
           (and their checkpoints under yet others) like one device (--check) and like the
           uninterrupted run
  bad      missing, truncated or corrupted shards, another model's checkpoint, unfinished saves,
           directories that are no checkpoint, and format versions this placert does not read
           (newer, older, none): a clear error, no training, and `placec inspect` agrees; and,
           as controls, a checkpoint rewritten in another layout by an independent writer loads
           to the same bytes, a format 1 manifest loads to the same bytes, and a `latest`
           naming a missing checkpoint falls back to the newest complete one
  gqa      grouped-query attention (configs/checkpoint_gqa.place): exact resume under tp x sp, the
           manifest's qkv shape and each tensor rank's group of rows, a tp x sp checkpoint
           continued on one rank, under zero3 and under tp x dp, one rank's under tp; a
           multi-head model refuses it
  cp       context parallelism (configs/checkpoint_cp.place): exact resume under ring attention
           over dp x cp, the manifest's tensors (the same as without context parallelism) and its
           sequence axis, the checkpoint continued on one rank and under tp x dp (no context
           parallelism), and one rank's checkpoint of step 3 under all-to-all attention with FSDP
           over dp x cp
  gpt      the transformer (configs/checkpoint_gpt.place): exact resume under zero3, tp x sp and
           pp x zero1 (tied: the head's copy of the token embedding is not saved, and loads from
           it; and untied), and of a LLaMA-style model with Adam under zero1 x sp; the tied
           model's zero3 checkpoint continues under pp x zero1 and that one's under tp x sp; an
           untied zero3 checkpoint continues under tp x dp with sequence parallelism, pp x zero1
           and one rank; its manifest names the model's tensors; `placec inspect` verifies it and finds a
           corrupted shard; an independent rewrite loads to the same bytes; the untied model
           refuses the tied model's checkpoint
  faults   a rank dies in the middle of a save, or of a step: the job fails in bounded time
           naming it, and the next run resumes from the last complete checkpoint
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import zlib

from run_e2e import compare, configure, fail, mpi_env, placec_version, run

RANKS = {"ck_zero3": 4, "ck_tp_dp": 4, "ck_pp_zero1": 4, "ck_tp_zero3": 4, "ck_hsdp": 4,
         "ck_single": 1, "ck_zero1_bf16": 4, "ck_sgd": 1, "ck_other": 1,
         # configs/checkpoint_gpt.place
         "gck_zero3": 4, "gck_sp": 2, "gck_pp_zero1": 4, "gck_untied_zero3": 4, "gck_untied_sp_dp": 4,
         "gck_untied_pp_zero1": 4, "gck_untied_single": 1, "gck_llama": 4,
         # configs/checkpoint_gqa.place
         "qck_sp": 2, "qck_single": 1, "qck_zero3": 2, "qck_tp_dp": 4, "qck_tp": 2,
         "qck_mha_single": 1,
         # configs/checkpoint_cp.place
         "cck_ring": 4, "cck_single": 1, "cck_tp_dp": 4, "cck_a2a_fsdp": 4,
         # configs/checkpoint_moe.place
         "mck_ep2": 4, "mck_ep4": 4, "mck_single": 1, "mck_fold": 4, "mck_fold_split": 4,
         "mck_fold_single": 1, "mck_cfold": 4, "mck_cfold_split": 4}
STEP2, STEP3, STEP4 = "step-00000002", "step-00000003", "step-00000004"


class Context:
    def __init__(self, args):
        self.args = args
        self.work = args.work
        self.programs = {}

    def path(self, *parts):
        return os.path.join(self.work, *parts)

    def build(self, name):
        if name in self.programs:
            return
        source, build = self.path(name, "src"), self.path(name, "build")
        run([self.args.placec, "compile", self.args.place, "--run", name, "-o", source])
        configure(source, build, self.args.placert_dir,
                  ["-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_CXX_FLAGS_RELEASE=-O1"])
        run(["cmake", "--build", build], echo=False)
        self.programs[name] = os.path.join(build, name)

    def train(self, name, *options, expect_ok=True, timeout=120):
        """Runs program `name` on its ranks; returns the result and the seconds it took."""
        self.build(name)
        ranks = RANKS[name]
        launcher = [] if ranks == 1 else [self.args.mpiexec, "--oversubscribe", "-np", str(ranks)]
        start = time.monotonic()
        result = run(launcher + [self.programs[name], "--timeout", "20"] + list(options),
                     env=mpi_env(), check=expect_ok, timeout=timeout)
        return result, time.monotonic() - start

    def inspect(self, directory):
        return run([self.args.placec, "inspect", directory], check=False)

    def placec_version(self):
        return placec_version(self.args.placec)


def load_metrics(path):
    with open(path) as file:
        return json.load(file)


def files_of(directory):
    return sorted(name for name in os.listdir(directory) if not name.startswith("."))


def same_bytes(a, b):
    """Every file of checkpoint directory a equals the one of b."""
    if files_of(a) != files_of(b):
        fail(f"{a} and {b} hold different files: {files_of(a)} vs {files_of(b)}")
    for name in files_of(a):
        with open(os.path.join(a, name), "rb") as fa, open(os.path.join(b, name), "rb") as fb:
            if fa.read() != fb.read():
                fail(f"{name} differs between {a} and {b}")


def latest(directory):
    with open(os.path.join(directory, "latest")) as file:
        return file.read().strip()


def rewrite(source, target):
    """Rewrites checkpoint `source` into another layout with an independent writer: every tensor
    assembled from its shards (each CRC checked with zlib), then written to one file, a matrix as
    two strided shards (its left and right column halves), anything else as one shard."""
    with open(os.path.join(source, "manifest.json")) as file:
        manifest = json.load(file)
    data = {}
    for entry in manifest["files"]:
        with open(os.path.join(source, entry["path"]), "rb") as file:
            data[entry["rank"]] = file.read()
    out = bytearray()
    for tensor in manifest["tensors"]:
        count = 1
        for size in tensor["shape"]:
            count *= size
        full = bytearray(4 * count)
        for shard in tensor["shards"]:
            blocks, stride = shard.get("blocks", 1), shard.get("stride", 0)
            length = 4 * shard["elements"]
            piece = data[shard["rank"]][shard["file_offset"]:shard["file_offset"] + blocks * length]
            if "%08x" % zlib.crc32(piece) != shard["crc32"]:
                fail(f"rewrite: a shard of {tensor['name']} fails its CRC")
            for b in range(blocks):
                at = 4 * (shard["offset"] + b * stride)
                full[at:at + length] = piece[b * length:(b + 1) * length]
        shards = []
        if len(tensor["shape"]) == 2 and tensor["shape"][1] % 2 == 0:
            rows, columns = tensor["shape"]
            half = columns // 2
            for first in (0, half):
                piece = b"".join(full[4 * (r * columns + first):4 * (r * columns + first + half)]
                                 for r in range(rows))
                shards.append({"offset": first, "elements": half, "blocks": rows,
                               "stride": columns, "rank": 0, "file_offset": len(out),
                               "crc32": "%08x" % zlib.crc32(piece)})
                out += piece
        else:
            shards.append({"offset": 0, "elements": count, "rank": 0, "file_offset": len(out),
                           "crc32": "%08x" % zlib.crc32(full)})
            out += full
        tensor["shards"] = shards
    manifest["files"] = [{"rank": 0, "path": "everything.bin", "bytes": len(out)}]
    os.makedirs(target)
    with open(os.path.join(target, "everything.bin"), "wb") as file:
        file.write(out)
    with open(os.path.join(target, "manifest.json"), "w") as file:
        json.dump(manifest, file, indent=1)


def mode_resume(ctx):
    for name in ["ck_zero3", "ck_pp_zero1", "ck_tp_dp", "ck_zero1_bf16", "ck_sgd"]:
        check_resume(ctx, name)


def check_resume(ctx, name):
    """Program `name` stopped at step 2 and resumed equals its uninterrupted run bit for bit."""
    whole, split = ctx.path(name, "whole"), ctx.path(name, "split")
    m_whole, m_resumed = ctx.path(name, "whole.json"), ctx.path(name, "resumed.json")
    ctx.train(name, "--steps", "4", "--save", whole, "--save-every", "2", "--metrics", m_whole)
    ctx.train(name, "--steps", "2", "--save", split)
    result, _ = ctx.train(name, "--steps", "4", "--resume", split, "--save", split, "--check",
                          "--metrics", m_resumed)
    if f"resumed from {os.path.join(split, STEP2)}" not in result.stdout:
        fail(f"{name}: the resumed run does not say it resumed from {STEP2}")
    a, b = load_metrics(m_whole), load_metrics(m_resumed)
    if b["first_step"] != 2 or len(b["losses"]) != 2:
        fail(f"{name}: the resumed run ran steps from {b['first_step']}: {b['losses']}")
    # The JSON holds each loss with 17 significant digits: equal text is equal doubles.
    if b["losses"] != a["losses"][2:]:
        fail(f"{name}: losses after resuming {b['losses']} differ from the uninterrupted "
             f"run's {a['losses'][2:]}")
    if b["checksum"] != a["checksum"]:
        fail(f"{name}: parameter checksums differ: {a['checksum']} vs {b['checksum']}")
    for step in (STEP2, STEP4):
        same_bytes(os.path.join(whole, step), os.path.join(split, step))
    check_versions(ctx, name, os.path.join(whole, STEP4), a)
    # Saving and loading move no counted bytes: the resumed run's collectives per step are
    # still exactly the report's.
    report = json.loads(run([ctx.args.placec, "report", "--format=json", ctx.args.place,
                             "--run", name], echo=False).stdout)
    problems = compare(b, next(r for r in report["runs"] if r["name"] == name))
    if problems:
        fail(f"{name}: the resumed run's counters differ from the report: {problems[:3]}")
    if latest(whole) != STEP4 or latest(split) != STEP4:
        fail(f"{name}: 'latest' does not name {STEP4}")
    listing = ctx.inspect(whole)
    if listing.returncode != 0 or "step 4" not in listing.stdout or \
            "checksums:" not in listing.stdout or ": ok" not in listing.stdout:
        fail(f"{name}: placec inspect did not verify the checkpoint")
    print(f"e2e: ok: {name} stopped at step 2 and resumed equals the uninterrupted run bit "
          f"for bit (losses, params, optimizer state)")


def check_versions(ctx, name, checkpoint, metrics):
    """The manifest and the metrics name the placec that generated the program, the manifest its
    format version (docs/checkpoints.md)."""
    with open(os.path.join(checkpoint, "manifest.json")) as file:
        manifest = json.load(file)
    version = ctx.placec_version()
    if manifest.get("format_version") != 2 or "version" in manifest:
        fail(f"{name}: the manifest's format version is {manifest.get('format_version')}")
    for what, record in (("manifest", manifest), ("metrics", metrics)):
        if record.get("placec_version") != version:
            fail(f"{name}: the {what} names placec {record.get('placec_version')}, not {version}")
        if not record.get("placert_version"):
            fail(f"{name}: the {what} does not name its placert version")
    if f"written by placec {version} with placert" not in ctx.inspect(checkpoint).stdout:
        fail(f"{name}: placec inspect does not print the versions")


def mode_reshard(ctx):
    # zero3 on 4 ranks to tp 2 x dp 2, pp 2 x zero1 2, one rank, tp 2 x zero3 2 and hsdp; the
    # first three also save at step 3, which continues under another placement: tp x dp ->
    # pp x zero1, one rank -> zero3 on 4 ranks, hsdp -> tp x zero3.
    check_reshard(ctx, "ck_zero3", ["ck_tp_dp", "ck_pp_zero1", "ck_single", "ck_tp_zero3",
                                    "ck_hsdp"],
                  {"ck_tp_dp": "ck_pp_zero1", "ck_single": "ck_zero3", "ck_hsdp": "ck_tp_zero3"})


def check_reshard(ctx, origin, targets, chains):
    """A checkpoint of `origin` at step 2 continues under each of `targets` like one device and
    like the uninterrupted run; a target in `chains` also saves at step 3, and that checkpoint
    continues under the placement it maps to."""
    source = ctx.path(origin)
    uninterrupted = ctx.path("uninterrupted.json")
    ctx.train(origin, "--steps", "4", "--metrics", uninterrupted)
    ctx.train(origin, "--steps", "2", "--save", source)
    reference = load_metrics(uninterrupted)

    def resume(target, checkpoint, first, save=None):
        metrics = ctx.path(f"{target}-from-{os.path.basename(checkpoint)}.json")
        options = ["--steps", "4", "--resume", checkpoint, "--check", "--metrics", metrics]
        if save:
            options += ["--save", save, "--save-every", "3"]
        result, _ = ctx.train(target, *options)
        if "resumed from" not in result.stdout:
            fail(f"{target} did not resume from {checkpoint}")
        got = load_metrics(metrics)
        if not got["check"]["passed"]:
            fail(f"{target} resumed from {checkpoint} differs from one device")
        want = reference["losses"][first:4]
        for mine, theirs in zip(got["losses"], want):
            if abs(mine - theirs) > 1e-5 * abs(theirs):
                fail(f"{target} resumed from {checkpoint}: losses {got['losses']}, the "
                     f"uninterrupted run's {want}")
        if len(got["losses"]) != len(want):
            fail(f"{target}: ran {len(got['losses'])} steps, expected {len(want)}")
        for key in ("sum", "sum_squares"):
            mine, theirs = got["checksum"][key], reference["checksum"][key]
            if abs(mine - theirs) > 1e-5 * max(1.0, abs(theirs)):
                fail(f"{target}: parameter {key} {mine}, uninterrupted {theirs}")
        print(f"e2e: ok: {checkpoint} continues under {target} "
              f"({RANKS[target]} ranks) like the uninterrupted {origin} run")

    for target in targets:
        saved = ctx.path(f"{target}-saves") if target in chains else None
        resume(target, source, 2, save=saved)
        if saved:
            resume(chains[target], os.path.join(saved, STEP3), 3)


def expect_refusal(ctx, name, checkpoint, message, what):
    """`message`: a text the error contains, or a list of them."""
    result, seconds = ctx.train(name, "--steps", "4", "--resume", checkpoint, expect_ok=False)
    if result.returncode == 0:
        fail(f"{what}: the program resumed from a bad checkpoint")
    for text in [message] if isinstance(message, str) else message:
        if text not in result.stdout:
            fail(f"{what}: the error does not say '{text}'")
    if "step 3:" in result.stdout or "step 1:" in result.stdout:
        fail(f"{what}: the program trained after a failed load")
    print(f"e2e: ok: {what}: refused in {seconds:.1f}s, saying '{message}'")


def mode_bad(ctx):
    good_root = ctx.path("good")
    ctx.train("ck_zero3", "--steps", "2", "--save", good_root)
    good = os.path.join(good_root, STEP2)
    if ctx.inspect(good).returncode != 0:
        fail("placec inspect rejects a good checkpoint")

    def damaged(case, damage):
        directory = ctx.path("cases", case)
        shutil.copytree(good, directory)
        damage(directory)
        return directory

    def remove(file):
        return lambda d: os.remove(os.path.join(d, file))

    def truncate(d):
        path = os.path.join(d, "rank-00001.bin")
        os.truncate(path, os.path.getsize(path) // 2)

    def flip(d):
        path = os.path.join(d, "rank-00003.bin")
        with open(path, "r+b") as file:
            file.seek(1000)
            byte = file.read(1)
            file.seek(1000)
            file.write(bytes([byte[0] ^ 0x10]))

    def garble(d):
        with open(os.path.join(d, "manifest.json"), "w") as file:
            file.write('{"format": "placert-checkpoint", "format_version": 2, "tensors": [')

    def edit_manifest(change):
        def damage(d):
            path = os.path.join(d, "manifest.json")
            with open(path) as file:
                manifest = json.load(file)
            change(manifest)
            with open(path, "w") as file:
                json.dump(manifest, file, indent=1)
        return damage

    def newer(manifest):
        manifest["format_version"] = 3
        manifest["placec_version"] = "9.9.9"

    def older(manifest):
        manifest["format_version"] = 0

    def unversioned(manifest):
        del manifest["format_version"]

    cases = [
        ("missing shard file", damaged("missing", remove("rank-00002.bin")), "is missing",
         "is missing"),
        ("truncated shard", damaged("truncated", truncate), "is truncated", "truncated"),
        ("checksum mismatch", damaged("corrupt", flip), "checksum mismatch", "checksum mismatch"),
        ("unfinished save", damaged("unfinished", remove("manifest.json")), "unfinished save",
         "unfinished save"),
        ("manifest that is not JSON", damaged("garbled", garble), "not valid JSON",
         "not valid JSON"),
        # Format versions this placert does not read: both versions are named.
        ("newer format version", damaged("newer", edit_manifest(newer)),
         ["has format version 3 (written by a program of placec 9.9.9 with placert ",
          "which is newer than this placert supports", "reads format versions 1 to 2"],
         "which is newer than this placec supports"),
        ("older format version", damaged("older", edit_manifest(older)),
         ["has format version 0", "which is older than this placert supports",
          "reads format versions 1 to 2"], "which is older than this placec supports"),
        ("manifest without a format version", damaged("unversioned", edit_manifest(unversioned)),
         ["has no format version", "reads format versions 1 to 2"], "has no format version"),
    ]
    for what, directory, message, inspect_message in cases:
        expect_refusal(ctx, "ck_zero3", directory, message, what)
        listing = ctx.inspect(directory)
        if listing.returncode != 1 or inspect_message not in listing.stdout:
            fail(f"{what}: placec inspect did not fail with '{inspect_message}'")
        print(f"e2e: ok: {what}: placec inspect exits 1 saying '{inspect_message}'")

    # The same state in another layout, written by an independent writer (one file, strided
    # halves): resuming from it ends byte-identical to resuming from the original.
    foreign = ctx.path("cases", "foreign")
    rewrite(good, foreign)
    ctx.train("ck_zero3", "--steps", "4", "--resume", good, "--save", ctx.path("from-good"))
    ctx.train("ck_zero3", "--steps", "4", "--resume", foreign, "--save", ctx.path("from-foreign"))
    same_bytes(os.path.join(ctx.path("from-good"), STEP4),
               os.path.join(ctx.path("from-foreign"), STEP4))
    if ctx.inspect(foreign).returncode != 0:
        fail("placec inspect rejects the rewritten checkpoint")
    print("e2e: ok: a checkpoint rewritten by an independent writer (one file, strided shards) "
          "resumes to the same bytes")

    # Format 1 (its version under "version", no placec or placert version) is still read.
    def format1(manifest):
        for key in ("format_version", "placec_version", "placert_version"):
            del manifest[key]
        manifest["version"] = 1
    legacy = damaged("format1", edit_manifest(format1))
    ctx.train("ck_zero3", "--steps", "4", "--resume", legacy, "--save", ctx.path("from-format1"))
    same_bytes(os.path.join(ctx.path("from-good"), STEP4),
               os.path.join(ctx.path("from-format1"), STEP4))
    if "format version 1, written by placec unknown" not in ctx.inspect(legacy).stdout:
        fail("placec inspect does not read a format 1 checkpoint")
    print("e2e: ok: a format 1 checkpoint resumes to the same bytes")

    # A directory of checkpoints whose only save did not finish.
    only_tmp = ctx.path("cases", "only-tmp")
    shutil.copytree(good, os.path.join(only_tmp, STEP3 + ".tmp"))
    os.remove(os.path.join(only_tmp, STEP3 + ".tmp", "manifest.json"))
    expect_refusal(ctx, "ck_zero3", only_tmp, "holds only an unfinished save",
                   "a directory with an unfinished save")
    # Directories that are no checkpoint.
    empty = ctx.path("cases", "empty")
    os.makedirs(empty)
    with open(os.path.join(empty, "notes.txt"), "w") as file:
        file.write("not a checkpoint\n")
    expect_refusal(ctx, "ck_zero3", empty, "is not a checkpoint", "a directory that is not a "
                   "checkpoint")
    expect_refusal(ctx, "ck_zero3", ctx.path("cases", "nowhere"), "does not exist",
                   "a path that does not exist")
    if ctx.inspect(empty).returncode != 1:
        fail("placec inspect accepts a directory that is not a checkpoint")
    # `latest` names a checkpoint that is gone (a crash while a rerun replaced it): the newest
    # complete one is loaded instead.
    fallback = ctx.path("cases", "fallback")
    shutil.copytree(good_root, fallback)
    with open(os.path.join(fallback, "latest"), "w") as file:
        file.write("step-00000009\n")
    result, _ = ctx.train("ck_zero3", "--steps", "3", "--resume", fallback)
    if f"resumed from {os.path.join(fallback, STEP2)}" not in result.stdout:
        fail("with 'latest' naming a missing checkpoint, the newest complete one was not loaded")
    print("e2e: ok: 'latest' naming a missing checkpoint falls back to the newest complete one")
    # Another model's program: shapes differ.
    expect_refusal(ctx, "ck_other", good_root, "tensor 'layers.0.bias' has shape [64] but the model's is [32]",
                   "a checkpoint of another model")


def mode_faults(ctx):
    whole = ctx.path("whole")
    ctx.train("ck_zero3", "--steps", "4", "--save", whole)

    # A rank dies while writing the checkpoint of step 3.
    in_save = ctx.path("in-save")
    result, seconds = ctx.train("ck_zero3", "--steps", "4", "--save", in_save, "--save-every",
                                "1", "--die-in-save", "3", "--die-rank", "1", "--timeout", "5",
                                expect_ok=False)
    if result.returncode == 0:
        fail("the job succeeded although a rank died during a save")
    if f"fault injection: exiting in the middle of saving checkpoint {STEP3}" not in result.stdout:
        fail("the output does not name the rank that died during the save")
    if seconds > 60:
        fail(f"the job took {seconds:.1f}s to fail")
    # The other ranks end too: mpirun ends the job when a rank exits non-zero, and says so, or
    # their watchdog names the collective of the save that did not complete.
    if "non-zero status" not in result.stdout and "did not complete within" not in result.stdout:
        fail("the output does not say how the other ranks ended")
    if latest(in_save) != STEP2 or os.path.exists(os.path.join(in_save, STEP3)):
        fail(f"after the failed save, 'latest' is {latest(in_save)} and {STEP3} "
             f"{'exists' if os.path.exists(os.path.join(in_save, STEP3)) else 'does not exist'}")
    print(f"e2e: ok: a rank died saving {STEP3}: the job failed in {seconds:.1f}s, "
          f"{STEP2} is the latest checkpoint")
    result, _ = ctx.train("ck_zero3", "--steps", "4", "--resume", in_save, "--save", in_save,
                          "--check")
    if f"resumed from {os.path.join(in_save, STEP2)}" not in result.stdout:
        fail("the next run did not resume from the last complete checkpoint")
    same_bytes(os.path.join(whole, STEP4), os.path.join(in_save, STEP4))
    print("e2e: ok: the next run resumed from step 2 and ends equal to the uninterrupted run")

    # A rank dies in the middle of step 3 (index 2): steps 1 and 2 were saved.
    in_step = ctx.path("in-step")
    result, seconds = ctx.train("ck_zero3", "--steps", "4", "--save", in_step, "--save-every",
                                "1", "--die-at-step", "2", "--die-rank", "2", "--timeout", "5",
                                expect_ok=False)
    if result.returncode == 0 or "fault injection: exiting in the middle of step 2" not in \
            result.stdout or seconds > 60:
        fail(f"a rank died mid-step: exit code {result.returncode} after {seconds:.1f}s")
    if latest(in_step) != STEP2:
        fail(f"after a rank died in step 3, 'latest' is {latest(in_step)}")
    result, _ = ctx.train("ck_zero3", "--steps", "4", "--resume", in_step, "--save", in_step,
                          "--check")
    same_bytes(os.path.join(whole, STEP4), os.path.join(in_step, STEP4))
    print(f"e2e: ok: a rank died in step 3: the job failed in {seconds:.1f}s and the next run "
          f"resumed from {STEP2}, ending equal to the uninterrupted run")


def gpt_tensors(layers, hidden, ffn, vocab, seq, tied, llama=False, heads=4, kv_heads=None):
    """The tensors of a transformer and their shapes, named as docs/checkpoints.md says: the
    GPT-2 layout (learned positions, layernorm with bias, gelu mlp with biases), or with `llama`
    rotary positions, RMSNorm, a swiglu mlp and no biases. With `kv_heads`, the queries keep
    `heads` heads of hidden/heads and the keys and values have kv_heads heads each."""
    qkv = 3 * hidden if kv_heads is None else hidden + 2 * kv_heads * (hidden // heads)
    tensors = {"embed.tokens": [vocab, hidden]}
    if not llama:
        tensors["embed.positions"] = [seq, hidden]
    for layer in range(layers):
        p = f"layers.{layer}."
        tensors.update({p + "ln1.weight": [hidden], p + "attn.qkv.weight": [qkv, hidden],
                        p + "attn.proj.weight": [hidden, hidden], p + "ln2.weight": [hidden]})
        if llama:
            tensors.update({p + "mlp.gate.weight": [ffn, hidden],
                            p + "mlp.up.weight": [ffn, hidden],
                            p + "mlp.down.weight": [hidden, ffn]})
        else:
            tensors.update({p + "ln1.bias": [hidden], p + "attn.qkv.bias": [qkv],
                            p + "attn.proj.bias": [hidden], p + "ln2.bias": [hidden],
                            p + "mlp.fc.weight": [ffn, hidden], p + "mlp.fc.bias": [ffn],
                            p + "mlp.proj.weight": [hidden, ffn], p + "mlp.proj.bias": [hidden]})
    tensors["final_norm.weight"] = [hidden]
    if not llama:
        tensors["final_norm.bias"] = [hidden]
    if not tied:
        tensors["output.weight"] = [vocab, hidden]
    return tensors


def check_gpt_manifest(directory, tied, llama=False, kv_heads=None):
    """The checkpoint of gpt_tiny (configs/common.place: 2 layers, hidden 64, 4 heads, ffn 4 x 64,
    vocab 128, seq 16; SGD with momentum) or of gck_llama_tiny or gqa_ck_tiny (ffn 96; Adam;
    the latter with `kv_heads` key/value heads) names each parameter tensor and its optimizer
    state with the model's shapes."""
    with open(os.path.join(directory, "manifest.json")) as file:
        manifest = json.load(file)
    want = {}
    suffixes = ["", ".exp_avg", ".exp_avg_sq"] if llama else ["", ".exp_avg"]
    for name, shape in gpt_tensors(2, 64, 96 if llama else 256, 128, 16, tied, llama,
                                   kv_heads=kv_heads).items():
        for suffix in suffixes:
            want[name + suffix] = shape
    got = {tensor["name"]: tensor["shape"] for tensor in manifest["tensors"]}
    if got != want:
        fail(f"{directory}: the manifest's tensors {sorted(got.items())} are not the model's "
             f"{sorted(want.items())}")


def mode_gpt(ctx):
    # Exact resume: tied embeddings under zero3, tp x sp and pp x zero1 (the head's copy of the
    # token embedding left out of the checkpoint and filled from it), untied under pp x zero1,
    # and the LLaMA-style model with Adam under zero1 x sp.
    tied = ("gck_zero3", "gck_sp", "gck_pp_zero1")
    for name in ["gck_zero3", "gck_sp", "gck_pp_zero1", "gck_untied_pp_zero1", "gck_llama"]:
        check_resume(ctx, name)
        check_gpt_manifest(os.path.join(ctx.path(name, "whole"), STEP4), tied=name in tied,
                           llama=name == "gck_llama")
    print("e2e: ok: the transformer's checkpoints name its tensors with the model's shapes")
    # The tied pipeline's checkpoint holds embed.tokens once, written by the first stage: each
    # element exactly once (the manifest's shards tile it) and none by the head's stage.
    with open(os.path.join(ctx.path("gck_pp_zero1", "whole"), STEP4, "manifest.json")) as file:
        manifest = json.load(file)
    tokens = next(t for t in manifest["tensors"] if t["name"] == "embed.tokens")
    pieces = sorted((shard["offset"], shard["elements"]) for shard in tokens["shards"])
    covered = 0
    for offset, elements in pieces:
        if offset != covered:
            fail(f"gck_pp_zero1: embed.tokens's shards {pieces} do not tile it once")
        covered += elements
    if covered != 128 * 64:
        fail(f"gck_pp_zero1: embed.tokens's shards cover {covered} elements, not 128 x 64")
    # Ranks 0 and 1 are the first stage (pp outermost: rank = stage x 2 + dp index).
    writers = sorted({shard["rank"] for shard in tokens["shards"]})
    if not set(writers) <= {0, 1}:
        fail(f"gck_pp_zero1: embed.tokens written by ranks {writers}, not the first stage's")
    print("e2e: ok: the tied pipeline's checkpoint holds the token embedding once, from the "
          "first stage")
    # The tied model across placements with and without the copy: zero3's checkpoint of step 2
    # continues under pp x zero1, whose checkpoint of step 3 continues under tp x sp.
    check_reshard(ctx, "gck_zero3", ["gck_pp_zero1"], {"gck_pp_zero1": "gck_sp"})
    # Resharding: zero3 on 4 ranks to tp 2 x dp 2 with sequence parallelism, pp 2 x zero1 2 and
    # one rank; tp x dp's checkpoint of step 3 continues under pp x zero1.
    check_reshard(ctx, "gck_untied_zero3",
                  ["gck_untied_sp_dp", "gck_untied_pp_zero1", "gck_untied_single"],
                  {"gck_untied_sp_dp": "gck_untied_pp_zero1"})
    # The same state in another layout, written by an independent writer: resuming from it ends
    # byte-identical to resuming from the original.
    good = os.path.join(ctx.path("gck_untied_zero3"), STEP2)
    foreign = ctx.path("foreign")
    rewrite(good, foreign)
    if ctx.inspect(foreign).returncode != 0:
        fail("placec inspect rejects the rewritten transformer checkpoint")
    ctx.train("gck_untied_single", "--steps", "3", "--resume", good, "--save",
              ctx.path("from-good"))
    ctx.train("gck_untied_single", "--steps", "3", "--resume", foreign, "--save",
              ctx.path("from-foreign"))
    same_bytes(os.path.join(ctx.path("from-good"), STEP3),
               os.path.join(ctx.path("from-foreign"), STEP3))
    print("e2e: ok: a transformer checkpoint rewritten by an independent writer resumes to the "
          "same bytes")
    # A corrupted shard: placec inspect and the program both name the checksum mismatch.
    corrupt = ctx.path("corrupt")
    shutil.copytree(good, corrupt)
    path = os.path.join(corrupt, "rank-00002.bin")
    with open(path, "r+b") as file:
        file.seek(4000)
        byte = file.read(1)
        file.seek(4000)
        file.write(bytes([byte[0] ^ 0x10]))
    listing = ctx.inspect(corrupt)
    if listing.returncode != 1 or "checksum mismatch" not in listing.stdout:
        fail("placec inspect did not find the corrupted transformer shard")
    expect_refusal(ctx, "gck_untied_zero3", corrupt, "checksum mismatch",
                   "a corrupted transformer shard")
    # The tied model's checkpoint has no output.weight: the untied model refuses it.
    expect_refusal(ctx, "gck_untied_single", os.path.join(ctx.path("gck_zero3", "whole"), STEP2),
                   "it has no tensor 'output.weight'", "a tied model's checkpoint in an untied one")


def mode_gqa(ctx):
    # Grouped-query attention (configs/checkpoint_gqa.place: hidden 64, 4 query heads of 16, 2
    # key/value heads). Exact resume under tp 2 with sequence parallelism; the manifest names
    # attn.qkv.weight [(4 + 2·2)·16, 64] = [128, 64].
    check_resume(ctx, "qck_sp")
    step4 = os.path.join(ctx.path("qck_sp", "whole"), STEP4)
    check_gpt_manifest(step4, tied=False, llama=True, kv_heads=2)
    # The qkv rows are ordered by key/value head (its 2 query heads, its key, its value: 4·16 =
    # 64 rows of 64), and tensor rank r holds kv head r's rows: rank 0 writes the tensor's
    # elements [0, 4096), rank 1 [4096, 8192).
    with open(os.path.join(step4, "manifest.json")) as file:
        manifest = json.load(file)
    qkv = next(t for t in manifest["tensors"] if t["name"] == "layers.1.attn.qkv.weight")
    got = sorted((shard["offset"], shard["elements"], shard["rank"]) for shard in qkv["shards"])
    if got != [(0, 4096, 0), (4096, 4096, 1)]:
        fail(f"the tensor ranks' pieces of layers.1.attn.qkv.weight are {got}, not one group of "
             f"rows each")
    print("e2e: ok: the grouped-query checkpoint names its tensors with the model's shapes, one "
          "group of qkv rows per tensor rank")
    # Resharding across tensor degrees: tp 2 x sp to one rank, to ZeRO-3 over 2 ranks and to
    # tp 2 x dp 2; the one rank's checkpoint of step 3 continues under tp 2.
    check_reshard(ctx, "qck_sp", ["qck_single", "qck_zero3", "qck_tp_dp"],
                  {"qck_single": "qck_tp"})
    # A multi-head model of the same dimensions has qkv rows 3·64: it refuses the checkpoint.
    expect_refusal(ctx, "qck_mha_single", os.path.join(ctx.path("qck_sp"), STEP2),
                   "tensor 'layers.0.attn.qkv.weight' has shape [128, 64] but the model's is "
                   "[192, 64]", "a grouped-query checkpoint in a multi-head model")


def mode_cp(ctx):
    # Context parallelism (configs/checkpoint_cp.place: the grouped-query model of mode gqa).
    # Exact resume under ring attention over dp 2 x cp 2; the checkpoint names the model's
    # tensors as any other layout does, and records the mesh's sequence axis.
    check_resume(ctx, "cck_ring")
    step4 = os.path.join(ctx.path("cck_ring", "whole"), STEP4)
    check_gpt_manifest(step4, tied=False, llama=True, kv_heads=2)
    with open(os.path.join(step4, "manifest.json")) as file:
        mesh = json.load(file)["mesh"]
    if mesh != [{"name": "dp", "kind": "batch", "size": 2},
                {"name": "cp", "kind": "sequence", "size": 2}]:
        fail(f"the context-parallel checkpoint records the mesh {mesh}")
    print("e2e: ok: the context-parallel checkpoint names the model's tensors and its sequence "
          "axis")
    # Without context parallelism: one rank and tp 2 x dp 2 continue the ring's checkpoint of
    # step 2; one rank's checkpoint of step 3 continues under all-to-all attention with FSDP over
    # dp x cp.
    check_reshard(ctx, "cck_ring", ["cck_single", "cck_tp_dp"], {"cck_single": "cck_a2a_fsdp"})


def mode_moe(ctx):
    # Mixtures of experts (configs/checkpoint_moe.place). Exact resume under dp 2 x ep 2; the
    # manifest records the expert axis and holds each MoE layer's routed experts as whole
    # tensors [experts, ...] (swiglu: each expert's gate rows, then its up rows).
    check_resume(ctx, "mck_ep2")
    step4 = os.path.join(ctx.path("mck_ep2", "whole"), STEP4)
    with open(os.path.join(step4, "manifest.json")) as file:
        manifest = json.load(file)
    if manifest["mesh"] != [{"name": "dp", "kind": "batch", "size": 2},
                            {"name": "ep", "kind": "expert", "size": 2}]:
        fail(f"the expert-parallel checkpoint records the mesh {manifest['mesh']}")
    shapes = {tensor["name"]: tensor["shape"] for tensor in manifest["tensors"]}
    # 4 experts of width 32 over hidden 64; the router [4, 64]; the shared expert, width 16.
    want = {"layers.0.moe.experts.up.weight": [4, 64, 64],
            "layers.0.moe.experts.down.weight": [4, 64, 32],
            "layers.1.moe.router.weight": [4, 64],
            "layers.1.moe.shared.up.weight": [32, 64],
            "layers.1.moe.shared.down.weight": [64, 16],
            "layers.1.moe.experts.up.weight.exp_avg_sq": [4, 64, 64]}
    for name, shape in want.items():
        if shapes.get(name) != shape:
            fail(f"the checkpoint has {name} {shapes.get(name)}, expected {shape}")
    print("e2e: ok: the expert-parallel checkpoint names the expert axis and whole expert tensors")
    # Other expert degrees: ep 4 and one rank continue the checkpoint of step 2; one rank's
    # checkpoint of step 3 continues under ep 4.
    check_reshard(ctx, "mck_ep2", ["mck_ep4", "mck_single"], {"mck_single": "mck_ep4"})
    # Folded experts (each tensor rank holds whole experts of its own): exact resume, then the
    # checkpoint continues with the experts split over tp and on one rank, and the split run's
    # checkpoint of step 3 continues folded.
    check_resume(ctx, "mck_fold")
    check_reshard(ctx, "mck_fold", ["mck_fold_split", "mck_fold_single"],
                  {"mck_fold_split": "mck_fold"})
    # Experts folding the sequence axis: exact resume, then the checkpoint continues with the
    # context ranks holding the same experts and on one rank, and back.
    check_resume(ctx, "mck_cfold")
    check_reshard(ctx, "mck_cfold", ["mck_cfold_split", "mck_fold_single"],
                  {"mck_cfold_split": "mck_cfold"})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--placec", required=True)
    parser.add_argument("--placert-dir", required=True)
    parser.add_argument("--mpiexec", default="mpirun")
    parser.add_argument("--place", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--mode", required=True, choices=["resume", "reshard", "bad", "faults",
                                                         "gpt", "gqa", "cp", "moe"])
    args = parser.parse_args()
    if os.path.isdir(args.work):
        shutil.rmtree(args.work)
    os.makedirs(args.work)
    ctx = Context(args)
    {"resume": mode_resume, "reshard": mode_reshard, "bad": mode_bad,
     "faults": mode_faults, "gpt": mode_gpt, "gqa": mode_gqa, "cp": mode_cp,
     "moe": mode_moe}[args.mode](ctx)


if __name__ == "__main__":
    main()
