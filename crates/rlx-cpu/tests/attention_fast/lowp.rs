//! bf16 and f16 attention on the CPU: `decompose` rewrites it through f32
//! (`ATTENTION_IN_F32`, in the CPU's options), so it runs the fused f32 kernel on exact
//! f32 copies of its operands and rounds the result once. The oracle computes in f64 and
//! rounds once, so the two may differ by one ulp of the dtype where the f32 result lands
//! next to a rounding boundary, and by no more.

use super::common::Rng;
use super::common::random_data;
use rlx_compile::decompose::ATTENTION_IN_F32;
use rlx_compile::program::KernelKind;
use rlx_cpu::{compile_options, compile_with};
use rlx_ir::{DType, Graph, MaskKind, NodeId, Op, Shape, TensorData};

/// One attention problem over `dt` operands (`[B, S, H, D]` layout); the gradient tests
/// (`lowp_vjp.rs`) use it too.
#[derive(Clone, Copy, Debug)]
pub(super) struct Lowp {
    pub(super) dt: DType,
    pub(super) b: usize,
    pub(super) s: usize,
    pub(super) h: usize,
    pub(super) hk: usize,
    pub(super) d: usize,
    pub(super) mask: MaskKind,
    /// The dtype of the custom mask or bias operand.
    pub(super) extra: DType,
    pub(super) softcap: Option<f32>,
}

impl Lowp {
    pub(super) fn new(dt: DType, h: usize, hk: usize, d: usize, mask: MaskKind) -> Lowp {
        Lowp {
            dt,
            b: 2,
            s: 70,
            h,
            hk,
            d,
            mask,
            extra: dt,
            softcap: None,
        }
    }

    /// The problem's `attention` op, or with `vjp` its `attention_vjp`.
    pub(super) fn op(&self, vjp: bool) -> Op {
        let op = Op::Attention {
            num_heads: self.h,
            head_dim: self.d,
            v_head_dim: None,
            mask_kind: self.mask,
            score_scale: None,
            attn_logit_softcap: self.softcap,
        };
        match op.attention_attrs() {
            Some(attrs) if vjp => attrs.vjp_op(),
            _ => op,
        }
    }

    /// Inputs q, k, v (and the mask or bias its mask kind takes) of the problem in `g`,
    /// with random data pushed to `args`.
    pub(super) fn inputs(
        &self,
        g: &mut Graph,
        rng: &mut Rng,
        args: &mut Vec<TensorData>,
    ) -> Vec<NodeId> {
        let c = self;
        let mut input = |g: &mut Graph, name: &str, dims: &[usize], dt: DType| {
            let s = Shape::new(dims, dt);
            args.push(random_data(rng, &s));
            g.input(name, s)
        };
        let mut ins = vec![
            input(g, "q", &[c.b, c.s, c.h, c.d], c.dt),
            input(g, "k", &[c.b, c.s, c.hk, c.d], c.dt),
            input(g, "v", &[c.b, c.s, c.hk, c.d], c.dt),
        ];
        match c.mask {
            MaskKind::Custom => ins.push(input(g, "mask", &[c.b, c.s], c.extra)),
            MaskKind::Bias => ins.push(input(g, "bias", &[c.h, c.s, c.s], c.extra)),
            _ => {}
        }
        ins
    }
}

fn build(c: Lowp, rng: &mut Rng) -> (Graph, Vec<TensorData>) {
    let mut g = Graph::new("attention_lowp");
    let mut args = Vec::new();
    let ins = c.inputs(&mut g, rng, &mut args);
    let a = g.add_op(c.op(false), ins).unwrap();
    g.set_outputs(vec![a]);
    (g, args)
}

/// A bf16/f16 value's bits as an integer that grows with the value (±0 both 0), so two
/// values' distance in ulps is the difference.
fn ordered(bits: u16) -> i32 {
    let mag = i32::from(bits & 0x7fff);
    if bits & 0x8000 != 0 { -mag } else { mag }
}

/// The ulp of `dt` (bf16: 8 significant bits, f16: 11) at a normal value `x`.
fn ulp_at(dt: DType, x: f64) -> f64 {
    let bits = if dt == DType::BF16 { 7 } else { 10 };
    2f64.powi(x.abs().log2().floor() as i32 - bits)
}

/// How far the compiled result is from the oracle's, in ulps of the dtype.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) elements: usize,
    /// Elements one ulp off.
    pub(super) one_ulp: usize,
    /// Elements below the cancellation floor that differ at all.
    pub(super) small_differ: usize,
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, t: Tally) {
        self.elements += t.elements;
        self.one_ulp += t.one_ulp;
        self.small_differ += t.small_differ;
    }
}

/// Compares element by element; NaN must meet NaN. An element of at least 2⁻⁸ of the
/// output's largest magnitude must be within one ulp of the oracle's value (bit distance).
/// A smaller one is what is left of cancelling `p·v` terms: f32 work carries an absolute
/// error of a few f32 ulps of the row's scale there, which can exceed the dtype's ulp at
/// the tiny value, so it is held to one ulp at the floor (2⁻⁸ of the largest magnitude)
/// instead.
pub(super) fn compare(got: &TensorData, want: &TensorData, what: &str) -> Tally {
    assert_eq!((got.dtype, &got.dims), (want.dtype, &want.dims), "{what}");
    let dt = got.dtype;
    let half = |t: &TensorData| -> Vec<u16> {
        (t.bytes.chunks_exact(2))
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect()
    };
    let nan = |b: u16| match dt {
        DType::BF16 => b & 0x7f80 == 0x7f80 && b & 0x7f != 0,
        _ => b & 0x7c00 == 0x7c00 && b & 0x3ff != 0,
    };
    let (gv, wv) = (got.to_f64_vec(), want.to_f64_vec());
    let scale = (wv.iter())
        .filter(|x| x.is_finite())
        .fold(0.0f64, |m, x| m.max(x.abs()));
    let floor = scale * 2f64.powi(-8);
    let mut t = Tally::default();
    for (i, (a, b)) in half(got).into_iter().zip(half(want)).enumerate() {
        t.elements += 1;
        assert_eq!(
            nan(a),
            nan(b),
            "{what}: element {i} {} vs oracle {}",
            gv[i],
            wv[i]
        );
        if nan(a) {
            continue;
        }
        if wv[i].abs() >= floor {
            let u = ordered(a).abs_diff(ordered(b));
            assert!(
                u <= 1,
                "{what}: element {i} {} is {u} ulp from the oracle's {}",
                gv[i],
                wv[i]
            );
            t.one_ulp += usize::from(u == 1);
        } else if a != b {
            let off = (gv[i] - wv[i]).abs() / ulp_at(dt, floor);
            assert!(
                off <= 1.0,
                "{what}: small element {i} {} vs oracle {}: {off} ulp at the floor {floor}",
                gv[i],
                wv[i]
            );
            t.small_differ += 1;
        }
    }
    t
}

/// Runs `c` compiled for the CPU and through the oracle and compares them.
fn check_ulp(c: Lowp, seed: u64) -> Tally {
    let mut rng = Rng::new(seed);
    let (g, args) = build(c, &mut rng);
    let want = rlx_testkit::oracle(&g, &args).unwrap().remove(0);
    let exe = compile_with(&g, &compile_options()).unwrap();
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let got = exe.run(&views).unwrap().remove(0);
    compare(&got, &want, &format!("{c:?}"))
}

#[test]
fn bf16_and_f16_attention_is_within_one_ulp_of_the_oracle_for_every_mask_and_shape() {
    let mut report = Vec::new();
    for dt in [DType::BF16, DType::F16] {
        let new = |h, hk, d, mask| Lowp::new(dt, h, hk, d, mask);
        let f32_extra = |c: Lowp| Lowp {
            extra: DType::F32,
            ..c
        };
        // Grouped-query heads, head dims that are not multiples of 16 (20, 12, 7, 24).
        let cases = [
            new(4, 2, 20, MaskKind::Causal),
            new(4, 1, 12, MaskKind::None),
            new(2, 2, 7, MaskKind::SlidingWindow(9)),
            new(4, 2, 16, MaskKind::Bias),
            f32_extra(new(4, 2, 16, MaskKind::Bias)),
            new(4, 2, 20, MaskKind::Custom),
            f32_extra(new(2, 1, 24, MaskKind::Custom)),
            Lowp {
                softcap: Some(5.0),
                ..new(4, 2, 20, MaskKind::Causal)
            },
            Lowp {
                s: 130,
                ..new(8, 8, 32, MaskKind::Causal)
            },
        ];
        let mut sum = Tally::default();
        for (i, c) in cases.into_iter().enumerate() {
            sum += check_ulp(c, 40 + i as u64);
        }
        assert!(
            sum.one_ulp * 100 < sum.elements,
            "{dt:?}: {} of {} one ulp off",
            sum.one_ulp,
            sum.elements
        );
        report.push(format!(
            "{dt:?}: {} of {} elements 1 ulp off, {} below the floor differ",
            sum.one_ulp, sum.elements, sum.small_differ
        ));
    }
    eprintln!(
        "attention through f32 vs the f64 oracle: {}",
        report.join("; ")
    );
}

/// A custom mask of bf16 that hides every key of batch 0 zeroes its rows exactly.
#[test]
fn bf16_attention_rows_with_no_visible_key_are_zero() {
    let c = Lowp::new(DType::BF16, 2, 2, 8, MaskKind::Custom);
    let mut rng = Rng::new(7);
    let (g, mut args) = build(c, &mut rng);
    let mut m = args[3].to_f64_vec();
    m[..c.s].fill(0.0);
    args[3] = TensorData::from_f64_as(DType::BF16, &[c.b, c.s], &m);
    let exe = compile_with(&g, &compile_options()).unwrap();
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let out = exe.run(&views).unwrap()[0].to_f64_vec();
    let row = c.s * c.h * c.d;
    assert!(out[..row].iter().all(|&x| x == 0.0));
    assert!(out[row..].iter().any(|&x| x != 0.0));
}

/// The compiled program of bf16 and f16 attention has a fused attention kernel in f32 and
/// no opaque kernel; without the entry the op is one opaque (oracle) kernel.
#[test]
fn half_attention_compiles_to_the_fused_f32_kernel_not_an_opaque_one() {
    for dt in [DType::BF16, DType::F16] {
        for mask in [MaskKind::Causal, MaskKind::Bias, MaskKind::Custom] {
            let mut rng = Rng::new(1);
            let (g, _) = build(Lowp::new(dt, 4, 2, 20, mask), &mut rng);
            let p = rlx_compile::compile(&g, &compile_options()).unwrap();
            let opaque: Vec<String> = (p.kernels.iter())
                .filter_map(|k| match &k.kind {
                    KernelKind::Opaque { op, .. } => Some(op.name()),
                    _ => None,
                })
                .collect();
            assert!(opaque.is_empty(), "{dt:?} {mask:?}: opaque {opaque:?}");
            let fused: Vec<DType> = (p.kernels.iter())
                .filter_map(|k| match &k.kind {
                    KernelKind::Attention { dtype, .. } => Some(*dtype),
                    _ => None,
                })
                .collect();
            assert_eq!(fused, [DType::F32], "{dt:?} {mask:?}");
            let mut without = compile_options();
            without.keep_whole.retain(|k| k != ATTENTION_IN_F32);
            let p = rlx_compile::compile(&g, &without).unwrap();
            assert!(
                matches!(&p.kernels[..], [k] if matches!(&k.kind, KernelKind::Opaque { op, .. } if op.name() == "attention")),
                "{dt:?} {mask:?}: without the entry, one opaque attention"
            );
        }
    }
}

/// bf16 attention at a W11-like size (B=4, S=256, H=8, D=32, causal) through the oracle
/// (without `ATTENTION_IN_F32`) and through f32, in one process:
/// `cargo test --release -p rlx-cpu --test attention_fast -- --ignored --nocapture time_bf16`.
#[test]
#[ignore]
fn time_bf16_attention_oracle_against_f32() {
    let mut c = Lowp::new(DType::BF16, 8, 8, 32, MaskKind::Causal);
    (c.b, c.s) = (4, 256);
    let mut rng = Rng::new(1);
    let (g, args) = build(c, &mut rng);
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let mut oracle_opts = compile_options();
    oracle_opts.keep_whole.retain(|k| k != ATTENTION_IN_F32);
    let fast = compile_with(&g, &compile_options()).unwrap();
    let slow = compile_with(&g, &oracle_opts).unwrap();
    let time = |exe: &dyn rlx_runtime::Executable, n: usize| {
        let mut t = Vec::new();
        for _ in 0..n {
            let s = std::time::Instant::now();
            std::hint::black_box(exe.run(&views).unwrap());
            t.push(s.elapsed().as_secs_f64() * 1e3);
        }
        t.sort_by(f64::total_cmp);
        (t[0], t[t.len() / 2])
    };
    // Alternate the two so both see the same machine load.
    let (mut f, mut s) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        f.push(time(fast.as_ref(), 20));
        s.push(time(slow.as_ref(), 2));
    }
    let best = |v: &[(f64, f64)]| v.iter().map(|x| x.0).fold(f64::INFINITY, f64::min);
    let med = |v: &[(f64, f64)]| {
        let mut m: Vec<f64> = v.iter().map(|x| x.1).collect();
        m.sort_by(f64::total_cmp);
        m[m.len() / 2]
    };
    eprintln!(
        "bf16 attention B=4 S=256 H=8 D=32 causal, {} threads: oracle min {:.2} ms median {:.2} ms; f32 kernel min {:.3} ms median {:.3} ms",
        rlx_cpu::num_threads(),
        best(&s),
        med(&s),
        best(&f),
        med(&f)
    );
}
