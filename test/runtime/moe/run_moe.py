#!/usr/bin/env python3
"""Runs placert-moe-mpi (MoeMpiMain.cpp) on 4 MPI ranks and checks it.

--config ep_dp|ep_dp_zero|ep_tp|ep_tp_sp|ep_tp_fold|ep_pp: trains 3 steps with --check (the single-device
reference within 1e-5) and checks the counted all-to-all bytes of the configurations with a
capacity factor against the MoE contract's formula, and of the dropless folded one their sum over
the group; the other dropless runs print theirs.
--config checkpoint: saves after 2 steps under ep = 2 (dp 2 x ep 2), resumes under ep = 4 and
ep = 1 (dp 4) up to step 4 with --check, and compares the resumed losses with an uninterrupted
ep = 2 run.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

# The end-to-end runner's MPI environment: root allowed, oversubscription, leak checking off for
# the ranks, and a session directory of this test's own (two mpiruns at once under ctest -j must
# not share Open MPI's per-user one).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "e2e"))
from run_e2e import mpi_env  # noqa: E402


def train(args, config, extra, metrics):
    command = [args.mpiexec, "--oversubscribe", "-np", "4", args.program, "--config", config,
               "--metrics", metrics, "--timeout", "60", "--quiet"] + extra
    result = subprocess.run(command, env=mpi_env(), capture_output=True, text=True)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    if result.returncode != 0:
        sys.exit(f"FAILED: {' '.join(command)} exited with {result.returncode}")
    with open(metrics) as file:
        return json.load(file)


def expert_all_to_all_bytes(metrics, phase, axes):
    """Per rank: the bytes of the all-to-alls over the expert group's axes in a phase, per step."""
    totals = []
    for rank in metrics["per_rank"]:
        totals.append(sum(entry["total_bytes"] for entry in rank["communication"]
                          if entry["collective"] == "all-to-all" and entry["axis"] == axes
                          and entry["phase"] == phase))
    return totals


# The expert group's axes: folded experts exchange over the expert and tensor axes.
GROUP_AXES = {"ep_tp_fold": "ep,tp"}

# Dropless routing's chunks depend on the routing, but the buffers each rank sends whole do not:
# a dispatch is the rank's T * top_k routed rows and the backward's first exchange the same
# layout, while the combine and the backward's second exchange send back what the rank's experts
# received, which summed over the group is what the group dispatched. Summed over the 4 ranks per
# step and direction, with R = T * top_k * hidden * 4 bytes a rank's dispatch:
#   ep_tp_fold: each tensor rank routes T = 2 * 8 / 2 = 8 tokens, R = 8 * 2 * 16 * 4 = 1024; two
#   MoE layers; forward 2 * (4 * 2 * 1024 + 4 * 16) = 16512 (the row counts' all-to-all, 4
#   experts in fp32 a rank, counted with them), backward 2 * 4 * 2 * 1024 = 16384.
EXPECTED_SUM = {
    "ep_tp_fold": {"forward": 16512, "backward": 16384},
}


# The all-to-all bytes of one rank per step and direction (forward or backward) in the
# configurations with a capacity factor, from the contract: each exchange is a rank's whole buffer
# of experts * C * hidden fp32 values, C = ceil(c * tokens * top_k / experts) (the contract's
# tokens * top_k * c * hidden when that is whole), two exchanges (dispatch, combine) per MoE
# layer per micro-batch and direction.
#   ep_dp: tokens = 1 * 8, C = ceil(2 * 8 * 2 / 4) = 8; 4 * 8 * 16 * 4 = 2048 bytes per
#          exchange; 2 MoE layers x 2 micro-batches x 2 exchanges = 16384.
#   ep_tp: tokens = 2 * 8, C = ceil(4 * 16 * 1 / 4) = 16; 4 * 16 * 16 * 4 = 4096 bytes; one
#          MoE layer (layer 1), 1 micro-batch, 2 exchanges = 8192.
#   ep_tp_sp: tokens = 16, C = ceil(2 * 16 * 2 / 4) = 16; 4096 bytes; layers 0 and 1 are MoE, 2
#          exchanges: 16384 forward; the backward adds the full recomputation's 16384 to its own.
EXPECTED = {
    "ep_dp": {"forward": 16384, "backward": 16384},
    "ep_tp": {"forward": 8192, "backward": 8192},
    "ep_tp_sp": {"forward": 16384, "backward": 32768},
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--program", required=True)
    parser.add_argument("--mpiexec", default="mpirun")
    parser.add_argument("--config", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)

    if args.config != "checkpoint":
        metrics = train(args, args.config, ["--steps", "3", "--check"],
                        os.path.join(args.work, "metrics.json"))
        if not metrics["check"]["passed"]:
            sys.exit("FAILED: the run differs from the single-device reference")
        axes = GROUP_AXES.get(args.config, "ep")
        for phase in ("forward", "backward"):
            counted = expert_all_to_all_bytes(metrics, phase, axes)
            if args.config in EXPECTED:
                want = EXPECTED[args.config][phase]
                if any(value != want for value in counted):
                    sys.exit(f"FAILED: {phase} all-to-all bytes per rank {counted}, expected "
                             f"{want} on every rank")
            if args.config in EXPECTED_SUM:
                want = EXPECTED_SUM[args.config][phase]
                if not math.isclose(sum(counted), want, rel_tol=1e-9):
                    sys.exit(f"FAILED: {phase} all-to-all bytes per rank {counted}, summing to "
                             f"{sum(counted)}, expected {want} over the group")
            print(f"{args.config}: {phase} all-to-all over {axes}, bytes per rank per step: "
                  f"{counted}")
        print(f"{args.config}: ok, losses {metrics['losses']}")
        return

    ckpt = os.path.join(args.work, "ckpt")
    whole = train(args, "ckpt_ep2", ["--steps", "4", "--check"],
                  os.path.join(args.work, "whole.json"))
    train(args, "ckpt_ep2", ["--steps", "2", "--save", ckpt],
          os.path.join(args.work, "first.json"))
    for config in ("ckpt_ep4", "ckpt_ep1"):
        resumed = train(args, config, ["--steps", "4", "--resume", ckpt, "--check"],
                        os.path.join(args.work, config + ".json"))
        if resumed["first_step"] != 2 or not resumed["check"]["passed"]:
            sys.exit(f"FAILED: {config} did not resume at step 2 equal to one device")
        for got, want in zip(resumed["losses"], whole["losses"][2:]):
            if not math.isclose(got, want, rel_tol=1e-5):
                sys.exit(f"FAILED: {config} resumed losses {resumed['losses']}, the uninterrupted "
                         f"run's {whole['losses'][2:]}")
        print(f"{config}: resumed from ep = 2 at step 2, losses {resumed['losses']}")


if __name__ == "__main__":
    main()
