"""PyTorch's rates for rlx-bench's W4 rows, on 1 and N threads, medians of many calls.

    python w4_torch.py                      # GFLOP/s lines, 1 and 2 threads
    python w4_torch.py --rows --threads 2   # W4PEER lines, read by `rlx-bench --torch`

The products: matmul 1024/2048 in f32, 1024 in bf16 / f16, and int8 (i32 out) at 1024;
on the all-threads count also the decoding-step f32 and bf16 products (1 and 8 rows times a
4096² weight, both storage orders).

(The f32 shape table against MKL is `cargo run --release -p rlx-cpu --example gemm_shapes
-- --mkl <libtorch_cpu.so>`, which calls MKL in the same process, interleaved with rlx.)

torch's f32 matmul is MKL (or oneDNN) on x86; bf16 goes through oneDNN (AMX where present);
int8 through torch._int_mm (oneDNN VNNI / AMX-INT8) where the build has it.
"""

import argparse
import time

import torch


def times(fn, flops, budget=1.5e10, warm_s=0.3):
    """Seconds per call, sorted: warm-up calls for at least `warm_s` seconds (and two),
    then about `budget` flops of calls (9 to 201). Two warm-up calls alone left the
    process's first product (f32 on one thread) at up to 2.5x its time (2 of 6 runs on
    the 2-vCPU Sapphire Rapids VM)."""
    reps = max(9, min(201, int(budget / flops)))
    start, warm = time.perf_counter(), 0
    while warm < 2 or time.perf_counter() - start < warm_s:
        fn()
        warm += 1
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    ts.sort()
    return ts


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


def w4_rows(thread_counts, rows):
    """One line per product: `W4PEER <workload> torch_<dtype>_<threads>t median_s=… …`
    with `rows`, else `<workload> torch_<dtype> <threads>t <GFLOP/s>`."""
    tag = "# " if rows else ""
    print(f"{tag}torch {torch.__version__}, W4 rows, median of many calls")

    def report(n, name, th, ts, extra=""):
        flops = 2.0 * n**3
        med = ts[len(ts) // 2]
        if rows:
            print(
                f"W4PEER W4_matmul_{n} torch_{name}_{th}t median_s={med:.9f} "
                f"min_s={ts[0]:.9f} max_s={ts[-1]:.9f} repeats={len(ts)} inner=1"
            )
        else:
            print(f"W4_matmul_{n} torch_{name} {th}t {flops / med / 1e9:.1f}{extra}")

    for th in thread_counts:
        torch.set_num_threads(th)
        for n in (1024, 2048):
            a, b = operands(n, n, n, "NN", 1)
            report(n, "f32", th, times(lambda: torch.matmul(a, b), 2.0 * n**3))
        n = 1024
        for name, dt in (("bf16", torch.bfloat16), ("f16", torch.float16)):
            a, b = operands(n, n, n, "NN", 1, dt)
            report(n, name, th, times(lambda: torch.matmul(a, b), 2.0 * n**3))
        if th == max(thread_counts):
            decode_rows(rows)
        ai = torch.randint(-128, 128, (n, n), dtype=torch.int8)
        bi = torch.randint(-128, 128, (n, n), dtype=torch.int8)
        try:
            ts = times(lambda: torch._int_mm(ai, bi), 2.0 * n**3)
            report(n, "int8", th, ts, " (torch._int_mm, i32 out)")
        except RuntimeError as e:
            print(f"{tag}W4_matmul_{n} torch_int8 {th}t unavailable: {e}")


def decode_rows(rows, n=4096):
    """rlx-bench's W4_decode rows in f32 and bf16: m rows times an n × n weight stored
    [in, out] (`x @ w`) and [out, in] (`F.linear(x, w)`, nn.Linear's layout)."""
    g = torch.Generator().manual_seed(2)
    w32 = torch.rand((n, n), generator=g).sub_(0.5)
    for dtype, tag in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        w = w32.to(dtype)
        for m in (1, 8):
            x = torch.rand((m, n), generator=g).sub_(0.5).to(dtype)
            for suffix, fn in (
                ("", lambda: torch.matmul(x, w)),
                ("_wt", lambda: torch.nn.functional.linear(x, w)),
            ):
                ts = times(fn, 2.0 * m * n * n, budget=2e9)
                med = ts[len(ts) // 2]
                name = f"torch_{tag}_rows{m}{suffix}"
                if rows:
                    print(
                        f"W4PEER W4_decode_{n} {name} median_s={med:.9f} "
                        f"min_s={ts[0]:.9f} max_s={ts[-1]:.9f} repeats={len(ts)} inner=1"
                    )
                else:
                    print(f"W4_decode_{n} {name} {2.0 * m * n * n / med / 1e9:.1f}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", action="store_true", help="print W4PEER lines for rlx-bench")
    p.add_argument("--threads", type=int, default=2, help="the all-threads count (default 2)")
    args = p.parse_args()
    counts = sorted({1, max(1, args.threads)})
    w4_rows(counts, args.rows)
