//! The `rlx!` graph DSL and `rlx_expr!` (feature `dsl`).
//!
//! Both are thin `macro_rules!` wrappers around the proc macros of rlx-macros: they
//! import the names user code inside the DSL refers to (`DType`, `MaskKind`,
//! `Activation`, …) and hand the proc macro this crate's path, so the expansion is
//! ordinary `GraphScope`/`Tensor` builder code.

use crate::{GraphScope, NodeId, Tensor};

pub use rlx_macros::{__rlx_build, __rlx_expr};

/// Runtime helpers the expansions call. Not a public API.
#[doc(hidden)]
pub mod __rlx_support {
    use super::*;

    /// The id of `t` in `scope`'s graph, copying its history in when it lives in
    /// another graph (a `bind`-adopted tensor on the left of an op, for example), so
    /// outputs are always valid ids of the finished graph.
    pub fn own(scope: &GraphScope, t: &Tensor) -> NodeId {
        scope.own(t)
    }

    /// A scalar on the left of `%`, `**`, `pow`, `rem`, … as a rank-0 constant in
    /// `like`'s graph, with the usual scalar dtype rule (the tensor's dtype when it is
    /// an integer type, else f32).
    pub fn scalar_like(value: f64, like: &Tensor) -> Tensor {
        crate::tensor::BinaryRhs::Float(value).into_tensor(like)
    }
}

/// Declare a computation [`Graph`](crate::Graph) in a compact little language.
///
/// ```
/// use rlx_tensor::rlx;
/// let g = rlx! {
///     graph "mlp";
///     input x: [2, 4];
///     param w1: [4, 8];
///     param b1: [8];
///     param w2: [8, 3];
///     let h = relu(x @ w1 + b1);
///     let y = h @ w2;
/// };
/// assert_eq!(g.name, "mlp");
/// assert_eq!(g.outputs.len(), 1);
/// ```
///
/// Statements (processed in order; see the crate docs of rlx-macros for details):
/// - `graph "name";` — optional, first.
/// - `input x: [dims];`, `param w: [dims];` — dims as in [`shape!`](crate::shape)
///   (`?`, `?N`, `usize` expressions, an optional `DTYPE;` prefix). Families:
///   `param w[3]: [4, 4];` declares `w_0 … w_2`; `param w[2] @ "layers.{i}.weight": […];`
///   sets the IR names.
/// - `const c = 0.5: F32;`, `const t = [[1, 2], [3, 4]]: F32;` — constants.
/// - `bind a, layers[];` — use outer Rust tensors / collections.
/// - `let y = expr;`, `let (a, b) = split(x, 1, 2);`
/// - `fn block(x, w) { let h = …; }` — inlined at each call (`block(h, w1)` or
///   `block(w: w1, x: h)`).
/// - `repeat 3 { … }`, `repeat i in 0..3 { … }` (unrolled; `w[i]`), `repeat n { … }`
///   (a runtime loop; rebinding an outer tensor carries it through the loop).
/// - `scan h = x for 8 { let h = …; }` — one `Op::Scan`.
/// - `tap a;` (extra outputs), `out a, b;` (outputs; default: the last `let`).
///
/// Expressions: `@` (matmul), `+ - * / %`, `**` (right-assoc), comparisons, unary `-`,
/// literals (scalars), `f(x)` call sugar (`relu(x)` → `x.relu()`, `linear(x, w, b)`,
/// `gelu(linear(…))` fused, `matmul`, `clamp`, `where_`, `embed`, `rope`, `split`,
/// `mean`, `sum`, …) and `.method(raw Rust args)` where a bare binding is borrowed and
/// `~expr` / `(expr)` passes a Rust value. Mistakes are compile errors at the token at
/// fault.
#[macro_export]
macro_rules! rlx {
    ($($body:tt)*) => {{
        #[allow(unused_imports)]
        use $crate::{Activation, DType, GraphScope, MaskKind, shape};
        $crate::__rlx_build! { ($crate) $($body)* }
    }};
}

/// Evaluate one `rlx!`-grammar expression over in-scope Rust [`Tensor`] variables.
///
/// Every identifier is a Rust variable (cloned in expression position, borrowed as a
/// bare method argument); builtin call sugar works as in [`rlx!`]. This is the bridge
/// for runtime-length loops written in Rust:
///
/// ```
/// use rlx_tensor::{rlx_expr, graph, shape};
/// let g = graph("deep", |g| {
///     let mut h = g.input("x", shape![2, 4]);
///     for i in 0..3 {
///         let w = g.param(format!("w{i}"), shape![4, 4]);
///         let b = g.param(format!("b{i}"), shape![4]);
///         h = rlx_expr!(gelu(linear(h, w, b)));
///     }
///     h
/// });
/// assert_eq!(g.outputs.len(), 1);
/// ```
#[macro_export]
macro_rules! rlx_expr {
    ($($body:tt)*) => {{
        #[allow(unused_imports)]
        use $crate::{Activation, DType, MaskKind};
        $crate::__rlx_expr! { ($crate) $($body)* }
    }};
}
