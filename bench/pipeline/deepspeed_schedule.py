#!/usr/bin/env python3
"""Step time of DeepSpeed's pipeline engine against Megatron-LM's 1F1B, by simulation.

DeepSpeed's pipeline engine runs, on every stage, the instruction stream of its TrainSchedule
(deepspeed/runtime/pipe/schedule.py): 2·(m + p − 1) steps, each a forward or a backward by the
parity of the step and of the stage; a forward step first sends the previous micro-batch's input
gradient to the previous stage and receives this micro-batch's activation from it, a backward
step first receives this micro-batch's output gradient from the next stage and sends it the
previous micro-batch's activation. The engine's sends and receives are blocking (torch
send/recv, or a broadcast in a group of two), so each transfer starts when both stages reach it.

This script plays those streams with a forward of `tf` and a backward of `tb` seconds on every
stage and `c` seconds per transfer, and compares the step with 1F1B's (m + p − 1)·(tf + tb). It
answers whether DeepSpeed's schedule itself explains why MT-NLG's measured steps (Smith et al.
2022, bench/fidelity/holdout/smith2022-mt-nlg-530b.place) are longer than placec predicts
(docs/fidelity.md).

    python3 bench/pipeline/deepspeed_schedule.py --stages 35 --forward 0.0425 --backward 0.125 \
        --transfer 0.0014 --microbatches 240,192,160
"""

import argparse
import sys


def micro_batch_of(step, stage, stages):
    """(micro-batch, is_forward) that `stage` runs at `step` of TrainSchedule."""
    even_step, even_stage = step % 2 == 0, stage % 2 == 0
    if even_step == even_stage:
        base = step // 2 if even_step else (step - 1) // 2
        return base - stage // 2, True
    if even_step:
        return step // 2 - stages + (stage + 1) // 2, False
    return (step - 1) // 2 - stages + 1 + stage // 2, False


def instructions(stage, stages, microbatches):
    """The stage's stream: ('fwd'|'bwd'|'send_act'|'recv_act'|'send_grad'|'recv_grad', mb)."""
    stream, previous = [], -1

    def valid(mb):
        return 0 <= mb < microbatches

    for step in range(2 * (microbatches + stages - 1)):
        mb, forward = micro_batch_of(step, stage, stages)
        if forward:
            if valid(previous) and stage > 0:
                stream.append(("send_grad", previous))
            if valid(mb) and stage > 0:
                stream.append(("recv_act", mb))
        else:
            if valid(mb) and stage < stages - 1:
                stream.append(("recv_grad", mb))
            if valid(previous) and stage < stages - 1:
                stream.append(("send_act", previous))
        if valid(mb):
            stream.append(("fwd" if forward else "bwd", mb))
        previous = mb
    return stream


# Each transfer's partner: the stage it talks to and the instruction it runs there.
PARTNER = {
    "send_act": (1, "recv_act"),
    "recv_act": (-1, "send_act"),
    "send_grad": (-1, "recv_grad"),
    "recv_grad": (1, "send_grad"),
}


def simulate(stages, microbatches, forward, backward, transfer):
    streams = [instructions(s, stages, microbatches) for s in range(stages)]
    position = [0] * stages
    clock = [0.0] * stages
    while any(position[s] < len(streams[s]) for s in range(stages)):
        progressed = False
        for s in range(stages):
            while position[s] < len(streams[s]):
                kind, mb = streams[s][position[s]]
                if kind in ("fwd", "bwd"):
                    clock[s] += forward if kind == "fwd" else backward
                    position[s] += 1
                    progressed = True
                    continue
                offset, partner_kind = PARTNER[kind]
                other = s + offset
                if (position[other] < len(streams[other]) and
                        streams[other][position[other]] == (partner_kind, mb)):
                    end = max(clock[s], clock[other]) + transfer
                    clock[s] = clock[other] = end
                    position[s] += 1
                    position[other] += 1
                    progressed = True
                    continue
                break
        if not progressed:
            raise RuntimeError("the streams deadlock")
    return max(clock)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stages", type=int, required=True, help="pipeline stages p")
    parser.add_argument("--forward", type=float, required=True, help="a stage's forward, s")
    parser.add_argument("--backward", type=float, required=True, help="a stage's backward, s")
    parser.add_argument("--transfer", type=float, default=0.0, help="one send, s")
    parser.add_argument("--microbatches", required=True, help="m, comma-separated")
    args = parser.parse_args(argv)
    if args.stages < 1 or args.forward < 0 or args.backward < 0 or args.transfer < 0:
        parser.error("stages must be at least 1 and the times 0 or more")
    try:
        counts = [int(m) for m in args.microbatches.split(",")]
    except ValueError:
        parser.error("--microbatches: expected whole numbers separated by commas")
    if any(m < 1 for m in counts):
        parser.error("--microbatches: each must be at least 1")
    print(f"{'m':>6} {'DeepSpeed':>11} {'1F1B':>11} {'ratio':>7}")
    for m in counts:
        deepspeed = simulate(args.stages, m, args.forward, args.backward, args.transfer)
        one_f_one_b = (m + args.stages - 1) * (args.forward + args.backward)
        print(f"{m:>6} {deepspeed:>10.3f}s {one_f_one_b:>10.3f}s {deepspeed / one_f_one_b:>7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
