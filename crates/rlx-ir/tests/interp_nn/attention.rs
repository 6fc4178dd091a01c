//! Attention: every mask kind, grouped-query heads, v_head_dim, softcap, custom score
//! scale, rank-3 and rank-4 layouts, against an explicit per-head matrix reference.

use super::*;
use rlx_ir::MaskKind;

/// One attention problem; q is `[b, sq, h, d]`, k `[b, sk, hk, d]`, v `[b, sk, hk, dv]`.
#[derive(Clone)]
struct Case {
    b: usize,
    sq: usize,
    sk: usize,
    h: usize,
    hk: usize,
    d: usize,
    dv: usize,
    mask: MaskKind,
    scale: Option<f32>,
    softcap: Option<f32>,
    /// dims of the bias tensor for `MaskKind::Bias`
    bias_dims: [usize; 4],
}

impl Case {
    fn new(b: usize, sq: usize, sk: usize, h: usize, d: usize) -> Case {
        Case {
            b,
            sq,
            sk,
            h,
            hk: h,
            d,
            dv: d,
            mask: MaskKind::None,
            scale: None,
            softcap: None,
            bias_dims: [b, h, sq, sk],
        }
    }

    fn op(&self) -> Op {
        Op::Attention {
            num_heads: self.h,
            head_dim: self.d,
            v_head_dim: (self.dv != self.d).then_some(self.dv),
            mask_kind: self.mask,
            score_scale: self.scale,
            attn_logit_softcap: self.softcap,
        }
    }
}

/// Data for a case: (q, k, v, extra) as flat f64.
fn data(c: &Case, seed: u64) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    let q = rand(c.b * c.sq * c.h * c.d, seed);
    let k = rand(c.b * c.sk * c.hk * c.d, seed + 1);
    let v = rand(c.b * c.sk * c.hk * c.dv, seed + 2);
    let extra = match c.mask {
        MaskKind::Custom => rand(c.b * c.sk, seed + 3)
            .iter()
            .map(|r| if *r > -0.3 { 1.0 } else { 0.0 })
            .collect(),
        MaskKind::Bias => rand(c.bias_dims.iter().product(), seed + 3)
            .iter()
            .map(|r| 2.0 * r)
            .collect(),
        _ => vec![],
    };
    (q, k, v, extra)
}

/// Reference: per (batch, head) build S = scale·Q·Kᵀ, softcap, add bias, set masked
/// entries to −∞, softmax each row (an all-−∞ row gives zeros), multiply by V.
fn reference(c: &Case, q: &[f64], k: &[f64], v: &[f64], extra: &[f64]) -> Vec<f64> {
    let scale = c.scale.map_or(1.0 / (c.d as f64).sqrt(), |s| s as f64);
    let mut out = vec![0.0; c.b * c.sq * c.h * c.dv];
    for b in 0..c.b {
        for h in 0..c.h {
            let kh = h * c.hk / c.h; // consecutive query heads share a kv head
            let qm = |i: usize, j: usize| q[((b * c.sq + i) * c.h + h) * c.d + j];
            let km = |i: usize, j: usize| k[((b * c.sk + i) * c.hk + kh) * c.d + j];
            let vm = |i: usize, j: usize| v[((b * c.sk + i) * c.hk + kh) * c.dv + j];
            for i in 0..c.sq {
                let mut s: Vec<f64> = (0..c.sk)
                    .map(|j| scale * (0..c.d).map(|t| qm(i, t) * km(j, t)).sum::<f64>())
                    .collect();
                for (j, sj) in s.iter_mut().enumerate() {
                    if let Some(cap) = c.softcap {
                        let cap = cap as f64;
                        *sj = cap * (*sj / cap).tanh();
                    }
                    let masked = match c.mask {
                        MaskKind::None => false,
                        MaskKind::Causal => j > i,
                        MaskKind::SlidingWindow(w) => {
                            j > i || (i as isize - j as isize) > w as isize
                        }
                        MaskKind::Custom => extra[b * c.sk + j] < 0.5,
                        MaskKind::Bias => {
                            let bd = c.bias_dims;
                            let pick = |n: usize, x: usize| if n == 1 { 0 } else { x };
                            let at = ((pick(bd[0], b) * bd[1] + pick(bd[1], h)) * bd[2]
                                + pick(bd[2], i))
                                * bd[3]
                                + pick(bd[3], j);
                            *sj += extra[at];
                            false
                        }
                    };
                    if masked {
                        *sj = f64::NEG_INFINITY;
                    }
                }
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                if m == f64::NEG_INFINITY {
                    continue; // fully masked row: zeros
                }
                let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
                for t in 0..c.dv {
                    let o: f64 = (0..c.sk).map(|j| (s[j] - m).exp() / z * vm(j, t)).sum();
                    out[((b * c.sq + i) * c.h + h) * c.dv + t] = o;
                }
            }
        }
    }
    out
}

/// Run a case through the oracle in the rank-4 or rank-3 layout (same flat data).
fn run(c: &Case, rank4: bool, q: &[f64], k: &[f64], v: &[f64], extra: &[f64]) -> Vec<f64> {
    let dims = |s: usize, h: usize, d: usize| {
        if rank4 {
            vec![c.b, s, h, d]
        } else {
            vec![c.b, s, h * d]
        }
    };
    let mut args = vec![
        t64(&dims(c.sq, c.h, c.d), q),
        t64(&dims(c.sk, c.hk, c.d), k),
        t64(&dims(c.sk, c.hk, c.dv), v),
    ];
    match c.mask {
        MaskKind::Custom => args.push(t64(&[c.b, c.sk], extra)),
        MaskKind::Bias => args.push(t64(&c.bias_dims, extra)),
        _ => {}
    }
    let y = eval(c.op(), &args);
    assert_eq!(
        y.dims,
        dims(c.sq, c.h, c.dv),
        "output keeps q's layout with Dv"
    );
    y.to_f64_vec()
}

#[track_caller]
fn check(c: &Case, seed: u64, what: &str) {
    let (q, k, v, extra) = data(c, seed);
    let want = reference(c, &q, &k, &v, &extra);
    for rank4 in [true, false] {
        let got = run(c, rank4, &q, &k, &v, &extra);
        assert_close(
            &got,
            &want,
            1e-13,
            &format!("{what} (rank {})", if rank4 { 4 } else { 3 }),
        );
    }
}

#[test]
fn attention_one_query_two_keys_matches_hand_value() {
    // D = 1, scale 1: scores [0, ln 3] → p = [1/4, 3/4]; v = [4, 8] → 1 + 6 = 7.
    let c = Case::new(1, 1, 2, 1, 1);
    let y = run(&c, true, &[1.0], &[0.0, 3.0f64.ln()], &[4.0, 8.0], &[]);
    assert_close(&y, &[7.0], 1e-15, "hand attention");
}

#[test]
fn attention_without_mask_matches_reference_in_both_layouts() {
    check(&Case::new(2, 3, 5, 2, 4), 10, "no mask");
}

#[test]
fn causal_mask_lets_query_i_see_keys_up_to_i() {
    let mut c = Case::new(2, 4, 4, 2, 3);
    c.mask = MaskKind::Causal;
    check(&c, 20, "causal");
    // Query 0 sees only key 0, so its output is exactly v[0].
    let (q, k, v, e) = data(&c, 20);
    let y = run(&c, true, &q, &k, &v, &e);
    assert_close(&y[..3], &v[..3], 1e-15, "causal row 0 = v[0]");
}

#[test]
fn causal_mask_with_more_keys_than_queries_uses_absolute_positions() {
    // ki ≤ qi literally (no offset for Sk > Sq).
    let mut c = Case::new(1, 2, 5, 1, 2);
    c.mask = MaskKind::Causal;
    check(&c, 25, "causal sq<sk");
}

#[test]
fn sliding_window_keeps_keys_within_w_behind_the_query() {
    for w in [0, 1, 2] {
        let mut c = Case::new(1, 5, 5, 2, 2);
        c.mask = MaskKind::SlidingWindow(w);
        check(&c, 30 + w as u64, &format!("window {w}"));
    }
    // w = 0: each query sees only its own key, so out = v row-for-row.
    let mut c = Case::new(1, 3, 3, 1, 2);
    c.mask = MaskKind::SlidingWindow(0);
    let (q, k, v, e) = data(&c, 33);
    assert_close(&run(&c, true, &q, &k, &v, &e), &v, 1e-15, "window 0");
}

#[test]
fn custom_mask_drops_keys_below_one_half_and_a_fully_masked_batch_outputs_zeros() {
    let mut c = Case::new(2, 3, 4, 2, 2);
    c.mask = MaskKind::Custom;
    check(&c, 40, "custom random");
    let (q, k, v, _) = data(&c, 41);
    // batch 0: keys with 0.5 (kept), 0.49 (dropped), 1 (kept), 0 (dropped); batch 1: all dropped.
    let mask = [0.5, 0.49, 1.0, 0.0, 0.0, 0.2, 0.4999, -1.0];
    let want = reference(&c, &q, &k, &v, &[1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    let got = run(&c, true, &q, &k, &v, &mask);
    assert_close(&got, &want, 1e-13, "custom thresholds");
    assert!(
        got[12..].iter().all(|&o| o == 0.0),
        "fully masked batch must be zeros, got {:?}",
        &got[12..]
    );
}

#[test]
fn custom_mask_may_be_bool() {
    let mut c = Case::new(2, 2, 3, 1, 2);
    c.mask = MaskKind::Custom;
    let (q, k, v, _) = data(&c, 43);
    let keep = [true, false, true, false, false, true];
    let numeric: Vec<f64> = keep.iter().map(|&b| b as u8 as f64).collect();
    let args = |m: TensorData| {
        [
            t64(&[2, 2, 1, 2], &q),
            t64(&[2, 3, 1, 2], &k),
            t64(&[2, 3, 1, 2], &v),
            m,
        ]
    };
    let from_bool = eval64(c.op(), &args(TensorData::from_bool(&[2, 3], &keep)));
    assert_close(
        &from_bool,
        &reference(&c, &q, &k, &v, &numeric),
        1e-13,
        "bool mask",
    );
}

#[test]
fn custom_mask_with_one_surviving_key_outputs_that_keys_value_row() {
    let mut c = Case::new(1, 2, 3, 1, 2);
    c.mask = MaskKind::Custom;
    let (q, k, v, _) = data(&c, 42);
    let got = run(&c, false, &q, &k, &v, &[0.0, 0.0, 1.0]);
    // Only key 2 survives: every query outputs v[2].
    assert_close(
        &got,
        &[v[4], v[5], v[4], v[5]],
        1e-15,
        "single surviving key",
    );
}

#[test]
fn bias_is_added_to_scores_with_broadcast_over_size_one_axes() {
    for bias_dims in [[2, 2, 3, 4], [1, 2, 1, 4], [2, 1, 3, 1], [1, 1, 1, 1]] {
        let mut c = Case::new(2, 3, 4, 2, 3);
        c.mask = MaskKind::Bias;
        c.bias_dims = bias_dims;
        check(&c, 50, &format!("bias {bias_dims:?}"));
    }
}

#[test]
fn lower_rank_bias_is_right_aligned_like_numpy() {
    // A [Sq, Sk], [Sk] or rank-0 bias means the same as [1, 1, Sq, Sk], [1, 1, 1, Sk], [1, 1, 1, 1].
    for (full, short) in [
        ([1, 1, 3, 4], vec![3, 4]),
        ([1, 1, 1, 4], vec![4]),
        ([1, 1, 1, 1], vec![]),
    ] {
        let mut c = Case::new(2, 3, 4, 2, 3);
        c.mask = MaskKind::Bias;
        c.bias_dims = full;
        let (q, k, v, bias) = data(&c, 55);
        let want = reference(&c, &q, &k, &v, &bias);
        let args = [
            t64(&[2, 3, 2, 3], &q),
            t64(&[2, 4, 2, 3], &k),
            t64(&[2, 4, 2, 3], &v),
            t64(&short, &bias),
        ];
        assert_close(
            &eval64(c.op(), &args),
            &want,
            1e-13,
            &format!("bias {short:?}"),
        );
    }
}

#[test]
fn grouped_query_heads_share_kv_heads_in_consecutive_groups() {
    for (h, hk) in [(4, 2), (4, 1), (6, 3)] {
        let mut c = Case::new(2, 3, 4, h, 2);
        c.hk = hk;
        c.mask = MaskKind::Causal;
        check(&c, 60, &format!("gqa {h}/{hk}"));
    }
    // With one kv head, identical q heads give identical outputs.
    let mut c = Case::new(1, 1, 3, 2, 2);
    c.hk = 1;
    let (_, k, v, e) = data(&c, 61);
    let q = [0.3, -0.7, 0.3, -0.7];
    let y = run(&c, true, &q, &k, &v, &e);
    assert_eq!(y[..2], y[2..]);
}

#[test]
fn v_head_dim_may_differ_from_the_query_key_head_dim() {
    let mut c = Case::new(2, 3, 4, 2, 3);
    c.dv = 5;
    check(&c, 70, "dv 5");
    c.hk = 1;
    c.dv = 1;
    c.mask = MaskKind::SlidingWindow(1);
    check(&c, 71, "dv 1 gqa window");
}

#[test]
fn softcap_squashes_scores_with_c_tanh_s_over_c() {
    let mut c = Case::new(1, 2, 3, 2, 2);
    c.softcap = Some(0.5);
    c.scale = Some(4.0); // large scores so the cap matters
    check(&c, 80, "softcap");
    c.mask = MaskKind::Bias; // bias is added after the cap
    check(&c, 81, "softcap + bias");
    // Hand value: scores 1·ln 3 and 0 capped at c: c·tanh(ln3/c); D = 1, scale 1.
    let mut c = Case::new(1, 1, 2, 1, 1);
    c.softcap = Some(2.0);
    let y = run(&c, true, &[1.0], &[0.0, 3.0f64.ln()], &[0.0, 1.0], &[]);
    let s1 = 2.0 * (3.0f64.ln() / 2.0).tanh();
    assert_close(&y, &[s1.exp() / (1.0 + s1.exp())], 1e-15, "softcap hand");
}

#[test]
fn explicit_score_scale_replaces_one_over_sqrt_d() {
    let mut c = Case::new(1, 3, 3, 1, 4);
    c.scale = Some(0.125);
    check(&c, 90, "scale 0.125");
    c.scale = Some(0.0); // uniform weights: the mean of v
    let (q, k, v, e) = data(&c, 91);
    let y = run(&c, true, &q, &k, &v, &e);
    let mean: Vec<f64> = (0..4).map(|t| (v[t] + v[4 + t] + v[8 + t]) / 3.0).collect();
    assert_close(&y[..4], &mean, 1e-15, "scale 0");
}

#[test]
fn attention_rounds_f32_inputs_and_output() {
    let c = Case::new(1, 2, 3, 2, 2);
    let (q, k, v, e) = data(&c, 95);
    assert!(e.is_empty());
    let args = [
        t_as(DType::F32, &[1, 2, 2, 2], &q),
        t_as(DType::F32, &[1, 3, 2, 2], &k),
        t_as(DType::F32, &[1, 3, 2, 2], &v),
    ];
    let y = eval(c.op(), &args);
    assert_eq!(y.dtype, DType::F32);
    let decoded: Vec<Vec<f64>> = args.iter().map(|a| a.to_f64_vec()).collect();
    let want = reference(&c, &decoded[0], &decoded[1], &decoded[2], &[]);
    assert_eq!(y.bytes, t_as(DType::F32, &[1, 2, 2, 2], &want).bytes);
}
