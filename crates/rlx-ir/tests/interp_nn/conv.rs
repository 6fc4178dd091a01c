//! Convolution (1-D, 2-D, 3-D) and its two gradients.

use super::*;

/// Conv hyper-parameters for `sr` spatial axes.
#[derive(Clone)]
struct Conv {
    k: Vec<usize>,
    s: Vec<usize>,
    p: Vec<usize>,
    d: Vec<usize>,
    groups: usize,
}

impl Conv {
    fn op(&self) -> Op {
        Op::Conv {
            kernel_size: self.k.clone(),
            stride: self.s.clone(),
            padding: self.p.clone(),
            dilation: self.d.clone(),
            groups: self.groups,
        }
    }
    fn grad_input(&self) -> Op {
        Op::ConvGradInput {
            kernel_size: self.k.clone(),
            stride: self.s.clone(),
            padding: self.p.clone(),
            dilation: self.d.clone(),
            groups: self.groups,
        }
    }
    fn grad_weight(&self) -> Op {
        Op::ConvGradWeight {
            kernel_size: self.k.clone(),
            stride: self.s.clone(),
            padding: self.p.clone(),
            dilation: self.d.clone(),
            groups: self.groups,
        }
    }
    fn out_dims(&self, x: &[usize], c_out: usize) -> Vec<usize> {
        let mut o = vec![x[0], c_out];
        for a in 0..self.k.len() {
            o.push((x[2 + a] + 2 * self.p[a] - self.d[a] * (self.k[a] - 1) - 1) / self.s[a] + 1);
        }
        o
    }
}

/// Naive 3-D convolution by direct summation; 1-D and 2-D problems are lifted to 3-D
/// with leading unit spatial axes (kernel 1, stride 1, no padding, dilation 1).
fn conv_ref(
    x: &[f64],
    xd: &[usize],
    w: &[f64],
    wd: &[usize],
    bias: Option<&[f64]>,
    c: &Conv,
) -> Vec<f64> {
    let lift = |v: &[usize], fill: usize| -> Vec<usize> {
        let mut out = vec![fill; 3 - v.len()];
        out.extend_from_slice(v);
        out
    };
    let (xs, ks) = (lift(&xd[2..], 1), lift(&c.k, 1));
    let (st, pd, dl) = (lift(&c.s, 1), lift(&c.p, 0), lift(&c.d, 1));
    let (n, cin, cout) = (xd[0], xd[1], wd[0]);
    let cin_g = cin / c.groups;
    let cout_g = cout / c.groups;
    let os: Vec<usize> = (0..3)
        .map(|a| (xs[a] + 2 * pd[a] - dl[a] * (ks[a] - 1) - 1) / st[a] + 1)
        .collect();
    let mut y = vec![0.0; n * cout * os[0] * os[1] * os[2]];
    for ni in 0..n {
        for co in 0..cout {
            let g = co / cout_g;
            for o0 in 0..os[0] {
                for o1 in 0..os[1] {
                    for o2 in 0..os[2] {
                        let mut acc = bias.map_or(0.0, |b| b[co]);
                        for ci in 0..cin_g {
                            for k0 in 0..ks[0] {
                                for k1 in 0..ks[1] {
                                    for k2 in 0..ks[2] {
                                        let i0 =
                                            (o0 * st[0] + k0 * dl[0]) as isize - pd[0] as isize;
                                        let i1 =
                                            (o1 * st[1] + k1 * dl[1]) as isize - pd[1] as isize;
                                        let i2 =
                                            (o2 * st[2] + k2 * dl[2]) as isize - pd[2] as isize;
                                        if i0 < 0 || i1 < 0 || i2 < 0 {
                                            continue;
                                        }
                                        let (i0, i1, i2) = (i0 as usize, i1 as usize, i2 as usize);
                                        if i0 >= xs[0] || i1 >= xs[1] || i2 >= xs[2] {
                                            continue;
                                        }
                                        let cx = g * cin_g + ci;
                                        let xv = x[(((ni * cin + cx) * xs[0] + i0) * xs[1] + i1)
                                            * xs[2]
                                            + i2];
                                        let wv = w[(((co * cin_g + ci) * ks[0] + k0) * ks[1] + k1)
                                            * ks[2]
                                            + k2];
                                        acc += xv * wv;
                                    }
                                }
                            }
                        }
                        y[(((ni * cout + co) * os[0] + o0) * os[1] + o1) * os[2] + o2] = acc;
                    }
                }
            }
        }
    }
    y
}

fn conv_case(xd: &[usize], wd: &[usize], c: &Conv, with_bias: bool, seed: u64) {
    let x = rand(xd.iter().product(), seed);
    let w = rand(wd.iter().product(), seed + 1);
    let b = rand(wd[0], seed + 2);
    let mut args = vec![t64(xd, &x), t64(wd, &w)];
    if with_bias {
        args.push(t64(&[wd[0]], &b));
    }
    let y = eval(c.op(), &args);
    assert_eq!(y.dims, c.out_dims(xd, wd[0]));
    let want = conv_ref(&x, xd, &w, wd, with_bias.then_some(&b[..]), c);
    let what = format!(
        "conv x {xd:?} w {wd:?} k {:?} s {:?} p {:?} d {:?} g {}",
        c.k, c.s, c.p, c.d, c.groups
    );
    assert_close(&y.to_f64_vec(), &want, 1e-13, &what);
}

fn conv(k: &[usize], s: &[usize], p: &[usize], d: &[usize], groups: usize) -> Conv {
    Conv {
        k: k.to_vec(),
        s: s.to_vec(),
        p: p.to_vec(),
        d: d.to_vec(),
        groups,
    }
}

#[test]
fn conv1d_hand_values_with_padding_and_stride() {
    let x = t64(&[1, 1, 3], &[1.0, 2.0, 3.0]);
    let w = t64(&[1, 1, 2], &[1.0, 1.0]);
    let y = eval64(
        conv(&[2], &[1], &[0], &[1], 1).op(),
        &[x.clone(), w.clone()],
    );
    assert_eq!(y, vec![3.0, 5.0]);
    let y = eval64(
        conv(&[2], &[1], &[1], &[1], 1).op(),
        &[x.clone(), w.clone()],
    );
    assert_eq!(y, vec![1.0, 3.0, 5.0, 3.0], "zero padding");
    let y = eval64(
        conv(&[2], &[2], &[1], &[1], 1).op(),
        &[x.clone(), w.clone()],
    );
    assert_eq!(
        y,
        vec![1.0, 5.0],
        "stride 2: (3 + 2 − 1 − 1)/2 + 1 = 2 outputs"
    );
    let y = eval64(
        conv(&[2], &[1], &[0], &[2], 1).op(),
        &[x, w, t64(&[1], &[0.5])],
    );
    assert_eq!(y, vec![4.5], "dilation 2 reads x0 + x2, plus bias");
}

#[test]
fn conv2d_matches_direct_summation_with_stride_padding_dilation_groups_and_bias() {
    let cases = [
        (
            vec![2, 3, 5, 6],
            vec![4, 3, 3, 3],
            conv(&[3, 3], &[1, 1], &[1, 1], &[1, 1], 1),
        ),
        (
            vec![1, 4, 7, 6],
            vec![6, 2, 3, 2],
            conv(&[3, 2], &[2, 1], &[1, 0], &[1, 2], 2),
        ),
        (
            vec![2, 4, 6, 6],
            vec![4, 1, 3, 3],
            conv(&[3, 3], &[2, 2], &[2, 1], &[2, 1], 4),
        ),
        (
            vec![1, 2, 4, 5],
            vec![3, 2, 1, 1],
            conv(&[1, 1], &[1, 2], &[0, 0], &[1, 1], 1),
        ),
    ];
    for (i, (xd, wd, c)) in cases.iter().enumerate() {
        conv_case(xd, wd, c, i % 2 == 0, 100 + i as u64);
        conv_case(xd, wd, c, i % 2 == 1, 110 + i as u64);
    }
}

#[test]
fn conv1d_and_conv3d_match_direct_summation() {
    conv_case(
        &[2, 4, 9],
        &[6, 2, 3],
        &conv(&[3], &[2], &[1], &[2], 2),
        true,
        120,
    );
    conv_case(
        &[1, 3, 5],
        &[2, 3, 5],
        &conv(&[5], &[1], &[2], &[1], 1),
        false,
        121,
    );
    conv_case(
        &[1, 2, 4, 5, 3],
        &[2, 2, 2, 3, 2],
        &conv(&[2, 3, 2], &[1, 2, 1], &[1, 1, 0], &[1, 1, 2], 1),
        true,
        122,
    );
    conv_case(
        &[2, 4, 3, 3, 4],
        &[4, 2, 3, 1, 2],
        &conv(&[3, 1, 2], &[2, 1, 1], &[1, 0, 1], &[1, 1, 1], 2),
        false,
        123,
    );
}

#[test]
fn conv_with_four_spatial_axes_reduces_to_conv3d_on_a_unit_axis() {
    // Shape inference accepts any spatial rank, so the oracle defines all of them.
    let c3 = conv(&[2, 2, 2], &[1, 2, 1], &[1, 0, 1], &[1, 1, 2], 1);
    let c4 = conv(
        &[1, 2, 2, 2],
        &[1, 1, 2, 1],
        &[0, 1, 0, 1],
        &[1, 1, 1, 2],
        1,
    );
    let x = rand(2 * 3 * 4 * 3, 130);
    let w = rand(3 * 2 * 8, 131);
    let y3 = eval64(
        c3.op(),
        &[t64(&[1, 2, 3, 4, 3], &x), t64(&[3, 2, 2, 2, 2], &w)],
    );
    let y4 = eval(
        c4.op(),
        &[t64(&[1, 2, 1, 3, 4, 3], &x), t64(&[3, 2, 1, 2, 2, 2], &w)],
    );
    assert_eq!(y4.dims[2], 1);
    assert_eq!(y4.to_f64_vec(), y3);
}

fn grad_problems() -> Vec<(Vec<usize>, Vec<usize>, Conv)> {
    vec![
        (
            vec![1, 2, 7],
            vec![4, 1, 3],
            conv(&[3], &[2], &[1], &[2], 2),
        ),
        (
            vec![2, 2, 5, 4],
            vec![3, 2, 3, 2],
            conv(&[3, 2], &[2, 1], &[1, 1], &[1, 2], 1),
        ),
        (
            vec![1, 4, 4, 5],
            vec![4, 2, 2, 3],
            conv(&[2, 3], &[1, 2], &[1, 0], &[2, 1], 2),
        ),
        (
            vec![1, 2, 3, 4, 3],
            vec![2, 1, 2, 2, 2],
            conv(&[2, 2, 2], &[1, 2, 1], &[1, 0, 1], &[1, 1, 2], 2),
        ),
    ]
}

#[test]
fn conv_grad_input_and_grad_weight_match_central_finite_differences() {
    for (i, (xd, wd, c)) in grad_problems().into_iter().enumerate() {
        let x = rand(xd.iter().product(), 200 + i as u64);
        let w = rand(wd.iter().product(), 210 + i as u64);
        let yd = c.out_dims(&xd, wd[0]);
        let g = rand(yd.iter().product(), 220 + i as u64);
        // L(x, w) = ⟨conv(x, w), g⟩
        let loss = |x: &[f64], w: &[f64]| dot(&eval64(c.op(), &[t64(&xd, x), t64(&wd, w)]), &g);
        let fd_x = grad_fd(&x, 1e-3, |xp| loss(xp, &w));
        let fd_w = grad_fd(&w, 1e-3, |wp| loss(&x, wp));
        let args = [t64(&xd, &x), t64(&wd, &w), t64(&yd, &g)];
        let gi = eval(c.grad_input(), &args);
        let gw = eval(c.grad_weight(), &args);
        assert_eq!(gi.dims, xd);
        assert_eq!(gw.dims, wd);
        assert_close(
            &gi.to_f64_vec(),
            &fd_x,
            1e-9,
            &format!("grad_input problem {i}"),
        );
        assert_close(
            &gw.to_f64_vec(),
            &fd_w,
            1e-9,
            &format!("grad_weight problem {i}"),
        );
    }
}

#[test]
fn conv_grads_satisfy_the_adjoint_identity() {
    // ⟨conv(x, w), g⟩ = ⟨x, grad_input(g)⟩ = ⟨w, grad_weight(g)⟩ (conv is bilinear).
    for (i, (xd, wd, c)) in grad_problems().into_iter().enumerate() {
        let x = rand(xd.iter().product(), 300 + i as u64);
        let w = rand(wd.iter().product(), 310 + i as u64);
        let yd = c.out_dims(&xd, wd[0]);
        let g = rand(yd.iter().product(), 320 + i as u64);
        let lhs = dot(&eval64(c.op(), &[t64(&xd, &x), t64(&wd, &w)]), &g);
        let args = [t64(&xd, &x), t64(&wd, &w), t64(&yd, &g)];
        let via_x = dot(&x, &eval64(c.grad_input(), &args));
        let via_w = dot(&w, &eval64(c.grad_weight(), &args));
        assert!(
            (lhs - via_x).abs() < 1e-12 * (1.0 + lhs.abs()),
            "problem {i}: {lhs} vs {via_x}"
        );
        assert!(
            (lhs - via_w).abs() < 1e-12 * (1.0 + lhs.abs()),
            "problem {i}: {lhs} vs {via_w}"
        );
    }
}

#[test]
fn conv_grad_input_reads_x_for_its_shape_only() {
    let (xd, wd, c) = grad_problems().remove(1);
    let w = rand(wd.iter().product(), 400);
    let yd = c.out_dims(&xd, wd[0]);
    let g = rand(yd.iter().product(), 401);
    let n: usize = xd.iter().product();
    let a = eval64(
        c.grad_input(),
        &[t64(&xd, &rand(n, 402)), t64(&wd, &w), t64(&yd, &g)],
    );
    let b = eval64(
        c.grad_input(),
        &[t64(&xd, &vec![0.0; n]), t64(&wd, &w), t64(&yd, &g)],
    );
    assert_eq!(a, b);
}

#[test]
fn conv_rounds_to_f16_output() {
    let c = conv(&[3], &[1], &[1], &[1], 1);
    let x = [0.1, 0.2, 0.3, 0.4];
    let w = [1.0 / 3.0, 0.7, -0.9];
    let y = eval(
        c.op(),
        &[
            t_as(DType::F16, &[1, 1, 4], &x),
            t_as(DType::F16, &[1, 1, 3], &w),
        ],
    );
    assert_eq!(y.dtype, DType::F16);
    let xr = t_as(DType::F16, &[4], &x).to_f64_vec();
    let wr = t_as(DType::F16, &[3], &w).to_f64_vec();
    let want = conv_ref(&xr, &[1, 1, 4], &wr, &[1, 1, 3], None, &c);
    assert_eq!(y.bytes, t_as(DType::F16, &[1, 1, 4], &want).bytes);
}
