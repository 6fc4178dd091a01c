//! Loop kernels as WGSL compute shaders, in the convention of the wgpu backend: every
//! buffer lives in one storage array `A` of 32-bit words at a word offset, kernel
//! parameters (buffer offsets, dynamic dims) are `u32`s, and elements narrower than a word
//! are packed (stores then go through `atomicAnd`/`atomicOr` on an atomic arena).
//!
//! WGSL has no f64 and no i64, so the loop IR's compute types are mapped as follows:
//! - `F32` → `f32`; f16/bf16 values are computed in f32 and re-rounded after each op by
//!   the IR's [`Un::RoundF16`]/[`Un::RoundBf16`] (bit manipulation in the prelude).
//! - `Index` → `u32`: every index literal must fit (larger extents are refused).
//! - `I64` → `i32`. Integer values of the IR are wrapped to their dtype's width after
//!   every node, so for dtypes of at most 32 bits the low 32 bits carry everything:
//!   `+ − ·`, negation, the bitwise ops and `<<` by less than 32 are ring operations, and
//!   their low 32 bits depend only on the operands' low 32 bits. The other operations
//!   (comparisons, min/max, `/` and `%`, `>>`, `abs`, conversions to float, bool or
//!   index) need the exact value: the renderer checks that each operand is known to lie
//!   in the i32 range (a wrapped node, a load of a ≤ 32-bit signed or u8 buffer, a
//!   literal, a select of such values, the clamp of a float → int cast…) and refuses the
//!   kernel otherwise. On such operands WGSL's i32 ops agree with the IR's i64 ones:
//!   `MIN / −1` is `MIN` in WGSL and wraps to `MIN` in the IR (`MIN % −1` is 0 in both);
//!   `>>` by 32…63 is rendered as `>> 31` (the sign fill); `<<` by ≥ 32 as 0; integer
//!   `pow` is the IR's own square-and-multiply loop. i64 and u32 *buffers* are refused
//!   (a u32 value above `i32::MAX` is not an i32 value).
//! - `F64`: refused, except where an f64 value is only a carrier of an f32 value or of a
//!   small integer, exact in f32 (the IR widens to f64 to cast floats to integers, to
//!   round integers to f16/bf16 once, to compare integers with floats, and to round an
//!   f32 to f16/bf16 or to an emulated format): those are
//!   rendered in f32, comparisons with f64 literals rounded in the direction that keeps
//!   their truth.
//! - `Bool` → `bool` (stored as a byte 0/1).
//!
//! [`Stmt::Fail`] needs an error channel from the embedding; without one the kernel is
//! refused.

mod access;
mod carrier;
mod error;
mod prelude;
#[cfg(test)]
mod tests;

pub use access::{wgsl_load, wgsl_store};
pub use error::WgslError;
pub use prelude::WgslHelpers;

use carrier::carried_range;

use super::{Access, Bin, Ex, Fault, Lit, LoopKernel, Stmt, Ty, Un, Var};
use rlx_ir::DType;
use std::fmt::Write;

/// Threads per workgroup of [`render_wgsl`]'s shaders (a 1-D launch of
/// `ceil(items / 64)` workgroups, spread over `x` and `y` when there are more than
/// 65535: the item index is `(wid.y · nwg.x + wid.x) · 64 + lid`).
pub const WGSL_WORKGROUP: u32 = 64;

/// How a rendered loop kernel reaches its buffers and parameters inside a shader the
/// caller assembles (see [`render_wgsl`] for a complete one).
pub struct WgslEmbedding<'a> {
    /// The `u32` expression of the word offset in `A` of buffer slot `i`.
    pub base: &'a dyn Fn(usize) -> String,
    /// The `u32` expression of dynamic dim `?s`.
    pub dim: &'a dyn Fn(u32) -> String,
    /// The statement recording a run-time error; `None`: kernels that can raise one are
    /// refused.
    pub fail: Option<&'a dyn Fn(Fault) -> String>,
    /// Prefix of the kernel's local variable names, distinct from the host code's names.
    pub var_prefix: &'a str,
    /// `Some(n)`: the device has the `subgroups` extension and every subgroup of a
    /// workgroup is `n` consecutive local invocations (`min == max` subgroup size), so
    /// shuffles of width `n` render as `subgroupShuffleXor` (the device then needs
    /// wgpu's `SUBGROUP` feature, see [`wgsl_uses_subgroups`]; naga 30 rejects the
    /// standard `enable subgroups;` directive as not yet implemented and gates the
    /// built-ins on its validator's `SUBGROUP` capability instead, so none is written).
    /// `None`: shuffles are refused.
    pub subgroup_size: Option<u32>,
}

/// Whether `k`'s shader calls subgroup built-ins (its device needs the subgroup feature).
pub fn wgsl_uses_subgroups(k: &LoopKernel) -> bool {
    fn any(body: &[Stmt]) -> bool {
        body.iter().any(|s| match s {
            Stmt::ShuffleXor { .. } => true,
            Stmt::Loop { body, .. } | Stmt::If { body, .. } => any(body),
            _ => false,
        })
    }
    any(&k.body)
}

/// Whether a shader running `k` must declare its arena atomic (it stores elements
/// narrower than a word).
pub fn wgsl_needs_atomic(k: &LoopKernel) -> bool {
    k.bufs
        .iter()
        .any(|b| b.access == Access::Write && b.dtype.size_bytes() < 4)
}

/// The complete compute shader of `k`: the arena `A` (binding 0, atomic when
/// [`wgsl_needs_atomic`]), a uniform block `P` of `u32` parameters (binding 1: the word
/// offset of each buffer slot in slot order, then each dynamic dim in `k.dims` order,
/// four to a `vec4<u32>`), the helpers it uses, and `main` running one item per
/// invocation ([`WGSL_WORKGROUP`] per workgroup) — or, for a work-group kernel, one
/// workgroup of [`LoopKernel::group`] invocations per group, its shared arrays declared
/// `var<workgroup>` (see [`wgsl_workgroup_decls`]).
pub fn render_wgsl(k: &LoopKernel) -> Result<String, WgslError> {
    render_wgsl_subgroups(k, None)
}

/// [`render_wgsl`] for a device whose subgroups all have `subgroup_size` lanes (see
/// [`WgslEmbedding::subgroup_size`]): shuffles of that width render as
/// `subgroupShuffleXor`.
pub fn render_wgsl_subgroups(
    k: &LoopKernel,
    subgroup_size: Option<u32>,
) -> Result<String, WgslError> {
    let mut helpers = WgslHelpers::new(wgsl_needs_atomic(k));
    let slot = |i: usize| format!("P.v[{}].{}", i / 4, ["x", "y", "z", "w"][i % 4]);
    let nb = k.bufs.len();
    let base = |i: usize| slot(i);
    let dim = |s: u32| {
        let j = k.dims.iter().position(|&d| d == s).expect("declared dim");
        slot(nb + j)
    };
    let body = render_wgsl_loop(
        k,
        &WgslEmbedding {
            base: &base,
            dim: &dim,
            fail: None,
            var_prefix: "v",
            subgroup_size,
        },
        &mut helpers,
    )?;
    let mut s = String::new();
    let words = (nb + k.dims.len()).div_ceil(4).max(1);
    let _ = writeln!(s, "struct Params {{ v: array<vec4<u32>, {words}> }}");
    let arena = if helpers.atomic() {
        "array<atomic<u32>>"
    } else {
        "array<u32>"
    };
    let _ = writeln!(
        s,
        "@group(0) @binding(0) var<storage, read_write> A: {arena};"
    );
    s.push_str("@group(0) @binding(1) var<uniform> P: Params;\n");
    s.push_str(&helpers.source());
    s.push_str(&wgsl_workgroup_decls(k, "v"));
    let _ = writeln!(
        s,
        "// {}\n@compute @workgroup_size({})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{",
        k.name,
        k.group.unwrap_or(WGSL_WORKGROUP)
    );
    s.push_str(&body);
    s.push_str("}\n");
    Ok(s)
}

/// The module-scope `var<workgroup>` declarations of `k`'s shared arrays, named with
/// the embedding's `var_prefix` (empty for kernels without work-groups).
pub fn wgsl_workgroup_decls(k: &LoopKernel, var_prefix: &str) -> String {
    let mut s = String::new();
    for (i, a) in k.shared.iter().enumerate() {
        let _ = writeln!(
            s,
            "var<workgroup> {var_prefix}sh{i}: array<{}, {}>;",
            wtype(a.ty),
            a.len
        );
    }
    s
}

/// The body of `k` for a `main` whose header the caller writes (with the builtins
/// `wid`, `nwg` and `lid` of [`render_wgsl`]): the item index, a return past the last
/// item, and the statements of one item. Helpers the body calls are added to `helpers`.
/// A work-group kernel needs `@workgroup_size(`[`LoopKernel::group`]`)`, one workgroup
/// per group (the group index is `wid.y · nwg.x + wid.x`; workgroups past the last
/// return at once, uniformly), and [`wgsl_workgroup_decls`] at module scope.
pub fn render_wgsl_loop(
    k: &LoopKernel,
    embed: &WgslEmbedding<'_>,
    helpers: &mut WgslHelpers,
) -> Result<String, WgslError> {
    let mut r = Renderer::new(k, embed, helpers)?;
    let mut s = String::new();
    let n = r.ex(&k.items)?;
    let want = r.k.ty(&k.items);
    let n = if want == Ty::Index {
        n
    } else {
        format!("u32({n})")
    };
    if k.group.is_some() {
        let _ = writeln!(
            s,
            "  let wg_group: u32 = wid.y * nwg.x + wid.x;\n  if (wg_group >= {n}) {{ return; }}\n  let wg_local: u32 = lid;"
        );
    } else {
        let _ = writeln!(
            s,
            "  let item: u32 = (wid.y * nwg.x + wid.x) * {WGSL_WORKGROUP}u + lid;\n  if (item >= {n}) {{ return; }}"
        );
    }
    r.block(&mut s, &k.body, 1)?;
    Ok(s)
}

/// The statements of fragment `k` (see [`super::lower_epilogue`]), indented by `depth`
/// levels of two spaces.
pub fn render_wgsl_statements(
    k: &LoopKernel,
    embed: &WgslEmbedding<'_>,
    helpers: &mut WgslHelpers,
    depth: usize,
) -> Result<String, WgslError> {
    let mut r = Renderer::new(k, embed, helpers)?;
    let mut s = String::new();
    r.block(&mut s, &k.body, depth)?;
    Ok(s)
}

/// Expression `e` of fragment `k` (see [`super::lower_value`]) as WGSL, in its compute
/// type's WGSL type (`f32`, `i32`, `u32` or `bool`).
pub fn render_wgsl_value(
    k: &LoopKernel,
    embed: &WgslEmbedding<'_>,
    helpers: &mut WgslHelpers,
    e: &Ex,
) -> Result<String, WgslError> {
    let mut r = Renderer::new(k, embed, helpers)?;
    r.ex(e)
}

/// The WGSL type of a compute type (f64 values are f32 carriers, see the module docs).
fn wtype(t: Ty) -> &'static str {
    match t {
        Ty::Bool => "bool",
        Ty::I64 => "i32",
        Ty::Index => "u32",
        Ty::F32 | Ty::F64 => "f32",
    }
}

struct Renderer<'a> {
    k: &'a LoopKernel,
    embed: &'a WgslEmbedding<'a>,
    h: &'a mut WgslHelpers,
    /// Variables some [`Stmt::Assign`] updates (declared `var`).
    assigned: Vec<bool>,
    /// I64 variables whose every value lies in the i32 range.
    fits: Vec<bool>,
    /// Loop counters with a literal end: their largest value.
    counter_max: Vec<Option<i64>>,
    /// I64 shared arrays whose every stored value lies in the i32 range.
    shared_fits: Vec<bool>,
}

fn walk(body: &[Stmt], f: &mut dyn FnMut(&Stmt)) {
    for s in body {
        f(s);
        if let Stmt::Loop { body, .. } | Stmt::If { body, .. } = s {
            walk(body, f);
        }
    }
}

impl<'a> Renderer<'a> {
    fn new(
        k: &'a LoopKernel,
        embed: &'a WgslEmbedding<'a>,
        h: &'a mut WgslHelpers,
    ) -> Result<Renderer<'a>, WgslError> {
        for b in &k.bufs {
            match b.dtype {
                DType::F64 => return Err(f64_err(k, "an f64 buffer".into())),
                DType::I64 | DType::U32 => {
                    return Err(WgslError::WideInteger {
                        kernel: k.name.clone(),
                        what: format!("a {:?} buffer", b.dtype),
                    });
                }
                DType::C64 | DType::C128 => {
                    return Err(f64_err(k, format!("a {:?} buffer", b.dtype)));
                }
                dt if b.access == Access::Write && dt.size_bytes() < 4 && !h.atomic() => {
                    return Err(WgslError::NarrowStore {
                        kernel: k.name.clone(),
                        dtype: dt,
                    });
                }
                _ => {}
            }
        }
        let n = k.vars.len();
        let mut assigned = vec![false; n];
        let mut counter_max = vec![None; n];
        walk(&k.body, &mut |s| match s {
            Stmt::Assign { var, .. } | Stmt::ShuffleXor { var, .. } => {
                assigned[var.0 as usize] = true
            }
            Stmt::Loop {
                var,
                end: Ex::Lit(Lit::Index(e)),
                ..
            } => counter_max[var.0 as usize] = Some(e - 1),
            _ => {}
        });
        let mut r = Renderer {
            k,
            embed,
            h,
            assigned,
            fits: vec![true; n],
            counter_max,
            shared_fits: vec![true; k.shared.len()],
        };
        // The largest fixpoint: a variable fits while every value given to it fits (an
        // accumulator's updates may read itself).
        loop {
            let mut next = r.fits.clone();
            let mut next_shared = r.shared_fits.clone();
            walk(&k.body, &mut |s| match s {
                Stmt::Let { var, value }
                | Stmt::Assign { var, value }
                | Stmt::ShuffleXor { var, value, .. }
                    if k.vars[var.0 as usize] == Ty::I64 =>
                {
                    next[var.0 as usize] &= r.fits32(value);
                }
                Stmt::SharedStore { arr, value, .. } if k.shared[*arr].ty == Ty::I64 => {
                    next_shared[*arr] &= r.fits32(value);
                }
                _ => {}
            });
            if next == r.fits && next_shared == r.shared_fits {
                break;
            }
            r.fits = next;
            r.shared_fits = next_shared;
        }
        Ok(r)
    }

    fn name(&self, v: Var) -> String {
        format!("{}{}", self.embed.var_prefix, v.0)
    }

    fn block(&mut self, s: &mut String, body: &[Stmt], depth: usize) -> Result<(), WgslError> {
        let pad = "  ".repeat(depth);
        for st in body {
            match st {
                Stmt::Let { var, value } => {
                    let t = wtype(self.k.vars[var.0 as usize]);
                    let kw = if self.assigned[var.0 as usize] {
                        "var"
                    } else {
                        "let"
                    };
                    let v = self.ex(value)?;
                    let _ = writeln!(s, "{pad}{kw} {}: {t} = {v};", self.name(*var));
                }
                Stmt::Assign { var, value } => {
                    let v = self.ex(value)?;
                    let _ = writeln!(s, "{pad}{} = {v};", self.name(*var));
                }
                Stmt::Store { buf, index, value } => {
                    let line = self.store(*buf, index, value)?;
                    let _ = writeln!(s, "{pad}{line}");
                }
                Stmt::Loop {
                    var,
                    start,
                    end,
                    body,
                } => {
                    let (a, b) = (self.ex(start)?, self.ex(end)?);
                    let v = self.name(*var);
                    let _ = writeln!(
                        s,
                        "{pad}for (var {v}: u32 = {a}; {v} < {b}; {v} = {v} + 1u) {{"
                    );
                    self.block(s, body, depth + 1)?;
                    let _ = writeln!(s, "{pad}}}");
                }
                Stmt::If { cond, body } => {
                    let c = self.ex(cond)?;
                    let _ = writeln!(s, "{pad}if ({c}) {{");
                    self.block(s, body, depth + 1)?;
                    let _ = writeln!(s, "{pad}}}");
                }
                Stmt::SharedStore { arr, index, value } => {
                    let (i, v) = (self.ex(index)?, self.ex(value)?);
                    let _ = writeln!(s, "{pad}{}sh{arr}[{i}] = {v};", self.embed.var_prefix);
                }
                Stmt::Barrier => {
                    let _ = writeln!(s, "{pad}workgroupBarrier();");
                }
                Stmt::ShuffleXor {
                    var,
                    value,
                    mask,
                    width,
                } => {
                    // Subgroups of exactly `width` consecutive invocations: the subgroup
                    // lane is the local index mod `width`, so XOR on the lane is XOR on
                    // the local index within the segment.
                    if self.embed.subgroup_size != Some(*width) {
                        return Err(WgslError::Shuffle {
                            kernel: self.k.name.clone(),
                            width: *width,
                            subgroup: self.embed.subgroup_size,
                        });
                    }
                    let v = self.ex(value)?;
                    let _ = writeln!(
                        s,
                        "{pad}{} = subgroupShuffleXor({v}, {mask}u);",
                        self.name(*var)
                    );
                }
                Stmt::TileMma(_) => {
                    return Err(WgslError::TileProduct {
                        kernel: self.k.name.clone(),
                    });
                }
                Stmt::Fail(f) => match self.embed.fail {
                    Some(fail) => {
                        let _ = writeln!(s, "{pad}{}", fail(*f));
                    }
                    None => {
                        return Err(WgslError::Fault {
                            kernel: self.k.name.clone(),
                            fault: *f,
                        });
                    }
                },
            }
        }
        Ok(())
    }

    fn store(&mut self, buf: usize, index: &Ex, value: &Ex) -> Result<String, WgslError> {
        let b = (self.embed.base)(buf);
        let i = self.ex(index)?;
        let v = self.ex(value)?;
        let dt = self.k.bufs[buf].dtype;
        Ok(wgsl_store(self.h, dt, &b, &i, &v).expect("dtype checked in `new`"))
    }

    fn load(&mut self, buf: usize, index: &Ex) -> Result<String, WgslError> {
        let b = (self.embed.base)(buf);
        let i = self.ex(index)?;
        let dt = self.k.bufs[buf].dtype;
        Ok(wgsl_load(self.h, dt, &b, &i).expect("dtype checked in `new`"))
    }

    /// Whether I64 expression `e`'s exact value is known to lie in the i32 range.
    fn fits32(&self, e: &Ex) -> bool {
        let in32 = |v: i64| i32::try_from(v).is_ok();
        match e {
            Ex::Lit(Lit::I64(v)) => in32(*v),
            Ex::Var(v) => self.fits[v.0 as usize],
            // The host code holds its integers in i32.
            Ex::External { .. } => true,
            Ex::Load { buf, .. } => matches!(
                self.k.bufs[*buf].dtype,
                DType::I8 | DType::I16 | DType::I32 | DType::U8
            ),
            Ex::Un(Un::Wrap(dt), _) => {
                matches!(dt, DType::I8 | DType::I16 | DType::I32 | DType::U8)
            }
            // The signed 32-bit word.
            Ex::Un(Un::F32Bits, _) => true,
            Ex::Select(_, a, b) => self.fits32(a) && self.fits32(b),
            Ex::Shared { arr, .. } => self.shared_fits[*arr],
            // Bitwise ops of sign-extended 32-bit values stay sign-extended; `>>` only
            // moves bits down.
            Ex::Bin(Bin::BitAnd | Bin::BitOr | Bin::BitXor, a, b) => {
                self.fits32(a) && self.fits32(b)
            }
            Ex::Bin(Bin::Shr, a, _) => self.fits32(a),
            Ex::Bin(Bin::Max | Bin::Min, a, b) => self.fits32(a) && self.fits32(b),
            Ex::Convert(Ty::I64, a) => match self.k.ty(a) {
                Ty::Bool => true,
                Ty::Index => match &**a {
                    Ex::Lit(Lit::Index(v)) => in32(*v),
                    Ex::Var(v) => self.counter_max[v.0 as usize].is_some_and(in32),
                    _ => false,
                },
                Ty::F32 | Ty::F64 => carried_range(a)
                    .is_some_and(|(lo, hi)| lo >= -2147483648.0 && hi <= 2147483647.0),
                Ty::I64 => self.fits32(a),
            },
            _ => false,
        }
    }

    /// `e` (an I64 operand of an operation that needs its exact value) as i32.
    fn exact(&mut self, e: &Ex, what: &str) -> Result<String, WgslError> {
        if self.k.ty(e) == Ty::I64 && !self.fits32(e) {
            return Err(WgslError::WideInteger {
                kernel: self.k.name.clone(),
                what: format!("{what} of an integer value not known to fit 32 bits"),
            });
        }
        self.ex(e)
    }

    fn lit(&self, l: Lit) -> Result<String, WgslError> {
        Ok(match l {
            Lit::Bool(b) => b.to_string(),
            // The low 32 bits (see the module docs: ring operations keep them right).
            Lit::I64(v) if v >= 0 && v <= i32::MAX as i64 => format!("{v}i"),
            Lit::I64(v) => format!("bitcast<i32>({:#010x}u)", v as u32),
            Lit::Index(v) if (0..=u32::MAX as i64).contains(&v) => format!("{v}u"),
            Lit::Index(v) => {
                return Err(WgslError::IndexRange {
                    kernel: self.k.name.clone(),
                    value: v,
                });
            }
            Lit::F32(v) => f32_lit(v),
            Lit::F64(v) if (v as f32) as f64 == v || v.is_nan() => f32_lit(v as f32),
            Lit::F64(v) => return Err(f64_err(self.k, format!("the f64 constant {v:?}"))),
        })
    }

    fn ex(&mut self, e: &Ex) -> Result<String, WgslError> {
        Ok(match e {
            Ex::Lit(l) => self.lit(*l)?,
            Ex::Var(v) => self.name(*v),
            Ex::External { name, .. } => name.clone(),
            Ex::Item => "item".into(),
            Ex::Group => "wg_group".into(),
            Ex::Local => "wg_local".into(),
            Ex::Shared { arr, index } => {
                format!("{}sh{arr}[{}]", self.embed.var_prefix, self.ex(index)?)
            }
            Ex::Dim(d) => (self.embed.dim)(*d),
            Ex::Load { buf, index } => self.load(*buf, index)?,
            Ex::Un(op, a) => self.unary(*op, a)?,
            Ex::Bin(op, a, b) => self.binary(*op, a, b)?,
            Ex::Select(c, a, b) => {
                let (c, a, b) = (self.ex(c)?, self.ex(a)?, self.ex(b)?);
                format!("select({b}, {a}, {c})")
            }
            // The WGSL specification lets a device evaluate `fma` as a rounded product
            // and a rounded sum (lavapipe does); such a device matches the interpreter
            // run with `eval::MulAddMode::Separate` instead.
            Ex::MulAdd(a, b, c) => {
                if self.k.ty(a) == Ty::F64 {
                    return Err(f64_err(self.k, "a fused multiply-add of f64 values".into()));
                }
                format!("fma({}, {}, {})", self.ex(a)?, self.ex(b)?, self.ex(c)?)
            }
            Ex::Convert(t, a) => self.convert(*t, a)?,
        })
    }

    fn convert(&mut self, t: Ty, a: &Ex) -> Result<String, WgslError> {
        let from = self.k.ty(a);
        if from == t {
            return self.ex(a);
        }
        Ok(match (t, from) {
            (Ty::Bool, Ty::F32 | Ty::F64) => {
                self.h.need("fcmp_");
                format!("(!feq_({}, 0.0))", self.ex(a)?)
            }
            (Ty::Bool, Ty::I64) => format!("({} != 0i)", self.exact(a, "a test against 0")?),
            (Ty::Bool, _) => format!("({} != 0u)", self.ex(a)?),
            (Ty::I64, Ty::Bool) => format!("select(0i, 1i, {})", self.ex(a)?),
            (Ty::I64, Ty::Index) => format!("i32({})", self.ex(a)?),
            (Ty::I64 | Ty::Index, Ty::F32 | Ty::F64) => {
                // Exact only where the value is clamped into the i32 range first (the
                // lowering's float → int cast).
                if carried_range(a).is_none_or(|(lo, hi)| lo < -2147483648.0 || hi > 2147483647.0) {
                    return Err(WgslError::WideInteger {
                        kernel: self.k.name.clone(),
                        what: "a float → integer conversion not clamped to the i32 range".into(),
                    });
                }
                let i = self.int_of_carrier(a)?;
                if t == Ty::Index {
                    format!("u32({i})")
                } else {
                    i
                }
            }
            (Ty::Index, Ty::I64) => format!("u32({})", self.exact(a, "an index")?),
            (Ty::Index, Ty::Bool) => format!("select(0u, 1u, {})", self.ex(a)?),
            (Ty::F32, Ty::Bool) => format!("select(0.0, 1.0, {})", self.ex(a)?),
            (Ty::F32, Ty::I64) => format!("f32({})", self.exact(a, "a conversion to float")?),
            (Ty::F32, Ty::Index) => format!("f32({})", self.ex(a)?),
            // An f64 carrier holds an f32-exact value.
            (Ty::F32, Ty::F64) | (Ty::F64, Ty::F32) => self.ex(a)?,
            (Ty::F64, _) => {
                return Err(f64_err(
                    self.k,
                    format!("a conversion of a {from:?} value to f64"),
                ));
            }
            (t, f) => unreachable!("conversion {f:?} → {t:?}"),
        })
    }

    fn unary(&mut self, op: Un, a: &Ex) -> Result<String, WgslError> {
        let t = self.k.ty(a);
        if t == Ty::F64 && !matches!(op, Un::RoundHalf(_) | Un::RoundFormat { .. }) {
            return Err(f64_err(self.k, format!("{op:?} of an f64 value")));
        }
        if t == Ty::I64 {
            return Ok(match op {
                Un::Neg => format!("(0i - {})", self.ex(a)?),
                Un::Abs => format!("abs({})", self.exact(a, "abs")?),
                Un::Wrap(dt) => {
                    let x = self.ex(a)?;
                    match dt {
                        DType::I8 => format!("((({x}) << 24u) >> 24u)"),
                        DType::I16 => format!("((({x}) << 16u) >> 16u)"),
                        DType::U8 => format!("(({x}) & 255i)"),
                        // i32 and u32 keep the low 32 bits (a u32 value above i32::MAX
                        // does not fit: `fits32` says so to its consumers).
                        _ => x,
                    }
                }
                // The low 32 bits are the word (a ring operation, no exact value needed).
                Un::F32FromBits => format!("bitcast<f32>({})", self.ex(a)?),
                Un::IntToF64 { prec } if prec <= 24 => {
                    self.h.need("int_round_");
                    format!(
                        "int_round_({}, {prec}u)",
                        self.exact(a, "a conversion to float")?
                    )
                }
                other => {
                    return Err(WgslError::WideInteger {
                        kernel: self.k.name.clone(),
                        what: format!("{other:?} of an integer"),
                    });
                }
            });
        }
        let x = self.ex(a)?;
        let mut call = |h: &'static str, f: &str| {
            self.h.need(h);
            format!("{f}({x})")
        };
        Ok(match op {
            Un::Neg => format!("(-{x})"),
            Un::Abs => format!("abs({x})"),
            Un::Sqrt => call("sqrt_", "sqrt_"),
            Un::Exp => format!("exp({x})"),
            Un::Expm1 => call("expm1_", "expm1_"),
            Un::Log => call("log_", "log_"),
            Un::Log1p => call("log1p_", "log1p_"),
            Un::Sin => call("trig_", "sin_"),
            Un::Cos => call("trig_", "cos_"),
            Un::Tan => call("trig_", "tan_"),
            Un::Atan => call("atan_", "atan_"),
            Un::Tanh => call("tanh_", "tanh_"),
            Un::Erf => call("erf_", "erf_"),
            Un::Erfc => call("erfc_", "erfc_"),
            Un::Floor => format!("floor({x})"),
            Un::Ceil => format!("ceil({x})"),
            // WGSL's `round` rounds half to even.
            Un::RoundEven => format!("round({x})"),
            Un::IsNan => call("nan_", "nan_"),
            Un::Not => format!("(!{x})"),
            Un::RoundF16 | Un::RoundHalf(DType::F16) => call("rf16", "rf16"),
            Un::RoundBf16 | Un::RoundHalf(_) => call("rbf16", "rbf16"),
            Un::F32Bits => format!("bitcast<i32>({x})"),
            Un::Wrap(_) | Un::IntToF64 { .. } | Un::F32FromBits => {
                unreachable!("integer operand")
            }
            // On an f32 carrier every result is an f32 (see `round_fmt_`).
            Un::RoundFormat {
                exp_bits,
                man_bits,
                max_normal,
            } => {
                self.h.need("round_fmt_");
                let bias = (1i64 << (exp_bits.clamp(1, 30) - 1)) - 1;
                let man = man_bits.min(52);
                let m = f32_lit(max_normal);
                format!("round_fmt_({x}, {man}i, {bias}i, {m})")
            }
        })
    }

    fn binary(&mut self, op: Bin, a: &Ex, b: &Ex) -> Result<String, WgslError> {
        let t = self.k.ty(a);
        if t == Ty::F64 {
            return self.carried_compare(op, a, b);
        }
        let name = format!("{op:?}");
        let exact = matches!(
            op,
            Bin::Div | Bin::Rem | Bin::Min | Bin::Max | Bin::Lt | Bin::Le | Bin::Eq | Bin::Ne
        );
        let (x, y) = if t == Ty::I64 && exact {
            (self.exact(a, &name)?, self.exact(b, &name)?)
        } else if t == Ty::I64 && op == Bin::Shr {
            (self.exact(a, &name)?, self.exact(b, "a shift amount")?)
        } else if t == Ty::I64 && op == Bin::Shl {
            (self.ex(a)?, self.exact(b, "a shift amount")?)
        } else {
            (self.ex(a)?, self.ex(b)?)
        };
        let infix = |o: &str| format!("({x} {o} {y})");
        let float = t == Ty::F32;
        let mut call = |h: &'static str, f: &str| {
            self.h.need(h);
            format!("{f}({x}, {y})")
        };
        Ok(match op {
            Bin::Add => infix("+"),
            Bin::Sub => infix("-"),
            Bin::Mul => infix("*"),
            Bin::Div => infix("/"),
            Bin::Rem if float => call("fmod_", "fmod_"),
            Bin::Rem => infix("%"),
            Bin::Pow if float => call("pow_", "pow_"),
            Bin::Atan2 if float => call("atan2_", "atan2_"),
            Bin::Pow | Bin::Atan2 => {
                return Err(WgslError::WideInteger {
                    kernel: self.k.name.clone(),
                    what: format!("{name} of integers"),
                });
            }
            Bin::Min if float => call("fminmax_", "fminn_"),
            Bin::Max if float => call("fminmax_", "fmaxn_"),
            Bin::Min => format!("min({x}, {y})"),
            Bin::Max => format!("max({x}, {y})"),
            Bin::Lt if float => call("fcmp_", "flt_"),
            Bin::Le if float => call("fcmp_", "fle_"),
            Bin::Eq if float => call("fcmp_", "feq_"),
            Bin::Ne if float => format!("(!{})", call("fcmp_", "feq_")),
            Bin::Lt => infix("<"),
            Bin::Le => infix("<="),
            Bin::Eq => infix("=="),
            Bin::Ne => infix("!="),
            Bin::And => infix("&&"),
            Bin::Or => infix("||"),
            Bin::BitAnd => infix("&"),
            Bin::BitOr => infix("|"),
            Bin::BitXor => infix("^"),
            // The IR's amounts are 0..64: by 32 or more the i64 value's low 32 bits are 0.
            Bin::Shl if t == Ty::I64 => {
                format!("select(0i, {x} << (u32({y}) & 31u), {y} < 32i)")
            }
            // By 31 or more only the sign fill is left.
            Bin::Shr if t == Ty::I64 => format!("({x} >> min(u32({y}), 31u))"),
            Bin::Shl => format!("({x} << {y})"),
            Bin::Shr => format!("({x} >> {y})"),
        })
    }
}

/// A WGSL f32 literal that reads back as exactly `v` (bit patterns for the values a
/// decimal literal cannot carry: negative zero, subnormals, non-finite values).
fn f32_lit(v: f32) -> String {
    if v.is_normal() || (v == 0.0 && v.is_sign_positive()) {
        // `{:?}` is the shortest text that parses back to the same value.
        format!("{v:?}f")
    } else {
        format!("bitcast<f32>({:#010x}u)", v.to_bits())
    }
}

fn f64_err(k: &LoopKernel, what: String) -> WgslError {
    WgslError::F64 {
        kernel: k.name.clone(),
        what,
    }
}
