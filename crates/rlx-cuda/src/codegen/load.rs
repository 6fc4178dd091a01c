//! Loads of the kernels this backend still writes around the loop IR (contraction
//! operand packing, the fp8 bias): the load's view is lowered by the loop IR (one index
//! map for every backend: dense, strided or a walk back through the view steps) and
//! rendered into the kernel.

use super::KGen;
use rlx_compile::loops::{Ex, Stmt, lower_value, render_c_statements, render_c_value};
use rlx_compile::program::{EOp, Expr};
use rlx_ir::Dim;

pub(crate) use rlx_compile::program::chain_dims;

impl KGen<'_> {
    /// Dims of the view of kernel load `l` (the space it is evaluated in).
    pub(crate) fn view_dims(&self, l: usize) -> Vec<Dim> {
        let load = &self.k.loads[l];
        chain_dims(self.p.buffers[load.buf].shape.dims(), &load.steps)
            .pop()
            .unwrap()
    }

    /// Statements splitting flat index `f` over `dims` into `{prefix}0..`; returns the names.
    pub(crate) fn unravel_stmts(
        &mut self,
        out: &mut String,
        indent: &str,
        f: &str,
        dims: &[Dim],
        prefix: &str,
    ) -> Vec<String> {
        let r = dims.len();
        let names: Vec<String> = (0..r).map(|d| format!("{prefix}{d}")).collect();
        if r == 0 {
            return names;
        }
        out.push_str(&format!("{indent}I {prefix}_r = {f};\n"));
        for d in (1..r).rev() {
            if matches!(dims[d], Dim::Static(1)) {
                out.push_str(&format!("{indent}I {} = 0;\n", names[d]));
                continue;
            }
            let dv = self.dim(dims[d]);
            out.push_str(&format!(
                "{indent}I {} = {prefix}_r % {dv}; {prefix}_r /= {dv};\n",
                names[d]
            ));
        }
        out.push_str(&format!("{indent}I {} = {prefix}_r;\n", names[0]));
        names
    }

    /// Load `l` at the point of its view `dims` with flat index `flat` and coordinates
    /// `coords` (host variables): the statements it needs (indented two levels) and
    /// either its value in the dtype's compute type (`float`, `double` or `long long`) or,
    /// without `value`, its element offset in its buffer (for copying the bits).
    pub(crate) fn load_at(
        &mut self,
        l: usize,
        dims: &[Dim],
        flat: &str,
        coords: &[String],
        value: bool,
    ) -> Result<(String, String), String> {
        let dt = self.p.buffers[self.k.loads[l].buf].shape.dtype();
        let mut e = Expr::default();
        e.push(EOp::Load(l), vec![], dt);
        let (mut frag, mut v) =
            lower_value(self.p, self.kid, &e, 0, dims, flat, coords).map_err(|e| e.to_string())?;
        if !value {
            // The load is the fragment's last binding: keep its index, drop the read.
            match frag.body.pop() {
                Some(Stmt::Let {
                    value: Ex::Load { index, .. },
                    ..
                }) => v = *index,
                _ => unreachable!("a load lowers to a bound load"),
            }
        }
        let host = self.loop_host(&frag, "ld");
        Ok(host.with(|em| {
            (
                render_c_statements(&frag, em, 2),
                render_c_value(&frag, em, &v),
            )
        }))
    }
}
