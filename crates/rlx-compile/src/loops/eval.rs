//! A reference interpreter of loop kernels on host buffers.
//!
//! It runs every work item in order with the compute types a GPU uses (f32 arithmetic
//! in f32, not in f64 as the `rlx-ir` oracle does), so a lowered kernel can be checked
//! against the oracle — and a renderer's output against this — without a GPU. Every
//! index is bounds-checked: an out-of-range load or store is an error naming the kernel,
//! the buffer slot and the index, never a silent read.
//!
//! A work-group kernel is simulated group by group: the local items run statement by
//! statement in lockstep wherever a statement holds a barrier (its loop bounds and
//! conditions must then agree across the group, as on a GPU), and each item runs a
//! barrier-free statement to its end before the next item starts it. Between two
//! barriers, an element of a shared array written by one item and read or written by
//! another is a data race: an error naming the kernel, the array and the element, so a
//! lowering that forgets a barrier fails its tests instead of passing by luck.

use super::{Ex, Lit, LoopKernel, Stmt, Ty};
use rlx_ir::{DType, DimBinding};

mod scalar;
mod shuffle;

use scalar::{binary, convert, narrow, unary, widen};
mod tile;

/// A computed value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// A bool.
    Bool(bool),
    /// An i64.
    I64(i64),
    /// An f32.
    F32(f32),
    /// An f64.
    F64(f64),
}

impl Value {
    fn ty(self) -> Ty {
        match self {
            Value::Bool(_) => Ty::Bool,
            Value::I64(_) => Ty::I64,
            Value::F32(_) => Ty::F32,
            Value::F64(_) => Ty::F64,
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            Value::Bool(b) => b as u8 as f64,
            Value::I64(v) => v as f64,
            Value::F32(v) => v as f64,
            Value::F64(v) => v,
        }
    }
}

/// A host buffer: float and bool elements as f64 (exact for every float dtype), integer
/// elements as i64.
#[derive(Debug, Clone, PartialEq)]
pub enum HostBuf {
    /// f16, bf16, f32, f64 or bool elements.
    Float(Vec<f64>),
    /// Integer elements.
    Int(Vec<i64>),
}

impl HostBuf {
    /// `n` zeros of the representation `dt` uses.
    pub fn zeros(dt: DType, n: usize) -> HostBuf {
        if dt.is_int() {
            HostBuf::Int(vec![0; n])
        } else {
            HostBuf::Float(vec![0.0; n])
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            HostBuf::Float(v) => v.len(),
            HostBuf::Int(v) => v.len(),
        }
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How [`Ex::MulAdd`] is evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MulAddMode {
    /// One rounding (`mul_add`): what CUDA, HIP and the C renderer's `fmaf` compute.
    #[default]
    Fused,
    /// A rounded product, then a rounded sum: what a device computes when it evaluates
    /// WGSL's `fma` unfused, which the WGSL specification allows (lavapipe does).
    Separate,
}

/// Run `k` over host buffers (one per slot, see [`HostBuf`]); `binding` gives the
/// dynamic dims. Fused multiply-adds round once ([`MulAddMode::Fused`]).
pub fn run(k: &LoopKernel, bufs: &mut [HostBuf], binding: &DimBinding) -> Result<(), String> {
    run_with(k, bufs, binding, MulAddMode::Fused)
}

/// [`run`] with fused multiply-adds evaluated as `mode` says (the reference for a device
/// that does not fuse WGSL's `fma`).
pub fn run_with(
    k: &LoopKernel,
    bufs: &mut [HostBuf],
    binding: &DimBinding,
    mode: MulAddMode,
) -> Result<(), String> {
    if bufs.len() != k.bufs.len() {
        return Err(format!(
            "loop eval of {}: {} buffers given, the kernel has {} slots",
            k.name,
            bufs.len(),
            k.bufs.len()
        ));
    }
    let mut m = Machine {
        k,
        bufs,
        binding,
        vars: vec![None; k.vars.len()],
        item: 0,
        local: None,
        shared: Vec::new(),
        mode,
        tile_elems: super::TileMma::operand_arrays(k),
    };
    let items = match m.ex(&k.items)? {
        Value::I64(n) if n >= 0 => n,
        v => return Err(format!("loop eval of {}: item count {v:?}", k.name)),
    };
    let Some(size) = k.group else {
        for item in 0..items {
            m.item = item;
            m.block(&k.body)?;
        }
        return Ok(());
    };
    if size == 0 {
        return Err(format!("loop eval of {}: work-groups of 0 items", k.name));
    }
    for group in 0..items {
        m.item = group;
        m.shared = k
            .shared
            .iter()
            .map(|a| SharedState {
                vals: vec![None; a.len as usize],
                writer: vec![None; a.len as usize],
                reader: vec![Reader::None; a.len as usize],
            })
            .collect();
        let mut lanes = vec![vec![None; k.vars.len()]; size as usize];
        m.group_block(&k.body, &mut lanes)?;
    }
    Ok(())
}

/// Which local items read a shared element since the last barrier.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Reader {
    None,
    One(u32),
    Many,
}

/// One shared array of the running group: values, and who touched each element since
/// the last barrier (for race detection).
struct SharedState {
    vals: Vec<Option<Value>>,
    writer: Vec<Option<u32>>,
    reader: Vec<Reader>,
}

struct Machine<'a> {
    k: &'a LoopKernel,
    bufs: &'a mut [HostBuf],
    binding: &'a DimBinding,
    vars: Vec<Option<Value>>,
    /// The work item, or the group of a work-group kernel.
    item: i64,
    /// The local item running (work-group kernels).
    local: Option<u32>,
    shared: Vec<SharedState>,
    mode: MulAddMode,
    /// Per shared array: the element type of the [`Stmt::TileMma`] operands it holds.
    tile_elems: Vec<Option<DType>>,
}

/// Whether `s` holds a barrier.
fn has_barrier(s: &Stmt) -> bool {
    match s {
        Stmt::Barrier | Stmt::TileMma(_) => true,
        Stmt::Loop { body, .. } | Stmt::If { body, .. } => body.iter().any(has_barrier),
        _ => false,
    }
}

/// Whether `s` holds a barrier or a shuffle: statements the group's items run in
/// lockstep, statement by statement, rather than one item after another.
fn in_lockstep(s: &Stmt) -> bool {
    match s {
        Stmt::Barrier | Stmt::ShuffleXor { .. } | Stmt::TileMma(_) => true,
        Stmt::Loop { body, .. } | Stmt::If { body, .. } => body.iter().any(in_lockstep),
        _ => false,
    }
}

impl Machine<'_> {
    /// Run `body` for every local item of the group (`lanes`: their variables).
    fn group_block(
        &mut self,
        body: &[Stmt],
        lanes: &mut [Vec<Option<Value>>],
    ) -> Result<(), String> {
        for s in body {
            if !in_lockstep(s) {
                for (l, vars) in lanes.iter_mut().enumerate() {
                    std::mem::swap(&mut self.vars, vars);
                    self.local = Some(l as u32);
                    let r = self.block(std::slice::from_ref(s));
                    std::mem::swap(&mut self.vars, vars);
                    r?;
                }
                continue;
            }
            match s {
                Stmt::Barrier => {
                    for a in &mut self.shared {
                        a.writer.fill(None);
                        a.reader.fill(Reader::None);
                    }
                }
                Stmt::Loop {
                    var,
                    start,
                    end,
                    body,
                } => {
                    let (a, b) = (
                        self.uniform(start, lanes, "a loop bound")?,
                        self.uniform(end, lanes, "a loop bound")?,
                    );
                    let (Value::I64(a), Value::I64(b)) = (a, b) else {
                        return Err(format!("loop eval of {}: non-integer bounds", self.k.name));
                    };
                    for i in a..b {
                        for vars in lanes.iter_mut() {
                            vars[var.0 as usize] = Some(Value::I64(i));
                        }
                        self.group_block(body, lanes)?;
                    }
                }
                Stmt::If { cond, body } if body.iter().any(has_barrier) => {
                    if let Value::Bool(true) = self.uniform(cond, lanes, "a condition")? {
                        self.group_block(body, lanes)?;
                    }
                }
                // Shuffles only: the items where `cond` holds run them, and must be
                // whole leading segments (`local < 32`, say).
                Stmt::If { cond, body } => {
                    let m = self.leading(cond, body, lanes)?;
                    if m > 0 {
                        self.group_block(body, &mut lanes[..m])?;
                    }
                }
                Stmt::ShuffleXor {
                    var,
                    value,
                    mask,
                    width,
                } => self.shuffle(*var, value, *mask, *width, lanes)?,
                Stmt::TileMma(t) => self.tile_mma(t, lanes)?,
                _ => {
                    unreachable!("only barriers, shuffles, loops and conditionals run in lockstep")
                }
            }
        }
        Ok(())
    }

    /// The value of `e`, which must be the same for every local item (it decides whether
    /// a barrier is reached).
    fn uniform(
        &mut self,
        e: &Ex,
        lanes: &mut [Vec<Option<Value>>],
        what: &str,
    ) -> Result<Value, String> {
        let mut first: Option<Value> = None;
        for (l, vars) in lanes.iter_mut().enumerate() {
            std::mem::swap(&mut self.vars, vars);
            self.local = Some(l as u32);
            let v = self.ex(e);
            std::mem::swap(&mut self.vars, vars);
            let v = v?;
            match first {
                None => first = Some(v),
                Some(f) if f == v => {}
                Some(f) => {
                    return Err(format!(
                        "loop eval of {}: {what} around a barrier differs across the work-group ({f:?} for item 0, {v:?} for item {l}); barriers need uniform control flow",
                        self.k.name
                    ));
                }
            }
        }
        first.ok_or_else(|| format!("loop eval of {}: an empty work-group", self.k.name))
    }

    /// The element of shared array `arr` at `e`, checked.
    fn shared_index(&mut self, arr: usize, e: &Ex) -> Result<usize, String> {
        let Some(a) = self.k.shared.get(arr) else {
            return Err(format!(
                "loop eval of {}: no shared array {arr}",
                self.k.name
            ));
        };
        if self.local.is_none() {
            return Err(format!(
                "loop eval of {}: shared array {arr} used outside a work-group kernel",
                self.k.name
            ));
        }
        match self.ex(e)? {
            Value::I64(i) if i >= 0 && i < a.len as i64 => Ok(i as usize),
            v => Err(format!(
                "loop eval of {}: index {v:?} out of bounds of shared array {arr} ({} elements)",
                self.k.name, a.len
            )),
        }
    }

    fn race(&self, arr: usize, i: usize, what: &str, other: u32) -> String {
        format!(
            "loop eval of {}: data race on shared array {arr} element {i}: item {} {what} it while item {other} touched it since the last barrier",
            self.k.name,
            self.local.unwrap_or(0)
        )
    }

    fn block(&mut self, body: &[Stmt]) -> Result<(), String> {
        for s in body {
            match s {
                Stmt::Let { var, value } | Stmt::Assign { var, value } => {
                    let v = self.ex(value)?;
                    let want = self.k.vars[var.0 as usize];
                    // Index and i64 values share one representation here.
                    let want = if want == Ty::Index { Ty::I64 } else { want };
                    if v.ty() != want {
                        return Err(format!(
                            "loop eval of {}: variable {} is {want:?}, assigned {v:?}",
                            self.k.name, var.0
                        ));
                    }
                    self.vars[var.0 as usize] = Some(v);
                }
                Stmt::Store { buf, index, value } => {
                    let i = self.index(*buf, index)?;
                    let v = self.ex(value)?;
                    let dt = self.k.bufs[*buf].dtype;
                    match (&mut self.bufs[*buf], v) {
                        (HostBuf::Int(b), Value::I64(x)) => b[i] = x,
                        (HostBuf::Float(b), v) => b[i] = narrow(v, dt),
                        (HostBuf::Int(_), v) => {
                            return Err(format!(
                                "loop eval of {}: {v:?} stored into integer slot {buf}",
                                self.k.name
                            ));
                        }
                    }
                }
                Stmt::Loop {
                    var,
                    start,
                    end,
                    body,
                } => {
                    let (Value::I64(a), Value::I64(b)) = (self.ex(start)?, self.ex(end)?) else {
                        return Err(format!("loop eval of {}: non-integer bounds", self.k.name));
                    };
                    for i in a..b {
                        self.vars[var.0 as usize] = Some(Value::I64(i));
                        self.block(body)?;
                    }
                }
                Stmt::If { cond, body } => {
                    if let Value::Bool(true) = self.ex(cond)? {
                        self.block(body)?;
                    }
                }
                Stmt::SharedStore { arr, index, value } => {
                    let i = self.shared_index(*arr, index)?;
                    let v = self.ex(value)?;
                    let want = self.k.shared[*arr].ty;
                    let want = if want == Ty::Index { Ty::I64 } else { want };
                    if v.ty() != want {
                        return Err(format!(
                            "loop eval of {}: shared array {arr} is {want:?}, stored {v:?}",
                            self.k.name
                        ));
                    }
                    self.check_tile_element(*arr, i, v)?;
                    let me = self.local.expect("checked by shared_index");
                    let a = &self.shared[*arr];
                    if let Some(w) = a.writer[i].filter(|&w| w != me) {
                        return Err(self.race(*arr, i, "writes", w));
                    }
                    match a.reader[i] {
                        Reader::One(r) if r != me => return Err(self.race(*arr, i, "writes", r)),
                        Reader::Many => return Err(self.race(*arr, i, "writes", u32::MAX)),
                        _ => {}
                    }
                    let a = &mut self.shared[*arr];
                    a.vals[i] = Some(v);
                    a.writer[i] = Some(me);
                }
                Stmt::Barrier => {
                    return Err(format!(
                        "loop eval of {}: a barrier outside a work-group kernel",
                        self.k.name
                    ));
                }
                Stmt::ShuffleXor { .. } => {
                    return Err(format!(
                        "loop eval of {}: a shuffle outside a work-group kernel",
                        self.k.name
                    ));
                }
                Stmt::TileMma(_) => {
                    return Err(format!(
                        "loop eval of {}: a tile product outside a work-group kernel",
                        self.k.name
                    ));
                }
                Stmt::Fail(f) => {
                    return Err(format!("{}: {}", self.k.name, f.message()));
                }
            }
        }
        Ok(())
    }

    fn shared_load(&mut self, arr: usize, index: &Ex) -> Result<Value, String> {
        let i = self.shared_index(arr, index)?;
        let me = self.local.expect("checked by shared_index");
        let a = &self.shared[arr];
        if let Some(w) = a.writer[i].filter(|&w| w != me) {
            return Err(self.race(arr, i, "reads", w));
        }
        let v = a.vals[i].ok_or_else(|| {
            format!(
                "loop eval of {}: shared array {arr} element {i} read before any item wrote it",
                self.k.name
            )
        })?;
        let a = &mut self.shared[arr];
        a.reader[i] = match a.reader[i] {
            Reader::None => Reader::One(me),
            Reader::One(r) if r == me => Reader::One(me),
            _ => Reader::Many,
        };
        Ok(v)
    }

    /// The local item index, or an error outside work-group kernels.
    fn local_index(&self, what: &str) -> Result<Value, String> {
        match (self.k.group, self.local) {
            (Some(_), Some(l)) => Ok(Value::I64(l as i64)),
            _ => Err(format!(
                "loop eval of {}: {what} outside a work-group kernel",
                self.k.name
            )),
        }
    }

    fn index(&mut self, buf: usize, e: &Ex) -> Result<usize, String> {
        let len = self.bufs[buf].len();
        match self.ex(e)? {
            Value::I64(i) if i >= 0 && (i as usize) < len => Ok(i as usize),
            v => Err(format!(
                "loop eval of {}: index {v:?} out of bounds of slot {buf} ({len} elements)",
                self.k.name
            )),
        }
    }

    fn ex(&mut self, e: &Ex) -> Result<Value, String> {
        Ok(match e {
            Ex::Lit(l) => match *l {
                Lit::Bool(b) => Value::Bool(b),
                Lit::I64(v) | Lit::Index(v) => Value::I64(v),
                Lit::F32(v) => Value::F32(v),
                Lit::F64(v) => Value::F64(v),
            },
            Ex::Var(v) => self.vars[v.0 as usize]
                .ok_or_else(|| format!("loop eval of {}: variable {} unset", self.k.name, v.0))?,
            Ex::Item if self.k.group.is_none() => Value::I64(self.item),
            Ex::Item => {
                return Err(format!(
                    "loop eval of {}: the work item index in a work-group kernel",
                    self.k.name
                ));
            }
            Ex::Group => {
                self.local_index("the group index")?;
                Value::I64(self.item)
            }
            Ex::Local => self.local_index("the local index")?,
            Ex::Shared { arr, index } => self.shared_load(*arr, index)?,
            Ex::Dim(s) => Value::I64(self.binding.get(*s).ok_or_else(|| {
                format!(
                    "loop eval of {}: dynamic dim ?{s} is not bound",
                    self.k.name
                )
            })? as i64),
            Ex::Load { buf, index } => {
                let i = self.index(*buf, index)?;
                match &self.bufs[*buf] {
                    HostBuf::Int(b) => Value::I64(b[i]),
                    HostBuf::Float(b) => widen(b[i], self.k.bufs[*buf].dtype),
                }
            }
            Ex::Un(op, a) => {
                let a = self.ex(a)?;
                unary(*op, a)
                    .ok_or_else(|| format!("loop eval of {}: {op:?} of {a:?}", self.k.name))?
            }
            Ex::Bin(op, a, b) => {
                let (a, b) = (self.ex(a)?, self.ex(b)?);
                binary(*op, a, b).ok_or_else(|| {
                    format!("loop eval of {}: {op:?} of {a:?} and {b:?}", self.k.name)
                })?
            }
            Ex::Select(c, a, b) => {
                let (c, a, b) = (self.ex(c)?, self.ex(a)?, self.ex(b)?);
                match c {
                    Value::Bool(c) if a.ty() == b.ty() => {
                        if c {
                            a
                        } else {
                            b
                        }
                    }
                    _ => {
                        return Err(format!(
                            "loop eval of {}: select({c:?}, {a:?}, {b:?})",
                            self.k.name
                        ));
                    }
                }
            }
            Ex::MulAdd(a, b, c) => match (self.ex(a)?, self.ex(b)?, self.ex(c)?) {
                (Value::F32(a), Value::F32(b), Value::F32(c)) => Value::F32(match self.mode {
                    MulAddMode::Fused => a.mul_add(b, c),
                    MulAddMode::Separate => a * b + c,
                }),
                (Value::F64(a), Value::F64(b), Value::F64(c)) => Value::F64(match self.mode {
                    MulAddMode::Fused => a.mul_add(b, c),
                    MulAddMode::Separate => a * b + c,
                }),
                (a, b, c) => {
                    return Err(format!(
                        "loop eval of {}: mul_add({a:?}, {b:?}, {c:?}) needs three f32 or three f64 values",
                        self.k.name
                    ));
                }
            },
            Ex::Convert(t, a) => convert(*t, self.ex(a)?),
            Ex::External { name, .. } => {
                return Err(format!(
                    "loop eval of {}: `{name}` is defined by the host kernel; fragments are rendered, not run",
                    self.k.name
                ));
            }
        })
    }
}
