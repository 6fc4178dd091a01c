//! Checkpoints: a `Func`'s bound params and an optimizer's state in one safetensors file.
//!
//! Layout: every bound param `p` is the f32 tensor `param.p` with its declared dims;
//! every optimizer buffer `b` (see `rlx_optim::OptimizerState`) is the 1-D f32 tensor
//! `optim.b`; the metadata holds `rlx.format = "checkpoint/1"` and, when an optimizer
//! was saved, `rlx.optim.step`. Any safetensors reader can open the file.

use crate::func::Func;
use crate::{Error, Result};
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
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
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
        let mut owned: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
        for (name, data) in self.param_bindings() {
            let dims = self
                .param_shape_of(name)
                .unwrap_or_else(|| vec![data.len()]);
            let dims = if dims.iter().product::<usize>() == data.len() {
                dims
            } else {
                vec![data.len()]
            };
            owned.push((format!("param.{name}"), dims, f32_bytes(data)));
        }
        let mut meta = HashMap::from([("rlx.format".to_string(), FORMAT.to_string())]);
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
            Error::new(format!(
                "save_checkpoint: cannot write {}: {e}",
                path.display()
            ))
        })
    }

    /// Read a checkpoint written by [`Func::save_checkpoint`]: returns this `Func` with the
    /// saved params bound, and restores `opt`'s state when given. Strict: every saved param
    /// must be declared by this graph with the same element count.
    pub fn load_checkpoint(
        &self,
        path: impl AsRef<Path>,
        opt: Option<&mut dyn Optimizer>,
    ) -> Result<Func> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| {
            Error::new(format!(
                "load_checkpoint: cannot read {}: {e}",
                path.display()
            ))
        })?;
        let bad = |e: safetensors::SafeTensorError| {
            Error::new(format!(
                "load_checkpoint: {} is not a valid safetensors file: {e}",
                path.display()
            ))
        };
        let (_, metadata) = SafeTensors::read_metadata(&bytes).map_err(bad)?;
        let meta = metadata.metadata().clone().unwrap_or_default();
        if meta.get("rlx.format").map(String::as_str) != Some(FORMAT) {
            return Err(Error::new(format!(
                "load_checkpoint: {} was not written by save_checkpoint (metadata rlx.format is {:?}, expected {FORMAT:?})",
                path.display(),
                meta.get("rlx.format")
            )));
        }
        let st = SafeTensors::deserialize(&bytes).map_err(bad)?;
        let mut f = self.clone();
        let mut buffers = Vec::new();
        let mut tensors = st.tensors();
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, view) in tensors {
            if view.dtype() != Dtype::F32 {
                return Err(Error::new(format!(
                    "load_checkpoint: tensor `{name}` is {:?}, expected F32",
                    view.dtype()
                )));
            }
            let data = bytes_f32(view.data());
            if let Some(p) = name.strip_prefix("param.") {
                f = f
                    .try_with_param(p, data)
                    .map_err(|e| Error::new(format!("load_checkpoint: {e}")))?;
            } else if let Some(b) = name.strip_prefix("optim.") {
                buffers.push((b.to_string(), data));
            } else {
                return Err(Error::new(format!(
                    "load_checkpoint: unexpected tensor `{name}` (expected param.* or optim.*)"
                )));
            }
        }
        if let Some(opt) = opt {
            let step = meta
                .get("rlx.optim.step")
                .ok_or_else(|| Error::new("load_checkpoint: the file holds no optimizer state (it was saved without one)"))?
                .parse::<u64>()
                .map_err(|e| Error::new(format!("load_checkpoint: bad rlx.optim.step: {e}")))?;
            if !opt.load_state_dict(&OptimizerState { step, buffers }) {
                return Err(Error::new(
                    "load_checkpoint: the saved optimizer state does not fit this optimizer (different optimizer type or params)",
                ));
            }
        }
        Ok(f)
    }
}
