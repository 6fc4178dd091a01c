//! Checking a checkpoint against the params a graph declares, and loading them.

use super::SafeTensors;
use crate::func::Func;
use crate::{Error, Result};
use rlx_ir::{Dim, Graph, Shape};
use std::fmt;

/// Everything that keeps a checkpoint from binding a graph's params, by name.
///
/// Built by [`SafeTensors::check_params`]; empty when the file fits. Its `Display` lists
/// every problem (the error text of [`SafeTensors::params_for`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParamMismatch {
    /// Params the graph declares that no stored tensor maps to.
    pub missing: Vec<String>,
    /// `(stored name, param name)` of stored tensors mapped to a name the graph does not
    /// declare (map them to `None` in the rename to skip them on purpose).
    pub unexpected: Vec<(String, String)>,
    /// `(param name, stored shape, declared shape)` where the shapes differ.
    pub misshaped: Vec<(String, Vec<usize>, Shape)>,
    /// `(param name, stored names)` of params that several stored tensors map to.
    pub duplicated: Vec<(String, Vec<String>)>,
    /// `(param name, why)` of tensors whose stored type cannot become the param's.
    pub unloadable: Vec<(String, String)>,
}

impl ParamMismatch {
    /// Whether the checkpoint fits.
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty()
            && self.unexpected.is_empty()
            && self.misshaped.is_empty()
            && self.duplicated.is_empty()
            && self.unloadable.is_empty()
    }
}

fn dims_text(s: &Shape) -> String {
    let d: Vec<String> = s.dims().iter().map(ToString::to_string).collect();
    format!("[{}]", d.join(", "))
}

impl fmt::Display for ParamMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ticks = |v: &mut dyn Iterator<Item = &String>| {
            v.map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
        };
        let mut parts = Vec::new();
        if !self.missing.is_empty() {
            parts.push(format!(
                "missing params {} (no stored tensor maps to them)",
                ticks(&mut self.missing.iter())
            ));
        }
        if !self.unexpected.is_empty() {
            let list: Vec<String> = self
                .unexpected
                .iter()
                .map(|(s, p)| {
                    if s == p {
                        format!("`{s}`")
                    } else {
                        format!("`{s}` (as `{p}`)")
                    }
                })
                .collect();
            parts.push(format!(
                "unexpected tensors {} that the graph does not declare (rename them, or map \
                 them to None to skip them)",
                list.join(", ")
            ));
        }
        if !self.misshaped.is_empty() {
            let list: Vec<String> = self
                .misshaped
                .iter()
                .map(|(n, stored, declared)| {
                    format!(
                        "`{n}` stored {stored:?} but declared {}",
                        dims_text(declared)
                    )
                })
                .collect();
            parts.push(format!("mis-shaped params: {}", list.join(", ")));
        }
        for (p, stored) in &self.duplicated {
            parts.push(format!(
                "param `{p}` is mapped from several tensors ({})",
                ticks(&mut stored.iter())
            ));
        }
        for (p, why) in &self.unloadable {
            parts.push(format!("param `{p}`: {why}"));
        }
        f.write_str(&parts.join("; "))
    }
}

/// Whether stored dims fit a declared shape (same rank, equal static axes).
fn fits(declared: &Shape, stored: &[usize]) -> bool {
    declared.rank() == stored.len()
        && declared.dims().iter().zip(stored).all(|(d, &s)| match d {
            Dim::Static(n) => *n == s,
            Dim::Dynamic(_) => true,
        })
}

impl SafeTensors {
    /// Check the stored tensors against every param `graph` declares.
    ///
    /// `rename` maps a stored name to the param it binds, or to `None` to skip that
    /// tensor (e.g. `|n| n.strip_prefix("model.").map(String::from)`; the identity is
    /// `|n| Some(n.to_string())`). The report lists every missing, unexpected,
    /// mis-shaped (both shapes), duplicated and unloadable tensor at once.
    pub fn check_params(
        &self,
        graph: &Graph,
        mut rename: impl FnMut(&str) -> Option<String>,
    ) -> ParamMismatch {
        let mut m = ParamMismatch::default();
        let mut bound: Vec<(String, Vec<String>)> = Vec::new();
        for (stored, e) in &self.entries {
            let Some(param) = rename(stored) else {
                continue;
            };
            let Some(id) = graph.param_id(&param) else {
                m.unexpected.push((stored.clone(), param));
                continue;
            };
            match bound.iter_mut().find(|(p, _)| *p == param) {
                Some((_, from)) => {
                    from.push(stored.clone());
                    continue;
                }
                None => bound.push((param.clone(), vec![stored.clone()])),
            }
            let declared = graph.shape(id);
            if !fits(declared, &e.shape) {
                m.misshaped
                    .push((param.clone(), e.shape.clone(), declared.clone()));
            }
            if !(e.dtype.is_float() || e.dtype.is_integral()) {
                m.unloadable.push((
                    param.clone(),
                    format!(
                        "`{stored}` is stored as {}, which does not convert to {}",
                        e.dtype,
                        declared.dtype()
                    ),
                ));
            }
        }
        m.missing = graph
            .param_names()
            .into_iter()
            .filter(|p| !bound.iter().any(|(b, _)| b == p))
            .map(String::from)
            .collect();
        m.duplicated = bound
            .into_iter()
            .filter(|(_, from)| from.len() > 1)
            .collect();
        m
    }

    /// Every param `graph` declares, loaded as f32 values (in the graph's param order)
    /// after [`SafeTensors::check_params`] found no problem; otherwise an error listing
    /// every problem. Feed the result to `Model::load_exact` or `Func::with_param`
    /// (which convert to each param's declared dtype, e.g. back to bf16 exactly).
    ///
    /// ```
    /// use rlx_ir::TensorData;
    /// use rlx_tensor::{graph, shape, SafeTensors, save_safetensors_data};
    /// let path = std::env::temp_dir().join("rlx_doc_st_params.safetensors");
    /// save_safetensors_data(&path, &[
    ///     ("model.w", &TensorData::from_f32(&[2], &[1.0, 2.0])),
    ///     ("model.extra", &TensorData::from_f32(&[1], &[0.0])),
    /// ]).unwrap();
    /// let g = graph("g", |s| s.param("w", shape![3]).sum_all());
    /// let st = SafeTensors::open(&path).unwrap();
    /// let strip = |n: &str| n.strip_prefix("model.").map(String::from);
    /// let err = st.params_for(&g, strip).unwrap_err().to_string();
    /// assert!(err.contains("unexpected tensors `model.extra` (as `extra`)"), "{err}");
    /// assert!(err.contains("`w` stored [2] but declared [3]"), "{err}");
    /// ```
    pub fn params_for(
        &self,
        graph: &Graph,
        mut rename: impl FnMut(&str) -> Option<String>,
    ) -> Result<Vec<(String, Vec<f32>)>> {
        let report = self.check_params(graph, &mut rename);
        if !report.is_empty() {
            return Err(Error::checkpoint(format!(
                "safetensors: {self:?} does not fit the params of graph `{}`: {report}",
                graph.name
            )));
        }
        let mut by_param: Vec<(String, &str)> = Vec::new();
        for stored in self.entries.keys() {
            if let Some(p) = rename(stored) {
                by_param.push((p, stored));
            }
        }
        graph
            .param_names()
            .into_iter()
            .map(|p| {
                let (_, stored) = by_param
                    .iter()
                    .find(|(n, _)| n == p)
                    .expect("check_params found every param");
                Ok((p.to_string(), self.load_f32(stored)?))
            })
            .collect()
    }

    /// `f` with every param it declares bound from this checkpoint (see
    /// [`SafeTensors::params_for`] for `rename` and the checks).
    pub fn load_into_func(
        &self,
        f: &Func,
        rename: impl FnMut(&str) -> Option<String>,
    ) -> Result<Func> {
        let mut out = f.clone();
        for (name, data) in self.params_for(f.graph(), rename)? {
            out = out.try_with_param(name, data)?;
        }
        Ok(out)
    }

    /// Bind every param of `model` (compiled from `graph`) from this checkpoint, after
    /// the checks of [`SafeTensors::params_for`]; nothing is bound when any fails.
    /// Each tensor is converted to the param's declared dtype (f32 → bf16 rounds to
    /// nearest even; bf16/f16/fp8 → f32 is exact).
    ///
    /// ```
    /// use rlx_ir::TensorData;
    /// use rlx_tensor::{graph, shape, Model, SafeTensors, save_safetensors_data};
    /// let path = std::env::temp_dir().join("rlx_doc_st_model.safetensors");
    /// save_safetensors_data(&path, &[("w", &TensorData::from_f32(&[2], &[2.0, 3.0]))]).unwrap();
    /// let g = graph("scale", |s| &s.input("x", shape![2]) * &s.param("w", shape![2]));
    /// let mut m = Model::new(g.clone());
    /// SafeTensors::open(&path).unwrap().load_into_model(&mut m, &g, |n| Some(n.into())).unwrap();
    /// assert_eq!(m.run(&[("x", &[1.0, 1.0])]), vec![vec![2.0, 3.0]]);
    /// ```
    #[cfg(feature = "eval")]
    pub fn load_into_model(
        &self,
        model: &mut crate::Model,
        graph: &Graph,
        rename: impl FnMut(&str) -> Option<String>,
    ) -> Result<()> {
        let params = self.params_for(graph, rename)?;
        model.try_load_exact(params.iter().map(|(n, d)| (n.as_str(), d.as_slice())))?;
        Ok(())
    }
}
