//! Lexical environment of an `rlx!` expansion: binding frames (top level, runtime
//! loop bodies, scan bodies) and substitution frames (fn parameters/locals and
//! repeat index variables).

use proc_macro2::TokenStream;
use quote::quote;
use std::collections::HashMap;
use syn::Ident;
use syn::ext::IdentExt;

/// What a name is bound to.
#[derive(Debug, Clone)]
pub enum Binding {
    /// One tensor held in a Rust variable.
    Tensor {
        ident: Ident,
        shape: Option<Vec<u64>>,
    },
    /// `param w[3]`: elements are the tensor bindings `w_0 … w_2`.
    Family { elems: Vec<Ident> },
    /// `bind cb[]`: an outer Rust collection.
    Collection { ident: Ident },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    Top,
    /// The body of a runtime `for` loop: rebinding an outer name makes it loop-carried.
    Loop,
    /// A scan body: reading an outer tensor makes it a broadcast input.
    Scan,
}

/// An outer tensor read inside a scan body.
#[derive(Debug, Clone)]
pub struct Capture {
    /// Identity of the outer value (binding name or collection place).
    pub key: String,
    /// `&outer` as passed in the `bcasts` slice.
    pub outer_ref: TokenStream,
    /// The name it has inside the body closure.
    pub inner: Ident,
}

#[derive(Debug)]
pub struct Frame {
    pub kind: FrameKind,
    pub names: HashMap<String, Binding>,
    /// Loop frames: (name, cell ident) of loop-carried bindings, in order of the
    /// latest rebinding.
    pub carried: Vec<(String, Ident, Ident)>,
    /// Scan frames: broadcasts in first-seen order.
    pub captures: Vec<Capture>,
}

impl Frame {
    pub fn new(kind: FrameKind) -> Frame {
        Frame {
            kind,
            names: HashMap::new(),
            carried: Vec::new(),
            captures: Vec::new(),
        }
    }
}

/// A substitution for an identifier inside a fn body or a repeat body.
#[derive(Debug, Clone)]
pub enum Subst {
    /// A renamed local, a parameter bound to a caller binding or a temp.
    Binding(Ident),
    /// A scalar parameter: its f64 code, and the literal as written (`0.25`, `-1`)
    /// for raw Rust positions, where an untyped literal can take the parameter type.
    Scalar {
        code: TokenStream,
        literal: Option<TokenStream>,
    },
    /// An unrolled repeat index.
    Index(u64),
    /// A runtime loop index variable.
    RuntimeIndex(Ident),
}

#[derive(Debug)]
pub struct SubstFrame {
    pub map: HashMap<String, Subst>,
    /// Fn-inline frames hide the caller's substitutions (lexical scoping).
    pub barrier: bool,
    /// Fn-inline frames: locals already renamed (a rebinding reuses the name).
    pub locals: HashMap<String, Ident>,
}

impl SubstFrame {
    pub fn new(barrier: bool) -> SubstFrame {
        SubstFrame {
            map: HashMap::new(),
            barrier,
            locals: HashMap::new(),
        }
    }
}

/// The name of an identifier as text, without a `r#` prefix.
pub fn key(ident: &Ident) -> String {
    ident.unraw().to_string()
}

pub struct Env {
    pub frames: Vec<Frame>,
    pub subst: Vec<SubstFrame>,
}

impl Env {
    pub fn new() -> Env {
        Env {
            frames: vec![Frame::new(FrameKind::Top)],
            subst: Vec::new(),
        }
    }

    /// The substitution for `name`, searching outward up to the nearest fn barrier.
    pub fn subst(&self, name: &str) -> Option<&Subst> {
        for f in self.subst.iter().rev() {
            if let Some(s) = f.map.get(name) {
                return Some(s);
            }
            if f.barrier {
                break;
            }
        }
        None
    }

    /// The nearest fn-inline substitution frame, if any.
    pub fn inline_frame(&mut self) -> Option<&mut SubstFrame> {
        self.subst.iter_mut().rev().find(|f| f.barrier)
    }

    /// Look `name` up without side effects: (frame index, binding).
    pub fn find(&self, name: &str) -> Option<(usize, &Binding)> {
        self.frames
            .iter()
            .enumerate()
            .rev()
            .find_map(|(i, f)| f.names.get(name).map(|b| (i, b)))
    }

    /// Index of the innermost scan frame above frame `found`.
    fn scan_above(&self, found: usize) -> Option<usize> {
        (found + 1..self.frames.len())
            .rev()
            .find(|&i| self.frames[i].kind == FrameKind::Scan)
    }

    /// Look `name` up; a tensor defined outside the current scan body becomes a broadcast
    /// (recorded once, then visible in the scan frame under the same name).
    pub fn lookup(&mut self, name: &str) -> Option<Binding> {
        let (found, b) = self.find(name)?;
        let b = b.clone();
        let Binding::Tensor { ident, .. } = &b else {
            return Some(b);
        };
        let Some(scan) = self.scan_above(found) else {
            return Some(b);
        };
        let frame = &mut self.frames[scan];
        frame.captures.push(Capture {
            key: name.to_string(),
            outer_ref: quote!(&#ident),
            inner: ident.clone(),
        });
        frame.names.insert(name.to_string(), b.clone());
        Some(b)
    }

    /// Inside a scan body, the inner name of an outer collection element `place`
    /// (registering it as a broadcast); `None` outside scans or for collections
    /// declared inside the scan.
    pub fn capture_place(
        &mut self,
        collection: &str,
        place: &TokenStream,
        fresh: impl FnOnce() -> Ident,
    ) -> Option<Ident> {
        let (found, _) = self.find(collection)?;
        let scan = self.scan_above(found)?;
        let k = place.to_string();
        let frame = &mut self.frames[scan];
        if let Some(c) = frame.captures.iter().find(|c| c.key == k) {
            return Some(c.inner.clone());
        }
        let inner = fresh();
        frame.captures.push(Capture {
            key: k,
            outer_ref: quote!(&(#place)),
            inner: inner.clone(),
        });
        Some(inner)
    }

    /// Bind `name` in the innermost frame. Rebinding, inside a loop frame, a tensor
    /// that lives outside the loop makes it loop-carried (`cell` names its mutable cell).
    pub fn define(&mut self, name: &str, b: Binding, cell: impl FnOnce() -> Ident) {
        let top = self.frames.len() - 1;
        if self.frames[top].kind == FrameKind::Loop {
            if !self.frames[top].names.contains_key(name)
                && let Some(Binding::Tensor { ident: outer, .. }) = self.lookup(name)
                && !self.frames[top].carried.iter().any(|(n, _, _)| n == name)
            {
                self.frames[top]
                    .carried
                    .push((name.to_string(), outer, cell()));
            }
            let frame = &mut self.frames[top];
            if let Some(p) = frame.carried.iter().position(|(n, _, _)| n == name) {
                let c = frame.carried.remove(p);
                frame.carried.push(c);
            }
        }
        self.frames[top].names.insert(name.to_string(), b);
    }
}
