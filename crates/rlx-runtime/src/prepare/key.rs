//! The cache-key hash: a fast keyed-by-structure hasher and the structural hash of ops,
//! nodes and graphs. Runs on every evaluation (cache hits included), so it formats
//! nothing and allocates nothing.

use rlx_ir::{Graph, Op, Shape};
use std::hash::{Hash, Hasher};

/// The cache-key hasher (shared with the id maps of rlx-tensor).
pub(crate) use rlx_ir::FastHasher as KeyHasher;

/// Combine the hash of the keyed constant payloads with a structure key.
pub(crate) fn combine(keyed_payloads: u64, structure_key: u64) -> u64 {
    let mut h = KeyHasher::default();
    h.write_u64(keyed_payloads);
    h.write_u64(structure_key);
    h.finish()
}

/// Hash `bytes` (a constant payload or a name): the length, the 8-byte words, then the
/// tail as one word. Every payload and name of a key goes through here (not
/// `Hash for [u8]`/`str`, whose hasher `write` copies a short tail with a `memcpy` call:
/// eager reads hash a few short payloads and names per call).
pub(crate) fn hash_bytes(bytes: &[u8], h: &mut KeyHasher) {
    h.write_usize(bytes.len());
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        h.write_u64(u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        h.write_u64(tail_word(tail));
    }
}

/// A word holding every byte of a 1-7 byte `tail` (with its length, hashed before it,
/// the tail is recovered from the word, so distinct tails give distinct words), read in
/// at most two loads instead of byte by byte: from 4 bytes on, the first four and the
/// last four (overlapping); below, the first, middle and last byte.
fn tail_word(tail: &[u8]) -> u64 {
    let t = tail.len();
    let u32_at = |i: usize| u32::from_le_bytes(tail[i..i + 4].try_into().expect("4 bytes"));
    if t >= 4 {
        u32_at(0) as u64 | (u32_at(t - 4) as u64) << 32
    } else {
        tail[0] as u64 | (tail[t / 2] as u64) << 8 | (tail[t - 1] as u64) << 16
    }
}

/// Hash an `f32` attribute by its bits: `0.0` and `-0.0` (and NaN payloads) compile to
/// different programs, so they must be different keys.
fn f32_bits(x: f32, h: &mut KeyHasher) {
    h.write_u32(x.to_bits());
}

fn opt_f32_bits(x: Option<f32>, h: &mut KeyHasher) {
    match x {
        None => h.write_u8(0),
        Some(x) => {
            h.write_u8(1);
            f32_bits(x, h);
        }
    }
}

/// A tag per variant, then every attribute (the exhaustive match makes a new variant
/// or field a compile error here rather than a silently shared key). Constants hash
/// their payload; a `Scan` hashes its body graph.
pub(crate) fn hash_op(op: &Op, h: &mut KeyHasher) {
    std::mem::discriminant(op).hash(h);
    match op {
        Op::Input { name } | Op::Param { name } => hash_bytes(name.as_bytes(), h),
        Op::Constant { data } => hash_bytes(data, h),
        Op::Activation(a) => a.hash(h),
        Op::Cast { to } => to.hash(h),
        Op::Binary(b) => b.hash(h),
        Op::Compare(c) => c.hash(h),
        Op::StopGradient
        | Op::Where
        | Op::MatMul
        | Op::DenseSolve
        | Op::SoftmaxCrossEntropy
        | Op::SoftmaxCrossEntropyWithLogits
        | Op::BroadcastLike => {}
        Op::LayerNorm { axis, eps } | Op::RmsNorm { axis, eps } => {
            axis.hash(h);
            f32_bits(*eps, h);
        }
        Op::Attention { .. } | Op::AttentionVjp { .. } => {
            let a = op
                .attention_attrs()
                .expect("an attention op has attention attributes");
            (a.num_heads, a.head_dim, a.v_head_dim, a.mask_kind).hash(h);
            opt_f32_bits(a.score_scale, h);
            opt_f32_bits(a.attn_logit_softcap, h);
        }
        Op::Rope {
            head_dim,
            n_rot,
            style,
        } => (head_dim, n_rot, style).hash(h),
        Op::Reshape { new_shape } => new_shape.hash(h),
        Op::Transpose { perm } => perm.hash(h),
        Op::Narrow { axis, start, len } => (axis, start, len).hash(h),
        Op::Concat { axis } | Op::Gather { axis } | Op::ScatterAdd { axis } => axis.hash(h),
        Op::Expand { target_shape } => target_shape.hash(h),
        Op::Reduce { op, axes, keep_dim } => (op, axes, keep_dim).hash(h),
        Op::SynthMatMul { kind } => kind.hash(h),
        Op::SplineActivation {
            num_basis,
            grid_min,
            grid_max,
        } => {
            num_basis.hash(h);
            f32_bits(*grid_min, h);
            f32_bits(*grid_max, h);
        }
        Op::ScaledMatMul {
            lhs_format,
            rhs_format,
            scale_layout,
            has_bias,
        } => (lhs_format, rhs_format, scale_layout, has_bias).hash(h),
        Op::ScaledQuantize {
            format,
            scale_layout,
        }
        | Op::ScaledQuantScale {
            format,
            scale_layout,
        } => (format, scale_layout).hash(h),
        Op::Cumsum { axis, exclusive } => (axis, exclusive).hash(h),
        Op::ArgMax { axis, keep_dim } | Op::ArgMin { axis, keep_dim } => (axis, keep_dim).hash(h),
        Op::Softmax { axis } | Op::LogSoftmax { axis } => axis.hash(h),
        Op::Conv { .. } | Op::ConvGradInput { .. } | Op::ConvGradWeight { .. } => {
            op.conv_attrs().hash(h)
        }
        Op::Pool {
            kind,
            kernel_size,
            stride,
            padding,
        }
        | Op::PoolGrad {
            kind,
            kernel_size,
            stride,
            padding,
        } => (kind, kernel_size, stride, padding).hash(h),
        Op::FusedMatMulBiasAct { activation } => activation.hash(h),
        Op::Scan {
            body,
            length,
            save_trajectory,
            num_bcast,
            num_xs,
            num_checkpoints,
        } => {
            hash_graph(body, h);
            (length, save_trajectory, num_bcast, num_xs, num_checkpoints).hash(h);
        }
        Op::Fft {
            inverse,
            norm,
            algo,
        } => (inverse, norm, algo).hash(h),
        Op::Pad {
            axis,
            before,
            after,
            value,
        } => {
            (axis, before, after).hash(h);
            h.write_u64(value.to_bits());
        }
        Op::RoundToFormat {
            exp_bits,
            man_bits,
            max_normal,
        } => {
            (exp_bits, man_bits).hash(h);
            f32_bits(*max_normal, h);
        }
    }
}

/// The hash of an `Op::Input { name }` without building the op (lifted arguments).
pub(crate) fn hash_input_op(name: &str, h: &mut KeyHasher) {
    const INPUT: Op = Op::Input {
        name: String::new(),
    };
    std::mem::discriminant(&INPUT).hash(h);
    hash_bytes(name.as_bytes(), h);
}

/// One node: its (dense) id, its op (hashed by `op`), its inputs and its shape. The one
/// definition used both for whole graphs and for the cone `prepare` walks, so the two
/// agree by construction.
pub(crate) fn hash_node(
    h: &mut KeyHasher,
    id: u32,
    op: impl FnOnce(&mut KeyHasher),
    inputs: impl ExactSizeIterator<Item = u32>,
    shape: &Shape,
) {
    h.write_u32(id);
    op(h);
    h.write_usize(inputs.len());
    for i in inputs {
        h.write_u32(i);
    }
    shape.hash(h);
}

/// Name, nodes and outputs of `graph`.
pub(crate) fn hash_graph(graph: &Graph, h: &mut KeyHasher) {
    hash_bytes(graph.name.as_bytes(), h);
    for n in graph.nodes() {
        hash_node(
            h,
            n.id.0,
            |h| hash_op(&n.op, h),
            n.inputs.iter().map(|i| i.0),
            &n.shape,
        );
    }
    hash_outputs(graph.outputs.iter().map(|o| o.0), h);
}

pub(crate) fn hash_outputs(outputs: impl ExactSizeIterator<Item = u32>, h: &mut KeyHasher) {
    h.write_usize(outputs.len());
    for o in outputs {
        h.write_u32(o);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte of a tail can be read back from its word (given the length, which is
    /// hashed before it): tails of one length that differ anywhere give different words,
    /// so payloads differing only in their last bytes get different keys.
    #[test]
    fn every_tail_byte_can_be_read_back_from_the_tail_word() {
        let mut x = 0x9e37_79b9u32;
        for t in 1..=7usize {
            for _ in 0..200 {
                let tail: Vec<u8> = (0..t)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 17;
                        x ^= x << 5;
                        x as u8
                    })
                    .collect();
                let w = tail_word(&tail).to_le_bytes();
                let back: Vec<u8> = if t >= 4 {
                    (0..t)
                        .map(|i| if i < 4 { w[i] } else { w[4 + i - (t - 4)] })
                        .collect()
                } else {
                    (0..t)
                        .map(|i| {
                            if i == 0 {
                                w[0]
                            } else if i == t - 1 {
                                w[2]
                            } else {
                                w[1]
                            }
                        })
                        .collect()
                };
                assert_eq!(back, tail, "{t}-byte tail");
            }
        }
        assert_ne!(
            tail_word(&[1, 2, 3, 4, 5, 6, 7]),
            tail_word(&[1, 2, 3, 4, 5, 6, 8])
        );
        assert_ne!(tail_word(&[0, 0]), tail_word(&[0, 1]));
    }
}
