//! One kernel of a [`Program`] as a standalone rlx-ir [`Graph`], for backends that run a
//! kernel they cannot execute on the host (`rlx_runtime::HostKernel` compiles it with
//! the CPU backend).
//!
//! The graph's inputs are the whole buffers the kernel reads (dense, in buffer layout;
//! baked constants become `Op::Constant` nodes instead); each load's view chain is
//! re-expressed as IR movement ops (`Reshape`, `Transpose`, `Narrow`, `Expand`), every
//! expression node becomes the IR op it was fused from, and the kernel's core
//! (reduction, row op, matmul, attention, opaque op) becomes its IR op. The graph's
//! outputs are the values of the buffers the kernel writes, in their buffer dims and
//! dtypes. Dims are bound: the graph is static, built once per binding of the
//! program's dynamic dims.

use super::{BufId, BufKind, EOp, Expr, Kernel, KernelKind, Load, Program, RowOp, Scalar};
use crate::program::ViewStep;
use rlx_ir::{
    DType, DimBinding, Graph, IrError, IrResult, NodeId, Op, ReduceOp, Shape, TensorData,
};
use std::collections::HashMap;

/// A kernel as a graph, with the buffers its inputs and outputs stand for.
#[derive(Debug, Clone)]
pub struct KernelGraph {
    /// The graph: one `Op::Input` per entry of `inputs` (named `buf<i>`, in node order,
    /// which is `rlx_runtime::arg_order` order), outputs in `outputs` order.
    pub graph: Graph,
    /// Per graph input: the buffer whose whole, dense value it receives.
    pub inputs: Vec<BufId>,
    /// Per graph output: the buffer it is the value of (distinct, in store order).
    pub outputs: Vec<BufId>,
}

/// The graph input name of buffer `b`.
pub fn input_name(b: BufId) -> String {
    format!("buf{b}")
}

/// Kernel `k` of `p` as a static graph under `binding` (see the module docs). Errors
/// name the kernel, the op and the shapes when a dim is unbound or the kernel's parts
/// do not fit together.
pub fn kernel_graph(p: &Program, k: &Kernel, binding: &DimBinding) -> IrResult<KernelGraph> {
    let mut b = Builder {
        p,
        binding,
        g: Graph::new(format!("{} host {}", p.name, k.label())),
        bufs: HashMap::new(),
        inputs: Vec::new(),
    };
    let in_kernel = |e: IrError| {
        IrError::new(
            "host_kernel",
            format!(
                "graph `{}`, kernel {} of [{}]: {e}",
                p.name,
                k.label(),
                k.fused_names.join(", ")
            ),
        )
    };
    b.kernel(k).map_err(in_kernel)?;
    let mut outputs: Vec<BufId> = Vec::new();
    for s in &k.stores {
        if !outputs.contains(&s.buf) {
            outputs.push(s.buf);
        }
    }
    let nodes = outputs.iter().map(|o| b.bufs[o]).collect();
    b.g.set_outputs(nodes);
    Ok(KernelGraph {
        graph: b.g,
        inputs: b.inputs,
        outputs,
    })
}

struct Builder<'a> {
    p: &'a Program,
    binding: &'a DimBinding,
    g: Graph,
    /// The node holding each buffer's value: an input, a constant, or a value an earlier
    /// stage of the same kernel stored.
    bufs: HashMap<BufId, NodeId>,
    inputs: Vec<BufId>,
}

impl Builder<'_> {
    fn bind(&self, d: &[rlx_ir::Dim], what: &str) -> IrResult<Vec<usize>> {
        super::concrete(d, self.binding).ok_or_else(|| {
            IrError::new(
                "bind",
                format!(
                    "{what} has dims {d:?} with a dynamic dim that {} does not bind",
                    self.binding
                ),
            )
        })
    }

    fn op(&mut self, op: Op, inputs: Vec<NodeId>) -> IrResult<NodeId> {
        self.g.add_op(op, inputs)
    }

    /// The node holding buffer `b`'s whole value.
    fn buffer(&mut self, b: BufId) -> IrResult<NodeId> {
        if let Some(&n) = self.bufs.get(&b) {
            return Ok(n);
        }
        let buf = &self.p.buffers[b];
        let dims = self.bind(buf.shape.dims(), &format!("buffer {b}"))?;
        let shape = Shape::new(&dims, buf.shape.dtype());
        let n = match &buf.kind {
            BufKind::Const(bytes) => self.g.add_node(
                Op::Constant {
                    data: bytes.clone(),
                },
                vec![],
                shape,
            ),
            _ => {
                self.inputs.push(b);
                self.g.input(input_name(b), shape)
            }
        };
        self.bufs.insert(b, n);
        Ok(n)
    }

    /// Load `l`: its buffer through its view chain.
    fn load(&mut self, l: &Load) -> IrResult<NodeId> {
        let mut n = self.buffer(l.buf)?;
        for s in &l.steps {
            let op = match s {
                ViewStep::Reshape(d) => Op::Reshape {
                    new_shape: self.sizes(d)?,
                },
                ViewStep::Expand(d) => Op::Expand {
                    target_shape: self.sizes(d)?,
                },
                ViewStep::Transpose(perm) => Op::Transpose { perm: perm.clone() },
                ViewStep::Narrow { axis, start, len } => Op::Narrow {
                    axis: *axis,
                    start: *start,
                    len: *len,
                },
            };
            n = self.op(op, vec![n])?;
        }
        Ok(n)
    }

    fn sizes(&self, d: &[rlx_ir::Dim]) -> IrResult<Vec<i64>> {
        Ok(self
            .bind(d, "a view step")?
            .into_iter()
            .map(|x| x as i64)
            .collect())
    }

    /// `n` converted to `dt` and shaped as `dims`: a cast where the core op's natural
    /// dtype differs, a reshape where only the layout of the dims differs, a broadcast of
    /// a one-element value.
    fn fit(&mut self, mut n: NodeId, dims: &[usize], dt: DType, what: &str) -> IrResult<NodeId> {
        if self.g.shape(n).dtype() != dt {
            n = self.op(Op::Cast { to: dt }, vec![n])?;
        }
        let have = self.g.shape(n).static_dims().unwrap_or_default();
        if have == dims {
            return Ok(n);
        }
        let (hn, wn) = (
            have.iter().product::<usize>(),
            dims.iter().product::<usize>(),
        );
        let target: Vec<i64> = dims.iter().map(|&x| x as i64).collect();
        if hn == wn {
            return self.op(Op::Reshape { new_shape: target }, vec![n]);
        }
        if hn == 1 {
            let s = self.op(Op::Reshape { new_shape: vec![] }, vec![n])?;
            return self.op(
                Op::Expand {
                    target_shape: target,
                },
                vec![s],
            );
        }
        Err(IrError::new(
            "host_kernel",
            format!("{what} is {have:?} but its destination is {dims:?} {dt}"),
        ))
    }

    /// The nodes of expression `e` over `space`; `loads` are the kernel's loads, `core`
    /// the value [`EOp::Core`] stands for.
    fn expr(
        &mut self,
        e: &Expr,
        space: &[usize],
        loads: &[Load],
        core: Option<NodeId>,
    ) -> IrResult<Vec<NodeId>> {
        let mut vals: Vec<NodeId> = Vec::with_capacity(e.nodes.len());
        for n in &e.nodes {
            let args: Vec<NodeId> = n.args.iter().map(|&a| vals[a as usize]).collect();
            let op = match &n.op {
                EOp::Load(i) => {
                    let v = self.load(&loads[*i])?;
                    vals.push(v);
                    continue;
                }
                EOp::Const(s) => {
                    let v = self.literal(*s, n.dtype, space)?;
                    vals.push(v);
                    continue;
                }
                EOp::Core => {
                    let c = core.ok_or_else(|| {
                        IrError::new(
                            "host_kernel",
                            "an expression reads the core value outside an epilogue",
                        )
                    })?;
                    vals.push(c);
                    continue;
                }
                EOp::Unary(a) => Op::Activation(*a),
                EOp::Binary(b) => Op::Binary(*b),
                EOp::Compare(c) => Op::Compare(*c),
                EOp::Where => Op::Where,
                EOp::Cast => Op::Cast { to: n.dtype },
                EOp::RoundToFormat {
                    exp_bits,
                    man_bits,
                    max_normal,
                } => Op::RoundToFormat {
                    exp_bits: *exp_bits,
                    man_bits: *man_bits,
                    max_normal: *max_normal,
                },
            };
            let name = op.name();
            let v = self.op(op, args)?;
            let v = self.fit(v, space, n.dtype, &format!("expression node {name}"))?;
            vals.push(v);
        }
        Ok(vals)
    }

    /// Literal `s` as a `dt` scalar broadcast over `space`.
    fn literal(&mut self, s: Scalar, dt: DType, space: &[usize]) -> IrResult<NodeId> {
        let d = match s {
            Scalar::F(v) if dt.is_float() || dt.is_complex() => {
                TensorData::from_f64_as(dt, &[], &[v])
            }
            Scalar::F(v) => TensorData::from_i64_as(dt, &[], &[v as i64]),
            Scalar::I(v) if dt.is_float() => TensorData::from_f64_as(dt, &[], &[v as f64]),
            Scalar::I(v) => TensorData::from_i64_as(dt, &[], &[v]),
        };
        let c = self
            .g
            .add_node(Op::Constant { data: d.bytes }, vec![], Shape::scalar(dt));
        self.fit(c, space, dt, "a literal")
    }

    /// Store the values of `vals` the kernel's stores name into their buffers.
    fn store(&mut self, k: &Kernel, vals: &[NodeId]) -> IrResult<()> {
        for s in &k.stores {
            let buf = &self.p.buffers[s.buf];
            let dims = self.bind(buf.shape.dims(), &format!("buffer {}", s.buf))?;
            let n = self.fit(
                vals[s.value as usize],
                &dims,
                buf.shape.dtype(),
                &format!("the value stored to buffer {}", s.buf),
            )?;
            self.bufs.insert(s.buf, n);
        }
        Ok(())
    }

    /// The core result `r` as `dt` over `dims`, then the epilogue and the stores.
    fn epilogue(
        &mut self,
        k: &Kernel,
        r: NodeId,
        dims: &[usize],
        dt: DType,
        epilogue: &Expr,
    ) -> IrResult<()> {
        let r = self.fit(r, dims, dt, &format!("the {} result", k.label()))?;
        let vals = self.expr(epilogue, dims, &k.loads, Some(r))?;
        self.store(k, &vals)
    }

    fn loads(&mut self, k: &Kernel, which: &[usize]) -> IrResult<Vec<NodeId>> {
        which.iter().map(|&i| self.load(&k.loads[i])).collect()
    }

    fn kernel(&mut self, k: &Kernel) -> IrResult<()> {
        match &k.kind {
            KernelKind::Elementwise { space, expr } => {
                let dims = self.bind(space, "the iteration space")?;
                let vals = self.expr(expr, &dims, &k.loads, None)?;
                self.store(k, &vals)
            }
            KernelKind::Reduce {
                op,
                arg,
                in_space,
                axes,
                keep_dim,
                prologue,
                input,
                out_space,
                dtype,
                epilogue,
            } => {
                let ind = self.bind(in_space, "the reduced space")?;
                let outd = self.bind(out_space, "the result space")?;
                let pv = self.expr(prologue, &ind, &k.loads, None)?;
                let rop = match (arg, op, axes.as_slice()) {
                    (false, ..) => Op::Reduce {
                        op: *op,
                        axes: axes.clone(),
                        keep_dim: *keep_dim,
                    },
                    (true, ReduceOp::Max, &[axis]) => Op::ArgMax {
                        axis,
                        keep_dim: *keep_dim,
                    },
                    (true, _, &[axis]) => Op::ArgMin {
                        axis,
                        keep_dim: *keep_dim,
                    },
                    (true, ..) => {
                        return Err(IrError::new(
                            "host_kernel",
                            format!("an arg reduction over axes {axes:?} (it needs exactly one)"),
                        ));
                    }
                };
                let r = self.op(rop, vec![pv[*input as usize]])?;
                self.epilogue(k, r, &outd, *dtype, epilogue)
            }
            KernelKind::Row {
                op,
                space,
                prologue,
                input,
                params,
                dtype,
                epilogue,
            } => {
                let dims = self.bind(space, "the row space")?;
                let pv = self.expr(prologue, &dims, &k.loads, None)?;
                let op = match op {
                    RowOp::Softmax => Op::Softmax { axis: -1 },
                    RowOp::LogSoftmax => Op::LogSoftmax { axis: -1 },
                    RowOp::LayerNorm { eps } => Op::LayerNorm {
                        axis: -1,
                        eps: *eps,
                    },
                    RowOp::RmsNorm { eps } => Op::RmsNorm {
                        axis: -1,
                        eps: *eps,
                    },
                };
                let mut ins = vec![pv[*input as usize]];
                if let Some((g, b)) = params {
                    ins.extend(self.loads(k, &[*g, *b])?);
                }
                let r = self.op(op, ins)?;
                self.epilogue(k, r, &dims, *dtype, epilogue)
            }
            KernelKind::Contraction {
                a,
                b,
                out_space,
                dtype,
                epilogue,
            } => {
                let dims = self.bind(out_space, "the product space")?;
                let ins = self.loads(k, &[*a, *b])?;
                let r = self.op(Op::MatMul, ins)?;
                self.epilogue(k, r, &dims, *dtype, epilogue)
            }
            KernelKind::Attention {
                op,
                inputs,
                out_space,
                dtype,
                epilogue,
            } => {
                let dims = self.bind(out_space, "the attention result")?;
                let ins = self.loads(k, inputs)?;
                let r = self.op(op.clone(), ins)?;
                self.epilogue(k, r, &dims, *dtype, epilogue)
            }
            KernelKind::RowGroup { stages, .. } => {
                for s in stages {
                    self.kernel(s)?;
                }
                Ok(())
            }
            KernelKind::Opaque { op, inputs, out } => {
                let dims = self.bind(out.dims(), "the opaque result")?;
                let ins = self.loads(k, inputs)?;
                let r = self.op(op.clone(), ins)?;
                let r = self.fit(r, &dims, out.dtype(), &format!("the {} result", op.name()))?;
                self.store(k, &[r])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CompileOptions, compile};
    use rlx_ir::{BinaryOp, ReduceOp, interp};

    fn op(g: &mut Graph, o: Op, ins: Vec<NodeId>) -> NodeId {
        g.add_op(o, ins).unwrap()
    }

    #[test]
    fn constants_are_baked_and_views_read_the_whole_buffer() {
        // transpose(x) + [1, 2]: one kernel reading x through a transpose and a baked
        // constant through a broadcast.
        let mut g = Graph::new("c");
        let x = g.input("x", Shape::new(&[2, 3], DType::F32));
        let c = TensorData::from_f32(&[2], &[1.0, 2.0]);
        let c = g.add_node(
            Op::Constant {
                data: c.bytes.clone(),
            },
            vec![],
            c.shape(),
        );
        let t = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![x]);
        let y = op(&mut g, Op::Binary(BinaryOp::Add), vec![t, c]);
        g.set_outputs(vec![y]);
        let p = compile(&g, &CompileOptions::default()).unwrap();
        assert_eq!(p.kernels.len(), 1);
        let kg = kernel_graph(&p, &p.kernels[0], &DimBinding::new()).unwrap();
        assert_eq!(kg.inputs.len(), 1, "{}", kg.graph);
        assert!(matches!(p.buffers[kg.inputs[0]].kind, BufKind::Arg(0)));
        assert_eq!(kg.outputs, p.outputs);
        let xd = TensorData::from_f32(&[2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let out = interp::run(&kg.graph, &[(&input_name(kg.inputs[0]), xd)]).unwrap();
        assert_eq!(out[0].dims, [3, 2]);
        assert_eq!(out[0].to_f32_vec(), [1.0, 5.0, 2.0, 6.0, 3.0, 7.0]);
    }

    #[test]
    fn a_row_group_reads_what_its_earlier_stages_store_from_their_nodes() {
        // x / Σ_row x and Σ_col of it: a row group whose later stages read the earlier
        // stages' results, which must not become graph inputs.
        let mut g = Graph::new("rg");
        let x = g.input("x", Shape::new(&[4, 6], DType::F32));
        let s = op(
            &mut g,
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![1],
                keep_dim: true,
            },
            vec![x],
        );
        let y = op(&mut g, Op::Binary(BinaryOp::Div), vec![x, s]);
        let m = op(&mut g, Op::Binary(BinaryOp::Mul), vec![y, x]);
        let cs = op(
            &mut g,
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![1],
                keep_dim: false,
            },
            vec![m],
        );
        g.set_outputs(vec![y, cs]);
        let opts = CompileOptions {
            multi_store: true,
            row_groups: true,
            ..Default::default()
        };
        let p = compile(&g, &opts).unwrap();
        assert!(
            p.kernels
                .iter()
                .any(|k| matches!(k.kind, KernelKind::RowGroup { .. })),
            "{}",
            crate::explain(&p, "cpu", None)
        );
        let xd = TensorData::from_f32(&[4, 6], &(1..=24).map(|i| i as f32).collect::<Vec<_>>());
        let want = interp::run(&g, &[("x", xd.clone())]).unwrap();
        // Run the kernels in order through their graphs.
        let mut vals: HashMap<BufId, TensorData> = HashMap::new();
        for k in &p.kernels {
            let kg = kernel_graph(&p, k, &DimBinding::new()).unwrap();
            let written: Vec<BufId> = k.writes().collect();
            assert!(
                kg.inputs.iter().all(|b| !written.contains(b)),
                "{}",
                kg.graph
            );
            let names: Vec<String> = kg.inputs.iter().map(|&b| input_name(b)).collect();
            let args: Vec<(&str, TensorData)> = kg
                .inputs
                .iter()
                .zip(&names)
                .map(|(b, n)| match p.buffers[*b].kind {
                    BufKind::Arg(_) => (n.as_str(), xd.clone()),
                    _ => (n.as_str(), vals[b].clone()),
                })
                .collect();
            for (b, v) in kg
                .outputs
                .iter()
                .zip(interp::run(&kg.graph, &args).unwrap())
            {
                vals.insert(*b, v);
            }
        }
        for (o, w) in p.outputs.iter().zip(&want) {
            let got = vals[o].to_f32_vec();
            for (a, b) in got.iter().zip(w.to_f32_vec()) {
                assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{got:?} vs {w:?}");
            }
        }
    }
}
