#!/usr/bin/env python3
"""Step time of DualPipeV by simulation, against placec's bubble formula.

DualPipeV (deepseek-ai/DualPipe, dualpipe/dualpipev.py; Sea AI Lab's "cut-in-half" of DeepSeek-V3's
DualPipe) runs 2p pipeline stages on p ranks: rank r holds stage r (phase 0) and stage 2p − 1 − r
(phase 1), so a micro-batch goes down the ranks in phase 0 and back up in phase 1, the loss on
rank 0. Each rank runs the eight steps of `DualPipeV.step`: forwards of phase 0, forwards of both
phases, backward-weight-forward triples with the weight gradient deferred (zero bubble), the main
step of overlapped forward and backward chunks, and the cool-down of backwards and deferred weight
gradients. The DualPipe README gives its bubble, for PP stages on PP/2 devices, as
(PP/2 − 1)(F&B + B − 3W), with F a forward chunk, B a *full* backward chunk (input and weight
gradients), W its weight-gradient part and F&B a forward and a backward chunk run side by side.

This script plays each rank's stream of chunk passes with a forward F, an input-gradient backward
B and a weight-gradient pass W per chunk (a full backward B + W, a forward beside a full backward
F + B + W), every transfer free, and prints the step, the bubble (the step less a rank's 2m chunk
passes of work), placec's formula (cost::getBubbleSeconds), the README's with PP = 2p, and the
formula placec used before 2026-12-06 (the README's read over p/2 − 1 ranks with the
input-gradient B):

    python3 bench/pipeline/dualpipev_schedule.py --ranks 2,4,8 --microbatches 16,32 \\
        --forward 1 --backward 1 --weight 1
"""

import argparse
import sys


def rank_stream(rank, ranks, microbatches):
    """The rank's passes in order, as DualPipeV.step runs them: ('F', phase), ('B', phase, zb),
    ('W',) or ('FB', phase0, phase1) (a forward of phase0 beside a full backward of phase1)."""
    last = rank == ranks - 1
    stream = []
    stream += [("F", 0)] * ((ranks - rank - 1) * 2)                       # step 1: nF0
    for _ in range(rank + 1):                                             # step 2: nF0F1
        stream += [("F", 0), ("F", 1)]
    for _ in range(ranks - rank - 1):                                     # step 3: nB1W1F1
        stream += [("B", 1, True), ("W",), ("F", 1)]
    for i in range(microbatches - ranks * 2 + rank + 1):                  # step 4: nF0B1F1B0
        if i == 0 and last:
            stream += [("F", 0), ("B", 1, False)]    # not overlapped on the last rank
        else:
            stream.append(("FB", 0, 1))
        stream.append(("FB", 1, 0))
    for _ in range(ranks - rank - 1):                                     # step 5: nB1F1B0
        stream += [("B", 1, False), ("FB", 1, 0)]
    zb = False                                                            # step 6: nB1B0
    steps = rank + 1
    for i in range(steps):
        if i == steps // 2 and rank % 2 == 1:
            zb = True
        stream.append(("B", 1, zb))
        if i == steps // 2 and rank % 2 == 0:
            zb = True
        stream.append(("B", 0, zb))
    for _ in range(ranks - rank - 1):                                     # step 7: nWB0
        stream += [("W",), ("B", 0, True)]
    stream += [("W",)] * (rank + 1)                                       # step 8: nW
    return stream


def simulate(ranks, microbatches, forward, backward, weight, pair):
    """Finish time of the step: each rank runs its stream in order, each pass when its input is
    ready (the previous stage's forward, the next stage's backward, the loss after the last
    stage's forward)."""
    stages = 2 * ranks
    streams = [rank_stream(r, ranks, microbatches) for r in range(ranks)]
    position = [0] * ranks
    clock = [0.0] * ranks
    counters = [{("F", 0): 0, ("F", 1): 0, ("B", 0): 0, ("B", 1): 0} for _ in range(ranks)]
    deferred = [[] for _ in range(ranks)]
    done = {}  # ('F'|'B', micro-batch, stage) -> finish time

    def stage_of(rank, phase):
        return rank if phase == 0 else stages - 1 - rank

    def ready(kind, rank, phase):
        mb = counters[rank][(kind, phase)]
        stage = stage_of(rank, phase)
        if kind == "F":
            need = ("F", mb, stage - 1) if stage > 0 else None
        else:
            need = ("F", mb, stage) if stage == stages - 1 else ("B", mb, stage + 1)
        if need is None:
            return 0.0
        return done.get(need)

    remaining = sum(len(s) for s in streams)
    while remaining:
        progressed = False
        for r in range(ranks):
            while position[r] < len(streams[r]):
                op = streams[r][position[r]]
                if op[0] == "W":
                    deferred[r].pop(0)
                    clock[r] += weight
                elif op[0] in ("F", "B"):
                    start = ready(op[0], r, op[1])
                    if start is None:
                        break
                    mb = counters[r][(op[0], op[1])]
                    counters[r][(op[0], op[1])] += 1
                    if op[0] == "F":
                        duration = forward
                    else:
                        duration = backward + (0 if op[2] else weight)
                        if op[2]:
                            deferred[r].append(mb)
                    clock[r] = max(clock[r], start) + duration
                    done[(op[0], mb, stage_of(r, op[1]))] = clock[r]
                else:
                    f_ready, b_ready = ready("F", r, op[1]), ready("B", r, op[2])
                    if f_ready is None or b_ready is None:
                        break
                    f_mb, b_mb = counters[r][("F", op[1])], counters[r][("B", op[2])]
                    counters[r][("F", op[1])] += 1
                    counters[r][("B", op[2])] += 1
                    clock[r] = max(clock[r], f_ready, b_ready) + pair
                    done[("F", f_mb, stage_of(r, op[1]))] = clock[r]
                    done[("B", b_mb, stage_of(r, op[2]))] = clock[r]
                position[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            sys.exit("deadlock: the streams wait on each other")
    for r in range(ranks):
        assert not deferred[r] and all(n == microbatches for n in counters[r].values()), r
    return max(clock)


def placec_bubble(p, f, b, w):
    """cost::getBubbleSeconds for DualPipeV, communication free, on chunk times."""
    return (p - 1) * max(0.0, b - w) + max((p - 2) * f + (p - 1) * b, 2 * (p - 1) * f)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="2,4,8")
    parser.add_argument("--microbatches", default="16,32")
    parser.add_argument("--forward", type=float, default=1.0)
    parser.add_argument("--backward", type=float, default=1.0, help="input-gradient backward")
    parser.add_argument("--weight", type=float, default=1.0, help="weight-gradient pass")
    args = parser.parse_args()
    f, b, w = args.forward, args.backward, args.weight
    print(f"chunk passes: F {f}, B {b}, W {w}")
    print(f"{'p':>3} {'m':>4} {'step':>9} {'bubble':>8} {'placec':>8} {'README':>8} {'before':>8}")
    for p in (int(x) for x in args.ranks.split(",")):
        for m in (int(x) for x in args.microbatches.split(",")):
            if m < 2 * p:
                continue
            step = simulate(p, m, f, b, w, f + b + w)
            bubble = step - 2 * m * (f + b + w)
            readme = (p - 1) * (f + b + w + (b + w) - 3 * w)
            before = (p / 2 - 1) * max(0.0, 2 * f + 2 * 2 * b - 3 * 2 * w) / 2
            print(f"{p:>3} {m:>4} {step:>9.2f} {bubble:>8.2f} {placec_bubble(p, f, b, w):>8.2f} "
                  f"{readme:>8.2f} {before:>8.2f}")


if __name__ == "__main__":
    main()
