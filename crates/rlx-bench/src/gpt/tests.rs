use super::*;

/// A model small enough for an f64 reference in debug builds, with every size distinct
/// (so that a swapped axis shows up as a shape error or a wrong value).
fn tiny(layers: usize) -> GptConfig {
    GptConfig {
        vocab: 11,
        layers,
        d_model: 8,
        heads: 2,
        seq: 5,
        batch: 3,
    }
}

/// Every param random (gains and biases too, so that a gain/bias mix-up changes the loss).
fn random_params(f: Func, seed: u64) -> Func {
    let mut r = crate::inputs::Normal::new(seed);
    f.init_params(|name, dims| {
        let n: usize = dims.iter().product();
        let v = r.vec(n, 0.4);
        if is_ln_gain(name) {
            v.iter().map(|x| 1.0 + x).collect()
        } else {
            v
        }
    })
}

/// erf to ~1e-7 (Abramowitz & Stegun 7.1.26), enough for a loss compared at 1e-4.
fn erf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let y = 1.0 - poly * (-x * x).exp();
    if x >= 0.0 { y } else { -y }
}

/// `x [n, k] · w [k, m] + b [m]` in f64.
fn linear(x: &[f64], n: usize, k: usize, w: &[f32], b: &[f32]) -> Vec<f64> {
    let m = b.len();
    let mut y = vec![0.0; n * m];
    for i in 0..n {
        for j in 0..m {
            y[i * m + j] = b[j] as f64
                + (0..k)
                    .map(|p| x[i * k + p] * w[p * m + j] as f64)
                    .sum::<f64>();
        }
    }
    y
}

fn layer_norm(x: &[f64], d: usize, g: &[f32], b: &[f32]) -> Vec<f64> {
    let mut y = vec![0.0; x.len()];
    for (row, out) in x.chunks(d).zip(y.chunks_mut(d)) {
        let mean = row.iter().sum::<f64>() / d as f64;
        let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / d as f64;
        let rstd = 1.0 / (var + LN_EPS as f64).sqrt();
        for j in 0..d {
            out[j] = (row[j] - mean) * rstd * g[j] as f64 + b[j] as f64;
        }
    }
    y
}

/// The model's loss written out in f64 loops, independent of the rlx graph.
fn reference_loss(c: &GptConfig, f: &Func, idx: &[f32], tgt: &[f32]) -> f64 {
    let p = |n: &str| f.param_binding(n).expect("bound param");
    let (b, t, d, v, hd) = (c.batch, c.seq, c.d_model, c.vocab, c.head_dim());
    let n = b * t;
    let (wte, wpe) = (p("wte"), p("wpe"));
    let mut x = vec![0.0; n * d];
    for r in 0..n {
        let tok = idx[r] as usize;
        for j in 0..d {
            x[r * d + j] = wte[tok * d + j] as f64 + wpe[(r % t) * d + j] as f64;
        }
    }
    for l in 0..c.layers {
        let q = |s: &str| p(&format!("h{l}.{s}"));
        let h = layer_norm(&x, d, q("ln1.g"), q("ln1.b"));
        let qkv = linear(&h, n, d, q("qkv.w"), q("qkv.b"));
        let mut y = vec![0.0; n * d];
        for bi in 0..b {
            for head in 0..c.heads {
                for i in 0..t {
                    let at = |s: usize, part: usize, e: usize| {
                        qkv[(bi * t + s) * 3 * d + part * d + head * hd + e]
                    };
                    let scores: Vec<f64> = (0..=i)
                        .map(|j| {
                            (0..hd).map(|e| at(i, 0, e) * at(j, 1, e)).sum::<f64>()
                                / (hd as f64).sqrt()
                        })
                        .collect();
                    let mx = scores.iter().cloned().fold(f64::MIN, f64::max);
                    let z: f64 = scores.iter().map(|s| (s - mx).exp()).sum();
                    for e in 0..hd {
                        y[(bi * t + i) * d + head * hd + e] = (0..=i)
                            .map(|j| (scores[j] - mx).exp() / z * at(j, 2, e))
                            .sum();
                    }
                }
            }
        }
        let o = linear(&y, n, d, q("proj.w"), q("proj.b"));
        x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
        let h = layer_norm(&x, d, q("ln2.g"), q("ln2.b"));
        let h: Vec<f64> = linear(&h, n, d, q("fc.w"), q("fc.b"))
            .into_iter()
            .map(|u| 0.5 * u * (1.0 + erf(u / std::f64::consts::SQRT_2)))
            .collect();
        let o = linear(&h, n, 4 * d, q("fc2.w"), q("fc2.b"));
        x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
    }
    let h = layer_norm(&x, d, p("lnf.g"), p("lnf.b"));
    let mut total = 0.0;
    for r in 0..n {
        let logits: Vec<f64> = (0..v)
            .map(|tok| {
                (0..d)
                    .map(|j| h[r * d + j] * wte[tok * d + j] as f64)
                    .sum::<f64>()
            })
            .collect();
        let mx = logits.iter().cloned().fold(f64::MIN, f64::max);
        let lse = mx + logits.iter().map(|z| (z - mx).exp()).sum::<f64>().ln();
        total += lse - logits[tgt[r] as usize];
    }
    total / n as f64
}

#[test]
fn w11_has_transformer_py_param_count() {
    // PyTorch's count for V=512, T=128, d=256, 4 blocks: embeddings + 4 blocks + lnf.
    let per_block = 2 * 256
        + (256 * 768 + 768)
        + (256 * 256 + 256)
        + 2 * 256
        + (256 * 1024 + 1024)
        + (1024 * 256 + 256);
    assert_eq!(per_block, 789_760);
    let c = GptConfig::w11(4);
    assert_eq!(
        c.param_count(),
        512 * 256 + 128 * 256 + 4 * per_block + 2 * 256
    );
    let f = loss_func(&c);
    let names = f.param_names();
    let shapes = c.param_shapes();
    assert_eq!(names.len(), shapes.len());
    for (name, dims) in &shapes {
        assert_eq!(f.param_shape_of(name).as_ref(), Some(dims), "param {name}");
    }
}

#[test]
fn loss_matches_an_f64_reference_of_the_model() {
    for (layers, layout) in [
        (1, Layout::Batched),
        (2, Layout::Batched),
        (2, Layout::Flat),
    ] {
        let c = tiny(layers);
        let f = random_params(loss_func_with(&c, layout), 3 + layers as u64);
        let mut data = TokenStream::new(&c, 5);
        let (idx, tgt) = data.next_batch();
        let got = f.run(&[("idx", &idx), ("tgt", &tgt)])[0][0] as f64;
        let want = reference_loss(&c, &f, &idx, &tgt);
        assert!(
            (got - want).abs() < 1e-4 * want.abs().max(1.0),
            "{layers} layer(s), {layout:?}: rlx loss {got}, f64 reference {want}"
        );
    }
}

#[test]
fn initial_loss_is_near_log_vocab() {
    // N(0, 0.02) weights give nearly uniform logits: loss ≈ ln V.
    let c = GptConfig {
        vocab: 64,
        layers: 2,
        d_model: 32,
        heads: 4,
        seq: 16,
        batch: 4,
    };
    let f = model(&c, 1);
    let (idx, tgt) = TokenStream::new(&c, 2).next_batch();
    let loss = f.run(&[("idx", &idx), ("tgt", &tgt)])[0][0];
    assert!((loss - 64f32.ln()).abs() < 0.05, "loss {loss}");
}

#[test]
fn batches_are_windows_of_the_stream_with_targets_shifted_by_one() {
    let c = tiny(1);
    let mut s = TokenStream::new(&c, 9);
    let (idx, tgt) = s.next_batch();
    assert_eq!((idx.len(), tgt.len()), (c.tokens(), c.tokens()));
    for b in 0..c.batch {
        let (x, y) = (&idx[b * c.seq..][..c.seq], &tgt[b * c.seq..][..c.seq]);
        assert_eq!(x[1..], y[..c.seq - 1], "sequence {b}");
    }
    assert!(
        idx.iter()
            .all(|&v| v.fract() == 0.0 && (0.0..11.0).contains(&v))
    );
    assert_ne!(s.next_batch().0, idx, "a new batch each call");
}

#[test]
fn forward_flops_count_projections_head_and_causal_attention() {
    let c = tiny(1);
    let (n, d) = (15.0, 8.0);
    let proj = 2.0 * n * 12.0 * d * d;
    let att = 4.0 * 3.0 * 15.0 * d; // B · T(T+1)/2 pairs = 3 · 15
    let head = 2.0 * n * d * 11.0;
    assert_eq!(c.forward_flops(), proj + att + head);
    assert_eq!(c.step_flops(), 3.0 * c.forward_flops());
}

#[cfg(feature = "train")]
#[test]
fn training_on_one_batch_drives_the_loss_down() {
    let c = tiny(2);
    let f = model(&c, 4);
    let (idx, tgt) = TokenStream::new(&c, 6).next_batch();
    let mut opt = rlx_tensor::AdamW::torch(1e-2, (0.9, 0.95), 0.1);
    let mut f = f;
    let mut losses = Vec::new();
    for _ in 0..60 {
        let (nf, loss) = f.train_step_all(&mut opt, &[("idx", &idx), ("tgt", &tgt)]);
        losses.push(loss[0]);
        f = nf;
    }
    assert!(
        (losses[0] - 11f32.ln()).abs() < 0.05,
        "first loss {}",
        losses[0]
    );
    assert!(
        losses[59] < 0.5 * losses[0],
        "loss {} -> {} after 60 steps on one batch",
        losses[0],
        losses[59]
    );
}

#[cfg(feature = "train")]
#[test]
fn adamw_decays_only_the_two_dimensional_weights() {
    use rlx_tensor::Optimizer;
    // One step from a zero gradient: AdamW's update is the decay alone, p·(1 − lr·wd).
    let mut opt = adamw();
    let (mut w, mut b) = (vec![1.0f32; 4], vec![1.0f32; 2]);
    opt.step("h0.fc.w", &[2, 2], &mut w, &[0.0; 4]);
    opt.step("h0.fc.b", &[2], &mut b, &[0.0; 2]);
    assert_eq!(w[0], (1.0 - 3e-4 * 0.1f64) as f32);
    assert_eq!(b[0], 1.0, "rank-1 params are in the no_decay group");
}

#[test]
fn bf16_matmuls_change_the_loss_by_bf16_rounding_only_and_keep_the_f32_params() {
    // The same params bound to the bf16-matmul model: the loss differs from the f32 one
    // (the casts are really there) by about bf16's rounding (not by a wiring mistake),
    // and the params are the same f32 params in the same order.
    let c = tiny(2);
    let f32_model = random_params(loss_func(&c), 9);
    let bf = loss_func_in(&c, Layout::Batched, Precision::Bf16Matmuls)
        .init_params(|name, _| f32_model.param_binding(name).expect("same params").to_vec());
    assert_eq!(bf.param_names(), f32_model.param_names());
    let (idx, tgt) = TokenStream::new(&c, 2).next_batch();
    let l32 = f32_model.run(&[("idx", &idx), ("tgt", &tgt)])[0][0];
    let l16 = bf.run(&[("idx", &idx), ("tgt", &tgt)])[0][0];
    let rel = ((l16 - l32) / l32).abs();
    assert!(rel > 1e-6 && rel < 2e-2, "bf16 loss {l16} vs f32 {l32}");
}

#[cfg(feature = "train")]
#[test]
fn training_with_bf16_matmuls_follows_the_f32_loss_curve() {
    // Mixed precision as W11 runs it: bf16 products, f32 master weights and AdamW,
    // 40 steps memorizing one batch (so that the loss has somewhere to go: on W11's
    // uniformly random tokens it cannot fall below ln V). Both curves fall by more than
    // half and agree within 3 % at every step (bf16 keeps 8 significant bits), relative to
    // the f32 loss or, once that has fallen below a twentieth of the first, to that
    // twentieth: near zero (the last steps reach 1/85 of the start) the loss is a small
    // difference, and rounding anywhere in the step is a large share of it (the JIT's
    // fused GELU' put the last step's gap at 3.3 % of a 0.049 loss: 0.0016 absolute).
    let c = GptConfig {
        vocab: 64,
        layers: 2,
        d_model: 32,
        heads: 4,
        seq: 16,
        batch: 4,
    };
    let (idx, tgt) = TokenStream::new(&c, 5).next_batch();
    let curve = |prec: Precision| {
        let mut f = model_in(&c, Layout::Batched, prec, 3);
        let mut opt = rlx_tensor::AdamW::torch(1e-2, (0.9, 0.95), 0.1);
        let mut losses = Vec::new();
        for _ in 0..40 {
            let (nf, loss) = f.train_step_all(&mut opt, &[("idx", &idx), ("tgt", &tgt)]);
            losses.push(loss[0]);
            f = nf;
        }
        losses
    };
    let (a, b) = (curve(Precision::F32), curve(Precision::Bf16Matmuls));
    let worst = a
        .iter()
        .zip(&b)
        .map(|(x, y)| ((x - y) / x.max(a[0] / 20.0)).abs())
        .fold(0f32, f32::max);
    assert!(
        worst < 3e-2,
        "f32 {a:?}\nbf16 {b:?}\nworst relative gap {worst}"
    );
    assert!(worst > 0.0, "the bf16 run must differ from f32 somewhere");
    assert!(
        a[39] < 0.5 * a[0] && b[39] < 0.5 * b[0],
        "f32 {a:?}\nbf16 {b:?}"
    );
}
