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

use rlx_compile::loops::WgslHelpers;
use rlx_compile::program::{BufId, Kernel, Program};
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
}

/// What slots resolve against for one binding.
pub(crate) struct Env<'a> {
    /// Sizes of the dynamic dims.
    pub(crate) binding: &'a DimBinding,
    /// Word offset of every buffer in the arena.
    pub(crate) bases: &'a [u64],
}

impl Env<'_> {
    /// The value of `s`, or `None` when it does not fit 32 bits or is unbound.
    pub(crate) fn resolve(&self, s: &Slot) -> Option<u32> {
        let v: u64 = match s {
            Slot::Dim(d) => d.resolve(self.binding)? as u64,
            Slot::BufBase(b) => self.bases[*b],
        };
        u32::try_from(v).ok()
    }
}

/// Whether `dt` has a WGSL compute type (f32 for f32/f16/bf16, i32 for the narrow
/// integers and bool), or why not.
pub(crate) fn cls(dt: DType) -> Result<(), String> {
    match dt {
        DType::F32 | DType::F16 | DType::BF16 => Ok(()),
        DType::I32 | DType::I16 | DType::I8 | DType::U8 | DType::Bool => Ok(()),
        other => Err(format!(
            "dtype {other} has no WGSL compute type (f64, i64, u32 and complex run on the CPU)"
        )),
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

/// Shader builder for one kernel: binds the lowered kernel's parameters and wraps its
/// rendered body into a module.
pub(crate) struct Gen<'a> {
    pub(crate) p: &'a Program,
    pub(crate) k: &'a Kernel,
    /// Static programs: every slot resolves here and is inlined.
    fixed: Option<&'a Env<'a>>,
    pub(crate) slots: Vec<Slot>,
    /// The WGSL helpers the shader calls (the loop IR renderer's library).
    helpers: WgslHelpers,
    pub(crate) body: String,
    /// The arena is declared atomic (the kernel writes narrow elements).
    pub(crate) atomic: bool,
    /// Extra module-scope declarations (workgroup arrays).
    pub(crate) decls: String,
    /// The device's fixed subgroup size when reductions and row ops finish their trees
    /// with subgroup shuffles (see `Gpu::subgroup_size`); `None`: shared memory only.
    pub(crate) subgroup: Option<u32>,
}

impl<'a> Gen<'a> {
    /// A builder for kernel `k`; `fixed` resolves slots of static programs; `subgroup`
    /// see [`Gen::subgroup`].
    pub(crate) fn new(
        p: &'a Program,
        k: &'a Kernel,
        fixed: Option<&'a Env<'a>>,
        subgroup: Option<u32>,
    ) -> Gen<'a> {
        let atomic = k.stores.iter().any(|s| {
            let dt = p.buffers[s.buf].shape.dtype();
            dt.size_bytes() < 4
        });
        Gen {
            p,
            k,
            fixed,
            slots: Vec::new(),
            helpers: WgslHelpers::new(atomic),
            body: String::new(),
            atomic,
            decls: String::new(),
            subgroup,
        }
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

    /// Word base of buffer `b` as an expression.
    pub(crate) fn base(&mut self, b: BufId) -> Result<String, String> {
        self.u(Slot::BufBase(b))
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
