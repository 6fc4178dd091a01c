//! The partials of the non-linear reductions, built once for both modes. (`sum` and
//! `mean` are linear: see [`super::linear`]; `prod`'s partials are
//! [`super::prod::others_product`].)

use crate::build::Build;
use crate::kinks;
use rlx_ir::{IrResult, NodeId};

/// The partials of a `max`/`min` reduction of `x` over `axes` whose result, in
/// keep-dim form, is `yk`: every element equal to the extremum gets `1/count` of the
/// derivative (ties split evenly, [`crate::kinks`]). Returns the mask of those
/// elements and `count`, the number of them per group, reduced with `keep_dim` as the
/// caller's seed is laid out. Forward mode takes `Σ where(hit, t) / count`, reverse
/// mode `where(hit, g / count)` broadcast back to `x`.
pub(crate) fn extremum_share<B: Build>(
    b: &mut B,
    x: NodeId,
    yk: NodeId,
    axes: &[usize],
    keep_dim: bool,
) -> IrResult<(NodeId, NodeId)> {
    let hit = kinks::extremum_hits(b, x, yk)?;
    let dt = b.dtype(x);
    let hits = b.cast(hit, dt)?;
    let count = b.sum(hits, axes.to_vec(), keep_dim)?;
    Ok((hit, count))
}
