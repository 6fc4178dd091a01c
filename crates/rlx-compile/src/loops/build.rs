//! Building kernel bodies: fresh variables, statements, and index arithmetic folded
//! where operands are literals (static dims leave no `· 1` or `+ 0` behind).

use super::{Bin, Ex, Lit, Stmt, Ty, Un, Var};

/// Accumulates the variables and statements of one kernel body.
#[derive(Debug, Default)]
pub struct Builder {
    /// Type of every variable created so far.
    pub vars: Vec<Ty>,
    /// The statements, in order.
    pub body: Vec<Stmt>,
}

impl Builder {
    /// A new variable of type `ty` defined as `value`; returns it as an expression.
    pub fn bind(&mut self, ty: Ty, value: Ex) -> Ex {
        if matches!(
            value,
            Ex::Lit(_) | Ex::Var(_) | Ex::Item | Ex::Dim(_) | Ex::Group | Ex::Local
        ) {
            return value;
        }
        let var = Var(self.vars.len() as u32);
        self.vars.push(ty);
        self.body.push(Stmt::Let { var, value });
        Ex::Var(var)
    }

    /// Append a statement.
    pub fn push(&mut self, s: Stmt) {
        self.body.push(s);
    }

    /// A new variable of type `ty`, defined by a later statement.
    pub fn var(&mut self, ty: Ty) -> Var {
        self.vars.push(ty);
        Var(self.vars.len() as u32 - 1)
    }
}

/// An index literal.
pub fn int(v: i64) -> Ex {
    Ex::Lit(Lit::Index(v))
}

fn as_int(e: &Ex) -> Option<i64> {
    match e {
        Ex::Lit(Lit::Index(v)) => Some(*v),
        _ => None,
    }
}

/// `a + b` on indices, folded.
pub fn add(a: Ex, b: Ex) -> Ex {
    match (as_int(&a), as_int(&b)) {
        (Some(x), Some(y)) => int(x.wrapping_add(y)),
        (Some(0), _) => b,
        (_, Some(0)) => a,
        _ => Ex::Bin(Bin::Add, Box::new(a), Box::new(b)),
    }
}

/// `a · b` on indices, folded.
pub fn mul(a: Ex, b: Ex) -> Ex {
    match (as_int(&a), as_int(&b)) {
        (Some(x), Some(y)) => int(x.wrapping_mul(y)),
        (Some(0), _) | (_, Some(0)) => int(0),
        (Some(1), _) => b,
        (_, Some(1)) => a,
        _ => Ex::Bin(Bin::Mul, Box::new(a), Box::new(b)),
    }
}

/// `a / b` on non-negative indices, folded.
pub fn div(a: Ex, b: Ex) -> Ex {
    match (as_int(&a), as_int(&b)) {
        (Some(x), Some(y)) if y != 0 => int(x / y),
        (_, Some(1)) => a,
        (Some(0), _) => int(0),
        _ => Ex::Bin(Bin::Div, Box::new(a), Box::new(b)),
    }
}

/// `a % b` on non-negative indices, folded.
pub fn rem(a: Ex, b: Ex) -> Ex {
    match (as_int(&a), as_int(&b)) {
        (Some(x), Some(y)) if y != 0 => int(x % y),
        (_, Some(1)) | (Some(0), _) => int(0),
        _ => Ex::Bin(Bin::Rem, Box::new(a), Box::new(b)),
    }
}

/// `op(a, b)` on values (no folding).
pub fn bin(op: Bin, a: Ex, b: Ex) -> Ex {
    Ex::Bin(op, Box::new(a), Box::new(b))
}

/// `op(a)` on a value.
pub fn un(op: Un, a: Ex) -> Ex {
    Ex::Un(op, Box::new(a))
}

/// `c ? a : b`.
pub fn select(c: Ex, a: Ex, b: Ex) -> Ex {
    Ex::Select(Box::new(c), Box::new(a), Box::new(b))
}

/// `acc + a·b` in compute type `ty`, as the lowering accumulates products: one fused
/// multiply-add ([`Ex::MulAdd`]) in f32, where the lowering's sums differ from the
/// oracle's f64 ones anyway and one rounding per step is both closer and what GPUs do
/// fastest; a rounded product then a rounded sum in f64, which is exactly the oracle's
/// own f64 fold (the renderers never fuse it); a wrapping multiply and add for integers.
pub fn mul_add(ty: Ty, a: Ex, b: Ex, acc: Ex) -> Ex {
    if ty == Ty::F32 {
        Ex::MulAdd(Box::new(a), Box::new(b), Box::new(acc))
    } else {
        bin(Bin::Add, acc, bin(Bin::Mul, a, b))
    }
}

/// A float literal of compute type `ty` (F32 or F64).
pub fn float(ty: Ty, v: f64) -> Ex {
    match ty {
        Ty::F64 => Ex::Lit(Lit::F64(v)),
        _ => Ex::Lit(Lit::F32(v as f32)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_arithmetic_on_literals_folds_to_a_literal() {
        assert_eq!(add(mul(int(3), int(4)), int(5)), int(17));
        assert_eq!(div(int(17), int(4)), int(4));
        assert_eq!(rem(int(17), int(4)), int(1));
    }

    #[test]
    fn identities_leave_no_arithmetic_behind() {
        let d = Ex::Dim(0);
        assert_eq!(mul(d.clone(), int(1)), d);
        assert_eq!(add(int(0), d.clone()), d);
        assert_eq!(mul(d.clone(), int(0)), int(0));
        assert_eq!(rem(d.clone(), int(1)), int(0));
        assert_eq!(div(d.clone(), int(1)), d);
    }

    #[test]
    fn bind_reuses_atoms_and_names_compound_values() {
        let mut b = Builder::default();
        assert_eq!(b.bind(Ty::Index, Ex::Item), Ex::Item);
        let v = b.bind(Ty::Index, add(Ex::Item, int(2)));
        assert_eq!(v, Ex::Var(Var(0)));
        assert_eq!(b.vars, vec![Ty::Index]);
        assert_eq!(b.body.len(), 1);
    }
}
