//! Matrix-tile products ([`Stmt::TileMma`](crate::loops::Stmt::TileMma)) in the
//! interpreter: the whole group reaches the statement together (it is a barrier before
//! and after), then every warp multiplies its own tiles in the documented order.

use super::{Machine, Reader, Value};
use crate::loops::{Ex, SHUFFLE_WIDTH, TILE, TileMma, TileOperand, Ty};
use rlx_ir::DType;

impl Machine<'_> {
    /// Forget who touched which shared element: what a barrier does.
    fn clear_races(&mut self) {
        for a in &mut self.shared {
            a.writer.fill(None);
            a.reader.fill(Reader::None);
        }
    }

    /// `v` stored at element `i` of shared array `arr`: an error when `arr` holds tile
    /// operands of an element type `v` is not exactly representable in (a backend stores
    /// such arrays in that type).
    pub(super) fn check_tile_element(&self, arr: usize, i: usize, v: Value) -> Result<(), String> {
        let Some(dt) = self.tile_elems.get(arr).copied().flatten() else {
            return Ok(());
        };
        let Value::F32(x) = v else {
            return Err(format!(
                "loop eval of {}: shared array {arr} holds {dt:?} tile operands, stored {v:?}",
                self.k.name
            ));
        };
        let back = if dt == DType::F16 {
            half::f16::from_f32(x).to_f32()
        } else {
            half::bf16::from_f32(x).to_f32()
        };
        if back == x || x.is_nan() {
            Ok(())
        } else {
            Err(format!(
                "loop eval of {}: {x:e} stored at element {i} of shared array {arr}, which holds {dt:?} tile operands, is not a {dt:?} value; round it first (Un::RoundF16 / Un::RoundBf16)",
                self.k.name
            ))
        }
    }

    /// The value of `e` in the items `base..base + lanes.len()` of one warp, which must
    /// agree.
    fn warp_uniform(
        &mut self,
        e: &Ex,
        lanes: &mut [Vec<Option<Value>>],
        base: usize,
    ) -> Result<i64, String> {
        let mut first = None;
        for (l, vars) in lanes.iter_mut().enumerate() {
            std::mem::swap(&mut self.vars, vars);
            self.local = Some((base + l) as u32);
            let v = self.ex(e);
            std::mem::swap(&mut self.vars, vars);
            let v = match v? {
                Value::I64(v) => v,
                v => {
                    return Err(format!(
                        "loop eval of {}: a tile offset of {v:?}; offsets are indices",
                        self.k.name
                    ));
                }
            };
            match first {
                None => first = Some(v),
                Some(f) if f == v => {}
                Some(f) => {
                    return Err(format!(
                        "loop eval of {}: a tile offset is {f} for item {base} and {v} for item {} of the same warp; it must be one per warp",
                        self.k.name,
                        base + l
                    ));
                }
            }
        }
        first.ok_or_else(|| format!("loop eval of {}: an empty warp", self.k.name))
    }

    /// The f32 at element `i` of shared array `arr`, which must have been written.
    fn tile_read(&self, arr: usize, i: usize) -> Result<f32, String> {
        match self.shared[arr].vals.get(i).copied().flatten() {
            Some(Value::F32(x)) => Ok(x),
            Some(v) => Err(format!(
                "loop eval of {}: tile element {i} of shared array {arr} is {v:?}",
                self.k.name
            )),
            None => Err(format!(
                "loop eval of {}: tile element {i} of shared array {arr} read before any item wrote it",
                self.k.name
            )),
        }
    }

    /// Check operand `op` (`rows` × `cols` window, offsets aligned to `align`, strides to
    /// `stride_align`) against its array; `what` names it in errors.
    fn check_operand(
        &self,
        op: &TileOperand,
        what: &str,
        span: (u32, u32),
        align: (i64, u32),
        offset: i64,
    ) -> Result<(), String> {
        let name = &self.k.name;
        let Some(a) = self.k.shared.get(op.arr) else {
            return Err(format!(
                "loop eval of {name}: tile {what} names shared array {}, which does not exist",
                op.arr
            ));
        };
        if a.ty != Ty::F32 {
            return Err(format!(
                "loop eval of {name}: tile {what} is shared array {} of {:?}; tile operands are f32 arrays",
                op.arr, a.ty
            ));
        }
        if offset < 0 || offset % align.0 != 0 || !op.stride.is_multiple_of(align.1) {
            return Err(format!(
                "loop eval of {name}: tile {what} at offset {offset} with stride {}; the hardware needs offsets that are multiples of {} and strides of {}",
                op.stride, align.0, align.1
            ));
        }
        let last = offset + ((span.0 - 1) * op.stride + span.1 - 1) as i64;
        if span.1 > op.stride || last >= a.len as i64 {
            return Err(format!(
                "loop eval of {name}: tile {what} of {}×{} at offset {offset}, stride {} runs past shared array {} ({} elements) or overlaps its own rows",
                span.0, span.1, op.stride, op.arr, a.len
            ));
        }
        Ok(())
    }

    /// [`Stmt::TileMma`](crate::loops::Stmt::TileMma) over the group's items `lanes`.
    pub(super) fn tile_mma(
        &mut self,
        t: &TileMma,
        lanes: &mut [Vec<Option<Value>>],
    ) -> Result<(), String> {
        let w = SHUFFLE_WIDTH as usize;
        if !matches!(t.elem, DType::F16 | DType::BF16)
            || t.k_steps == 0
            || !lanes.len().is_multiple_of(w)
            || t.c.arr == t.a.arr
            || t.c.arr == t.b.arr
        {
            return Err(format!(
                "loop eval of {}: a tile product of {:?} in {} steps over {} items, C in array {} and A, B in {} and {}; it needs f16 or bf16, at least one step, whole warps of {w} items and a C array apart from A and B",
                self.k.name,
                t.elem,
                t.k_steps,
                lanes.len(),
                t.c.arr,
                t.a.arr,
                t.b.arr
            ));
        }
        self.clear_races();
        let kk = TILE * t.k_steps;
        let mut out: Vec<(usize, f32)> = Vec::new();
        let mut written = std::collections::HashSet::new();
        for seg in 0..lanes.len() / w {
            let warp = &mut lanes[seg * w..(seg + 1) * w];
            let oa = self.warp_uniform(&t.a.offset, warp, seg * w)?;
            let ob = self.warp_uniform(&t.b.offset, warp, seg * w)?;
            let oc = self.warp_uniform(&t.c.offset, warp, seg * w)?;
            self.check_operand(&t.a, "A", (TILE, kk), (16, 8), oa)?;
            let b_span = if t.b_transposed {
                (TILE, kk)
            } else {
                (kk, TILE)
            };
            self.check_operand(&t.b, "B", b_span, (16, 8), ob)?;
            self.check_operand(&t.c, "C", (TILE, TILE), (8, 4), oc)?;
            for i in 0..TILE {
                for j in 0..TILE {
                    let ci = (oc + (i * t.c.stride + j) as i64) as usize;
                    if !written.insert(ci) {
                        return Err(format!(
                            "loop eval of {}: two warps' C tiles share element {ci} of shared array {}",
                            self.k.name, t.c.arr
                        ));
                    }
                    let mut c = self.tile_read(t.c.arr, ci)?;
                    for k in 0..kk {
                        let a = self.tile_read(t.a.arr, (oa + t.a_at(i, k) as i64) as usize)?;
                        let b = self.tile_read(t.b.arr, (ob + t.b_at(k, j) as i64) as usize)?;
                        c = a.mul_add(b, c);
                    }
                    out.push((ci, c));
                }
            }
        }
        let vals = &mut self.shared[t.c.arr].vals;
        for (i, v) in out {
            vals[i] = Some(Value::F32(v));
        }
        self.clear_races();
        Ok(())
    }
}
