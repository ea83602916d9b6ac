#!/usr/bin/env python3
"""Per-step times of MLPerf Training runs, from their result logs.

The MLPerf rows of bench/fidelity/holdout (mlperf-*.place) take their measured step from the
result logs of mlcommons/training_results_v<round>. Each log is a sequence of `:::MLLOG` JSON
records; training runs in blocks between `block_start` and `block_stop`, with the evaluations
outside them. A block's steps are its tokens over global_batch_size × sequence:
- rounds 3.1 to 4.1 (GPT-3): the block's `epoch_count` metadata, in tokens;
- round 5.0 (Llama 3.1 405B): the difference of `samples_count` between the block's start and
  the evaluation after it, in sequences.
Round 5.1's logs of NVIDIA's NeMo code record each step's time as well (`tracked_stats`,
train_step_time, up to every step); for those the script writes each run's number of timed steps
and their median, not every step (thousands a run). AMD's round 5.1 logs record no step's time
(their `tracked_stats` give a block's samples per second): their blocks are timed as round 5.0's.
Round 6.0's NeMo logs close every block with its mean step time (a `tracked_stats` record holding
train_step_time alone, beside the single steps' records that hold the loss too); for those the
script writes each run's block means, as the seconds per step of its blocks, and times the blocks
of a log that holds no such record as round 5.0's.

This script reads the logs from local clones of the results repositories and writes, for every
run of the systems listed in SYSTEMS, the time per step of each of its blocks (blocks.json).
test/lit/report/mlperf-steps.test recomputes each row's measured_step from that file (the mean
over a system's runs of each run's median block) and checks it against the .place files.

    python3 bench/fidelity/mlperf/extract.py v3.1=DIR v4.0=DIR v4.1=DIR v5.0=DIR v5.1=DIR \
        > blocks.json
    python3 bench/fidelity/mlperf/extract.py --keep=blocks.json v5.1=DIR > new.json

DIR is a clone of github.com/mlcommons/training_results_v<round> (any checkout: the logs are read
from its HEAD with `git show`); the v6.0 entries were read from its copy
github.com/Richardyu114/training_results_v6.0 at commit eabf23a07b2a0c60a289ff871dc3a46fff0d0421,
whose NVIDIA/ tree is the round's, three runs of each system. With --keep=FILE, the systems of
rounds given no clone keep their entries of FILE (an earlier output of this script).
"""

import json
import statistics
import subprocess
import sys

# The logs read of a system whose runs were not all read.
FIRST_THREE = ("result_0.txt", "result_1.txt", "result_2.txt")

# (round, results directory of the system, sequence length, the .place row it measures[, the logs
# read: all of the directory's when not given])
SYSTEMS = [
    ("v3.1", "NVIDIA/results/eos_n64_ngc23.09_nemo/gpt3", 2048, "mlperf31_gpt3_512"),
    ("v3.1", "NVIDIA/results/eos_n96_ngc23.09_nemo/gpt3", 2048, "mlperf31_gpt3_768"),
    ("v3.1", "NVIDIA/results/eos-dfw_n512_ngc23.09_nemo/gpt3", 2048, "mlperf31_gpt3_4096"),
    ("v3.1", "NVIDIA/results/eos-dfw_n768_ngc23.09_nemo/gpt3", 2048, "mlperf31_gpt3_6144"),
    ("v3.1", "NVIDIA/results/eos-dfw_n1024_ngc23.09_nemo/gpt3", 2048, "mlperf31_gpt3_8192"),
    ("v3.1", "NVIDIA/results/eos-dfw_n1280_ngc23.09_nemo/gpt3", 2048, "mlperf31_gpt3_10240"),
    ("v3.1", "NVIDIA/results/eos-dfw_n1344_ngc23.09_nemo/gpt3", 2048, "mlperf31_gpt3_10752"),
    ("v3.1", "Azure+NVIDIA/results/ND_H100_v5_n1344_pytorch/gpt3", 2048,
     "mlperf31_gpt3_10752_azure"),
    ("v4.0", "NVIDIA/results/eos_n64_ngc24.04_nemo/gpt3", 2048, "mlperf_gpt3_512"),
    ("v4.0", "NVIDIA/results/eos-dfw_n1344_ngc24.04_nemo/gpt3", 2048, "mlperf_gpt3_10752"),
    ("v4.0", "NVIDIA/results/eos-dfw_n1452_ngc24.04_nemo/gpt3", 2048, "mlperf_gpt3_11616"),
    ("v4.1", "NVIDIA/results/eos_n32_ngc24.09_nemo/gpt3", 2048, "mlperf_gpt3_256"),
    ("v4.1", "NVIDIA/results/eos_n64_ngc24.09_nemo/gpt3", 2048, "mlperf_gpt3_512_v41"),
    ("v4.1", "NVIDIA/results/b200_n8_preview_nemo/gpt3", 2048, "mlperf_gpt3_b200_64"),
    ("v5.0", "NVIDIA/results/eos-dfw_n64_ngc25.01_nemo/llama31_405b", 8192,
     "mlperf50_llama405b_512"),
    ("v5.0", "NVIDIA/results/eos-dfw_n256_ngc25.01_nemo/llama31_405b", 8192,
     "mlperf50_llama405b_2048"),
    ("v5.0", "NVIDIA/results/eos-dfw_n304_ngc25.01_nemo/llama31_405b", 8192,
     "mlperf50_llama405b_2432"),
    ("v5.0", "NVIDIA/results/eos-dfw_n320_ngc25.01_nemo/llama31_405b", 8192,
     "mlperf50_llama405b_2560"),
    ("v5.0", "NVIDIA/results/eos-dfw_n1024_ngc25.01_nemo/llama31_405b", 8192,
     "mlperf50_llama405b_8192"),
    ("v5.1", "University-of-Florida/results/hpg.dgxb200x8.n32/llama31_405b", 8192,
     "mlperf51_llama405b_b200_256"),
    ("v5.1", "University-of-Florida/results/hpg.dgxb200x8.n56/llama31_405b", 8192,
     "mlperf51_llama405b_b200_448"),
    ("v5.1", "NVIDIA/results/theia_ngpu512_ngc25.09_nemo/llama31_405b", 8192,
     "mlperf51_llama405b_gb300_512"),
    ("v5.1", "NVIDIA/results/tyche_ngpu512_ngc25.09_nemo/llama31_405b", 8192,
     "mlperf51_llama405b_gb200_512"),
    ("v5.1", "NVIDIA/results/hsg_ngpu2560_ngc25.09_nemo/llama31_405b", 8192,
     "mlperf51_llama405b_gb200_2560"),
    ("v5.1", "NVIDIA/results/hsg_ngpu5120_ngc25.09_nemo/llama31_405b", 8192,
     "mlperf51_llama405b_gb200_5120"),
    ("v5.1", "University-of-Florida/results/hpg.dgxb200x8.n1/llama31_8b", 8192,
     "mlperf51_llama8b_b200_8"),
    ("v5.1", "University-of-Florida/results/hpg.dgxb200x8.n8/llama31_8b", 8192,
     "mlperf51_llama8b_b200_64"),
    ("v5.1", "Cisco/results/hpf_n8/llama31_8b", 8192, "mlperf51_llama8b_h100_64"),
    ("v5.1", "Cisco/results/hpf_n16/llama31_8b", 8192, "mlperf51_llama8b_h100_128"),
    ("v5.1", "NVIDIA/results/tyche_ngpu72_ngc25.09_nemo/llama31_8b", 8192,
     "mlperf51_llama8b_gb200_72"),
    ("v5.1", "NVIDIA/results/theia_ngpu72_ngc25.09_nemo/llama31_8b", 8192,
     "mlperf51_llama8b_gb300_72"),
    ("v5.1", "NVIDIA/results/tyche_ngpu512_ngc25.09_nemo/llama31_8b", 8192,
     "mlperf51_llama8b_gb200_512"),
    ("v5.1", "NVIDIA/results/theia_ngpu512_ngc25.09_nemo/llama31_8b", 8192,
     "mlperf51_llama8b_gb300_512"),
    ("v5.1", "Dell/results/1xXE9780x8B300-SXM-270GB/llama31_8b", 8192, "mlperf51_llama8b_b300_8"),
    ("v5.1", "Dell/results/2xXE9680Lx8B200-SXM-180GB/llama31_8b", 8192,
     "mlperf51_llama8b_b200_16_xe9680l"),
    ("v5.1", "Dell/results/2xXE9685Lx8B200-SXM-180GB/llama31_8b", 8192,
     "mlperf51_llama8b_b200_16_xe9685l"),
    ("v5.1", "AMD/results/MI355X_EPYC_9575F_pytorch/llama31_8b", 8192, "mlperf51_llama8b_mi355x_8"),
    ("v5.1", "AMD/results/MI350X_EPYC_9575F_pytorch/llama31_8b", 8192, "mlperf51_llama8b_mi350x_8"),
    ("v5.1", "NVIDIA/results/tyche_ngpu8_ngc25.09_nemo/llama31_8b", 8192,
     "mlperf51_llama8b_gb200_8_nvfp4"),
    ("v5.1", "NVIDIA/results/theia_ngpu8_ngc25.09_nemo/llama31_8b", 8192,
     "mlperf51_llama8b_gb300_8_nvfp4"),
    ("v5.1", "Dell/results/1xXE9680Lx8B200-SXM-180GB/llama31_8b", 8192,
     "mlperf51_llama8b_b200_8_xe9680l_nvfp4"),
    ("v5.1", "Lenovo/results/SR680aV4-8xB300_SXM/llama31_8b", 8192,
     "mlperf51_llama8b_b300_8_sr680a_nvfp4"),
    ("v6.0", "NVIDIA/results/theia_ngpu72_ngc26.04_nemo/llama31_8b", 8192,
     "mlperf60_llama8b_gb300_72", FIRST_THREE),
    ("v6.0", "NVIDIA/results/theia_ngpu512_ngc26.04_nemo/llama31_8b", 8192,
     "mlperf60_llama8b_gb300_512", FIRST_THREE),
    ("v6.0", "NVIDIA/results/tyche-hsg_ngpu1024_ngc26.04_nemo/llama31_8b", 8192,
     "mlperf60_llama8b_gb200_1024", FIRST_THREE),
    ("v6.0", "NVIDIA/results/theia-cmh_ngpu512_ngc26.04_nemo/llama31_405b", 8192,
     "mlperf60_llama405b_gb300_512"),
    ("v6.0", "NVIDIA/results/theia-cmh_ngpu2048_ngc26.04_nemo/llama31_405b", 8192,
     "mlperf60_llama405b_gb300_2048"),
    ("v6.0", "NVIDIA/results/theia_ngpu72_ngc26.04_nemo/gpt_oss_20b", 8192,
     "mlperf60_gptoss20b_gb300_72", FIRST_THREE),
    ("v6.0", "NVIDIA/results/theia_ngpu512_ngc26.04_nemo/gpt_oss_20b", 8192,
     "mlperf60_gptoss20b_gb300_512", FIRST_THREE),
    ("v6.0", "NVIDIA/results/theia_ngpu256_ngc26.04_nemo/deepseekv3_671b", 4096,
     "mlperf60_dsv3_gb300_256"),
    ("v6.0", "NVIDIA/results/theia_ngpu512_ngc26.04_nemo/deepseekv3_671b", 4096,
     "mlperf60_dsv3_gb300_512"),
    ("v6.0", "NVIDIA/results/theia_ngpu8_ngc26.04_nemo/llama31_8b", 8192,
     "mlperf60_llama8b_gb300_8", FIRST_THREE),
    ("v6.0", "NVIDIA/results/tyche-hsg_ngpu72_ngc26.04_nemo/gpt_oss_20b", 8192,
     "mlperf60_gptoss20b_gb200_72", FIRST_THREE),
    ("v6.0", "NVIDIA/results/theia_ngpu8_ngc26.04_nemo/gpt_oss_20b", 8192,
     "mlperf60_gptoss20b_gb300_8", FIRST_THREE),
    ("v6.0", "NVIDIA/results/tyche-hsg_ngpu512_ngc26.04_nemo/deepseekv3_671b", 4096,
     "mlperf60_dsv3_gb200_512"),
    ("v6.0", "NVIDIA/results/tyche-hsg_ngpu2048_ngc26.04_nemo/deepseekv3_671b", 4096,
     "mlperf60_dsv3_gb200_2048"),
    ("v6.0", "NVIDIA/results/tyche-hsg_ngpu4096_ngc26.04_nemo/deepseekv3_671b", 4096,
     "mlperf60_dsv3_gb200_4096"),
    ("v6.0", "NVIDIA/results/tyche-hsg_ngpu8192_ngc26.04_nemo/deepseekv3_671b", 4096,
     "mlperf60_dsv3_gb200_8192"),
    ("v6.0", "NVIDIA/results/tyche-hsg_ngpu8_ngc26.04_nemo/gpt_oss_20b", 8192,
     "mlperf60_gptoss20b_gb200_8", FIRST_THREE),
]

# Rounds whose logs time every step (tracked_stats' train_step_time): their steps, not blocks.
STEP_ROUNDS = {"v5.1"}
# Rounds whose logs give each block's mean step time: those means are its blocks' steps.
BLOCK_MEAN_ROUNDS = {"v6.0"}


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True,
                          text=True).stdout


def records(text):
    for line in text.splitlines():
        if ":::MLLOG" in line:
            yield json.loads(line.split(":::MLLOG", 1)[1])


def block_steps(text, sequence):
    """The global batch and the seconds per step of each training block of one log."""
    batch = None
    blocks = []
    start = start_samples = tokens = stopped = None
    for record in records(text):
        key, meta = record["key"], record.get("metadata", {})
        if key == "global_batch_size":
            batch = record["value"]
        elif key == "block_start":
            start, tokens, start_samples = record["time_ms"], meta.get("epoch_count"), \
                meta.get("samples_count")
        elif key == "block_stop":
            seconds = (record["time_ms"] - start) / 1000
            if tokens is not None:
                blocks.append(seconds / (tokens / (batch * sequence)))
            else:
                stopped = seconds
        elif key == "eval_start" and stopped is not None:
            blocks.append(stopped / ((meta["samples_count"] - start_samples) / batch))
            stopped = None
    return batch, blocks


def tracked_steps(text):
    """The global batch and every step's train_step_time of one log."""
    batch = None
    steps = []
    for record in records(text):
        if record["key"] == "global_batch_size":
            batch = record["value"]
        elif record["key"] == "tracked_stats" and isinstance(record["value"], dict) and \
                "train_step_time" in record["value"]:
            steps.append(record["value"]["train_step_time"])
    return batch, steps


def block_means(text):
    """The global batch and each training block's mean train_step_time of one log."""
    batch = None
    means = []
    for record in records(text):
        value = record["value"]
        if record["key"] == "global_batch_size":
            batch = value
        elif record["key"] == "tracked_stats" and isinstance(value, dict) and \
                set(value) == {"train_step_time"}:
            means.append(value["train_step_time"])
    return batch, means


def main(argv):
    kept = {}
    clones = {}
    for arg in argv:
        if arg.startswith("--keep="):
            with open(arg[len("--keep="):]) as f:
                kept = {system["run"]: system for system in json.load(f)}
        else:
            round_, _, directory = arg.partition("=")
            clones[round_] = directory
    out = []
    for round_, directory, sequence, run, *logs in SYSTEMS:
        if round_ not in clones:
            if run not in kept:
                sys.exit(f"extract.py: no clone of {round_} given, and {run} is not kept")
            out.append(kept[run])
            continue
        repo = clones[round_]
        files = sorted(f for f in git(repo, "ls-tree", "--name-only", "HEAD", directory + "/")
                       .split() if f.endswith(".txt") and
                       (not logs or f.split("/")[-1] in logs[0]))
        runs = []
        for path in files:
            text = git(repo, "show", "HEAD:" + path)
            batch, steps = tracked_steps(text) if round_ in STEP_ROUNDS else (None, [])
            if steps:
                runs.append({"log": path.split("/")[-1], "global_batch": batch,
                             "timed_steps": len(steps),
                             "median_step_seconds": round(statistics.median(steps), 5)})
                continue
            batch, blocks = block_means(text) if round_ in BLOCK_MEAN_ROUNDS else (None, [])
            if not blocks:
                batch, blocks = block_steps(text, sequence)
            runs.append({"log": path.split("/")[-1], "global_batch": batch,
                         "step_seconds": [round(b, 5) for b in blocks]})
        out.append({"round": round_, "system": directory, "sequence": sequence, "run": run,
                    "runs": runs})
    # One line per run: the file stays readable and diffs by run.
    lines = []
    for system in out:
        head = {key: value for key, value in system.items() if key != "runs"}
        runs = ",\n".join("  " + json.dumps(run, separators=(",", ":")) for run in system["runs"])
        lines.append(json.dumps(head)[:-1] + ', "runs": [\n' + runs + "\n]}")
    sys.stdout.write("[\n" + ",\n".join(lines) + "\n]\n")


if __name__ == "__main__":
    main(sys.argv[1:])
