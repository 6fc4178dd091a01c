//! Sequence-model and structured-weight ops, against naive f64 references.

use super::*;
use rlx_ir::TensorData;
use rlx_ir::op::{FftAlgo, FftNorm, RopeStyle, SynthKind};
use rlx_tensor::MaskKind;

// ---- attention ----

/// softmax(q·kᵀ/√d + mask)·v over `[B, S, H, D]` data (k/v heads may divide q's).
#[allow(clippy::too_many_arguments)]
fn naive_attention(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    (b, sq, sk): (usize, usize, usize),
    (h, hk, d): (usize, usize, usize),
    allowed: impl Fn(usize, usize, usize) -> bool,
) -> Vec<f64> {
    let mut out = vec![0.0; b * sq * h * d];
    for bi in 0..b {
        for hi in 0..h {
            let kh = hi / (h / hk);
            for qi in 0..sq {
                let keys: Vec<usize> = (0..sk).filter(|&ki| allowed(bi, qi, ki)).collect();
                let scores: Vec<f64> = keys
                    .iter()
                    .map(|&ki| {
                        (0..d)
                            .map(|j| {
                                q[((bi * sq + qi) * h + hi) * d + j]
                                    * k[((bi * sk + ki) * hk + kh) * d + j]
                            })
                            .sum::<f64>()
                            / (d as f64).sqrt()
                    })
                    .collect();
                if keys.is_empty() {
                    continue;
                }
                let lse = logsumexp(&scores);
                for (s, &ki) in scores.iter().zip(&keys) {
                    let p = (s - lse).exp();
                    for j in 0..d {
                        out[((bi * sq + qi) * h + hi) * d + j] +=
                            p * v[((bi * sk + ki) * hk + kh) * d + j];
                    }
                }
            }
        }
    }
    out
}

/// Whether query `qi` of batch `b` may attend key `ki`: `(b, qi, ki)`.
type Allowed = fn(usize, usize, usize) -> bool;

#[test]
fn attention_matches_softmax_qk_v_for_every_builtin_mask() {
    let (b, s, h, d) = (2, 4, 2, 3);
    let q = Tensor::randn([b, s, h, d], 50);
    let k = Tensor::randn([b, s, h, d], 51);
    let vv = Tensor::randn([b, s, h, d], 52);
    let (qv, kv, vvv) = (v(&q), v(&k), v(&vv));
    let masks: [(MaskKind, Allowed); 3] = [
        (MaskKind::None, |_, _, _| true),
        (MaskKind::Causal, |_, qi, ki| ki <= qi),
        (MaskKind::SlidingWindow(1), |_, qi, ki| {
            ki <= qi && qi - ki <= 1
        }),
    ];
    for (kind, allowed) in masks {
        let y = q.attention(&k, &vv, h, d, kind);
        assert_eq!(
            node(&y).op,
            Op::Attention {
                num_heads: h,
                head_dim: d,
                v_head_dim: None,
                mask_kind: kind,
                score_scale: None,
                attn_logit_softcap: None
            }
        );
        assert_eq!(node(&y).inputs.len(), 3);
        let want = naive_attention(&qv, &kv, &vvv, (b, s, s), (h, h, d), allowed);
        assert_close(&y.to_vec(), &want, 1e-5);
        // The [B, S, H·D] layout is the same bytes.
        let flat = q.reshape([2, 4, 6]).attention(
            &k.reshape([2, 4, 6]),
            &vv.reshape([2, 4, 6]),
            h,
            d,
            kind,
        );
        assert_eq!(flat.dims(), vec![2, 4, 6]);
        assert_close(&flat.to_vec(), &want, 1e-5);
    }
}

#[test]
fn attention_supports_grouped_query_heads() {
    let q = Tensor::randn([1, 3, 4, 2], 53);
    let k = Tensor::randn([1, 3, 2, 2], 54);
    let vv = Tensor::randn([1, 3, 2, 2], 55);
    let want = naive_attention(&v(&q), &v(&k), &v(&vv), (1, 3, 3), (4, 2, 2), |_, _, _| {
        true
    });
    assert_close(
        &q.attention(&k, &vv, 4, 2, MaskKind::None).to_vec(),
        &want,
        1e-5,
    );
}

#[test]
fn attention_masked_ignores_keys_below_one_half() {
    let (b, s, h, d) = (2, 3, 1, 4);
    let q = Tensor::randn([b, s, h, d], 56);
    let k = Tensor::randn([b, s, h, d], 57);
    let vv = Tensor::randn([b, s, h, d], 58);
    let mask_vals = [1.0, 1.0, 0.0, 1.0, 0.2, 1.0];
    let mask = Tensor::from_vec(mask_vals.to_vec(), [b, s]);
    let y = q.attention_masked(&k, &vv, &mask, h, d);
    let n = node(&y);
    assert!(matches!(
        n.op,
        Op::Attention {
            mask_kind: MaskKind::Custom,
            ..
        }
    ));
    assert_eq!(n.inputs.len(), 4);
    let want = naive_attention(
        &v(&q),
        &v(&k),
        &v(&vv),
        (b, s, s),
        (h, h, d),
        |bi, _, ki| mask_vals[bi * s + ki] >= 0.5,
    );
    assert_close(&y.to_vec(), &want, 1e-5);
    let err = q
        .try_attention_masked(&k, &vv, &Tensor::ones([b, s + 1]), h, d)
        .unwrap_err()
        .to_string();
    assert!(err.contains("[batch, key_len] = [2, 3]"), "{err}");
}

#[test]
fn try_attention_rejects_tensor_masks_and_bad_head_counts() {
    let q = Tensor::zeros([1, 2, 2, 4]);
    for kind in [MaskKind::Custom, MaskKind::Bias] {
        let err = q.try_attention(&q, &q, 2, 4, kind).unwrap_err().to_string();
        assert!(
            err.starts_with("attention:") && err.contains("attention_masked"),
            "{err}"
        );
    }
    let err = q
        .try_attention(&q, &q, 3, 4, MaskKind::None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("num_heads is 3"), "{err}");
}

// ---- rope ----

#[test]
fn rope_rotates_each_half_pair_by_the_position_tables() {
    let (b, s, heads, hd) = (1, 3, 2, 4);
    let half = hd / 2;
    let x = Tensor::randn([b, s, heads * hd], 60);
    let cos = Tensor::randn([s, half], 61);
    let sin = Tensor::randn([s, half], 62);
    let (xv, cv, sv) = (v(&x), v(&cos), v(&sin));
    let mut want = xv.clone();
    for p in 0..s {
        for h in 0..heads {
            let base = (p * heads + h) * hd;
            for i in 0..half {
                let (c, sn) = (cv[p * half + i], sv[p * half + i]);
                let (x1, x2) = (xv[base + i], xv[base + i + half]);
                want[base + i] = x1 * c - x2 * sn;
                want[base + i + half] = x2 * c + x1 * sn;
            }
        }
    }
    let y = x.rope(&cos, &sin, hd);
    assert_eq!(
        node(&y).op,
        Op::Rope {
            head_dim: hd,
            n_rot: hd,
            style: RopeStyle::NeoX
        }
    );
    assert_close(&y.to_vec(), &want, 1e-5);
    // A rank-1 table of S·head_dim/2 entries is the same rows, flattened.
    let y1 = x.rope(&cos.reshape([-1]), &sin.reshape([-1]), hd);
    assert_close(&y1.to_vec(), &want, 1e-5);
    let err = x
        .try_rope(&Tensor::zeros([2, half]), &Tensor::zeros([2, half]), hd)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("rope:") && err.contains("2 rows"), "{err}");
}

// ---- fft ----

/// DFT of rows in block layout `[re…, im…]`.
fn naive_dft(x: &[f64], n: usize, inverse: bool) -> Vec<f64> {
    let sign = if inverse { 1.0 } else { -1.0 };
    let mut out = vec![];
    for row in x.chunks(2 * n) {
        let (re, im) = row.split_at(n);
        let mut o = vec![0.0; 2 * n];
        for k in 0..n {
            for j in 0..n {
                let a = sign * 2.0 * std::f64::consts::PI * (j * k) as f64 / n as f64;
                o[k] += re[j] * a.cos() - im[j] * a.sin();
                o[n + k] += re[j] * a.sin() + im[j] * a.cos();
            }
        }
        out.extend(o);
    }
    out
}

#[test]
fn fft_and_ifft_match_a_direct_dft_and_round_trip_to_n_x() {
    let x = Tensor::randn([2, 10], 70);
    let xv = v(&x);
    let y = x.fft();
    assert_eq!(
        node(&y).op,
        Op::Fft {
            inverse: false,
            norm: FftNorm::Backward,
            algo: FftAlgo::Native
        }
    );
    assert_close(&y.to_vec(), &naive_dft(&xv, 5, false), 1e-4);
    assert_close(&x.ifft().to_vec(), &naive_dft(&xv, 5, true), 1e-4);
    let back: Vec<f64> = xv.iter().map(|z| 5.0 * z).collect();
    assert_close(&y.ifft().to_vec(), &back, 1e-4);
    assert!(std::panic::catch_unwind(|| Tensor::zeros([3]).fft()).is_err());
}

#[test]
fn fft_axis_transforms_a_leading_axis() {
    let x = Tensor::randn([6, 2], 71);
    let y = x.fft_axis(0, false);
    assert_eq!(y.dims(), vec![6, 2]);
    let cols = x.t().fft().t();
    assert_close(&y.to_vec(), &v(&cols), 1e-5);
    let want = naive_dft(&transpose2(&v(&x), 6, 2), 3, false);
    assert_close(&y.to_vec(), &transpose2(&want, 2, 6), 1e-4);
    assert_close(&x.t().fft_axis(1, true).to_vec(), &v(&x.t().ifft()), 1e-5);
    assert!(x.try_fft_axis(2, false).is_err());
}

// ---- codebook matmul / spline ----

#[test]
fn synth_matmul_equals_x_times_the_reconstructed_weight() {
    let (m, n, ed, ne) = (2, 3, 2, 4);
    let k = 4;
    let x = Tensor::randn([m, k], 80);
    let codebook = Tensor::randn([ne, ed], 81);
    let idx_vals = [0u8, 3, 1, 1, 2, 0];
    let indices =
        Tensor::from_data(TensorData::new(DType::U8, &[n, k / ed], idx_vals.to_vec()).unwrap());
    let cb = v(&codebook);
    // Row j of the [n, k] weight concatenates codebook rows indices[j, ..].
    let mut w_nk = vec![];
    for j in 0..n {
        for c in 0..k / ed {
            let e = idx_vals[j * (k / ed) + c] as usize;
            w_nk.extend_from_slice(&cb[e * ed..(e + 1) * ed]);
        }
    }
    let w_kn = transpose2(&w_nk, n, k);
    let want = naive_mm(&v(&x), &w_kn, m, k, n);

    let y = x.synth_matmul(&indices, &codebook, ed as u32, ne as u32);
    assert_eq!(
        node(&y).op,
        Op::SynthMatMul {
            kind: SynthKind::Codebook {
                entry_dim: ed as u32,
                num_entries: ne as u32
            }
        }
    );
    assert_close(&y.to_vec(), &want, 1e-5);

    let w = indices.synth_reconstruct(&codebook, ed as u32);
    assert_eq!(w.dims(), vec![k, n]);
    assert_close(&w.to_vec(), &w_kn, 0.0);
    let g = w.to_graph();
    let chain: Vec<&str> = g
        .nodes()
        .iter()
        .filter(|nd| !nd.op.is_leaf())
        .map(|nd| match nd.op {
            Op::Cast { to: DType::I64 } => "cast",
            Op::Reshape { .. } => "reshape",
            Op::Gather { axis: 0 } => "gather",
            Op::Transpose { .. } => "transpose",
            _ => "other",
        })
        .collect();
    assert_eq!(chain, ["cast", "reshape", "gather", "reshape", "transpose"]);
    assert_close(&x.matmul(&w).to_vec(), &want, 1e-5);
    let err = x
        .try_synth_matmul(&indices, &codebook, 3, ne as u32)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("synth_matmul:"), "{err}");
    assert!(indices.try_synth_reconstruct(&codebook, 3).is_err());
}

#[test]
fn spline_activation_sums_gaussian_bumps_per_channel() {
    let (rows, ch, nb) = (2, 3, 4);
    let (lo, hi) = (-1.0f32, 2.0f32);
    let x = Tensor::randn([rows, ch], 90);
    let coeff = Tensor::randn([ch, nb], 91);
    let (xv, cv) = (v(&x), v(&coeff));
    let h = (hi - lo) as f64 / (nb - 1) as f64;
    let want: Vec<f64> = xv
        .iter()
        .enumerate()
        .map(|(i, &z)| {
            let c = i % ch;
            (0..nb)
                .map(|b| {
                    let u = (z - (lo as f64 + b as f64 * h)) / h;
                    cv[c * nb + b] * (-u * u).exp()
                })
                .sum()
        })
        .collect();
    let y = x.spline_activation(&coeff, nb as u32, lo, hi);
    assert_eq!(
        node(&y).op,
        Op::SplineActivation {
            num_basis: nb as u32,
            grid_min: lo,
            grid_max: hi
        }
    );
    assert_close(&y.to_vec(), &want, 1e-5);
    let err = x
        .try_spline_activation(&Tensor::zeros([ch, nb + 1]), nb as u32, lo, hi)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("spline_activation:") && err.contains("[3, 4]"),
        "{err}"
    );
}
