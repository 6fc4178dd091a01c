//! Running prepared graphs with host inputs: name checks, dynamic-dim binding from
//! flat slices, dtype conversion, lifted constants, bound params.

use crate::host_data::HostData;
use crate::{Error, Result};
use rlx_ir::{Dim, DimBinding, Graph, Op, Shape, TensorData, TensorView};
use rlx_runtime::{ArgSlot, CompiledGraph, Device, Prepared};
use std::sync::Mutex;

/// Who runs a program, for error messages: formatted only when an error is built (a
/// `format!` per successful run cost an allocation on every call).
#[derive(Clone, Copy, Debug)]
pub(crate) enum What<'a> {
    /// The text as is.
    Text(&'a str),
    /// ``{kind} `{name}` `` (`Jitted`, `Func`, `Model`).
    Named(&'static str, &'a str),
}

impl std::fmt::Display for What<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            What::Text(t) => f.write_str(t),
            What::Named(kind, name) => write!(f, "{kind} `{name}`"),
        }
    }
}

impl<'a> From<&'a str> for What<'a> {
    fn from(t: &'a str) -> What<'a> {
        What::Text(t)
    }
}

impl What<'_> {
    /// Whether the text starts with `prefix` (error paths only).
    fn starts_with(&self, prefix: &str) -> bool {
        match self {
            What::Text(t) => t.starts_with(prefix),
            What::Named(kind, _) => kind.starts_with(prefix),
        }
    }
}

/// Argument dims: borrowed, inline up to [`Dims::INLINE`] axes, or owned — binding an
/// argument allocates nothing for the usual ranks.
#[derive(Debug, Clone)]
pub(crate) enum Dims<'a> {
    Borrowed(&'a [usize]),
    Inline([usize; Dims::INLINE], usize),
    Owned(Vec<usize>),
}

impl Dims<'_> {
    pub(crate) const INLINE: usize = 6;

    /// Dims `f(0), …, f(len - 1)`; `None` as soon as one is `None`.
    pub(crate) fn try_from_fn(
        len: usize,
        mut f: impl FnMut(usize) -> Option<usize>,
    ) -> Option<Dims<'static>> {
        if len <= Dims::INLINE {
            let mut buf = [0; Dims::INLINE];
            for (i, b) in buf.iter_mut().enumerate().take(len) {
                *b = f(i)?;
            }
            Some(Dims::Inline(buf, len))
        } else {
            (0..len).map(f).collect::<Option<Vec<_>>>().map(Dims::Owned)
        }
    }

    /// The static dims of a shape (constants and lifted arguments are static).
    pub(crate) fn of_static(shape: &Shape) -> Dims<'static> {
        let dims = shape.dims();
        Dims::try_from_fn(dims.len(), |i| dims[i].as_static())
            .expect("constants have static shapes")
    }

    pub(crate) fn as_slice(&self) -> &[usize] {
        match self {
            Dims::Borrowed(d) => d,
            Dims::Inline(buf, n) => &buf[..*n],
            Dims::Owned(v) => v,
        }
    }
}

/// A graph made ready for compilation once: its live cone with large constants lifted,
/// their data, and the cache key per device.
#[derive(Debug)]
pub(crate) struct PreparedGraph {
    pub(crate) prepared: Prepared,
    pub(crate) lifted: Vec<(String, TensorData)>,
    keys: Mutex<Vec<(Device, (u64, u64))>>,
    /// Declared inputs and params no output depends on (dropped from the program).
    /// A run accepts values for them and ignores them, as for any other declared
    /// name: a gradient of a function linear in `w` does not read `w`, yet `w` is
    /// one of its inputs.
    unused: Vec<String>,
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
        let kept: std::collections::HashSet<&str> = prepared
            .graph
            .nodes()
            .iter()
            .filter_map(|n| match &n.op {
                Op::Input { name } | Op::Param { name } => Some(name.as_str()),
                _ => None,
            })
            .collect();
        let unused = graph
            .nodes()
            .iter()
            .filter_map(|n| match &n.op {
                Op::Input { name } | Op::Param { name } if !kept.contains(name.as_str()) => {
                    Some(name.clone())
                }
                _ => None,
            })
            .collect();
        PreparedGraph {
            prepared,
            lifted,
            keys,
            unused,
        }
    }

    /// Whether `name` is a declared input or param that no output reads.
    pub(crate) fn is_unused(&self, name: &str) -> bool {
        self.unused.iter().any(|n| n == name)
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
            return Err(Error::DeviceUnavailable {
                message: rlx_runtime::unavailable(device).to_string(),
            });
        }
        let (key, structure_key) = self.key(device);
        rlx_runtime::cache_get_or_compile_prepared(
            key,
            structure_key,
            &self.prepared.graph,
            device,
            || CompiledGraph::new(device, &self.prepared.graph),
        )
        .map_err(Error::from)
    }
}

/// The compiled program of a per-thread cache entry as an `Arc` that can cross threads
/// (a `Jitted` is `Send + Sync`): a clone shares the compiled code and copies only the
/// param bindings, which a cached program does not have (params are passed as inputs).
pub(crate) fn shared(cached: &rlx_runtime::CachedGraph) -> std::sync::Arc<CompiledGraph> {
    std::sync::Arc::new(cached.borrow().clone())
}

/// Run `compiled` with f32 host inputs, bound params and lifted constants, returning
/// every result as `Vec<f32>`; f32 results come straight from the backend's output
/// buffers (no copy where the backend supports it).
pub(crate) fn run_f32_host(
    what: What<'_>,
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
    what: What<'_>,
    compiled: &CompiledGraph,
    prepared: &PreparedGraph,
    params: &[(String, Vec<f32>)],
    inputs: &[(&str, &[f32])],
    donated: &mut [(&str, &mut Vec<f32>, usize)],
) -> Result<Vec<Vec<f32>>> {
    let names: Vec<&str> = donated.iter().map(|(n, _, _)| *n).collect();
    let out = run_host_with(
        what,
        compiled,
        prepared,
        params,
        inputs,
        Convert::FromF32,
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

/// Run `compiled` with typed flat host slices (dims from the declared shapes, dtypes
/// exactly as declared), returning every output in its own dtype.
pub(crate) fn run_host_data(
    what: What<'_>,
    compiled: &CompiledGraph,
    prepared: &PreparedGraph,
    params: &[(String, Vec<f32>)],
    inputs: &[(&str, HostData<'_>)],
) -> Result<Vec<TensorData>> {
    run_host_with(
        what,
        compiled,
        prepared,
        params,
        inputs,
        Convert::Exact,
        &[],
        |c, named| c.run(named),
    )
}

/// How host data whose dtype differs from the declared one is treated.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Convert {
    /// The `&[f32]` API: f32 data for a non-f32 input is converted to the declared dtype
    /// (the published behaviour: integer ids passed as f32 values).
    FromF32,
    /// The typed API: the dtype must match exactly (an error names the fix).
    Exact,
}

/// Bind host inputs, params (f32, converted to their declared dtype) and lifted
/// constants by name, then `call` the graph. One path for the `&[f32]` and the typed
/// APIs: data of the declared dtype is passed to the backend in place (no copy).
///
/// Inputs are `&[f32]` slices or [`HostData`] (each converted where it is read, so the
/// `&[f32]` API builds no list of its own per call).
#[allow(clippy::too_many_arguments)]
fn run_host_with<'d, D: Copy + Into<HostData<'d>>, R>(
    what: What<'_>,
    compiled: &CompiledGraph,
    prepared: &PreparedGraph,
    params: &[(String, Vec<f32>)],
    inputs: &[(&str, D)],
    convert: Convert,
    donated: &[&str],
    call: impl FnOnce(&CompiledGraph, &[(&str, TensorView<'_>)]) -> rlx_runtime::RuntimeResult<R>,
) -> Result<R> {
    check_no_outputs(what, compiled)?;
    check_unique(what, inputs)?;
    for (name, _) in inputs {
        let known = compiled.slots().iter().any(|s| s.name == *name) || prepared.is_unused(name);
        if !known || name.starts_with("__arg") {
            return Err(unknown_name(what, name, compiled.slots()));
        }
    }
    let mut binding = DimBinding::new();
    let mut owned: SmallList<(&str, ArgData<'_>)> = SmallList::new();
    // Donated inputs are passed by `call` itself (their values are not borrowed here).
    let donated_slot = |name: &str| donated.contains(&name);
    // two passes so that inputs whose dynamic dims are bound by others resolve too
    for _ in 0..2 {
        for slot in compiled.slots() {
            if owned.iter().any(|(n, _)| *n == slot.name) || donated_slot(&slot.name) {
                continue;
            }
            let given = inputs
                .iter()
                .find(|(n, _)| *n == slot.name)
                .map(|(_, d)| ((*d).into(), convert));
            let data = given.or_else(|| {
                params
                    .iter()
                    .find(|(n, _)| *n == slot.name)
                    .map(|(_, d)| (HostData::F32(d), Convert::FromF32))
            });
            let Some((data, convert)) = data else {
                continue;
            };
            if let Some(t) = arg_from_host(what, slot, data, convert, &mut binding)? {
                owned.push((slot.name.as_str(), t));
            }
        }
        if owned.len() + donated.len() >= compiled.slots().len() {
            break; // every slot has its data: no second pass
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
            Error::shape(format!(
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
    let named = owned
        .iter()
        .map(|(n, d)| (*n, d.view()))
        .chain(prepared.lifted.iter().map(|(n, d)| (n.as_str(), d.view())));
    let ran = with_slice(
        owned.len() + prepared.lifted.len(),
        named,
        EMPTY_ARG,
        |named| call(compiled, named),
    );
    ran.map_err(|e| Error::Runtime {
        message: format!("{what}: {e}"),
    })
}

/// How many items [`SmallList`] and [`with_slice`] keep on the stack.
const INLINE_ITEMS: usize = 8;

/// Filler for the unused entries of an argument array on the stack.
const EMPTY_ARG: (&str, TensorView<'static>) = (
    "",
    TensorView {
        dtype: rlx_ir::DType::F32,
        dims: &[],
        bytes: &[],
    },
);

/// A list whose first [`INLINE_ITEMS`] items live on the stack: the per-run lists of a
/// call with a few arguments allocate nothing.
struct SmallList<T> {
    inline: [Option<T>; INLINE_ITEMS],
    len: usize,
    spilled: Vec<T>,
}

impl<T> SmallList<T> {
    fn new() -> SmallList<T> {
        SmallList {
            inline: std::array::from_fn(|_| None),
            len: 0,
            spilled: Vec::new(),
        }
    }

    fn push(&mut self, item: T) {
        match self.inline.get_mut(self.len) {
            Some(slot) => *slot = Some(item),
            None => self.spilled.push(item),
        }
        self.len += 1;
    }

    fn len(&self) -> usize {
        self.len
    }

    fn iter(&self) -> impl Iterator<Item = &T> {
        self.inline.iter().flatten().chain(&self.spilled)
    }
}

/// Call `f` with the `n` items of `items` as a slice: on the stack (the rest filled with
/// `fill`) when `n <= INLINE_ITEMS`, else in a vector.
fn with_slice<T: Copy, R>(
    n: usize,
    items: impl Iterator<Item = T>,
    fill: T,
    f: impl FnOnce(&[T]) -> R,
) -> R {
    if n <= INLINE_ITEMS {
        let mut buf = [fill; INLINE_ITEMS];
        for (b, item) in buf.iter_mut().zip(items) {
            *b = item;
        }
        f(&buf[..n])
    } else {
        f(&items.collect::<Vec<T>>())
    }
}

/// The data of one argument slot: host data of the declared dtype is passed to the
/// backend in place (no copy of possibly large inputs per call); converted data is owned.
pub(crate) enum ArgData<'a> {
    Owned(TensorData),
    Borrowed(rlx_ir::DType, Dims<'static>, &'a [u8]),
}

impl ArgData<'_> {
    fn view(&self) -> TensorView<'_> {
        match self {
            ArgData::Owned(d) => d.view(),
            ArgData::Borrowed(dtype, dims, bytes) => TensorView {
                dtype: *dtype,
                dims: dims.as_slice(),
                bytes,
            },
        }
    }
}

/// The argument for `slot` from flat host data: dims resolved from its length (binding
/// dynamic dims), borrowed when the dtype matches, converted from f32 when `convert`
/// allows, an error naming both dtypes otherwise. `Ok(None)` when the dims cannot be
/// resolved yet.
fn arg_from_host<'a>(
    what: What<'_>,
    slot: &ArgSlot,
    data: HostData<'a>,
    convert: Convert,
    binding: &mut DimBinding,
) -> Result<Option<ArgData<'a>>> {
    let want = slot.shape.dtype();
    if data.dtype() != want {
        return match (convert, data) {
            (Convert::FromF32, HostData::F32(d)) => {
                Ok(typed_from_f32(what, slot, d, binding)?.map(ArgData::Owned))
            }
            _ => Err(dtype_mismatch(what, slot, data)),
        };
    }
    let Some(dims) = resolve_dims(what, &slot.name, &slot.shape, data.len(), binding)? else {
        return Ok(None);
    };
    Ok(Some(match data.le_bytes() {
        std::borrow::Cow::Borrowed(bytes) => ArgData::Borrowed(want, dims, bytes),
        std::borrow::Cow::Owned(bytes) => ArgData::Owned(TensorData {
            dtype: want,
            dims: dims.as_slice().to_vec(),
            bytes,
        }),
    }))
}

/// The error for typed host data whose dtype is not the declared one.
fn dtype_mismatch(what: What<'_>, slot: &ArgSlot, data: HostData<'_>) -> Error {
    let want = slot.shape.dtype();
    crate::host_data::dtype_error(format!(
        "{what}: input `{}` is declared {} ({want}) but got {} data; typed inputs are not \
         converted — pass a slice of {} (HostData::{}), or declare the input as {}",
        slot.name,
        slot.shape,
        data.dtype(),
        crate::host_data::rust_type_of(want),
        crate::host_data::variant_of(want),
        data.dtype(),
    ))
}

/// Run `compiled` with typed host data (explicit dims and dtypes).
pub(crate) fn run_typed(
    what: What<'_>,
    compiled: &CompiledGraph,
    prepared: &PreparedGraph,
    params: &[(String, Vec<f32>)],
    inputs: &[(&str, TensorData)],
) -> Result<Vec<TensorData>> {
    check_no_outputs(what, compiled)?;
    check_unique(what, inputs)?;
    for (name, _) in inputs {
        let known = compiled.slots().iter().any(|s| s.name == *name) || prepared.is_unused(name);
        if !known || name.starts_with("__arg") {
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
            check_typed_input(what, n, d, slot)?;
            let d = if d.dtype != slot.shape.dtype() {
                TensorData::from_f64_as(slot.shape.dtype(), &d.dims, &d.to_f64_vec())
            } else {
                d.clone()
            };
            Ok((n.to_string(), d))
        })
        .collect::<Result<_>>()?;
    let mut named: Vec<(&str, TensorView<'_>)> = converted
        .iter()
        .map(|(n, d)| (n.as_str(), d.view()))
        .collect();
    named.extend(owned.iter().map(|(n, d)| (n.as_str(), d.view())));
    named.extend(prepared.lifted.iter().map(|(n, d)| (n.as_str(), d.view())));
    compiled.run(&named).map_err(|e| Error::Runtime {
        message: format!("{what}: {e}"),
    })
}

/// `Err` when a name appears twice among the inputs: binding is by name, so all but
/// one of the values would be silently ignored.
fn check_unique<T>(what: What<'_>, inputs: &[(&str, T)]) -> Result<()> {
    // A few inputs (the usual case, on every run) are compared pairwise: no set to build.
    const PAIRWISE: usize = 16;
    let twice = if inputs.len() <= PAIRWISE {
        (1..inputs.len())
            .find(|&i| inputs[..i].iter().any(|(n, _)| *n == inputs[i].0))
            .map(|i| inputs[i].0)
    } else {
        let mut seen = std::collections::HashSet::new();
        inputs.iter().map(|(n, _)| *n).find(|n| !seen.insert(*n))
    };
    match twice {
        Some(name) => Err(Error::new(format!(
            "{what}: `{name}` is given twice in the inputs; inputs (and params passed as \
             inputs) are bound by name, so only one value could be used — pass every name once"
        ))),
        None => Ok(()),
    }
}

/// `Err` for a compiled graph without outputs (a run could only produce nothing).
fn check_no_outputs(what: What<'_>, compiled: &CompiledGraph) -> Result<()> {
    if compiled.output_shapes().is_empty() {
        return Err(Error::new(format!(
            "{what} has no outputs, so running it could only fail; give the graph at least \
             one output (GraphScope::set_outputs)"
        )));
    }
    Ok(())
}

/// `Err` unless typed input `d` is self-consistent (its bytes fill its dims) and can be
/// converted to `slot`'s dtype.
fn check_typed_input(what: What<'_>, name: &str, d: &TensorData, slot: &ArgSlot) -> Result<()> {
    let need = d
        .dims
        .iter()
        .try_fold(1usize, |n, &x| n.checked_mul(x))
        .and_then(|n| n.checked_mul(d.dtype.size_bytes()));
    if need != Some(d.bytes.len()) {
        let need = need.map_or("more than usize holds".to_string(), |n| format!("{n}"));
        return Err(Error::shape(format!(
            "{what}: input `{name}` has dims {:?} of {} ({need} bytes) but holds {} bytes; \
             build it with TensorData::from_f32/from_f64/from_f64_as so that data and dims agree",
            d.dims,
            d.dtype,
            d.bytes.len()
        )));
    }
    let want = slot.shape.dtype();
    if d.dtype != want && d.dtype.is_complex() != want.is_complex() {
        return Err(Error::dtype(format!(
            "{what}: input `{name}` is declared {} but got {} data; complex and real data do \
             not convert — pass {want} data",
            slot.shape, d.dtype
        )));
    }
    Ok(())
}

fn unknown_name(what: What<'_>, name: &str, slots: &[ArgSlot]) -> Error {
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
    Error::unknown_name(format!(
        "{what}: no input or param named `{name}` (inputs: {inputs:?}, params: {params:?}); check the spelling"
    ))
}

/// Convert a flat f32 slice into typed data for `slot`, binding dynamic dims from its
/// length. `Ok(None)` when the dims cannot be resolved yet (more than one unknown).
pub(crate) fn typed_from_f32(
    what: What<'_>,
    slot: &ArgSlot,
    data: &[f32],
    binding: &mut DimBinding,
) -> Result<Option<TensorData>> {
    let Some(dims) = resolve_dims(what, &slot.name, &slot.shape, data.len(), binding)? else {
        return Ok(None);
    };
    let dims = dims.as_slice();
    let t = match slot.shape.dtype() {
        rlx_ir::DType::F32 => TensorData::from_f32(dims, data),
        dt @ (rlx_ir::DType::BF16 | rlx_ir::DType::F16) => halves_from_f32(dt, dims, data),
        dt => {
            let v: Vec<f64> = data.iter().map(|&x| x as f64).collect();
            TensorData::from_f64_as(dt, dims, &v)
        }
    };
    Ok(Some(t))
}

/// f32 values stored as bf16 / f16, each rounded once to nearest-even from its f32 bits
/// (as PyTorch's `.to(torch.bfloat16)` rounds), through `half`'s slice conversion: loading
/// a 100M-parameter f32 checkpoint as bf16 spent ~1.5 s in the f64 staging copy and
/// per-element encode used before (40% of a W12 profile run). That path also rounded
/// wrongly just above a tie: `half`'s f64 → bf16 drops the low 32 bits of the f64 before
/// rounding, so f32 `0x3f80_8001` became bf16 `0x3f80` instead of `0x3f81`.
fn halves_from_f32(dt: rlx_ir::DType, dims: &[usize], data: &[f32]) -> TensorData {
    use half::slice::HalfFloatSliceExt;
    let bytes: Vec<u8> = if dt == rlx_ir::DType::BF16 {
        let mut h = vec![half::bf16::ZERO; data.len()];
        h.convert_from_f32_slice(data);
        h.iter().flat_map(|v| v.to_le_bytes()).collect()
    } else {
        let mut h = vec![half::f16::ZERO; data.len()];
        h.convert_from_f32_slice(data);
        h.iter().flat_map(|v| v.to_le_bytes()).collect()
    };
    TensorData::new(dt, dims, bytes).expect("2 bytes per element for the dims just resolved")
}

/// Concrete dims of `shape` for a flat buffer of `len` elements.
pub(crate) fn resolve_dims(
    what: What<'_>,
    name: &str,
    shape: &Shape,
    len: usize,
    binding: &mut DimBinding,
) -> Result<Option<Dims<'static>>> {
    // Saturating: a product past usize cannot equal any slice length, and reports below.
    let mut known = 1usize;
    // The distinct unbound symbols; past the second the dims cannot be resolved yet.
    let mut unknown: [Option<u32>; 2] = [None, None];
    let mut more_unknown = false;
    for d in shape.dims() {
        match d {
            Dim::Static(n) => known = known.saturating_mul(*n),
            Dim::Dynamic(s) => match binding.get(*s) {
                Some(n) => known = known.saturating_mul(n),
                None => match unknown {
                    [Some(a), _] if a == *s => {}
                    [_, Some(b)] if b == *s => {}
                    [None, _] => unknown[0] = Some(*s),
                    [_, None] => unknown[1] = Some(*s),
                    _ => more_unknown = true,
                },
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
    match unknown {
        _ if more_unknown => return Ok(None),
        [None, _] => {
            if known != len {
                return Err(Error::shape(format!(
                    "{what}: `{name}` is declared {shape} and needs {known} values, got {len}"
                )));
            }
        }
        [Some(s), None] => {
            let k = occurrences(s);
            let per = if known == 0 { 0 } else { len / known.max(1) };
            let n = if k == 1 {
                Some(per)
            } else {
                exact_root(per, k)
            };
            match n {
                Some(n) if n.checked_pow(k).and_then(|p| p.checked_mul(known)) == Some(len) => {
                    binding.set(s, n)
                }
                _ => {
                    return Err(Error::shape(format!(
                        "{what}: `{name}` is declared {shape}: {len} values do not fit (the static part holds {known} per dynamic step)"
                    )));
                }
            }
        }
        _ => return Ok(None),
    }
    let dims = shape.dims();
    let resolved = Dims::try_from_fn(dims.len(), |i| match dims[i] {
        Dim::Static(n) => Some(n),
        Dim::Dynamic(s) => binding.get(s),
    });
    Ok(Some(resolved.expect("all symbols bound")))
}

/// The integer `n` with `n^k == x`, if there is one (`k ≥ 2`). Constant time: a float
/// estimate corrected by one either way, with checked powers (no overflow, no search).
fn exact_root(x: usize, k: u32) -> Option<usize> {
    let guess = (x as f64).powf(1.0 / k as f64).round() as usize;
    [guess.saturating_sub(1), guess, guess.saturating_add(1)]
        .into_iter()
        .find(|n| n.checked_pow(k) == Some(x))
}

#[cfg(test)]
mod tests;
