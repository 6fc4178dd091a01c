#!/usr/bin/env python3
"""PyTorch (eager, CPU) peer of rlx-bench's OPS rows: the same ops at W11's shapes.

Each op is timed like rlx-bench times its rows (warm-up calls, then repeats of enough
calls to last >= 50 ms, the median per-call time) and printed as one line

    OPSPEER <workload> <system> median_s=<s> min_s=<s> max_s=<s> repeats=<n> inner=<n>

with the workload of the matching rlx row and the system `torch_<suffix>` for the rlx
row `rlx_<suffix>`: rlx-bench (`--torch`) credits the torch row with the same bytes
or flops as its rlx row, so both print as a fraction of the same machine bound.

Backward rows time only the backward: the forward graph is built once and
`torch.autograd.grad(..., retain_graph=True)` runs its vector-Jacobian product on each call,
as rlx's backward rows run a gradient program without the dead forward value.

    OMP_NUM_THREADS=2 python ops_torch.py [--repeats 7] [--warmup 2] [--only layer_norm,...]
        [--adamw-shapes 512x256,128x256,...]
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

# W11 (shared/bench/transformer.py): vocab 512, d 256, 8 heads, B 8, T 128, 4 blocks.
VOCAB, D, HEADS, B, T = 512, 256, 8, 8, 128
N = B * T
HD = D // HEADS
LN_EPS = 1e-5


def timed(fn, warmup, repeats):
    """Median per-call seconds of fn() in rlx-bench's convention."""
    fn()
    for _ in range(warmup):
        fn()
    t0 = time.perf_counter()
    fn()
    single = time.perf_counter() - t0
    inner = 1 if single >= 0.05 else max(1, min(20000, int(0.05 / max(single, 1e-7))))
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t0) / inner)
    return statistics.median(times), min(times), max(times), len(times), inner


def emit(workload, system, fn, args):
    med, lo, hi, reps, inner = timed(fn, args.warmup, args.repeats)
    print(
        f"OPSPEER {workload} {system} median_s={med:.9g} min_s={lo:.9g} max_s={hi:.9g} "
        f"repeats={reps} inner={inner}",
        flush=True,
    )


def randn(*shape, requires_grad=False):
    return torch.randn(*shape, dtype=torch.float32, requires_grad=requires_grad)


def backward_of(outputs, inputs, cotangents):
    """A call that runs only the VJP of an already built forward graph."""
    outs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    cots = cotangents if isinstance(cotangents, (list, tuple)) else [cotangents]
    return lambda: torch.autograd.grad(outs, inputs, cots, retain_graph=True)


def embedding(args):
    wte = randn(VOCAB, D, requires_grad=True)
    idx = torch.randint(0, VOCAB, (B, T))
    emit("OPS_embedding", "torch_fwd", lambda: F.embedding(idx, wte.detach()), args)
    y = F.embedding(idx, wte)
    emit("OPS_embedding", "torch_bwd", backward_of(y, [wte], randn(B, T, D)), args)


def split_concat(args):
    qkv = randn(B, T, 3 * D, requires_grad=True)
    x = qkv.detach()
    # rlx materializes the three parts; a torch split is a view until made contiguous.
    emit(
        "OPS_qkv_split",
        "torch_fwd",
        lambda: [p.contiguous() for p in x.split(D, dim=2)],
        args,
    )
    parts = qkv.split(D, dim=2)
    gs = [randn(B, T, D) for _ in range(3)]
    emit("OPS_qkv_split", "torch_bwd", backward_of(list(parts), [qkv], gs), args)
    a, b, c = (randn(B, T, D) for _ in range(3))
    emit("OPS_concat", "torch_fwd", lambda: torch.cat([a, b, c], dim=2), args)


def attention(args):
    q, k, v = (randn(B, T, D, requires_grad=True) for _ in range(3))

    def att(q, k, v):
        # nanoGPT's head split and merge around the fused kernel, as rlx's op includes them.
        heads = [t.view(B, T, HEADS, HD).transpose(1, 2) for t in (q, k, v)]
        y = F.scaled_dot_product_attention(*heads, is_causal=True)
        return y.transpose(1, 2).reshape(B, T, D)

    qd, kd, vd = q.detach(), k.detach(), v.detach()
    emit("OPS_attention", "torch_fwd", lambda: att(qd, kd, vd), args)
    y = att(q, k, v)
    emit("OPS_attention", "torch_bwd", backward_of(y, [q, k, v], randn(B, T, D)), args)


def norm_gelu(args):
    x = randn(N, D, requires_grad=True)
    gamma = (1.0 + 0.1 * torch.randn(D)).requires_grad_()
    beta = (0.1 * torch.randn(D)).requires_grad_()
    xd, gd, bd = x.detach(), gamma.detach(), beta.detach()
    emit(
        "OPS_layer_norm",
        "torch_fwd",
        lambda: F.layer_norm(xd, (D,), gd, bd, LN_EPS),
        args,
    )
    y = F.layer_norm(x, (D,), gamma, beta, LN_EPS)
    emit("OPS_layer_norm", "torch_bwd", backward_of(y, [x, gamma, beta], randn(N, D)), args)
    # rlx's rms_norm adds a bias like its layer_norm; torch's has none, so it is added here.
    emit(
        "OPS_rms_norm",
        "torch_fwd",
        lambda: F.rms_norm(xd, (D,), gd, LN_EPS) + bd,
        args,
    )
    y = F.rms_norm(x, (D,), gamma, LN_EPS) + beta
    emit("OPS_rms_norm", "torch_bwd", backward_of(y, [x, gamma, beta], randn(N, D)), args)
    u = (1.5 * torch.randn(N, 4 * D)).requires_grad_()
    ud = u.detach()
    emit("OPS_gelu_erf", "torch_fwd", lambda: F.gelu(ud), args)
    y = F.gelu(u)
    emit("OPS_gelu_erf", "torch_bwd", backward_of(y, [u], randn(N, 4 * D)), args)


def cross_entropy(args):
    logits = randn(N, VOCAB, requires_grad=True)
    tgt = torch.randint(0, VOCAB, (N,))
    ld = logits.detach()
    emit("OPS_cross_entropy", "torch_fwd_input", lambda: F.cross_entropy(ld, tgt), args)
    loss = F.cross_entropy(logits, tgt)
    emit("OPS_cross_entropy", "torch_bwd_input", backward_of(loss, [logits], torch.ones(())), args)
    h = randn(N, D, requires_grad=True)
    wte = (0.1 * torch.randn(VOCAB, D)).requires_grad_()
    hd, wd = h.detach(), wte.detach()
    emit("OPS_cross_entropy", "torch_head_matmul_only", lambda: hd @ wd.t(), args)
    emit(
        "OPS_cross_entropy",
        "torch_fwd_after_matmul",
        lambda: F.cross_entropy(hd @ wd.t(), tgt),
        args,
    )

    def value_and_grad():
        loss = F.cross_entropy(h @ wte.t(), tgt)
        return loss, torch.autograd.grad(loss, [h, wte])

    emit("OPS_cross_entropy", "torch_bwd_after_matmul", value_and_grad, args)


def adamw(args):
    shapes = [tuple(int(d) for d in s.split("x")) for s in args.adamw_shapes.split(",")]
    params = [(0.02 * torch.randn(*s)).requires_grad_() for s in shapes]
    grads = [1e-3 * torch.randn(*s) for s in shapes]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    for name, kw in [("torch_f32", {}), ("torch_f32_fused", {"fused": True})]:
        try:
            opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), **kw)
        except (RuntimeError, TypeError, ValueError) as e:
            print(f"# {name}: {e}", flush=True)
            continue

        # The rlx row's step: the loss sum(p * g) (its gradient is g) and the update.
        def step():
            with torch.no_grad():
                loss = sum((p * g).sum() for p, g in zip(params, grads))
            for p, g in zip(params, grads):
                p.grad = g
            opt.step()
            return loss

        emit("OPS_adamw_update", name, step, args)


def matmuls(args):
    m = N
    sizes = [256, 768, 1024]
    shapes = [("nn", k, n) for k in sizes for n in sizes]
    for k, n in [(256, 768), (256, 256), (256, 1024), (1024, 256)]:
        shapes += [("tn", k, n), ("nt", k, n)]
    for form, k, n in shapes:
        if form == "nn":
            a, b = randn(m, k), randn(k, n)
            fn = lambda a=a, b=b: a @ b
        elif form == "tn":
            a, b = randn(m, k), randn(m, n)
            fn = lambda a=a, b=b: a.t() @ b
        else:
            a, b = randn(m, n), randn(k, n)
            fn = lambda a=a, b=b: a @ b.t()
        emit(f"OPS_matmul_{form}", f"torch_k{k}_n{n}", fn, args)


GROUPS = {
    "embedding": embedding,
    "split_concat": split_concat,
    "attention": attention,
    "norm_gelu": norm_gelu,
    "cross_entropy": cross_entropy,
    "adamw": adamw,
    "matmuls": matmuls,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated groups (as RLX_OPS_ONLY)")
    default_shapes = ",".join(
        ["512x256", "128x256"]
        + 4 * ["256", "256", "256x768", "768", "256x256", "256", "256", "256", "256x1024", "1024", "1024x256", "256"]
        + ["256", "256"]
    )
    ap.add_argument("--adamw-shapes", default=default_shapes)
    args = ap.parse_args()
    torch.manual_seed(0)
    print(
        f"# torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"mkldnn {torch.backends.mkldnn.is_available()}, {torch.backends.cpu.get_cpu_capability()}",
        flush=True,
    )
    only = [g.strip() for g in args.only.split(",") if g.strip()]
    for name, group in GROUPS.items():
        if not only or name in only:
            with torch.inference_mode(False):
                group(args)


if __name__ == "__main__":
    main()
