"""PyTorch's rates for rlx-bench's W4 rows and for the f32 GEMM shape table of
`crates/rlx-cpu/examples/gemm_f32_paths.rs`, on 1 and 2 threads, medians of many calls.

    python w4_torch.py              # W4 rows: matmul 1024/2048 f32, 1024 bf16 / f16 / int8
    python w4_torch.py --gemm-shapes  # the f32 shape table (same rows as the rlx example)

torch's f32 matmul is MKL (or oneDNN) on x86; bf16 goes through oneDNN (AMX where present);
int8 through torch._int_mm (oneDNN VNNI / AMX-INT8) where the build has it.
"""

import sys
import time

import torch

CASES = [
    ("sq256", 256, 256, 256, "NN", 1),
    ("sq512", 512, 512, 512, "NN", 1),
    ("sq1024", 1024, 1024, 1024, "NN", 1),
    ("sq2048", 2048, 2048, 2048, "NN", 1),
    ("W5 l1", 1024, 784, 512, "NN", 1),
    ("W5 l2", 1024, 512, 512, "NN", 1),
    ("W6 l1", 256, 784, 512, "NN", 1),
    ("W6 l2", 256, 512, 512, "NN", 1),
    ("W6 dW1", 784, 256, 512, "TN", 1),
    ("W6 dX2", 256, 512, 512, "NT", 1),
    ("W11 qkv", 1024, 256, 768, "NN", 1),
    ("W11 proj", 1024, 256, 256, "NN", 1),
    ("W11 fc", 1024, 256, 1024, "NN", 1),
    ("W11 fc2", 1024, 1024, 256, "NN", 1),
    ("W11 head", 1024, 256, 512, "NT", 1),
    ("W11 dXqkv", 1024, 768, 256, "NT", 1),
    ("W11 dXfc2", 1024, 256, 1024, "NT", 1),
    ("W11 dWqkv", 256, 1024, 768, "TN", 1),
    ("W11 dWfc2", 1024, 1024, 256, "TN", 1),
    ("att qk 64x", 128, 32, 128, "NT", 64),
    ("att pv 64x", 128, 128, 32, "NN", 64),
]


def median_rate(fn, flops, budget=1.5e10):
    reps = max(9, min(201, int(budget / flops)))
    for _ in range(2):
        fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    ts.sort()
    return flops / ts[len(ts) // 2] / 1e9


def operands(m, k, n, lay, batch, dtype=torch.float32):
    g = torch.Generator().manual_seed(1)
    shape_a = (k, m) if lay[0] == "T" else (m, k)
    shape_b = (n, k) if lay[1] == "T" else (k, n)
    if batch > 1:
        shape_a, shape_b = (batch,) + shape_a, (batch,) + shape_b
    a = torch.rand(shape_a, generator=g, dtype=torch.float32).sub_(0.5).to(dtype)
    b = torch.rand(shape_b, generator=g, dtype=torch.float32).sub_(0.5).to(dtype)
    a = a.transpose(-1, -2) if lay[0] == "T" else a
    b = b.transpose(-1, -2) if lay[1] == "T" else b
    return a, b


def gemm_shapes():
    print(f"torch {torch.__version__}, f32 GEMM GFLOP/s, median")
    print(f"{'case':<12} {'m×k×n':>16} {'thr':>4} {'torch':>9}")
    for name, m, k, n, lay, batch in CASES:
        a, b = operands(m, k, n, lay, batch)
        out = torch.empty((batch, m, n) if batch > 1 else (m, n))
        flops = 2.0 * m * n * k * batch
        for th in (1, 2):
            torch.set_num_threads(th)
            r = median_rate(lambda: torch.matmul(a, b, out=out), flops)
            print(f"{name:<12} {f'{m}×{k}×{n} {lay}':>16} {th:>4} {r:>9.1f}")


def w4_rows():
    print(f"torch {torch.__version__}, W4 rows, GFLOP/s, median")
    for th in (1, 2):
        torch.set_num_threads(th)
        for n in (1024, 2048):
            a, b = operands(n, n, n, "NN", 1)
            r = median_rate(lambda: torch.matmul(a, b), 2.0 * n**3)
            print(f"W4_matmul_{n} torch_f32 {th}t {r:.1f}")
        n = 1024
        for name, dt in (("bf16", torch.bfloat16), ("f16", torch.float16)):
            a, b = operands(n, n, n, "NN", 1, dt)
            r = median_rate(lambda: torch.matmul(a, b), 2.0 * n**3)
            print(f"W4_matmul_{n} torch_{name} {th}t {r:.1f}")
        ai = torch.randint(-128, 128, (n, n), dtype=torch.int8)
        bi = torch.randint(-128, 128, (n, n), dtype=torch.int8)
        try:
            r = median_rate(lambda: torch._int_mm(ai, bi), 2.0 * n**3)
            print(f"W4_matmul_{n} torch_int8 {th}t {r:.1f} (torch._int_mm, i32 out)")
        except RuntimeError as e:
            print(f"W4_matmul_{n} torch_int8 {th}t unavailable: {e}")


if __name__ == "__main__":
    if "--gemm-shapes" in sys.argv:
        gemm_shapes()
    else:
        w4_rows()
