//! Contractions, attention, convolution and pooling, and the opaque movement ops (concat,
//! pad, cumsum): every one lowered to the loop IR and run on the GPU, against the oracle.

use super::{B, support};
use rlx_ir::{Activation, BinaryOp, DType, MaskKind, Op};

#[test]
fn matmuls_batched_broadcast_transposed_and_with_bias_activation_epilogues() {
    if !support::gpu_or_skip("matmul") {
        return;
    }
    // Tile edges (M, N, K not multiples of 16 or 64), M = 1, N = 1, K = 1, 64×64 tiles
    // with 4×4 register blocks, batches that broadcast, and an operand read transposed.
    let shapes = [
        (vec![5, 7], vec![7, 3]),
        (vec![33, 40], vec![40, 17]),
        (vec![2, 3, 19, 21], vec![21, 18]),
        (vec![2, 1, 9, 4], vec![3, 4, 5]),
        (vec![1, 70], vec![70, 130]),
        (vec![130, 5], vec![5, 1]),
        (vec![67, 1], vec![1, 65]),
        (vec![70, 33], vec![33, 66]),
        (vec![2, 65, 20], vec![2, 20, 64]),
    ];
    for dt in [DType::F32, DType::F16, DType::BF16, DType::I32] {
        for (i, (a, w)) in shapes.iter().enumerate() {
            let mut b = B::new("matmul");
            // Every third product reads its left operand through a transpose.
            let x = if i % 3 == 2 {
                let r = a.len();
                let mut stored = a.clone();
                stored.swap(r - 2, r - 1);
                let mut perm: Vec<usize> = (0..r).collect();
                perm.swap(r - 2, r - 1);
                let xt = b.input(&stored, dt);
                b.op(Op::Transpose { perm }, vec![xt])
            } else {
                b.input(a, dt)
            };
            let y = b.input(w, dt);
            let m = b.op(Op::MatMul, vec![x, y]);
            b.all_on_gpu(vec![m]);
        }
    }
    for dt in [DType::F32, DType::F16] {
        let mut b = B::new("linear");
        let x = b.input(&[20, 12], dt);
        let wt = b.input(&[9, 12], dt);
        let w = b.op(Op::Transpose { perm: vec![1, 0] }, vec![wt]);
        let bias = b.input(&[9], dt);
        let f = b.op(
            Op::FusedMatMulBiasAct {
                activation: Some(Activation::Gelu),
            },
            vec![x, w, bias],
        );
        let res = b.input(&[20, 9], dt);
        let out = b.op(Op::Binary(BinaryOp::Add), vec![f, res]);
        b.all_on_gpu(vec![out]);
    }
}

#[test]
fn attention_with_every_mask_kind_runs_on_the_gpu() {
    if !support::gpu_or_skip("attention") {
        return;
    }
    for dt in [DType::F32, DType::F16] {
        for mask in [
            MaskKind::None,
            MaskKind::Causal,
            MaskKind::SlidingWindow(3),
            MaskKind::Custom,
            MaskKind::Bias,
        ] {
            let (bsz, s, h, d) = (2, 9, 4, 8);
            let mut b = B::new("attention");
            let q = b.input(&[bsz, s, h, d], dt);
            let k = b.input(&[bsz, s, 2, d], dt);
            let v = b.input(&[bsz, s, 2, d], dt);
            let mut ins = vec![q, k, v];
            match mask {
                MaskKind::Custom => ins.push(b.input(&[bsz, s], dt)),
                MaskKind::Bias => ins.push(b.input(&[h, s, s], dt)),
                _ => {}
            }
            let a = b.op(
                Op::Attention {
                    num_heads: h,
                    head_dim: d,
                    v_head_dim: None,
                    mask_kind: mask,
                    score_scale: None,
                    attn_logit_softcap: Some(4.0),
                },
                ins,
            );
            b.all_on_gpu(vec![a]);
        }
    }
}

#[test]
fn concat_pad_and_cumsum_run_on_the_gpu() {
    if !support::gpu_or_skip("concat/pad/cumsum") {
        return;
    }
    for dt in [DType::F32, DType::F16, DType::I32, DType::I8] {
        let mut b = B::new("movement");
        let x = b.input(&[3, 4], dt);
        let yt = b.input(&[5, 3], dt);
        let y = b.op(Op::Transpose { perm: vec![1, 0] }, vec![yt]);
        let c = b.op(Op::Concat { axis: 1 }, vec![x, y]);
        let p = b.op(
            Op::Pad {
                axis: 0,
                before: 1,
                after: 2,
                value: -1.5,
            },
            vec![x],
        );
        let cs = b.op(
            Op::Cumsum {
                axis: 1,
                exclusive: true,
            },
            vec![c],
        );
        b.all_on_gpu(vec![p, cs]);
    }
}

#[test]
fn convolution_and_pooling_run_on_the_gpu() {
    if !support::gpu_or_skip("conv/pool") {
        return;
    }
    for dt in [DType::F32, DType::F16] {
        let mut b = B::new("conv");
        let x = b.input(&[2, 4, 9, 7], dt);
        let w = b.input(&[6, 2, 3, 2], dt);
        let bias = b.input(&[6], dt);
        let conv = Op::Conv {
            kernel_size: vec![3, 2],
            stride: vec![2, 1],
            padding: vec![1, 1],
            dilation: vec![1, 2],
            groups: 2,
        };
        let y = b.op(conv, vec![x, w, bias]);
        let pool = |kind| Op::Pool {
            kind,
            kernel_size: vec![2, 3],
            stride: vec![2, 2],
            padding: vec![1, 1],
        };
        let mx = b.op(pool(rlx_ir::ReduceOp::Max), vec![y]);
        let mean = b.op(pool(rlx_ir::ReduceOp::Mean), vec![x]);
        b.all_on_gpu(vec![mx, mean]);
    }
}
