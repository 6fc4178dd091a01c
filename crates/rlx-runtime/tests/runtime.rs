//! The registry, device selection, CompiledGraph argument checks, and the cache,
//! exercised with small in-test backends.

use rlx_ir::{Activation, DType, Dim, Graph, Op, Shape, TensorData, TensorView, interp};
use rlx_runtime::*;
use std::sync::Arc;

/// Runs graphs through the oracle; serves the devices it is given.
struct OracleBackend {
    name: &'static str,
    devices: Vec<Device>,
    hardware: bool,
}

struct OracleExe(Graph);

impl Executable for OracleExe {
    fn run(&self, args: &[TensorView<'_>]) -> RuntimeResult<Vec<TensorData>> {
        let names: Vec<String> = arg_order(&self.0)
            .into_iter()
            .map(|id| match &self.0.node(id).op {
                Op::Input { name } | Op::Param { name } => name.clone(),
                _ => unreachable!(),
            })
            .collect();
        let owned: Vec<TensorData> = args.iter().map(|a| a.to_owned()).collect();
        let named: Vec<(&str, &TensorData)> =
            names.iter().map(String::as_str).zip(&owned).collect();
        Ok(interp::run_refs(&self.0, &named)?)
    }
    fn explain(&self) -> String {
        format!("oracle: {} nodes", self.0.len())
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
    fn compile(&self, _: Device, graph: &Graph) -> RuntimeResult<Arc<dyn Executable>> {
        Ok(Arc::new(OracleExe(graph.clone())))
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
    assert_eq!(Device::Rocm.support(), Support::CompileTested);
    for d in [
        Device::Cpu,
        Device::Cuda,
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
