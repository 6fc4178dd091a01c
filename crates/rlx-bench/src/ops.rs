//! `--workloads OPS`: every op of W11's training step alone, at W11's shapes, each reported
//! as a fraction of the machine limit that bounds it (measured in the same run): memory
//! bandwidth for the data-movement and elementwise/row ops, the FMA peak for products.
//!
//! Each op is a traced [`Func`], compiled once and called through `Jitted::run` with host
//! slices, like the W1–W10 rows (so the per-call handoff of inputs and outputs is in the
//! time). Backward rows are `Func::grad` of `Σ op(x) ⊙ g` with a random cotangent input `g`:
//! the gradient program is the op's vector–Jacobian product and nothing else (the forward
//! value is dead unless the backward needs it). How bytes and flops are counted is in each
//! row's constructor and in the README.

#[cfg(all(feature = "train", feature = "transforms"))]
mod defs;
#[cfg(all(feature = "train", feature = "transforms"))]
mod peer;
#[cfg(all(feature = "train", feature = "transforms"))]
mod reference;

use crate::report::Row;
use crate::timing::Plan;

/// Every OPS row; with `peer_python` (`--torch`), PyTorch's timings of the same ops
/// (`peers/ops_torch.py`) after each rlx row. Returns lines to print after the table.
#[cfg(all(feature = "train", feature = "transforms"))]
pub fn rows(rows: &mut Vec<Row>, plan: Plan, peer_python: Option<&str>) -> Vec<String> {
    defs::all(rows, plan);
    match peer_python {
        Some(py) => peer::add_rows(rows, plan, py),
        None => vec![
            "OPS peer: add --torch PATH/TO/python (with torch) for PyTorch's rows in this run"
                .into(),
        ],
    }
}

#[cfg(not(all(feature = "train", feature = "transforms")))]
pub fn rows(_: &mut Vec<Row>, _: Plan, _: Option<&str>) -> Vec<String> {
    println!("note: OPS skipped: needs features `train` and `transforms` (grad, train_step)");
    Vec::new()
}
