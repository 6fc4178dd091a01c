//! Static shapes known at expansion time (inputs/params declared with integer-literal
//! dims, and what elementwise ops, matmul and linear make of them). Only used for the
//! compile-time shape diagnostics; unknown stays unknown, so there are no false alarms.

use proc_macro2::Span;
use syn::Error;

pub type Dims = Vec<u64>;

/// Methods / call sugar that keep their operand's shape.
pub const ELEMENTWISE: &[&str] = &[
    "relu",
    "gelu",
    "gelu_approx",
    "silu",
    "tanh",
    "exp",
    "sqrt",
    "sigmoid",
    "log",
    "rsqrt",
    "abs",
    "sin",
    "cos",
    "tan",
    "atan",
    "round",
    "recip",
    "floor",
    "ceil",
    "sign",
    "softplus",
    "elu",
    "erf",
    "hard_swish",
    "hard_sigmoid",
    "mish",
    "softsign",
    "log_sigmoid",
    "stop_gradient",
];

/// Activations that fold into `linear_act` when they wrap a `linear` call.
pub fn fused_activation(name: &str) -> Option<&'static str> {
    Some(match name {
        "relu" => "Relu",
        "gelu" => "Gelu",
        "gelu_approx" => "GeluApprox",
        "silu" => "Silu",
        "tanh" => "Tanh",
        "sigmoid" => "Sigmoid",
        _ => return None,
    })
}

/// NumPy broadcasting of two known shapes; `None` when they do not broadcast (the
/// builder reports that at run time with the real shapes).
pub fn broadcast(a: &Dims, b: &Dims) -> Option<Dims> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i < n - a.len() {
            1
        } else {
            a[i - (n - a.len())]
        };
        let db = if i < n - b.len() {
            1
        } else {
            b[i - (n - b.len())]
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

/// The `[M, N]` result of a 2-D × 2-D matmul, or the inner-dimension diagnostic.
pub fn matmul(a: &Option<Dims>, b: &Option<Dims>, span: Span) -> Result<Option<Dims>, Error> {
    let (Some(a), Some(b)) = (a, b) else {
        return Ok(None);
    };
    if a.len() != 2 || b.len() != 2 {
        return Ok(None);
    }
    if a[1] != b[0] {
        return Err(Error::new(
            span,
            format!(
                "matmul shape mismatch: inner dimensions differ ({} ≠ {}) — left is `[…, {}]`, right is `[{}, …]`",
                a[1], b[0], a[1], b[0]
            ),
        ));
    }
    Ok(Some(vec![a[0], b[1]]))
}

/// `linear(x, w, b)` with `w: [out, in]`: the result shape, or the in-dim diagnostic.
pub fn linear(x: &Option<Dims>, w: &Option<Dims>, span: Span) -> Result<Option<Dims>, Error> {
    let (Some(x), Some(w)) = (x, w) else {
        return Ok(None);
    };
    let (Some(&last), 2) = (x.last(), w.len()) else {
        return Ok(None);
    };
    if last != w[1] {
        return Err(Error::new(
            span,
            format!(
                "linear shape mismatch: input's last dim {} ≠ the weight's in-dim {} (a `linear` weight is `[out, in]`)",
                last, w[1]
            ),
        ));
    }
    let mut out = x.clone();
    if let Some(l) = out.last_mut() {
        *l = w[0];
    }
    Ok(Some(out))
}
