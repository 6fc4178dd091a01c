//! The f32 convolution-gradient kernels (`exec/conv_grad.rs`) and pooling kernels
//! (`exec/pool.rs`) against the oracle over geometries generated in loops: 1-, 2- and
//! 3-D, strides 1–3, padding 0–2, dilation 1–2, groups 1/2/4, batch 1 and 3, odd sizes.
//!
//! Conv gradients sum in f32 (the oracle in f64 and rounds once): each element may
//! differ from the oracle's by `4·√K·max|term|·2⁻²⁴ + |ref|·2⁻²⁴`, with `K` the number
//! of product terms of the element and `max|term|` the bound `max|a|·max|b|` of one
//! term (random-walk rounding of a K-term sum, with a fourfold margin). Pooling promises
//! the oracle's bits: compared by bit pattern, NaN payloads included.

use super::{bits, oracle, run};
use rlx_compile::autodiff::grad_graph;
use rlx_ir::{BinaryOp, DType, Graph, Op, ReduceOp, Shape, TensorData};
use rlx_testkit::{Rng, op};

fn f32_data(rng: &mut Rng, dims: &[usize]) -> TensorData {
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n).map(|_| (rng.uniform() * 2.0 - 1.0) as f32).collect();
    TensorData::from_f32(dims, &v)
}

fn max_abs(t: &TensorData) -> f64 {
    t.to_f32_vec()
        .iter()
        .fold(0.0f64, |m, v| m.max(v.abs() as f64))
}

/// Checks `got` against the oracle's `want` with the √K tolerance of the module docs.
fn close(what: &str, got: &TensorData, want: &TensorData, k: usize, max_term: f64) {
    assert_eq!(got.dims, want.dims, "{what}: dims");
    let u = 2f64.powi(-24);
    for (i, (a, b)) in got.to_f32_vec().iter().zip(want.to_f32_vec()).enumerate() {
        let tol = 4.0 * (k as f64).sqrt() * max_term * u + (b as f64).abs() * u;
        assert!(
            ((*a as f64) - b as f64).abs() <= tol,
            "{what}: element {i} = {a}, oracle {b} (tolerance {tol:e}, K = {k})"
        );
    }
}

struct ConvCase {
    n: usize,
    c_in: usize,
    c_out: usize,
    groups: usize,
    in_sp: Vec<usize>,
    k: Vec<usize>,
    stride: Vec<usize>,
    pad: Vec<usize>,
    dil: Vec<usize>,
}

impl ConvCase {
    fn attrs(&self) -> (Vec<usize>, Vec<usize>, Vec<usize>, Vec<usize>, usize) {
        (
            self.k.clone(),
            self.stride.clone(),
            self.pad.clone(),
            self.dil.clone(),
            self.groups,
        )
    }

    fn out_sp(&self) -> Vec<usize> {
        (0..self.k.len())
            .map(|a| {
                let span = self.dil[a] * (self.k[a] - 1) + 1;
                (self.in_sp[a] + 2 * self.pad[a] - span) / self.stride[a] + 1
            })
            .collect()
    }

    fn dims(&self) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
        let x = [self.n, self.c_in]
            .iter()
            .chain(&self.in_sp)
            .copied()
            .collect();
        let w = [self.c_out, self.c_in / self.groups]
            .iter()
            .chain(&self.k)
            .copied()
            .collect();
        let y = [self.n, self.c_out]
            .iter()
            .chain(&self.out_sp())
            .copied()
            .collect();
        (x, w, y)
    }
}

/// A random geometry of rank `sr` whose dilated kernel fits the padded input.
fn conv_case(rng: &mut Rng, sr: usize) -> ConvCase {
    let groups = [1, 2, 4][rng.below(3)];
    let n = [1, 3][rng.below(2)];
    let mut c = ConvCase {
        n,
        c_in: groups * (1 + rng.below(3)),
        c_out: groups * (1 + rng.below(3)),
        groups,
        in_sp: vec![],
        k: vec![],
        stride: vec![],
        pad: vec![],
        dil: vec![],
    };
    let max_in = [0, 13, 9, 6][sr];
    for _ in 0..sr {
        let k = 1 + rng.below(4);
        let (s, p, d) = (1 + rng.below(3), rng.below(3), 1 + rng.below(2));
        let span = d * (k - 1) + 1;
        let lo = span.saturating_sub(2 * p).max(1);
        c.in_sp.push(lo + rng.below(max_in));
        c.k.push(k);
        c.stride.push(s);
        c.pad.push(p);
        c.dil.push(d);
    }
    c
}

#[test]
fn conv_gradients_match_the_oracle_over_generated_geometries() {
    let mut rng = Rng::new(21);
    for case in 0..90 {
        let sr = 1 + case % 3;
        let c = conv_case(&mut rng, sr);
        let (xd, wd, yd) = c.dims();
        let (kernel_size, stride, padding, dilation, groups) = c.attrs();
        let mut g = Graph::new("conv_grads");
        let x = g.input("x", Shape::new(&xd, DType::F32));
        let w = g.input("w", Shape::new(&wd, DType::F32));
        let gy = g.input("gy", Shape::new(&yd, DType::F32));
        let gi = Op::ConvGradInput {
            kernel_size: kernel_size.clone(),
            stride: stride.clone(),
            padding: padding.clone(),
            dilation: dilation.clone(),
            groups,
        };
        let gw = Op::ConvGradWeight {
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
        };
        let dx = op(&mut g, gi, vec![x, w, gy]);
        let dw = op(&mut g, gw, vec![x, w, gy]);
        g.set_outputs(vec![dx, dw]);
        let args = vec![
            f32_data(&mut rng, &xd),
            f32_data(&mut rng, &wd),
            f32_data(&mut rng, &yd),
        ];
        let (got, want) = (run(&g, &args), oracle(&g, &args));
        let what = format!(
            "case {case}: x {xd:?} w {wd:?} stride {:?} pad {:?} dil {:?} groups {}",
            c.stride, c.pad, c.dil, c.groups
        );
        let kprod: usize = c.k.iter().product();
        let osz: usize = c.out_sp().iter().product();
        let k_in = (c.c_out / c.groups) * kprod;
        close(
            &format!("{what} grad_input"),
            &got[0],
            &want[0],
            k_in,
            max_abs(&args[1]) * max_abs(&args[2]),
        );
        close(
            &format!("{what} grad_weight"),
            &got[1],
            &want[1],
            c.n * osz,
            max_abs(&args[0]) * max_abs(&args[2]),
        );
    }
}

#[test]
fn conv_grad_of_an_f64_convolution_still_runs_the_oracle_exactly() {
    // Only f32 has a native kernel; other dtypes must keep the oracle's bits.
    let mut g = Graph::new("f64_grad");
    let x = g.input("x", Shape::new(&[2, 2, 5, 4], DType::F64));
    let w = g.input("w", Shape::new(&[4, 1, 3, 2], DType::F64));
    let gy = g.input("gy", Shape::new(&[2, 4, 3, 4], DType::F64));
    let attrs = |grad_input: bool| {
        let (kernel_size, stride, padding, dilation) =
            (vec![3, 2], vec![2, 1], vec![1, 1], vec![1, 2]);
        if grad_input {
            Op::ConvGradInput {
                kernel_size,
                stride,
                padding,
                dilation,
                groups: 2,
            }
        } else {
            Op::ConvGradWeight {
                kernel_size,
                stride,
                padding,
                dilation,
                groups: 2,
            }
        }
    };
    let dx = op(&mut g, attrs(true), vec![x, w, gy]);
    let dw = op(&mut g, attrs(false), vec![x, w, gy]);
    g.set_outputs(vec![dx, dw]);
    let mut rng = Rng::new(3);
    let args: Vec<TensorData> = [&[2, 2, 5, 4][..], &[4, 1, 3, 2], &[2, 4, 3, 4]]
        .iter()
        .map(|d| {
            let n: usize = d.iter().product();
            let v: Vec<f64> = (0..n).map(|_| rng.uniform() - 0.5).collect();
            TensorData::from_f64(d, &v)
        })
        .collect();
    let (got, want) = (run(&g, &args), oracle(&g, &args));
    assert_eq!(got[0].bytes, want[0].bytes);
    assert_eq!(got[1].bytes, want[1].bytes);
}

#[test]
fn gradient_of_summed_squared_convolution_matches_the_oracle() {
    let mut rng = Rng::new(5);
    for (xd, wd, stride, pad, dil, groups) in [
        ([3, 4, 9, 8], [6, 2, 3, 3], [1, 1], [1, 1], [1, 1], 2),
        ([2, 3, 11, 7], [4, 3, 3, 2], [2, 1], [0, 2], [2, 1], 1),
    ] {
        let mut g = Graph::new("conv_sq");
        let x = g.input("x", Shape::new(&xd, DType::F32));
        let w = g.input("w", Shape::new(&wd, DType::F32));
        let conv = Op::Conv {
            kernel_size: wd[2..].to_vec(),
            stride: stride.to_vec(),
            padding: pad.to_vec(),
            dilation: dil.to_vec(),
            groups,
        };
        let y = op(&mut g, conv, vec![x, w]);
        let y2 = op(&mut g, Op::Binary(BinaryOp::Mul), vec![y, y]);
        let loss = op(
            &mut g,
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![0, 1, 2, 3],
                keep_dim: false,
            },
            vec![y2],
        );
        g.set_outputs(vec![loss]);
        let gg = grad_graph(&g, &[x, w]).unwrap();
        let names: Vec<String> = gg.input_names().iter().map(|s| s.to_string()).collect();
        let (xa, wa) = (f32_data(&mut rng, &xd), f32_data(&mut rng, &wd));
        let args: Vec<TensorData> = names
            .iter()
            .map(|n| if n == "x" { xa.clone() } else { wa.clone() })
            .collect();
        let (got, want) = (run(&gg, &args), oracle(&gg, &args));
        // dL/dy = 2y has |y| ≤ taps·max|x|·max|w|; y itself is computed in f32 first.
        let taps = wd[1] * wd[2] * wd[3];
        let ymax = taps as f64 * max_abs(&xa) * max_abs(&wa);
        // dL/dw sums over every image and output position (at most the input's).
        let k_w = xd[0] * xd[2] * xd[3];
        close(
            "dL/dx",
            &got[0],
            &want[0],
            taps * wd[0],
            4.0 * ymax * max_abs(&wa),
        );
        close("dL/dw", &got[1], &want[1], k_w, 4.0 * ymax * max_abs(&xa));
    }
}

struct PoolCase {
    xd: Vec<usize>,
    k: Vec<usize>,
    stride: Vec<usize>,
    pad: Vec<usize>,
}

fn pool_case(rng: &mut Rng, sr: usize) -> PoolCase {
    let mut c = PoolCase {
        xd: vec![[1, 3][rng.below(2)], 1 + rng.below(3)],
        k: vec![],
        stride: vec![],
        pad: vec![],
    };
    let max_in = [0, 15, 9, 6][sr];
    for _ in 0..sr {
        let k = 1 + rng.below(4);
        let p = rng.below(k / 2 + 1).min(2);
        let s = 1 + rng.below(3);
        c.xd.push((k - 2 * p).max(1) + rng.below(max_in));
        c.k.push(k);
        c.stride.push(s);
        c.pad.push(p);
    }
    c
}

/// Forward and gradient of one pooling kind, native and oracle, compared by bits.
fn pool_bits_match(what: &str, c: &PoolCase, kind: ReduceOp, x: &TensorData, rng: &mut Rng) {
    let mut g = Graph::new("pool");
    let xn = g.input("x", Shape::new(&c.xd, DType::F32));
    let pool = Op::Pool {
        kind,
        kernel_size: c.k.clone(),
        stride: c.stride.clone(),
        padding: c.pad.clone(),
    };
    let y = op(&mut g, pool, vec![xn]);
    let yd = g.node(y).shape.static_dims().unwrap();
    let gy = g.input("gy", Shape::new(&yd, DType::F32));
    let grad = Op::PoolGrad {
        kind,
        kernel_size: c.k.clone(),
        stride: c.stride.clone(),
        padding: c.pad.clone(),
    };
    let dx = op(&mut g, grad, vec![xn, gy]);
    g.set_outputs(vec![y, dx]);
    let args = vec![x.clone(), f32_data(rng, &yd)];
    let (got, want) = (run(&g, &args), oracle(&g, &args));
    for (o, name) in ["forward", "gradient"].iter().enumerate() {
        assert_eq!(got[o].dims, want[o].dims, "{what} {kind:?} {name}: dims");
        assert_eq!(
            bits(&got[o]),
            bits(&want[o]),
            "{what} {kind:?} {name}: x {:?} kernel {:?} stride {:?} pad {:?}",
            c.xd,
            c.k,
            c.stride,
            c.pad
        );
    }
}

#[test]
fn pooling_forward_and_gradient_are_the_oracles_bits_over_generated_geometries() {
    let mut rng = Rng::new(33);
    for case in 0..120 {
        let c = pool_case(&mut rng, 1 + case % 3);
        // Half the cases draw from {0, 1, 2} so that max windows have ties.
        let x = if case % 2 == 0 {
            f32_data(&mut rng, &c.xd)
        } else {
            let n: usize = c.xd.iter().product();
            let v: Vec<f32> = (0..n).map(|_| rng.below(3) as f32).collect();
            TensorData::from_f32(&c.xd, &v)
        };
        for kind in [ReduceOp::Max, ReduceOp::Mean, ReduceOp::Sum] {
            pool_bits_match(&format!("case {case}"), &c, kind, &x, &mut rng);
        }
    }
}

#[test]
fn pooling_with_nan_and_infinities_matches_the_oracles_bits() {
    let mut rng = Rng::new(44);
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0];
    for case in 0..30 {
        let c = pool_case(&mut rng, 1 + case % 2);
        let n: usize = c.xd.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|_| {
                if rng.chance(0.3) {
                    specials[rng.below(4)]
                } else {
                    rng.below(3) as f32 - 1.0
                }
            })
            .collect();
        // A NaN with a payload too: the oracle's f64 round trip decides its bits.
        let mut v = v;
        v[0] = f32::from_bits(0x7fc0_1234);
        let x = TensorData::from_f32(&c.xd, &v);
        for kind in [ReduceOp::Max, ReduceOp::Mean, ReduceOp::Sum] {
            pool_bits_match(&format!("special case {case}"), &c, kind, &x, &mut rng);
        }
    }
}

#[test]
fn pooling_over_an_empty_spatial_axis_matches_the_oracle() {
    // Kernel 2 with padding 1 over a length-0 axis: one window, all padding.
    let c = PoolCase {
        xd: vec![2, 3, 0, 4],
        k: vec![2, 2],
        stride: vec![1, 2],
        pad: vec![1, 0],
    };
    let x = TensorData::from_f32(&c.xd, &[]);
    let mut rng = Rng::new(9);
    for kind in [ReduceOp::Max, ReduceOp::Mean, ReduceOp::Sum] {
        pool_bits_match("empty axis", &c, kind, &x, &mut rng);
    }
}

#[test]
fn conv_gradients_and_pooling_have_the_same_bits_for_one_two_and_three_threads() {
    // Several images take the parallel paths (images of the input gradient, image
    // ranges of the weight gradient) when the pool has threads; pooling is included
    // so that a future parallel plane loop is held to the same rule.
    let mut rng = Rng::new(77);
    let (xd, wd, yd) = ([5, 4, 9, 7], [6, 2, 3, 3], [5, 6, 5, 7]);
    let mut g = Graph::new("threads");
    let x = g.input("x", Shape::new(&xd, DType::F32));
    let w = g.input("w", Shape::new(&wd, DType::F32));
    let gy = g.input("gy", Shape::new(&yd, DType::F32));
    let attrs = (vec![3, 3], vec![2, 1], vec![1, 1], vec![1, 1], 2);
    let gi = Op::ConvGradInput {
        kernel_size: attrs.0.clone(),
        stride: attrs.1.clone(),
        padding: attrs.2.clone(),
        dilation: attrs.3.clone(),
        groups: attrs.4,
    };
    let gw = Op::ConvGradWeight {
        kernel_size: attrs.0,
        stride: attrs.1,
        padding: attrs.2,
        dilation: attrs.3,
        groups: attrs.4,
    };
    let pool = Op::Pool {
        kind: ReduceOp::Mean,
        kernel_size: vec![3, 2],
        stride: vec![2, 2],
        padding: vec![1, 1],
    };
    let dx = op(&mut g, gi, vec![x, w, gy]);
    let dw = op(&mut g, gw, vec![x, w, gy]);
    let p = op(&mut g, pool, vec![x]);
    g.set_outputs(vec![dx, dw, p]);
    let args = vec![
        f32_data(&mut rng, &xd),
        f32_data(&mut rng, &wd),
        f32_data(&mut rng, &yd),
    ];
    let on = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| run(&g, &args))
    };
    let one = on(1);
    for threads in [2, 3] {
        let many = on(threads);
        for (k, (a, b)) in one.iter().zip(&many).enumerate() {
            assert_eq!(bits(a), bits(b), "output {k}: 1 vs {threads} threads");
        }
    }
}
