//! # rlx-ir — the vocabulary of rlx
//!
//! Element types ([`DType`]), dimensions ([`Dim`], static or dynamic), shapes
//! ([`Shape`]), operations ([`Op`]), graphs ([`Graph`]) with shape inference
//! ([`infer_shape`], [`Graph::add_op`]) and a verifier ([`Graph::verify`]), and
//! [`interp`], the oracle interpreter that defines what every op means.
//!
//! ```
//! use rlx_ir::{interp, Activation, BinaryOp, DType, Graph, Op, Shape, TensorData};
//! let mut g = Graph::new("demo");
//! let x = g.input("x", Shape::new(&[3], DType::F32));
//! let y = g.add_op(Op::Activation(Activation::Relu), vec![x]).unwrap();
//! let z = g.add_op(Op::Binary(BinaryOp::Mul), vec![y, y]).unwrap();
//! g.set_outputs(vec![z]);
//! let out = interp::run(&g, &[("x", TensorData::from_f32(&[3], &[-1.0, 2.0, 3.0]))]).unwrap();
//! assert_eq!(out[0].to_f32_vec(), vec![0.0, 4.0, 9.0]);
//! ```

mod data;
mod display;
mod dtype;
mod error;
mod float_format;
mod graph;
mod guard;
mod hash;
mod infer;
pub mod interp;
mod narrow;
pub mod op;
mod scaled;
mod shape;
mod verify;
mod window;

pub use data::{TensorData, TensorView, human_bytes, try_alloc_zeroed};
pub use dtype::DType;
pub use error::{IrError, IrErrorKind, IrResult};
pub use float_format::FloatFormat;
pub use graph::{Graph, Node, NodeId, NodeOrigin};
pub use guard::DimGuards;
pub use hash::{FastBuildHasher, FastHashMap, FastHasher};
pub use infer::{infer_shape, norm_axis};
pub use narrow::{bf16_from_f64, f16_from_f64};
pub use op::{
    Activation, AttentionAttrs, BinaryOp, CmpOp, ConvAttrs, FftAlgo, FftNorm, MaskKind, Op,
    ReduceOp, RopeStyle, SynthKind,
};
pub use scaled::{ScaleLayout, ScaledFormat};
pub use shape::{Dim, DimBinding, MAX_TENSOR_BYTES, Shape, checked_bytes, checked_elements};
pub use window::box_indices;
