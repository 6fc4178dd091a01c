//! How a tensor prints: `{:?}` is a one-line summary that computes nothing; `{}` (feature
//! `eval`) computes the tensor and prints its values.

use std::fmt;

use crate::Tensor;
#[cfg(feature = "eval")]
use rlx_ir::DType;

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shape = self.shape();
        write!(
            f,
            "Tensor[dims {:?}; {}; node {}]",
            shape.dims(),
            shape.dtype(),
            self.id
        )
    }
}

#[cfg(feature = "eval")]
impl Tensor {
    /// A printable rendering: `Tensor[2, 2] F32` then nested brackets of values.
    #[track_caller]
    pub fn show(&self) -> String {
        let data = self.to_data();
        let mut out = format!("Tensor{:?} {:?}\n", data.dims, data.dtype);
        let vals: Vec<String> = match data.dtype {
            DType::Bool => data.to_bool_vec().iter().map(|b| b.to_string()).collect(),
            d if d.is_int() => data.to_i64_vec().iter().map(|v| v.to_string()).collect(),
            DType::F64 | DType::C128 => data.to_f64_vec().iter().map(|v| v.to_string()).collect(),
            _ => data
                .to_f64_vec()
                .iter()
                .map(|&v| (v as f32).to_string())
                .collect(),
        };
        let dims = if data.dtype.is_complex() {
            let mut d = data.dims.clone();
            d.push(2);
            d
        } else {
            data.dims.clone()
        };
        nest(&mut out, &vals, &dims);
        out
    }
}

#[cfg(feature = "eval")]
fn nest(out: &mut String, vals: &[String], dims: &[usize]) {
    if dims.is_empty() {
        out.push_str(vals.first().map(String::as_str).unwrap_or(""));
        return;
    }
    let inner: usize = dims[1..].iter().product();
    out.push('[');
    for i in 0..dims[0] {
        if i > 0 {
            out.push_str(", ");
        }
        nest(out, &vals[i * inner..(i + 1) * inner], &dims[1..]);
    }
    out.push(']');
}

#[cfg(feature = "eval")]
impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.try_to_data() {
            Ok(_) => f.write_str(&self.show()),
            Err(e) => write!(f, "Tensor{} (not computable: {e})", self.shape()),
        }
    }
}
