//! The workloads on rlx, through the public `rlx_tensor` API only: each is a traced
//! [`Func`] compiled once ([`Func::jit`]) and then called, the way a user would run it.

use rlx_bench::inputs::{ATT, LN, LN_EPS, MLP, SM, W5_BATCH};
use rlx_tensor::{
    DType, Device, Func, GraphScope, Jitted, MaskKind, Model, ScaleLayout, ScaledFormat, Shape,
    Tensor,
};

fn f32s(dims: &[usize]) -> Shape {
    Shape::new(dims, DType::F32)
}

/// W1: `exp(relu((a + b)·c − 0.5))` over `n` elements.
pub fn w1(n: usize) -> Jitted {
    Func::new("w1", |s| {
        let a = s.input("a", f32s(&[n]));
        let b = s.input("b", f32s(&[n]));
        let c = s.input("c", f32s(&[n]));
        (&(&(&a + &b) * &c) - 0.5f32).relu().exp()
    })
    .jit()
}

/// W2: softmax over the last axis.
pub fn w2() -> Jitted {
    Func::new("w2", |s| s.input("x", f32s(&[SM.0, SM.1])).softmax(-1)).jit()
}

/// W3: layer norm over the last axis (gamma, beta as inputs).
pub fn w3() -> Jitted {
    Func::new("w3", |s| {
        let x = s.input("x", f32s(&[LN.0, LN.1]));
        let g = s.input("g", f32s(&[LN.1]));
        let b = s.input("b", f32s(&[LN.1]));
        x.layer_norm(&g, &b, LN_EPS)
    })
    .jit()
}

/// W4: `a @ b`, both `n × n`.
pub fn w4(n: usize) -> Jitted {
    Func::new("w4", |s| {
        let a = s.input("a", f32s(&[n, n]));
        let b = s.input("b", f32s(&[n, n]));
        a.matmul(&b)
    })
    .jit()
}

/// W4 in bf16: `a`, `b` cast to bf16 in the graph, `a @ b` in bf16 (f32 accumulation,
/// rounded to bf16 on store).
pub fn w4_bf16(n: usize) -> Jitted {
    Func::new("w4_bf16", |s| {
        let a = s.input("a", f32s(&[n, n])).cast(DType::BF16);
        let b = s.input("b", f32s(&[n, n])).cast(DType::BF16);
        a.matmul(&b)
    })
    .jit()
}

/// W4 as a scaled low-precision matmul (`fmt` codes, `layout` scales): `a [n, n]` times
/// `btᵀ` (`bt` is `b` transposed, K-last), both quantized in the graph.
pub fn w4_scaled(n: usize, fmt: ScaledFormat, layout: ScaleLayout) -> Jitted {
    Func::new("w4_scaled", |s| {
        let a = s.input("a", f32s(&[n, n]));
        let bt = s.input("bt", f32s(&[n, n]));
        a.scaled_matmul(&bt, fmt, layout)
    })
    .jit()
}

/// [`w4_scaled`]'s operands quantized once, and the scaled matmul alone on them:
/// `quantize` maps `a [n, n]` and `bt [n, n]` (f32) to `(lq, rq, ls, rs)` (one u8 code per
/// element and one u8 block scale — E8M0 for MX, E4M3 for NVFP4 — per block), `matmul`
/// maps those to `a · btᵀ` (f32): the kernel a quantized model runs per call, without the
/// quantization of both operands. `layout` must have blocks (MX or NVFP4).
pub fn w4_scaled_parts(n: usize, fmt: ScaledFormat, layout: ScaleLayout) -> (Jitted, Jitted) {
    use rlx_ir::Op;
    let mut g = rlx_ir::Graph::new("w4_scaled_quantize");
    let quant = |g: &mut rlx_ir::Graph, name: &str| {
        let x = g.input(name, f32s(&[n, n]));
        let scale = Op::ScaledQuantScale {
            format: fmt,
            scale_layout: layout,
        };
        let s = g.add_op(scale, vec![x]).expect("quant scale");
        let q = Op::ScaledQuantize {
            format: fmt,
            scale_layout: layout,
        };
        (g.add_op(q, vec![x, s]).expect("quantize"), s)
    };
    let (lq, ls) = quant(&mut g, "a");
    let (rq, rs) = quant(&mut g, "bt");
    g.set_outputs(vec![lq, rq, ls, rs]);
    let quantize = Func::from_graph(g).jit();
    (quantize, w4_scaled_rows(n, n, fmt, layout))
}

/// `x [m, n] · w` in `dtype` (f32, or bf16 in and out with f32 accumulation) for an
/// `n × n` weight: in f32 the baseline of [`w4_scaled_rows`]. With `out_in`, `w` is
/// stored `[out, in]` as PyTorch's `nn.Linear` keeps it (contiguous along the sums) and
/// the product is `x · wᵀ`.
pub fn w4_rows(m: usize, n: usize, out_in: bool, dtype: DType) -> Jitted {
    Func::new("w4_rows", |s| {
        let x = s.input("x", Shape::new(&[m, n], dtype));
        let w = s.input("w", Shape::new(&[n, n], dtype));
        if out_in { x.matmul_t(&w) } else { x.matmul(&w) }
    })
    .jit()
}

/// [`w4_scaled_parts`]' matmul for `m` rows of the left operand's codes: `lq [m, n]` and
/// its block scales against `rq [n, n]` and its scales — a quantized model's decoding
/// step (one token, or a few) on an `n × n` weight. `layout` must have blocks.
pub fn w4_scaled_rows(m: usize, n: usize, fmt: ScaledFormat, layout: ScaleLayout) -> Jitted {
    use rlx_ir::Op;
    let block = layout
        .block()
        .expect("w4_scaled_rows needs a block layout (MX or NVFP4)");
    let blocks = n / block as usize;
    let u8s = |dims: &[usize]| Shape::new(dims, DType::U8);
    let mut g = rlx_ir::Graph::new("w4_scaled_rows");
    let ins = vec![
        g.input("lq", u8s(&[m, n])),
        g.input("rq", u8s(&[n, n])),
        g.input("ls", u8s(&[m, blocks])),
        g.input("rs", u8s(&[n, blocks])),
    ];
    let op = Op::ScaledMatMul {
        lhs_format: fmt,
        rhs_format: fmt,
        scale_layout: layout,
        has_bias: false,
    };
    let y = g.add_op(op, ins).expect("scaled matmul");
    g.set_outputs(vec![y]);
    Func::from_graph(g).jit()
}

/// The MLP body shared by W5, W6 and W9: params `w1, b1, w2, b2, w3, b3`.
fn mlp_logits(s: &mut GraphScope, x: &Tensor) -> Tensor {
    let mut h = x.clone();
    for (i, d) in MLP.windows(2).enumerate() {
        let w = s.param(format!("w{}", i + 1), f32s(&[d[0], d[1]]));
        let b = s.param(format!("b{}", i + 1), f32s(&[d[1]]));
        h = &h.matmul(&w) + &b;
        if i + 2 < MLP.len() {
            h = h.gelu_approx();
        }
    }
    h
}

fn bind_mlp(mut f: Func, ps: &[Vec<f32>]) -> Func {
    for (i, p) in ps.iter().enumerate() {
        let name = if i % 2 == 0 {
            format!("w{}", i / 2 + 1)
        } else {
            format!("b{}", i / 2 + 1)
        };
        f = f.with_param(name, p.clone());
    }
    f
}

/// W5 as a [`Func`] with bound params (input `x: [batch, 784]`).
pub fn w5_func(ps: &[Vec<f32>], batch: usize) -> Func {
    let f = Func::new("w5", |s| {
        let x = s.input("x", f32s(&[batch, MLP[0]]));
        mlp_logits(s, &x)
    });
    bind_mlp(f, ps)
}

/// W5: MLP forward, compiled.
pub fn w5(ps: &[Vec<f32>]) -> Jitted {
    w5_func(ps, W5_BATCH).jit()
}

/// W9 proper: trace a fresh W5 function and compile it (bypassing the compile cache);
/// returns the compiled model, params unbound.
pub fn w9_compile(ps: &[Vec<f32>]) -> Model {
    let f = w5_func(ps, W5_BATCH);
    Model::on(f.graph().clone(), Device::Cpu)
}

/// W9 end to end: a fresh W5 function, compiled (bypassing the compile cache) and run once; returns
/// the output so the caller can check it.
pub fn w9_once(ps: &[Vec<f32>], x: &[f32]) -> Vec<f32> {
    let f = w5_func(ps, W5_BATCH);
    let mut m = Model::on(f.graph().clone(), Device::Cpu);
    for (i, p) in ps.iter().enumerate() {
        let name = if i % 2 == 0 {
            format!("w{}", i / 2 + 1)
        } else {
            format!("b{}", i / 2 + 1)
        };
        m.set(&name, p);
    }
    m.run(&[("x", x)]).swap_remove(0)
}

/// W6: the training function (mean softmax cross-entropy of the MLP) with bound params.
#[cfg(feature = "train")]
pub fn w6_func(ps: &[Vec<f32>], batch: usize) -> Func {
    let f = Func::new("w6", |s| {
        let x = s.input("x", f32s(&[batch, MLP[0]]));
        let y = s.input("y", f32s(&[batch]));
        mlp_logits(s, &x)
            .softmax_cross_entropy_with_logits(&y)
            .mean_all()
    });
    bind_mlp(f, ps)
}

/// W6: one `train_step_all` (the workload's optimizer is AdamW(1e-3, 0.9, 0.999, 1e-8,
/// wd 0.01)); returns the new function and the loss.
#[cfg(feature = "train")]
pub fn w6_step(f: &Func, opt: &mut dyn rlx_tensor::Optimizer, x: &[f32], y: &[f32]) -> (Func, f32) {
    let (nf, loss) = f.train_step_all(opt, &[("x", x), ("y", y)]);
    (nf, loss[0])
}

/// W7: causal attention, q/k/v laid out `[B, S, H, D]` (rlx's attention layout).
pub fn w7() -> Jitted {
    let (b, h, sq, d) = ATT;
    Func::new("w7", |s| {
        let q = s.input("q", f32s(&[b, sq, h, d]));
        let k = s.input("k", f32s(&[b, sq, h, d]));
        let v = s.input("v", f32s(&[b, sq, h, d]));
        q.attention(&k, &v, h, d, MaskKind::Causal)
    })
    .jit()
}

/// `[B, H, S, D]` ⇄ `[B, S, H, D]` (host-side, outside the timed region).
pub fn swap_heads_seq(
    x: &[f32],
    b: usize,
    h: usize,
    sq: usize,
    d: usize,
    to_bshd: bool,
) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    for bi in 0..b {
        for hi in 0..h {
            for si in 0..sq {
                let bhsd = ((bi * h + hi) * sq + si) * d;
                let bshd = ((bi * sq + si) * h + hi) * d;
                let (src, dst) = if to_bshd { (bhsd, bshd) } else { (bshd, bhsd) };
                out[dst..dst + d].copy_from_slice(&x[src..src + d]);
            }
        }
    }
    out
}

/// W8: `relu(a + b)` on 3 elements.
pub fn w8() -> Jitted {
    Func::new("w8", |s| {
        let a = s.input("a", f32s(&[3]));
        let b = s.input("b", f32s(&[3]));
        (&a + &b).relu()
    })
    .jit()
}

/// W10: `vmap(grad(f))` with `f(x) = Σ x·x·sin x`, compiled.
#[cfg(feature = "transforms")]
pub fn w10() -> Jitted {
    use rlx_bench::inputs::W10;
    let f = Func::new("w10", |s| {
        let x = s.input("x", f32s(&[W10.1]));
        (&(&x * &x) * &x.sin()).sum_all()
    });
    f.grad(&["x"]).vmap(&["x"], W10.0).jit()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Per-tensor scales have no blocks to slice per row: the builder says so instead of
    /// building a graph whose scale inputs have no shape.
    #[test]
    #[should_panic(expected = "w4_scaled_rows needs a block layout (MX or NVFP4)")]
    fn scaled_rows_refuse_a_layout_without_blocks() {
        let _ = w4_scaled_rows(1, 64, ScaledFormat::F8E4M3, ScaleLayout::PerTensor);
    }

    /// The decoding-step rows multiply as written in both weight layouts, in f32 and in
    /// bf16 (small integers: every product and sum is exact in both), and a dtype matmul
    /// does not take is refused by name when the row is built.
    #[test]
    fn decode_rows_multiply_in_both_layouts_and_dtypes() {
        use rlx_tensor::HostData;
        let (m, n) = (2, 16);
        let x: Vec<f32> = (0..m * n).map(|i| (i % 5) as f32 - 2.0).collect();
        let w: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 - 3.0).collect();
        let wt: Vec<f32> = (0..n * n).map(|e| w[(e % n) * n + e / n]).collect();
        let want: Vec<f32> = (0..m * n)
            .map(|e| (0..n).map(|p| x[e / n * n + p] * w[p * n + e % n]).sum())
            .collect();
        let bf = |v: &[f32]| {
            v.iter()
                .map(|&e| half::bf16::from_f32(e))
                .collect::<Vec<_>>()
        };
        for (out_in, weight) in [(false, &w), (true, &wt)] {
            let f32_rows = w4_rows(m, n, out_in, DType::F32).run(&[("x", &x), ("w", weight)]);
            assert_eq!(f32_rows[0], want, "f32, out_in = {out_in}");
            let (xb, wb) = (bf(&x), bf(weight));
            let bf16_rows = w4_rows(m, n, out_in, DType::BF16)
                .run_host(&[("x", HostData::from(&xb)), ("w", HostData::from(&wb))]);
            assert_eq!(bf16_rows[0].to_f32_vec(), want, "bf16, out_in = {out_in}");
        }
    }

    #[test]
    #[should_panic(expected = "matmul: the operands must be a real number type")]
    fn decode_rows_refuse_a_bool_dtype() {
        let _ = w4_rows(1, 16, false, DType::Bool);
    }
}
