//! Reading results: compile (through the per-thread cache) and run.

use crate::exec::Dims;
use crate::tensor::Tensor;
use crate::{Error, Result};
use rlx_ir::{DType, Graph, NodeId, Op, TensorData, TensorView};
use rlx_runtime::{CompiledGraph, HostOutput, Lifted, Prepared};
use std::sync::Arc;
use std::sync::Once;

pub use rlx_runtime::{Device, cache_compile_count, cache_last_miss, cache_stats, clear_cache};

static REGISTER: Once = Once::new();

thread_local! {
    /// The lifted-argument list of the previous read on this thread, kept for the next.
    static LIFTED: std::cell::Cell<Vec<Lifted>> = const { std::cell::Cell::new(Vec::new()) };
    /// The (emptied) result list of the previous read on this thread, kept for the next.
    static HOST_OUT: std::cell::Cell<Vec<HostOutput>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Register the backends this build's features enable (idempotent, cheap after the first call).
pub(crate) fn ensure_backends() {
    REGISTER.call_once(|| {
        crate::logging::init_from_env();
        rlx_runtime::register_backend(std::sync::Arc::new(rlx_cpu::CpuBackend));
        // CUDA through run-time loaded libraries (available where a driver, NVRTC and a GPU are).
        #[cfg(feature = "eval-cuda")]
        rlx_runtime::register_backend(std::sync::Arc::new(rlx_cuda::CudaBackend));
        // ROCm through run-time loaded HIP libraries (available where they report an AMD GPU).
        #[cfg(feature = "eval-rocm")]
        rlx_runtime::register_backend(std::sync::Arc::new(rlx_rocm::RocmBackend));
        // Gpu/Vulkan/Metal/DirectX/WebGpu through wgpu (available where an adapter is).
        #[cfg(feature = "eval-gpu")]
        rlx_runtime::register_backend(std::sync::Arc::new(rlx_wgpu::WgpuBackend));
    });
}

/// Whether `device` can run graphs in this build and on this host.
pub fn is_available(device: Device) -> bool {
    ensure_backends();
    rlx_runtime::is_available(device)
}

/// Every available device, CPU first.
pub fn available_devices() -> Vec<Device> {
    ensure_backends();
    rlx_runtime::available_devices()
}

/// The highest-priority available device.
pub fn fastest_device() -> Device {
    ensure_backends();
    rlx_runtime::fastest_device()
}

/// The device `graph` runs on by default (`RLX_FORCE_DEVICE` overrides).
///
/// When the choice is not the device asked for — `RLX_FORCE_DEVICE` names a device that
/// is unknown or unavailable, or the fastest device is passed over (a small graph stays
/// on the CPU, or the fastest backend does not support one of its ops) — a `debug` event
/// with target `rlx::device` says what was chosen and why (`RLX_LOG=rlx::device=debug`).
pub fn fastest_device_for(graph: &Graph) -> Device {
    ensure_backends();
    let chosen = rlx_runtime::fastest_device_for(graph);
    if tracing::enabled!(target: "rlx::device", tracing::Level::DEBUG) {
        log_device_choice(graph, chosen);
    }
    chosen
}

/// The `rlx::device` debug event for a device choice that is a fallback.
fn log_device_choice(graph: &Graph, chosen: Device) {
    if let Ok(asked) = std::env::var("RLX_FORCE_DEVICE") {
        match asked.parse::<Device>() {
            Ok(d) if d == chosen => {}
            Ok(d) => tracing::debug!(
                target: "rlx::device",
                graph = %graph.name,
                asked = %d,
                chosen = %chosen,
                "RLX_FORCE_DEVICE asks for {d}, which is not available; falling back to {chosen}"
            ),
            Err(_) => tracing::debug!(
                target: "rlx::device",
                graph = %graph.name,
                asked = %asked,
                chosen = %chosen,
                "RLX_FORCE_DEVICE={asked:?} names no device; ignoring it and using {chosen}"
            ),
        }
        return;
    }
    let fastest = rlx_runtime::fastest_device();
    if fastest != chosen {
        tracing::debug!(
            target: "rlx::device",
            graph = %graph.name,
            fastest = %fastest,
            chosen = %chosen,
            "graph `{}` runs on {chosen} instead of the fastest device {fastest} (too small to \
             pay for the transfer, or an op {fastest} does not support)",
            graph.name
        );
    }
}

/// Compile `prepared` for `device` through the per-thread cache.
pub(crate) fn cached(prepared: &Prepared, device: Device) -> Result<rlx_runtime::CachedGraph> {
    check_available(device)?;
    rlx_runtime::cache_get_or_compile_prepared(
        prepared.key,
        prepared.structure_key,
        &prepared.graph,
        device,
        || CompiledGraph::new(device, &prepared.graph),
    )
    .map_err(Error::from)
}

/// Check that `device` can run graphs here (registering the backends first).
fn check_available(device: Device) -> Result<()> {
    ensure_backends();
    if !rlx_runtime::is_available(device) {
        return Err(Error::DeviceUnavailable {
            message: rlx_runtime::unavailable(device).to_string(),
        });
    }
    Ok(())
}

impl Tensor {
    /// Compute this tensor on `device` (or read it back when already computed).
    ///
    /// The graph stays locked for the whole evaluation: the cache key is hashed from
    /// the graph in place (no extracted copy unless a compile is needed), the lifted
    /// arguments borrow constant payloads from it (copying them out would copy every
    /// large constant on each read), and the value is stored under the same lock. Other
    /// threads using this graph wait; concurrent runs of one program go through
    /// `Func::jit` instead.
    ///
    /// `device: None` runs on the fastest device for the graph, chosen under the same
    /// lock (one lock per read instead of three).
    fn materialize(&self, device: Option<Device>) -> Result<Arc<TensorData>> {
        match self.read(device, false)? {
            Read::Stored(v) => Ok(v),
            Read::F32(v) => unreachable!("a read for a stored value returned {} f32s", v.len()),
        }
    }

    /// [`Tensor::materialize`]'s work; with `f32_host`, an f32 result computed now is
    /// returned as the vector the backend wrote (the stored value holds a copy), so that
    /// `to_vec` makes no second copy.
    fn read(&self, device: Option<Device>, f32_host: bool) -> Result<Read> {
        let mut guard = self.cell.state();
        let st = &mut *guard;
        let device = device.unwrap_or_else(|| fastest_device_for(&st.graph));
        if let Some(d) = raw_constant(&st.graph, self.id) {
            return Ok(Read::Stored(Arc::new(d)));
        }
        let (graph, realized) = (&st.graph, &st.realized);
        let outputs = [self.id];
        let is_realized = |n: NodeId| realized.contains_key(&n);
        // This thread's list from its previous read (no allocation per read); a read
        // nested in this one (none today) would find it taken and start a new one.
        let mut lifted = LIFTED.take();
        let (key, structure_key) =
            rlx_runtime::prepare_keys_into(graph, &outputs, &is_realized, device, &mut lifted);
        // One look at the cache when the program is cached (it was compiled for
        // `device`, so the device is available); otherwise check the device (and
        // register the backends) before the lookup that compiles.
        let compiled = match rlx_runtime::cache_get_keys(key, structure_key, &graph.name) {
            Some(c) => c,
            None => {
                check_available(device)?;
                rlx_runtime::cache_get_or_compile_keys(
                    key,
                    structure_key,
                    &graph.name,
                    device,
                    || {
                        let p = rlx_runtime::prepare(graph, &outputs, &is_realized, device);
                        debug_assert_eq!((p.key, p.structure_key), (key, structure_key));
                        Ok((CompiledGraph::new(device, &p.graph)?, p.graph))
                    },
                )
                .map_err(Error::from)?
            }
        };
        if let Some(v) = realized.get(&self.id) {
            LIFTED.set(lifted);
            return Ok(Read::Stored(v.clone()));
        }
        let run = with_lifted_args(&lifted, graph, realized, |args| {
            let c = compiled.borrow();
            // The prepared graph has exactly one output: this tensor.
            if f32_host {
                // This thread's result list from its previous read (no allocation per
                // read); a nested read would find it taken and start a new one.
                let mut out = HOST_OUT.take();
                let r = c.run_lifted_into(args, &mut out).map(|()| {
                    let first = out.pop().expect("one output");
                    debug_assert!(out.is_empty(), "a prepared graph has one output");
                    match first {
                        // The stored value is a copy (in a spare allocation of this
                        // thread); the result's dims vector goes back into the list, where
                        // the backend writes the next read's dims (`run_host_into`).
                        HostOutput::F32(v, dims) => {
                            let value = crate::tensor::pool::f32_value(&dims, &v);
                            out.push(HostOutput::F32(Vec::new(), dims));
                            Ran::F32(value, v)
                        }
                        other => Ran::Other(other),
                    }
                });
                HOST_OUT.set(out);
                r
            } else {
                c.run_lifted(args).map(|o| {
                    Ran::Other(HostOutput::Data(o.into_iter().next().expect("one output")))
                })
            }
        });
        LIFTED.set(lifted);
        let output = run.map_err(|e| {
            // Rare path: extract the program to see whether it reads graph inputs.
            let p = rlx_runtime::prepare(graph, &outputs, &is_realized, device);
            let has_inputs = p
                .graph
                .input_names()
                .iter()
                .any(|n| !p.lifted.iter().any(|(l, _)| l == n));
            if has_inputs || !p.graph.param_names().is_empty() {
                Error::new(format!(
                    "cannot read a tensor that depends on graph inputs or params without their data ({e}); build a Func (Func::from_graph) and call run with the inputs"
                ))
            } else {
                Error::from(e)
            }
        })?;
        // The stored value takes a spare allocation of this thread when there is one.
        let (value, read) = match output {
            Ran::F32(value, v) => (value, Read::F32(v)),
            Ran::Other(other) => {
                let v = crate::tensor::pool::value(other.into_data());
                (v.clone(), Read::Stored(v))
            }
        };
        st.realized.insert(self.id, value);
        Ok(read)
    }

    /// Whether this tensor's value has been computed and stored (later expressions that
    /// use it read the stored value instead of recomputing its history).
    pub fn is_realized(&self) -> bool {
        self.cell.state().realized.contains_key(&self.id)
    }

    /// The computed value with its dtype and dims (compiles through the cache).
    pub fn try_to_data(&self) -> Result<TensorData> {
        Ok((*self.materialize(None)?).clone())
    }

    /// [`Tensor::try_to_data`] on an explicit device.
    pub fn try_to_data_on(&self, device: Device) -> Result<TensorData> {
        Ok((*self.materialize(Some(device))?).clone())
    }

    /// The computed value with its dtype and dims. Panics on failure.
    #[track_caller]
    pub fn to_data(&self) -> TensorData {
        self.try_to_data().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Compute and read back as f32 on the fastest device for this graph.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let a = Tensor::from_vec(vec![1.0, 2.0, 3.0], [3]);
    /// let b = Tensor::ones([3]);
    /// assert_eq!((&a + &b).relu().to_vec(), vec![2.0, 3.0, 4.0]);
    /// ```
    #[track_caller]
    pub fn to_vec(&self) -> Vec<f32> {
        self.try_to_vec().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::to_vec`] returning an error instead of panicking.
    pub fn try_to_vec(&self) -> Result<Vec<f32>> {
        Ok(self.read(None, true)?.into_f32_vec())
    }

    /// Compute on `device` and read back as f32.
    #[track_caller]
    pub fn to_vec_on(&self, device: Device) -> Vec<f32> {
        self.try_to_vec_on(device).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::to_vec_on`] returning an error.
    pub fn try_to_vec_on(&self, device: Device) -> Result<Vec<f32>> {
        Ok(self.read(Some(device), true)?.into_f32_vec())
    }

    /// Compute now (same as [`Tensor::to_vec`]); later expressions reuse the value.
    #[track_caller]
    pub fn realize(&self) -> Vec<f32> {
        self.to_vec()
    }

    /// Compute now on `device`.
    #[track_caller]
    pub fn realize_on(&self, device: Device) -> Vec<f32> {
        self.to_vec_on(device)
    }

    /// The single element. Panics unless the tensor has exactly one element.
    #[track_caller]
    pub fn item(&self) -> f32 {
        self.try_item().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::item`] returning an error.
    pub fn try_item(&self) -> Result<f32> {
        let v = self.try_to_vec()?;
        if v.len() != 1 {
            return Err(Error::new(format!(
                "item: the tensor has {} elements ({}); item() needs exactly one — reduce it first (e.g. .sum_all())",
                v.len(),
                self.shape()
            )));
        }
        Ok(v[0])
    }

    /// Read back as f64 (any real dtype converts).
    #[track_caller]
    pub fn to_vec_f64(&self) -> Vec<f64> {
        self.to_data().to_f64_vec()
    }

    /// Read back as i64: integer dtypes exactly, float-encoded indices (argmax) truncated.
    #[track_caller]
    pub fn to_vec_i64(&self) -> Vec<i64> {
        self.to_data().to_i64_vec()
    }

    /// Read back as i32.
    #[track_caller]
    pub fn to_vec_i32(&self) -> Vec<i32> {
        self.to_data()
            .to_i64_vec()
            .into_iter()
            .map(|v| v as i32)
            .collect()
    }

    /// Read back as bool (non-zero is true).
    #[track_caller]
    pub fn to_vec_bool(&self) -> Vec<bool> {
        self.to_data().to_bool_vec()
    }

    /// Pick a device explicitly: `t.on(Device::Cpu).to_vec()`.
    pub fn on(&self, device: Device) -> Materialize<'_> {
        Materialize {
            tensor: self,
            device,
        }
    }

    /// What the compiler does for this tensor on its default device.
    pub fn explain(&self) -> String {
        match self.compiled_for_default_device() {
            Ok(c) => c.borrow().explain(),
            Err(e) => format!("cannot compile: {e}"),
        }
    }

    /// The cached program that computes this tensor on its default device (compiled
    /// now if the cache does not hold it).
    pub(crate) fn compiled_for_default_device(&self) -> Result<rlx_runtime::CachedGraph> {
        let device = fastest_device_for(&self.cell.state().graph);
        let prepared = {
            let st = self.cell.state();
            rlx_runtime::prepare(
                &st.graph,
                &[self.id],
                &|n| st.realized.contains_key(&n),
                device,
            )
        };
        cached(&prepared, device)
    }
}

/// What a read's run produced.
enum Ran {
    /// An f32 host result: its stored value (a copy) and the vector the backend wrote.
    F32(Arc<TensorData>, Vec<f32>),
    /// Any other result.
    Other(HostOutput),
}

/// The result of [`Tensor::read`].
enum Read {
    /// The stored value (computed before, or now in a form other than a host f32 vector).
    Stored(Arc<TensorData>),
    /// An f32 result computed now, as the backend wrote it (the stored value is a copy).
    F32(Vec<f32>),
}

impl Read {
    fn into_f32_vec(self) -> Vec<f32> {
        match self {
            Read::Stored(v) => v.to_f32_vec(),
            Read::F32(v) => v,
        }
    }
}

/// The payload when node `id` is a plain constant (no compile, no cache).
fn raw_constant(graph: &Graph, id: NodeId) -> Option<TensorData> {
    let node = graph.node(id);
    match &node.op {
        Op::Constant { data } => {
            let dims = node.shape.static_dims()?;
            TensorData::new(node.shape.dtype(), &dims, data.clone()).ok()
        }
        _ => None,
    }
}

/// Lifted arguments passed on the stack by [`with_lifted_args`].
const INLINE_LIFTED: usize = 4;

/// Filler for the unused entries of the stack arrays of [`with_lifted_args`].
const EMPTY_VIEW: TensorView<'static> = TensorView {
    dtype: DType::F32,
    dims: &[],
    bytes: &[],
};

/// Call `f` with the views of the lifted arguments of a prepared graph (argument `i`,
/// named `__arg{i}` there, is `views[i]`), borrowed from the source graph's constant
/// payloads and the realized values: copying them out would copy every large constant on
/// each read. Up to [`INLINE_LIFTED`] arguments live on the stack (an eager read of a
/// small expression allocates nothing here).
pub(crate) fn with_lifted_args<R>(
    lifted: &[Lifted],
    graph: &Graph,
    realized: &crate::tensor::IdMap<NodeId, Arc<TensorData>>,
    f: impl FnOnce(&[TensorView<'_>]) -> R,
) -> R {
    // `(dtype, dims, bytes)` of argument `i`.
    let part = |i: usize| -> (DType, Dims<'_>, &[u8]) {
        match lifted[i] {
            Lifted::Constant(id) => {
                let node = graph.node(id);
                let Op::Constant { data } = &node.op else {
                    unreachable!("lifted constants are constants")
                };
                (node.shape.dtype(), Dims::of_static(&node.shape), data)
            }
            Lifted::Realized(id) => {
                let d = &realized[&id];
                (d.dtype, Dims::Borrowed(&d.dims), &d.bytes)
            }
        }
    };
    let n = lifted.len();
    if n <= INLINE_LIFTED {
        // Two passes over the arguments only (no filler entries built): their dims
        // first, which the views then borrow.
        const NO_DIMS: Dims<'static> = Dims::Borrowed(&[]);
        let mut dims = [NO_DIMS; INLINE_LIFTED];
        let mut rest: [(DType, &[u8]); INLINE_LIFTED] = [(DType::F32, &[]); INLINE_LIFTED];
        for (i, (d, r)) in dims.iter_mut().zip(rest.iter_mut()).take(n).enumerate() {
            let (dtype, shape, bytes) = part(i);
            *d = shape;
            *r = (dtype, bytes);
        }
        let mut views = [EMPTY_VIEW; INLINE_LIFTED];
        for (v, (d, &(dtype, bytes))) in views.iter_mut().zip(dims.iter().zip(&rest)).take(n) {
            *v = TensorView {
                dtype,
                dims: d.as_slice(),
                bytes,
            };
        }
        f(&views[..n])
    } else {
        let parts: Vec<(DType, Dims<'_>, &[u8])> = (0..n).map(part).collect();
        let views: Vec<TensorView<'_>> = parts
            .iter()
            .map(|(dtype, dims, bytes)| TensorView {
                dtype: *dtype,
                dims: dims.as_slice(),
                bytes,
            })
            .collect();
        f(&views)
    }
}

/// Fluent device selector returned by [`Tensor::on`].
#[derive(Debug)]
pub struct Materialize<'a> {
    tensor: &'a Tensor,
    device: Device,
}

impl Materialize<'_> {
    /// Compute on the chosen device and read back as f32.
    #[track_caller]
    pub fn to_vec(self) -> Vec<f32> {
        self.tensor.to_vec_on(self.device)
    }
}

#[cfg(test)]
mod tests {
    use crate::{Tensor, cache_compile_count, cache_stats};

    /// Eager reads with new data every call reuse one compiled program per structure and
    /// this thread's buffers (the lifted-argument list, the executor's buffer tables):
    /// every call must still read its own data. Two structures alternate — two lifted
    /// arguments (passed on the stack) and six (more than the stack holds) — so a list
    /// or table left over from the other structure would show as a wrong value.
    #[test]
    fn eager_reads_with_new_data_never_recompile_and_never_see_another_calls_data() {
        let compiles = cache_compile_count();
        for i in 0..30 {
            let x = i as f32;
            let a = Tensor::from_vec(vec![x, -x, 2.0 * x], [3]);
            let b = Tensor::from_vec(vec![0.5, 1.5, -x], [3]);
            assert_eq!(
                (&a + &b).relu().to_vec(),
                vec![x + 0.5, (1.5 - x).max(0.0), x]
            );
            let terms: Vec<Tensor> = (0..6)
                .map(|k| Tensor::from_vec(vec![x + k as f32, k as f32, -1.0], [3]))
                .collect();
            let sum = terms[1..].iter().fold(terms[0].clone(), |s, t| &s + t);
            assert_eq!(sum.to_vec(), vec![6.0 * x + 15.0, 15.0, -6.0]);
        }
        assert_eq!(
            cache_compile_count() - compiles,
            2,
            "one compile per structure, none for new data"
        );
    }

    /// Eager reads whose shape changes from call to call (pooled cells and cached
    /// programs reused across them) compile once per shape and read their own data;
    /// mismatched shapes are an error naming both shapes, and the next read is fine.
    #[test]
    fn eager_reads_of_changing_shapes_compile_per_shape_and_never_mix_data() {
        let compiles = cache_compile_count();
        for i in 0..12 {
            let n = [3, 5, 2][i % 3];
            let a: Vec<f32> = (0..n).map(|k| (i * 10 + k) as f32).collect();
            let b: Vec<f32> = (0..n).map(|k| -(k as f32)).collect();
            let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| (x + y).max(0.0)).collect();
            let ta = Tensor::from_vec(a, [n]);
            let tb = Tensor::from_vec(b, [n]);
            assert_eq!((&ta + &tb).relu().to_vec(), want, "call {i}, shape [{n}]");
            if i == 4 {
                let other = Tensor::from_vec(vec![1.0; 4], [4]);
                let e = ta
                    .try_binary(rlx_ir::BinaryOp::Add, (&other).into())
                    .unwrap_err()
                    .to_string();
                assert!(e.contains("[5]") && e.contains("[4]"), "{e}");
            }
        }
        assert_eq!(cache_compile_count() - compiles, 3, "one compile per shape");
    }

    /// Eager reads that alternate the shape (rank 1 and 2), the dtype, broadcasting and
    /// the op on one thread each get their own program and their own result dims: the
    /// result list's dims vector handed back by one read and reused by the next never
    /// leaves another read's dims behind, and no read is served a program compiled for
    /// another shape, dtype or op.
    #[test]
    fn eager_reads_alternating_shape_dtype_broadcast_and_op_get_their_own_dims_and_values() {
        use rlx_ir::DType;
        for i in 0..8 {
            let x = i as f32;
            let a = Tensor::from_vec(vec![x, -1.0, 2.0, -x, 0.5, 3.0], [2, 3]);
            let b = Tensor::from_vec(vec![1.0, 1.0, -4.0], [3]);
            let c = Tensor::from_vec(vec![x, -2.0, 0.25], [3]);
            let wide = (&a + &b).relu();
            let flat = (&c * &b).relu();
            let diff = (&c - &b).relu();
            let doubled = &c.cast(DType::F64) + &c.cast(DType::F64);
            assert_eq!(
                wide.to_vec(),
                vec![x + 1.0, 0.0, 0.0, (1.0 - x).max(0.0), 1.5, 0.0]
            );
            assert_eq!(flat.to_vec(), vec![x, 0.0, 0.0]);
            assert_eq!(diff.to_vec(), vec![(x - 1.0).max(0.0), 0.0, 4.25]);
            assert_eq!(doubled.to_vec_f64(), vec![2.0 * x as f64, -4.0, 0.5]);
            // The stored values keep their own dims after later reads of other ranks.
            assert_eq!(wide.to_data().dims, vec![2, 3]);
            assert_eq!(flat.to_data().dims, vec![3]);
            assert_eq!(doubled.to_data().dtype, DType::F64);
        }
    }

    /// A read of data seen before is a cache hit by key (no miss, no compile), and so is
    /// a second read of one tensor (its stored value is returned).
    #[test]
    fn rereading_seen_data_is_a_hit_without_a_compile() {
        let read = |v: f32| {
            let a = Tensor::from_vec(vec![v, 1.0, 2.0], [3]);
            (&a * &a).to_vec()
        };
        assert_eq!(read(3.0), vec![9.0, 1.0, 4.0]);
        let (hits, misses) = cache_stats();
        let compiles = cache_compile_count();
        assert_eq!(read(3.0), vec![9.0, 1.0, 4.0]);
        assert_eq!(cache_stats(), (hits + 1, misses));
        let a = Tensor::from_vec(vec![-1.0, 4.0, 0.5], [3]);
        let y = &a * &a;
        assert_eq!(y.to_vec(), vec![1.0, 16.0, 0.25]);
        let (hits, misses) = cache_stats();
        assert_eq!(y.to_vec(), vec![1.0, 16.0, 0.25]);
        assert_eq!(cache_stats(), (hits + 1, misses));
        assert_eq!(cache_compile_count(), compiles);
    }
}
