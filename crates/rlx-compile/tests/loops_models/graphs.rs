//! The model graphs, small but with every op the workloads use.

use rlx_ir::{
    Activation, BinaryOp, DType, Graph, MaskKind, NodeId, Op, ReduceOp, ScaleLayout, ScaledFormat,
    Shape,
};

fn op(g: &mut Graph, o: Op, inputs: Vec<NodeId>) -> NodeId {
    g.add_op(o, inputs).unwrap_or_else(|e| panic!("{e}"))
}

fn bin(g: &mut Graph, o: BinaryOp, a: NodeId, b: NodeId) -> NodeId {
    op(g, Op::Binary(o), vec![a, b])
}

fn scalar(g: &mut Graph, v: f32) -> NodeId {
    let data = v.to_le_bytes().to_vec();
    g.add_node(Op::Constant { data }, vec![], Shape::new(&[], DType::F32))
}

/// Every graph, named.
pub fn all() -> Vec<(&'static str, Graph)> {
    vec![
        ("mlp", mlp()),
        ("conv", conv()),
        ("layer_norm", layer_norm()),
        ("attention", attention()),
        ("cross_entropy", cross_entropy()),
        ("embedding", embedding()),
        ("fp8_matmul_bias", fp8_matmul_bias()),
        ("adamw", adamw()),
        ("casts", casts()),
    ]
}

/// Two linear layers with GELU, a softmax.
fn mlp() -> Graph {
    let mut g = Graph::new("mlp");
    let x = g.input("x", Shape::new(&[6, 20], DType::F32));
    let w1 = g.input("w1", Shape::new(&[20, 33], DType::F32));
    let b1 = g.input("b1", Shape::new(&[33], DType::F32));
    let w2 = g.input("w2", Shape::new(&[33, 10], DType::F32));
    let h = op(&mut g, Op::MatMul, vec![x, w1]);
    let h = bin(&mut g, BinaryOp::Add, h, b1);
    let h = op(&mut g, Op::Activation(Activation::Gelu), vec![h]);
    let y = op(&mut g, Op::MatMul, vec![h, w2]);
    let y = op(&mut g, Op::Softmax { axis: -1 }, vec![y]);
    g.set_outputs(vec![y]);
    g
}

fn conv() -> Graph {
    let mut g = Graph::new("conv");
    let x = g.input("x", Shape::new(&[2, 3, 9, 9], DType::F32));
    let w = g.input("w", Shape::new(&[4, 3, 3, 3], DType::F32));
    let y = op(
        &mut g,
        Op::Conv {
            kernel_size: vec![3, 3],
            stride: vec![1, 1],
            padding: vec![1, 1],
            dilation: vec![1, 1],
            groups: 1,
        },
        vec![x, w],
    );
    let y = op(&mut g, Op::Activation(Activation::Relu), vec![y]);
    let y = op(
        &mut g,
        Op::Pool {
            kind: ReduceOp::Max,
            kernel_size: vec![2, 2],
            stride: vec![2, 2],
            padding: vec![0, 0],
        },
        vec![y],
    );
    g.set_outputs(vec![y]);
    g
}

fn layer_norm() -> Graph {
    let mut g = Graph::new("ln");
    let x = g.input("x", Shape::new(&[5, 48], DType::BF16));
    let ga = g.input("g", Shape::new(&[48], DType::BF16));
    let be = g.input("b", Shape::new(&[48], DType::BF16));
    let y = op(
        &mut g,
        Op::LayerNorm {
            axis: -1,
            eps: 1e-5,
        },
        vec![x, ga, be],
    );
    let z = op(
        &mut g,
        Op::RmsNorm {
            axis: -1,
            eps: 1e-6,
        },
        vec![y, ga, be],
    );
    g.set_outputs(vec![z]);
    g
}

fn attention() -> Graph {
    let mut g = Graph::new("attn");
    let q = g.input("q", Shape::new(&[2, 7, 4, 16], DType::F32));
    let k = g.input("k", Shape::new(&[2, 7, 2, 16], DType::F32));
    let v = g.input("v", Shape::new(&[2, 7, 2, 16], DType::F32));
    let o = op(
        &mut g,
        Op::Attention {
            num_heads: 4,
            head_dim: 16,
            v_head_dim: None,
            mask_kind: MaskKind::Causal,
            score_scale: None,
            attn_logit_softcap: None,
        },
        vec![q, k, v],
    );
    g.set_outputs(vec![o]);
    g
}

/// The mean softmax cross-entropy of logits against integer labels.
fn cross_entropy() -> Graph {
    let mut g = Graph::new("xent");
    let x = g.input("logits", Shape::new(&[9, 37], DType::F32));
    let t = g.input("labels", Shape::new(&[9], DType::I64));
    let l = op(&mut g, Op::SoftmaxCrossEntropyWithLogits, vec![x, t]);
    let o = Op::Reduce {
        op: ReduceOp::Mean,
        axes: vec![0],
        keep_dim: false,
    };
    let l = op(&mut g, o, vec![l]);
    g.set_outputs(vec![l]);
    g
}

/// A token embedding lookup and the gradient it sends back to the table.
fn embedding() -> Graph {
    let mut g = Graph::new("emb");
    let table = g.input("table", Shape::new(&[50, 12], DType::F32));
    let ids = g.input("ids", Shape::new(&[3, 5], DType::I32));
    let dy = g.input("dy", Shape::new(&[3, 5, 12], DType::F32));
    let e = op(&mut g, Op::Gather { axis: 0 }, vec![table, ids]);
    let zeros = g.input("zeros", Shape::new(&[50, 12], DType::F32));
    let flat_ids = op(
        &mut g,
        Op::Reshape {
            new_shape: vec![15],
        },
        vec![ids],
    );
    let flat_dy = op(
        &mut g,
        Op::Reshape {
            new_shape: vec![15, 12],
        },
        vec![dy],
    );
    let dt = op(
        &mut g,
        Op::ScatterAdd { axis: 0 },
        vec![zeros, flat_ids, flat_dy],
    );
    g.set_outputs(vec![e, dt]);
    g
}

fn fp8_matmul_bias() -> Graph {
    let (m, k, n) = (5, 32, 7);
    let mut g = Graph::new("fp8");
    let x = g.input("x", Shape::new(&[m, k], DType::F32));
    let w = g.input("w", Shape::new(&[n, k], DType::F32));
    let b = g.input("b", Shape::new(&[n], DType::F32));
    let pt = ScaleLayout::PerTensor;
    let quant = |g: &mut Graph, v: NodeId, f: ScaledFormat| {
        let s = op(
            g,
            Op::ScaledQuantScale {
                format: f,
                scale_layout: pt,
            },
            vec![v],
        );
        let q = op(
            g,
            Op::ScaledQuantize {
                format: f,
                scale_layout: pt,
            },
            vec![v, s],
        );
        (q, s)
    };
    let (qx, sx) = quant(&mut g, x, ScaledFormat::F8E4M3);
    let (qw, sw) = quant(&mut g, w, ScaledFormat::F8E5M2);
    let y = op(
        &mut g,
        Op::ScaledMatMul {
            lhs_format: ScaledFormat::F8E4M3,
            rhs_format: ScaledFormat::F8E5M2,
            scale_layout: pt,
            has_bias: true,
        },
        vec![qx, qw, sx, sw, b],
    );
    g.set_outputs(vec![y]);
    g
}

/// One AdamW step of a parameter: moments, bias correction, decoupled weight decay.
fn adamw() -> Graph {
    let mut g = Graph::new("adamw");
    let sh = Shape::new(&[4, 33], DType::F32);
    let p = g.input("p", sh.clone());
    let gr = g.input("g", sh.clone());
    let m = g.input("m", sh.clone());
    let v = g.input("v", sh);
    let (b1, b2, lr, wd, eps) = (0.9, 0.999, 1e-3, 0.01, 1e-8);
    let c = |g: &mut Graph, x: f32| scalar(g, x);
    let (cb1, c1b1) = (c(&mut g, b1), c(&mut g, 1.0 - b1));
    let m1 = bin(&mut g, BinaryOp::Mul, m, cb1);
    let m2 = bin(&mut g, BinaryOp::Mul, gr, c1b1);
    let m = bin(&mut g, BinaryOp::Add, m1, m2);
    let (cb2, c1b2) = (c(&mut g, b2), c(&mut g, 1.0 - b2));
    let v1 = bin(&mut g, BinaryOp::Mul, v, cb2);
    let gg = bin(&mut g, BinaryOp::Mul, gr, gr);
    let v2 = bin(&mut g, BinaryOp::Mul, gg, c1b2);
    let v = bin(&mut g, BinaryOp::Add, v1, v2);
    let sq = op(&mut g, Op::Activation(Activation::Sqrt), vec![v]);
    let ce = c(&mut g, eps);
    let den = bin(&mut g, BinaryOp::Add, sq, ce);
    let upd = bin(&mut g, BinaryOp::Div, m, den);
    let cwd = c(&mut g, wd);
    let dec = bin(&mut g, BinaryOp::Mul, p, cwd);
    let upd = bin(&mut g, BinaryOp::Add, upd, dec);
    let clr = c(&mut g, lr);
    let step = bin(&mut g, BinaryOp::Mul, upd, clr);
    let p = bin(&mut g, BinaryOp::Sub, p, step);
    g.set_outputs(vec![p, m, v]);
    g
}

/// Casts between every pair of the workloads' dtypes.
fn casts() -> Graph {
    let dts = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I64,
        DType::I32,
        DType::I8,
        DType::U8,
        DType::Bool,
    ];
    let mut g = Graph::new("casts");
    let mut outs = Vec::new();
    for &from in &dts {
        let x = g.input(format!("x_{from:?}"), Shape::new(&[3, 5], from));
        for &to in &dts {
            if to != from {
                outs.push(op(&mut g, Op::Cast { to }, vec![x]));
            }
        }
    }
    g.set_outputs(outs);
    g
}
