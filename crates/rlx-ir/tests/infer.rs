//! Shape inference: for every `Op` variant a good case with its exact result type
//! and a bad case whose error names the op and prints the offending shape.
//!
//! `every_variant_*` below hold one case per variant and prove the coverage with an
//! exhaustive match; the per-family files in `tests/infer/` go deeper (dynamic dims,
//! rank-0 operands, size-1 broadcast, negative axes), and `props` holds proptests.

#[path = "infer/conv.rs"]
mod conv;
#[path = "infer/elementwise.rs"]
mod elementwise;
#[path = "infer/linalg.rs"]
mod linalg;
#[path = "infer/movement.rs"]
mod movement;
#[path = "infer/nn.rs"]
mod nn;
#[path = "infer/props.rs"]
mod props;
#[path = "infer/reduce.rs"]
mod reduce;
#[path = "infer/scaled.rs"]
mod scaled;
#[path = "infer/scan.rs"]
mod scan;
#[path = "infer/table.rs"]
mod table;

use rlx_ir::{DType, Dim, IrError, Op, Shape, infer_shape};

/// A static f32 shape.
pub fn f32s(dims: &[usize]) -> Shape {
    Shape::new(dims, DType::F32)
}

/// A static shape of dtype `dt`.
pub fn sh(dims: &[usize], dt: DType) -> Shape {
    Shape::new(dims, dt)
}

/// A shape with dynamic dims; `dims` uses [`d`] and [`s`].
pub fn dy(dims: &[Dim], dt: DType) -> Shape {
    Shape::from_dims(dims, dt)
}

/// Dynamic symbol `n`.
pub fn d(n: u32) -> Dim {
    Dim::Dynamic(n)
}

/// Static size `n`.
pub fn s(n: usize) -> Dim {
    Dim::Static(n)
}

/// Infer, expecting success.
#[track_caller]
pub fn ok(op: &Op, inputs: &[&Shape]) -> Shape {
    match infer_shape(op, inputs) {
        Ok(s) => s,
        Err(e) => panic!("{} should accept {inputs:?}, got: {e}", op.name()),
    }
}

/// Infer, expecting an error that names the op (in `IrError::op` and as the
/// `Display` prefix) and whose message contains every needle.
#[track_caller]
pub fn bad(op: &Op, inputs: &[&Shape], needles: &[&str]) -> IrError {
    let e = match infer_shape(op, inputs) {
        Ok(s) => panic!("{} should reject {inputs:?}, but gave {s}", op.name()),
        Err(e) => e,
    };
    assert_eq!(e.op, op.name(), "error should name the op: {e}");
    assert!(
        e.to_string().starts_with(&format!("{}: ", op.name())),
        "display should start with the op name: {e}"
    );
    for n in needles {
        assert!(
            e.message.contains(n),
            "error for {} should mention `{n}`: {e}",
            op.name()
        );
    }
    e
}
