//! The parsed form of an `rlx!` program: statements and expressions with the spans
//! that diagnostics point at. Raw Rust fragments (shape dims, method arguments,
//! runtime loop counts) are kept as token streams and forwarded verbatim.

use proc_macro2::{Span, TokenStream};
use syn::{Ident, LitStr};

/// A whole `rlx!` body.
#[derive(Debug, Clone)]
pub struct Program {
    /// `graph "name";` when present (it must be the first statement).
    pub name: Option<LitStr>,
    pub stmts: Vec<Stmt>,
}

/// `input` or `param`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeclKind {
    Input,
    Param,
}

/// One statement.
#[derive(Debug, Clone)]
pub enum Stmt {
    /// `input NAME[N]? (@ "ir.name")? : [dims];` (also `param`).
    Decl(Decl),
    /// `const NAME = value (: DTYPE)?;`
    Const(Const),
    /// `bind a, cb[], …;`
    Bind(Vec<BindItem>),
    /// `let NAME = expr;`
    Let { name: Ident, expr: Expr },
    /// `let (a, b, …) = expr;`
    LetTuple {
        paren: Span,
        names: Vec<Ident>,
        expr: Expr,
    },
    /// `fn NAME(params) { body }`
    Fn(FnDef),
    /// `repeat …{ body }`
    Repeat(Repeat),
    /// `scan carry = init for N { lets }`
    Scan(Scan),
    /// `tap a, b;`
    Tap(Vec<Ident>),
    /// `out a, b;` / `output a, b;`
    Out(Vec<Ident>),
}

impl Stmt {
    /// The span a "not allowed here" diagnostic points at.
    pub fn head_span(&self) -> Span {
        match self {
            Stmt::Decl(d) => d.name.span(),
            Stmt::Const(c) => c.name.span(),
            Stmt::Bind(items) => items[0].name.span(),
            Stmt::Let { name, .. } => name.span(),
            Stmt::LetTuple { paren, .. } => *paren,
            Stmt::Fn(f) => f.name.span(),
            Stmt::Repeat(r) => r.keyword,
            Stmt::Scan(s) => s.carry.span(),
            Stmt::Tap(names) | Stmt::Out(names) => names[0].span(),
        }
    }
}

/// An `input`/`param` declaration.
#[derive(Debug, Clone)]
pub struct Decl {
    pub kind: DeclKind,
    pub name: Ident,
    /// `NAME[N]`: a family of N bindings `NAME_0 … NAME_{N-1}`.
    pub family: Option<(usize, Span)>,
    /// `@ "ir.name"` (with `{i}` replaced by the index inside a family).
    pub ir_name: Option<LitStr>,
    /// The bracket contents, forwarded verbatim to `shape!`.
    pub dims: TokenStream,
    /// The dims when every one is an integer literal (for static shape checks).
    pub static_dims: Option<Vec<u64>>,
}

/// A `const` value: a (possibly negated) literal or a nested array of them.
#[derive(Debug, Clone)]
pub enum ConstValue {
    Scalar(TokenStream),
    Array {
        /// Flattened row-major entries, each a Rust expression of one number.
        data: Vec<TokenStream>,
        dims: Vec<usize>,
    },
}

/// `const NAME = value : DTYPE;`
#[derive(Debug, Clone)]
pub struct Const {
    pub name: Ident,
    pub value: ConstValue,
    pub dtype: Option<Ident>,
}

/// One name in a `bind` list.
#[derive(Debug, Clone)]
pub struct BindItem {
    pub name: Ident,
    /// `name[]`: an outer collection rather than one tensor.
    pub collection: bool,
}

/// A user fn, inlined at every call.
#[derive(Debug, Clone)]
pub struct FnDef {
    pub name: Ident,
    pub params: Vec<Ident>,
    pub body: Vec<Stmt>,
}

/// How many times a `repeat` body runs.
#[derive(Debug, Clone)]
pub enum RepeatKind {
    /// `repeat 3 { … }`: unrolled at expansion.
    Unrolled(u64),
    /// `repeat i in 0..3 { … }`: unrolled with `i` substituted.
    UnrolledRange { var: Ident, start: u64, end: u64 },
    /// `repeat n { … }`: a runtime `for _ in 0..(n)`.
    Runtime(TokenStream),
    /// `repeat i in a..b { … }` with a non-literal bound: runtime `for i in (a)..(b)`.
    RuntimeRange {
        var: Ident,
        start: TokenStream,
        end: TokenStream,
        inclusive: bool,
    },
}

/// `repeat …{ body }`
#[derive(Debug, Clone)]
pub struct Repeat {
    pub keyword: Span,
    pub kind: RepeatKind,
    pub body: Vec<Stmt>,
}

/// `scan carry = init for N { lets }`
#[derive(Debug, Clone)]
pub struct Scan {
    pub carry: Ident,
    pub init: Expr,
    pub length: u32,
    pub body: Vec<Stmt>,
}

/// A binary operator of the expression grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    MatMul,
    Pow,
}

impl BinOp {
    /// (left, right) binding powers; higher binds tighter. `**` is right-associative.
    pub fn binding_power(self) -> (u8, u8) {
        match self {
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => (1, 2),
            BinOp::Add | BinOp::Sub => (3, 4),
            BinOp::Mul | BinOp::Div | BinOp::Rem | BinOp::MatMul => (5, 6),
            BinOp::Pow => (8, 7),
        }
    }

    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::MatMul => "@",
            BinOp::Pow => "**",
        }
    }
}

/// One argument of a call `f(a, name: b)`, kept as tokens: builtins decide whether it
/// is a DSL expression or a raw Rust value (`rope`'s head dim, `split`'s axis).
#[derive(Debug, Clone)]
pub struct CallArg {
    pub name: Option<Ident>,
    pub tokens: TokenStream,
    pub span: Span,
}

/// An expression.
#[derive(Debug, Clone)]
pub enum Expr {
    /// An integer or float literal (a scalar).
    Lit(syn::Lit),
    /// A binding (or, in `rlx_expr!`, a Rust variable).
    Ident(Ident),
    /// `-expr`
    Neg { op: Span, expr: Box<Expr> },
    /// `lhs op rhs`
    Binary {
        op: BinOp,
        span: Span,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    /// `f(args…)`
    Call { name: Ident, args: Vec<CallArg> },
    /// `base[index]` with an optional `.field` chain and inner `[index]`.
    Index(IndexExpr),
    /// `recv.method(raw Rust args…)`
    Method {
        recv: Box<Expr>,
        name: Ident,
        args: Vec<TokenStream>,
    },
}

/// `base[index].field….field[inner]`
#[derive(Debug, Clone)]
pub struct IndexExpr {
    pub base: Ident,
    pub index: TokenStream,
    pub index_span: Span,
    pub fields: Vec<Ident>,
    pub inner: Option<(TokenStream, Span)>,
}

impl Expr {
    /// A span covering the start of the expression, for diagnostics.
    pub fn span(&self) -> Span {
        match self {
            Expr::Lit(l) => l.span(),
            Expr::Ident(i) => i.span(),
            Expr::Neg { op, .. } => *op,
            Expr::Binary { span, .. } => *span,
            Expr::Call { name, .. } => name.span(),
            Expr::Index(ix) => ix.base.span(),
            Expr::Method { name, .. } => name.span(),
        }
    }
}
