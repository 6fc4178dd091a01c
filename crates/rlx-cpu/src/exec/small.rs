//! The direct run of a small elementwise program (an eager `(&a + &b).relu()`): one
//! kernel reading the arguments in place and writing the results, with none of the
//! general run's per-call bookkeeping.

use super::bind::{BKernel, Bound};
use super::{CpuExecutable, OutStore, check_static_dims, kernel_error, push_outputs, vm};
use rlx_compile::program::{BufKind, Program};
use rlx_ir::{DType, TensorView};
use rlx_runtime::{HostOutput, RuntimeResult};

/// Most buffers a program may have to take [`CpuExecutable::run_small`] (its buffer
/// tables live on the stack).
const SMALL_BUFFERS: usize = 8;

/// Most elements of a kernel taking [`CpuExecutable::run_small`]: one chunk of an
/// elementwise pass whatever its work estimate (`ew_chunk` never splits fewer than four
/// tiles), so the kernel runs on the calling thread exactly as the general path runs it.
const SMALL_ELEMENTS: usize = 4 * vm::TILE;

/// What [`CpuExecutable::run_small`] checks each argument against: its dtype, its
/// (static) dims and its byte length, computed once when the program is loaded.
pub(super) type SmallArgs = Vec<(DType, Vec<usize>, usize)>;

/// The argument types of `program`, bound once as `fixed`, when its runs may take
/// [`CpuExecutable::run_small`]: a static program of one elementwise kernel over its
/// arguments and baked constants (no intermediate buffer, so no arena), small enough for
/// one chunk, and not profiled (the general path times each kernel).
pub(super) fn small_program(
    program: &Program,
    fixed: Option<&Bound>,
    profiling: bool,
) -> Option<SmallArgs> {
    let b = fixed?;
    let small = !profiling
        && b.arena == 0
        && program.buffers.len() <= SMALL_BUFFERS
        && program.buffers.iter().all(|b| b.kind != BufKind::Temp)
        && matches!(&b.kernels[..], [BKernel::Ew(e)] if e.numel() <= SMALL_ELEMENTS);
    if !small {
        return None;
    }
    program
        .args
        .iter()
        .map(|(_, shape)| {
            let dims = shape.static_dims()?;
            let bytes = dims.iter().product::<usize>() * shape.dtype().size_bytes();
            Some((shape.dtype(), dims, bytes))
        })
        .collect()
}

impl CpuExecutable {
    /// A run of a small program (see [`small_program`]) without donations: the same
    /// checks, the same kernel and the same results as the general path, minus its
    /// per-run work that a one-kernel program does not need (the plan's shared handle,
    /// the per-thread buffer tables, the kernel order, the pool hand-off). `Ok(false)`
    /// when an argument is not aligned for its dtype: the general path, which copies
    /// it, runs instead.
    pub(super) fn run_small(
        &self,
        bound: &Bound,
        args: &[TensorView<'_>],
        f32_host: bool,
        out: &mut Vec<HostOutput>,
        spare: &mut Option<Vec<usize>>,
    ) -> RuntimeResult<bool> {
        let p = &self.program;
        let Some(types) = &self.small else {
            return Ok(false);
        };
        // The general checks in one comparison per argument; they run in full (for their
        // errors) only when it fails.
        let fits = args.len() == types.len()
            && args.iter().zip(types).all(|(a, (dtype, dims, bytes))| {
                a.dtype == *dtype && a.dims == &dims[..] && a.bytes.len() == *bytes
            });
        if !fits {
            self.check_args(args, &[])?;
            check_static_dims(p, args)?;
            // (Unreachable: the comparison fails exactly when a check does.)
            return Ok(false);
        }
        let aligned = |a: &TensorView<'_>| {
            (a.bytes.as_ptr() as usize).is_multiple_of(a.dtype.size_bytes().min(8))
        };
        if !args.iter().all(aligned) {
            return Ok(false);
        }
        let mut bases = [std::ptr::null_mut::<u8>(); SMALL_BUFFERS];
        let mut outputs: [Option<OutStore>; SMALL_BUFFERS] = [const { None }; SMALL_BUFFERS];
        for (i, b) in p.buffers.iter().enumerate() {
            bases[i] = match &b.kind {
                // Read in place (checked aligned above); kernels never write arguments.
                BufKind::Arg(a) => args[*a].bytes.as_ptr() as *mut u8,
                BufKind::Const(_) => {
                    let c = self.consts[i]
                        .as_ref()
                        .expect("constants are copied at load");
                    c.as_ptr() as *mut u8
                }
                BufKind::Output(_) => {
                    let f32_out = f32_host && b.shape.dtype() == DType::F32;
                    let (store, ptr) = OutStore::new(bound.buf_bytes[i], f32_out)?;
                    outputs[i] = Some(store);
                    ptr
                }
                BufKind::Temp => unreachable!("small programs have no temporaries"),
            };
        }
        let [BKernel::Ew(e)] = &bound.kernels[..] else {
            unreachable!("small programs are one elementwise kernel")
        };
        // One chunk (at most `SMALL_ELEMENTS`): the range `EwPlan::run` would hand its
        // only chunk, without the split.
        let bases = &bases[..p.buffers.len()];
        let ran = if e.is_copy() || e.numel() == 0 {
            e.run(bases)
        } else {
            e.run_range(bases, 0, e.numel(), None)
        };
        ran.map_err(|err| kernel_error(p, 0, err))?;
        push_outputs(p, bound, &mut outputs, out, spare);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::super::CpuExecutable;
    use rlx_ir::{Activation, BinaryOp, CmpOp, DType, Graph, NodeId, Op, Shape, TensorData};
    use rlx_runtime::{Executable, HostOutput, compile_program};

    fn exe(g: &Graph) -> CpuExecutable {
        let program = compile_program(g, &crate::compile_options()).unwrap();
        CpuExecutable::new(program).unwrap()
    }

    /// A run of `e` through the general path (`run_here` as a run of its own, nothing
    /// donated), results into `out`.
    fn run_general(
        e: &CpuExecutable,
        args: &[rlx_ir::TensorView<'_>],
        f32_host: bool,
        out: &mut Vec<HostOutput>,
    ) -> rlx_runtime::RuntimeResult<()> {
        let inputs = super::super::RunInputs {
            args,
            f32_host,
            donated: &[],
        };
        let results = super::super::RunResults {
            stores: &mut Vec::new(),
            out,
            spare: &mut None,
        };
        e.run_here(inputs, true, results)
    }

    fn op(g: &mut Graph, op: Op, inputs: Vec<NodeId>) -> NodeId {
        g.add_op(op, inputs).unwrap()
    }

    /// `(dtype, dims, bytes)` of every result, for bit-for-bit comparison.
    fn parts(out: Vec<HostOutput>) -> Vec<(DType, Vec<usize>, Vec<u8>)> {
        out.into_iter()
            .map(|o| {
                let d = o.into_data();
                (d.dtype, d.dims, d.bytes)
            })
            .collect()
    }

    /// Runs `g` on `args` through the direct path (asserting it is taken: `small`) and
    /// through the general one, both for host f32 results and for plain data, and
    /// checks the results agree bit for bit, dtype and dims included; the kept result
    /// list's dims vector (rank `kept` here) is reused for results of other ranks.
    fn same_as_general(g: &Graph, args: &[TensorData], small: bool) {
        let e = exe(g);
        assert_eq!(e.small.is_some(), small, "graph `{}`", g.name);
        let views: Vec<_> = args.iter().map(TensorData::view).collect();
        for f32_host in [true, false] {
            for kept in [0usize, 1, 7] {
                let mut direct = vec![HostOutput::F32(vec![9.0], vec![5; kept])];
                e.run_with_donated(&views, f32_host, &[], &mut Vec::new(), &mut direct)
                    .unwrap();
                let mut general = Vec::new();
                run_general(&e, &views, f32_host, &mut general).unwrap();
                assert_eq!(parts(direct), parts(general), "graph `{}`", g.name);
            }
        }
    }

    fn f32s(dims: &[usize], k: f32) -> TensorData {
        let n: usize = dims.iter().product();
        let v: Vec<f32> = (0..n).map(|i| (i as f32 * k).sin() * 3.0 - 0.5).collect();
        TensorData::from_f32(dims, &v)
    }

    #[test]
    fn direct_runs_of_small_elementwise_programs_equal_general_runs_bit_for_bit() {
        // relu(a + b) on 3 elements (the eager W8 expression).
        let mut g = Graph::new("relu_add");
        let a = g.input("a", Shape::new(&[3], DType::F32));
        let b = g.input("b", Shape::new(&[3], DType::F32));
        let s = op(&mut g, Op::Binary(BinaryOp::Add), vec![a, b]);
        let r = op(&mut g, Op::Activation(Activation::Relu), vec![s]);
        g.set_outputs(vec![r]);
        same_as_general(&g, &[f32s(&[3], 0.7), f32s(&[3], 1.9)], true);

        // Broadcast [2, 3] * [3] in f64, a baked scalar, two outputs (one listed twice),
        // one of them a comparison (a bool result, never an f32 host vector).
        let mut g = Graph::new("broadcast_f64");
        let a = g.input("a", Shape::new(&[2, 3], DType::F64));
        let b = g.input("b", Shape::new(&[3], DType::F64));
        let m = op(&mut g, Op::Binary(BinaryOp::Mul), vec![a, b]);
        let c = rlx_testkit::scalar(&mut g, 0.25);
        let c = op(&mut g, Op::Cast { to: DType::F64 }, vec![c]);
        let t = op(&mut g, Op::Binary(BinaryOp::Sub), vec![m, c]);
        let gt = op(&mut g, Op::Compare(CmpOp::Gt), vec![t, b]);
        g.set_outputs(vec![t, gt, t]);
        let args = [
            TensorData::from_f64_as(DType::F64, &[2, 3], &[1.0, -2.0, 0.5, 3.0, 0.0, -1.5]),
            TensorData::from_f64_as(DType::F64, &[3], &[0.5, 4.0, -2.0]),
        ];
        same_as_general(&g, &args, true);

        // Integer arithmetic, rank 0 and rank 5.
        for dims in [&[][..], &[2, 1, 3, 1, 2]] {
            let mut g = Graph::new("int");
            let a = g.input("a", Shape::new(dims, DType::I64));
            let s = op(&mut g, Op::Binary(BinaryOp::Mul), vec![a, a]);
            g.set_outputs(vec![s]);
            let n: usize = dims.iter().product();
            let v: Vec<f64> = (0..n).map(|i| i as f64 - 4.0).collect();
            same_as_general(&g, &[TensorData::from_f64_as(DType::I64, dims, &v)], true);
        }
    }

    /// Programs the direct path does not fit go the general way: more than one chunk of
    /// elements, more than one kernel, dynamic dims.
    #[test]
    fn large_multi_kernel_and_dynamic_programs_take_the_general_path() {
        let relu_of = |shape: Shape| {
            let mut g = Graph::new("relu");
            let a = g.input("a", shape);
            let r = op(&mut g, Op::Activation(Activation::Relu), vec![a]);
            g.set_outputs(vec![r]);
            g
        };
        let n = super::SMALL_ELEMENTS;
        same_as_general(
            &relu_of(Shape::new(&[n], DType::F32)),
            &[f32s(&[n], 0.1)],
            true,
        );
        let big = relu_of(Shape::new(&[n + 1], DType::F32));
        same_as_general(&big, &[f32s(&[n + 1], 0.1)], false);
        let dynamic = Shape::from_dims(&[rlx_ir::Dim::Dynamic(0)], DType::F32);
        same_as_general(&relu_of(dynamic), &[f32s(&[5], 0.3)], false);
        let mut g = Graph::new("sum_then_scale");
        let a = g.input("a", Shape::new(&[4, 3], DType::F32));
        let sum = Op::Reduce {
            op: rlx_ir::ReduceOp::Sum,
            axes: vec![1],
            keep_dim: true,
        };
        let s = op(&mut g, sum, vec![a]);
        let m = op(&mut g, Op::Binary(BinaryOp::Mul), vec![a, s]);
        g.set_outputs(vec![m]);
        same_as_general(&g, &[f32s(&[4, 3], 0.9)], false);
    }

    /// The direct path checks its arguments as the general one does (same errors), and
    /// an argument not aligned for its dtype is copied by the general path instead.
    #[test]
    fn direct_runs_report_bad_arguments_and_hand_misaligned_ones_to_the_general_path() {
        let mut g = Graph::new("neg");
        let a = g.input("a", Shape::new(&[4], DType::F32));
        let r = op(&mut g, Op::Activation(Activation::Neg), vec![a]);
        g.set_outputs(vec![r]);
        let e = exe(&g);
        assert!(e.small.is_some());
        let short = f32s(&[3], 1.0);
        let wrong_dims = f32s(&[2, 2], 1.0);
        let f64s = TensorData::from_f64_as(DType::F64, &[4], &[1.0; 4]);
        for bad in [
            vec![],
            vec![short.view()],
            vec![wrong_dims.view()],
            vec![f64s.view()],
        ] {
            let mut out = vec![HostOutput::F32(vec![1.0], vec![1])];
            let got = e.run_host_into(&bad, &mut out).unwrap_err().to_string();
            let mut general = Vec::new();
            let want = run_general(&e, &bad, true, &mut general)
                .unwrap_err()
                .to_string();
            assert_eq!(got, want);
            assert!(got.contains("graph `neg`"), "{got}");
            assert!(out.is_empty());
        }
        // Four f32s at an address that is not a multiple of 4.
        let good = f32s(&[4], 0.6);
        let mut raw = [0u8; 20];
        let off = (1..4)
            .find(|o| !(raw.as_ptr() as usize + o).is_multiple_of(4))
            .expect("one of three consecutive addresses is not a multiple of 4");
        raw[off..off + 16].copy_from_slice(&good.bytes);
        let misaligned = rlx_ir::TensorView {
            dtype: DType::F32,
            dims: &[4],
            bytes: &raw[off..off + 16],
        };
        let got = e.run_host(&[misaligned]).unwrap();
        let want = e.run_host(&[good.view()]).unwrap();
        assert_eq!(parts(got), parts(want));
    }
}
