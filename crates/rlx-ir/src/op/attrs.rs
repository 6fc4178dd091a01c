//! The attribute enums of [`super::Op`]'s variants: element-wise functions, binary and
//! comparison operators, reductions, attention masks, rotary styles, FFT options and
//! synthesized-weight kinds.

#[cfg(doc)]
use super::Op;

/// Unary element-wise functions (29 variants, order is part of the API).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Activation {
    /// Exact GELU: `x · Φ(x)` with the error function.
    Gelu,
    /// Tanh-form GELU: `0.5 x (1 + tanh(√(2/π)(x + 0.044715 x³)))`.
    GeluApprox,
    /// `x · sigmoid(x)`.
    Silu,
    Relu,
    Sigmoid,
    Tanh,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Neg,
    Abs,
    Sin,
    Cos,
    Tan,
    Atan,
    Recip,
    /// Round half to even.
    Round,
    Floor,
    Ceil,
    Sign,
    /// `ln(1 + eˣ)`.
    Softplus,
    /// ELU with α = 1.
    Elu,
    Erf,
    /// `x · relu6(x + 3) / 6`.
    HardSwish,
    /// `relu6(x + 3) / 6`.
    HardSigmoid,
    /// `x · tanh(softplus(x))`.
    Mish,
    /// `x / (1 + |x|)`.
    Softsign,
    /// `ln(sigmoid(x))`.
    LogSigmoid,
}

impl Activation {
    /// Every activation, in declaration order.
    pub const ALL: [Activation; 29] = [
        Activation::Gelu,
        Activation::GeluApprox,
        Activation::Silu,
        Activation::Relu,
        Activation::Sigmoid,
        Activation::Tanh,
        Activation::Exp,
        Activation::Log,
        Activation::Sqrt,
        Activation::Rsqrt,
        Activation::Neg,
        Activation::Abs,
        Activation::Sin,
        Activation::Cos,
        Activation::Tan,
        Activation::Atan,
        Activation::Recip,
        Activation::Round,
        Activation::Floor,
        Activation::Ceil,
        Activation::Sign,
        Activation::Softplus,
        Activation::Elu,
        Activation::Erf,
        Activation::HardSwish,
        Activation::HardSigmoid,
        Activation::Mish,
        Activation::Softsign,
        Activation::LogSigmoid,
    ];

    /// Whether the reference crate's region fuser accepted this activation
    /// (kept for API compatibility; our compiler fuses every activation).
    pub const fn region_fusable(self) -> bool {
        !matches!(
            self,
            Activation::Floor
                | Activation::Ceil
                | Activation::Sign
                | Activation::Softplus
                | Activation::Elu
                | Activation::Erf
                | Activation::HardSwish
                | Activation::HardSigmoid
                | Activation::Mish
                | Activation::Softsign
                | Activation::LogSigmoid
        )
    }

    /// Snake-case name (`"gelu_approx"`), as the Tensor method is called.
    pub const fn name(self) -> &'static str {
        match self {
            Activation::Gelu => "gelu",
            Activation::GeluApprox => "gelu_approx",
            Activation::Silu => "silu",
            Activation::Relu => "relu",
            Activation::Sigmoid => "sigmoid",
            Activation::Tanh => "tanh",
            Activation::Exp => "exp",
            Activation::Log => "log",
            Activation::Sqrt => "sqrt",
            Activation::Rsqrt => "rsqrt",
            Activation::Neg => "neg",
            Activation::Abs => "abs",
            Activation::Sin => "sin",
            Activation::Cos => "cos",
            Activation::Tan => "tan",
            Activation::Atan => "atan",
            Activation::Recip => "recip",
            Activation::Round => "round",
            Activation::Floor => "floor",
            Activation::Ceil => "ceil",
            Activation::Sign => "sign",
            Activation::Softplus => "softplus",
            Activation::Elu => "elu",
            Activation::Erf => "erf",
            Activation::HardSwish => "hard_swish",
            Activation::HardSigmoid => "hard_sigmoid",
            Activation::Mish => "mish",
            Activation::Softsign => "softsign",
            Activation::LogSigmoid => "log_sigmoid",
        }
    }

    /// True for the activations that are defined on integer inputs without
    /// leaving the integers (`neg`, `abs`, `relu`, `sign`, and the identity-on-ints roundings).
    pub const fn integer_closed(self) -> bool {
        matches!(
            self,
            Activation::Neg
                | Activation::Abs
                | Activation::Relu
                | Activation::Sign
                | Activation::Round
                | Activation::Floor
                | Activation::Ceil
        )
    }
}

/// Element-wise binary operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    Pow,
    /// C `fmod`: the result has the sign of the dividend.
    Mod,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
    Atan2,
}

impl BinaryOp {
    /// Snake-case name.
    pub const fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Max => "maximum",
            BinaryOp::Min => "minimum",
            BinaryOp::Pow => "pow",
            BinaryOp::Mod => "rem",
            BinaryOp::BitAnd => "bitand",
            BinaryOp::BitOr => "bitor",
            BinaryOp::BitXor => "bitxor",
            BinaryOp::Shl => "shl",
            BinaryOp::Shr => "shr",
            BinaryOp::Atan2 => "atan2",
        }
    }

    /// Bitwise/shift ops: defined on integers and `Bool` (and/or/xor) only.
    pub const fn is_bitwise(self) -> bool {
        matches!(
            self,
            BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor | BinaryOp::Shl | BinaryOp::Shr
        )
    }

    /// The ops defined on floats: every op that is not [bitwise](Self::is_bitwise), in
    /// declaration order. Test suites sweep this one list (random graphs, derivative
    /// conventions), so a new float op is covered by each of them when it is added here.
    pub const FLOAT_ARITHMETIC: [BinaryOp; 9] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::Pow,
        BinaryOp::Mod,
        BinaryOp::Atan2,
    ];
}

/// Element-wise comparisons; the result dtype is `Bool`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    /// Snake-case name (`"lt"`).
    pub const fn name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }
}

/// Reduction kinds (also the window kind of [`Op::Pool`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
}

impl ReduceOp {
    /// Snake-case name.
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Prod => "prod",
        }
    }
}

/// What kind of attention mask the kernel applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MaskKind {
    /// Every query attends every key.
    None,
    /// Query `qi` attends keys `ki ≤ qi`.
    Causal,
    /// Query `qi` attends keys `ki ∈ [qi − w, qi]`.
    SlidingWindow(usize),
    /// A `[batch, key_len]` tensor (4th input): `≥ 0.5` attends, `< 0.5` is ignored.
    Custom,
    /// An additive `[B, H, Sq, Sk]` score bias (4th input).
    Bias,
}

/// Pairing of rotated dimensions in [`Op::Rope`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RopeStyle {
    /// Rotate-half: dimension `i` pairs with `i + n_rot/2`.
    #[default]
    NeoX,
    /// Interleaved: dimension `2i` pairs with `2i + 1`.
    GptJ,
}

/// Scaling convention of [`Op::Fft`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FftNorm {
    /// Forward unscaled, inverse unscaled (so `ifft(fft(x)) = N·x`).
    #[default]
    Backward,
    /// Both directions scaled by `1/√N`.
    Ortho,
    /// Forward scaled by `1/N`, inverse unscaled.
    Forward,
}

/// Algorithm hint for [`Op::Fft`]; every choice computes the same transform.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FftAlgo {
    /// The backend's own choice.
    #[default]
    Native,
    /// A direct O(N²) DFT (a reference; handy for tiny N).
    Dft,
}

/// How a [`Op::SynthMatMul`] synthesises its weight matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SynthKind {
    /// Weight rows are concatenations of codebook entries chosen by u8 indices.
    Codebook { entry_dim: u32, num_entries: u32 },
}
