//! Running prepared graphs with host inputs: name checks, dynamic-dim binding from
//! flat slices, dtype conversion, lifted constants, bound params.

use crate::{Error, Result};
use rlx_ir::{Dim, DimBinding, Graph, Op, Shape, TensorData, TensorView};
use rlx_runtime::{ArgSlot, CompiledGraph, Device, Prepared};
use std::sync::Mutex;

/// A graph made ready for compilation once: its live cone with large constants lifted,
/// their data, and the cache key per device.
#[derive(Debug)]
pub(crate) struct PreparedGraph {
    pub(crate) prepared: Prepared,
    pub(crate) lifted: Vec<(String, TensorData)>,
    keys: Mutex<Vec<(Device, (u64, u64))>>,
}

impl PreparedGraph {
    pub(crate) fn new(graph: &Graph) -> PreparedGraph {
        let prepared = rlx_runtime::prepare(graph, &graph.outputs, &|_| false, Device::Cpu);
        let lifted = prepared
            .lifted
            .iter()
            .map(|(name, src)| {
                let rlx_runtime::Lifted::Constant(id) = src else {
                    unreachable!("nothing is realized in a Func graph")
                };
                let node = graph.node(*id);
                let Op::Constant { data } = &node.op else {
                    unreachable!()
                };
                let dims = node.shape.static_dims().expect("constants are static");
                (
                    name.clone(),
                    TensorData {
                        dtype: node.shape.dtype(),
                        dims,
                        bytes: data.clone(),
                    },
                )
            })
            .collect();
        let keys = Mutex::new(vec![(Device::Cpu, (prepared.key, prepared.structure_key))]);
        PreparedGraph {
            prepared,
            lifted,
            keys,
        }
    }

    /// The cache key and structure key on `device` (memoized).
    pub(crate) fn key(&self, device: Device) -> (u64, u64) {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, k)) = keys.iter().find(|(d, _)| *d == device) {
            return *k;
        }
        let k = self.prepared.keys_on(device);
        keys.push((device, k));
        k
    }

    /// Compile (through the per-thread cache) for `device`.
    pub(crate) fn compiled(&self, device: Device) -> Result<rlx_runtime::CachedGraph> {
        crate::eval::ensure_backends();
        if !rlx_runtime::is_available(device) {
            return Err(Error::new(rlx_runtime::unavailable(device).to_string()));
        }
        let (key, structure_key) = self.key(device);
        rlx_runtime::cache_get_or_compile_prepared(
            key,
            structure_key,
            &self.prepared.graph,
            device,
            || CompiledGraph::new(device, &self.prepared.graph),
        )
        .map_err(|e| Error::new(e.to_string()))
    }
}

/// Run `compiled` with f32 host inputs, bound params and lifted constants, returning
/// every result as `Vec<f32>`; f32 results come straight from the backend's output
/// buffers (no copy where the backend supports it).
pub(crate) fn run_f32_host(
    what: &str,
    compiled: &CompiledGraph,
    prepared: &PreparedGraph,
    params: &[(String, Vec<f32>)],
    inputs: &[(&str, &[f32])],
) -> Result<Vec<Vec<f32>>> {
    run_f32_host_donating(what, compiled, prepared, params, inputs, &mut [])
}

/// [`run_f32_host`] with some f32 inputs donated by name: `(name, values, output)` lets
/// the backend compute graph output `output` over `values`' storage (see
/// `CompiledGraph::run_host_donating`; afterwards `values` is untouched or empty).
pub(crate) fn run_f32_host_donating(
    what: &str,
    compiled: &CompiledGraph,
    prepared: &PreparedGraph,
    params: &[(String, Vec<f32>)],
    inputs: &[(&str, &[f32])],
    donated: &mut [(&str, &mut Vec<f32>, usize)],
) -> Result<Vec<Vec<f32>>> {
    let names: Vec<&str> = donated.iter().map(|(n, _, _)| *n).collect();
    let out = run_f32_with(
        what,
        compiled,
        prepared,
        params,
        inputs,
        &names,
        |c, named| {
            if donated.is_empty() {
                c.run_host(named)
            } else {
                c.run_host_donating(named, donated)
            }
        },
    )?;
    Ok(out
        .into_iter()
        .map(rlx_runtime::HostOutput::into_f32_vec)
        .collect())
}

/// Bind f32 host inputs, params and lifted constants by name, then `call` the graph.
fn run_f32_with<R>(
    what: &str,
    compiled: &CompiledGraph,
    prepared: &PreparedGraph,
    params: &[(String, Vec<f32>)],
    inputs: &[(&str, &[f32])],
    donated: &[&str],
    call: impl FnOnce(&CompiledGraph, &[(&str, TensorView<'_>)]) -> rlx_runtime::RuntimeResult<R>,
) -> Result<R> {
    for (name, _) in inputs {
        if !compiled.slots().iter().any(|s| s.name == *name) || name.starts_with("__arg") {
            return Err(unknown_name(what, name, compiled.slots()));
        }
    }
    let mut binding = DimBinding::new();
    let mut owned: Vec<(String, ArgData<'_>)> = Vec::new();
    // Donated inputs are passed by `call` itself (their values are not borrowed here).
    let donated_slot = |name: &str| donated.contains(&name);
    // two passes so that inputs whose dynamic dims are bound by others resolve too
    for _ in 0..2 {
        for slot in compiled.slots() {
            if owned.iter().any(|(n, _)| *n == slot.name) || donated_slot(&slot.name) {
                continue;
            }
            let data: Option<&[f32]> = inputs
                .iter()
                .find(|(n, _)| *n == slot.name)
                .map(|(_, d)| *d)
                .or_else(|| {
                    params
                        .iter()
                        .find(|(n, _)| *n == slot.name)
                        .map(|(_, d)| d.as_slice())
                });
            let Some(data) = data else { continue };
            if let Some(t) = borrowed_from_f32(what, slot, data, &mut binding)? {
                owned.push((slot.name.clone(), t));
            }
        }
    }
    for slot in compiled.slots() {
        if slot.name.starts_with("__arg")
            || donated_slot(&slot.name)
            || owned.iter().any(|(n, _)| *n == slot.name)
            || (slot.is_param && compiled.is_param_bound(&slot.name))
        {
            continue;
        }
        let given = inputs.iter().any(|(n, _)| *n == slot.name)
            || params.iter().any(|(n, _)| *n == slot.name);
        return Err(if given {
            Error::new(format!(
                "{what}: cannot infer the dynamic dims of `{}` (declared {}) from a flat slice; bind them through another input or use run_data with explicit dims",
                slot.name, slot.shape
            ))
        } else if slot.is_param {
            let how = if what.starts_with("Model") {
                "set"
            } else {
                "with_param"
            };
            Error::new(format!(
                "{what}: param `{}` ({}) is not bound; bind it with .{how}(\"{}\", data) or pass it in the inputs",
                slot.name, slot.shape, slot.name
            ))
        } else {
            Error::new(format!(
                "{what}: missing input `{}` ({}); pass (\"{}\", &data) in the inputs",
                slot.name, slot.shape, slot.name
            ))
        });
    }
    let mut named: Vec<(&str, TensorView<'_>)> =
        owned.iter().map(|(n, d)| (n.as_str(), d.view())).collect();
    named.extend(prepared.lifted.iter().map(|(n, d)| (n.as_str(), d.view())));
    call(compiled, &named).map_err(|e| Error::new(format!("{what}: {e}")))
}

/// The data of one argument slot: f32 slices are passed to the backend in place (no
/// copy of possibly large inputs per call); other dtypes are converted.
pub(crate) enum ArgData<'a> {
    Owned(TensorData),
    F32(Vec<usize>, &'a [u8]),
}

impl ArgData<'_> {
    fn view(&self) -> TensorView<'_> {
        match self {
            ArgData::Owned(d) => d.view(),
            ArgData::F32(dims, bytes) => TensorView {
                dtype: rlx_ir::DType::F32,
                dims,
                bytes,
            },
        }
    }
}

/// [`typed_from_f32`] that borrows the slice when the slot is f32.
fn borrowed_from_f32<'a>(
    what: &str,
    slot: &ArgSlot,
    data: &'a [f32],
    binding: &mut DimBinding,
) -> Result<Option<ArgData<'a>>> {
    if slot.shape.dtype() == rlx_ir::DType::F32 && cfg!(target_endian = "little") {
        let Some(dims) = resolve_dims(what, &slot.name, &slot.shape, data.len(), binding)? else {
            return Ok(None);
        };
        // f32 slices are little-endian f32 bytes on a little-endian host.
        // SAFETY: the `data.len()·4` bytes of the live `&[f32]` (u8: alignment 1, any bit
        // pattern valid), borrowed for the same lifetime `'a`, so never written meanwhile.
        let bytes =
            unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, data.len() * 4) };
        return Ok(Some(ArgData::F32(dims, bytes)));
    }
    Ok(typed_from_f32(what, slot, data, binding)?.map(ArgData::Owned))
}

/// Run `compiled` with typed host data (explicit dims and dtypes).
pub(crate) fn run_typed(
    what: &str,
    compiled: &CompiledGraph,
    prepared: &PreparedGraph,
    params: &[(String, Vec<f32>)],
    inputs: &[(&str, TensorData)],
) -> Result<Vec<TensorData>> {
    for (name, _) in inputs {
        if !compiled.slots().iter().any(|s| s.name == *name) || name.starts_with("__arg") {
            return Err(unknown_name(what, name, compiled.slots()));
        }
    }
    let mut binding = DimBinding::new();
    let mut owned: Vec<(String, TensorData)> = Vec::new();
    for slot in compiled.slots() {
        if slot.name.starts_with("__arg") || inputs.iter().any(|(n, _)| *n == slot.name) {
            continue;
        }
        if let Some((_, d)) = params.iter().find(|(n, _)| *n == slot.name)
            && let Some(t) = typed_from_f32(what, slot, d, &mut binding)?
        {
            owned.push((slot.name.clone(), t));
        }
    }
    let converted: Vec<(String, TensorData)> = inputs
        .iter()
        .map(|(n, d)| {
            let slot = compiled
                .slots()
                .iter()
                .find(|s| s.name == *n)
                .expect("checked above");
            let d = if d.dtype != slot.shape.dtype() {
                TensorData::from_f64_as(slot.shape.dtype(), &d.dims, &d.to_f64_vec())
            } else {
                d.clone()
            };
            (n.to_string(), d)
        })
        .collect();
    let mut named: Vec<(&str, TensorView<'_>)> = converted
        .iter()
        .map(|(n, d)| (n.as_str(), d.view()))
        .collect();
    named.extend(owned.iter().map(|(n, d)| (n.as_str(), d.view())));
    named.extend(prepared.lifted.iter().map(|(n, d)| (n.as_str(), d.view())));
    compiled
        .run(&named)
        .map_err(|e| Error::new(format!("{what}: {e}")))
}

fn unknown_name(what: &str, name: &str, slots: &[ArgSlot]) -> Error {
    let inputs: Vec<&str> = slots
        .iter()
        .filter(|s| !s.is_param && !s.name.starts_with("__arg"))
        .map(|s| s.name.as_str())
        .collect();
    let params: Vec<&str> = slots
        .iter()
        .filter(|s| s.is_param)
        .map(|s| s.name.as_str())
        .collect();
    Error::new(format!(
        "{what}: no input or param named `{name}` (inputs: {inputs:?}, params: {params:?}); check the spelling"
    ))
}

/// Convert a flat f32 slice into typed data for `slot`, binding dynamic dims from its
/// length. `Ok(None)` when the dims cannot be resolved yet (more than one unknown).
pub(crate) fn typed_from_f32(
    what: &str,
    slot: &ArgSlot,
    data: &[f32],
    binding: &mut DimBinding,
) -> Result<Option<TensorData>> {
    let Some(dims) = resolve_dims(what, &slot.name, &slot.shape, data.len(), binding)? else {
        return Ok(None);
    };
    let t = if slot.shape.dtype() == rlx_ir::DType::F32 {
        TensorData::from_f32(&dims, data)
    } else {
        let v: Vec<f64> = data.iter().map(|&x| x as f64).collect();
        TensorData::from_f64_as(slot.shape.dtype(), &dims, &v)
    };
    Ok(Some(t))
}

/// Concrete dims of `shape` for a flat buffer of `len` elements.
pub(crate) fn resolve_dims(
    what: &str,
    name: &str,
    shape: &Shape,
    len: usize,
    binding: &mut DimBinding,
) -> Result<Option<Vec<usize>>> {
    let mut known = 1usize;
    let mut unknown: Vec<u32> = Vec::new();
    for d in shape.dims() {
        match d {
            Dim::Static(n) => known *= n,
            Dim::Dynamic(s) => match binding.get(*s) {
                Some(n) => known *= n,
                None => {
                    if !unknown.contains(s) {
                        unknown.push(*s);
                    }
                }
            },
        }
    }
    let occurrences = |s: u32| {
        shape
            .dims()
            .iter()
            .filter(|d| **d == Dim::Dynamic(s))
            .count() as u32
    };
    match unknown.as_slice() {
        [] => {
            if known != len {
                return Err(Error::new(format!(
                    "{what}: `{name}` is declared {shape} and needs {known} values, got {len}"
                )));
            }
        }
        [s] => {
            let k = occurrences(*s);
            let per = if known == 0 { 0 } else { len / known.max(1) };
            let n = if k == 1 {
                Some(per)
            } else {
                (0..=per).find(|n| n.pow(k) == per)
            };
            match n {
                Some(n) if known * n.pow(k) == len => binding.set(*s, n),
                _ => {
                    return Err(Error::new(format!(
                        "{what}: `{name}` is declared {shape}: {len} values do not fit (the static part holds {known} per dynamic step)"
                    )));
                }
            }
        }
        _ => return Ok(None),
    }
    Ok(Some(shape.concrete(binding).expect("all symbols bound")))
}
