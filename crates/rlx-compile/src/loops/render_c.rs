//! Loop kernels as CUDA or HIP C++ source (one renderer; the two dialects differ only
//! in the lines of [`Dialect::preamble`]).
//!
//! Work items map onto a grid-stride loop, so any launch size is correct; work-group
//! kernels map a group onto one thread block of exactly the group's size (a grid-stride
//! loop over the groups, with a barrier between groups so the shared arrays are free to
//! reuse). The source
//! includes no headers: f16 and bf16 travel as `unsigned short` bit patterns and are
//! converted by the small functions of the prelude (round to nearest even, like the
//! oracle), so NVRTC and hiprtc compile it without a toolkit's include tree.

use super::{Bin, Ex, Fault, Lit, LoopKernel, Stmt, TileMma, Ty, Un};
use rlx_ir::DType;
use std::fmt::Write;

mod prelude;
pub use prelude::C_PRELUDE;

/// The C++ dialect to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// CUDA C++ for NVRTC.
    Cuda,
    /// HIP C++ for hiprtc (ROCm).
    Hip,
}

impl Dialect {
    /// Lines placed before the prelude.
    pub fn preamble(self) -> &'static str {
        match self {
            Dialect::Cuda => "// CUDA C++ (NVRTC)\n",
            // hiprtc predefines the HIP runtime's device API (blockIdx, __float_as_uint…).
            // Clang fuses `a * b + c` into one FMA by default for HIP; the pragma turns
            // that off for the whole file, so only the IR's explicit `fmaf` fuse.
            Dialect::Hip => "// HIP C++ (hiprtc)\n#pragma clang fp contract(off)\n",
        }
    }

    /// The function a float `+`, `−` or `·` is rendered with, or `None` for the infix
    /// operator. NVRTC fuses `a * b + c` into an FMA under its default `--fmad=true`
    /// (which rlx-cuda keeps for its hand-written kernels), and no pragma turns that off,
    /// so CUDA spells every float add, subtract and multiply as the round-to-nearest
    /// intrinsic (`__fadd_rn`…), which the compiler never fuses: the only FMAs are the
    /// IR's [`Ex::MulAdd`], and results match the interpreter bit for bit. HIP uses
    /// infix operators under the preamble's `fp contract(off)`.
    pub fn float_op(self, op: Bin, ty: Ty) -> Option<&'static str> {
        let f64 = ty == Ty::F64;
        match (self, op) {
            (Dialect::Hip, _) => None,
            (Dialect::Cuda, Bin::Add) => Some(if f64 { "__dadd_rn" } else { "__fadd_rn" }),
            (Dialect::Cuda, Bin::Sub) => Some(if f64 { "__dsub_rn" } else { "__fsub_rn" }),
            (Dialect::Cuda, Bin::Mul) => Some(if f64 { "__dmul_rn" } else { "__fmul_rn" }),
            (Dialect::Cuda, _) => None,
        }
    }

    /// The work-group barrier statement.
    pub fn barrier(self) -> &'static str {
        match self {
            Dialect::Cuda | Dialect::Hip => "__syncthreads();",
        }
    }

    /// The qualifier of a work-group shared array.
    pub fn shared(self) -> &'static str {
        match self {
            Dialect::Cuda | Dialect::Hip => "__shared__",
        }
    }

    /// The block index, block size, grid size and thread index (x components).
    pub fn grid_builtins(self) -> [&'static str; 4] {
        match self {
            Dialect::Cuda | Dialect::Hip => {
                ["blockIdx.x", "blockDim.x", "gridDim.x", "threadIdx.x"]
            }
        }
    }
}

/// How a rendered loop kernel reaches its inputs when it is embedded in a larger
/// translation unit (a backend with its own parameter convention).
pub struct CEmbedding<'a> {
    /// The C type of index arithmetic (`long long`, or a backend's narrower unsigned
    /// type when every extent fits).
    pub index_type: &'a str,
    /// The untyped pointer expression of buffer slot `i` (cast by the renderer).
    pub buf: &'a dyn Fn(usize) -> String,
    /// The expression of dynamic dim `?s`.
    pub dim: &'a dyn Fn(u32) -> String,
    /// The statement recording a run-time error.
    pub fail: &'a dyn Fn(Fault) -> String,
    /// Prefix of the kernel's local variable names (`v` → `v0`, `v1`, …), distinct from
    /// the host code's own names.
    pub var_prefix: &'a str,
    /// The dialect (barrier, shared-memory and grid spellings).
    pub dialect: Dialect,
}

/// The complete source of `k` in `dialect`: [`C_PRELUDE`] plus one `extern "C"
/// __global__` function named `k.name` taking the buffers (slot order), then one `i64`
/// per dynamic dim (`k.dims` order). A work-group kernel must be launched with blocks of
/// exactly [`LoopKernel::group`] threads.
pub fn render_c(k: &LoopKernel, dialect: Dialect) -> String {
    let mut s = String::new();
    s.push_str(dialect.preamble());
    s.push_str("typedef long long i64;\n");
    s.push_str(C_PRELUDE);
    let mut params: Vec<String> = k
        .bufs
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let c = if b.access == super::Access::Read {
                "const "
            } else {
                ""
            };
            format!("{c}{}* __restrict__ b{i}", storage(b.dtype))
        })
        .collect();
    params.extend(k.dims.iter().map(|d| format!("i64 d{d}")));
    // The first error raised (see `Fault::code`), for kernels that can raise one.
    if k.can_fail() {
        params.push("unsigned long long* __restrict__ err".into());
    }
    let _ = writeln!(
        s,
        "extern \"C\" __global__ void {}({}) {{",
        k.name,
        params.join(", ")
    );
    let buf = |i: usize| format!("b{i}");
    let dim = |d: u32| format!("d{d}");
    let fail = |f: Fault| format!("if (err[0] == 0ull) err[0] = {}ull;", f.code());
    s.push_str(&render_c_loop(
        k,
        &CEmbedding {
            index_type: "i64",
            buf: &buf,
            dim: &dim,
            fail: &fail,
            var_prefix: "v",
            dialect,
        },
    ));
    s.push_str("}\n");
    s
}

/// The statements of a fragment (see [`super::lower_epilogue`]), indented by `depth`
/// levels of two spaces, for a kernel the caller writes.
pub fn render_c_statements(k: &LoopKernel, embed: &CEmbedding<'_>, depth: usize) -> String {
    let mut assigned = vec![false; k.vars.len()];
    mark_assigned(&k.body, &mut assigned);
    let r = Renderer::new(k, assigned, embed);
    let mut s = String::new();
    r.block(&mut s, &k.body, depth);
    s
}

/// Expression `e` of fragment `k` (see [`super::lower_value`]) as C.
pub fn render_c_value(k: &LoopKernel, embed: &CEmbedding<'_>, e: &Ex) -> String {
    let r = Renderer::new(k, vec![false; k.vars.len()], embed);
    r.ex(e)
}

/// The body of `k` (its grid-stride loop over the work items, or over the work-groups
/// with the shared arrays declared first) for a kernel function whose header and
/// parameters the caller writes; see [`CEmbedding`]. A work-group kernel must be launched
/// with blocks of exactly [`LoopKernel::group`] threads.
pub fn render_c_loop(k: &LoopKernel, embed: &CEmbedding<'_>) -> String {
    let mut assigned = vec![false; k.vars.len()];
    mark_assigned(&k.body, &mut assigned);
    let r = Renderer::new(k, assigned, embed);
    let it = embed.index_type;
    let [bid, bdim, gdim, tid] = embed.dialect.grid_builtins();
    let mut s = String::new();
    if k.group.is_some() {
        for (i, a) in k.shared.iter().enumerate() {
            // Tile operands: 16-bit elements (CUDA), aligned for the wmma loads.
            let (align, t) = match r.halves[i] {
                Some(_) => (" __align__(32)", "unsigned short"),
                None if TileMma::is_accumulator(k, i) => (" __align__(32)", ctype(a.ty, it)),
                None => ("", ctype(a.ty, it)),
            };
            let _ = writeln!(
                s,
                "  {}{align} {t} {}sh{i}[{}];",
                embed.dialect.shared(),
                embed.var_prefix,
                a.len
            );
        }
        let _ = writeln!(s, "  const {it} n_groups = {};", r.ex(&k.items));
        let _ = writeln!(s, "  const {it} local = ({it}){tid};");
        let _ = writeln!(
            s,
            "  for ({it} group = ({it}){bid}; group < n_groups; group += ({it}){gdim}) {{"
        );
        r.block(&mut s, &k.body, 2);
        // The next group reuses the shared arrays.
        let _ = writeln!(s, "    {}", embed.dialect.barrier());
        s.push_str("  }\n");
        return s;
    }
    let _ = writeln!(s, "  const {it} n_items = {};", r.ex(&k.items));
    let _ = writeln!(
        s,
        "  for ({it} item = ({it}){bid} * {bdim} + {tid}; item < n_items;\n       item += ({it}){gdim} * {bdim}) {{"
    );
    r.block(&mut s, &k.body, 2);
    s.push_str("  }\n");
    s
}

/// The C type a buffer of `dt` is declared with.
fn storage(dt: DType) -> &'static str {
    match dt {
        DType::F32 => "float",
        DType::F64 => "double",
        DType::F16 | DType::BF16 => "unsigned short",
        DType::Bool | DType::U8 => "unsigned char",
        DType::I8 => "signed char",
        DType::I16 => "short",
        DType::I32 => "int",
        DType::I64 => "long long",
        DType::U32 => "unsigned int",
        // Complex kernels are never lowered (`Ty::of` rejects them).
        DType::C64 | DType::C128 => "void",
    }
}

fn ctype(t: Ty, index_type: &str) -> &str {
    match t {
        Ty::Bool => "bool",
        Ty::Index => index_type,
        Ty::I64 => "long long",
        Ty::F32 => "float",
        Ty::F64 => "double",
    }
}

struct Renderer<'a> {
    k: &'a LoopKernel,
    embed: &'a CEmbedding<'a>,
    /// Variables some [`Stmt::Assign`] updates (declared without `const`).
    assigned: Vec<bool>,
    /// Per shared array: the 16-bit type its elements are stored in (CUDA's
    /// [`Stmt::TileMma`] operands), or `None` for the array's own type.
    halves: Vec<Option<DType>>,
}

fn mark_assigned(body: &[Stmt], out: &mut [bool]) {
    for s in body {
        match s {
            Stmt::Assign { var, .. } | Stmt::ShuffleXor { var, .. } => out[var.0 as usize] = true,
            Stmt::Loop { body, .. } | Stmt::If { body, .. } => mark_assigned(body, out),
            Stmt::Let { .. }
            | Stmt::Store { .. }
            | Stmt::SharedStore { .. }
            | Stmt::Barrier
            | Stmt::TileMma(_)
            | Stmt::Fail(_) => {}
        }
    }
}

/// The run-time errors `body` can raise, appended to `out` once each.
pub(super) fn faults(body: &[Stmt], out: &mut Vec<Fault>) {
    for s in body {
        match s {
            Stmt::Fail(f) if !out.contains(f) => out.push(*f),
            Stmt::Loop { body, .. } | Stmt::If { body, .. } => faults(body, out),
            _ => {}
        }
    }
}

impl<'a> Renderer<'a> {
    fn new(k: &'a LoopKernel, assigned: Vec<bool>, embed: &'a CEmbedding<'a>) -> Self {
        let halves = match embed.dialect {
            Dialect::Cuda => TileMma::operand_arrays(k),
            Dialect::Hip => vec![None; k.shared.len()],
        };
        Renderer {
            k,
            embed,
            assigned,
            halves,
        }
    }

    /// Slot `i` as a typed pointer.
    fn ptr(&self, i: usize) -> String {
        let b = &self.k.bufs[i];
        let c = if b.access == super::Access::Read {
            "const "
        } else {
            ""
        };
        format!("(({c}{}*){})", storage(b.dtype), (self.embed.buf)(i))
    }

    fn block(&self, s: &mut String, body: &[Stmt], depth: usize) {
        let pad = "  ".repeat(depth);
        for st in body {
            match st {
                Stmt::Let { var, value } => {
                    let t = ctype(self.k.vars[var.0 as usize], self.embed.index_type);
                    let c = if self.assigned[var.0 as usize] {
                        ""
                    } else {
                        "const "
                    };
                    let _ = writeln!(
                        s,
                        "{pad}{c}{t} {}{} = {};",
                        self.embed.var_prefix,
                        var.0,
                        self.ex(value)
                    );
                }
                Stmt::Assign { var, value } => {
                    let _ = writeln!(
                        s,
                        "{pad}{}{} = {};",
                        self.embed.var_prefix,
                        var.0,
                        self.ex(value)
                    );
                }
                Stmt::Store { buf, index, value } => {
                    let v = self.ex(value);
                    let v = match self.k.bufs[*buf].dtype {
                        DType::F16 => format!("rlx_f32_to_f16({v})"),
                        // The kernel rounded the value to bf16 already: keep its top bits.
                        DType::BF16 => format!("(unsigned short)(rlx_bits_f32({v}) >> 16)"),
                        dt => format!("({})({v})", storage(dt)),
                    };
                    let _ = writeln!(s, "{pad}{}[{}] = {v};", self.ptr(*buf), self.ex(index));
                }
                Stmt::Loop {
                    var,
                    start,
                    end,
                    body,
                } => {
                    let _ = writeln!(
                        s,
                        "{pad}for ({3} {4}{0} = {1}; {4}{0} < {2}; ++{4}{0}) {{",
                        var.0,
                        self.ex(start),
                        self.ex(end),
                        self.embed.index_type,
                        self.embed.var_prefix
                    );
                    self.block(s, body, depth + 1);
                    let _ = writeln!(s, "{pad}}}");
                }
                Stmt::If { cond, body } => {
                    let _ = writeln!(s, "{pad}if ({}) {{", self.ex(cond));
                    self.block(s, body, depth + 1);
                    let _ = writeln!(s, "{pad}}}");
                }
                Stmt::SharedStore { arr, index, value } => {
                    let v = self.ex(value);
                    // A tile operand is a value of its 16-bit type already (the IR's rule).
                    let v = match self.halves[*arr] {
                        Some(DType::F16) => format!("rlx_f32_to_f16({v})"),
                        Some(_) => format!("(unsigned short)(rlx_bits_f32({v}) >> 16)"),
                        None => v,
                    };
                    let _ = writeln!(
                        s,
                        "{pad}{}sh{arr}[{}] = {v};",
                        self.embed.var_prefix,
                        self.ex(index),
                    );
                }
                Stmt::TileMma(t) => self.tile_mma(s, t, &pad),
                Stmt::Barrier => {
                    let _ = writeln!(s, "{pad}{}", self.embed.dialect.barrier());
                }
                Stmt::ShuffleXor {
                    var,
                    value,
                    mask,
                    width: w,
                } => {
                    let v = self.ex(value);
                    let call = match self.embed.dialect {
                        // Whole warps reach it (see the statement's contract).
                        Dialect::Cuda => format!("__shfl_xor_sync(0xffffffffu, {v}, {mask}, {w})"),
                        // An explicit width: wave64 and wave32 devices form the same
                        // 32-item segments.
                        Dialect::Hip => format!("__shfl_xor({v}, {mask}, {w})"),
                    };
                    let _ = writeln!(s, "{pad}{}{} = {call};", self.embed.var_prefix, var.0);
                }
                Stmt::Fail(f) => {
                    let _ = writeln!(s, "{pad}{}", (self.embed.fail)(*f));
                }
            }
        }
    }

    fn ex(&self, e: &Ex) -> String {
        match e {
            Ex::Lit(l) => lit(*l),
            Ex::Var(v) => format!("{}{}", self.embed.var_prefix, v.0),
            Ex::External { name, .. } => name.clone(),
            Ex::Item => "item".into(),
            Ex::Group => "group".into(),
            Ex::Local => "local".into(),
            Ex::Shared { arr, index } => {
                let at = format!("{}sh{arr}[{}]", self.embed.var_prefix, self.ex(index));
                match self.halves[*arr] {
                    Some(DType::F16) => format!("rlx_f16_to_f32({at})"),
                    Some(_) => format!("rlx_bf16_to_f32({at})"),
                    None => at,
                }
            }
            Ex::Dim(d) => format!("(({}){})", self.embed.index_type, (self.embed.dim)(*d)),
            Ex::Load { buf, index } => {
                let at = format!("{}[{}]", self.ptr(*buf), self.ex(index));
                match self.k.bufs[*buf].dtype {
                    DType::F16 => format!("rlx_f16_to_f32({at})"),
                    DType::BF16 => format!("rlx_bf16_to_f32({at})"),
                    DType::Bool => format!("({at} != 0)"),
                    dt if Ty::of(dt) == Some(Ty::I64) => format!("(long long){at}"),
                    _ => at,
                }
            }
            Ex::Un(op, a) => self.unary(*op, a),
            Ex::Bin(op, a, b) => self.binary(*op, a, b),
            Ex::Select(c, a, b) => {
                format!("({} ? {} : {})", self.ex(c), self.ex(a), self.ex(b))
            }
            Ex::MulAdd(a, b, c) => {
                let f = if self.k.ty(a) == Ty::F64 {
                    "fma"
                } else {
                    "fmaf"
                };
                format!("{f}({}, {}, {})", self.ex(a), self.ex(b), self.ex(c))
            }
            Ex::Convert(t, a) => {
                let from = self.k.ty(a);
                let a = self.ex(a);
                match (t, from) {
                    (Ty::Bool, _) => format!("({a} != 0)"),
                    (Ty::I64 | Ty::Index, Ty::F32 | Ty::F64) => {
                        format!("rlx_f64_to_i64((double)({a}))")
                    }
                    (t, _) => format!("({})({a})", ctype(*t, self.embed.index_type)),
                }
            }
        }
    }

    /// [`Stmt::TileMma`]: barriers around the warps' products (the statement's
    /// contract), the product through the wmma helpers of [`C_PRELUDE`] on CUDA and as the
    /// IR's scalar loop on HIP (each item computes 8 of its warp's 256 outputs in the
    /// IR's order, so HIP is bit for bit the interpreter).
    fn tile_mma(&self, s: &mut String, t: &TileMma, pad: &str) {
        let p = self.embed.var_prefix;
        let (a, b, c) = (
            self.ex(&t.a.offset),
            self.ex(&t.b.offset),
            self.ex(&t.c.offset),
        );
        let (aa, ba, ca) = (t.a.arr, t.b.arr, t.c.arr);
        let (lda, ldb, ldc) = (t.a.stride, t.b.stride, t.c.stride);
        let lane = format!("({} & 31)", self.ex(&Ex::Local));
        let barrier = self.embed.dialect.barrier();
        let _ = writeln!(s, "{pad}{barrier}");
        match self.embed.dialect {
            Dialect::Cuda => {
                let elem = if t.elem == DType::F16 { "f16" } else { "bf16" };
                let bl = if t.b_transposed { "c" } else { "r" };
                let _ = writeln!(
                    s,
                    "{pad}rlx_tile_mma_{elem}_{bl}((unsigned int){lane}, {p}sh{aa} + ({a}), {lda}u, {p}sh{ba} + ({b}), {ldb}u, {p}sh{ca} + ({c}), {ldc}u, {}u);",
                    t.k_steps
                );
            }
            Dialect::Hip => {
                let bi = if t.b_transposed {
                    format!("tm_j * {ldb} + tm_k")
                } else {
                    format!("tm_k * {ldb} + tm_j")
                };
                let _ = writeln!(s, "{pad}for (int tm_r = 0; tm_r < 8; ++tm_r) {{");
                let _ = writeln!(
                    s,
                    "{pad}  const int tm_e = (int){lane} + 32 * tm_r, tm_i = tm_e >> 4, tm_j = tm_e & 15;"
                );
                let _ = writeln!(
                    s,
                    "{pad}  float tm_c = {p}sh{ca}[({c}) + tm_i * {ldc} + tm_j];"
                );
                let _ = writeln!(
                    s,
                    "{pad}  for (int tm_k = 0; tm_k < {}; ++tm_k)",
                    super::TILE * t.k_steps
                );
                let _ = writeln!(
                    s,
                    "{pad}    tm_c = fmaf({p}sh{aa}[({a}) + tm_i * {lda} + tm_k], {p}sh{ba}[({b}) + {bi}], tm_c);"
                );
                let _ = writeln!(s, "{pad}  {p}sh{ca}[({c}) + tm_i * {ldc} + tm_j] = tm_c;");
                let _ = writeln!(s, "{pad}}}");
            }
        }
        let _ = writeln!(s, "{pad}{barrier}");
    }

    fn unary(&self, op: Un, a: &Ex) -> String {
        let t = self.k.ty(a);
        let x = self.ex(a);
        let f = |name32: &str, name64: &str| {
            let n = if t == Ty::F64 { name64 } else { name32 };
            format!("{n}({x})")
        };
        match op {
            // Wrapping negation: no signed overflow at the minimum.
            Un::Neg if t == Ty::I64 => format!("(long long)(0ull - (unsigned long long){x})"),
            Un::Neg => format!("(-{x})"),
            Un::Abs if t != Ty::F32 && t != Ty::F64 => format!("({x} < 0 ? -{x} : {x})"),
            Un::Abs => f("fabsf", "fabs"),
            Un::Sqrt => f("sqrtf", "sqrt"),
            Un::Exp => f("expf", "exp"),
            Un::Expm1 => f("expm1f", "expm1"),
            Un::Log => f("logf", "log"),
            Un::Log1p => f("log1pf", "log1p"),
            Un::Sin => f("sinf", "sin"),
            Un::Cos => f("cosf", "cos"),
            Un::Tan => f("tanf", "tan"),
            Un::Atan => f("atanf", "atan"),
            Un::Tanh => f("tanhf", "tanh"),
            Un::Erf => f("erff", "erf"),
            Un::Erfc => f("erfcf", "erfc"),
            Un::Floor => f("floorf", "floor"),
            Un::Ceil => f("ceilf", "ceil"),
            // rint rounds in the default mode: to nearest, ties to even.
            Un::RoundEven => f("rintf", "rint"),
            Un::IsNan => format!("({x} != {x})"),
            Un::Not => format!("(!{x})"),
            Un::RoundF16 => format!("rlx_round_f16({x})"),
            Un::RoundBf16 => format!("rlx_round_bf16({x})"),
            // f16: 10 fraction bits, min normal exponent −14, max 65504, ∞ from 65520.
            Un::RoundHalf(DType::F16) => {
                format!("rlx_round_grid({x}, 10, -14, 65504.0, 65520.0)")
            }
            Un::RoundHalf(_) => format!(
                "rlx_round_grid({x}, 7, -126, 3.3895313892515355e38, 3.3961775292304135e38)"
            ),
            Un::IntToF64 { prec } => format!("rlx_int_to_f64({x}, {prec})"),
            Un::RoundFormat {
                exp_bits,
                man_bits,
                max_normal,
            } => {
                let bias = (1i64 << (exp_bits.clamp(1, 30) - 1)) - 1;
                format!(
                    "rlx_round_format({x}, {man_bits}, {bias}, {})",
                    lit(Lit::F64(max_normal as f64))
                )
            }
            Un::F32Bits => format!("(long long)(int)rlx_bits_f32({x})"),
            Un::F32FromBits => format!("rlx_f32_of((unsigned int){x})"),
            Un::Wrap(dt) => match dt {
                DType::I8 => format!("(long long)(signed char){x}"),
                DType::I16 => format!("(long long)(short){x}"),
                DType::I32 => format!("(long long)(int){x}"),
                DType::U8 => format!("(long long)(unsigned char){x}"),
                DType::U32 => format!("(long long)(unsigned int){x}"),
                _ => x,
            },
        }
    }

    fn binary(&self, op: Bin, a: &Ex, b: &Ex) -> String {
        let t = self.k.ty(a);
        let (x, y) = (self.ex(a), self.ex(b));
        let call = |name32: &str, name64: &str| {
            let n = if t == Ty::F64 { name64 } else { name32 };
            format!("{n}({x}, {y})")
        };
        let infix = |o: &str| format!("({x} {o} {y})");
        // i64 values wrap: their + − · go through unsigned arithmetic.
        let wrapping =
            |o: &str| format!("(long long)((unsigned long long){x} {o} (unsigned long long){y})");
        match op {
            Bin::Add | Bin::Sub | Bin::Mul | Bin::Shl if t == Ty::I64 => wrapping(match op {
                Bin::Add => "+",
                Bin::Sub => "-",
                Bin::Mul => "*",
                _ => "<<",
            }),
            Bin::Add | Bin::Sub | Bin::Mul if t.is_float() => {
                match self.embed.dialect.float_op(op, t) {
                    Some(f) => format!("{f}({x}, {y})"),
                    None => infix(match op {
                        Bin::Add => "+",
                        Bin::Sub => "-",
                        _ => "*",
                    }),
                }
            }
            Bin::Add => infix("+"),
            Bin::Sub => infix("-"),
            Bin::Mul => infix("*"),
            Bin::Div => infix("/"),
            Bin::Rem if !t.is_float() => infix("%"),
            Bin::Rem => call("fmodf", "fmod"),
            Bin::Pow => call("powf", "pow"),
            Bin::Atan2 => call("atan2f", "atan2"),
            Bin::Min if t.is_float() => call("fminf", "fmin"),
            Bin::Max if t.is_float() => call("fmaxf", "fmax"),
            Bin::Min => format!("({x} < {y} ? {x} : {y})"),
            Bin::Max => format!("({x} < {y} ? {y} : {x})"),
            Bin::Lt => infix("<"),
            Bin::Le => infix("<="),
            Bin::Eq => infix("=="),
            Bin::Ne => infix("!="),
            Bin::And => infix("&&"),
            Bin::Or => infix("||"),
            Bin::BitAnd => infix("&"),
            Bin::BitOr => infix("|"),
            Bin::BitXor => infix("^"),
            Bin::Shl => infix("<<"),
            Bin::Shr => infix(">>"),
        }
    }
}

/// A C literal that reads back as exactly `l`.
fn lit(l: Lit) -> String {
    match l {
        Lit::Bool(b) => b.to_string(),
        Lit::I64(v) | Lit::Index(v) if v == i64::MIN => "(-9223372036854775807ll - 1)".into(),
        Lit::I64(v) => format!("{v}ll"),
        // Plain `int` literals where they fit, so a narrow index type stays narrow.
        Lit::Index(v) if i32::try_from(v).is_ok() => format!("{v}"),
        Lit::Index(v) => format!("{v}ll"),
        // `{:?}` is the shortest text that parses back to the same value.
        Lit::F32(v) if v.is_finite() => format!("{v:?}f"),
        Lit::F32(v) => format!("rlx_f32_of(0x{:08x}u)", v.to_bits()),
        Lit::F64(v) if v.is_finite() => format!("{v:?}"),
        Lit::F64(v) => format!("rlx_f64_of(0x{:016x}ull)", v.to_bits()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_read_back_exactly_and_non_finite_ones_as_bit_patterns() {
        assert_eq!(lit(Lit::F32(0.1)), "0.1f");
        assert_eq!(lit(Lit::F32(1.0)), "1.0f");
        assert_eq!(lit(Lit::F32(-0.0)), "-0.0f");
        assert_eq!(lit(Lit::F32(1e20)), "1e20f");
        assert_eq!(lit(Lit::F32(f32::NEG_INFINITY)), "rlx_f32_of(0xff800000u)");
        assert_eq!(lit(Lit::I64(i64::MIN)), "(-9223372036854775807ll - 1)");
    }

    #[test]
    fn work_group_kernels_declare_shared_arrays_and_meet_at_barriers_in_both_dialects() {
        use crate::{CompileOptions, compile};
        use rlx_ir::{DType, Graph, Op, ReduceOp, Shape};
        let mut g = Graph::new("rows");
        let x = g.input("x", Shape::new(&[7, 1000], DType::F32));
        let o = Op::Reduce {
            op: ReduceOp::Sum,
            axes: vec![1],
            keep_dim: false,
        };
        let r = g.add_op(o, vec![x]).unwrap();
        g.set_outputs(vec![r]);
        let p = compile(&g, &CompileOptions::default()).unwrap();
        let lk = crate::loops::lower_kernel(&p, 0).unwrap();
        assert_eq!(lk.group, Some(128));
        for d in [Dialect::Cuda, Dialect::Hip] {
            let src = render_c(&lk, d);
            assert!(src.contains("__shared__ float vsh0[128];"), "{src}");
            assert!(
                src.contains("for (i64 group = (i64)blockIdx.x; group < n_groups;"),
                "{src}"
            );
            assert!(src.contains("const i64 local = (i64)threadIdx.x;"), "{src}");
            // A barrier after every tree level but the last, and one between groups.
            assert_eq!(src.matches("__syncthreads();").count(), 8, "{src}");
        }
    }
}
