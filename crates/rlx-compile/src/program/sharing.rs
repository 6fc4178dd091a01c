//! The rule that decides whether a cheap elementwise value read by several kernels is
//! recomputed in each of them or stored once.
//!
//! Fusion inlines elementwise ops into the kernels that read them. A value read by one
//! kernel is always inlined: it costs nothing but the ops. A value read by `S` kernels
//! is computed `S` times when inlined, and each reader loads every buffer the value's
//! inlined expression reads (its *frontier*). Stored, it is computed once, written
//! once and loaded by each reader. Elementwise work is memory-bound, so the rule counts
//! bytes moved per element of the value, plus a small charge per inlined op:
//!
//! ```text
//! recompute = S · (F + c·ops)
//! store     = (F + c·ops) + b + S·b
//! ```
//!
//! with `F` the frontier bytes per element (a frontier buffer read at full size
//! counts its element size; one broadcast into the value's space counts nothing — it
//! stays in cache), `b` the value's element size, `ops` the inlined ops the value
//! drags along and `c` = [`OP_BYTES`]. The value is stored when `store < recompute`
//! — except a bool mask, which stays inline: a comparison fuses into the select that
//! reads it, and backends keep masks in registers rather than loading them.
//!
//! A residual stream `x_{l+1} = x_l + f_l(x_l)` is the case this exists for: left
//! inlined, the stream at layer `l` is a sum over `l` stored buffers that every later
//! LayerNorm, residual add and backward kernel re-adds, so the step's cost grows with
//! the square of depth. Under the rule each `x_l` is stored once (its two or three
//! frontier buffers read by three or more kernels) and read back.
//!
//! Fusion applies the rule; the decisions are part of the [`Program`](super::Program)
//! it builds ([`Program::sharing`](super::Program::sharing)), so these types live with
//! the program, which depends on no pass, and `fuse` re-exports them (their public
//! paths are `rlx_compile::fuse::ShareCost` and so on).

use rlx_ir::NodeId;

/// The charge, in bytes per element, for one inlined elementwise op. A cheap op is
/// one vector instruction per 16 f32 lanes; loading those 16 lanes from memory at the
/// bandwidth of this project's machines costs about 4 to 8 times as long, so an op is
/// worth about a quarter of a loaded f32 byte-wise (4 bytes / 16).
pub const OP_BYTES: f64 = 0.25;

/// The longest chain of inlined elementwise ops that a value computed by several
/// kernels may drag along. Cheap values read by several kernels are recomputed in
/// each of them, together with every inlined op they depend on; when that chain is
/// longer than this, the value is stored once instead (otherwise a long chain read
/// all along by other kernels — a forward pass read by its backward pass, split by
/// `fuse::MAX_FUSED_DEPTH` — would be recomputed in each of them: quadratic work).
pub const MAX_RECOMPUTE_DEPTH: usize = 64;

/// The readers counted exactly; more are reported as "more than this".
pub const MAX_COUNTED_READERS: usize = 8;

/// The inputs of the recompute-or-store rule for one value (all per element of the
/// value's space).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShareCost {
    /// Kernels that read the value (at most [`MAX_COUNTED_READERS`] + 1).
    pub readers: usize,
    /// Bytes the value's inlined expression loads per element (its frontier).
    pub frontier_bytes: f64,
    /// Bytes of one element of the value.
    pub value_bytes: usize,
    /// Inlined elementwise ops on the longest chain the value drags along.
    pub ops: usize,
}

impl ShareCost {
    /// Bytes-equivalent per element of computing the value inside every reader.
    pub fn recompute(&self) -> f64 {
        self.readers as f64 * self.compute_once()
    }

    /// Bytes-equivalent per element of computing the value once, storing it and
    /// loading it in every reader.
    pub fn store(&self) -> f64 {
        let b = self.value_bytes as f64;
        self.compute_once() + b + self.readers as f64 * b
    }

    /// The rule: store when that moves fewer bytes than recomputing.
    ///
    /// ```
    /// use rlx_compile::fuse::ShareCost;
    /// // `a + b` (two f32 buffers) read by two kernels: recomputing wins.
    /// let two = ShareCost { readers: 2, frontier_bytes: 8.0, value_bytes: 4, ops: 1 };
    /// assert!(!two.should_store());
    /// // A residual sum of three f32 buffers read by three kernels: store it.
    /// let res = ShareCost { readers: 3, frontier_bytes: 12.0, value_bytes: 4, ops: 2 };
    /// assert!(res.should_store());
    /// ```
    pub fn should_store(&self) -> bool {
        self.readers >= 2 && self.store() < self.recompute()
    }

    fn compute_once(&self) -> f64 {
        self.frontier_bytes + OP_BYTES * self.ops as f64
    }
}

/// What fusion decided for an elementwise value that several kernels read.
///
/// `#[non_exhaustive]`: fusion may learn more reasons to store a value.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Sharing {
    /// Inlined into each reader: recomputing costs no more than storing.
    Recomputed(ShareCost),
    /// Stored once: reading it back is cheaper than recomputing it (the cost rule).
    StoredByCost(ShareCost),
    /// Stored once: the chain of inlined ops it drags along passed
    /// [`MAX_RECOMPUTE_DEPTH`].
    StoredDeepChain {
        /// Kernels that read it.
        readers: usize,
    },
    /// Stored once: its op is not cheap enough to compute more than once (a
    /// transcendental, `pow`, `atan2`, `mod`).
    StoredExpensive {
        /// Kernels that read it (or 1 when it is broadcast into a bigger space).
        readers: usize,
    },
}

impl Sharing {
    /// Whether the value gets a buffer.
    pub fn stored(&self) -> bool {
        !matches!(self, Sharing::Recomputed(_))
    }
}

/// One value's decision, as `explain()` reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedValue {
    /// The node of the compiled graph.
    pub node: NodeId,
    /// Its op's name.
    pub op: String,
    /// The decision and why.
    pub sharing: Sharing,
}

impl std::fmt::Display for SharedValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let readers = |n: usize| {
            if n > MAX_COUNTED_READERS {
                format!("more than {MAX_COUNTED_READERS} kernels")
            } else {
                format!("{n} kernels")
            }
        };
        write!(f, "{} ({})", self.node, self.op)?;
        match &self.sharing {
            Sharing::Recomputed(c) | Sharing::StoredByCost(c) => write!(
                f,
                " read by {}: recompute {:.2} B/elem vs store {:.2} B/elem \
                 (frontier {:.2} B, {} op(s), {} B value) -> {}",
                readers(c.readers),
                c.recompute(),
                c.store(),
                c.frontier_bytes,
                c.ops,
                c.value_bytes,
                if self.sharing.stored() {
                    "stored"
                } else {
                    "recomputed"
                }
            ),
            Sharing::StoredDeepChain { readers: r } => write!(
                f,
                " read by {}: stored, its inlined chain passes {} ops",
                readers(*r),
                MAX_RECOMPUTE_DEPTH
            ),
            Sharing::StoredExpensive { readers: r } => write!(
                f,
                " read by {}: stored, not cheap to recompute",
                readers(*r)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(readers: usize, frontier_bytes: f64, ops: usize) -> ShareCost {
        ShareCost {
            readers,
            frontier_bytes,
            value_bytes: 4,
            ops,
        }
    }

    #[test]
    fn a_value_read_by_one_kernel_is_never_stored() {
        assert!(!cost(1, 1000.0, 1000).should_store());
    }

    #[test]
    fn the_rule_is_the_documented_byte_count() {
        let c = cost(3, 12.0, 2);
        assert_eq!(c.recompute(), 3.0 * (12.0 + 2.0 * OP_BYTES));
        assert_eq!(c.store(), 12.0 + 2.0 * OP_BYTES + 4.0 + 3.0 * 4.0);
    }

    #[test]
    fn a_one_buffer_value_is_recomputed_until_its_chain_is_long() {
        // x + 1 (+ 1 …) read by two kernels: recompute 2(4 + c·d) vs store 4 + c·d + 12.
        assert!(!cost(2, 4.0, 10).should_store());
        assert!(!cost(2, 4.0, 32).should_store());
        assert!(cost(2, 4.0, 33).should_store());
    }

    #[test]
    fn more_readers_or_a_wider_frontier_tip_the_rule_to_storing() {
        assert!(!cost(2, 8.0, 1).should_store());
        assert!(cost(3, 8.0, 1).should_store());
        // Two readers: two f32 buffers are recomputed, three are stored.
        assert!(cost(2, 12.0, 1).should_store());
    }

    #[test]
    fn broadcast_operands_cost_nothing_so_a_bias_add_is_recomputed() {
        // y + bias, bias broadcast (0 bytes/elem), read by three kernels.
        assert!(!cost(3, 4.0, 1).should_store());
    }

    #[test]
    fn the_report_names_the_readers_costs_and_decision() {
        let mut g = rlx_ir::Graph::new("g");
        let node = g.input("x", rlx_ir::Shape::new(&[2], rlx_ir::DType::F32));
        let v = SharedValue {
            node,
            op: "add".into(),
            sharing: Sharing::StoredByCost(cost(9, 12.0, 2)),
        };
        let s = v.to_string();
        assert!(s.starts_with("%0 (add) read by more than 8 kernels"), "{s}");
        assert!(s.contains("-> stored"), "{s}");
    }
}
