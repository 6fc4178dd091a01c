"""W11 in mixed precision on PyTorch: the GPT training step of `shared/bench/transformer.py`
(vocab 512, 4 pre-LayerNorm blocks, d=256, 8 causal heads, B=8, T=128, AdamW 3e-4 with
betas (0.9, 0.95), weight decay 0.1 on 2-D weights only) with the forward and backward
under `torch.autocast("cpu", dtype=torch.bfloat16)`: f32 master weights and optimizer,
matmuls (and, unlike rlx's W11-bf16 row, attention) in bf16, LayerNorm / softmax /
cross-entropy in f32 as autocast's op lists say. 2 threads, eager (and `--compile`).

    python w11_torch_bf16.py [--steps 60] [--compile] [--f32] [--threads 2] [--rows]

Prints one JSON line like transformer.py: peer, workload, median_s (over the steps after
the first 10), first_s, loss_first, loss_last. `--f32` runs the same script without
autocast, for a same-run ratio. With `--rows` (how `rlx-bench --torch` runs it) the line
is `W11PEER W11_gpt_train_step torch_<bf16|f32> median_s=… min_s=… max_s=… repeats=…
inner=1`, and the losses go on a `# ` line.
"""
import argparse
import json
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

V, L, D, H, T, B = 512, 4, 256, 8, 128, 8
HD = D // H


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D, eps=1e-5), nn.LayerNorm(D, eps=1e-5)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
        q, k, v = (t.view(B, T, H, HD).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, D))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.wpe = nn.Parameter(torch.zeros(T, D))
        self.blocks = nn.ModuleList([Block() for _ in range(L)])
        self.lnf = nn.LayerNorm(D, eps=1e-5)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif "ln" in name and name.endswith("weight"):
                nn.init.ones_(p)
            else:
                nn.init.zeros_(p)

    def forward(self, idx, tgt):
        x = self.wte(idx) + self.wpe
        for blk in self.blocks:
            x = blk(x)
        logits = self.lnf(x) @ self.wte.weight.T
        return F.cross_entropy(logits.view(-1, V).float(), tgt.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--f32", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(max(1, args.threads))
    torch.manual_seed(0)
    model = GPT()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    fwd = torch.compile(model) if args.compile else model
    rng = np.random.default_rng(11)
    stream = rng.integers(0, V, size=1 << 16)
    times, losses = [], []
    for _ in range(args.steps):
        ix = rng.integers(0, len(stream) - T - 1, size=B)
        x = torch.from_numpy(np.stack([stream[i:i + T] for i in ix]))
        y = torch.from_numpy(np.stack([stream[i + 1:i + T + 1] for i in ix]))
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=not args.f32):
            loss = fwd(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    system = ("torch_compile" if args.compile else "torch") + ("_f32" if args.f32 else "_bf16")
    peer = system if args.f32 else system + "_autocast"
    if args.rows:
        timed = sorted(times[10:] or times)
        print(f"# {peer}: loss {losses[0]:.4f} -> {losses[-1]:.4f} in {args.steps} steps, "
              f"first step {times[0]:.2f} s")
        print(f"W11PEER W11_gpt_train_step {system} median_s={float(np.median(timed)):.9f} "
              f"min_s={timed[0]:.9f} max_s={timed[-1]:.9f} repeats={len(timed)} inner=1")
        return
    print(json.dumps({
        "peer": peer, "workload": "W11_gpt_train_step",
        "median_s": float(np.median(times[10:])), "first_s": times[0],
        "loss_first": losses[0], "loss_last": losses[-1]}))


if __name__ == "__main__":
    main()
