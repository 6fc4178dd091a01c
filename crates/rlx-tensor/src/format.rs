//! How a tensor prints.
//!
//! - `{:?}` is a one-line summary that computes nothing:
//!   `Tensor[dims [64, 64]; f32; lazy, 101 ops]` (the nodes feeding this tensor), or
//!   `…; realized]` once its value has been computed.
//! - `{}` (feature `eval`) computes the tensor and prints [`Tensor::show`]: a header with
//!   the dims and dtype, then the values in nested brackets. Tensors of more than 1000
//!   elements are summarized NumPy-style: every axis longer than 6 shows its first and
//!   last 3 entries around `...`, one row per line. `{:.3}` sets the digits after the
//!   point of floating values, a width (`{:8}`, `{:<8}`) pads every element, and `{:#}`
//!   puts each row on its own line for small tensors too.

use std::fmt;

use crate::Tensor;
#[cfg(feature = "eval")]
use rlx_ir::{DType, TensorData};

/// A one-line summary: the name, the inputs and params with their shapes, which params
/// are bound, and the graph's size — never the graph's nodes or any data.
///
/// ```
/// use rlx_tensor::{Func, shape};
/// let f = Func::new("affine", |s| {
///     let x = s.input("x", shape![?, 2]);
///     let w = s.param("w", shape![2, 1]);
///     x.matmul(&w)
/// })
/// .with_param("w", vec![1.0, -1.0]);
/// assert_eq!(
///     format!("{f:?}"),
///     "Func(\"affine\"; inputs [x: [?0, 2] f32]; params [w: [2, 1] f32 (bound)]; 3 nodes, 1 output)"
/// );
/// ```
impl fmt::Debug for crate::Func {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.graph();
        let entry = |name: &str, id: Option<rlx_ir::NodeId>, bound: bool| {
            let shape = id.map(|id| g.shape(id).to_string()).unwrap_or_default();
            format!("{name}: {shape}{}", if bound { " (bound)" } else { "" })
        };
        let inputs: Vec<String> = g
            .input_names()
            .iter()
            .map(|n| entry(n, g.input_id(n), false))
            .collect();
        let params: Vec<String> = g
            .param_names()
            .iter()
            .map(|n| entry(n, g.param_id(n), self.param_binding(n).is_some()))
            .collect();
        let outs = g.outputs.len();
        write!(
            f,
            "Func({:?}; inputs [{}]; params [{}]; {} node{}, {outs} output{})",
            g.name,
            inputs.join(", "),
            params.join(", "),
            g.len(),
            if g.len() == 1 { "" } else { "s" },
            if outs == 1 { "" } else { "s" },
        )
    }
}

/// A one-line summary: the graph's name and size.
impl fmt::Debug for crate::GraphScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, n) = {
            let st = self.cell.state();
            (st.graph.name.clone(), st.graph.len())
        };
        write!(
            f,
            "GraphScope({name:?}; {n} node{})",
            if n == 1 { "" } else { "s" }
        )
    }
}

impl fmt::Debug for Tensor {
    /// ```
    /// use rlx_tensor::Tensor;
    /// let x = Tensor::ones([2, 3]);
    /// let y = (&x + &x).relu();
    /// assert_eq!(format!("{y:?}"), "Tensor[dims [2, 3]; f32; lazy, 3 ops]");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (shape, state) = {
            let st = self.cell.state();
            let shape = st.graph.shape(self.id).clone();
            let state = if st.realized.contains_key(&self.id) {
                "realized".to_string()
            } else {
                let n = cone_size(&st.graph, self.id);
                format!("lazy, {n} op{}", if n == 1 { "" } else { "s" })
            };
            (shape, state)
        };
        let dims: Vec<String> = shape.dims().iter().map(|d| d.to_string()).collect();
        write!(
            f,
            "Tensor[dims [{}]; {}; {state}]",
            dims.join(", "),
            shape.dtype()
        )
    }
}

/// How many nodes `root` depends on, itself included. Node ids are topological (operands
/// come before users), so one backward sweep over `0..=root` marks the whole cone: linear
/// in the graph's size, no evaluation, no allocation beyond one flag per node.
fn cone_size(graph: &rlx_ir::Graph, root: rlx_ir::NodeId) -> usize {
    let root = root.0 as usize;
    let mut needed = vec![false; root + 1];
    needed[root] = true;
    let mut count = 0;
    for (i, node) in graph.nodes()[..=root].iter().enumerate().rev() {
        if !needed[i] {
            continue;
        }
        count += 1;
        for input in &node.inputs {
            needed[input.0 as usize] = true;
        }
    }
    count
}

/// NumPy's print options: summarize beyond this many elements…
#[cfg(feature = "eval")]
const SUMMARY_THRESHOLD: usize = 1000;
/// …showing this many entries at each end of a long axis.
#[cfg(feature = "eval")]
const EDGE_ITEMS: usize = 3;

/// What the caller's format spec asks for.
#[cfg(feature = "eval")]
#[derive(Default, Clone, Copy)]
struct Style {
    precision: Option<usize>,
    width: Option<usize>,
    align: Option<fmt::Alignment>,
    multiline: bool,
}

/// The decoded values of one tensor, formatted one element at a time (so a summarized
/// print of a large tensor formats only the elements it shows).
#[cfg(feature = "eval")]
enum Values {
    Bool(Vec<bool>),
    Int(Vec<i64>),
    /// F32 and narrower floats, printed at f32's shortest round-trip precision.
    F32(Vec<f64>),
    F64(Vec<f64>),
    /// Interleaved (re, im) pairs.
    Complex {
        parts: Vec<f64>,
        wide: bool,
    },
}

#[cfg(feature = "eval")]
impl Values {
    fn new(data: &TensorData) -> Values {
        match data.dtype {
            DType::Bool => Values::Bool(data.to_bool_vec()),
            d if d.is_int() => Values::Int(data.to_i64_vec()),
            DType::F64 => Values::F64(data.to_f64_vec()),
            d if d.is_complex() => Values::Complex {
                parts: data.to_f64_vec(),
                wide: d == DType::C128,
            },
            _ => Values::F32(data.to_f64_vec()),
        }
    }

    fn element(&self, i: usize, style: Style) -> String {
        let s = match self {
            Values::Bool(v) => v[i].to_string(),
            Values::Int(v) => v[i].to_string(),
            Values::F32(v) => float(v[i] as f32, style.precision),
            Values::F64(v) => float(v[i], style.precision),
            Values::Complex { parts, wide } => {
                let (re, im) = (parts[2 * i], parts[2 * i + 1]);
                let part = |x: f64| {
                    if *wide {
                        float(x, style.precision)
                    } else {
                        float(x as f32, style.precision)
                    }
                };
                let sign = if im.is_sign_negative() { '-' } else { '+' };
                format!("{}{sign}{}j", part(re), part(im.abs()))
            }
        };
        match (style.width, style.align) {
            (None, _) => s,
            (Some(w), Some(fmt::Alignment::Left)) => format!("{s:<w$}"),
            (Some(w), Some(fmt::Alignment::Center)) => format!("{s:^w$}"),
            (Some(w), _) => format!("{s:>w$}"),
        }
    }
}

#[cfg(feature = "eval")]
fn float<T: fmt::Display>(v: T, precision: Option<usize>) -> String {
    match precision {
        Some(p) => format!("{v:.p$}"),
        None => v.to_string(),
    }
}

/// The full text of `data`: header line, then the nested values.
#[cfg(feature = "eval")]
fn render(data: &TensorData, mut style: Style) -> String {
    let mut out = format!("Tensor{:?} {:?}\n", data.dims, data.dtype);
    let values = Values::new(data);
    let numel: usize = data.dims.iter().product();
    let summarize = numel > SUMMARY_THRESHOLD;
    style.multiline |= summarize;
    let mut strides = vec![1usize; data.dims.len()];
    for a in (0..data.dims.len().saturating_sub(1)).rev() {
        strides[a] = strides[a + 1] * data.dims[a + 1];
    }
    let layout = Layout {
        values: &values,
        dims: &data.dims,
        strides: &strides,
        summarize,
        style,
    };
    layout.axis(&mut out, 0, 0);
    out
}

#[cfg(feature = "eval")]
struct Layout<'a> {
    values: &'a Values,
    dims: &'a [usize],
    strides: &'a [usize],
    summarize: bool,
    style: Style,
}

#[cfg(feature = "eval")]
impl Layout<'_> {
    /// Write axis `axis` of the block starting at flat index `base`.
    fn axis(&self, out: &mut String, axis: usize, base: usize) {
        if axis == self.dims.len() {
            out.push_str(&self.values.element(base, self.style));
            return;
        }
        let n = self.dims[axis];
        let elide = self.summarize && n > 2 * EDGE_ITEMS;
        let last = axis + 1 == self.dims.len();
        // Between rows of a multi-line print: a newline, one blank line per axis level
        // above the rows (as NumPy separates the 2-D blocks of a 3-D array), and an
        // indent that lines the rows up under the opening brackets.
        let sep = if last || !self.style.multiline {
            ", ".to_string()
        } else {
            let blank = "\n".repeat(self.dims.len() - axis - 2);
            format!(",\n{blank}{}", " ".repeat(axis + 1))
        };
        out.push('[');
        let mut first = true;
        let mut i = 0;
        while i < n {
            if !first {
                out.push_str(&sep);
            }
            first = false;
            if elide && i == EDGE_ITEMS {
                out.push_str("...");
                i = n - EDGE_ITEMS;
                continue;
            }
            self.axis(out, axis + 1, base + i * self.strides[axis]);
            i += 1;
        }
        out.push(']');
    }
}

#[cfg(feature = "eval")]
impl Tensor {
    /// Compute the tensor and render it: `Tensor` + dims + dtype (`Tensor[2, 2] F32`), a
    /// newline, then the values in nested brackets (`[[1, 2], [3, 4]]`). Floats print at
    /// their shortest round-trip form, integers and bools as themselves, complex numbers
    /// as `re±imj`. More than 1000 elements are summarized NumPy-style (first and last 3
    /// entries of every axis longer than 6, one row per line). `format!("{t}")` is the
    /// same text; `{:.N}`, a width and `{:#}` adjust it (see the module docs).
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let t = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.5], [2, 2]);
    /// assert_eq!(t.show(), "Tensor[2, 2] F32\n[[1, 2], [3, 4.5]]");
    /// assert_eq!(format!("{t}"), t.show());
    /// assert_eq!(format!("{t:.2}"), "Tensor[2, 2] F32\n[[1.00, 2.00], [3.00, 4.50]]");
    /// assert_eq!(format!("{t:#}"), "Tensor[2, 2] F32\n[[1, 2],\n [3, 4.5]]");
    /// ```
    #[track_caller]
    pub fn show(&self) -> String {
        render(&self.to_data(), Style::default())
    }
}

#[cfg(feature = "eval")]
impl fmt::Display for Tensor {
    /// ```
    /// use rlx_tensor::Tensor;
    /// let t = Tensor::arange(2000).reshape([40, 50]);
    /// let text = format!("{t:.1}");
    /// assert!(text.starts_with("Tensor[40, 50] F32\n[[0.0, 1.0, 2.0, ..., 47.0, 48.0, 49.0],\n [50.0"));
    /// assert_eq!(text.lines().count(), 8); // header, 3 rows, "...", 3 rows
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.try_to_data() {
            Ok(data) => {
                let style = Style {
                    precision: f.precision(),
                    width: f.width(),
                    align: f.align(),
                    multiline: f.alternate(),
                };
                f.write_str(&render(&data, style))
            }
            Err(e) => write!(f, "Tensor{} (not computable: {e})", self.shape()),
        }
    }
}
