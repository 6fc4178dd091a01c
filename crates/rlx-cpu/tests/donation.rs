//! Donated arguments (`Executable::run_host_donating`): where the program allows it, an
//! output is computed over a donated argument's storage and returned in it, with the
//! same bits as an ordinary run; where it does not, the donation is only read.

use rlx_cpu::CpuBackend;
use rlx_ir::{BinaryOp, DType, Graph, NodeId, Op, Shape, TensorData, TensorView};
use rlx_runtime::{Backend, Device, Donation, Executable, HostOutput};
use rlx_testkit::{op, scalar, seq};
use std::sync::Arc;

fn bin(g: &mut Graph, o: BinaryOp, a: NodeId, b: NodeId) -> NodeId {
    op(g, Op::Binary(o), vec![a, b])
}

fn f32s(out: Vec<HostOutput>) -> Vec<Vec<f32>> {
    out.into_iter().map(HostOutput::into_f32_vec).collect()
}

/// An AdamW-shaped update: inputs `p, g, m, v` of `n` values, outputs `p', m', v'`.
fn adam_like(n: usize) -> Graph {
    let mut g = Graph::new("adam_like");
    let sh = Shape::new(&[n], DType::F32);
    let (p, gr, m, v) = (
        g.input("p", sh.clone()),
        g.input("g", sh.clone()),
        g.input("m", sh.clone()),
        g.input("v", sh),
    );
    let (b1, b2, lr) = (
        scalar(&mut g, 0.9),
        scalar(&mut g, 0.999),
        scalar(&mut g, 1e-3),
    );
    let m9 = bin(&mut g, BinaryOp::Mul, m, b1);
    let m2 = bin(&mut g, BinaryOp::Add, m9, gr);
    let v9 = bin(&mut g, BinaryOp::Mul, v, b2);
    let gg = bin(&mut g, BinaryOp::Mul, gr, gr);
    let v2 = bin(&mut g, BinaryOp::Add, v9, gg);
    let root = op(&mut g, Op::Activation(rlx_ir::Activation::Sqrt), vec![v2]);
    let q = bin(&mut g, BinaryOp::Div, m2, root);
    let step = bin(&mut g, BinaryOp::Mul, q, lr);
    let p2 = bin(&mut g, BinaryOp::Sub, p, step);
    g.set_outputs(vec![p2, m2, v2]);
    g
}

fn compile(g: &Graph) -> Arc<dyn Executable> {
    CpuBackend.compile(Device::Cpu, g).unwrap()
}

/// Runs `exe` plainly, then with `donate` = `(arg, output)` pairs, and checks the
/// results are bit-identical. Returns, per donation, whether its storage came back as
/// the output (checked by address) — the donated vector is then empty.
fn donated_run(
    exe: &dyn Executable,
    args: &[Vec<f32>],
    dims: &[Vec<usize>],
    donate: &[(usize, usize)],
) -> Vec<bool> {
    let bytes: Vec<TensorData> = args
        .iter()
        .zip(dims)
        .map(|(a, d)| TensorData::from_f32(d, a))
        .collect();
    let views: Vec<TensorView<'_>> = bytes.iter().map(|b| b.view()).collect();
    let want = f32s(exe.run_host(&views).unwrap());

    let mut data: Vec<Vec<f32>> = donate.iter().map(|&(a, _)| args[a].clone()).collect();
    let addrs: Vec<usize> = data.iter().map(|d| d.as_ptr() as usize).collect();
    let mut donations: Vec<Donation<'_>> = donate
        .iter()
        .zip(data.iter_mut())
        .map(|(&(arg, output), data)| Donation { arg, output, data })
        .collect();
    let mut views = views.clone();
    for d in &donations {
        views[d.arg].bytes = &[];
    }
    let got = f32s(exe.run_host_donating(&views, &mut donations).unwrap());
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        let same = g.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(
            same && g.len() == w.len(),
            "output {k} differs from the plain run"
        );
    }
    donate
        .iter()
        .zip(&data)
        .zip(&addrs)
        .map(|((&(_, output), d), &addr)| {
            let in_place = got[output].as_ptr() as usize == addr;
            assert_eq!(
                in_place,
                d.is_empty(),
                "a taken donation is the output's storage"
            );
            in_place
        })
        .collect()
}

#[test]
fn an_optimizer_update_is_computed_over_its_donated_state_with_the_same_bits() {
    // One tile and a partial one, many tiles over both cores, and a size whose outputs
    // are written with streaming stores.
    for n in [1000, 3 * 1024 + 77, (9 << 20) / 4 + 5] {
        let exe = compile(&adam_like(n));
        let args: Vec<Vec<f32>> = [1.0, 0.3, 0.2, 0.1]
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let v = seq(n, s);
                if i == 3 {
                    v.iter().map(|x| x.abs() + 0.5).collect()
                } else {
                    v
                }
            })
            .collect();
        let dims = vec![vec![n]; 4];
        let taken = donated_run(&*exe, &args, &dims, &[(0, 0), (2, 1), (3, 2)]);
        assert_eq!(
            taken,
            [true, true, true],
            "n = {n}: p, m and v are updated in place"
        );
        // Donating only some of them works the same way.
        let taken = donated_run(&*exe, &args, &dims, &[(3, 2)]);
        assert_eq!(taken, [true]);
    }
}

#[test]
fn a_matmul_epilogue_writes_over_donated_addends_but_never_over_its_operands() {
    let (m, k, n) = (37, 64, 70);
    // outs[0] = p − 0.1·(x·w), outs[1] = 0.9·s + x·w: the product cannot live in either
    // donated output while the epilogue still reads p and s there.
    for product_stored in [false, true] {
        let mut g = Graph::new("mm_update");
        let x = g.input("x", Shape::new(&[m, k], DType::F32));
        let w = g.input("w", Shape::new(&[k, n], DType::F32));
        let p = g.input("p", Shape::new(&[m, n], DType::F32));
        let s = g.input("s", Shape::new(&[m, n], DType::F32));
        let y = op(&mut g, Op::MatMul, vec![x, w]);
        let c = scalar(&mut g, 0.1);
        let d = scalar(&mut g, 0.9);
        let yc = bin(&mut g, BinaryOp::Mul, y, c);
        let p2 = bin(&mut g, BinaryOp::Sub, p, yc);
        let sd = bin(&mut g, BinaryOp::Mul, s, d);
        let s2 = bin(&mut g, BinaryOp::Add, sd, y);
        // With the product itself among the outputs, it must survive every store.
        g.set_outputs(if product_stored {
            vec![p2, s2, y]
        } else {
            vec![p2, s2]
        });
        let exe = compile(&g);
        let args = vec![
            seq(m * k, 1.0),
            seq(k * n, 0.5),
            seq(m * n, 0.7),
            seq(m * n, 0.3),
        ];
        let dims = vec![vec![m, k], vec![k, n], vec![m, n], vec![m, n]];
        let taken = donated_run(&*exe, &args, &dims, &[(2, 0), (3, 1)]);
        assert_eq!(
            taken,
            [true, true],
            "p and s are read at the stored index only"
        );
    }
}

#[test]
fn donations_the_program_cannot_take_are_only_read() {
    let n = 48;
    let mut g = Graph::new("transposed");
    let sh = Shape::new(&[n, n], DType::F32);
    let x = g.input("x", sh.clone());
    let y = g.input("y", sh);
    let t = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![x]);
    let s = bin(&mut g, BinaryOp::Add, t, y);
    let two = scalar(&mut g, 2.0);
    let later = bin(&mut g, BinaryOp::Mul, x, two);
    g.set_outputs(vec![s, later]);
    let exe = compile(&g);
    let args = vec![seq(n * n, 1.0), seq(n * n, 0.5)];
    let dims = vec![vec![n, n]; 2];
    // x is read transposed (element (i, j) of the sum reads x at (j, i)).
    assert_eq!(donated_run(&*exe, &args, &dims, &[(0, 0)]), [false]);
    assert_eq!(donated_run(&*exe, &args, &dims, &[(1, 0)]), [true]);
}

#[test]
fn bad_donations_are_errors_that_leave_the_data_in_place() {
    let n = 100;
    let exe = compile(&adam_like(n));
    let data: Vec<TensorData> = (0..4)
        .map(|_| TensorData::from_f32(&[n], &seq(n, 0.5)))
        .collect();
    let mut views: Vec<TensorView<'_>> = data.iter().map(|d| d.view()).collect();
    views[2].bytes = &[];
    let mut short = vec![1.0f32; n - 1];
    let err = exe
        .run_host_donating(
            &views,
            &mut [Donation {
                arg: 2,
                output: 1,
                data: &mut short,
            }],
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("99 f32 values were donated"), "{err}");
    assert_eq!(short.len(), n - 1);
    let (mut a, mut b) = (seq(n, 0.5), seq(n, 0.5));
    let err = exe
        .run_host_donating(
            &views,
            &mut [
                Donation {
                    arg: 2,
                    output: 1,
                    data: &mut a,
                },
                Donation {
                    arg: 2,
                    output: 2,
                    data: &mut b,
                },
            ],
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("donated twice"), "{err}");
    assert_eq!((a.len(), b.len()), (n, n));
}

/// `run_host_into` replaces what `out` held with the same bits as `run_host`, and on bad
/// arguments (too few, a wrong length) returns the error `run_host` returns and leaves
/// `out` empty — a kept result list never mixes runs.
#[test]
fn run_host_into_replaces_the_kept_list_and_empties_it_on_bad_arguments() {
    let n = 37;
    let exe = compile(&adam_like(n));
    let args: Vec<TensorData> = (0..4)
        .map(|i| TensorData::from_f32(&[n], &seq(n, 1.0 + i as f32)))
        .collect();
    let views: Vec<TensorView<'_>> = args.iter().map(TensorData::view).collect();
    let want = f32s(exe.run_host(&views).unwrap());
    let mut out = vec![HostOutput::F32(vec![9.0], vec![1])];
    for _ in 0..2 {
        exe.run_host_into(&views, &mut out).unwrap();
        let got = f32s(std::mem::take(&mut out));
        assert_eq!(got.len(), 3);
        for (g, w) in got.iter().zip(&want) {
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(g), bits(w));
        }
        out.push(HostOutput::F32(vec![9.0], vec![1]));
    }
    let short = TensorData::from_f32(&[n - 1], &seq(n - 1, 0.5));
    for bad in [
        views[..3].to_vec(),
        vec![views[0], views[1], views[2], short.view()],
    ] {
        let e = exe.run_host_into(&bad, &mut out).unwrap_err().to_string();
        let plain = exe.run_host(&bad).unwrap_err().to_string();
        assert_eq!(e, plain);
        assert!(out.is_empty(), "{e}: out kept {} results", out.len());
        out.push(HostOutput::F32(vec![9.0], vec![1]));
    }
}
