//! Expression lowering: operators, builtin call sugar, fn inlining and collection /
//! family element access.

use super::env::{Binding, Subst, SubstFrame, key};
use super::{Ctx, Lowerer, Mode, Val, result_name, shape};
use crate::ast::{BinOp, CallArg, Expr, IndexExpr};
use crate::expr::parse_expr_tokens;
use proc_macro2::{Literal, Span, TokenStream, TokenTree};
use quote::{format_ident, quote, quote_spanned};
use std::collections::HashMap;
use syn::{Error, Ident, Result};

/// An identifier with the hygiene of its definition, located at a use.
pub(super) fn at(ident: &Ident, loc: Span) -> Ident {
    let mut i = ident.clone();
    i.set_span(ident.span().located_at(loc));
    i
}

impl Lowerer<'_> {
    /// Lower one expression. Statements it needs first (inlined fn bodies, argument
    /// temporaries) are pushed to `out`.
    pub(super) fn expr(&mut self, e: &Expr, out: &mut Vec<TokenStream>) -> Result<Val> {
        match e {
            Expr::Lit(lit) => Ok(Val::scalar(quote!((#lit) as f64))),
            Expr::Ident(id) => self.ident(id),
            Expr::Neg { op, expr } => {
                let v = self.expr(expr, out)?;
                if v.scalar {
                    let c = &v.code;
                    return Ok(Val::scalar(quote!(-#c)));
                }
                // Deliberate deviation 6: no `Neg` import needed at the call site.
                let operand = v.operand();
                let code = quote_spanned!(*op=> ::core::ops::Neg::neg(#operand));
                Ok(Val::tensor(code, v.shape))
            }
            Expr::Binary { op, span, lhs, rhs } => {
                let l = self.expr(lhs, out)?;
                let r = self.expr(rhs, out)?;
                self.binary(*op, *span, l, r)
            }
            Expr::Call { name, args } => {
                if self.mode == Mode::Build && self.fns.contains_key(&key(name)) {
                    self.inline(name, args, out)
                } else {
                    self.builtin(name, args, out)
                }
            }
            Expr::Index(ix) => self.index(ix),
            Expr::Method { recv, name, args } => {
                let r = self.expr(recv, out)?;
                if r.scalar {
                    return Err(Error::new(
                        name.span(),
                        format!("`.{name}(…)` needs a tensor receiver, not a scalar"),
                    ));
                }
                let mut lowered = Vec::with_capacity(args.len());
                for a in args {
                    lowered.push(self.raw_arg(a)?);
                }
                let recv = r.recv();
                let elementwise = args.is_empty() && shape::ELEMENTWISE.contains(&&*key(name));
                let shape = if elementwise { r.shape } else { None };
                Ok(Val::tensor(quote!(#recv.#name(#(#lowered),*)), shape))
            }
        }
    }

    /// A bare identifier in expression position.
    fn ident(&mut self, id: &Ident) -> Result<Val> {
        if self.mode == Mode::Expr {
            return Ok(Val::binding(id.clone(), None));
        }
        let k = key(id);
        let target = match self.env.subst(&k).cloned() {
            Some(Subst::Scalar { code, .. }) => return Ok(Val::scalar(code)),
            Some(Subst::Index(i)) => {
                let lit = Literal::u64_unsuffixed(i);
                return Ok(Val::scalar(quote!(#lit as f64)));
            }
            Some(Subst::RuntimeIndex(v)) => {
                let v = at(&v, id.span());
                return Ok(Val::scalar(quote!(#v as f64)));
            }
            Some(Subst::Binding(b)) => key(&b),
            None => k,
        };
        match self.env.lookup(&target) {
            Some(Binding::Tensor { ident, shape }) => {
                Ok(Val::binding(at(&ident, id.span()), shape))
            }
            Some(Binding::Family { elems }) => Err(Error::new(
                id.span(),
                format!(
                    "`{id}` is a family of {} tensors — index it, like `{id}[0]`",
                    elems.len()
                ),
            )),
            Some(Binding::Collection { .. }) => Err(Error::new(
                id.span(),
                format!("`{id}` is a `bind` collection — index it, like `{id}[0]`"),
            )),
            None => Err(unknown_binding(id)),
        }
    }

    fn binary(&mut self, op: BinOp, span: Span, l: Val, r: Val) -> Result<Val> {
        use BinOp::*;
        match op {
            MatMul => {
                if l.scalar || r.scalar {
                    return Err(Error::new(
                        span,
                        "matmul `@` requires tensor operands, not a scalar",
                    ));
                }
                let shape = shape::matmul(&l.shape, &r.shape, span)?;
                let (recv, rhs) = (l.recv(), r.by_ref());
                Ok(Val::tensor(
                    quote_spanned!(span=> #recv.matmul(#rhs)),
                    shape,
                ))
            }
            Eq | Ne | Lt | Le | Gt | Ge => {
                let (method, swapped) = match op {
                    Eq => ("eq", "eq"),
                    Ne => ("ne", "ne"),
                    Lt => ("lt", "gt"),
                    Le => ("le", "ge"),
                    Gt => ("gt", "lt"),
                    _ => ("ge", "le"),
                };
                let shape = broadcast(&l, &r);
                let code = match (l.scalar, r.scalar) {
                    (true, true) => {
                        return Err(Error::new(
                            span,
                            "comparing two scalars — at least one side of a comparison must be a tensor",
                        ));
                    }
                    (false, false) => {
                        let m = Ident::new(method, span);
                        let (recv, rhs) = (l.recv(), r.by_ref());
                        quote!(#recv.#m(#rhs))
                    }
                    (false, true) => {
                        let m = Ident::new(method, span);
                        let (recv, rhs) = (l.recv(), &r.code);
                        quote!(#recv.#m(#rhs))
                    }
                    (true, false) => {
                        // `0.0 < x` is `x > 0.0`: the tensor is always the receiver.
                        let m = Ident::new(swapped, span);
                        let (recv, lhs) = (r.recv(), &l.code);
                        quote!(#recv.#m(#lhs))
                    }
                };
                Ok(Val::tensor(code, shape))
            }
            Add | Sub | Mul | Div => {
                let sym = match op {
                    Add => quote_spanned!(span=> +),
                    Sub => quote_spanned!(span=> -),
                    Mul => quote_spanned!(span=> *),
                    _ => quote_spanned!(span=> /),
                };
                let shape = broadcast(&l, &r);
                let (a, b) = (&l, &r);
                Ok(match (a.scalar, b.scalar) {
                    (true, true) => {
                        let (x, y) = (&a.code, &b.code);
                        Val::scalar(quote!(#x #sym #y))
                    }
                    (false, false) => {
                        let (x, y) = (a.operand(), b.operand());
                        Val::infix(quote!(#x #sym #y), shape)
                    }
                    (false, true) => {
                        let (x, y) = (a.operand(), &b.code);
                        Val::infix(quote!(#x #sym #y), shape)
                    }
                    (true, false) => {
                        let (x, y) = (&a.code, b.by_ref());
                        Val::infix(quote!(#x #sym #y), shape)
                    }
                })
            }
            Rem | Pow => {
                let m = Ident::new(if op == Rem { "rem" } else { "pow" }, span);
                if l.scalar && r.scalar {
                    let (x, y) = (&l.code, &r.code);
                    return Ok(Val::scalar(if op == Rem {
                        quote!(#x % #y)
                    } else {
                        quote!(f64::powf(#x, #y))
                    }));
                }
                self.scalar_able(m, l, r)
            }
        }
    }

    /// `a.m(b)` for methods whose rhs may be a scalar; a scalar lhs becomes a rank-0
    /// constant in the tensor's graph.
    fn scalar_able(&mut self, m: Ident, l: Val, r: Val) -> Result<Val> {
        let shape = broadcast(&l, &r);
        let krate = &self.krate;
        let code = match (l.scalar, r.scalar) {
            (true, true) => {
                return Err(Error::new(
                    m.span(),
                    format!("`{m}` needs at least one tensor argument"),
                ));
            }
            (false, true) => {
                let (recv, rhs) = (l.recv(), &r.code);
                quote!(#recv.#m(#rhs))
            }
            (false, false) => {
                let (recv, rhs) = (l.recv(), r.by_ref());
                quote!(#recv.#m(#rhs))
            }
            (true, false) => {
                let (lhs, rhs) = (&l.code, r.by_ref());
                quote!(#krate::__rlx_support::scalar_like(#lhs, #rhs).#m(#rhs))
            }
        };
        Ok(Val::tensor(code, shape))
    }

    fn arg(&mut self, a: &CallArg, out: &mut Vec<TokenStream>) -> Result<Val> {
        let e = parse_expr_tokens(a.tokens.clone())?;
        self.expr(&e, out)
    }

    fn tensor_arg(&mut self, f: &Ident, a: &CallArg, out: &mut Vec<TokenStream>) -> Result<Val> {
        let v = self.arg(a, out)?;
        if v.scalar {
            return Err(Error::new(
                a.span,
                format!("`{f}` needs a tensor here, not a scalar"),
            ));
        }
        Ok(v)
    }

    fn builtin(
        &mut self,
        name: &Ident,
        args: &[CallArg],
        out: &mut Vec<TokenStream>,
    ) -> Result<Val> {
        if let Some(named) = args.iter().find_map(|a| a.name.as_ref()) {
            return Err(Error::new(
                named.span(),
                format!(
                    "named arguments are only allowed in calls to a user `fn` — `{name}` is a builtin; pass its arguments by position"
                ),
            ));
        }
        let f = key(name);
        let arity = |k: usize| -> Result<()> {
            if args.len() == k {
                Ok(())
            } else {
                Err(Error::new(
                    name.span(),
                    format!(
                        "`{f}` takes exactly {k} arguments, but {} were given",
                        args.len()
                    ),
                ))
            }
        };
        let krate = self.krate.clone();
        match f.as_str() {
            "matmul" | "mm" => {
                arity(2)?;
                let a = self.arg(&args[0], out)?;
                let b = self.arg(&args[1], out)?;
                self.binary(BinOp::MatMul, name.span(), a, b)
            }
            "matmul_t" | "mm_t" | "cross_entropy" | "softmax_cross_entropy" | "embed" => {
                arity(2)?;
                let a = self.tensor_arg(name, &args[0], out)?;
                let b = self.tensor_arg(name, &args[1], out)?;
                let (recv, rhs) = (a.recv(), b.by_ref());
                let code = match f.as_str() {
                    "cross_entropy" => quote!(#recv.cross_entropy(#rhs)),
                    "softmax_cross_entropy" => {
                        quote!(#recv.softmax_cross_entropy_with_logits(#rhs))
                    }
                    "embed" => quote!(#recv.gather(#rhs, 0)),
                    _ => quote!(#recv.matmul_t(#rhs)),
                };
                Ok(Val::tensor(code, None))
            }
            "maximum" | "minimum" | "atan2" | "rem" | "pow" => {
                arity(2)?;
                let a = self.arg(&args[0], out)?;
                let b = self.arg(&args[1], out)?;
                self.scalar_able(name.clone(), a, b)
            }
            "clamp" => {
                arity(3)?;
                let x = self.tensor_arg(name, &args[0], out)?;
                let mut bounds = Vec::new();
                for a in &args[1..] {
                    let v = self.arg(a, out)?;
                    if !v.scalar {
                        return Err(Error::new(
                            a.span,
                            "`clamp` bounds must be scalar literals, like `clamp(x, -1.0, 1.0)`",
                        ));
                    }
                    bounds.push(v.code);
                }
                let (recv, lo, hi) = (x.recv(), &bounds[0], &bounds[1]);
                Ok(Val::tensor(quote!(#recv.clamp(#lo, #hi)), x.shape))
            }
            "select" | "where_" => {
                arity(3)?;
                let c = self.tensor_arg(name, &args[0], out)?;
                let mut branches = Vec::new();
                for a in &args[1..] {
                    let v = self.arg(a, out)?;
                    branches.push(if v.scalar { v.code } else { v.by_ref() });
                }
                let (recv, t, e) = (c.recv(), &branches[0], &branches[1]);
                Ok(Val::tensor(quote!(#recv.where_(#t, #e)), None))
            }
            "linear" => {
                arity(3)?;
                self.linear(name, args, None, out)
            }
            "rope" => {
                arity(4)?;
                let x = self.tensor_arg(name, &args[0], out)?;
                let c = self.tensor_arg(name, &args[1], out)?;
                let s = self.tensor_arg(name, &args[2], out)?;
                let hd = self.raw_value(&args[3].tokens);
                let (recv, c, s) = (x.recv(), c.by_ref(), s.by_ref());
                Ok(Val::tensor(quote!(#recv.rope(#c, #s, #hd)), x.shape))
            }
            "split" => {
                arity(3)?;
                let x = self.tensor_arg(name, &args[0], out)?;
                let axis = self.raw_value(&args[1].tokens);
                let n = self.raw_value(&args[2].tokens);
                let recv = x.recv();
                Ok(Val::tensor(quote!(#recv.chunk(#axis, #n)), None))
            }
            _ if args.len() == 1 => {
                if let Some(act) = shape::fused_activation(&f)
                    && let Ok(Expr::Call {
                        name: inner,
                        args: inner_args,
                    }) = parse_expr_tokens(args[0].tokens.clone())
                    && key(&inner) == "linear"
                    && !(self.mode == Mode::Build && self.fns.contains_key("linear"))
                    && inner_args.len() == 3
                    && inner_args.iter().all(|a| a.name.is_none())
                {
                    let act = format_ident!("{act}");
                    return self.linear(
                        &inner,
                        &inner_args,
                        Some(quote!(#krate::Activation::#act)),
                        out,
                    );
                }
                let x = self.tensor_arg(name, &args[0], out)?;
                let recv = x.recv();
                match f.as_str() {
                    "mean" => Ok(Val::tensor(quote!(#recv.mean_all()), Some(vec![]))),
                    "sum" => Ok(Val::tensor(quote!(#recv.sum_all()), Some(vec![]))),
                    _ => {
                        let shape = if shape::ELEMENTWISE.contains(&f.as_str()) {
                            x.shape
                        } else {
                            None
                        };
                        Ok(Val::tensor(quote!(#recv.#name()), shape))
                    }
                }
            }
            _ => Err(Error::new(
                name.span(),
                format!(
                    "unsupported call `{f}` with {} arguments — only builtins (matmul, linear, clamp, where_, rope, split, …) and user `fn`s take several; for a method with arguments write `x.{f}(…)`",
                    args.len()
                ),
            )),
        }
    }

    /// `linear(x, w, b)` → one `FusedMatMulBiasAct` via `linear_act`.
    fn linear(
        &mut self,
        name: &Ident,
        args: &[CallArg],
        act: Option<TokenStream>,
        out: &mut Vec<TokenStream>,
    ) -> Result<Val> {
        let x = self.tensor_arg(name, &args[0], out)?;
        let w = self.tensor_arg(name, &args[1], out)?;
        let b = self.tensor_arg(name, &args[2], out)?;
        let shape = shape::linear(&x.shape, &w.shape, name.span())?;
        let act = match act {
            Some(a) => quote!(::core::option::Option::Some(#a)),
            None => quote!(::core::option::Option::None),
        };
        let (recv, w, b) = (x.recv(), w.by_ref(), b.by_ref());
        Ok(Val::tensor(quote!(#recv.linear_act(#w, #b, #act)), shape))
    }

    /// Inline a user fn: bind its parameters, lower its body with renamed locals, and
    /// yield its last `let`.
    fn inline(
        &mut self,
        name: &Ident,
        args: &[CallArg],
        out: &mut Vec<TokenStream>,
    ) -> Result<Val> {
        let fname = key(name);
        let Some(f) = self.fns.get(&fname).copied() else {
            return Err(unknown_binding(name));
        };
        if self.inline_stack.contains(&fname) {
            return Err(Error::new(
                name.span(),
                format!(
                    "recursive fn `{fname}` — fns are inlined at each call, so a fn cannot call itself (directly or through another fn)"
                ),
            ));
        }
        let ordered = order_args(name, &f.params, args)?;
        let mut map = HashMap::new();
        for (param, arg) in f.params.iter().zip(ordered) {
            let v = self.arg(arg, out)?;
            let s = if v.scalar {
                let literal = match parse_expr_tokens(arg.tokens.clone()) {
                    Ok(Expr::Lit(_)) => Some(arg.tokens.clone()),
                    Ok(Expr::Neg { expr, .. }) if matches!(*expr, Expr::Lit(_)) => {
                        Some(arg.tokens.clone())
                    }
                    _ => None,
                };
                Subst::Scalar {
                    code: v.code,
                    literal,
                }
            } else if let Some(id) = v.ident {
                Subst::Binding(id)
            } else {
                let n = self.next();
                let tmp = Ident::new(&format!("__rlx_{}_{n}", key(param)), param.span());
                let value = v.value();
                out.push(quote!(let #tmp = #value;));
                self.define_tensor(&tmp, v.shape);
                Subst::Binding(tmp)
            };
            map.insert(key(param), s);
        }
        let mut frame = SubstFrame::new(true);
        frame.map = map;
        self.env.subst.push(frame);
        self.inline_stack.push(fname.clone());
        let saved_last = self.last_output.clone();
        let ctx = Ctx {
            in_fn: true,
            ..Ctx::default()
        };
        for s in &f.body {
            self.stmt(s, ctx, out)?;
        }
        let result = result_name(&f.body).map(key).unwrap_or_default();
        let result = match self.env.subst(&result) {
            Some(Subst::Binding(b)) => key(b),
            _ => result,
        };
        self.env.subst.pop();
        self.inline_stack.pop();
        self.last_output = saved_last;
        match self.env.lookup(&result) {
            Some(Binding::Tensor { ident, shape }) => {
                let mut v = Val::binding(at(&ident, name.span()), shape);
                v.ident = Some(ident);
                Ok(v)
            }
            _ => Err(Error::new(
                name.span(),
                format!(
                    "fn `{fname}`'s result is not in scope after the call (was its last `let` inside a runtime `repeat`?)"
                ),
            )),
        }
    }

    /// `base[index]…`: a family element or a `bind` collection element.
    fn index(&mut self, ix: &IndexExpr) -> Result<Val> {
        let base = &ix.base;
        let fields = &ix.fields;
        if self.mode == Mode::Expr {
            let index = &ix.index;
            let inner = ix.inner.as_ref().map(|(t, _)| quote!([#t]));
            return Ok(Val {
                code: quote!(#base[#index] #(.#fields)* #inner),
                scalar: false,
                place: true,
                postfix: false,
                ident: None,
                shape: None,
            });
        }
        let k = key(base);
        let found = match self.env.subst(&k) {
            Some(_) => None,
            None => self.env.find(&k).map(|(_, b)| b.clone()),
        };
        match found {
            None if self.env.subst(&k).is_some() => Err(not_collection(base)),
            None => Err(Error::new(
                base.span(),
                format!(
                    "unknown bind-collection `{base}` — declare it with `bind {base}[];` (or a family with `param {base}[N]: […];`)"
                ),
            )),
            Some(Binding::Tensor { .. }) => Err(not_collection(base)),
            Some(Binding::Family { elems }) => {
                if let Some(f) = fields.first() {
                    return Err(field_on_non_collection(f));
                }
                if let Some((_, span)) = &ix.inner {
                    return Err(Error::new(
                        *span,
                        format!(
                            "a family element `{base}[…]` is one tensor; it cannot be indexed again"
                        ),
                    ));
                }
                let i = self.const_index(&ix.index, ix.index_span)?;
                let Some(elem) = usize::try_from(i).ok().and_then(|i| elems.get(i)) else {
                    return Err(Error::new(
                        ix.index_span,
                        format!(
                            "family `{base}` has {} element(s); index {i} is out of range",
                            elems.len()
                        ),
                    ));
                };
                match self.env.lookup(&key(elem)) {
                    Some(Binding::Tensor { ident, shape }) => {
                        Ok(Val::binding(at(&ident, base.span()), shape))
                    }
                    _ => Err(unknown_binding(elem)),
                }
            }
            Some(Binding::Collection { ident }) => {
                let index = self.collection_index(&ix.index, ix.index_span)?;
                let inner = match &ix.inner {
                    Some((t, span)) => {
                        let i = self.collection_index(t, *span)?;
                        Some(quote!([#i]))
                    }
                    None => None,
                };
                let ident = at(&ident, base.span());
                let place = quote!(#ident[#index] #(.#fields)* #inner);
                let n = self.counter + 1;
                let fresh = || Ident::new(&format!("__rlx_bcast_{n}"), Span::mixed_site());
                let captured = self.env.capture_place(&k, &place, fresh);
                if captured.is_some() {
                    self.counter += 1;
                }
                Ok(match captured {
                    Some(inner) => Val::binding(inner, None),
                    None => Val {
                        code: place,
                        scalar: false,
                        place: true,
                        postfix: false,
                        ident: None,
                        shape: None,
                    },
                })
            }
        }
    }

    /// A family index: an integer literal or an unrolled repeat index.
    pub(super) fn const_index(&self, tokens: &TokenStream, span: Span) -> Result<u64> {
        let trees: Vec<TokenTree> = tokens.clone().into_iter().collect();
        let non_const = || {
            Error::new(
                span,
                "non-constant family index — a family element needs an integer literal or the index of a literal-range `repeat i in 0..N` (families are unrolled at expansion)",
            )
        };
        match trees.as_slice() {
            [TokenTree::Literal(l)] => {
                syn::parse2::<syn::LitInt>(TokenTree::Literal(l.clone()).into())
                    .ok()
                    .and_then(|l| l.base10_parse::<u64>().ok())
                    .ok_or_else(non_const)
            }
            [TokenTree::Ident(id)] => match self.env.subst(&key(id)) {
                Some(Subst::Index(i)) => Ok(*i),
                _ => Err(non_const()),
            },
            _ => Err(non_const()),
        }
    }

    /// A collection index: an integer literal or a repeat index variable.
    pub(super) fn collection_index(&self, tokens: &TokenStream, span: Span) -> Result<TokenStream> {
        let trees: Vec<TokenTree> = tokens.clone().into_iter().collect();
        let bad = || {
            Error::new(
                span,
                "bad collection index — index a `bind` collection with an integer literal or a `repeat` index variable",
            )
        };
        match trees.as_slice() {
            [TokenTree::Literal(l)] => {
                let i = syn::parse2::<syn::LitInt>(TokenTree::Literal(l.clone()).into())
                    .ok()
                    .and_then(|l| l.base10_parse::<u64>().ok())
                    .ok_or_else(bad)?;
                let mut lit = Literal::u64_unsuffixed(i);
                lit.set_span(l.span());
                Ok(quote!(#lit))
            }
            [TokenTree::Ident(id)] => match self.env.subst(&key(id)) {
                Some(Subst::Index(i)) => {
                    let mut lit = Literal::u64_unsuffixed(*i);
                    lit.set_span(id.span());
                    Ok(quote!(#lit))
                }
                Some(Subst::RuntimeIndex(v)) => {
                    let v = at(v, id.span());
                    Ok(quote!(#v))
                }
                _ => Err(bad()),
            },
            _ => Err(bad()),
        }
    }
}

/// Put a user fn's arguments in parameter order (all positional or all named).
fn order_args<'a>(name: &Ident, params: &[Ident], args: &'a [CallArg]) -> Result<Vec<&'a CallArg>> {
    let fname = key(name);
    let named = args.iter().filter(|a| a.name.is_some()).count();
    if named == 0 {
        if args.len() != params.len() {
            return Err(Error::new(
                name.span(),
                format!(
                    "fn `{fname}` takes {} argument(s), but {} were given",
                    params.len(),
                    args.len()
                ),
            ));
        }
        return Ok(args.iter().collect());
    }
    if named != args.len() {
        return Err(Error::new(
            name.span(),
            format!(
                "mixed positional and named arguments in call to fn `{fname}` — name all of them or none"
            ),
        ));
    }
    let mut slots: Vec<Option<&CallArg>> = vec![None; params.len()];
    for a in args {
        let Some(n) = &a.name else { continue };
        let Some(pos) = params.iter().position(|p| key(p) == key(n)) else {
            let list: Vec<String> = params.iter().map(key).collect();
            return Err(Error::new(
                n.span(),
                format!(
                    "fn `{fname}` has no parameter `{n}` (its parameters are: {})",
                    list.join(", ")
                ),
            ));
        };
        if slots[pos].is_some() {
            return Err(Error::new(
                n.span(),
                format!("argument `{n}` is given twice"),
            ));
        }
        slots[pos] = Some(a);
    }
    let mut ordered = Vec::with_capacity(params.len());
    for (p, s) in params.iter().zip(slots) {
        match s {
            Some(a) => ordered.push(a),
            None => {
                return Err(Error::new(
                    name.span(),
                    format!("missing argument `{p}` in call to fn `{fname}`"),
                ));
            }
        }
    }
    Ok(ordered)
}

fn broadcast(l: &Val, r: &Val) -> Option<shape::Dims> {
    match (l.scalar, r.scalar) {
        (false, true) => l.shape.clone(),
        (true, false) => r.shape.clone(),
        _ => match (&l.shape, &r.shape) {
            (Some(a), Some(b)) => shape::broadcast(a, b),
            _ => None,
        },
    }
}

pub(super) fn unknown_binding(id: &Ident) -> Error {
    Error::new(
        id.span(),
        format!("unknown binding `{id}` — declare it with `input`/`param`/`let` first"),
    )
}

fn not_collection(base: &Ident) -> Error {
    Error::new(
        base.span(),
        format!(
            "`{base}` is a tensor, not a collection — only `bind {base}[];` collections and families can be indexed"
        ),
    )
}

pub(super) fn field_on_non_collection(f: &Ident) -> Error {
    Error::new(
        f.span(),
        format!(
            "field access on a non-collection: `.{f}` is only allowed after an element of a `bind` collection, like `layers[0].{f}`"
        ),
    )
}
