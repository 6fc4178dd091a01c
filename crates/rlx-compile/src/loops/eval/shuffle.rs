//! Warp shuffles ([`Stmt::ShuffleXor`](crate::loops::Stmt::ShuffleXor)) in the
//! interpreter: the items of a work-group run them in lockstep, like barriers, so every
//! item's offered value is known before any item takes its partner's.

use super::{Machine, Value};
use crate::loops::{Ex, Stmt, Ty, Var};

/// The widest segment of the shuffles in `body` (1 when there are none), which the items
/// entering `body` must fill whole.
fn segment(body: &[Stmt]) -> u32 {
    body.iter()
        .map(|s| match s {
            Stmt::ShuffleXor { width, .. } => *width,
            Stmt::Loop { body, .. } | Stmt::If { body, .. } => segment(body),
            _ => 1,
        })
        .max()
        .unwrap_or(1)
}

impl Machine<'_> {
    /// The number of leading items for which `cond` holds, which must be every item
    /// before the first one for which it does not, in whole segments of the width of
    /// the shuffles in `body` (they then run them).
    pub(super) fn leading(
        &mut self,
        cond: &Ex,
        body: &[Stmt],
        lanes: &mut [Vec<Option<Value>>],
    ) -> Result<usize, String> {
        let width = segment(body);
        let mut held = Vec::with_capacity(lanes.len());
        for (l, vars) in lanes.iter_mut().enumerate() {
            std::mem::swap(&mut self.vars, vars);
            self.local = Some(l as u32);
            let v = self.ex(cond);
            std::mem::swap(&mut self.vars, vars);
            held.push(v? == Value::Bool(true));
        }
        let m = held.iter().take_while(|&&h| h).count();
        if held[m..].iter().any(|&h| h) || !m.is_multiple_of(width as usize) {
            return Err(format!(
                "loop eval of {}: shuffles run by items {:?} of {}; they need whole leading segments of {width} items",
                self.k.name,
                held.iter()
                    .enumerate()
                    .filter(|(_, h)| **h)
                    .map(|(l, _)| l)
                    .collect::<Vec<_>>(),
                lanes.len()
            ));
        }
        Ok(m)
    }

    /// [`Stmt::ShuffleXor`] over `lanes` (every item evaluates `value` first, then takes
    /// its partner's).
    pub(super) fn shuffle(
        &mut self,
        var: Var,
        value: &Ex,
        mask: u32,
        width: u32,
        lanes: &mut [Vec<Option<Value>>],
    ) -> Result<(), String> {
        if width < 2 || !width.is_power_of_two() {
            return Err(format!(
                "loop eval of {}: a shuffle of width {width}; widths are powers of two >= 2",
                self.k.name
            ));
        }
        if mask >= width || !lanes.len().is_multiple_of(width as usize) {
            return Err(format!(
                "loop eval of {}: a shuffle with mask {mask} over {} items; the mask must be below {width} and the items whole segments of {width}",
                self.k.name,
                lanes.len()
            ));
        }
        let want = match self.k.vars[var.0 as usize] {
            Ty::Index => Ty::I64,
            t => t,
        };
        let mut offered = Vec::with_capacity(lanes.len());
        for (l, vars) in lanes.iter_mut().enumerate() {
            std::mem::swap(&mut self.vars, vars);
            self.local = Some(l as u32);
            let v = self.ex(value);
            std::mem::swap(&mut self.vars, vars);
            let v = v?;
            if v.ty() != want || want == Ty::Bool {
                return Err(format!(
                    "loop eval of {}: variable {} is {want:?}, shuffled {v:?} (bools are not shuffled)",
                    self.k.name, var.0
                ));
            }
            offered.push(v);
        }
        for (l, vars) in lanes.iter_mut().enumerate() {
            vars[var.0 as usize] = Some(offered[l ^ mask as usize]);
        }
        Ok(())
    }
}
