//! The oracle interpreter: executes any [`Graph`] op by op on the host.
//!
//! It *defines* what every op means. It is written for obviousness, not speed:
//! real floats are computed in `f64` and rounded to the node's dtype on store
//! (so `f16`/`bf16` results are correctly rounded), integers in `i64` with
//! wrap-around on store. Every backend is tested against it.

mod conv;
pub use conv::{ConvGeom, PoolGeom, conv_geometry, pool_geometry};
mod elementwise;
mod fft;
mod index;
mod linalg;
mod movement;
mod nn;
mod reduce;
mod scaled;

use crate::{DimBinding, Graph, IrError, IrResult, Op, Shape, TensorData};

/// The oracle's scalar rules, shared with backends that evaluate element by element
/// (the CPU executor calls them instead of keeping copies).
pub use elementwise::{
    activation_f64, activation_i64, binary_i64, float_to_int, int_for_float, round_float, wrap_int,
};

/// Run `graph` with its inputs and params bound by name; returns one value per output.
///
/// Dynamic dims are bound from the dims of the supplied data.
pub fn run(graph: &Graph, inputs: &[(&str, TensorData)]) -> IrResult<Vec<TensorData>> {
    let refs: Vec<(&str, &TensorData)> = inputs.iter().map(|(n, d)| (*n, d)).collect();
    run_refs(graph, &refs)
}

/// [`run`] with borrowed data.
pub fn run_refs(graph: &Graph, inputs: &[(&str, &TensorData)]) -> IrResult<Vec<TensorData>> {
    let values = run_all(graph, inputs)?;
    Ok(graph
        .outputs
        .iter()
        .map(|o| values[o.index()].clone().expect("output computed"))
        .collect())
}

/// Run `graph` and return the value of every node that the outputs depend on
/// (`None` for nodes they do not need).
pub fn run_all(graph: &Graph, inputs: &[(&str, &TensorData)]) -> IrResult<Vec<Option<TensorData>>> {
    let binding = bind_dims(graph, inputs)?;
    crate::DimGuards::from_graph(graph).check(&binding)?;
    let needed = crate::guard::live_nodes(graph);
    let mut values: Vec<Option<TensorData>> = vec![None; graph.len()];
    for node in graph.nodes() {
        if !needed[node.id.index()] {
            continue;
        }
        let out_shape = concrete(&node.shape, &binding, &node.op)?;
        // Ask the allocator first, so a value too large for memory is an error here
        // instead of an abort inside the op (the op's own `vec!` cannot fail softly).
        let bytes = out_shape.size_bytes().unwrap_or(usize::MAX);
        if Vec::<u8>::new().try_reserve_exact(bytes).is_err() {
            return Err(IrError::out_of_memory(
                node.op.name(),
                format!(
                    "out of memory: the value {out_shape} takes {bytes} bytes ({}), more than can be allocated",
                    crate::human_bytes(bytes)
                ),
            )
            .at(node.id));
        }
        let value = match &node.op {
            Op::Input { name } | Op::Param { name } => {
                let data = lookup(inputs, name, &node.op)?;
                if data.dims != out_shape.static_dims().unwrap() {
                    return Err(IrError::new(
                        node.op.name(),
                        format!(
                            "`{name}` is declared {} but was given data of dims {:?}",
                            node.shape, data.dims
                        ),
                    )
                    .at(node.id));
                }
                if data.dtype != node.shape.dtype() {
                    let v = data.to_f64_vec();
                    TensorData::from_f64_as(node.shape.dtype(), &data.dims, &v)
                } else {
                    data.clone()
                }
            }
            Op::Constant { data } => TensorData::new(
                node.shape.dtype(),
                &out_shape.static_dims().unwrap(),
                data.clone(),
            )
            .map_err(|e| e.at(node.id))?,
            op => {
                let args: Vec<&TensorData> = node
                    .inputs
                    .iter()
                    .map(|i| {
                        values[i.index()]
                            .as_ref()
                            .expect("operand computed before its user")
                    })
                    .collect();
                eval_op(op, &args, &out_shape)
                    .map_err(|e| if e.node.is_none() { e.at(node.id) } else { e })?
            }
        };
        values[node.id.index()] = Some(value);
    }
    Ok(values)
}

/// Evaluate one op on concrete operands; `out` is the node's concrete result type.
pub fn eval_op(op: &Op, inputs: &[&TensorData], out: &Shape) -> IrResult<TensorData> {
    match op {
        Op::Input { .. } | Op::Param { .. } | Op::Constant { .. } => Err(IrError::new(
            op.name(),
            "leaf ops are bound by interp::run, not evaluated".to_string(),
        )),
        Op::Activation(_)
        | Op::Cast { .. }
        | Op::StopGradient
        | Op::Binary(_)
        | Op::Compare(_)
        | Op::Where => elementwise::eval(op, inputs, out),
        Op::Reshape { .. }
        | Op::Transpose { .. }
        | Op::Narrow { .. }
        | Op::Concat { .. }
        | Op::Expand { .. }
        | Op::Pad { .. }
        | Op::Gather { .. }
        | Op::ScatterAdd { .. } => movement::eval(op, inputs, out),
        Op::Reduce { .. } | Op::ArgMax { .. } | Op::ArgMin { .. } | Op::Cumsum { .. } => {
            reduce::eval(op, inputs, out)
        }
        Op::MatMul | Op::FusedMatMulBiasAct { .. } | Op::DenseSolve | Op::SynthMatMul { .. } => {
            linalg::eval(op, inputs, out)
        }
        Op::Softmax { .. }
        | Op::LogSoftmax { .. }
        | Op::LayerNorm { .. }
        | Op::RmsNorm { .. }
        | Op::Attention { .. }
        | Op::AttentionVjp { .. }
        | Op::Rope { .. }
        | Op::SoftmaxCrossEntropy
        | Op::SoftmaxCrossEntropyWithLogits
        | Op::SplineActivation { .. } => nn::eval(op, inputs, out),
        Op::Conv { .. }
        | Op::ConvGradInput { .. }
        | Op::ConvGradWeight { .. }
        | Op::Pool { .. }
        | Op::PoolGrad { .. } => conv::eval(op, inputs, out),
        Op::Fft { .. } => fft::eval(op, inputs, out),
        Op::ScaledQuantScale { .. }
        | Op::ScaledQuantize { .. }
        | Op::ScaledMatMul { .. }
        | Op::RoundToFormat { .. } => scaled::eval(op, inputs, out),
        Op::Scan { .. } => eval_scan(op, inputs, out),
        // `x` broadcast to the (now concrete) result dims: exactly `Expand` to them.
        Op::BroadcastLike => {
            let target_shape = out
                .static_dims()
                .expect("the dispatcher passes a concrete result type")
                .into_iter()
                .map(|d| d as i64)
                .collect();
            movement::eval(&Op::Expand { target_shape }, &inputs[..1], out)
        }
    }
}

/// Bind every dynamic symbol from the dims of the data supplied for inputs/params.
pub fn bind_dims(graph: &Graph, inputs: &[(&str, &TensorData)]) -> IrResult<DimBinding> {
    let mut binding = DimBinding::new();
    for node in graph.nodes() {
        let name = match &node.op {
            Op::Input { name } | Op::Param { name } => name,
            _ => continue,
        };
        let Some((_, data)) = inputs.iter().find(|(n, _)| n == name) else {
            continue;
        };
        if data.dims.len() != node.shape.rank() {
            return Err(IrError::new(
                node.op.name(),
                format!(
                    "`{name}` is declared {} but was given data of dims {:?}",
                    node.shape, data.dims
                ),
            )
            .at(node.id));
        }
        for (d, &n) in node.shape.dims().iter().zip(&data.dims) {
            if let crate::Dim::Dynamic(s) = d {
                match binding.get(*s) {
                    Some(prev) if prev != n => {
                        return Err(IrError::new(
                            node.op.name(),
                            format!(
                                "dynamic dim ?{s} is {prev} elsewhere but `{name}` gives it {n}"
                            ),
                        )
                        .at(node.id));
                    }
                    _ => binding.set(*s, n),
                }
            }
        }
    }
    Ok(binding)
}

fn concrete(shape: &Shape, binding: &DimBinding, op: &Op) -> IrResult<Shape> {
    let s = shape.bind(binding);
    if !s.is_static() {
        return Err(IrError::new(
            op.name(),
            format!(
                "result type {shape} has a dynamic dim that no input binds; supply data for the input that declares it"
            ),
        ));
    }
    Ok(s)
}

fn lookup<'a>(inputs: &[(&str, &'a TensorData)], name: &str, op: &Op) -> IrResult<&'a TensorData> {
    inputs
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, d)| *d)
        .ok_or_else(|| {
            let given: Vec<&str> = inputs.iter().map(|(n, _)| *n).collect();
            IrError::new(
                op.name(),
                format!("no data was supplied for `{name}` (supplied: {given:?})"),
            )
        })
}

fn eval_scan(op: &Op, inputs: &[&TensorData], out: &Shape) -> IrResult<TensorData> {
    let Op::Scan {
        body,
        length,
        save_trajectory,
        num_bcast,
        num_xs,
        ..
    } = op
    else {
        unreachable!()
    };
    let nb = *num_bcast as usize;
    let mut carry = inputs[0].clone();
    let mut trajectory: Vec<u8> = Vec::new();
    for step in 0..*length as usize {
        let mut named: Vec<(String, TensorData)> = vec![("carry".to_string(), carry.clone())];
        for i in 0..nb {
            named.push((format!("bcast_{i}"), inputs[1 + i].clone()));
        }
        for i in 0..*num_xs as usize {
            let xs = inputs[1 + nb + i];
            let row: usize = xs.dims[1..].iter().product::<usize>() * xs.dtype.size_bytes();
            let slice = xs.bytes[step * row..(step + 1) * row].to_vec();
            named.push((
                format!("x_{i}"),
                TensorData::new(xs.dtype, &xs.dims[1..], slice)?,
            ));
        }
        let refs: Vec<(&str, &TensorData)> = named.iter().map(|(n, d)| (n.as_str(), d)).collect();
        carry = run_refs(body, &refs)?.remove(0);
        if *save_trajectory {
            trajectory.extend_from_slice(&carry.bytes);
        }
    }
    if *save_trajectory {
        TensorData::new(out.dtype(), &out.static_dims().unwrap(), trajectory)
    } else {
        Ok(carry)
    }
}
