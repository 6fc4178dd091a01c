"""PyTorch's rates for rlx-bench's W4 rows, on 1 and 2 threads, medians of many calls.

    python w4_torch.py              # W4 rows: matmul 1024/2048 f32, 1024 bf16 / f16 / int8

(The f32 shape table against MKL is `cargo run --release -p rlx-cpu --example gemm_shapes
-- --mkl <libtorch_cpu.so>`, which calls MKL in the same process, interleaved with rlx.)

torch's f32 matmul is MKL (or oneDNN) on x86; bf16 goes through oneDNN (AMX where present);
int8 through torch._int_mm (oneDNN VNNI / AMX-INT8) where the build has it.
"""

import time

import torch

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
    w4_rows()
