//! `AttentionVjp`: the packed gradients of q, k, v equal central finite differences of
//! `⟨g, attention(q, k, v)⟩` computed with the oracle's forward attention, for every
//! mask kind, grouped-query heads, Sq ≠ Sk, v_head_dim ≠ head_dim and a softcap.

use super::*;
use rlx_ir::MaskKind;

struct Case {
    b: usize,
    sq: usize,
    sk: usize,
    h: usize,
    hk: usize,
    d: usize,
    dv: usize,
    mask: MaskKind,
    softcap: Option<f32>,
    rank4: bool,
}

fn case(b: usize, sq: usize, sk: usize, h: usize, hk: usize, d: usize) -> Case {
    Case {
        b,
        sq,
        sk,
        h,
        hk,
        d,
        dv: d,
        mask: MaskKind::None,
        softcap: None,
        rank4: true,
    }
}

impl Case {
    fn attrs(
        &self,
    ) -> (
        usize,
        usize,
        Option<usize>,
        MaskKind,
        Option<f32>,
        Option<f32>,
    ) {
        let dv = (self.dv != self.d).then_some(self.dv);
        (self.h, self.d, dv, self.mask, Some(0.7), self.softcap)
    }

    fn fwd(&self) -> Op {
        let (num_heads, head_dim, v_head_dim, mask_kind, score_scale, attn_logit_softcap) =
            self.attrs();
        Op::Attention {
            num_heads,
            head_dim,
            v_head_dim,
            mask_kind,
            score_scale,
            attn_logit_softcap,
        }
    }

    fn vjp(&self) -> Op {
        let (num_heads, head_dim, v_head_dim, mask_kind, score_scale, attn_logit_softcap) =
            self.attrs();
        Op::AttentionVjp {
            num_heads,
            head_dim,
            v_head_dim,
            mask_kind,
            score_scale,
            attn_logit_softcap,
        }
    }

    fn dims(&self, s: usize, h: usize, d: usize) -> Vec<usize> {
        if self.rank4 {
            vec![self.b, s, h, d]
        } else {
            vec![self.b, s, h * d]
        }
    }

    fn extra(&self, seed: u64) -> Option<TensorData> {
        match self.mask {
            MaskKind::Custom => {
                let m: Vec<f64> = rand(self.b * self.sk, seed)
                    .iter()
                    .map(|r| if *r > -0.4 { 1.0 } else { 0.0 })
                    .collect();
                Some(t64(&[self.b, self.sk], &m))
            }
            MaskKind::Bias => Some(t64(&[1, self.h, self.sq, self.sk], &{
                rand(self.h * self.sq * self.sk, seed)
            })),
            _ => None,
        }
    }
}

#[track_caller]
fn check(c: &Case, seed: u64) {
    let (nq, nk, nv) = (
        c.b * c.sq * c.h * c.d,
        c.b * c.sk * c.hk * c.d,
        c.b * c.sk * c.hk * c.dv,
    );
    let (q, k, v) = (rand(nq, seed), rand(nk, seed + 1), rand(nv, seed + 2));
    let g = rand(c.b * c.sq * c.h * c.dv, seed + 3);
    let extra = c.extra(seed + 4);
    let args = |q: &[f64], k: &[f64], v: &[f64]| {
        let mut a = vec![
            t64(&c.dims(c.sq, c.h, c.d), q),
            t64(&c.dims(c.sk, c.hk, c.d), k),
            t64(&c.dims(c.sk, c.hk, c.dv), v),
        ];
        a.extend(extra.clone());
        a
    };
    let loss = |q: &[f64], k: &[f64], v: &[f64]| dot(&eval64(c.fwd(), &args(q, k, v)), &g);
    let want_q = grad_fd(&q, 1e-5, |x| loss(x, &k, &v));
    let want_k = grad_fd(&k, 1e-5, |x| loss(&q, x, &v));
    let want_v = grad_fd(&v, 1e-5, |x| loss(&q, &k, x));
    let mut a = args(&q, &k, &v);
    a.push(t64(&c.dims(c.sq, c.h, c.dv), &g));
    let y = eval(c.vjp(), &a);
    assert_eq!(y.dims, vec![nq + nk + nv], "packed [|q| + |k| + |v|]");
    let y = y.to_f64_vec();
    let (dq, rest) = y.split_at(nq);
    let (dk, dv) = rest.split_at(nk);
    assert_close(dq, &want_q, 1e-7, "dq");
    assert_close(dk, &want_k, 1e-7, "dk");
    assert_close(dv, &want_v, 1e-7, "dv");
}

#[test]
fn attention_vjp_matches_finite_differences_for_every_mask_kind() {
    for (i, mask) in [
        MaskKind::None,
        MaskKind::Causal,
        MaskKind::SlidingWindow(1),
        MaskKind::Custom,
        MaskKind::Bias,
    ]
    .into_iter()
    .enumerate()
    {
        let mut c = case(2, 3, 4, 2, 2, 3);
        c.mask = mask;
        check(&c, 100 + i as u64);
    }
}

#[test]
fn attention_vjp_sums_grouped_query_heads_and_handles_layouts_dv_and_softcap() {
    let mut c = case(1, 4, 3, 4, 2, 2);
    c.mask = MaskKind::Causal;
    check(&c, 120);
    c.rank4 = false;
    c.dv = 3;
    check(&c, 121);
    let mut c = case(2, 2, 5, 3, 1, 2);
    c.softcap = Some(0.9);
    c.mask = MaskKind::Bias;
    check(&c, 122);
}

#[test]
fn attention_vjp_of_a_fully_masked_row_is_zero() {
    // Custom mask that drops every key of batch 0: no gradient flows there.
    let c = Case {
        mask: MaskKind::Custom,
        ..case(2, 2, 3, 1, 1, 2)
    };
    let ones = |n: usize| vec![1.0; n];
    let args = [
        t64(&[2, 2, 1, 2], &rand(8, 7)),
        t64(&[2, 3, 1, 2], &rand(12, 8)),
        t64(&[2, 3, 1, 2], &rand(12, 9)),
        t64(&[2, 3], &[0.0, 0.0, 0.0, 1.0, 1.0, 1.0]),
        t64(&[2, 2, 1, 2], &ones(8)),
    ];
    let y = eval64(c.vjp(), &args);
    assert_eq!(y.len(), 8 + 12 + 12);
    // Batch 0's slices of dq, dk and dv are zero; batch 1's are not.
    for (lo, hi) in [(0, 4), (8, 14), (20, 26)] {
        assert!(y[lo..hi].iter().all(|&x| x == 0.0), "{:?}", &y[lo..hi]);
    }
    assert!(y[4..8].iter().any(|&x| x != 0.0));
}
