#!/usr/bin/env python3
"""The PyTorch baseline of bench/gpu: the same GPT-2-layout model as placert's CUDA trainer
(learned positions, pre-LayerNorm blocks, causal multi-head attention, tanh-GELU MLP, final
LayerNorm, output layer tied to the token embedding, cross-entropy), the same batch, bf16 autocast
over fp32 master weights, fused Adam (betas 0.9/0.999, eps 1e-8). Runs eager or torch.compile and
reports tokens/s, MFU (same FLOP count as placert: 6·N + 12·layers·hidden·seq per token) and
torch.cuda.max_memory_allocated.

    python3 bench/gpu/torch_gpt.py --layers 24 --hidden 1024 --heads 16 --seq 1024 \
        --vocab 50304 --micro-batch 8 --global-batch 16 --compile --json out.json
"""

import argparse
import json
import math
import sys
import time


def fp8_linear(torch):
    """A linear layer's three products in FP8 (e4m3, one scale per tensor, torch._scaled_mm), as
    Float8 training runs them, for timing: the forward with fast accumulation, the input and
    weight gradients without; the bias added in BF16."""

    def cast(t):
        scale = t.abs().amax().float().clamp(min=1e-12) / 448.0
        return (t / scale).to(torch.float8_e4m3fn), scale

    def column_major(t):
        return t.t().contiguous().t()

    class Fp8Matmul(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            x8, xs = cast(x)
            w8, ws = cast(w)
            ctx.save_for_backward(x8, w8, xs, ws)
            return torch._scaled_mm(x8, w8.t(), scale_a=xs, scale_b=ws,
                                    out_dtype=torch.bfloat16, use_fast_accum=True)

        @staticmethod
        def backward(ctx, grad):
            x8, w8, xs, ws = ctx.saved_tensors
            g8, gs = cast(grad)
            grad_x = torch._scaled_mm(g8, column_major(w8), scale_a=gs, scale_b=ws,
                                      out_dtype=torch.bfloat16)
            grad_w = torch._scaled_mm(g8.t().contiguous(), column_major(x8), scale_a=gs,
                                      scale_b=xs, out_dtype=torch.bfloat16)
            return grad_x, grad_w

    def linear(module, x):
        shape = x.shape
        y = Fp8Matmul.apply(x.reshape(-1, shape[-1]).to(torch.bfloat16),
                            module.weight.to(torch.bfloat16))
        y = y.reshape(*shape[:-1], y.shape[-1])
        return y + module.bias.to(torch.bfloat16) if module.bias is not None else y

    return linear


def build_model(torch, args):
    nn = torch.nn
    F = torch.nn.functional
    fp8 = fp8_linear(torch) if getattr(args, "fp8", False) else None

    def lin(module, x):
        return fp8(module, x) if fp8 else module(x)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            c, f = args.hidden, args.ffn or 4 * args.hidden
            self.ln1 = nn.LayerNorm(c, eps=1e-5)
            self.qkv = nn.Linear(c, 3 * c)
            self.proj = nn.Linear(c, c)
            self.ln2 = nn.LayerNorm(c, eps=1e-5)
            self.fc = nn.Linear(c, f)
            self.fcproj = nn.Linear(f, c)

        def forward(self, x):
            b, s, c = x.shape
            h = args.heads
            q, k, v = lin(self.qkv, self.ln1(x)).split(c, dim=2)
            q, k, v = (t.view(b, s, h, c // h).transpose(1, 2) for t in (q, k, v))
            if args.attention == "sdpa":
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                # The same algorithm as placert: scores, masked softmax, probabilities · V.
                scores = (q @ k.transpose(-2, -1)) / math.sqrt(c // h)
                mask = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
                scores = scores.float().masked_fill(~mask, float("-inf"))
                a = torch.softmax(scores, dim=-1).to(q.dtype) @ v
            x = x + lin(self.proj, a.transpose(1, 2).reshape(b, s, c))
            return x + lin(self.fcproj, F.gelu(lin(self.fc, self.ln2(x)), approximate="tanh"))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(args.vocab, args.hidden)
            self.wpe = nn.Embedding(args.seq, args.hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(args.layers))
            self.lnf = nn.LayerNorm(args.hidden, eps=1e-5)
            for p in self.parameters():
                if p.dim() >= 2:
                    nn.init.normal_(p, std=0.02)

        def forward(self, tokens, targets):
            positions = torch.arange(tokens.shape[1], device=tokens.device)
            x = self.wte(tokens) + self.wpe(positions)
            for block in self.blocks:
                x = block(x)
            logits = self.lnf(x) @ self.wte.weight.t()
            return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))

    return Gpt()


def parameter_count(args):
    c, f = args.hidden, args.ffn or 4 * args.hidden
    block = 4 * c + 3 * c * c + 3 * c + c * c + c + f * c + f + c * f + c
    return args.vocab * c + args.seq * c + args.layers * block + 2 * c


def profile_steps(torch, args, train_step):
    """Device time of every operator over 3 steps, by input shapes (torch.profiler): what the
    matrix products and the attention kernels reach inside a training step."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 record_shapes=True) as prof:
        for step in range(3):
            train_step(10000 + step)
        torch.cuda.synchronize()
    wall = (time.perf_counter() - start) / 3
    ops = []
    for evt in prof.key_averages(group_by_input_shape=True):
        # device_time_total since PyTorch 2.4, cuda_time_total before.
        total = getattr(evt, "device_time_total", None)
        if total is None:
            total = getattr(evt, "cuda_time_total", 0)
        if total > 0 and evt.key.startswith("aten::"):
            ops.append(dict(name=evt.key, shapes=[list(x) for x in evt.input_shapes if x],
                            calls=evt.count, device_us=total))
    return dict(steps=3, wall_seconds_per_step=wall, ops=ops)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ["layers", "hidden", "heads", "seq", "vocab", "micro-batch", "global-batch"]:
        parser.add_argument("--" + name, type=int, required=True)
    parser.add_argument("--ffn", type=int, default=0)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--fp8", action="store_true",
                        help="the blocks' linear layers in FP8 (torch._scaled_mm, one scale per "
                        "tensor); the output layer stays BF16")
    parser.add_argument("--attention", choices=["sdpa", "math"], default="sdpa",
                        help="sdpa: F.scaled_dot_product_attention (flash); math: placert's "
                        "algorithm (scores, softmax, P·V)")
    parser.add_argument("--peak-tflops", type=float, default=989.0,
                        help="dense bf16 peak per GPU (H100/H200 SXM: 989)")
    parser.add_argument("--json", help="write the measurements here")
    parser.add_argument("--profile", help="after the timed steps, profile 3 more and write each "
                        "operator's calls, input shapes and device time here (JSON)")
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("torch_gpt.py: no CUDA device", file=sys.stderr)
        return 77
    torch.manual_seed(1)
    torch.backends.cuda.matmul.allow_tf32 = True
    device = torch.device("cuda")
    model = build_model(torch, args).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4, betas=(0.9, 0.999), eps=1e-8,
                                 fused=True)
    step_model = torch.compile(model) if args.compile else model
    accumulation = args.global_batch // args.micro_batch

    def batch(step, micro):
        g = torch.Generator(device="cpu").manual_seed(step * 1000 + micro)
        start = torch.randint(0, args.vocab, (args.micro_batch, 1), generator=g)
        stride = torch.randint(1, 8, (args.micro_batch, 1), generator=g)
        s = torch.arange(args.seq + 1).unsqueeze(0)
        seq = (start + s * stride) % args.vocab
        return seq[:, :-1].to(device), seq[:, 1:].to(device)

    def train_step(step):
        total = 0.0
        for micro in range(accumulation):
            tokens, targets = batch(step, micro)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step_model(tokens, targets) / accumulation
            loss.backward()
            total += loss.detach()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return total

    for step in range(args.warmup):
        train_step(step)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    losses = []
    for step in range(args.steps):
        losses.append(train_step(args.warmup + step))
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / args.steps
    tokens = args.global_batch * args.seq
    params = parameter_count(args)
    flops = (6.0 * params + 12.0 * args.layers * args.hidden * args.seq) * tokens
    result = {
        "framework": "pytorch " + torch.__version__,
        "mode": ("compile" if args.compile else "eager") + (" fp8" if args.fp8 else ""),
        "attention": args.attention,
        "device": torch.cuda.get_device_name(),
        "parameters": params,
        "parameters_torch": sum(p.numel() for p in model.parameters()),
        "seconds_per_step": seconds,
        "tokens_per_second": tokens / seconds,
        "mfu": flops / (seconds * args.peak_tflops * 1e12),
        "peak_device_bytes": torch.cuda.max_memory_allocated(),
        "losses": [float(x) for x in losses],
    }
    if args.profile:
        result["profile"] = profile_steps(torch, args, train_step)
    print(json.dumps({k: v for k, v in result.items() if k != "profile"}, indent=2))
    if args.profile:
        with open(args.profile, "w") as f:
            json.dump(result, f, indent=1)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
