//! Random fused-op graphs: attention and convolution, in f32.

use crate::rng::{Rng, random_data};
use rlx_ir::{Activation, DType, Dim, Graph, MaskKind, NodeId, Op, Shape, TensorData};

/// Adds an f32 input `name` of `dims` with random data pushed onto `args`.
fn input(
    g: &mut Graph,
    args: &mut Vec<TensorData>,
    rng: &mut Rng,
    name: &str,
    dims: &[usize],
) -> NodeId {
    let s = Shape::new(dims, DType::F32);
    args.push(random_data(rng, &s));
    g.input(name, s)
}

/// `y`, or `act(y)` half the time (an epilogue the backend may fuse).
fn maybe_act(g: &mut Graph, rng: &mut Rng, y: NodeId, act: Activation) -> NodeId {
    if rng.chance(0.5) {
        g.add_op(Op::Activation(act), vec![y]).unwrap()
    } else {
        y
    }
}

/// A random attention graph and its data: layouts `[B, S, H, D]` and `[B, S, H·D]`,
/// grouped-query heads, every mask kind, a value head size other than the key's,
/// optional scale and softcap, sometimes a transposed (strided) q and a tanh epilogue.
pub fn build_attention_graph(rng: &mut Rng) -> (Graph, Vec<TensorData>) {
    let mut g = Graph::new("attention");
    let mut args = Vec::new();
    let (b, sq, sk) = (1 + rng.below(2), 1 + rng.below(70), 1 + rng.below(70));
    let hk = 1 + rng.below(2);
    let h = hk * (1 + rng.below(2));
    let d = rng.pick(&[1, 3, 8, 16]);
    let dv = if rng.chance(0.3) { 5 } else { d };
    let four = rng.chance(0.5);
    let shape = |s: usize, hh: usize, dd: usize| {
        if four {
            vec![b, s, hh, dd]
        } else {
            vec![b, s, hh * dd]
        }
    };
    let q = if four && rng.chance(0.3) {
        // q given as [B, H, S, D] and transposed: a strided view.
        let t = input(&mut g, &mut args, rng, "q", &[b, h, sq, d]);
        let perm = vec![0, 2, 1, 3];
        g.add_op(Op::Transpose { perm }, vec![t]).unwrap()
    } else {
        input(&mut g, &mut args, rng, "q", &shape(sq, h, d))
    };
    let k = input(&mut g, &mut args, rng, "k", &shape(sk, hk, d));
    let v = input(&mut g, &mut args, rng, "v", &shape(sk, hk, dv));
    let window = rng.below(9);
    let mask = rng.pick(&[
        MaskKind::None,
        MaskKind::Causal,
        MaskKind::SlidingWindow(window),
        MaskKind::Custom,
        MaskKind::Bias,
    ]);
    let mut ins = vec![q, k, v];
    match mask {
        MaskKind::Custom => ins.push(input(&mut g, &mut args, rng, "mask", &[b, sk])),
        MaskKind::Bias => {
            let from = rng.below(2);
            let dims = &[h, sq, sk][from..];
            ins.push(input(&mut g, &mut args, rng, "bias", dims));
        }
        _ => {}
    }
    let op = Op::Attention {
        num_heads: h,
        head_dim: d,
        v_head_dim: (dv != d).then_some(dv),
        mask_kind: mask,
        score_scale: rng.chance(0.3).then_some(0.7),
        attn_logit_softcap: rng.chance(0.3).then_some(5.0),
    };
    let a = g.add_op(op, ins).unwrap();
    let out = maybe_act(&mut g, rng, a, Activation::Tanh);
    g.set_outputs(vec![out]);
    (g, args)
}

/// A random convolution and its data: 1 or 2 spatial axes, groups, stride, padding,
/// dilation, optional bias, sometimes a ReLU epilogue. Where the random parameters
/// leave no output position the graph is a plain ReLU of the input instead.
pub fn build_conv_graph(rng: &mut Rng) -> (Graph, Vec<TensorData>) {
    let mut g = Graph::new("conv");
    let mut args = Vec::new();
    let sr = 1 + rng.below(2);
    let groups = 1 + rng.below(2);
    let (n, cin, cout) = (
        1 + rng.below(2),
        groups * (1 + rng.below(3)),
        groups * (1 + rng.below(3)),
    );
    let k: Vec<usize> = (0..sr).map(|_| 1 + rng.below(3)).collect();
    let stride: Vec<usize> = (0..sr).map(|_| 1 + rng.below(2)).collect();
    let padding: Vec<usize> = (0..sr).map(|_| rng.below(2)).collect();
    let dilation: Vec<usize> = (0..sr).map(|_| 1 + rng.below(2)).collect();
    let sp: Vec<usize> = (0..sr).map(|_| 4 + rng.below(6)).collect();
    let mut xd = vec![n, cin];
    xd.extend(&sp);
    let mut wd = vec![cout, cin / groups];
    wd.extend(&k);
    let x = input(&mut g, &mut args, rng, "x", &xd);
    let w = input(&mut g, &mut args, rng, "w", &wd);
    let mut ins = vec![x, w];
    if rng.chance(0.5) {
        ins.push(input(&mut g, &mut args, rng, "b", &[cout]));
    }
    let op = Op::Conv {
        kernel_size: k,
        stride,
        padding,
        dilation,
        groups,
    };
    let Ok(y) = g.add_op(op, ins) else {
        let y = g.add_op(Op::Activation(Activation::Relu), vec![x]).unwrap();
        g.set_outputs(vec![y]);
        return (g, args);
    };
    let out = maybe_act(&mut g, rng, y, Activation::Relu);
    g.set_outputs(vec![out]);
    (g, args)
}

/// One attention of `mask` over `[2, ?0, 4, 16]` queries with two key/value heads (a
/// dynamic sequence length, grouped-query heads, softcap 30) in `dt`: the graph the GPU
/// backends' compile-only tests lower, render and hand to NVRTC or hiprtc for every mask
/// kind and dtype. A custom mask is `[2, ?0]`, a bias `[4, ?0, ?0]`.
pub fn gqa_attention_graph(dt: DType, mask: MaskKind) -> Graph {
    let mut g = Graph::new(format!("attn_{dt}_{mask:?}").replace(['(', ')'], "_"));
    let s = Dim::Dynamic(0);
    let dims = |h: usize| [Dim::Static(2), s, Dim::Static(h), Dim::Static(16)];
    let q = g.input("q", Shape::from_dims(&dims(4), dt));
    let k = g.input("k", Shape::from_dims(&dims(2), dt));
    let v = g.input("v", Shape::from_dims(&dims(2), dt));
    let mut ins = vec![q, k, v];
    match mask {
        MaskKind::Custom => ins.push(g.input("m", Shape::from_dims(&[Dim::Static(2), s], dt))),
        MaskKind::Bias => ins.push(g.input("b", Shape::from_dims(&[Dim::Static(4), s, s], dt))),
        _ => {}
    }
    let attention = Op::Attention {
        num_heads: 4,
        head_dim: 16,
        v_head_dim: None,
        mask_kind: mask,
        score_scale: None,
        attn_logit_softcap: Some(30.0),
    };
    let a = g.add_op(attention, ins).expect("a valid attention");
    g.set_outputs(vec![a]);
    g
}
