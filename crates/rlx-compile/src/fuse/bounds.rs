//! What bounds an inlined chain of elementwise ops: the buffers its expression loads
//! (its frontier, for the cost of recomputing it) and the depth cap that cuts chains too
//! long for one kernel.

use super::{Class, MAX_FUSED_DEPTH};
use rlx_ir::Graph;

/// The most buffers a frontier lists; a wider one is [`Frontier::Wide`].
const MAX_FRONTIER: usize = 32;

/// The buffers an inlined value's expression loads (by node index).
#[derive(Debug, Clone)]
pub(super) enum Frontier {
    /// The node is a buffer (or a value computed in its own kernel) itself.
    Itself,
    /// Sorted node indices.
    Set(Vec<u32>),
    /// More than [`MAX_FRONTIER`] buffers.
    Wide,
}

impl Frontier {
    /// Add operand `i`'s frontier `o` to this one.
    pub(super) fn union(&mut self, o: &Frontier, i: usize) {
        let Frontier::Set(mine) = self else { return };
        match o {
            Frontier::Wide => *self = Frontier::Wide,
            Frontier::Itself => insert_sorted(mine, i as u32),
            Frontier::Set(v) => v.iter().for_each(|&x| insert_sorted(mine, x)),
        }
        if matches!(self, Frontier::Set(v) if v.len() > MAX_FRONTIER) {
            *self = Frontier::Wide;
        }
    }
}

fn insert_sorted(v: &mut Vec<u32>, x: u32) {
    if let Err(at) = v.binary_search(&x) {
        v.insert(at, x);
    }
}

/// The elementwise nodes to materialize so that no kernel inlines a chain of more than
/// [`MAX_FUSED_DEPTH`] elementwise ops. One forward walk: `depth[k]` is the longest
/// chain of inlinable elementwise ops ending at `k` (views pass their operand's on);
/// when an operand's chain would make `k`'s too long, the operand is cut (its depth
/// is at most the cap, so its own kernel stays within it).
pub(super) fn depth_cuts(g: &Graph, class: &[Class]) -> Vec<bool> {
    let n = g.len();
    let mut cut = vec![false; n];
    let mut depth = vec![0usize; n];
    // For a view, the node under its chain of views (else the node itself).
    let mut src: Vec<usize> = (0..n).collect();
    for node in g.nodes() {
        let k = node.id.index();
        match class[k] {
            Class::View => src[k] = src[node.inputs[0].index()],
            Class::Ew => {
                let mut d = 1;
                for &i in &node.inputs {
                    let s = src[i.index()];
                    if class[s] != Class::Ew || cut[s] {
                        continue;
                    }
                    if depth[s] + 1 > MAX_FUSED_DEPTH {
                        cut[s] = true;
                    } else {
                        d = d.max(depth[s] + 1);
                    }
                }
                depth[k] = d;
            }
            _ => {}
        }
    }
    cut
}
