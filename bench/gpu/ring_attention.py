#!/usr/bin/env python3
"""One context-parallel rank's attention work, on one GPU, for placec's cost model (docs/plan.md,
"Compute"; docs/fidelity.md, the long-context rows).

Under context parallelism of degree c with PyTorch's ring attention (torchtitan's `context_parallel`
over `torch.distributed.tensor.experimental._attention`, load-balanced, keys and values all-gathered
or passed round), each rank holds L local tokens (two chunks of L/2, one from each end of the
sequence) and runs, per layer and pass, c attention kernels instead of one:

  step 0          the local queries against the local keys, causal (L × L);
  step i ≤ rank   all local queries against the first chunk of rank (rank − i)'s keys (L × L/2);
  step i > rank   the second local chunk of queries against all of that rank's keys (L/2 × L);

so every rank computes the same c/2 blocks of L × L, the work of causal attention over c·L keys.
Between the steps it merges each block's output into a running fp32 output by the blocks'
log-sum-exps (out − sigmoid(lse_b − lse)·(out − out_b); Zhu, ring-flash-attention #34), and in the
backward accumulates the query, key and value gradients in fp32, concatenating K and V (and their
gradients) into one buffer per step to pass on.

This script runs that sequence for one rank with stand-in tensors for the other ranks' keys and
values, no communication, and times, with CUDA events:
  kernels    the c attention kernels of a forward and of a backward alone;
  ring       the same with the merges, accumulations and concatenations, eager (one PyTorch kernel
             per operator);
  reference  one causal kernel over the queries and c·L keys with the same FLOPs (the fused
             attention placec times by shape), forward and backward.

  python3 bench/gpu/ring_attention.py --local 32768 --heads 32,16 --cp 1,2,4,8 --out DIR

Needs only PyTorch (FlashAttention-2 through aten._scaled_dot_product_flash_attention, as
PyTorch's context parallelism calls it).
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels import HoldTimer, Timer, log, smi  # noqa: E402

aten = torch.ops.aten


def flash_forward(q, k, v, causal):
    """The kernel's output, log-sum-exp, and what its backward takes back (sequence offsets,
    lengths and the dropout generator's state), as aten returns them."""
    out = aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False)
    return out[0], out[1], out[2:8]


def flash_backward(grad, q, k, v, out, lse, causal, saved):
    cum_q, cum_k, max_q, max_k, seed, offset = saved
    return aten._scaled_dot_product_flash_attention_backward(
        grad, q, k, v, out, lse, cum_q, cum_k, max_q, max_k, 0.0, causal, seed, offset)


def heads_first(b, s, h, d, dev):
    """A [b, h, s, d] view of a [b, s, h, d] tensor, as a Llama layer hands attention its inputs."""
    return torch.randn(b, s, h, d, device=dev, dtype=torch.bfloat16).transpose(1, 2)


def block(rank, i, q, k, v):
    """The queries and keys of step i on `rank` (load-balanced), whether causal, whether partial
    (only the second chunk of queries)."""
    if i == 0:
        return q, k, v, True, False
    if i <= rank:
        return q, k.chunk(2, dim=2)[0], v.chunk(2, dim=2)[0], False, False
    return q.chunk(2, dim=2)[1], k, v, False, True


def replace_second_half(full, half, add):
    chunks = list(full.chunk(2, dim=2))
    chunks[1] = chunks[1] + half if add else half
    return torch.cat(chunks, dim=2)


class Rank:
    def __init__(self, cp, rank, local, heads, d, dev):
        self.cp, self.rank = cp, rank
        self.q = heads_first(1, local, heads, d, dev)
        # Stand-ins for every rank's keys and values (index 0: this rank's own).
        self.kv = [(heads_first(1, local, heads, d, dev), heads_first(1, local, heads, d, dev))
                   for _ in range(cp)]
        self.saved = []
        out, lse = self.forward(ring=True, keep=True)
        self.out = out.to(torch.bfloat16)
        self.lse = lse
        self.grad = torch.randn_like(self.out)

    def forward(self, ring, keep=False):
        out = lse = None
        for i in range(self.cp):
            k, v = self.kv[i]
            if ring and i < self.cp - 1:
                torch.cat([k.flatten(), v.flatten()])  # the buffer passed to the next rank
            q, kb, vb, causal, partial = block(self.rank, i, self.q, k, v)
            o, l, saved = flash_forward(q, kb, vb, causal)
            if keep:
                self.saved.append(saved)
            if not ring:
                continue
            o, l = o.float(), l.unsqueeze(-1)
            if out is None:
                out, lse = o, l
                continue
            cur_o = out.chunk(2, dim=2)[1] if partial else out
            cur_l = lse.chunk(2, dim=2)[1] if partial else lse
            new_o = cur_o - torch.sigmoid(l - cur_l) * (cur_o - o)
            new_l = cur_l - F.logsigmoid(cur_l - l)
            if partial:
                out = replace_second_half(out, new_o, add=False)
                lse = replace_second_half(lse, new_l, add=False)
            else:
                out, lse = new_o, new_l
        if not ring:
            return None, None
        return out, lse.squeeze(-1)

    def backward(self, ring):
        dq = torch.zeros_like(self.q, dtype=torch.float32) if ring else None
        dk = dv = None
        for i in range(self.cp):
            k, v = self.kv[i]
            if ring and i < self.cp - 1:
                torch.cat([k.flatten(), v.flatten()])
            q, kb, vb, causal, partial = block(self.rank, i, self.q, k, v)
            out = self.out.chunk(2, dim=2)[1] if partial else self.out
            grad = self.grad.chunk(2, dim=2)[1] if partial else self.grad
            lse = self.lse.chunk(2, dim=2)[1].contiguous() if partial else self.lse
            gq, gk, gv = flash_backward(grad, q, kb, vb, out, lse, causal, self.saved[i])
            if not ring:
                continue
            if i == 0:
                dk, dv = gk.float(), gv.float()
            else:
                # The gradients that arrived for this block's keys, accumulated in fp32.
                dk = torch.zeros_like(k, dtype=torch.float32)
                dv = torch.zeros_like(v, dtype=torch.float32)
                if i <= self.rank:
                    chunks_k, chunks_v = list(dk.chunk(2, dim=2)), list(dv.chunk(2, dim=2))
                    chunks_k[0] = chunks_k[0] + gk
                    chunks_v[0] = chunks_v[0] + gv
                    dk, dv = torch.cat(chunks_k, dim=2), torch.cat(chunks_v, dim=2)
                else:
                    dk += gk
                    dv += gv
            torch.cat([dk.flatten(), dv.flatten()])  # the gradients passed on
            if partial:
                dq = replace_second_half(dq, gq, add=True)
            else:
                dq += gq
        if ring:
            dq.to(torch.bfloat16)
            dk.to(torch.bfloat16)
            dv.to(torch.bfloat16)


def attention_flops(heads, queries, keys, d, causal):
    return 4.0 * heads * queries * keys * d * (0.5 if causal else 1.0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local", type=int, default=32768, help="tokens per rank")
    parser.add_argument("--heads", default="32,16", help="attention heads per rank, comma-separated")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--cp", default="1,2,4,8", help="context-parallel degrees")
    parser.add_argument("--hold", type=float, default=0.0,
                        help="time back to back for this many seconds (HoldTimer) instead of bursts")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    dev = torch.device("cuda")
    os.makedirs(args.out, exist_ok=True)
    timer = HoldTimer(args.hold) if args.hold > 0 else Timer(target_ms=50.0, trials=3)
    props = torch.cuda.get_device_properties(dev)
    result = dict(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), device=props.name,
                  torch=torch.__version__, cuda=torch.version.cuda,
                  smi=smi("name,driver_version,clocks.max.sm,power.limit"),
                  timer=f"hold {args.hold} s" if args.hold > 0 else "bursts", local=args.local,
                  head_dim=args.head_dim, rows=[])
    d, local = args.head_dim, args.local
    start = time.time()
    for heads in [int(x) for x in args.heads.split(",")]:
        for cp in [int(x) for x in args.cp.split(",")]:
            ranks = sorted({0, cp - 1})
            q = heads_first(1, local, heads, d, dev)
            keys = heads_first(1, local * cp, heads, d, dev)
            values = heads_first(1, local * cp, heads, d, dev)
            # The reference: one kernel of the rank's FLOPs, c/2 blocks of L × L: for c = 1 the
            # causal kernel, for c > 1 the L queries against c·L/2 keys without a mask.
            flops = attention_flops(heads, local, local * cp, d, causal=True)
            ref_causal = cp == 1
            if ref_causal:
                ref_q, ref_k, ref_v = q, keys, values
            else:
                # c/2 full L × L blocks: L queries against c·L/2 keys, no mask.
                ref_q, ref_k, ref_v = q, keys[:, :, : local * cp // 2], values[:, :, : local * cp // 2]
            ref_out, ref_lse, ref_saved = flash_forward(ref_q, ref_k, ref_v, ref_causal)
            ref_grad = torch.randn_like(ref_out)
            ref_fwd = timer(lambda: flash_forward(ref_q, ref_k, ref_v, ref_causal))
            ref_bwd = timer(lambda: flash_backward(ref_grad, ref_q, ref_k, ref_v, ref_out, ref_lse,
                                                   ref_causal, ref_saved))
            ref_clocks = getattr(timer, "last", {})
            del ref_out, ref_lse, ref_grad, ref_saved, keys, values, ref_k, ref_v
            for rank in ranks:
                try:
                    r = Rank(cp, rank, local, heads, d, dev)
                except RuntimeError as error:  # Out of memory, an unsupported shape: recorded.
                    result["rows"].append(dict(heads=heads, cp=cp, rank=rank,
                                               error=str(error).splitlines()[0]))
                    log(f"heads {heads} cp {cp} rank {rank}: {error}")
                    continue
                row = dict(heads=heads, cp=cp, rank=rank, flops_forward=flops,
                           reference_forward_seconds=ref_fwd, reference_backward_seconds=ref_bwd,
                           reference_clocks=ref_clocks)
                row["kernels_forward_seconds"] = timer(lambda: r.forward(ring=False))
                row["kernels_backward_seconds"] = timer(lambda: r.backward(ring=False))
                row["ring_forward_seconds"] = timer(lambda: r.forward(ring=True))
                row["ring_backward_seconds"] = timer(lambda: r.backward(ring=True))
                row["ring_clocks"] = getattr(timer, "last", {})
                for what in ("reference", "kernels", "ring"):
                    row[f"{what}_forward_tflops"] = flops / row[f"{what}_forward_seconds"] / 1e12
                    row[f"{what}_backward_tflops"] = (2.5 * flops / row[f"{what}_backward_seconds"]
                                                      / 1e12)
                log(f"heads {heads} cp {cp} rank {rank}: forward ref {ref_fwd * 1e3:.1f} ms, "
                    f"kernels {row['kernels_forward_seconds'] * 1e3:.1f}, ring "
                    f"{row['ring_forward_seconds'] * 1e3:.1f}; backward ref {ref_bwd * 1e3:.1f}, "
                    f"kernels {row['kernels_backward_seconds'] * 1e3:.1f}, ring "
                    f"{row['ring_backward_seconds'] * 1e3:.1f}")
                result["rows"].append(row)
                del r
                torch.cuda.empty_cache()
            del q
            torch.cuda.empty_cache()
    result["wall_seconds"] = time.time() - start
    path = os.path.join(args.out, "ring-attention.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    log(f"wrote {path}")


if __name__ == "__main__":
    main()
