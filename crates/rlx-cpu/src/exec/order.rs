//! Run order for locality: an elementwise kernel that reads a buffer an earlier kernel
//! also reads is run right after that kernel when nothing in between depends on it or
//! is disturbed by it, so the shared operand is read from cache the second time.
//!
//! The case that asks for it: a fused training step over many params computes the
//! forward and backward first and the optimizer updates last, so each param (and, when
//! the gradients are inputs, each gradient) is read once by an early kernel and again
//! by its update kernel, megabytes of other params later — from memory both times. Run
//! next to the earlier reader, the update finds its operands in L2/L3.
//!
//! Only elementwise kernels move, only earlier, and only past kernels they have no byte
//! of storage in common with except shared reads (checked on the bound pointers of
//! the run, so donated arguments and in-place outputs count as what they are), and only
//! when they write no arena temporary (whose bytes the memory plan may share with a
//! temporary live in between). Every kernel therefore sees exactly the data it saw in
//! program order, and the results are the same bits. `RLX_CPU_REORDER=0` runs every
//! program in program order (for A/B measurements).

use rlx_compile::program::{BufKind, KernelKind, Program};

/// Kernels searched backwards for an earlier reader (bounds the work per run).
const WINDOW: usize = 64;

/// Shared operand bytes worth moving a kernel for (smaller ones stay in L1/L2 anyway).
const MIN_SHARED: usize = 64 << 10;

/// `[lo, hi)` byte range of buffer `b`.
fn span(bases: &[*mut u8], bytes: &[usize], b: usize) -> (usize, usize) {
    let lo = bases[b] as usize;
    (lo, lo + bytes[b])
}

fn overlap(a: (usize, usize), b: (usize, usize)) -> bool {
    a.0 < b.1 && b.0 < a.1 && a.0 < a.1 && b.0 < b.1
}

/// The order to run `p`'s kernels in (a permutation of `0..p.kernels.len()`), or `None`
/// for program order. `bases[b]` / `bytes[b]`: buffer `b`'s storage in this run.
pub(crate) fn locality_order(
    p: &Program,
    bases: &[*mut u8],
    bytes: &[usize],
) -> Option<Vec<usize>> {
    let n = p.kernels.len();
    if n < 3 || std::env::var_os("RLX_CPU_REORDER").is_some_and(|v| v == "0") {
        return None;
    }
    let reads: Vec<Vec<(usize, usize)>> = p
        .kernels
        .iter()
        .map(|k| k.reads().map(|b| span(bases, bytes, b)).collect())
        .collect();
    let writes: Vec<Vec<(usize, usize)>> = p
        .kernels
        .iter()
        .map(|k| k.writes().map(|b| span(bases, bytes, b)).collect())
        .collect();
    let mut order: Vec<usize> = (0..n).collect();
    let mut moved = false;
    for k in 0..n {
        let kernel = &p.kernels[k];
        if !matches!(kernel.kind, KernelKind::Elementwise { .. })
            || kernel
                .writes()
                .any(|b| matches!(p.buffers[b].kind, BufKind::Temp))
        {
            continue;
        }
        let pos = order.iter().position(|&x| x == k).expect("a permutation");
        // Walk back over kernels K may pass; stop at the first it may not.
        let mut target = None;
        for i in (pos.saturating_sub(WINDOW)..pos).rev() {
            let x = order[i];
            let shared: usize = reads[k]
                .iter()
                .filter(|r| reads[x].iter().any(|s| overlap(**r, *s)))
                .map(|r| r.1 - r.0)
                .sum();
            if shared >= MIN_SHARED {
                target = Some(i);
                break;
            }
            let conflict = writes[x]
                .iter()
                .any(|w| reads[k].iter().chain(&writes[k]).any(|o| overlap(*w, *o)))
                || reads[x]
                    .iter()
                    .any(|r| writes[k].iter().any(|w| overlap(*r, *w)));
            if conflict {
                break;
            }
        }
        // Only worth it when K actually jumps over something.
        if let Some(i) = target.filter(|&i| i + 1 < pos) {
            order.remove(pos);
            order.insert(i + 1, k);
            moved = true;
        }
    }
    moved.then_some(order)
}

#[cfg(test)]
mod tests {
    use super::locality_order;
    use crate::CpuBackend;
    use rlx_compile::program::{KernelKind, Program};
    use rlx_ir::{BinaryOp, DType, Graph, NodeId, Op, ReduceOp, Shape, TensorData};
    use rlx_runtime::{Backend, Device};

    /// Per param `x_i`, gradient-like input `g_i`: the loss `Σ_i Σ x_i·g_i` (its
    /// reductions first in program order) and each `x_i·0.5 + g_i` (elementwise, last),
    /// the shape of a fused training step whose gradients are inputs. `chained`: the
    /// second update also reads the first update's result (a dependency it must keep).
    fn step_graph(n: usize, len: usize, chained: bool) -> Graph {
        let mut g = Graph::new("order_step");
        // 2-D, summed over both axes: kernels that stay apart (a row group would take
        // 1-D ones, reduced over their last axis, into one kernel).
        let shape = Shape::new(&[len / 64, 64], DType::F32);
        let xs: Vec<(NodeId, NodeId)> = (0..n)
            .map(|i| {
                (
                    g.input(format!("x{i}"), shape.clone()),
                    g.input(format!("g{i}"), shape.clone()),
                )
            })
            .collect();
        let mut loss = None;
        for &(x, gr) in &xs {
            let prod = g.add_op(Op::Binary(BinaryOp::Mul), vec![x, gr]).unwrap();
            let sum = g
                .add_op(
                    Op::Reduce {
                        op: ReduceOp::Sum,
                        axes: vec![0, 1],
                        keep_dim: false,
                    },
                    vec![prod],
                )
                .unwrap();
            loss = Some(match loss {
                None => sum,
                Some(l) => g.add_op(Op::Binary(BinaryOp::Add), vec![l, sum]).unwrap(),
            });
        }
        let half = g.add_node(
            Op::Constant {
                data: TensorData::from_f64_as(DType::F32, &[], &[0.5]).bytes,
            },
            Vec::new(),
            Shape::scalar(DType::F32),
        );
        let mut outs = vec![loss.unwrap()];
        for (i, &(x, gr)) in xs.iter().enumerate() {
            let scaled = g.add_op(Op::Binary(BinaryOp::Mul), vec![x, half]).unwrap();
            let mut u = g
                .add_op(Op::Binary(BinaryOp::Add), vec![scaled, gr])
                .unwrap();
            if chained && i == 1 {
                u = g
                    .add_op(Op::Binary(BinaryOp::Add), vec![u, outs[1]])
                    .unwrap();
            }
            outs.push(u);
        }
        g.set_outputs(outs);
        g
    }

    fn program(g: &Graph) -> Program {
        rlx_compile::compile(g, &crate::compile_options()).unwrap()
    }

    /// Distinct, contiguous fake storage per buffer, each its real size (the order
    /// only compares ranges).
    fn fake_storage(p: &Program) -> (Vec<*mut u8>, Vec<usize>) {
        let bytes: Vec<usize> = p
            .buffers
            .iter()
            .map(|b| b.shape.size_bytes().expect("static shapes"))
            .collect();
        let mut at = 4096usize;
        let bases = bytes
            .iter()
            .map(|&b| {
                let base = at as *mut u8;
                at += b.next_multiple_of(64).max(64);
                base
            })
            .collect();
        (bases, bytes)
    }

    /// Every pair of kernels that share storage other than by both reading it keeps its
    /// program order (the property that makes the results those of program order).
    fn assert_dependencies_kept(p: &Program, bases: &[*mut u8], bytes: &[usize], order: &[usize]) {
        let span = |b: usize| (bases[b] as usize, bases[b] as usize + bytes[b]);
        let hit = |a: (usize, usize), b: (usize, usize)| a.0 < b.1 && b.0 < a.1;
        let at: Vec<usize> = (0..order.len())
            .map(|k| order.iter().position(|&x| x == k).unwrap())
            .collect();
        for a in 0..order.len() {
            for b in a + 1..order.len() {
                let (ka, kb) = (&p.kernels[a], &p.kernels[b]);
                let conflict = ka
                    .writes()
                    .any(|w| kb.reads().chain(kb.writes()).any(|o| hit(span(w), span(o))))
                    || ka
                        .reads()
                        .any(|r| kb.writes().any(|w| hit(span(r), span(w))));
                if conflict {
                    assert!(at[a] < at[b], "kernels {a} and {b} swapped: {order:?}");
                }
            }
        }
    }

    #[test]
    fn each_update_runs_right_after_the_reduction_reading_its_operands() {
        let len = 1 << 15; // 128 KiB per operand
        let p = program(&step_graph(4, len, false));
        let (bases, bytes) = fake_storage(&p);
        let order = locality_order(&p, &bases, &bytes).expect("updates move");
        assert_dependencies_kept(&p, &bases, &bytes, &order);
        let ew = |k: usize| matches!(p.kernels[k].kind, KernelKind::Elementwise { .. });
        // Every elementwise kernel that reads a param follows a kernel reading it too.
        for (i, &k) in order.iter().enumerate().skip(1) {
            let big = p.kernels[k].reads().all(|b| bytes[b] >= 4 * len);
            if ew(k) && big && p.kernels[k].reads().count() >= 2 {
                let prev = &p.kernels[order[i - 1]];
                assert!(
                    p.kernels[k].reads().any(|b| prev.reads().any(|c| c == b)),
                    "kernel {k} not next to a reader of its operands: {order:?}"
                );
            }
        }
    }

    #[test]
    fn a_kernel_never_passes_the_writer_of_what_it_reads_and_small_operands_stay() {
        let len = 1 << 15;
        let p = program(&step_graph(3, len, true));
        let (bases, bytes) = fake_storage(&p);
        let order = locality_order(&p, &bases, &bytes).unwrap_or((0..p.kernels.len()).collect());
        assert_dependencies_kept(&p, &bases, &bytes, &order);
        // 1 KiB operands: not worth moving for.
        let p = program(&step_graph(4, 256, false));
        let (bases, bytes) = fake_storage(&p);
        assert_eq!(locality_order(&p, &bases, &bytes), None);
    }

    #[test]
    fn reordered_steps_give_the_oracles_results() {
        for chained in [false, true] {
            let len = 1 << 15;
            let g = step_graph(3, len, chained);
            let data: Vec<TensorData> = (0..6)
                .map(|j| {
                    let v: Vec<f64> = (0..len)
                        .map(|i| ((i * (j + 3)) as f64 * 0.37).sin())
                        .collect();
                    TensorData::from_f64_as(DType::F32, &[len / 64, 64], &v)
                })
                .collect();
            rlx_testkit::check(&g, &data, "cpu", |g| CpuBackend.compile(Device::Cpu, g));
        }
    }
}
