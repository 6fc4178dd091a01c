//! CUDA C (or HIP C++) generated from a [`Program`]: one translation unit per program,
//! one parameter block per kernel, and a description of every entry point for the
//! launcher.
//!
//! The two dialects share every line but the preamble ([`Dialect::preamble`]): the text
//! uses only spellings both compilers take (`__global__`, `__shared__`,
//! `__syncthreads`, `atomicCAS`, `__uint_as_float`…), and the PTX conversions of the
//! prelude sit behind `__CUDA_ARCH__`, which hiprtc does not define (HIP takes the
//! portable software conversions instead).
//!
//! Each program kernel becomes one or more `extern "C"` entry points sharing a parameter
//! block `P<k> { char* b[..]; long long m[..]; }` (buffer pointers, then run-time
//! integers, see the private `meta` module):
//! - elementwise: one grid-stride kernel over the iteration space, lowered to the loop IR
//!   (`rlx_compile::loops`) and rendered by its C++ renderer;
//! - reduction: lowered to the loop IR too (a thread per output, or a block per output
//!   combining strided partials in a fixed shared-memory tree: bit-identical results);
//! - row ops (softmax, log-softmax, layer/RMS norm): lowered to the loop IR (a thread
//!   per short row, a block per long row with fixed shared-memory trees);
//! - the trees of both finish in registers with warp shuffles below 32 threads
//!   ([`CodegenOptions::shuffles`], on by default): the same results bit for bit, four
//!   or five barriers fewer per tree;
//! - attention (fused f32, or an opaque f16/bf16/f64 `Op::Attention`): lowered to the
//!   loop IR (a block per group of queries, key/value tiles staged in shared memory, an
//!   online softmax per query), with a tensor-core body for f16/bf16 on sm_80+;
//! - contraction: pack kernels (operands without a BLAS layout), the epilogue kernel run
//!   over a cuBLAS product, and a generic fused kernel for other dtypes;
//! - opaque: every op the loop IR lowers (concat, pad, cumsum, gather, scatter-add,
//!   cross-entropy, convolutions, pooling…); other ops run on the host (the shared host
//!   fallback, `exec::host`).

pub(crate) mod attn;
pub(crate) mod contract;
pub(crate) mod load;
pub(crate) mod meta;
pub(crate) mod opaque;
pub mod prelude;
pub(crate) mod reduce;
pub(crate) mod row;

use meta::{Ptr, lit};
pub use rlx_compile::loops::Dialect;
use rlx_compile::program::{Kernel, KernelKind, Program, concrete};
use rlx_ir::{DType, Dim, DimBinding};
use std::collections::HashMap;

/// What the launcher needs to know about one program kernel.
#[derive(Debug, Clone)]
pub(crate) struct KernelCode {
    /// Pointer slots of the parameter block.
    pub ptrs: Vec<Ptr>,
    /// Run-time integer slots of the parameter block.
    pub meta: Vec<Dim>,
    /// Entry points and how to launch them.
    pub kind: KCode,
}

/// Entry points per kernel kind.
#[derive(Debug, Clone)]
pub(crate) enum KCode {
    /// `entry` over `space`, one thread per element.
    Ew { entry: String, space: Vec<Dim> },
    /// See [`reduce`].
    Reduce(reduce::ReduceCode),
    /// See [`row`].
    Row(row::RowCode),
    /// See [`attn`].
    Attention(attn::AttnCode),
    /// See [`contract`].
    Contract(contract::ContractCode),
    /// See [`opaque`].
    Opaque(opaque::OpaqueCode),
}

/// A generated program.
#[derive(Debug, Clone)]
pub struct Generated {
    /// The CUDA C source (prelude included).
    pub source: String,
    /// Per program kernel: parameter layout and entry points.
    pub(crate) kernels: Vec<KernelCode>,
}

impl Generated {
    /// Names of every entry point, in source order.
    pub fn entry_names(&self) -> Vec<String> {
        let mut v = Vec::new();
        for k in &self.kernels {
            match &k.kind {
                KCode::Ew { entry, .. } => v.push(entry.clone()),
                KCode::Reduce(r) => v.extend(r.entries()),
                KCode::Row(r) => v.push(r.entry.clone()),
                KCode::Attention(a) => v.push(a.entry.clone()),
                KCode::Contract(c) => v.extend(c.entries()),
                KCode::Opaque(o) => v.extend(o.entry.iter().chain(&o.fp8_bias).cloned()),
            }
        }
        v
    }
}

/// The code generator's state for one kernel.
pub(crate) struct KGen<'a> {
    pub(crate) p: &'a Program,
    pub(crate) k: &'a Kernel,
    pub(crate) kid: usize,
    /// Bound buffer dims of a static program (values become literals).
    pub(crate) fixed: Option<&'a [Vec<usize>]>,
    pub(crate) ptrs: Vec<Ptr>,
    pub(crate) meta: Vec<Dim>,
    /// Device helper functions (after the parameter struct).
    pub(crate) funcs: String,
    /// Entry points.
    pub(crate) entries: String,
    /// The dialect of the loop-IR fragments rendered into this kernel.
    pub(crate) dialect: Dialect,
    /// How kernels are lowered to the loop IR (shuffles).
    pub(crate) lower: rlx_compile::loops::LowerOptions,
}

impl<'a> KGen<'a> {
    fn new(
        p: &'a Program,
        k: &'a Kernel,
        kid: usize,
        fixed: Option<&'a [Vec<usize>]>,
        dialect: Dialect,
        opts: CodegenOptions,
    ) -> Self {
        KGen {
            p,
            k,
            kid,
            fixed,
            ptrs: Vec::new(),
            meta: Vec::new(),
            funcs: String::new(),
            entries: String::new(),
            dialect,
            lower: rlx_compile::loops::LowerOptions {
                shuffles: opts.shuffles,
                ..Default::default()
            },
        }
    }

    /// The slot expression of pointer `x` (`p.b[i]`).
    pub(crate) fn ptr(&mut self, x: Ptr) -> String {
        let i = match self.ptrs.iter().position(|&q| q == x) {
            Some(i) => i,
            None => {
                self.ptrs.push(x);
                self.ptrs.len() - 1
            }
        };
        format!("p.b[{i}]")
    }

    /// The pointer of program buffer `b`.
    pub(crate) fn buf(&mut self, b: usize) -> String {
        self.ptr(Ptr::Buf(b))
    }

    /// The error word, as a `u64*`.
    pub(crate) fn err_ptr(&mut self) -> String {
        format!("(u64*){}", self.ptr(Ptr::Err))
    }

    /// A run-time dim: a literal for static programs, else a parameter slot.
    pub(crate) fn m(&mut self, d: Dim) -> String {
        if self.fixed.is_some() {
            return lit(meta::eval(&DimBinding::new(), d).expect("static dims evaluate"));
        }
        let i = match self.meta.iter().position(|&q| q == d) {
            Some(i) => i,
            None => {
                self.meta.push(d);
                self.meta.len() - 1
            }
        };
        format!("((I)p.m[{i}])")
    }

    /// A dim as C.
    pub(crate) fn dim(&mut self, d: Dim) -> String {
        match d {
            Dim::Static(n) => lit(n as i64),
            d => self.m(d),
        }
    }

    /// The product of `dims` as C.
    pub(crate) fn numel(&mut self, dims: &[Dim]) -> String {
        if dims.iter().all(|d| d.is_static()) {
            return lit(dims.iter().map(|d| d.unwrap_static() as i64).product());
        }
        let parts: Vec<String> = dims.iter().map(|&d| self.dim(d)).collect();
        format!("({})", parts.join(" * "))
    }

    /// The parameter struct, helpers and entries of this kernel.
    fn assemble(&self) -> String {
        format!(
            "// ---- kernel {kid}: {label} [{names}]\nstruct P{kid} {{ char* b[{nb}]; long long m[{nm}]; }};\n{funcs}{entries}\n",
            kid = self.kid,
            label = self.k.label(),
            names = self.k.fused_names.join(", "),
            nb = self.ptrs.len().max(1),
            nm = self.meta.len().max(1),
            funcs = self.funcs,
            entries = self.entries
        )
    }

    /// `RLX_KERNEL void name(const P<k> p)` header.
    pub(crate) fn entry_header(&self, name: &str) -> String {
        format!("RLX_KERNEL void {name}(const P{} p)", self.kid)
    }
}

/// Largest element count of any buffer or iteration space of a static program.
fn max_extent(p: &Program, bd: &[Vec<usize>]) -> usize {
    let mut m = bd
        .iter()
        .map(|d| d.iter().product::<usize>())
        .max()
        .unwrap_or(0);
    let b = DimBinding::new();
    for k in &p.kernels {
        let spaces: Vec<&[Dim]> = match &k.kind {
            KernelKind::Elementwise { space, .. } | KernelKind::Row { space, .. } => vec![space],
            KernelKind::Reduce {
                in_space,
                out_space,
                ..
            } => vec![in_space, out_space],
            KernelKind::Contraction { out_space, .. } | KernelKind::Attention { out_space, .. } => {
                vec![out_space]
            }
            KernelKind::Opaque { out, .. } => vec![out.dims()],
            KernelKind::RowGroup { space, .. } => vec![space],
        };
        for s in spaces {
            if let Some(d) = concrete(s, &b) {
                m = m.max(d.iter().product());
            }
        }
    }
    m
}

/// Generate the CUDA C of `p` ([`generate_for`] in [`Dialect::Cuda`]).
pub fn generate(p: &Program) -> Result<Generated, String> {
    generate_for(p, Dialect::Cuda)
}

/// Generate the source of `p` in `dialect` (CUDA for NVRTC, HIP for hiprtc) with the
/// default [`CodegenOptions`] (what the devices run).
///
/// Errors name the kernel and what it needs that the generator cannot express.
pub fn generate_for(p: &Program, dialect: Dialect) -> Result<Generated, String> {
    generate_with(p, dialect, CodegenOptions::default())
}

/// Choices of the code generator that do not change results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodegenOptions {
    /// Finish the work-group trees of reductions and row ops (softmax, norms) with warp
    /// shuffles below 32 threads (`__shfl_xor_sync` in CUDA, `__shfl_xor` of width 32 in
    /// HIP) instead of shared memory and barriers: the same results bit for bit
    /// (`rlx_compile::loops::LowerOptions::shuffles`). On by default; the executor turns
    /// it off under `RLX_CUDA_SHUFFLES=0`, for A/B runs.
    pub shuffles: bool,
}

impl Default for CodegenOptions {
    fn default() -> Self {
        CodegenOptions { shuffles: true }
    }
}

/// [`generate_for`] with explicit `opts`.
pub fn generate_with(
    p: &Program,
    dialect: Dialect,
    opts: CodegenOptions,
) -> Result<Generated, String> {
    let fixed: Option<Vec<Vec<usize>>> = if p.is_dynamic() {
        None
    } else {
        Some(
            p.buffers
                .iter()
                .map(|b| b.shape.static_dims().expect("static program"))
                .collect(),
        )
    };
    // 32-bit index arithmetic (cheap divisions) when every extent fits with room for the
    // grid-stride increment.
    let small = fixed
        .as_ref()
        .is_some_and(|bd| max_extent(p, bd) < (1usize << 31));
    let mut source = String::with_capacity(16 * 1024);
    source.push_str(dialect.preamble());
    // The loop-IR helpers first: the backend's own prelude builds on them.
    source.push_str(rlx_compile::loops::C_PRELUDE);
    source.push_str(prelude::PRELUDE);
    source.push_str(if small {
        "typedef unsigned int I;\n"
    } else {
        "typedef unsigned long long I;\n"
    });
    source.push_str("RLX_DEV I imin(I a, I b) { return a < b ? a : b; }\n");
    let mut kernels = Vec::with_capacity(p.kernels.len());
    for (kid, k) in p.kernels.iter().enumerate() {
        let mut g = KGen::new(p, k, kid, fixed.as_deref(), dialect, opts);
        let kind = match &k.kind {
            KernelKind::Elementwise { space, .. } => g.gen_ew(space),
            KernelKind::Reduce { .. } => g.gen_reduce().map(KCode::Reduce),
            KernelKind::Row { .. } => g.gen_row().map(KCode::Row),
            KernelKind::Attention { .. } => {
                rlx_compile::loops::lower_kernel_with(p, kid, attn::options(0))
                    .map_err(|e| e.to_string())
                    .and_then(|lk| g.gen_attention(&lk))
                    .map(KCode::Attention)
            }
            KernelKind::Contraction { .. } => g.gen_contract().map(KCode::Contract),
            KernelKind::Opaque { op, .. } => g.gen_opaque(op),
            KernelKind::RowGroup { .. } => Err(
                "row_group kernels are not lowered to CUDA (compile with row_groups off, as \
                 rlx_cuda::compile_options does)"
                    .to_string(),
            ),
        }
        .map_err(|e| {
            format!(
                "graph `{}`, kernel {kid} ({} of [{}]): {e}",
                p.name,
                k.label(),
                k.fused_names.join(", ")
            )
        })?;
        source.push_str(&g.assemble());
        kernels.push(KernelCode {
            ptrs: g.ptrs,
            meta: g.meta,
            kind,
        });
    }
    Ok(Generated { source, kernels })
}

/// What a lowered loop kernel (or fragment) needs from this kernel to be rendered into
/// it: its buffer slots as parameter-block pointers, the error word and code for its
/// faults, its dynamic dims as parameter slots, and a variable prefix.
struct LoopHost {
    ptrs: Vec<String>,
    errp: String,
    code: u64,
    dims: HashMap<u32, String>,
    prefix: &'static str,
    dialect: Dialect,
}

impl LoopHost {
    /// Call `f` with the renderer's view of this host.
    fn with<R>(&self, f: impl FnOnce(&rlx_compile::loops::CEmbedding<'_>) -> R) -> R {
        let (errp, code) = (&self.errp, self.code);
        f(&rlx_compile::loops::CEmbedding {
            index_type: "I",
            buf: &|i| self.ptrs[i].clone(),
            dim: &|s| self.dims[&s].clone(),
            // Faults land in the run's error word with this kernel's code (`error_of`).
            fail: &|f| format!("rlx_fail({errp}, {}ull);", code | f.code()),
            var_prefix: self.prefix,
            dialect: self.dialect,
        })
    }
}

impl KGen<'_> {
    /// The host bindings of lowered kernel `lk` in this kernel (registers its pointer and
    /// parameter slots).
    fn loop_host(&mut self, lk: &rlx_compile::loops::LoopKernel, prefix: &'static str) -> LoopHost {
        self.loop_host_with(lk, prefix, |g, b| g.buf(b))
    }

    /// [`KGen::loop_host`] with each of `lk`'s buffers bound by `bind` (a backend-owned
    /// slot such as a split reduction's scratch has no program buffer).
    fn loop_host_with(
        &mut self,
        lk: &rlx_compile::loops::LoopKernel,
        prefix: &'static str,
        mut bind: impl FnMut(&mut Self, usize) -> String,
    ) -> LoopHost {
        let ptrs = lk.bufs.iter().map(|b| bind(self, b.buf)).collect();
        let errp = if lk.can_fail() {
            self.err_ptr()
        } else {
            String::new()
        };
        let dims = lk
            .dims
            .iter()
            .map(|&s| (s, self.m(Dim::Dynamic(s))))
            .collect();
        LoopHost {
            ptrs,
            errp,
            code: ((self.kid as u64) + 1) << 8,
            dims,
            prefix,
            dialect: self.dialect,
        }
    }

    /// An elementwise kernel: one thread per element of `space`, grid-stride, lowered
    /// once to the loop IR (the semantics every GPU backend shares) and rendered into this
    /// backend's parameter-block convention.
    fn gen_ew(&mut self, space: &[Dim]) -> Result<KCode, String> {
        let name = format!("k{}", self.kid);
        let lk = rlx_compile::loops::lower_kernel(self.p, self.kid).map_err(|e| e.to_string())?;
        let host = self.loop_host(&lk, "v");
        let body = host.with(|e| rlx_compile::loops::render_c_loop(&lk, e));
        self.entries
            .push_str(&format!("{} {{\n{body}}}\n", self.entry_header(&name)));
        Ok(KCode::Ew {
            entry: name,
            space: space.to_vec(),
        })
    }

    /// Emit an epilogue: `core` (a variable of `core_dt`) at out-space flat index `flat`,
    /// evaluated with `epi` and stored. Returns the statements (lowered once to the loop
    /// IR and rendered into this kernel; `indent` is the host code's indentation).
    pub(crate) fn epilogue(
        &mut self,
        indent: &str,
        epi: &rlx_compile::program::Expr,
        out_space: &[Dim],
        flat: &str,
        core: &str,
        core_dt: DType,
    ) -> Result<String, String> {
        let frag = rlx_compile::loops::lower_epilogue(
            self.p, self.kid, epi, out_space, flat, core, core_dt,
        )
        .map_err(|e| e.to_string())?;
        let host = self.loop_host(&frag, "ep");
        Ok(host.with(|e| rlx_compile::loops::render_c_statements(&frag, e, indent.len() / 2)))
    }
}
