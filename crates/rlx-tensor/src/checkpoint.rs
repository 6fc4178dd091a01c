//! Checkpoints: a `Func`'s bound params and an optimizer's state in one safetensors file.
//!
//! Layout: every bound param `p` is the f32 tensor `param.p` with its declared dims;
//! every optimizer buffer `b` (see `rlx_optim::OptimizerState`) is the 1-D f32 tensor
//! `optim.b`; the metadata holds `rlx.format = "checkpoint/1"`, the declared dtype of
//! every param as `rlx.dtype.p` (e.g. `bf16`; values are stored as f32 whatever it is)
//! and, when an optimizer was saved, `rlx.optim.step`. Any safetensors reader can open
//! the file.
//!
//! Loading checks the whole file against the `Func` before binding anything, and lists
//! every problem at once: params the file lacks (strict loading only), params the `Func`
//! does not declare, params saved with another shape or dtype, and optimizer buffers whose
//! size does not match their param. Malformed bytes (truncated files, lying header
//! lengths, offsets past the end or overlapping, sizes that overflow) are errors: the
//! safetensors parser validates the header against the file length before any tensor is
//! read, and no buffer is sized from the header.

use crate::func::Func;
use crate::{Error, Result};
use rlx_ir::{Dim, Shape};
use rlx_optim::{Optimizer, OptimizerState};
use safetensors::SafeTensors;
use safetensors::tensor::{Dtype, TensorView};
use std::collections::HashMap;
use std::path::Path;

const FORMAT: &str = "checkpoint/1";

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn bytes_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The metadata key holding param `name`'s declared dtype.
fn dtype_key(name: &str) -> String {
    format!("rlx.dtype.{name}")
}

/// `[2, ?0]`-style dims of a declared shape (without the dtype).
fn dims_text(shape: &Shape) -> String {
    let dims: Vec<String> = shape.dims().iter().map(ToString::to_string).collect();
    format!("[{}]", dims.join(", "))
}

/// `` `a`, `b` ``.
fn ticks<S: AsRef<str>>(names: &[S]) -> String {
    names
        .iter()
        .map(|n| format!("`{}`", n.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The dims a param of declared `shape` bound to `len` values is saved with: the declared
/// dims, a single dynamic axis resolved from `len`, else the flat `[len]`.
fn saved_dims(shape: &Shape, len: usize) -> Vec<usize> {
    let dims = shape.dims();
    let dynamic = dims.iter().filter(|d| !d.is_static()).count();
    let fixed = dims
        .iter()
        .filter_map(|d| match d {
            Dim::Static(n) => Some(*n),
            Dim::Dynamic(_) => None,
        })
        .try_fold(1usize, |p, n| p.checked_mul(n));
    match (dynamic, fixed) {
        (0, Some(p)) if p == len => dims.iter().map(|d| d.unwrap_static()).collect(),
        (1, Some(p)) if p > 0 && len.is_multiple_of(p) => dims
            .iter()
            .map(|d| match d {
                Dim::Static(n) => *n,
                Dim::Dynamic(_) => len / p,
            })
            .collect(),
        _ => vec![len],
    }
}

/// Whether data saved with dims `saved` fits a param declared `declared`: same rank and
/// equal static axes (dynamic axes take any size), or — for a dynamically shaped param —
/// the flat `[len]` that [`saved_dims`] falls back to.
fn shape_fits(declared: &Shape, saved: &[usize]) -> bool {
    let dims = declared.dims();
    if dims.len() == saved.len() {
        return dims.iter().zip(saved).all(|(d, &s)| match d {
            Dim::Static(n) => *n == s,
            Dim::Dynamic(_) => true,
        });
    }
    !declared.is_static() && saved.len() == 1
}

/// A parsed checkpoint file.
struct Contents {
    meta: HashMap<String, String>,
    /// `(name, dims, values)` of every `param.*` tensor, by name.
    params: Vec<(String, Vec<usize>, Vec<f32>)>,
    /// `(name, values)` of every `optim.*` tensor, by name.
    buffers: Vec<(String, Vec<f32>)>,
    /// Problems found while reading the tensors (wrong dtype, unknown prefix).
    problems: Vec<String>,
}

fn read(what: &str, path: &Path) -> Result<Contents> {
    let bytes = std::fs::read(path)
        .map_err(|e| Error::io(format!("{what}: cannot read {}: {e}", path.display()), e))?;
    let bad = |e: safetensors::SafeTensorError| {
        let message = format!(
            "{what}: {} is not a valid safetensors file: {e}; it may be truncated or corrupt — \
             write it again with save_checkpoint",
            path.display()
        );
        Error::checkpoint_caused_by(message, e)
    };
    let (_, metadata) = SafeTensors::read_metadata(&bytes).map_err(bad)?;
    let meta = metadata.metadata().clone().unwrap_or_default();
    if meta.get("rlx.format").map(String::as_str) != Some(FORMAT) {
        return Err(Error::checkpoint(format!(
            "{what}: {} was not written by save_checkpoint (metadata rlx.format is {:?}, expected {FORMAT:?})",
            path.display(),
            meta.get("rlx.format")
        )));
    }
    let st = SafeTensors::deserialize(&bytes).map_err(bad)?;
    let mut tensors = st.tensors();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = Contents {
        meta,
        params: Vec::new(),
        buffers: Vec::new(),
        problems: Vec::new(),
    };
    for (name, view) in tensors {
        if view.dtype() != Dtype::F32 {
            out.problems.push(format!(
                "tensor `{name}` is {:?}, expected F32 (checkpoints store every value as f32)",
                view.dtype()
            ));
            continue;
        }
        let data = bytes_f32(view.data());
        if let Some(p) = name.strip_prefix("param.") {
            out.params
                .push((p.to_string(), view.shape().to_vec(), data));
        } else if let Some(b) = name.strip_prefix("optim.") {
            out.buffers.push((b.to_string(), data));
        } else {
            out.problems.push(format!(
                "unexpected tensor `{name}` (a checkpoint holds only param.* and optim.* tensors)"
            ));
        }
    }
    Ok(out)
}

impl Func {
    /// Write the bound params (and `opt`'s state, when given) to `path` as safetensors.
    ///
    /// ```
    /// use rlx_tensor::{shape, Func, Sgd};
    /// let f = Func::new("f", |s| s.param("w", shape![2]).sum_all()).with_param("w", vec![1.0, 2.0]);
    /// let path = std::env::temp_dir().join("rlx_doc_ckpt.safetensors");
    /// f.save_checkpoint(&path, None).unwrap();
    /// let g = Func::new("f", |s| s.param("w", shape![2]).sum_all());
    /// let g = g.load_checkpoint(&path, None).unwrap();
    /// assert_eq!(g.param_binding("w"), Some(&[1.0f32, 2.0][..]));
    /// ```
    pub fn save_checkpoint(
        &self,
        path: impl AsRef<Path>,
        opt: Option<&dyn Optimizer>,
    ) -> Result<()> {
        let path = path.as_ref();
        let mut meta = HashMap::from([("rlx.format".to_string(), FORMAT.to_string())]);
        let mut owned: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
        for (name, data) in self.param_bindings() {
            let dims = match self.graph().param_id(name) {
                Some(id) => {
                    let shape = self.graph().shape(id);
                    meta.insert(dtype_key(name), shape.dtype().to_string());
                    saved_dims(shape, data.len())
                }
                None => vec![data.len()],
            };
            owned.push((format!("param.{name}"), dims, f32_bytes(data)));
        }
        if let Some(opt) = opt {
            let state = opt.state_dict().ok_or_else(|| {
                Error::new("save_checkpoint: this optimizer does not expose its state (state_dict() returned None)")
            })?;
            meta.insert("rlx.optim.step".into(), state.step.to_string());
            for (name, buf) in &state.buffers {
                owned.push((format!("optim.{name}"), vec![buf.len()], f32_bytes(buf)));
            }
        }
        let views: Vec<(String, TensorView<'_>)> = owned
            .iter()
            .map(|(n, dims, bytes)| {
                TensorView::new(Dtype::F32, dims.clone(), bytes)
                    .map(|v| (n.clone(), v))
                    .map_err(|e| Error::new(format!("save_checkpoint: tensor `{n}`: {e}")))
            })
            .collect::<Result<_>>()?;
        safetensors::serialize_to_file(views, Some(meta), path).map_err(|e| {
            let message = format!("save_checkpoint: cannot write {}: {e}", path.display());
            match e {
                safetensors::SafeTensorError::IoError(io) => Error::io(message, io),
                other => Error::checkpoint_caused_by(message, other),
            }
        })
    }

    /// Read a checkpoint written by [`Func::save_checkpoint`]: returns this `Func` with the
    /// saved params bound, and restores `opt`'s state when given.
    ///
    /// Strict: the file must hold every param this `Func` declares (a param left out would
    /// silently keep its old value), declare nothing else, and match every declared shape
    /// and dtype; with `opt`, every optimizer buffer must match its param's size. Any
    /// mismatch is an error listing every offending name (with both shapes where they
    /// differ), and nothing is bound or restored. To load a subset of the params on
    /// purpose, use [`Func::load_checkpoint_partial`].
    pub fn load_checkpoint(
        &self,
        path: impl AsRef<Path>,
        opt: Option<&mut dyn Optimizer>,
    ) -> Result<Func> {
        self.load_checkpoint_impl("load_checkpoint", path.as_ref(), opt, true)
    }

    /// [`Func::load_checkpoint`] that allows the file to lack some declared params: those
    /// keep their current binding (or stay unbound). Everything else is checked as
    /// strictly — undeclared names, shapes, dtypes and optimizer buffer sizes.
    ///
    /// ```
    /// use rlx_tensor::{shape, Func};
    /// let enc = Func::new("enc", |s| s.param("w", shape![2]).sum_all()).with_param("w", vec![1.0, 2.0]);
    /// let path = std::env::temp_dir().join("rlx_doc_partial.safetensors");
    /// enc.save_checkpoint(&path, None).unwrap();
    /// let full = Func::new("full", |s| s.param("w", shape![2]).sum_all() + s.param("head", shape![1]).sum_all())
    ///     .with_param("head", vec![0.5]);
    /// assert!(full.load_checkpoint(&path, None).unwrap_err().to_string().contains("missing params `head`"));
    /// let full = full.load_checkpoint_partial(&path, None).unwrap();
    /// assert_eq!(full.param_binding("w"), Some(&[1.0f32, 2.0][..]));
    /// assert_eq!(full.param_binding("head"), Some(&[0.5f32][..]));
    /// ```
    pub fn load_checkpoint_partial(
        &self,
        path: impl AsRef<Path>,
        opt: Option<&mut dyn Optimizer>,
    ) -> Result<Func> {
        self.load_checkpoint_impl("load_checkpoint_partial", path.as_ref(), opt, false)
    }

    fn load_checkpoint_impl(
        &self,
        what: &str,
        path: &Path,
        opt: Option<&mut dyn Optimizer>,
        strict: bool,
    ) -> Result<Func> {
        let c = read(what, path)?;
        let g = self.graph();
        let declared = self.param_names();
        let mut problems = c.problems.clone();

        // Params: undeclared, mis-shaped, mis-typed; then missing.
        let mut unexpected = Vec::new();
        let mut misfit = Vec::new();
        for (name, dims, _) in &c.params {
            let Some(id) = g.param_id(name) else {
                unexpected.push(name.as_str());
                continue;
            };
            let shape = g.shape(id);
            if !shape_fits(shape, dims) {
                misfit.push(format!(
                    "`{name}` saved {dims:?} but declared {}",
                    dims_text(shape)
                ));
            }
            if let Some(saved) = c.meta.get(&dtype_key(name))
                && *saved != shape.dtype().to_string()
            {
                misfit.push(format!(
                    "`{name}` saved as {saved} but declared {}",
                    shape.dtype()
                ));
            }
        }
        if !unexpected.is_empty() {
            problems.push(format!(
                "unexpected params {} that this Func does not declare (declared params: {declared:?})",
                ticks(&unexpected)
            ));
        }
        if !misfit.is_empty() {
            problems.push(format!(
                "params whose shape or dtype differs: {}",
                misfit.join(", ")
            ));
        }
        if strict {
            let missing: Vec<&str> = declared
                .iter()
                .map(String::as_str)
                .filter(|d| !c.params.iter().any(|(n, _, _)| n == d))
                .collect();
            if !missing.is_empty() {
                let held: Vec<&str> = c.params.iter().map(|(n, _, _)| n.as_str()).collect();
                problems.push(format!(
                    "missing params {} (the file holds {held:?}); they would keep their old \
                     values — save them too, or use load_checkpoint_partial to load a subset on purpose",
                    ticks(&missing)
                ));
            }
        }

        // Optimizer state: present, and every buffer sized like its param.
        let mut step = None;
        if opt.is_some() {
            match c.meta.get("rlx.optim.step") {
                None => problems.push(
                    "the file holds no optimizer state (it was saved without one); pass None for the optimizer"
                        .into(),
                ),
                Some(s) => match s.parse::<u64>() {
                    Ok(s) => step = Some(s),
                    Err(e) => problems.push(format!("bad rlx.optim.step {s:?}: {e}")),
                },
            }
            for (b, data) in &c.buffers {
                let Some((_, param)) = b.split_once('/') else {
                    problems.push(format!(
                        "optimizer buffer `optim.{b}` is not named <kind>/<param>"
                    ));
                    continue;
                };
                let Some(id) = g.param_id(param) else {
                    problems.push(format!(
                        "optimizer buffer `optim.{b}` belongs to `{param}`, which this Func does not declare (declared params: {declared:?})"
                    ));
                    continue;
                };
                let want = g.shape(id).num_elements().or_else(|| {
                    c.params
                        .iter()
                        .find(|(n, _, _)| n == param)
                        .map(|(_, _, d)| d.len())
                });
                if let Some(want) = want
                    && want != data.len()
                {
                    problems.push(format!(
                        "optimizer buffer `optim.{b}` has {} values but param `{param}` has {want} values",
                        data.len()
                    ));
                }
            }
        }

        if !problems.is_empty() {
            return Err(Error::checkpoint(format!(
                "{what}: {} does not fit Func `{}` (nothing was loaded): {}",
                path.display(),
                g.name,
                problems.join("; ")
            )));
        }
        let mut f = self.clone();
        for (name, _, data) in c.params {
            f = f.try_with_param(name, data).map_err(|e| e.context(what))?;
        }
        if let (Some(opt), Some(step)) = (opt, step) {
            let state = OptimizerState {
                step,
                buffers: c.buffers,
                ..Default::default()
            };
            if !opt.load_state_dict(&state) {
                return Err(Error::checkpoint(format!(
                    "{what}: the saved optimizer state does not fit this optimizer (a different optimizer type, or buffers it does not keep); load it into the kind of optimizer that saved it"
                )));
            }
        }
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::DType;

    #[test]
    fn saved_dims_resolve_one_dynamic_axis_and_fall_back_to_flat() {
        let s = |d: &[Dim]| Shape::from_dims(d, DType::F32);
        assert_eq!(saved_dims(&s(&[Dim::Static(3), Dim::Static(2)]), 6), [3, 2]);
        assert_eq!(
            saved_dims(&s(&[Dim::Dynamic(0), Dim::Static(2)]), 6),
            [3, 2]
        );
        assert_eq!(saved_dims(&s(&[Dim::Dynamic(0), Dim::Dynamic(1)]), 6), [6]);
        assert_eq!(saved_dims(&s(&[Dim::Static(4)]), 6), [6]);
        assert!(shape_fits(&s(&[Dim::Dynamic(0), Dim::Static(2)]), &[5, 2]));
        assert!(!shape_fits(&s(&[Dim::Dynamic(0), Dim::Static(2)]), &[5, 3]));
        assert!(shape_fits(&s(&[Dim::Dynamic(0), Dim::Dynamic(1)]), &[6]));
        assert!(!shape_fits(&s(&[Dim::Static(2), Dim::Static(3)]), &[3, 2]));
        assert!(!shape_fits(&s(&[Dim::Static(6)]), &[2, 3]));
    }
}
