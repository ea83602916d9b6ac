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


def build_model(torch, args):
    nn = torch.nn
    F = torch.nn.functional

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
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
            q, k, v = (t.view(b, s, h, c // h).transpose(1, 2) for t in (q, k, v))
            if args.attention == "sdpa":
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                # The same algorithm as placert: scores, masked softmax, probabilities · V.
                scores = (q @ k.transpose(-2, -1)) / math.sqrt(c // h)
                mask = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
                scores = scores.float().masked_fill(~mask, float("-inf"))
                a = torch.softmax(scores, dim=-1).to(q.dtype) @ v
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, c))
            return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ["layers", "hidden", "heads", "seq", "vocab", "micro-batch", "global-batch"]:
        parser.add_argument("--" + name, type=int, required=True)
    parser.add_argument("--ffn", type=int, default=0)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--attention", choices=["sdpa", "math"], default="sdpa",
                        help="sdpa: F.scaled_dot_product_attention (flash); math: placert's "
                        "algorithm (scores, softmax, P·V)")
    parser.add_argument("--peak-tflops", type=float, default=989.0,
                        help="dense bf16 peak per GPU (H100/H200 SXM: 989)")
    parser.add_argument("--json", help="write the measurements here")
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
        "mode": "compile" if args.compile else "eager",
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
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
