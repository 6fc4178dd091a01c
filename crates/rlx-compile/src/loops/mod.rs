//! The loop-level kernel IR: what one kernel of a [`Program`](crate::program::Program)
//! does, spelled as work items, indexed loads and stores, and scalar arithmetic.
//!
//! A [`Program`](crate::program::Program) says *what* each kernel computes (an
//! elementwise expression over a space, a reduction, a row op…). GPU backends need the
//! same thing one level lower: which element a work item reads, through which index
//! arithmetic, and which scalar operations turn the loads into the stored values. This
//! module is that level, produced once per kernel by [`lower_kernel`]; a backend then only
//! *renders* it ([`render_c`] for CUDA and HIP, one dialect table apart; [`render_wgsl`]
//! for WGSL), so the index math of views, the dtype rules and the formula of every
//! activation are written here once instead of once per backend.
//!
//! The IR is deliberately small:
//! - a kernel runs [`LoopKernel::items`] independent work items; [`Ex::Item`] is the
//!   current one (a GPU renderer maps items onto a grid, a CPU reference loops);
//! - values have one of four compute types ([`Ty`]): storage dtypes are widened on load
//!   (f16/bf16 → f32, every integer → i64) and narrowed on store; after each operation
//!   of a narrow dtype the result is re-rounded ([`Un::RoundF16`], [`Un::RoundBf16`]) so
//!   the arithmetic matches the oracle's per-op rounding;
//! - statements are `let`, `store`, counted loops and conditionals;
//! - dynamic dims are kernel parameters ([`Ex::Dim`]), bound per launch;
//! - a kernel may instead run *work-groups* ([`LoopKernel::group`]): `items` groups of a
//!   fixed number of local items that share [`LoopKernel::shared`] arrays
//!   ([`Ex::Shared`], [`Stmt::SharedStore`]) and meet at [`Stmt::Barrier`]s — what a
//!   parallel reduction's fixed-order tree needs. A barrier must be reached by every
//!   local item of the group: it may only sit in loops and conditionals whose bounds and
//!   conditions are the same for the whole group (the reference interpreter checks it,
//!   and reports a data race between two barriers as an error).
//!
//! [`eval`] runs a lowered kernel on host buffers: the reference against which renderers
//! are checked, and the way the lowering itself is tested against the `rlx-ir` oracle
//! without a GPU.

mod build;
pub mod eval;
#[cfg(test)]
mod fma_tests;
mod lower;
mod render_c;
mod render_wgsl;

pub use build::Builder;
pub use lower::{
    ATTENTION_QUERIES, LowerError, LowerOptions, lower_epilogue, lower_kernel, lower_kernel_with,
    lower_split_reduction, lower_split_reduction_with, lower_value, matmul_tile,
};
pub use render_c::{
    C_PRELUDE, CEmbedding, Dialect, render_c, render_c_loop, render_c_statements, render_c_value,
};
pub use render_wgsl::{
    WGSL_WORKGROUP, WgslEmbedding, WgslError, WgslHelpers, render_wgsl, render_wgsl_loop,
    render_wgsl_statements, render_wgsl_subgroups, render_wgsl_value, wgsl_load, wgsl_needs_atomic,
    wgsl_store, wgsl_uses_subgroups, wgsl_workgroup_decls,
};

use rlx_ir::DType;

/// The type a value is computed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ty {
    /// A truth value.
    Bool,
    /// Every integer dtype's values, computed in wrapping i64 and wrapped to the dtype's
    /// width after each operation ([`Un::Wrap`]).
    I64,
    /// Index arithmetic (work items, coordinates, offsets): never negative, never
    /// overflowing; a backend renders it in its index type.
    Index,
    /// f32, and f16/bf16 values widened to f32.
    F32,
    /// f64.
    F64,
}

impl Ty {
    /// The compute type of a storage dtype, or `None` for complex dtypes.
    pub fn of(dt: DType) -> Option<Ty> {
        Some(match dt {
            DType::F32 | DType::F16 | DType::BF16 => Ty::F32,
            DType::F64 => Ty::F64,
            DType::Bool => Ty::Bool,
            DType::C64 | DType::C128 => return None,
            _ => Ty::I64,
        })
    }

    /// Whether values of this type are floats.
    pub fn is_float(self) -> bool {
        matches!(self, Ty::F32 | Ty::F64)
    }
}

/// A local variable of a kernel (its type is [`LoopKernel::vars`]`[id]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Var(pub u32);

/// A unary operation on one compute value (the result has the operand's type unless
/// noted).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Un {
    /// `−x`.
    Neg,
    /// `|x|`.
    Abs,
    /// Square root.
    Sqrt,
    /// `eˣ`.
    Exp,
    /// `eˣ − 1`, accurate near 0.
    Expm1,
    /// Natural logarithm.
    Log,
    /// `ln(1 + x)`, accurate near 0.
    Log1p,
    /// Sine.
    Sin,
    /// Cosine.
    Cos,
    /// Tangent.
    Tan,
    /// Arc tangent.
    Atan,
    /// Hyperbolic tangent.
    Tanh,
    /// The error function.
    Erf,
    /// The complementary error function `1 − erf(x)`, accurate where erf is near 1.
    Erfc,
    /// Round down.
    Floor,
    /// Round up.
    Ceil,
    /// Round half to even.
    RoundEven,
    /// Whether the value is NaN (bool result).
    IsNan,
    /// Logical not of a bool.
    Not,
    /// Round an f32 to the nearest f16 value (ties to even, overflow to ∞), kept as f32.
    RoundF16,
    /// Round an f32 to the nearest bf16 value (ties to even), kept as f32.
    RoundBf16,
    /// Wrap an i64 to the width of an integer dtype (two's complement; sign- or
    /// zero-extended back to i64).
    Wrap(DType),
    /// Round an f64 once to the nearest value of `F16` or `BF16` (ties to even, overflow
    /// to ∞), kept as f64 (exact in f32).
    RoundHalf(DType),
    /// An i64 as the f64 nearest to it after rounding the exact integer to `prec`
    /// significant bits (one rounding even beyond 2⁵³; f64 result).
    IntToF64 {
        /// Significant bits kept (11 for f16, 8 for bf16).
        prec: u32,
    },
    /// An f64 rounded to an emulated float format (the oracle's `round_to_format`:
    /// saturating at `max_normal`, flushing below the f32 normal range).
    RoundFormat {
        /// Exponent bits.
        exp_bits: u32,
        /// Mantissa bits.
        man_bits: u32,
        /// Saturation bound.
        max_normal: f32,
    },
    /// The IEEE bits of an f32, as the i64 value of the signed 32-bit word (so it lies in
    /// the i32 range): the integer spelling of the scaled ops reads f32 data by its bits,
    /// where no rounding or flushing of subnormals can happen.
    F32Bits,
    /// The f32 whose IEEE bits are the low 32 bits of an i64 (inverse of [`Un::F32Bits`]).
    F32FromBits,
}

/// A binary operation; both operands have the same type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bin {
    /// `a + b` (wrapping on integers).
    Add,
    /// `a − b`.
    Sub,
    /// `a · b`.
    Mul,
    /// `a / b` (integers: toward zero; the lowering never divides by a zero it cannot
    /// rule out).
    Div,
    /// Remainder with the dividend's sign (C `fmod` / `%`).
    Rem,
    /// `aᵇ`.
    Pow,
    /// `atan2(a, b)`.
    Atan2,
    /// The smaller operand, for values known not to be NaN (IEEE `fmin` otherwise).
    Min,
    /// The larger operand (see [`Bin::Min`]).
    Max,
    /// `a < b` (bool result; false when either is NaN).
    Lt,
    /// `a ≤ b`.
    Le,
    /// `a == b`.
    Eq,
    /// `a ≠ b` (true when either is NaN).
    Ne,
    /// Logical and of bools.
    And,
    /// Logical or of bools.
    Or,
    /// Bitwise and of integers.
    BitAnd,
    /// Bitwise or of integers.
    BitOr,
    /// Bitwise exclusive or of integers.
    BitXor,
    /// `a << b` on an i64, `0 ≤ b < 64` (the lowering guarantees it).
    Shl,
    /// Arithmetic `a >> b` on an i64, `0 ≤ b < 64`.
    Shr,
}

impl Bin {
    /// Whether the result is a bool (a comparison or a logical op).
    pub fn is_predicate(self) -> bool {
        matches!(
            self,
            Bin::Lt | Bin::Le | Bin::Eq | Bin::Ne | Bin::And | Bin::Or
        )
    }
}

/// A literal value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Lit {
    /// A bool.
    Bool(bool),
    /// An i64 value.
    I64(i64),
    /// An index.
    Index(i64),
    /// An f32.
    F32(f32),
    /// An f64.
    F64(f64),
}

impl Lit {
    /// Its compute type.
    pub fn ty(self) -> Ty {
        match self {
            Lit::Bool(_) => Ty::Bool,
            Lit::I64(_) => Ty::I64,
            Lit::Index(_) => Ty::Index,
            Lit::F32(_) => Ty::F32,
            Lit::F64(_) => Ty::F64,
        }
    }
}

/// An expression (side-effect free).
#[derive(Debug, Clone, PartialEq)]
pub enum Ex {
    /// A literal.
    Lit(Lit),
    /// A local variable.
    Var(Var),
    /// The index of the current work item (`0..items`).
    Item,
    /// In a work-group kernel: the index of the current group (`0..items`).
    Group,
    /// In a work-group kernel: the index of the current item within its group
    /// (`0..group size`).
    Local,
    /// Element `index` of work-group shared array `arr` ([`LoopKernel::shared`]).
    Shared {
        /// The array.
        arr: usize,
        /// Element index.
        index: Box<Ex>,
    },
    /// The bound size of dynamic dim symbol `?s` (an index-typed kernel parameter).
    Dim(u32),
    /// Element `index` of kernel buffer `buf` ([`LoopKernel::bufs`]), widened to the
    /// compute type of the buffer's dtype.
    Load {
        /// Kernel buffer slot.
        buf: usize,
        /// Element index.
        index: Box<Ex>,
    },
    /// A unary operation.
    Un(Un, Box<Ex>),
    /// A binary operation.
    Bin(Bin, Box<Ex>, Box<Ex>),
    /// `cond ? a : b`, both branches evaluated (they have no side effects).
    Select(Box<Ex>, Box<Ex>, Box<Ex>),
    /// `a·b + c` on F32 or F64 values with one rounding (a fused multiply-add). The
    /// lowering accumulates products with it (matmul, contractions, attention dots): every
    /// renderer spells it as the hardware instruction (`fmaf`/`fma` in C, `fma` in WGSL)
    /// and the interpreter as `mul_add`, so a GPU's sum is the interpreter's bit for bit —
    /// where a plain `a·b + c` could be fused by one compiler and not by another.
    MulAdd(Box<Ex>, Box<Ex>, Box<Ex>),
    /// A value the surrounding code defines (a fragment's inputs, see
    /// [`lower_epilogue`]): rendered as `name`.
    External {
        /// The variable name in the host kernel.
        name: String,
        /// Its compute type.
        ty: Ty,
    },
    /// Numeric conversion to `Ty` (float → i64 truncates toward zero and saturates to the
    /// i64 range, NaN → 0; bool → number is 0/1; number → bool is `≠ 0`).
    Convert(Ty, Box<Ex>),
}

/// A statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Stmt {
    /// Define variable `var` (declared in [`LoopKernel::vars`]) as `value`.
    Let {
        /// The variable.
        var: Var,
        /// Its value.
        value: Ex,
    },
    /// Overwrite an already defined variable (accumulators).
    Assign {
        /// The variable.
        var: Var,
        /// Its new value.
        value: Ex,
    },
    /// Narrow `value` to the buffer's dtype and write it at `index`.
    Store {
        /// Kernel buffer slot.
        buf: usize,
        /// Element index.
        index: Ex,
        /// The value (in the buffer dtype's compute type).
        value: Ex,
    },
    /// `for var in start..end { body }` (an index counter).
    Loop {
        /// The counter.
        var: Var,
        /// First value.
        start: Ex,
        /// One past the last value.
        end: Ex,
        /// The body.
        body: Vec<Stmt>,
    },
    /// `if cond { body }`.
    If {
        /// A bool.
        cond: Ex,
        /// Run when `cond` holds.
        body: Vec<Stmt>,
    },
    /// Write `value` (of the array's type) at `index` of work-group shared array `arr`.
    SharedStore {
        /// The array.
        arr: usize,
        /// Element index.
        index: Ex,
        /// The value.
        value: Ex,
    },
    /// Wait until every local item of the group reaches this barrier; shared-array
    /// writes before it are visible to every item after it. Only in control flow that is
    /// uniform across the group.
    Barrier,
    /// Overwrite the already defined variable `var` with the value `value` has in the
    /// local item whose index is this item's XOR `mask` (`mask` < `width`): a warp /
    /// wavefront / subgroup shuffle within aligned segments of `width` local items, with
    /// no shared memory and no barrier. Every item of a segment must reach it together,
    /// and the items that reach it must be whole segments (CUDA's full-warp mask); only
    /// in work-group kernels. CUDA and HIP render width [`SHUFFLE_WIDTH`]; WGSL renders
    /// it as `subgroupShuffleXor` only when told the adapter's subgroups have exactly
    /// `width` items (see [`WgslEmbedding::subgroup_size`]).
    ShuffleXor {
        /// The variable (not a bool).
        var: Var,
        /// The value each item offers to its partner.
        value: Ex,
        /// The lane mask.
        mask: u32,
        /// The segment width (a power of two ≥ 2; see [`LowerOptions::shuffle_width`]).
        width: u32,
    },
    /// A matrix-tile product on every warp of the group at once (tensor cores on CUDA):
    /// see [`TileMma`]. Like [`Stmt::Barrier`], every local item of the group reaches it
    /// together, and it synchronizes the group before and after.
    TileMma(Box<TileMma>),
    /// Record a run-time error of the program (execution continues with a harmless
    /// value; the backend reports the error after the kernel).
    Fail(Fault),
}

/// The side of the square tiles of [`Stmt::TileMma`] (and the depth of one of its steps).
pub const TILE: u32 = 16;

/// A 16-row or 16-column window of a work-group shared array, as a [`TileMma`] operand:
/// element `(r, c)` of the window is `arr[offset + r·stride + c]`.
#[derive(Debug, Clone, PartialEq)]
pub struct TileOperand {
    /// The shared array.
    pub arr: usize,
    /// The window's first element (an index expression; it may differ from warp to warp,
    /// and must be the same for the [`SHUFFLE_WIDTH`] items of one warp).
    pub offset: Ex,
    /// Elements from one row of the window to the next.
    pub stride: u32,
}

/// `C[16×16] += A[16×K] · B[K×16]` (`K` = `16·k_steps`), computed by each warp
/// (aligned segment of [`SHUFFLE_WIDTH`] local items) of a work-group on its own tiles:
/// the operands' offsets are evaluated per warp. A and B hold `elem` values (f16 or
/// bf16) in f32 shared arrays — every value stored into an array named as an A or B
/// operand must be exactly representable in `elem`, so a backend may store those arrays
/// as 16-bit elements (CUDA does) — and C is an f32 array.
///
/// Semantics (the interpreter's, and the portable renderings'): for each output
/// `(i, j)`, `c = C[i][j]`, then for `k = 0, 1, …, K−1` in that order `c = fma(A[i][k],
/// B[k][j], c)` (each product is exact in f32: 11 + 11 or 8 + 8 significant bits), and
/// `C[i][j] = c`. Tensor cores promise no summation order (and may round partial sums
/// differently), so a backend's result is only guaranteed within
/// `(K + 1) · 2⁻²² · (|C[i][j]| + Σ_k |A[i][k]·B[k][j]|)` of the exact value (the
/// interpreter's own error is at most half of that: `K` roundings of 2⁻²⁴ relative).
///
/// Rules (checked by the interpreter): the group size is a multiple of
/// [`SHUFFLE_WIDTH`]; the statement is reached by the whole group under uniform control
/// flow, and acts as a barrier before and after the product (a backend may use block
/// barriers); the C windows of two warps do not overlap, and no C element is read as an
/// A or B element of the same statement; for the hardware's alignment, A/B offsets are
/// multiples of 16 and strides of 8, C offsets multiples of 8 and strides of 4.
#[derive(Debug, Clone, PartialEq)]
pub struct TileMma {
    /// `F16` or `BF16`.
    pub elem: DType,
    /// A: 16 rows of `K` elements.
    pub a: TileOperand,
    /// B: `K` rows of 16 elements, or with [`TileMma::b_transposed`] 16 rows of `K`
    /// elements holding Bᵀ (`B[k][j] = arr[offset + j·stride + k]`, e.g. Kᵀ of a
    /// row-major K tile).
    pub b: TileOperand,
    /// Whether B is stored transposed.
    pub b_transposed: bool,
    /// C: 16 rows of 16 f32 elements, read and overwritten.
    pub c: TileOperand,
    /// `K / 16` (at least 1).
    pub k_steps: u32,
}

impl TileMma {
    /// The element of A's window at row `i`, column `k` (an offset from the window's
    /// start).
    pub fn a_at(&self, i: u32, k: u32) -> u32 {
        i * self.a.stride + k
    }

    /// The element of B's window holding `B[k][j]`.
    pub fn b_at(&self, k: u32, j: u32) -> u32 {
        if self.b_transposed {
            j * self.b.stride + k
        } else {
            k * self.b.stride + j
        }
    }

    /// For each shared array of a kernel, the `elem` of the [`Stmt::TileMma`] that read it
    /// as an A or B operand (the first one, if several), else `None`.
    pub fn operand_arrays(k: &LoopKernel) -> Vec<Option<DType>> {
        fn walk(body: &[Stmt], out: &mut [Option<DType>]) {
            for s in body {
                match s {
                    Stmt::TileMma(t) => {
                        for arr in [t.a.arr, t.b.arr] {
                            if let Some(slot) = out.get_mut(arr) {
                                slot.get_or_insert(t.elem);
                            }
                        }
                    }
                    Stmt::Loop { body, .. } | Stmt::If { body, .. } => walk(body, out),
                    _ => {}
                }
            }
        }
        let mut out = vec![None; k.shared.len()];
        walk(&k.body, &mut out);
        out
    }

    /// Whether shared array `arr` of `k` is the C operand of some [`Stmt::TileMma`].
    pub fn is_accumulator(k: &LoopKernel, arr: usize) -> bool {
        fn walk(body: &[Stmt], arr: usize) -> bool {
            body.iter().any(|s| match s {
                Stmt::TileMma(t) => t.c.arr == arr,
                Stmt::Loop { body, .. } | Stmt::If { body, .. } => walk(body, arr),
                _ => false,
            })
        }
        walk(&k.body, arr)
    }
}

/// The width of the segments [`Stmt::ShuffleXor`] exchanges values within: a CUDA warp,
/// and the width every HIP shuffle is given (a wave64 wavefront runs two segments).
pub const SHUFFLE_WIDTH: u32 = 32;

/// A run-time error a kernel can raise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// An integer `/` or `%` by zero.
    IntegerDivisionByZero,
    /// A negative shift amount.
    NegativeShift,
    /// A max/min (or integer mean) reduction over an empty axis: no identity element.
    EmptyReduction,
    /// A gather or scatter-add index outside `-n..n` of its axis (or a float index that
    /// is not a whole number).
    IndexOutOfRange,
    /// A cross-entropy label that is not a class index.
    BadLabel,
}

impl Fault {
    /// Every fault, in code order.
    pub const ALL: [Fault; 5] = [
        Fault::IntegerDivisionByZero,
        Fault::NegativeShift,
        Fault::EmptyReduction,
        Fault::IndexOutOfRange,
        Fault::BadLabel,
    ];

    /// Its code in a backend's error word (1: division by zero, 2: negative shift, 3: an
    /// empty reduction, 4: an index out of range, 5: a bad label).
    pub fn code(self) -> u64 {
        match self {
            Fault::IntegerDivisionByZero => 1,
            Fault::NegativeShift => 2,
            Fault::EmptyReduction => 3,
            Fault::IndexOutOfRange => 4,
            Fault::BadLabel => 5,
        }
    }

    /// The fault with error code `code` (what a backend reads back from its error word).
    pub fn from_code(code: u64) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.code() == code)
    }

    /// The message the oracle gives for it.
    pub fn message(self) -> &'static str {
        match self {
            Fault::IntegerDivisionByZero => {
                "integer division by zero; mask the zero divisors or cast to a float type"
            }
            Fault::NegativeShift => "negative shift amount; shift amounts must be ≥ 0",
            Fault::EmptyReduction => {
                "reduction of an empty axis: max/min (and an integer mean) have no value for no elements; slice or pad the input so every group is non-empty"
            }
            Fault::IndexOutOfRange => {
                "a gather/scatter-add index is out of range for its axis (valid: -n..n) or is a float that is not a whole number; clamp or mask the indices"
            }
            Fault::BadLabel => {
                "a label is not a class index in 0..C; labels must be whole numbers below the class count"
            }
        }
    }
}

/// How a kernel uses one of its buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Only loaded.
    Read,
    /// Only stored.
    Write,
}

/// A buffer parameter of a kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelBuf {
    /// The program buffer bound to this slot.
    pub buf: crate::program::BufId,
    /// Its storage dtype.
    pub dtype: DType,
    /// Read or written.
    pub access: Access,
}

/// A work-group shared array of a kernel (`var<workgroup>` in WGSL, `__shared__` in
/// CUDA/HIP): uninitialized at the start of each group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedArray {
    /// Element type.
    pub ty: Ty,
    /// Number of elements.
    pub len: u32,
}

/// One lowered kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopKernel {
    /// A C/WGSL identifier.
    pub name: String,
    /// Buffer parameters, in slot order.
    pub bufs: Vec<KernelBuf>,
    /// Dynamic dim symbols read through [`Ex::Dim`], in parameter order.
    pub dims: Vec<u32>,
    /// Number of work items, or of work-groups when [`LoopKernel::group`] is set (an
    /// index; may read [`Ex::Dim`]).
    pub items: Ex,
    /// `Some(n)`: the kernel runs `items` work-groups of `n` local items each
    /// ([`Ex::Group`], [`Ex::Local`]), which cooperate through [`LoopKernel::shared`] and
    /// [`Stmt::Barrier`]. A GPU renderer maps a group onto one work-group / thread block
    /// of exactly `n` threads. `None`: independent items ([`Ex::Item`]).
    pub group: Option<u32>,
    /// The work-group shared arrays ([`Ex::Shared`]).
    pub shared: Vec<SharedArray>,
    /// Type of every local variable.
    pub vars: Vec<Ty>,
    /// What one work item does.
    pub body: Vec<Stmt>,
}

impl LoopKernel {
    /// Whether the kernel can raise a run-time error ([`Stmt::Fail`]).
    pub fn can_fail(&self) -> bool {
        !self.faults().is_empty()
    }

    /// Every run-time error the kernel can raise, each once.
    pub fn faults(&self) -> Vec<Fault> {
        let mut out = Vec::new();
        render_c::faults(&self.body, &mut out);
        out
    }

    /// The compute type of `e` in this kernel.
    pub fn ty(&self, e: &Ex) -> Ty {
        match e {
            Ex::Lit(l) => l.ty(),
            Ex::Var(v) => self.vars[v.0 as usize],
            Ex::Item | Ex::Dim(_) | Ex::Group | Ex::Local => Ty::Index,
            Ex::Shared { arr, .. } => self.shared[*arr].ty,
            Ex::Load { buf, .. } => Ty::of(self.bufs[*buf].dtype).expect("real dtype"),
            Ex::Un(Un::IsNan | Un::Not, _) => Ty::Bool,
            Ex::Un(Un::IntToF64 { .. }, _) => Ty::F64,
            Ex::Un(Un::F32Bits, _) => Ty::I64,
            Ex::Un(Un::F32FromBits, _) => Ty::F32,
            Ex::Un(_, a) => self.ty(a),
            Ex::Bin(op, a, _) => {
                if op.is_predicate() {
                    Ty::Bool
                } else {
                    self.ty(a)
                }
            }
            Ex::Select(_, a, _) | Ex::MulAdd(a, _, _) => self.ty(a),
            Ex::Convert(t, _) => *t,
            Ex::External { ty, .. } => *ty,
        }
    }
}
