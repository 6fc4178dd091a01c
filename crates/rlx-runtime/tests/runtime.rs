//! The registry, device selection, CompiledGraph argument checks, and the cache,
//! exercised with small in-test backends.

use rlx_compile::program::{BufId, BufKind};
use rlx_compile::{CompileOptions, Program};
use rlx_ir::{Activation, DType, Dim, DimBinding, Graph, Op, Shape, TensorData, TensorView};
use rlx_runtime::*;
use std::collections::HashMap;
use std::sync::Arc;

/// Runs programs kernel by kernel through the oracle (each kernel's standalone graph,
/// [`HostKernel`] without a CPU backend); serves the devices it is given. It runs
/// softmax whole on the CPU only, so the program a device receives shows whose
/// options it was compiled with.
struct OracleBackend {
    name: &'static str,
    devices: Vec<Device>,
    hardware: bool,
}

/// A program as its backend received it.
struct OracleExe(Program);

impl Executable for OracleExe {
    fn run(&self, args: &[TensorView<'_>]) -> RuntimeResult<Vec<TensorData>> {
        let p = &self.0;
        let mut binding = DimBinding::new();
        for ((_, shape), a) in p.args.iter().zip(args) {
            for (d, &n) in shape.dims().iter().zip(a.dims) {
                if let Dim::Dynamic(sym) = d {
                    binding.set(*sym, n);
                }
            }
        }
        let mut values: HashMap<BufId, TensorData> = HashMap::new();
        for (b, buf) in p.buffers.iter().enumerate() {
            if let BufKind::Arg(i) = buf.kind {
                values.insert(b, args[i].to_owned());
            }
        }
        for k in &p.kernels {
            let hk = HostKernel::with_backend(p, k, &binding, None)?;
            let ins: Vec<TensorView<'_>> = hk.inputs().iter().map(|b| values[b].view()).collect();
            let outs = hk.run(&ins)?;
            for (&b, v) in hk.outputs().iter().zip(outs) {
                values.insert(b, v);
            }
        }
        Ok(p.outputs.iter().map(|b| values[b].clone()).collect())
    }
    /// The kernels' labels, in order.
    fn explain(&self) -> String {
        let labels: Vec<String> = self.0.kernels.iter().map(|k| k.label()).collect();
        labels.join(" ")
    }
}

impl Backend for OracleBackend {
    fn name(&self) -> &'static str {
        self.name
    }
    fn devices(&self) -> &[Device] {
        &self.devices
    }
    fn is_available(&self, device: Device) -> bool {
        self.devices.contains(&device)
    }
    fn is_hardware(&self, _: Device) -> bool {
        self.hardware
    }
    fn compile_options(&self, device: Device) -> CompileOptions {
        CompileOptions {
            keep_whole: match device {
                Device::Cpu => vec!["softmax".into()],
                _ => Vec::new(),
            },
            ..Default::default()
        }
    }
    fn load(&self, device: Device, program: Program) -> RuntimeResult<Arc<dyn Executable>> {
        assert!(
            self.devices.contains(&device),
            "{device} is not served by {}",
            self.name
        );
        Ok(Arc::new(OracleExe(program)))
    }
}

fn register_all() {
    register_backend(Arc::new(OracleBackend {
        name: "test-cpu",
        devices: vec![Device::Cpu],
        hardware: true,
    }));
    // a software Vulkan-like backend: available, but never preferred
    register_backend(Arc::new(OracleBackend {
        name: "test-soft",
        devices: vec![Device::Vulkan],
        hardware: false,
    }));
}

fn relu_graph() -> Graph {
    let mut g = Graph::new("relu");
    let x = g.input(
        "x",
        Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(2)], DType::F32),
    );
    let w = g.param("w", Shape::new(&[2], DType::F32));
    let y = g
        .add_op(Op::Binary(rlx_ir::BinaryOp::Mul), vec![x, w])
        .unwrap();
    let r = g.add_op(Op::Activation(Activation::Relu), vec![y]).unwrap();
    g.set_outputs(vec![r]);
    g
}

#[test]
fn devices_are_listed_named_and_parsed() {
    assert_eq!(Device::all().len(), 16);
    assert_eq!(Device::all()[0], Device::Cpu);
    assert_eq!(Device::all()[15], Device::WebGpu);
    for d in Device::all() {
        assert_eq!(d.name().parse::<Device>().unwrap(), *d);
        assert_eq!(d.to_string(), d.name());
    }
    assert!(
        "quantum"
            .parse::<Device>()
            .unwrap_err()
            .contains("unknown device")
    );
    assert_eq!(Device::priority_order().len(), 16);
}

#[test]
fn software_backends_are_available_but_never_the_fastest() {
    register_all();
    assert!(is_available(Device::Cpu) && is_available(Device::Vulkan));
    assert!(!is_available(Device::Cuda));
    assert_eq!(available_devices(), vec![Device::Cpu, Device::Vulkan]);
    assert_eq!(fastest_device(), Device::Cpu);
    assert_eq!(fastest_device_for(&relu_graph()), Device::Cpu);
    let err = compile(Device::Tpu, &relu_graph())
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("TPU is not supported by rlx")
            && err.contains("not implemented")
            && err.contains("available here: CPU, Vulkan"),
        "{err}"
    );
}

#[test]
fn every_device_kind_says_whether_it_runs_and_how_to_get_it() {
    use rlx_runtime::Support;
    register_all();
    for &d in Device::all() {
        let msg = unavailable(d).to_string();
        assert!(msg.contains(d.how_to_enable()), "{d}: {msg}");
        match d.support() {
            Support::Runs => assert!(msg.contains("is not available in this build"), "{msg}"),
            Support::CompileTested => {
                assert!(msg.contains("cannot run graphs yet"), "{msg}");
                assert!(!is_available(d), "{d} must never be available");
            }
            _ => {
                assert!(msg.contains("not implemented"), "{d}: {msg}");
                assert!(!is_available(d), "{d} must never be available");
            }
        }
    }
    for d in [
        Device::Mlx,
        Device::Ane,
        Device::Tpu,
        Device::OpenGl,
        Device::WebGpu,
    ] {
        assert_eq!(d.support(), Support::NotImplemented, "{d}");
    }
    for d in [
        Device::Cpu,
        Device::Cuda,
        Device::Rocm,
        Device::Metal,
        Device::Vulkan,
        Device::Gpu,
    ] {
        assert_eq!(d.support(), Support::Runs, "{d}");
    }
}

#[test]
fn compiled_graph_checks_names_types_and_params() {
    register_all();
    let mut cg = CompiledGraph::new(Device::Cpu, &relu_graph()).unwrap();
    assert_eq!(cg.slots().len(), 2);
    let x = TensorData::from_f32(&[2, 2], &[1.0, -1.0, 2.0, 3.0]);
    let err = cg.run(&[("x", x.view())]).unwrap_err().to_string();
    assert!(
        err.contains("param `w`") && err.contains("bind it first"),
        "{err}"
    );
    let err = cg
        .set_param("v", TensorData::from_f32(&[2], &[1.0, 1.0]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no param `v`") && err.contains("[\"w\"]"),
        "{err}"
    );
    let err = cg
        .set_param("w", TensorData::from_f32(&[3], &[1.0; 3]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("declared [2] f32"), "{err}");
    cg.set_param("w", TensorData::from_f32(&[2], &[1.0, -2.0]))
        .unwrap();
    let out = cg.run(&[("x", x.view())]).unwrap();
    assert_eq!(out[0].to_f32_vec(), vec![1.0, 2.0, 2.0, 0.0]);
    // dynamic batch: any row count
    let x3 = TensorData::from_f32(&[3, 2], &[1.0; 6]);
    assert_eq!(cg.run(&[("x", x3.view())]).unwrap()[0].dims, vec![3, 2]);
    let err = cg.run(&[("y", x.view())]).unwrap_err().to_string();
    assert!(err.contains("no input or param named `y`"), "{err}");
    let bad = TensorData::from_f32(&[2, 3], &[1.0; 6]);
    let err = cg.run(&[("x", bad.view())]).unwrap_err().to_string();
    assert!(
        err.contains("declared [?0, 2] f32") && err.contains("[2, 3]"),
        "{err}"
    );
}

/// Positional runs of a prepared graph's lifted arguments (`run_lifted_into`,
/// `run_lifted`) give the results of runs by name; a wrong count or type, or a graph
/// with arguments of its own, gets the error of the run by the lifted names, and the
/// kept result list is emptied.
#[test]
fn positional_runs_of_lifted_arguments_equal_runs_by_name_and_report_the_same_errors() {
    register_all();
    let mut g = Graph::new("lifted");
    let a = g.input(lifted_arg_name(0), Shape::new(&[3], DType::F32));
    let b = g.input(lifted_arg_name(1), Shape::new(&[3], DType::F32));
    let s = g
        .add_op(Op::Binary(rlx_ir::BinaryOp::Sub), vec![a, b])
        .unwrap();
    let r = g.add_op(Op::Activation(Activation::Relu), vec![s]).unwrap();
    g.set_outputs(vec![r]);
    let cg = CompiledGraph::new(Device::Cpu, &g).unwrap();
    let x = TensorData::from_f32(&[3], &[1.0, -2.0, 5.0]);
    let y = TensorData::from_f32(&[3], &[0.5, 1.0, 7.0]);
    let named = [("__arg0", x.view()), ("__arg1", y.view())];
    let mut out = vec![HostOutput::F32(vec![9.0], vec![1])];
    cg.run_lifted_into(&[x.view(), y.view()], &mut out).unwrap();
    assert_eq!(out, cg.run_host(&named).unwrap());
    assert_eq!(out[0].clone().into_f32_vec(), vec![0.5, 0.0, 0.0]);
    let by_position = cg.run_lifted(&[x.view(), y.view()]).unwrap();
    assert_eq!(by_position, cg.run(&named).unwrap());
    let long = TensorData::from_f32(&[4], &[1.0; 4]);
    for bad in [vec![x.view()], vec![x.view(), long.view()]] {
        let pairs: Vec<(&str, TensorView<'_>)> = ["__arg0", "__arg1"]
            .into_iter()
            .zip(bad.iter().copied())
            .collect();
        let want = cg.run_host(&pairs).unwrap_err().to_string();
        let got = cg.run_lifted_into(&bad, &mut out).unwrap_err().to_string();
        assert_eq!(got, want);
        assert!(out.is_empty(), "{got}");
        assert_eq!(cg.run_lifted(&bad).unwrap_err().to_string(), want);
        out.push(HostOutput::F32(vec![9.0], vec![1]));
    }
    // A graph with inputs and params of its own takes no positional arguments.
    let own = CompiledGraph::new(Device::Cpu, &relu_graph()).unwrap();
    let w = TensorData::from_f32(&[2], &[1.0, 1.0]);
    let err = own
        .run_lifted_into(&[x.view(), w.view()], &mut out)
        .unwrap_err()
        .to_string();
    assert!(err.contains("no input or param named `__arg0`"), "{err}");
    assert!(out.is_empty());
}

#[test]
fn the_cache_counts_every_lookup_and_clears() {
    register_all();
    clear_cache();
    let g = relu_graph();
    let key = graph_key(&g, Device::Cpu);
    for _ in 0..3 {
        cache_get_or_compile_graph(key, &g, Device::Cpu, || CompiledGraph::new(Device::Cpu, &g))
            .unwrap();
    }
    assert_eq!(cache_stats(), (2, 1));
    assert_eq!(cache_len(), 1);
    assert!(cache_contains(key));
    let other = graph_key(&g, Device::Vulkan);
    assert_ne!(key, other);
    cache_get_or_compile_graph(other, &g, Device::Vulkan, || {
        CompiledGraph::new(Device::Vulkan, &g)
    })
    .unwrap();
    let why = cache_last_miss().unwrap();
    assert!(
        why.contains("compiled for CPU but is now requested on Vulkan"),
        "{why}"
    );
    clear_cache();
    assert_eq!((cache_stats(), cache_len()), ((0, 0), 0));
}

#[test]
fn a_full_cache_evicts_only_its_least_recently_used_entry() {
    register_all();
    clear_cache();
    let g = relu_graph();
    let cap = cache_capacity() as u64;
    for k in 0..cap + 1 {
        cache_get_or_compile(k, || CompiledGraph::new(Device::Cpu, &g)).unwrap();
    }
    assert_eq!(cache_len() as u64, cap, "one entry out, the new one in");
    assert!(!cache_contains(0) && cache_contains(1) && cache_contains(cap));
    clear_cache();
}

/// `softmax(x)` over the rows of a 2×3 input.
fn softmax_graph() -> Graph {
    let mut g = Graph::new("probs");
    let x = g.input("x", Shape::new(&[2, 3], DType::F32));
    let p = g.add_op(Op::Softmax { axis: 1 }, vec![x]).unwrap();
    g.set_outputs(vec![p]);
    g
}

#[test]
fn each_device_receives_the_program_compiled_with_its_backends_options() {
    register_all();
    let g = softmax_graph();
    // The CPU's options keep softmax whole: one row kernel.
    let cpu = compile(Device::Cpu, &g).unwrap();
    assert_eq!(cpu.explain(), "softmax");
    // Vulkan's keep nothing: softmax arrives decomposed into reductions.
    let vulkan = compile(Device::Vulkan, &g).unwrap();
    let kernels = vulkan.explain();
    assert!(
        !kernels.contains("softmax")
            && kernels.contains("reduce_max")
            && kernels.contains("reduce_sum"),
        "{kernels}"
    );
    // Both programs compute softmax: rows [1, 2, 3] and [0, 0, ln 2] (f64 references).
    let x = TensorData::from_f32(&[2, 3], &[1.0, 2.0, 3.0, 0.0, 0.0, 2f32.ln()]);
    let e = [(-2f64).exp(), (-1f64).exp(), 1.0];
    let sum: f64 = e.iter().sum();
    let want = [e[0] / sum, e[1] / sum, e[2] / sum, 0.25, 0.25, 0.5];
    for exe in [&cpu, &vulkan] {
        let got = exe.run(&[x.view()]).unwrap()[0].to_f32_vec();
        for (g, w) in got.iter().zip(want) {
            assert!((*g as f64 - w).abs() < 1e-6, "{got:?} vs {want:?}");
        }
    }
}

#[test]
fn a_host_kernel_is_compiled_with_the_cpu_options_of_the_backend_it_is_given() {
    // The kernel comes from a program that decomposed nothing either; its standalone
    // graph is a softmax, which the backend's CPU options keep whole.
    let p = rlx_compile::compile(
        &softmax_graph(),
        &CompileOptions {
            keep_whole: vec!["softmax".into()],
            ..Default::default()
        },
    )
    .unwrap();
    let backend = OracleBackend {
        name: "test-host",
        devices: vec![Device::Cpu],
        hardware: true,
    };
    let hk =
        HostKernel::with_backend(&p, &p.kernels[0], &DimBinding::new(), Some(&backend)).unwrap();
    assert_eq!(hk.engine(), &HostEngine::Backend("test-host"));
    assert_eq!(hk.explain(), "softmax");
}

/// A backend that must never be asked anything about a graph.
struct Untouchable;

impl Backend for Untouchable {
    fn name(&self) -> &'static str {
        "untouchable"
    }
    fn devices(&self) -> &[Device] {
        &[Device::Cpu]
    }
    fn is_available(&self, _: Device) -> bool {
        true
    }
    fn compile_options(&self, _: Device) -> CompileOptions {
        panic!("asked for compile options of a malformed graph");
    }
    fn load(&self, _: Device, _: Program) -> RuntimeResult<Arc<dyn Executable>> {
        panic!("handed a program compiled from a malformed graph");
    }
}

#[test]
fn a_malformed_graph_is_refused_naming_it_before_any_backend_sees_it() {
    let mut g = Graph::new("bent");
    let x = g.input("x", Shape::new(&[2], DType::F32));
    // A node claiming a result type its operand does not give.
    let r = g.add_node(
        Op::Activation(Activation::Relu),
        vec![x],
        Shape::new(&[3], DType::F32),
    );
    g.set_outputs(vec![r]);
    let e = Untouchable
        .compile(Device::Cpu, &g)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("graph `bent` is malformed") && e.contains("claims result type [3] f32"),
        "{e}"
    );
    let e = compile_program(&g, &CompileOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("graph `bent` is malformed"), "{e}");
    register_all();
    let e = CompiledGraph::new(Device::Cpu, &g).unwrap_err().to_string();
    assert!(e.contains("graph `bent` is malformed"), "{e}");
}
