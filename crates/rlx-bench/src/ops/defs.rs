//! The OPS rows: one traced function per op (forward and backward), its nominal work, and a
//! check against an f64 host reference where one is cheap (`reference`).

use super::reference as r;
use crate::report::{Bound, Row};
use crate::timing::{Plan, time};
use rlx_bench::gpt::{self, GptConfig};
use rlx_bench::inputs::Normal;
use rlx_tensor::{DType, Func, GraphScope, MaskKind, Shape, Tensor};

/// What a row's rate is computed from.
enum Work {
    /// Nominal bytes per call, against the memory-bandwidth bounds.
    Bytes(f64),
    /// Nominal flops per call, against the FMA peak.
    Flops(f64),
}

fn f32s(dims: &[usize]) -> Shape {
    Shape::new(dims, DType::F32)
}

fn i32s(dims: &[usize]) -> Shape {
    Shape::new(dims, DType::I32)
}

/// Bytes of `n` f32 (or i32) values.
fn b4(n: usize) -> f64 {
    4.0 * n as f64
}

/// A check of a function's outputs: the largest relative error against a reference.
type Check<'a> = Option<&'a dyn Fn(&[Vec<f32>]) -> f64>;

/// Times `f` (compiled once) on `inputs`; the row's check is `check(outputs)` when given.
#[allow(clippy::too_many_arguments)]
fn bench(
    rows: &mut Vec<Row>,
    plan: Plan,
    op: &str,
    system: &str,
    f: &Func,
    inputs: &[(&str, Vec<f32>)],
    work: Work,
    note: &str,
    check: Check<'_>,
) {
    let jit = f.jit();
    // `RLX_OPS_EXPLAIN=1`: each row's compiled program (its kernels and fusion) on stderr.
    if std::env::var_os("RLX_OPS_EXPLAIN").is_some() {
        eprintln!("OPS_{op} {system}:\n{}", jit.explain());
    }
    let mut args: Vec<(&str, &[f32])> = inputs.iter().map(|(n, v)| (*n, v.as_slice())).collect();
    // The compiled gradient drops inputs its result does not read (a gather's table, a
    // layer norm's beta) and then refuses them by name, although `Func::input_names` still
    // lists them: drop each refused one and say so in the note.
    let mut pruned = Vec::new();
    let out = loop {
        match jit.try_run(&args) {
            Ok(out) => break out,
            Err(e) => {
                let msg = e.to_string();
                let name = msg
                    .split_once("no input or param named `")
                    .and_then(|(_, rest)| rest.split_once('`'))
                    .map(|(n, _)| n.to_string())
                    .unwrap_or_else(|| panic!("OPS_{op} {system}: {msg}"));
                args.retain(|(n, _)| *n != name);
                pruned.push(name);
            }
        }
    };
    let note = if pruned.is_empty() {
        note.to_string()
    } else {
        format!(
            "{note}; compiled program dropped input(s) {}",
            pruned.join(", ")
        )
    };
    let t = time(plan, || jit.run(&args));
    let mut row = Row::new(&format!("OPS_{op}"), system, t).note(&note);
    row = match work {
        Work::Bytes(b) => row.bytes(b).bound(Bound::Bandwidth),
        Work::Flops(f) => row.flops(f).bound(Bound::Fma),
    };
    if let Some(c) = check {
        row = row.check(c(&out));
    }
    rows.push(row);
}

/// `Σ y ⊙ g` for a cotangent input `g` of `y`'s shape: its gradient is `y`'s VJP with `g`.
fn dot_cotangent(s: &mut GraphScope, y: &Tensor, name: &str) -> Tensor {
    let g = s.input(name, f32s(&y.dims()));
    (y * &g).sum_all()
}

/// Token ids `0..vocab` (f32-encoded) from a fixed stream.
fn token_ids(n: usize, vocab: usize, seed: u64) -> Vec<f32> {
    let mut s = Normal::new(seed);
    (0..n)
        .map(|_| ((s.sample().abs() * 1e4) as usize % vocab) as f32)
        .collect()
}

/// All OPS rows at W11's shapes (4 blocks; `N = B·T = 1024` rows).
///
/// `RLX_OPS_ONLY=norm_gelu,cross_entropy` (a comma-separated list of the group names
/// below) runs only those groups: profiling one op need not wait for the matmul rows.
pub fn all(rows: &mut Vec<Row>, plan: Plan) {
    let c = GptConfig::w11(4);
    let only = std::env::var("RLX_OPS_ONLY").ok();
    let on = |group: &str| {
        only.as_deref()
            .is_none_or(|l| l.split(',').any(|g| g.trim() == group))
    };
    type Group = fn(&mut Vec<Row>, Plan, &GptConfig);
    let groups: [(&str, Group); 7] = [
        ("embedding", embedding),
        ("split_concat", split_concat),
        ("attention", attention),
        ("norm_gelu", norm_gelu),
        ("cross_entropy", cross_entropy),
        ("adamw", adamw),
        ("matmuls", matmuls),
    ];
    for (name, f) in groups {
        if on(name) {
            f(rows, plan, &c);
        }
    }
}

fn embedding(rows: &mut Vec<Row>, plan: Plan, c: &GptConfig) {
    let (n, d, v) = (c.tokens(), c.d_model, c.vocab);
    let (b, t) = (c.batch, c.seq);
    let mut rng = Normal::new(21);
    let wte = rng.vec(v * d, 1.0);
    let idx = token_ids(n, v, 22);
    let g = rng.vec(n * d, 1.0);
    let fwd = Func::new("gather", |s| {
        let w = s.input("wte", f32s(&[v, d]));
        w.gather(&s.input("idx", i32s(&[b, t])), 0)
    });
    let want = r::gather(&wte, &idx, d);
    bench(
        rows,
        plan,
        "embedding",
        "rlx_fwd",
        &fwd,
        &[("wte", wte.clone()), ("idx", idx.clone())],
        // gathered rows read + output written + the ids
        Work::Bytes(b4(2 * n * d + n)),
        "wte[512,256] gathered by ids [8,128]",
        Some(&|o: &[Vec<f32>]| rlx_bench::inputs::rel_err(&o[0], &want)),
    );
    let bwd = Func::new("gather_bwd", |s| {
        let w = s.input("wte", f32s(&[v, d]));
        let y = w.gather(&s.input("idx", i32s(&[b, t])), 0);
        dot_cotangent(s, &y, "g")
    })
    .grad(&["wte"]);
    let want = r::scatter_add(&g, &idx, v, d);
    bench(
        rows,
        plan,
        "embedding",
        "rlx_bwd",
        &bwd,
        &[("wte", wte), ("idx", idx), ("g", g)],
        // cotangent rows read + dW written once + the ids
        Work::Bytes(b4(n * d + v * d + n)),
        "scatter-add of [1024,256] rows into dW [512,256]",
        Some(&|o: &[Vec<f32>]| rlx_bench::inputs::rel_err(&o[0], &want)),
    );
}

fn split_concat(rows: &mut Vec<Row>, plan: Plan, c: &GptConfig) {
    let (b, t, d) = (c.batch, c.seq, c.d_model);
    let n = b * t;
    let mut rng = Normal::new(31);
    let qkv = rng.vec(n * 3 * d, 1.0);
    let parts: Vec<Vec<f32>> = (0..3).map(|_| rng.vec(n * d, 1.0)).collect();
    let fwd = Func::multi("narrow", |s| {
        let x = s.input("qkv", f32s(&[b, t, 3 * d]));
        (0..3).map(|i| x.narrow(2, i * d, d)).collect()
    });
    let want: Vec<Vec<f32>> = (0..3)
        .map(|i| r::narrow_last(&qkv, 3 * d, i * d, d))
        .collect();
    bench(
        rows,
        plan,
        "qkv_split",
        "rlx_fwd",
        &fwd,
        &[("qkv", qkv.clone())],
        Work::Bytes(b4(2 * n * 3 * d)),
        "narrow [8,128,768] into q, k, v (3 outputs materialized)",
        Some(&|o: &[Vec<f32>]| {
            (0..3)
                .map(|i| rlx_bench::inputs::rel_err(&o[i], &want[i]))
                .fold(0.0, f64::max)
        }),
    );
    let bwd = Func::new("narrow_bwd", |s| {
        let x = s.input("qkv", f32s(&[b, t, 3 * d]));
        let mut loss = dot_cotangent(s, &x.narrow(2, 0, d), "gq");
        loss = &loss + &dot_cotangent(s, &x.narrow(2, d, d), "gk");
        &loss + &dot_cotangent(s, &x.narrow(2, 2 * d, d), "gv")
    })
    .grad(&["qkv"]);
    let want = r::concat_last(&parts, d);
    let inputs = [
        ("qkv", qkv),
        ("gq", parts[0].clone()),
        ("gk", parts[1].clone()),
        ("gv", parts[2].clone()),
    ];
    bench(
        rows,
        plan,
        "qkv_split",
        "rlx_bwd",
        &bwd,
        &inputs,
        Work::Bytes(b4(2 * n * 3 * d)),
        "d(qkv) from dq, dk, dv: 3 reads of [1024,256], one [1024,768] write",
        Some(&|o: &[Vec<f32>]| rlx_bench::inputs::rel_err(&o[0], &want)),
    );
    let cat = Func::new("concat", |s| {
        let ts: Vec<Tensor> = ["a", "b", "c"]
            .iter()
            .map(|nm| s.input(*nm, f32s(&[b, t, d])))
            .collect();
        s.cat(&[&ts[0], &ts[1], &ts[2]], 2)
    });
    bench(
        rows,
        plan,
        "concat",
        "rlx_fwd",
        &cat,
        &[
            ("a", parts[0].clone()),
            ("b", parts[1].clone()),
            ("c", parts[2].clone()),
        ],
        Work::Bytes(b4(2 * n * 3 * d)),
        "cat of 3 × [8,128,256] on the last axis",
        Some(&|o: &[Vec<f32>]| rlx_bench::inputs::rel_err(&o[0], &want)),
    );
}

fn attention(rows: &mut Vec<Row>, plan: Plan, c: &GptConfig) {
    let (b, t, d, h, hd) = (c.batch, c.seq, c.d_model, c.heads, c.head_dim());
    let mut rng = Normal::new(41);
    let [q, k, v, g] = [(); 4].map(|_| rng.vec(b * t * d, 1.0));
    let pairs = (b * t * (t + 1) / 2) as f64;
    // q·kᵀ and p·v over the causal half, all heads (H · hd = d).
    let fwd_flops = 2.0 * 2.0 * pairs * d as f64;
    let att = |s: &mut GraphScope| {
        let [q, k, v] = ["q", "k", "v"].map(|nm| s.input(nm, f32s(&[b, t, d])));
        q.attention(&k, &v, h, hd, MaskKind::Causal)
    };
    let want = r::causal_attention(&q, &k, &v, b, t, h, hd);
    bench(
        rows,
        plan,
        "attention",
        "rlx_fwd",
        &Func::new("attention", att),
        &[("q", q.clone()), ("k", k.clone()), ("v", v.clone())],
        Work::Flops(fwd_flops),
        "causal, 8 heads of 32, [8,128,256]; flops of the causal half",
        Some(&|o: &[Vec<f32>]| rlx_bench::inputs::rel_err(&o[0], &want)),
    );
    let bwd = Func::new("attention_bwd", |s| {
        let y = att(s);
        dot_cotangent(s, &y, "g")
    })
    .grad(&["q", "k", "v"]);
    bench(
        rows,
        plan,
        "attention",
        "rlx_bwd",
        &bwd,
        &[("q", q), ("k", k), ("v", v), ("g", g)],
        // dV = Pᵀ·dO, dP = dO·Vᵀ, dQ = dS·K, dK = dSᵀ·Q; recomputing S and P not counted
        Work::Flops(2.0 * fwd_flops),
        "dq, dk, dv; flops: the 4 gradient products (no recompute counted)",
        None,
    );
}

fn norm_gelu(rows: &mut Vec<Row>, plan: Plan, c: &GptConfig) {
    let (n, d) = (c.tokens(), c.d_model);
    let mut rng = Normal::new(51);
    let x = rng.vec(n * d, 1.0);
    let gy = rng.vec(n * d, 1.0);
    let gamma: Vec<f32> = rng.vec(d, 0.1).iter().map(|v| 1.0 + v).collect();
    let beta = rng.vec(d, 0.1);
    let ln_in = [
        ("x", x.clone()),
        ("gamma", gamma.clone()),
        ("beta", beta.clone()),
    ];
    let mut bwd_in = ln_in.to_vec();
    bwd_in.push(("gy", gy));
    // LayerNorm, and RMSNorm (Llama-style models' norm) at the same shape: its backward
    // is a row group of its own (no mean, one statistic fewer than LayerNorm's).
    for rms in [false, true] {
        let (op, want) = if rms {
            ("rms_norm", r::rms_norm(&x, d, &gamma, &beta))
        } else {
            ("layer_norm", r::layer_norm(&x, d, &gamma, &beta))
        };
        let norm = move |s: &mut GraphScope| {
            let x = s.input("x", f32s(&[n, d]));
            let g = s.input("gamma", f32s(&[d]));
            let b = s.input("beta", f32s(&[d]));
            if rms {
                x.rms_norm(&g, &b, gpt::LN_EPS)
            } else {
                x.layer_norm(&g, &b, gpt::LN_EPS)
            }
        };
        bench(
            rows,
            plan,
            op,
            "rlx_fwd",
            &Func::new(op, norm),
            &ln_in,
            Work::Bytes(b4(2 * n * d)),
            "[1024,256] with gamma, beta",
            Some(&|o: &[Vec<f32>]| rlx_bench::inputs::rel_err(&o[0], &want)),
        );
        let bwd = Func::new(format!("{op}_bwd"), |s| {
            let y = norm(s);
            dot_cotangent(s, &y, "gy")
        })
        .grad(&["x", "gamma", "beta"]);
        bench(
            rows,
            plan,
            op,
            "rlx_bwd",
            &bwd,
            &bwd_in,
            // x and dy read, dx written (dgamma, dbeta: 2·d, negligible)
            Work::Bytes(b4(3 * n * d + 2 * d)),
            "dx, dgamma, dbeta",
            None,
        );
    }

    let m = 4 * d;
    let u = rng.vec(n * m, 1.5);
    let gu = rng.vec(n * m, 1.0);
    let gelu = |s: &mut GraphScope| s.input("u", f32s(&[n, m])).gelu();
    let want = r::gelu(&u);
    bench(
        rows,
        plan,
        "gelu_erf",
        "rlx_fwd",
        &Func::new("gelu", gelu),
        &[("u", u.clone())],
        Work::Bytes(b4(2 * n * m)),
        "exact GELU on the MLP hidden [1024,1024]",
        Some(&|o: &[Vec<f32>]| rlx_bench::inputs::rel_err(&o[0], &want)),
    );
    let bwd = Func::new("gelu_bwd", |s| {
        let y = gelu(s);
        dot_cotangent(s, &y, "g")
    })
    .grad(&["u"]);
    let want = r::gelu_vjp(&u, &gu);
    bench(
        rows,
        plan,
        "gelu_erf",
        "rlx_bwd",
        &bwd,
        &[("u", u), ("g", gu)],
        Work::Bytes(b4(3 * n * m)),
        "g · GELU'(u): u and g read, du written",
        Some(&|o: &[Vec<f32>]| rlx_bench::inputs::rel_err(&o[0], &want)),
    );
}

fn cross_entropy(rows: &mut Vec<Row>, plan: Plan, c: &GptConfig) {
    let (n, d, v) = (c.tokens(), c.d_model, c.vocab);
    let mut rng = Normal::new(61);
    let logits = rng.vec(n * v, 1.0);
    let tgt = token_ids(n, v, 62);
    let h = rng.vec(n * d, 1.0);
    let wte = rng.vec(v * d, 0.1);
    let ce_in = |s: &mut GraphScope| {
        let z = s.input("logits", f32s(&[n, v]));
        z.softmax_cross_entropy_with_logits(&s.input("tgt", i32s(&[n])))
            .mean_all()
    };
    let want = r::mean_ce(&logits, &tgt, v);
    let inputs = [("logits", logits), ("tgt", tgt.clone())];
    bench(
        rows,
        plan,
        "cross_entropy",
        "rlx_fwd_input",
        &Func::new("ce", ce_in),
        &inputs,
        Work::Bytes(b4(n * v + n)),
        "mean CE of logits [1024,512] given as input, integer labels",
        Some(&|o: &[Vec<f32>]| rlx_bench::inputs::rel_err(&o[0], &[want as f32])),
    );
    bench(
        rows,
        plan,
        "cross_entropy",
        "rlx_bwd_input",
        &Func::new("ce", ce_in).grad(&["logits"]),
        &inputs,
        Work::Bytes(b4(2 * n * v + n)),
        "d(logits): logits read, gradient written",
        None,
    );
    // The tied head then CE, as in W11: logits = h · wteᵀ never leave the program.
    let head = |s: &mut GraphScope| {
        let h = s.input("h", f32s(&[n, d]));
        h.matmul_t(&s.input("wte", f32s(&[v, d])))
    };
    let mm_flops = 2.0 * (n * d * v) as f64;
    let head_in = [("h", h.clone()), ("wte", wte.clone())];
    bench(
        rows,
        plan,
        "cross_entropy",
        "rlx_head_matmul_only",
        &Func::new("head", head),
        &head_in,
        Work::Flops(mm_flops),
        "h[1024,256] · wteᵀ[256,512] alone (logits out)",
        None,
    );
    let head_ce = |s: &mut GraphScope| {
        let z = head(s);
        z.softmax_cross_entropy_with_logits(&s.input("tgt", i32s(&[n])))
            .mean_all()
    };
    let want = r::mean_ce(&r::matmul_t(&h, &wte, n, d, v), &tgt, v);
    let inputs = [("h", h), ("wte", wte), ("tgt", tgt)];
    bench(
        rows,
        plan,
        "cross_entropy",
        "rlx_fwd_after_matmul",
        &Func::new("head_ce", head_ce),
        &inputs,
        Work::Flops(mm_flops),
        "mean CE(h · wteᵀ); flops of the matmul only",
        Some(&|o: &[Vec<f32>]| rlx_bench::inputs::rel_err(&o[0], &[want as f32])),
    );
    bench(
        rows,
        plan,
        "cross_entropy",
        "rlx_bwd_after_matmul",
        &Func::new("head_ce", head_ce).value_and_grad(&["h", "wte"]),
        &inputs,
        // forward product + dh = dz·wte + dwte = dzᵀ·h
        Work::Flops(3.0 * mm_flops),
        "loss, dh, dwte (the W11 head); flops of the 3 products",
        None,
    );
}

fn adamw(rows: &mut Vec<Row>, plan: Plan, c: &GptConfig) {
    let shapes = c.param_shapes();
    let count = c.param_count();
    // loss = Σ_p Σ p ⊙ g_p: each param's gradient is its input g_p, read from memory as a
    // real step's gradient would be.
    let f = Func::new("adamw_only", |s| {
        let mut loss: Option<Tensor> = None;
        for (name, dims) in &shapes {
            let p = s.param(name.clone(), f32s(dims));
            let term = dot_cotangent(s, &p, &format!("g/{name}"));
            loss = Some(match loss {
                None => term,
                Some(l) => &l + &term,
            });
        }
        loss.expect("W11 has params")
    });
    let mut rng = Normal::new(71);
    let f = f.init_params(|_, dims| rng.vec(dims.iter().product(), 0.02));
    let grads: Vec<(String, Vec<f32>)> = shapes
        .iter()
        .map(|(name, dims)| (format!("g/{name}"), rng.vec(dims.iter().product(), 1e-3)))
        .collect();
    let inputs: Vec<(&str, &[f32])> = grads
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_slice()))
        .collect();
    let configs: [(&str, rlx_tensor::AdamW, &str); 2] = [
        (
            "rlx_torch_f64",
            gpt::adamw(),
            "W11's AdamW::torch (f64 math)",
        ),
        (
            "rlx_f32",
            rlx_tensor::AdamW::new(3e-4)
                .with_betas(0.9, 0.95)
                .with_weight_decay(0.1)
                .with_f32_math(true)
                .with_group(rlx_tensor::ParamGroup::no_decay_below_rank(2)),
            "f32 math",
        ),
    ];
    for (system, mut opt, math) in configs {
        let mut model = f.clone();
        model = model.train_step_all(&mut opt, &inputs).0;
        let t = time(plan, || {
            model = model.train_step_all(&mut opt, &inputs).0;
        });
        rows.push(
            Row::new("OPS_adamw_update", system, t)
                // p, g, m, v read and p, m, v written: 7 arrays. The loss's Σ p ⊙ g reads
                // p and g too, but a step that fuses it with the update reads them once, so
                // they are not counted again (counting them, as this row once did, credited
                // 9 arrays of traffic where 7 are needed: a 9/7 too high fraction).
                .bytes(b4(7 * count))
                .bound(Bound::Bandwidth)
                .note(&format!(
                    "fused train_step over W11's {:.2} M params, {math}; 7 arrays counted (p, g, m, v read; p, m, v written)",
                    count as f64 / 1e6
                )),
        );
    }
}

fn matmuls(rows: &mut Vec<Row>, plan: Plan, c: &GptConfig) {
    let m = c.tokens();
    let mut rng = Normal::new(81);
    let sizes = [256, 768, 1024];
    let mut shapes: Vec<(&str, usize, usize)> = Vec::new();
    for &k in &sizes {
        for &n in &sizes {
            shapes.push(("nn", k, n));
        }
    }
    // The backward's transposed forms at W11's projections (K × N of the weight).
    let weights = [(256, 768), (256, 256), (256, 1024), (1024, 256)];
    for &(k, n) in &weights {
        shapes.push(("tn", k, n)); // dW = xᵀ · dy : [k, m] · [m, n]
        shapes.push(("nt", k, n)); // dx = dy · Wᵀ : [m, n] · [n, k]
    }
    for (form, k, n) in shapes {
        let (f, inputs, what, flops) = match form {
            "nn" => (
                Func::new("mm", move |s| {
                    let a = s.input("a", f32s(&[m, k]));
                    a.matmul(&s.input("b", f32s(&[k, n])))
                }),
                [("a", rng.vec(m * k, 1.0)), ("b", rng.vec(k * n, 1.0))],
                format!("[{m},{k}] · [{k},{n}]"),
                2.0 * (m * k * n) as f64,
            ),
            "tn" => (
                Func::new("mm_tn", move |s| {
                    let x = s.input("a", f32s(&[m, k]));
                    x.t().matmul(&s.input("b", f32s(&[m, n])))
                }),
                [("a", rng.vec(m * k, 1.0)), ("b", rng.vec(m * n, 1.0))],
                format!("dW: xᵀ[{k},{m}] · dy[{m},{n}]"),
                2.0 * (m * k * n) as f64,
            ),
            _ => (
                Func::new("mm_nt", move |s| {
                    let dy = s.input("a", f32s(&[m, n]));
                    dy.matmul_t(&s.input("b", f32s(&[k, n])))
                }),
                [("a", rng.vec(m * n, 1.0)), ("b", rng.vec(k * n, 1.0))],
                format!("dx: dy[{m},{n}] · Wᵀ[{n},{k}]"),
                2.0 * (m * k * n) as f64,
            ),
        };
        // The check covers the first CHECK_ROWS rows of the result (an f64 product of all
        // of them would take longer than the benchmark).
        let (a, b) = (&inputs[0].1, &inputs[1].1);
        let want = match form {
            "nn" => r::matmul(&a[..CHECK_ROWS * k], b, CHECK_ROWS, k, n),
            "tn" => r::matmul_tn(a, b, m, k, n, CHECK_ROWS),
            _ => r::matmul_t(&a[..CHECK_ROWS * n], b, CHECK_ROWS, n, k),
        };
        bench(
            rows,
            plan,
            &format!("matmul_{form}"),
            &format!("rlx_k{k}_n{n}"),
            &f,
            &inputs,
            Work::Flops(flops),
            &what,
            Some(&|o: &[Vec<f32>]| rlx_bench::inputs::rel_err(&o[0][..want.len()], &want)),
        );
    }
}

/// Result rows checked per matmul row.
const CHECK_ROWS: usize = 64;
