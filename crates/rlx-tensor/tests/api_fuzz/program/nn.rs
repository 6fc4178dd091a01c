//! Linear-algebra and network calls: matmul (plain and transposed), linear layers,
//! layer/RMS norm, the two cross-entropy losses, conv2d, pool2d, attention, rope and
//! FFT — operands shaped to fit most of the time, with a wrong inner size, rank,
//! head count, window or group count otherwise.

use super::case::Case;
use super::leaves::{self, constant};
use super::shape_ops::{axis, operand};
use super::source::Draw;
use rlx_ir::ReduceOp;
use rlx_tensor::{Activation, DType, Dim, MaskKind, ScaleLayout, ScaledFormat, Tensor};

/// The size of `x`'s last axis if static (a guess otherwise).
fn last(c: &Case, x: usize, d: &mut Draw) -> usize {
    match c.shape(x).dims().last() {
        Some(Dim::Static(n)) => *n,
        _ => 1 + d.below(4),
    }
}

/// `n`, or now and then a neighbour of it (a mismatched size).
fn near(d: &mut Draw, n: usize) -> usize {
    if d.percent(12) {
        d.pick(&[n + 1, n.saturating_sub(1), 0, 7])
    } else {
        n
    }
}

/// The float dtype of an nn operand (mostly f32).
fn fdt(d: &mut Draw) -> DType {
    if d.percent(90) {
        DType::F32
    } else {
        d.pick(&[DType::F64, DType::F16, DType::I32])
    }
}

/// One network call.
pub fn step(c: &mut Case, d: &mut Draw) {
    let Some(x) = operand(c, d) else { return };
    let xn = c.name(x);
    match d.below(12) {
        0..=2 => {
            let k = last(c, x, d);
            let k = near(d, k);
            let n = leaves::size(d).max(1);
            let mut batch: Vec<usize> = Vec::new();
            if d.percent(20) {
                batch.push(d.pick(&[1, 2]));
            }
            let transposed = d.percent(30);
            let mut dims = batch.clone();
            dims.extend(if transposed { [n, k] } else { [k, n] });
            let dt = if d.percent(90) {
                c.shape(x).dtype()
            } else {
                fdt(d)
            };
            let Some(w) = (if d.percent(15) {
                operand(c, d)
            } else {
                constant(c, d, &dims, dt)
            }) else {
                return;
            };
            let wn = c.name(w);
            if transposed {
                c.call(format!("{xn}.try_matmul_t(&{wn})"), &[x, w], |t| {
                    t[0].try_matmul_t(&t[1]).map(|t| vec![t])
                });
            } else {
                c.call(format!("{xn}.try_matmul(&{wn})"), &[x, w], |t| {
                    t[0].try_matmul(&t[1]).map(|t| vec![t])
                });
            }
        }
        3 => {
            let i = last(c, x, d);
            let (i, o) = (near(d, i), leaves::size(d).max(1));
            let dt = fdt(d);
            let Some(w) = constant(c, d, &[o, i], dt) else {
                return;
            };
            let bdims = if d.percent(10) { vec![o + 1] } else { vec![o] };
            let Some(b) = constant(c, d, &bdims, dt) else {
                return;
            };
            let act = if d.percent(50) {
                Some(d.pick(&Activation::ALL))
            } else {
                None
            };
            let (wn, bn) = (c.name(w), c.name(b));
            c.call(
                format!("{xn}.try_linear_act(&{wn}, &{bn}, {act:?})"),
                &[x, w, b],
                move |t| t[0].try_linear_act(&t[1], &t[2], act).map(|t| vec![t]),
            );
        }
        4 => {
            let n = last(c, x, d);
            let (n, nb) = (near(d, n), near(d, n));
            let dt = fdt(d);
            let Some(g) = constant(c, d, &[n], dt) else {
                return;
            };
            let Some(b) = constant(c, d, &[nb], dt) else {
                return;
            };
            let eps = d.pick(&[1e-5f32, 0.0, 1e-3]);
            let (gn, bn) = (c.name(g), c.name(b));
            if d.percent(50) {
                c.call(
                    format!("{xn}.try_layer_norm(&{gn}, &{bn}, {eps:?})"),
                    &[x, g, b],
                    move |t| t[0].try_layer_norm(&t[1], &t[2], eps).map(|t| vec![t]),
                );
            } else {
                c.call(
                    format!("{xn}.try_rms_norm(&{gn}, &{bn}, {eps:?})"),
                    &[x, g, b],
                    move |t| t[0].try_rms_norm(&t[1], &t[2], eps).map(|t| vec![t]),
                );
            }
        }
        5 => losses(c, d, x),
        6 | 7 => conv_or_pool(c, d),
        8 | 9 => attention(c, d),
        10 if d.percent(50) => rare(c, d),
        10 => {
            let a = axis(d, c.shape(x).rank());
            let inv = d.below(2) == 1;
            c.call(format!("{xn}.try_fft_axis({a}, {inv})"), &[x], move |t| {
                t[0].try_fft_axis(a, inv).map(|t| vec![t])
            });
        }
        _ => rope(c, d),
    }
}

/// `cross_entropy` with dense targets or `softmax_cross_entropy_with_logits` with
/// class labels (in range most of the time).
fn losses(c: &mut Case, d: &mut Draw, x: usize) {
    let s = c.shape(x);
    let dims: Vec<usize> = s
        .dims()
        .iter()
        .map(|dim| dim.as_static().unwrap_or(2))
        .collect();
    let xn = c.name(x);
    if d.percent(50) {
        let Some(t) = constant(c, d, &dims, s.dtype()) else {
            return;
        };
        let tn = c.name(t);
        c.call(format!("{xn}.try_cross_entropy(&{tn})"), &[x, t], |t| {
            t[0].try_cross_entropy(&t[1]).map(|t| vec![t])
        });
    } else {
        let (rows, classes) = match dims.as_slice() {
            [n, k] => (*n, *k as i64),
            _ => (d.below(4), 3),
        };
        let hi = if d.percent(15) {
            classes + 2
        } else {
            (classes - 1).max(0)
        };
        let v: Vec<f64> = (0..rows).map(|_| d.range(0, hi) as f64).collect();
        let dt = d.pick(&[DType::F32, DType::I64]);
        let code = format!(
            "Tensor::from_f64_as({}, [{rows}], DType::{dt:?})",
            leaves::vec_code(&v)
        );
        let Some(l) = c.call(code, &[], move |_| {
            Ok(vec![Tensor::from_f64_as(&v, [rows], dt)])
        }) else {
            return;
        };
        let ln = c.name(l[0]);
        c.call(
            format!("{xn}.try_softmax_cross_entropy_with_logits(&{ln})"),
            &[x, l[0]],
            |t| {
                t[0].try_softmax_cross_entropy_with_logits(&t[1])
                    .map(|t| vec![t])
            },
        );
    }
}

/// A small NCHW input and either a convolution (weights, stride, padding, dilation,
/// groups) or a pooling window.
fn conv_or_pool(c: &mut Case, d: &mut Draw) {
    let (n, ch, h, w) = (
        1 + d.below(2),
        d.pick(&[1, 2, 4]),
        1 + d.below(6),
        1 + d.below(6),
    );
    let dt = fdt(d);
    let Some(x) = constant(c, d, &[n, ch, h, w], dt) else {
        return;
    };
    let xn = c.name(x);
    let k = [1 + d.below(3), 1 + d.below(3)];
    let bad = |d: &mut Draw, v: usize| if d.percent(8) { 0 } else { v };
    let (s0, s1) = (1 + d.below(2), 1 + d.below(2));
    let stride = [bad(d, s0), bad(d, s1)];
    let wide = if d.percent(10) { 4 } else { 2 };
    let pad = [d.below(2), d.below(wide)];
    if d.percent(55) {
        let groups = if d.percent(10) {
            d.pick(&[0, 3])
        } else {
            d.pick(&[1, ch])
        };
        let cout = d.pick(&[1, 2, 4]);
        let cin = if groups > 0 && ch % groups == 0 {
            ch / groups
        } else {
            1
        };
        let wk = if d.percent(10) { [k[0] + 1, k[1]] } else { k };
        let (cin, wdt, dl) = (near(d, cin), fdt(d), 1 + d.below(2));
        let Some(wt) = constant(c, d, &[cout, cin, wk[0], wk[1]], wdt) else {
            return;
        };
        let dil = [bad(d, dl), 1];
        let wn = c.name(wt);
        c.call(
            format!("{xn}.try_conv2d(&{wn}, {k:?}, {stride:?}, {pad:?}, {dil:?}, {groups})"),
            &[x, wt],
            move |t| {
                t[0].try_conv2d(&t[1], k, stride, pad, dil, groups)
                    .map(|t| vec![t])
            },
        );
    } else {
        let kind = d.pick(&[
            ReduceOp::Max,
            ReduceOp::Mean,
            ReduceOp::Sum,
            ReduceOp::Min,
            ReduceOp::Prod,
        ]);
        c.call(
            format!("{xn}.try_pool2d(ReduceOp::{kind:?}, {k:?}, {stride:?}, {pad:?})"),
            &[x],
            move |t| t[0].try_pool2d(kind, k, stride, pad).map(|t| vec![t]),
        );
    }
}

/// Attention over small `[B, S, H·D]` (or `[B, S, H, D]`) operands with each mask kind;
/// the masked variant with a `[B, S_k]` mask.
fn attention(c: &mut Case, d: &mut Draw) {
    let (b, sq, sk, h, hd) = (
        1 + d.below(2),
        1 + d.below(4),
        1 + d.below(4),
        1 + d.below(2),
        d.pick(&[1, 2, 4]),
    );
    let rank4 = d.percent(30);
    let dims = |s: usize| {
        if rank4 {
            vec![b, s, h, hd]
        } else {
            vec![b, s, h * hd]
        }
    };
    let dt = fdt(d);
    let Some(q) = constant(c, d, &dims(sq), dt) else {
        return;
    };
    let sk2 = near(d, sk);
    let Some(k) = constant(c, d, &dims(sk2), dt) else {
        return;
    };
    let Some(v) = constant(c, d, &dims(sk), dt) else {
        return;
    };
    let (heads, head_dim) = (near(d, h), near(d, hd));
    let (qn, kn, vn) = (c.name(q), c.name(k), c.name(v));
    if d.percent(25) {
        let sk3 = near(d, sk);
        let Some(m) = constant(c, d, &[b, sk3], DType::F32) else {
            return;
        };
        let mn = c.name(m);
        c.call(
            format!("{qn}.try_attention_masked(&{kn}, &{vn}, &{mn}, {heads}, {head_dim})"),
            &[q, k, v, m],
            move |t| {
                t[0].try_attention_masked(&t[1], &t[2], &t[3], heads, head_dim)
                    .map(|t| vec![t])
            },
        );
    } else {
        let mask = d.pick(&[
            MaskKind::None,
            MaskKind::Causal,
            MaskKind::SlidingWindow(1),
            MaskKind::SlidingWindow(0),
            MaskKind::Custom,
            MaskKind::Bias,
        ]);
        c.call(
            format!("{qn}.try_attention(&{kn}, &{vn}, {heads}, {head_dim}, MaskKind::{mask:?})"),
            &[q, k, v],
            move |t| {
                t[0].try_attention(&t[1], &t[2], heads, head_dim, mask)
                    .map(|t| vec![t])
            },
        );
    }
}

/// Rotary embedding of `[B, S, hidden]` with `[S, head_dim/2]` tables.
fn rope(c: &mut Case, d: &mut Draw) {
    let (b, s, hd) = (1 + d.below(2), 1 + d.below(4), d.pick(&[2, 4, 3]));
    let heads = 1 + d.below(2);
    let Some(x) = constant(c, d, &[b, s, heads * hd], DType::F32) else {
        return;
    };
    let table = [near(d, s), (hd / 2).max(1)];
    let Some(cos) = constant(c, d, &table, DType::F32) else {
        return;
    };
    let Some(sin) = constant(c, d, &table, DType::F32) else {
        return;
    };
    let head_dim = near(d, hd);
    let (xn, cn, sn) = (c.name(x), c.name(cos), c.name(sin));
    c.call(
        format!("{xn}.try_rope(&{cn}, &{sn}, {head_dim})"),
        &[x, cos, sin],
        move |t| t[0].try_rope(&t[1], &t[2], head_dim).map(|t| vec![t]),
    );
}

/// The less common calls: dense solves and inverses (diagonally dominant, so the
/// answer is well conditioned), spline activations, codebook matmuls and
/// low-precision scaled matmuls.
fn rare(c: &mut Case, d: &mut Draw) {
    let n = 1 + d.below(4);
    match d.below(5) {
        0 => {
            let mut v = leaves::values(d, DType::F32, n * n);
            for i in 0..n {
                v[i * (n + 1)] += 4.0;
            }
            let code = format!(
                "Tensor::from_f64_as({}, [{n}, {n}], DType::F32)",
                leaves::vec_code(&v)
            );
            let Some(a) = c.call(code, &[], move |_| {
                Ok(vec![Tensor::from_f64_as(&v, [n, n], DType::F32)])
            }) else {
                return;
            };
            let an = c.name(a[0]);
            if d.percent(40) {
                c.call(format!("{an}.try_inv()"), &a, |t| {
                    t[0].try_inv().map(|t| vec![t])
                });
                return;
            }
            let bdims = if d.percent(50) {
                vec![near(d, n)]
            } else {
                vec![near(d, n), 1 + d.below(3)]
            };
            let Some(b) = constant(c, d, &bdims, DType::F32) else {
                return;
            };
            let bn = c.name(b);
            c.call(format!("{an}.try_solve(&{bn})"), &[a[0], b], |t| {
                t[0].try_solve(&t[1]).map(|t| vec![t])
            });
        }
        1 => {
            let ch = 1 + d.below(3);
            let nb = d.pick(&[1u32, 2, 3, 4]);
            let Some(x) = constant(c, d, &[n, ch], DType::F32) else {
                return;
            };
            let kc = near(d, ch);
            let Some(k) = constant(c, d, &[kc, nb as usize], DType::F32) else {
                return;
            };
            let (lo, hi) = if d.percent(10) {
                (2.0f32, -2.0f32)
            } else {
                (-2.0, 2.0)
            };
            let (xn, kn) = (c.name(x), c.name(k));
            c.call(
                format!("{xn}.try_spline_activation(&{kn}, {nb}, {lo:?}, {hi:?})"),
                &[x, k],
                move |t| {
                    t[0].try_spline_activation(&t[1], nb, lo, hi)
                        .map(|t| vec![t])
                },
            );
        }
        2 | 3 => {
            let (ed, ne, groups, rows) = (
                d.pick(&[1u32, 2, 4]),
                d.pick(&[2u32, 4]),
                1 + d.below(3),
                1 + d.below(3),
            );
            let k = ed as usize * groups;
            let hi = if d.percent(10) {
                ne as i64 + 3
            } else {
                ne as i64 - 1
            };
            let v: Vec<f64> = (0..rows * groups).map(|_| d.range(0, hi) as f64).collect();
            let idims = [rows, near(d, groups)];
            let v: Vec<f64> = v.into_iter().cycle().take(idims[0] * idims[1]).collect();
            let code = format!(
                "Tensor::from_f64_as({}, {idims:?}, DType::U8)",
                leaves::vec_code(&v)
            );
            let Some(idx) = c.call(code, &[], move |_| {
                Ok(vec![Tensor::from_f64_as(&v, idims, DType::U8)])
            }) else {
                return;
            };
            let Some(book) = constant(c, d, &[ne as usize, ed as usize], DType::F32) else {
                return;
            };
            let (iname, bname) = (c.name(idx[0]), c.name(book));
            if d.percent(50) {
                c.call(
                    format!("{iname}.try_synth_reconstruct(&{bname}, {ed})"),
                    &[idx[0], book],
                    move |t| t[0].try_synth_reconstruct(&t[1], ed).map(|t| vec![t]),
                );
            } else {
                let kx = near(d, k);
                let Some(x) = constant(c, d, &[n, kx], DType::F32) else {
                    return;
                };
                let xn = c.name(x);
                c.call(
                    format!("{xn}.try_synth_matmul(&{iname}, &{bname}, {ed}, {ne})"),
                    &[x, idx[0], book],
                    move |t| t[0].try_synth_matmul(&t[1], &t[2], ed, ne).map(|t| vec![t]),
                );
            }
        }
        _ => {
            let k = d.pick(&[1, 4, 16, 32]);
            let Some(a) = constant(c, d, &[n, k], DType::F32) else {
                return;
            };
            let kb = near(d, k);
            let rows = 1 + d.below(3);
            let Some(b) = constant(c, d, &[rows, kb], DType::F32) else {
                return;
            };
            let fmt = d.pick(&[
                ScaledFormat::F8E4M3,
                ScaledFormat::F8E5M2,
                ScaledFormat::F4E2M1,
                ScaledFormat::F6E3M2,
            ]);
            let layout = d.pick(&[
                ScaleLayout::PerTensor,
                ScaleLayout::mx(),
                ScaleLayout::nvfp4(),
            ]);
            let (an, bn) = (c.name(a), c.name(b));
            c.call(
                format!(
                    "{an}.try_scaled_matmul(&{bn}, ScaledFormat::{fmt:?}, ScaleLayout::{layout:?})"
                ),
                &[a, b],
                move |t| t[0].try_scaled_matmul(&t[1], fmt, layout).map(|t| vec![t]),
            );
        }
    }
}
