//! WGSL generation from the kernels of a [`Program`].
//!
//! Every kernel reads and writes one storage buffer, the arena `A` (an array of
//! 32-bit words holding every buffer of the program at a word offset), plus a uniform
//! block `P` of 32-bit parameters. Values are computed in `f32` (f32/f16/bf16 data)
//! or `i32` (i32/i16/i8/u8/bool data); every node rounds (f16/bf16) or wraps (narrow
//! integers) to its dtype, exactly as the oracle stores every node. Narrow elements are
//! packed in words: a kernel that writes f16/bf16/i16/i8/u8/bool declares the arena
//! atomic and updates its own bytes of a word with `atomicAnd`/`atomicOr`, so
//! neighbouring threads never lose each other's bytes.
//!
//! Scalar semantics are not written here: elementwise kernels, reductions, row ops,
//! contractions and attention are lowered whole, once, to the loop IR of
//! `rlx_compile::loops` (shared with the CUDA and HIP backends) and rendered by its WGSL
//! renderer (`lowered.rs`), whose helper library the opaque kernels call too. This module keeps the parameter binding and the helpers of the
//! opaque kernels (`opaque.rs`: concat, pad, cumsum), the only WGSL still written here.
//!
//! Sizes, strides and buffer offsets are [`Slot`]s: for static programs they are
//! inlined as constants; with dynamic dims they are read from the uniform block, so a
//! new binding of the dims needs new parameters but never a new shader.

pub(crate) mod kernels;
mod lowered;
mod opaque;

use crate::host::view_dims_sym;
use rlx_compile::loops::{WgslHelpers, wgsl_load, wgsl_store};
use rlx_compile::program::{BufId, Kernel, Program, Strided, ViewStep, bind_load};
use rlx_ir::{DType, Dim, DimBinding};

/// Threads per workgroup for 1-D launches.
pub(crate) const WG: u32 = 64;
/// Most 32-bit parameters one kernel may read from its uniform block.
pub(crate) const MAX_SLOTS: usize = 1024;
/// Bytes of the uniform binding every kernel sees.
pub(crate) const PARAM_BYTES: u64 = (MAX_SLOTS * 4) as u64;

/// A 32-bit parameter of a kernel, resolved per binding of the dynamic dims.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Slot {
    /// A dim's size.
    Dim(Dim),
    /// Word offset of a buffer in the arena.
    BufBase(BufId),
    /// Element offset of (strided) load `i` of the kernel.
    LoadOffset(usize),
    /// Stride of (strided) load `i` along axis `j`.
    LoadStride(usize, usize),
}

/// What slots resolve against for one binding.
pub(crate) struct Env<'a> {
    /// Sizes of the dynamic dims.
    pub(crate) binding: &'a DimBinding,
    /// Word offset of every buffer in the arena.
    pub(crate) bases: &'a [u64],
    /// Per load of the kernel: its strided form (for strided loads).
    pub(crate) strided: Vec<Option<Strided>>,
}

impl Env<'_> {
    /// The value of `s`, or `None` when it does not fit 32 bits or is unbound.
    pub(crate) fn resolve(&self, s: &Slot) -> Option<u32> {
        let v: u64 = match s {
            Slot::Dim(d) => d.resolve(self.binding)? as u64,
            Slot::BufBase(b) => self.bases[*b],
            Slot::LoadOffset(l) => self.strided.get(*l)?.as_ref()?.offset as u64,
            Slot::LoadStride(l, j) => {
                let s = *self.strided.get(*l)?.as_ref()?.strides.get(*j)?;
                u64::try_from(s).ok()?
            }
        };
        u32::try_from(v).ok()
    }
}

/// Strided forms of every load of `k` under `binding` (`None` where a reshape of a
/// non-contiguous view has no strided form: those loads are walked).
pub(crate) fn strided_loads(
    k: &Kernel,
    buf_dims: &[Vec<usize>],
    binding: &DimBinding,
) -> Vec<Option<Strided>> {
    k.loads
        .iter()
        .map(|l| bind_load(&buf_dims[l.buf], &l.steps, binding))
        .collect()
}

/// How a load's element index is computed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LoadMode {
    /// `offset + Σ idx·stride`.
    Strided,
    /// The view chain walked backwards per element (reshapes of non-contiguous views).
    Walk,
}

/// The storage class of a dtype in shaders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cls {
    /// Computed in f32.
    F,
    /// Computed in i32.
    I,
}

/// The compute class of `dt`, or why it has none in WGSL.
pub(crate) fn cls(dt: DType) -> Result<Cls, String> {
    match dt {
        DType::F32 | DType::F16 | DType::BF16 => Ok(Cls::F),
        DType::I32 | DType::I16 | DType::I8 | DType::U8 | DType::Bool => Ok(Cls::I),
        other => Err(format!(
            "dtype {other} has no WGSL compute type (f64, i64, u32 and complex run on the CPU)"
        )),
    }
}

/// The WGSL type name of a class.
pub(crate) fn ty(c: Cls) -> &'static str {
    match c {
        Cls::F => "f32",
        Cls::I => "i32",
    }
}

/// A generated shader: source, the slots its uniform block holds, and its launch.
#[derive(Debug, Clone)]
pub(crate) struct Shader {
    pub(crate) wgsl: String,
    pub(crate) slots: Vec<Slot>,
    pub(crate) launch: Launch,
}

/// How a kernel is dispatched.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Launch {
    /// One thread per element of these dims (64 per workgroup).
    Threads(Vec<Dim>),
    /// One workgroup per element of these dims.
    Groups(Vec<Dim>),
    /// One workgroup per `tile × tile` output tile of an `[batch.., m, n]` product:
    /// `batch · ⌈m/tile⌉ · ⌈n/tile⌉` workgroups, numbered like [`Launch::Groups`].
    Tiles {
        m: Dim,
        n: Dim,
        batch: Vec<Dim>,
        tile: u32,
    },
}

/// Shader builder for one kernel.
pub(crate) struct Gen<'a> {
    pub(crate) p: &'a Program,
    pub(crate) k: &'a Kernel,
    /// Static programs: every slot resolves here and is inlined.
    fixed: Option<&'a Env<'a>>,
    pub(crate) slots: Vec<Slot>,
    /// The WGSL helpers the shader calls (the loop IR renderer's library).
    helpers: WgslHelpers,
    pub(crate) body: String,
    tmp: usize,
    /// The arena is declared atomic (the kernel writes narrow elements).
    pub(crate) atomic: bool,
    modes: Vec<LoadMode>,
    /// Extra module-scope declarations (workgroup arrays).
    pub(crate) decls: String,
}

/// A multi-index space with a flat index and per-axis indices computed on demand.
pub(crate) struct Space {
    pub(crate) dims: Vec<Dim>,
    flat: Option<String>,
    idx: Option<Vec<String>>,
}

impl Space {
    /// A space indexed by the flat index expression `flat`.
    pub(crate) fn flat(dims: Vec<Dim>, flat: String) -> Space {
        Space {
            dims,
            flat: Some(flat),
            idx: None,
        }
    }
}

impl<'a> Gen<'a> {
    /// A builder for kernel `k`; `fixed` resolves slots of static programs.
    pub(crate) fn new(
        p: &'a Program,
        k: &'a Kernel,
        fixed: Option<&'a Env<'a>>,
    ) -> Result<Gen<'a>, String> {
        let atomic = k.stores.iter().any(|s| {
            let dt = p.buffers[s.buf].shape.dtype();
            dt.size_bytes() < 4
        });
        let modes = k
            .loads
            .iter()
            .enumerate()
            .map(|(i, l)| load_mode(p, &l.steps, fixed.and_then(|f| f.strided[i].as_ref())))
            .collect();
        Ok(Gen {
            p,
            k,
            fixed,
            slots: Vec::new(),
            helpers: WgslHelpers::new(atomic),
            body: String::new(),
            tmp: 0,
            atomic,
            modes,
            decls: String::new(),
        })
    }

    /// A `u32` expression for `s`: a literal for static programs, else a uniform read.
    pub(crate) fn u(&mut self, s: Slot) -> Result<String, String> {
        if let Some(f) = self.fixed {
            return f
                .resolve(&s)
                .map(|v| format!("{v}u"))
                .ok_or_else(|| format!("parameter {s:?} does not fit 32 bits"));
        }
        let i = match self.slots.iter().position(|x| *x == s) {
            Some(i) => i,
            None => {
                if self.slots.len() >= MAX_SLOTS {
                    return Err(format!(
                        "kernel needs more than {MAX_SLOTS} dynamic parameters"
                    ));
                }
                self.slots.push(s);
                self.slots.len() - 1
            }
        };
        Ok(format!("P.v[{}].{}", i / 4, ["x", "y", "z", "w"][i % 4]))
    }

    /// A `u32` expression for a dim.
    pub(crate) fn dim(&mut self, d: Dim) -> Result<String, String> {
        match d {
            Dim::Static(n) => u32::try_from(n)
                .map(|n| format!("{n}u"))
                .map_err(|_| format!("dim {n} does not fit 32 bits")),
            _ => self.u(Slot::Dim(d)),
        }
    }

    /// The product of `dims` as a `u32` expression.
    pub(crate) fn numel(&mut self, dims: &[Dim]) -> Result<String, String> {
        if dims.iter().all(|d| matches!(d, Dim::Static(_))) {
            let n: u64 = dims
                .iter()
                .map(|d| match d {
                    Dim::Static(n) => *n as u64,
                    _ => 1,
                })
                .product();
            return u32::try_from(n)
                .map(|n| format!("{n}u"))
                .map_err(|_| format!("{n} elements do not fit 32-bit indexing"));
        }
        let parts = dims
            .iter()
            .map(|d| self.dim(*d))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(format!("({})", parts.join(" * ")))
    }

    /// Require helper `name` in the shader.
    pub(crate) fn need(&mut self, name: &'static str) {
        self.helpers.need(name);
    }

    /// A fresh identifier.
    pub(crate) fn fresh(&mut self, prefix: &str) -> String {
        self.tmp += 1;
        format!("{prefix}_{}", self.tmp)
    }

    /// Append a statement line.
    pub(crate) fn line(&mut self, s: &str) {
        self.body.push_str("  ");
        self.body.push_str(s);
        self.body.push('\n');
    }

    /// `let` a fresh name bound to `e`; returns the name.
    pub(crate) fn bind(&mut self, prefix: &str, e: &str) -> String {
        let v = self.fresh(prefix);
        self.line(&format!("let {v} = {e};"));
        v
    }

    /// Per-axis indices of `flat` over `dims` (emits the divisions).
    pub(crate) fn unravel(&mut self, flat: &str, dims: &[Dim]) -> Result<Vec<String>, String> {
        let mut idx = vec![String::new(); dims.len()];
        let mut rest = self.bind("f", flat);
        for i in (0..dims.len()).rev() {
            if dims[i] == Dim::Static(1) {
                idx[i] = "0u".into();
                continue;
            }
            let d = self.dim(dims[i])?;
            if i == 0 {
                idx[i] = rest.clone();
                break;
            }
            idx[i] = self.bind("i", &format!("{rest} % {d}"));
            rest = self.bind("f", &format!("{rest} / {d}"));
        }
        Ok(idx)
    }

    /// The flat index of `idx` over `dims` as an expression.
    pub(crate) fn ravel(&mut self, idx: &[String], dims: &[Dim]) -> Result<String, String> {
        let mut e = String::from("0u");
        for (i, d) in idx.iter().zip(dims) {
            let dd = self.dim(*d)?;
            e = format!("({e} * {dd} + {i})");
        }
        Ok(e)
    }

    /// Per-axis indices of a space (computed now if needed).
    pub(crate) fn space_idx(&mut self, sp: &mut Space) -> Result<Vec<String>, String> {
        if sp.idx.is_none() {
            let f = sp
                .flat
                .clone()
                .expect("a space has a flat or a multi index");
            let dims = sp.dims.clone();
            sp.idx = Some(self.unravel(&f, &dims)?);
        }
        Ok(sp.idx.clone().unwrap())
    }

    /// Element index of load `l` at per-axis indices `idx` of its view (any mode).
    pub(crate) fn load_elem_at(&mut self, l: usize, idx: &[String]) -> Result<String, String> {
        match self.modes[l] {
            LoadMode::Walk => self.walk_elem(l, idx),
            _ => self.strided_elem(l, idx),
        }
    }

    fn strided_elem(&mut self, l: usize, idx: &[String]) -> Result<String, String> {
        let mut e = self.u(Slot::LoadOffset(l))?;
        let strided = self.fixed.and_then(|f| f.strided[l].clone());
        for (j, i) in idx.iter().enumerate() {
            if let Some(s) = &strided {
                match s.strides[j] {
                    0 => continue,
                    1 => {
                        e = format!("{e} + {i}");
                        continue;
                    }
                    _ => {}
                }
            }
            let st = self.u(Slot::LoadStride(l, j))?;
            e = format!("{e} + {i} * {st}");
        }
        Ok(self.bind("e", &e))
    }

    /// Walk the view chain of load `l` backwards from view indices `idx` to the element.
    fn walk_elem(&mut self, l: usize, idx: &[String]) -> Result<String, String> {
        let load = &self.k.loads[l];
        let steps = load.steps.clone();
        let buf_dims = self.p.buffers[load.buf].shape.dims().to_vec();
        let mut dims_at = vec![buf_dims.clone()];
        for s in &steps {
            let prev = dims_at.last().unwrap().clone();
            dims_at.push(view_dims_sym(&prev, std::slice::from_ref(s)));
        }
        let mut cur: Vec<String> = idx.to_vec();
        for (k, s) in steps.iter().enumerate().rev() {
            let in_dims = dims_at[k].clone();
            cur = match s {
                ViewStep::Reshape(_) => {
                    let f = self.ravel(&cur, &dims_at[k + 1].clone())?;
                    let f = self.bind("w", &f);
                    self.unravel(&f, &in_dims)?
                }
                ViewStep::Transpose(perm) => {
                    let mut n = vec![String::new(); perm.len()];
                    for (o, &p) in perm.iter().enumerate() {
                        n[p] = cur[o].clone();
                    }
                    n
                }
                ViewStep::Narrow { axis, start, .. } => {
                    let mut n = cur.clone();
                    n[*axis] = format!("({} + {start}u)", cur[*axis]);
                    n
                }
                ViewStep::Expand(_) => {
                    let off = cur.len() - in_dims.len();
                    let mut n = Vec::with_capacity(in_dims.len());
                    for (j, d) in in_dims.iter().enumerate() {
                        n.push(match d {
                            Dim::Static(1) => "0u".to_string(),
                            Dim::Static(_) => cur[j + off].clone(),
                            _ => {
                                let dd = self.dim(*d)?;
                                format!("select({}, 0u, {dd} == 1u)", cur[j + off])
                            }
                        });
                    }
                    n
                }
            };
        }
        let e = self.ravel(&cur, &buf_dims)?;
        Ok(self.bind("e", &e))
    }

    /// Word base of buffer `b` as an expression.
    pub(crate) fn base(&mut self, b: BufId) -> Result<String, String> {
        self.u(Slot::BufBase(b))
    }

    /// A compute value of element `e` of buffer `b` (bools as i32 0/1).
    pub(crate) fn read(&mut self, b: BufId, e: &str) -> Result<String, String> {
        let dt = self.p.buffers[b].shape.dtype();
        let base = self.base(b)?;
        let v = wgsl_load(&mut self.helpers, dt, &base, e).ok_or_else(|| cls(dt).unwrap_err())?;
        Ok(if dt == DType::Bool {
            format!("select(0i, 1i, {v})")
        } else {
            v
        })
    }

    /// Store compute value `v` as element `e` of buffer `b` (statement).
    pub(crate) fn write(&mut self, b: BufId, e: &str, v: &str) -> Result<(), String> {
        let dt = self.p.buffers[b].shape.dtype();
        let base = self.base(b)?;
        let v = if dt == DType::Bool {
            format!("({v} != 0i)")
        } else {
            v.to_string()
        };
        let st =
            wgsl_store(&mut self.helpers, dt, &base, e, &v).ok_or_else(|| cls(dt).unwrap_err())?;
        self.line(&st);
        Ok(())
    }

    /// The complete shader around the body.
    pub(crate) fn finish(self, wg: &str, launch: Launch) -> Shader {
        let mut s = String::new();
        let n = self.slots.len().div_ceil(4).max(1);
        s.push_str(&format!("struct Params {{ v: array<vec4<u32>, {n}> }}\n"));
        if self.atomic {
            s.push_str("@group(0) @binding(0) var<storage, read_write> A: array<atomic<u32>>;\n");
        } else {
            s.push_str("@group(0) @binding(0) var<storage, read_write> A: array<u32>;\n");
        }
        s.push_str("@group(0) @binding(1) var<uniform> P: Params;\n");
        s.push_str(&self.helpers.source());
        s.push_str(&self.decls);
        s.push_str(&format!(
            "@compute @workgroup_size({wg})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{\n"
        ));
        s.push_str(&self.body);
        s.push_str("}\n");
        Shader {
            wgsl: s,
            slots: self.slots,
            launch,
        }
    }
}

/// How a load with view `steps` is indexed. `fixed` is its strided form in a
/// static program.
fn load_mode(p: &Program, steps: &[ViewStep], fixed: Option<&Strided>) -> LoadMode {
    if steps.is_empty() || fixed.is_some() {
        return LoadMode::Strided;
    }
    if p.is_dynamic() {
        // Strided whatever the binding: reshapes only of the dense buffer itself.
        let first_other = steps
            .iter()
            .position(|s| !matches!(s, ViewStep::Reshape(_)))
            .unwrap_or(steps.len());
        if steps[first_other..]
            .iter()
            .all(|s| !matches!(s, ViewStep::Reshape(_)))
        {
            return LoadMode::Strided;
        }
    }
    LoadMode::Walk
}

/// `v` rounded (f16/bf16) or wrapped (narrow integers) to `dt`: the kernel core's value
/// before its epilogue (the epilogue's own nodes are lowered by the loop IR).
pub(crate) fn post(g: &mut Gen<'_>, dt: DType, v: &str) -> String {
    match dt {
        DType::F16 => {
            g.need("rf16");
            format!("rf16({v})")
        }
        DType::BF16 => {
            g.need("rbf16");
            format!("rbf16({v})")
        }
        DType::I16 => format!("(({v} << 16u) >> 16u)"),
        DType::I8 => format!("(({v} << 24u) >> 24u)"),
        DType::U8 => format!("({v} & 255i)"),
        DType::Bool => format!("select(0i, 1i, {v} != 0i)"),
        _ => v.to_string(),
    }
}
