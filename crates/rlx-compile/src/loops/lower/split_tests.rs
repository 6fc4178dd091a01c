//! Split reductions: the part kernel and the combine kernel run one after the other by
//! the interpreter (with the scratch buffer the backend would allocate) against the
//! oracle and against the unsplit lowering.

use crate::loops::eval::{self, HostBuf};
use crate::loops::{self, Access};
use crate::program::{BufKind, Program};
use crate::{CompileOptions, compile};
use rlx_ir::{DType, Dim, DimBinding, Graph, Op, ReduceOp, Shape, TensorData, interp};

/// Run reduction kernel 0 of `p` (its only kernel) split in `parts`, over argument `x`.
fn run_split(
    p: &Program,
    parts: u32,
    x: &TensorData,
    binding: &DimBinding,
) -> Result<TensorData, String> {
    let [first, second] = loops::lower_split_reduction(p, 0, parts).map_err(|e| e.to_string())?;
    let out = p.outputs[0];
    let out_dims: Vec<usize> = p.buffers[out]
        .shape
        .dims()
        .iter()
        .map(|d| d.resolve(binding).unwrap())
        .collect();
    let outputs: usize = out_dims.iter().product();
    let scratch_dt = first
        .bufs
        .iter()
        .find(|b| b.buf == p.buffers.len())
        .unwrap()
        .dtype;
    let mut scratch = HostBuf::zeros(scratch_dt, outputs * parts as usize);
    let mut result = HostBuf::zeros(p.buffers[out].shape.dtype(), outputs);
    let host_x = if x.dtype.is_int() {
        HostBuf::Int(x.to_i64_vec())
    } else {
        HostBuf::Float(x.to_f64_vec())
    };
    for k in [&first, &second] {
        let mut slots: Vec<HostBuf> = k
            .bufs
            .iter()
            .map(|b| {
                if b.buf == p.buffers.len() {
                    std::mem::replace(&mut scratch, HostBuf::Int(vec![]))
                } else if matches!(p.buffers[b.buf].kind, BufKind::Arg(_)) {
                    host_x.clone()
                } else {
                    assert_eq!(b.access, Access::Write);
                    std::mem::replace(&mut result, HostBuf::Int(vec![]))
                }
            })
            .collect();
        eval::run(k, &mut slots, binding)?;
        for (b, v) in k.bufs.iter().zip(slots) {
            if b.buf == p.buffers.len() {
                scratch = v;
            } else if b.access == Access::Write {
                result = v;
            }
        }
    }
    let dt = p.buffers[out].shape.dtype();
    Ok(match result {
        HostBuf::Int(v) => TensorData::from_i64_as(dt, &out_dims, &v),
        HostBuf::Float(v) => TensorData::from_f64_as(dt, &out_dims, &v),
    })
}

fn graph(kind: ReduceOp, dims: &[Dim], axes: &[usize], dt: DType) -> (Graph, Program) {
    let mut g = Graph::new("split");
    let x = g.input("x", Shape::from_dims(dims, dt));
    let o = Op::Reduce {
        op: kind,
        axes: axes.to_vec(),
        keep_dim: false,
    };
    let y = g.add_op(o, vec![x]).unwrap();
    g.set_outputs(vec![y]);
    let p = compile(&g, &CompileOptions::default()).unwrap();
    (g, p)
}

#[test]
fn split_reductions_equal_the_oracle_for_any_part_count_including_empty_parts() {
    for (n, parts) in [(700usize, [1u32, 3, 8]), (5, [4, 5, 8])] {
        check_parts(n, &parts);
    }
}

/// Every reduction kind over `[3, n]` split in each of `parts` == the oracle bit for bit.
fn check_parts(n: usize, parts: &[u32]) {
    for (kind, dt) in [
        (ReduceOp::Max, DType::F32),
        (ReduceOp::Min, DType::F16),
        (ReduceOp::Sum, DType::I32),
        (ReduceOp::Prod, DType::I64),
        (ReduceOp::Sum, DType::F32),
        (ReduceOp::Mean, DType::F32),
    ] {
        let (g, p) = graph(kind, &[Dim::Static(3), Dim::Static(n)], &[1], dt);
        // Quarter steps below 2^7: every f32 partial sum of up to 700 terms is exact.
        let v: Vec<f64> = (0..3 * n)
            .map(|i| match dt {
                DType::I64 => [1.0, -1.0, 1.0, 1.0, -1.0][i % 5],
                _ if dt.is_int() => ((i * 7919) % 201) as f64 - 100.0,
                _ => (((i * 7919) % 97) as f64 - 48.0) * 0.25,
            })
            .collect();
        let x = TensorData::from_f64_as(dt, &[3, n], &v);
        let want = interp::run(&g, &[("x", x.clone())]).unwrap();
        for &parts in parts {
            let got = run_split(&p, parts, &x, &DimBinding::new()).unwrap();
            assert_eq!(got.bytes, want[0].bytes, "{kind:?} {dt:?} in {parts} parts");
        }
    }
}

#[test]
fn a_split_float_sum_folds_each_part_then_the_parts_in_order() {
    // 1 + 2⁻²⁴·k: the unsplit tree and the split folds round differently, each
    // deterministically; both stay within the f32 error of the oracle.
    let n = 2048usize;
    let (g, p) = graph(ReduceOp::Sum, &[Dim::Dynamic(0)], &[0], DType::F32);
    let v: Vec<f32> = (0..n)
        .map(|i| 1.0 + (i % 3) as f32 * 2f32.powi(-23))
        .collect();
    let x = TensorData::from_f32(&[n], &v);
    let binding: DimBinding = [(0, n)].into_iter().collect();
    let want = interp::run(&g, &[("x", x.clone())]).unwrap()[0].to_f64_vec()[0];
    let a = run_split(&p, 4, &x, &binding).unwrap().to_f64_vec()[0];
    let b = run_split(&p, 4, &x, &binding).unwrap().to_f64_vec()[0];
    assert_eq!(
        a.to_bits(),
        b.to_bits(),
        "the same parts give the same bits"
    );
    // Both kernels render for every backend.
    for k in loops::lower_split_reduction(&p, 0, 4).unwrap() {
        for d in [loops::Dialect::Cuda, loops::Dialect::Hip] {
            assert!(loops::render_c(&k, d).contains(&k.name));
        }
        let src = loops::render_wgsl(&k).unwrap_or_else(|e| panic!("{e}"));
        let module = naga::front::wgsl::parse_str(&src).unwrap();
        naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::empty(),
        )
        .validate(&module)
        .unwrap_or_else(|e| panic!("{e:?}\n{src}"));
    }
    assert!(
        (a - want).abs() <= n as f64 * 2f64.powi(-23) * 2.0,
        "{a} vs {want}"
    );
}

#[test]
fn split_max_of_an_empty_axis_is_the_oracles_error_and_other_kernels_are_refused() {
    let (_, p) = graph(
        ReduceOp::Max,
        &[Dim::Static(2), Dim::Dynamic(0)],
        &[1],
        DType::F32,
    );
    let binding: DimBinding = [(0, 0)].into_iter().collect();
    let x = TensorData::from_f32(&[2, 0], &[]);
    let e = run_split(&p, 4, &x, &binding).unwrap_err();
    assert!(e.contains("reduction of an empty axis"), "{e}");
    let (_, p) = graph(
        ReduceOp::Mean,
        &[Dim::Static(2), Dim::Static(900)],
        &[1],
        DType::I32,
    );
    let e = loops::lower_split_reduction(&p, 0, 4).unwrap_err();
    assert!(e.to_string().contains("split integer mean"), "{e}");
    let mut g = Graph::new("ew");
    let x = g.input("x", Shape::new(&[4], DType::F32));
    let y = g
        .add_op(Op::Activation(rlx_ir::Activation::Exp), vec![x])
        .unwrap();
    g.set_outputs(vec![y]);
    let p = compile(&g, &CompileOptions::default()).unwrap();
    let e = loops::lower_split_reduction(&p, 0, 4).unwrap_err();
    assert!(e.to_string().contains("not a reduction"), "{e}");
}
