//! Lowering: one pass over the parsed program that resolves bindings, expands sugar,
//! inlines fns, unrolls literal repeats, captures scan broadcasts, checks what can be
//! checked at expansion time, and emits the builder calls.

mod env;
mod expr;
mod raw;
pub mod shape;

use crate::ast::*;
use env::{Binding, Env, Frame, FrameKind, Subst, SubstFrame, key};
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use std::collections::HashMap;
use syn::{Error, Ident, LitStr, Result};

/// Largest number of statements one expansion may produce (unrolled repeats and fn
/// inlining multiply bodies; a runaway count should be a diagnostic, not a hang).
const MAX_STATEMENTS: usize = 100_000;

/// `input`/`param`/`const` inside `repeat` (API.md §7.4).
const DECL_IN_REPEAT: &str = "cannot declare an `input`/`param`/`const` inside `repeat` (its name would collide each iteration) — declare it outside";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `rlx! { … }`: declared bindings, checked.
    Build,
    /// `rlx_expr!(…)`: every identifier is an in-scope Rust variable.
    Expr,
}

/// Where a statement sits.
#[derive(Debug, Clone, Copy, Default)]
struct Ctx {
    in_repeat: bool,
    in_fn: bool,
    in_scan: bool,
}

/// A lowered expression.
#[derive(Debug, Clone)]
pub struct Val {
    /// A place (`x`, `layers[0].w`) when `place`, else an owned value; for scalars an
    /// `f64` expression.
    code: TokenStream,
    scalar: bool,
    place: bool,
    /// `code` is a method-call expression (a receiver without parentheses).
    postfix: bool,
    /// The binding when the value is exactly one binding.
    ident: Option<Ident>,
    shape: Option<shape::Dims>,
}

impl Val {
    fn scalar(code: TokenStream) -> Val {
        Val {
            code: quote!((#code)),
            scalar: true,
            place: false,
            postfix: false,
            ident: None,
            shape: None,
        }
    }

    /// A call or method-call expression producing a tensor.
    fn tensor(code: TokenStream, shape: Option<shape::Dims>) -> Val {
        Val {
            code,
            scalar: false,
            place: false,
            postfix: true,
            ident: None,
            shape,
        }
    }

    /// An operator expression producing a tensor (parenthesised when a receiver).
    fn infix(code: TokenStream, shape: Option<shape::Dims>) -> Val {
        Val {
            postfix: false,
            ..Val::tensor(code, shape)
        }
    }

    fn binding(ident: Ident, shape: Option<shape::Dims>) -> Val {
        Val {
            code: quote!(#ident),
            scalar: false,
            place: true,
            postfix: false,
            ident: Some(ident),
            shape,
        }
    }

    /// An owned `Tensor` in statement position (`let y = <value>;`).
    fn value(&self) -> TokenStream {
        let c = &self.code;
        if self.place {
            quote!(#c.clone())
        } else {
            c.clone()
        }
    }

    /// A `&Tensor`.
    fn by_ref(&self) -> TokenStream {
        let c = &self.code;
        if self.place {
            quote!(&#c)
        } else {
            quote!(&(#c))
        }
    }

    /// A method receiver.
    fn recv(&self) -> TokenStream {
        let c = &self.code;
        if self.place || self.postfix {
            c.clone()
        } else {
            quote!((#c))
        }
    }

    /// An operator operand: `&place` or the owned value.
    fn operand(&self) -> TokenStream {
        if self.place {
            self.by_ref()
        } else {
            self.recv()
        }
    }
}

pub struct Lowerer<'p> {
    krate: TokenStream,
    mode: Mode,
    fns: HashMap<String, &'p FnDef>,
    env: Env,
    inline_stack: Vec<String>,
    counter: usize,
    emitted: usize,
    scope: Ident,
    last_output: Option<Ident>,
    taps: Vec<Ident>,
    outs: Vec<Ident>,
}

/// Expand an `rlx!` program into a block expression evaluating to a `Graph`.
pub fn build(krate: TokenStream, program: &Program) -> Result<TokenStream> {
    let mut l = Lowerer::new(krate, Mode::Build);
    l.collect_fns(&program.stmts)?;
    let mut out = Vec::new();
    for s in &program.stmts {
        l.stmt(s, Ctx::default(), &mut out)?;
    }
    let outputs = l.resolve_outputs()?;
    let name = match &program.name {
        Some(n) => quote!(#n),
        None => quote!("rlx_graph"),
    };
    let (krate, scope) = (&l.krate, &l.scope);
    let graph = Ident::new("__rlx_graph", Span::mixed_site());
    let ids = Ident::new("__rlx_outputs", Span::mixed_site());
    Ok(quote! {{
        #[allow(unused_variables, unused_mut, unused_parens, clippy::all)]
        let #graph = {
            let mut #scope = #krate::GraphScope::new(#name);
            #(#out)*
            let #ids = [#( #krate::__rlx_support::own(&#scope, &#outputs) ),*];
            #scope.set_outputs(#ids);
            #scope.finish()
        };
        #graph
    }})
}

/// Expand `rlx_expr!(expr)` into a block expression evaluating to a `Tensor`.
pub fn expr_macro(krate: TokenStream, e: &Expr) -> Result<TokenStream> {
    let mut l = Lowerer::new(krate, Mode::Expr);
    let mut out = Vec::new();
    let v = l.expr(e, &mut out)?;
    if v.scalar {
        return Err(Error::new(
            e.span(),
            "`rlx_expr!` needs a tensor expression; this one is a pure scalar",
        ));
    }
    let value = v.value();
    let tmp = Ident::new("__rlx_value", Span::mixed_site());
    Ok(quote! {{
        #(#out)*
        #[allow(unused_parens, clippy::all)]
        let #tmp = #value;
        #tmp
    }})
}

impl<'p> Lowerer<'p> {
    pub fn new(krate: TokenStream, mode: Mode) -> Lowerer<'p> {
        Lowerer {
            krate,
            mode,
            fns: HashMap::new(),
            env: Env::new(),
            inline_stack: Vec::new(),
            counter: 0,
            emitted: 0,
            scope: Ident::new("__rlx_scope", Span::mixed_site()),
            last_output: None,
            taps: Vec::new(),
            outs: Vec::new(),
        }
    }

    fn next(&mut self) -> usize {
        self.counter += 1;
        self.counter
    }

    /// A hygienic temporary no user token can name.
    fn temp(&mut self, what: &str) -> Ident {
        let n = self.next();
        Ident::new(&format!("__rlx_{what}_{n}"), Span::mixed_site())
    }

    fn collect_fns(&mut self, stmts: &'p [Stmt]) -> Result<()> {
        for s in stmts {
            let Stmt::Fn(f) = s else { continue };
            let name = key(&f.name);
            if self.fns.contains_key(&name) {
                return Err(Error::new(
                    f.name.span(),
                    format!("duplicate fn `{name}` — a fn with this name is already defined"),
                ));
            }
            if result_name(&f.body).is_none() {
                return Err(Error::new(
                    f.name.span(),
                    format!(
                        "fn `{name}` has an empty body — it needs at least one `let`; the last one is the result"
                    ),
                ));
            }
            check_body(
                &f.body,
                Ctx {
                    in_fn: true,
                    ..Ctx::default()
                },
            )?;
            self.fns.insert(name, f);
        }
        Ok(())
    }

    fn define_tensor(&mut self, ident: &Ident, shape: Option<shape::Dims>) {
        let counter = &mut self.counter;
        let name = key(ident);
        self.env.define(
            &name,
            Binding::Tensor {
                ident: ident.clone(),
                shape,
            },
            || {
                *counter += 1;
                Ident::new(&format!("__rlx_cell_{name}_{counter}"), Span::mixed_site())
            },
        );
    }

    /// The Rust name a `let` introduces: the user's own, or inside an inlined fn a
    /// renamed local (reused when the body rebinds it, so rebinding threads state).
    fn let_target(&mut self, name: &Ident) -> Ident {
        let k = key(name);
        let n = self.counter + 1;
        let Some(frame) = self.env.inline_frame() else {
            return name.clone();
        };
        let ident = match frame.locals.get(&k) {
            Some(i) => i.clone(),
            None => {
                let i = Ident::new(&format!("__rlx_{k}_{n}"), name.span());
                frame.locals.insert(k.clone(), i.clone());
                i
            }
        };
        frame.map.insert(k, Subst::Binding(ident.clone()));
        self.counter = n;
        ident
    }

    fn stmt(&mut self, s: &Stmt, ctx: Ctx, out: &mut Vec<TokenStream>) -> Result<()> {
        check_allowed(s, ctx)?;
        self.emitted += 1;
        if self.emitted > MAX_STATEMENTS {
            return Err(Error::new(
                s.head_span(),
                format!(
                    "this `rlx!` expands to more than {MAX_STATEMENTS} statements — use a runtime `repeat (n) {{ … }}` or a `scan` instead of unrolling"
                ),
            ));
        }
        match s {
            Stmt::Decl(d) => self.decl(d, out),
            Stmt::Const(c) => {
                self.constant(c, out);
                Ok(())
            }
            Stmt::Bind(items) => {
                for it in items {
                    if it.collection {
                        self.env.define(
                            &key(&it.name),
                            Binding::Collection {
                                ident: it.name.clone(),
                            },
                            || it.name.clone(),
                        );
                    } else {
                        self.define_tensor(&it.name, None);
                    }
                }
                Ok(())
            }
            Stmt::Let { name, expr } => {
                let v = self.expr(expr, out)?;
                if v.scalar {
                    return Err(Error::new(
                        name.span(),
                        format!(
                            "`let {name}` binds a pure scalar — a `let` must produce a tensor; for a constant tensor write `const {name} = …: F32;`"
                        ),
                    ));
                }
                let target = self.let_target(name);
                let value = v.value();
                out.push(quote!(let #target = #value;));
                self.define_tensor(&target, v.shape);
                self.last_output = Some(target);
                Ok(())
            }
            Stmt::LetTuple { paren, names, expr } => {
                let v = self.expr(expr, out)?;
                if v.scalar {
                    return Err(Error::new(
                        *paren,
                        "a tuple `let` needs a tensor-list expression such as `split(x, 1, 2)`, not a scalar",
                    ));
                }
                let tmp = self.temp("tuple");
                let value = v.value();
                out.push(quote!(let #tmp = #value;));
                for (i, name) in names.iter().enumerate() {
                    let target = self.let_target(name);
                    out.push(quote!(let #target = #tmp[#i].clone();));
                    self.define_tensor(&target, None);
                    self.last_output = Some(target);
                }
                Ok(())
            }
            // Collected up front; bodies are lowered at each call.
            Stmt::Fn(_) => Ok(()),
            Stmt::Repeat(r) => self.repeat(r, ctx, out),
            Stmt::Scan(sc) => self.scan(sc, out),
            Stmt::Tap(names) => {
                for name in names {
                    let k = key(name);
                    let b = match self.env.subst(&k) {
                        Some(Subst::Binding(b)) => key(b),
                        _ => k.clone(),
                    };
                    let Some(Binding::Tensor { ident, .. }) = self.env.lookup(&b) else {
                        return Err(Error::new(
                            name.span(),
                            format!(
                                "unknown tap binding `{name}` — `tap` names a tensor bound earlier"
                            ),
                        ));
                    };
                    let tmp = self.temp("tap");
                    out.push(quote!(let #tmp = #ident.clone();));
                    self.taps.push(tmp);
                }
                Ok(())
            }
            Stmt::Out(names) => {
                self.outs.extend(names.iter().cloned());
                Ok(())
            }
        }
    }

    fn decl(&mut self, d: &Decl, out: &mut Vec<TokenStream>) -> Result<()> {
        let krate = self.krate.clone();
        let scope = self.scope.clone();
        let method = match d.kind {
            DeclKind::Input => format_ident!("input"),
            DeclKind::Param => format_ident!("param"),
        };
        let dims = &d.dims;
        let shape = if dims.is_empty() {
            quote!(#krate::Shape::scalar(#krate::DType::F32))
        } else {
            quote!(#krate::shape![#dims])
        };
        let base = key(&d.name);
        let Some((n, _)) = d.family else {
            let ir = d.ir_name.as_ref().map_or(base.clone(), LitStr::value);
            let ir = LitStr::new(&ir, d.name.span());
            let name = &d.name;
            out.push(quote!(let #name = #scope.#method(#ir, #shape);));
            self.define_tensor(&d.name, d.static_dims.clone());
            return Ok(());
        };
        if let Some(lit) = &d.ir_name
            && !lit.value().contains("{i}")
        {
            return Err(Error::new(
                lit.span(),
                format!(
                    "family `{base}` has {n} elements but its IR name has no `{{i}}` — every element needs its own name, like \"layers.{{i}}.weight\""
                ),
            ));
        }
        let mut elems = Vec::with_capacity(n);
        for i in 0..n {
            let elem = Ident::new(&format!("{base}_{i}"), d.name.span());
            let ir = match &d.ir_name {
                Some(lit) => lit.value().replace("{i}", &i.to_string()),
                None => format!("{base}_{i}"),
            };
            let ir = LitStr::new(&ir, d.name.span());
            out.push(quote!(let #elem = #scope.#method(#ir, #shape);));
            self.define_tensor(&elem, d.static_dims.clone());
            elems.push(elem);
        }
        self.env
            .define(&base, Binding::Family { elems }, || d.name.clone());
        Ok(())
    }

    fn constant(&mut self, c: &Const, out: &mut Vec<TokenStream>) {
        let krate = self.krate.clone();
        let scope = self.scope.clone();
        let dtype = c.dtype.clone().unwrap_or_else(|| format_ident!("F32"));
        let name = &c.name;
        let shape = match &c.value {
            ConstValue::Scalar(v) => {
                out.push(quote!(let #name = #scope.constant((#v) as f64, #krate::DType::#dtype);));
                vec![]
            }
            ConstValue::Array { data, dims } => {
                out.push(quote! {
                    let #name = #scope.constant_nd(
                        ::std::vec![#((#data) as f64),*],
                        ::std::vec![#(#dims),*],
                        #krate::DType::#dtype,
                    );
                });
                dims.iter().map(|&d| d as u64).collect()
            }
        };
        self.define_tensor(name, Some(shape));
    }

    fn repeat(&mut self, r: &Repeat, ctx: Ctx, out: &mut Vec<TokenStream>) -> Result<()> {
        let inner = Ctx {
            in_repeat: true,
            ..ctx
        };
        let too_many = |n: u64| {
            Error::new(
                r.keyword,
                format!(
                    "`repeat` would unroll {n} times (at most {MAX_STATEMENTS}) — use a runtime count like `repeat (n) {{ … }}`"
                ),
            )
        };
        match &r.kind {
            RepeatKind::Unrolled(n) => {
                if *n > MAX_STATEMENTS as u64 {
                    return Err(too_many(*n));
                }
                for _ in 0..*n {
                    for s in &r.body {
                        self.stmt(s, inner, out)?;
                    }
                }
                Ok(())
            }
            RepeatKind::UnrolledRange { var, start, end } => {
                let count = end.saturating_sub(*start);
                if count > MAX_STATEMENTS as u64 {
                    return Err(too_many(count));
                }
                for i in *start..*end {
                    self.env.subst.push(SubstFrame::new(false));
                    self.env
                        .subst
                        .last_mut()
                        .map(|f| f.map.insert(key(var), Subst::Index(i)));
                    for s in &r.body {
                        self.stmt(s, inner, out)?;
                    }
                    self.env.subst.pop();
                }
                Ok(())
            }
            RepeatKind::Runtime(count) => {
                let head = quote!(for _ in 0..(#count));
                self.runtime_loop(head, None, &r.body, inner, out)
            }
            RepeatKind::RuntimeRange {
                var,
                start,
                end,
                inclusive,
            } => {
                let head = if *inclusive {
                    quote!(for #var in (#start)..=(#end))
                } else {
                    quote!(for #var in (#start)..(#end))
                };
                self.runtime_loop(head, Some(var), &r.body, inner, out)
            }
        }
    }

    /// A runtime `for` loop: rebinding an outer tensor carries it through a mutable
    /// cell and re-exposes it after the loop (zero iterations leave it unchanged).
    fn runtime_loop(
        &mut self,
        head: TokenStream,
        var: Option<&Ident>,
        body: &[Stmt],
        ctx: Ctx,
        out: &mut Vec<TokenStream>,
    ) -> Result<()> {
        self.env.frames.push(Frame::new(FrameKind::Loop));
        if let Some(v) = var {
            let mut f = SubstFrame::new(false);
            f.map.insert(key(v), Subst::RuntimeIndex(v.clone()));
            self.env.subst.push(f);
        }
        let saved_last = self.last_output.clone();
        let mut body_out = Vec::new();
        for s in body {
            self.stmt(s, ctx, &mut body_out)?;
        }
        if var.is_some() {
            self.env.subst.pop();
        }
        let frame = self
            .env
            .frames
            .pop()
            .unwrap_or_else(|| Frame::new(FrameKind::Top));
        let carried = frame.carried;
        let mut shapes = Vec::new();
        for (name, _, _) in &carried {
            let inside = match frame.names.get(name) {
                Some(Binding::Tensor { shape, .. }) => shape.clone(),
                _ => None,
            };
            let before = match self.env.find(name) {
                Some((_, Binding::Tensor { shape, .. })) => shape.clone(),
                _ => None,
            };
            shapes.push(if inside == before { before } else { None });
        }
        let idents: Vec<&Ident> = carried.iter().map(|(_, i, _)| i).collect();
        let cells: Vec<&Ident> = carried.iter().map(|(_, _, c)| c).collect();
        out.push(quote! {
            #(let mut #cells = #idents.clone();)*
            #head {
                #(let #idents = #cells.clone();)*
                #(#body_out)*
                #(#cells = #idents;)*
            }
            #(let #idents = #cells;)*
        });
        for ((_, ident, _), shape) in carried.iter().zip(shapes) {
            self.define_tensor(ident, shape);
        }
        self.last_output = carried.last().map(|(_, i, _)| i.clone()).or(saved_last);
        Ok(())
    }

    fn scan(&mut self, sc: &Scan, out: &mut Vec<TokenStream>) -> Result<()> {
        let init = self.expr(&sc.init, out)?;
        if init.scalar {
            return Err(Error::new(
                sc.init.span(),
                format!(
                    "the initial carry of scan `{}` must be a tensor, not a scalar",
                    sc.carry
                ),
            ));
        }
        let Some(Stmt::Let { name: last, .. }) = sc.body.last() else {
            return Err(Error::new(
                sc.carry.span(),
                format!(
                    "scan `{}` must end in a `let` that produces the next carry",
                    sc.carry
                ),
            ));
        };
        self.env.frames.push(Frame::new(FrameKind::Scan));
        self.define_tensor(&sc.carry, init.shape.clone());
        let saved_last = self.last_output.clone();
        let mut body_out = Vec::new();
        let ctx = Ctx {
            in_scan: true,
            ..Ctx::default()
        };
        for s in &sc.body {
            self.stmt(s, ctx, &mut body_out)?;
        }
        let result = match self.env.find(&key(last)) {
            Some((_, Binding::Tensor { ident, .. })) => ident.clone(),
            _ => last.clone(),
        };
        let frame = self
            .env
            .frames
            .pop()
            .unwrap_or_else(|| Frame::new(FrameKind::Top));
        self.last_output = saved_last;
        let (krate, scope) = (&self.krate, &self.scope);
        let carry = &sc.carry;
        let outer: Vec<&TokenStream> = frame.captures.iter().map(|c| &c.outer_ref).collect();
        let inner: Vec<&Ident> = frame.captures.iter().map(|c| &c.inner).collect();
        let idx = 0..inner.len();
        let len = sc.length;
        let c = Ident::new("__rlx_carry", Span::mixed_site());
        let b = Ident::new("__rlx_bcasts", Span::mixed_site());
        let init_ref = init.by_ref();
        out.push(quote! {
            let #carry = #scope.scan_block(
                #init_ref,
                &[#(#outer),*],
                #len,
                |#c: &#krate::Tensor, #b: &[#krate::Tensor]| -> #krate::Tensor {
                    let #carry = #c.clone();
                    #(let #inner = #b[#idx].clone();)*
                    #(#body_out)*
                    #result
                },
            );
        });
        self.define_tensor(carry, init.shape);
        self.last_output = Some(carry.clone());
        Ok(())
    }

    fn resolve_outputs(&mut self) -> Result<Vec<Ident>> {
        let mut ids = Vec::new();
        if self.outs.is_empty() {
            match &self.last_output {
                Some(i) => ids.push(i.clone()),
                None => {
                    return Err(Error::new(
                        Span::call_site(),
                        "this graph has no output — end with a `let`, or name the outputs with `out a, b;`",
                    ));
                }
            }
        }
        for name in &self.outs {
            match self.env.frames[0].names.get(&key(name)) {
                Some(Binding::Tensor { ident, .. }) => ids.push(ident.clone()),
                Some(Binding::Family { elems }) => ids.extend(elems.iter().cloned()),
                _ => {
                    return Err(Error::new(
                        name.span(),
                        format!("unknown output binding `{name}`"),
                    ));
                }
            }
        }
        ids.extend(self.taps.iter().cloned());
        Ok(ids)
    }
}

/// The name of a fn's result: its last top-level single `let`.
fn result_name(body: &[Stmt]) -> Option<&Ident> {
    body.iter().rev().find_map(|s| match s {
        Stmt::Let { name, .. } => Some(name),
        _ => None,
    })
}

/// Check every statement of a (fn) body for context errors, before any call.
fn check_body(stmts: &[Stmt], ctx: Ctx) -> Result<()> {
    for s in stmts {
        check_allowed(s, ctx)?;
        if let Stmt::Repeat(r) = s {
            check_body(
                &r.body,
                Ctx {
                    in_repeat: true,
                    ..ctx
                },
            )?;
        }
    }
    Ok(())
}

/// Statements that are not allowed in the context they appear in.
fn check_allowed(s: &Stmt, ctx: Ctx) -> Result<()> {
    let err = |span: Span, msg: &str| Err(Error::new(span, msg));
    if ctx.in_repeat {
        match s {
            Stmt::Decl(d) => return err(d.name.span(), DECL_IN_REPEAT),
            Stmt::Const(c) => return err(c.name.span(), DECL_IN_REPEAT),
            Stmt::Bind(items) => {
                return err(
                    items[0].name.span(),
                    "`bind` is not allowed inside `repeat` — adopt outer tensors before the loop",
                );
            }
            Stmt::Scan(sc) => return err(sc.carry.span(), "`scan` is not allowed inside `repeat`"),
            Stmt::Fn(f) if !ctx.in_fn => {
                return err(
                    f.name.span(),
                    "`fn` is not allowed inside `repeat` — define it at the top level",
                );
            }
            Stmt::Tap(n) => {
                return err(
                    n[0].span(),
                    "`tap` is not allowed inside `repeat` — tap the value after the loop",
                );
            }
            Stmt::Out(n) => {
                return err(
                    n[0].span(),
                    "`out` is not allowed inside `repeat` — name the outputs after the loop",
                );
            }
            _ => {}
        }
    }
    if ctx.in_fn {
        if let Stmt::Fn(f) = s {
            return Err(Error::new(
                f.name.span(),
                format!(
                    "nested fn `{}` — a fn can only be defined at the top level",
                    f.name
                ),
            ));
        }
        if !matches!(
            s,
            Stmt::Let { .. } | Stmt::LetTuple { .. } | Stmt::Repeat(_)
        ) {
            return err(
                s.head_span(),
                "only `let`, `let (…)` and `repeat` are allowed in a `fn` body",
            );
        }
    }
    if ctx.in_scan && !matches!(s, Stmt::Let { .. } | Stmt::LetTuple { .. }) {
        return err(
            s.head_span(),
            "only `let` statements are allowed in a `scan` body",
        );
    }
    Ok(())
}
