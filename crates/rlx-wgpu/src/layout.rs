//! Binding a program to concrete dims: the arena layout, each kernel's dispatch
//! grid, and the dynamic dims read from the arguments.

use crate::wgsl::{self, Launch};
use rlx_compile::memplan;
use rlx_compile::program::{BufKind, KernelKind, Program, concrete};
use rlx_ir::{DimBinding, TensorView};
use rlx_runtime::{RuntimeError, RuntimeResult};

/// Alignment of every buffer in the arena (and of each kernel's parameter block).
pub(crate) const REGION_ALIGN: u64 = 256;

/// `x` rounded up to a multiple of `a`.
pub(crate) fn align(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

/// Write `bytes` at `off`, padded to a multiple of 4 bytes (wgpu's copy granularity).
pub(crate) fn write_padded(q: &wgpu::Queue, buf: &wgpu::Buffer, off: u64, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    if bytes.len().is_multiple_of(4) {
        q.write_buffer(buf, off, bytes);
    } else {
        let mut v = bytes.to_vec();
        v.resize(align(bytes.len() as u64, 4) as usize, 0);
        q.write_buffer(buf, off, &v);
    }
}

pub(crate) type Layout = (Vec<Vec<usize>>, Vec<u64>, Vec<u64>, u64);

/// Buffer dims, byte offsets and sizes, and the arena size under `binding`.
pub(crate) fn layout(
    p: &Program,
    binding: &DimBinding,
    consts_bytes: u64,
) -> RuntimeResult<Layout> {
    let (dims, usizes) = p.bound_buffers(binding)?;
    let sizes: Vec<u64> = usizes.iter().map(|&s| s as u64).collect();
    let (temp_off, temp_bytes) = memplan::plan_offsets(p, &usizes);
    let mut offsets = vec![0u64; p.buffers.len()];
    let mut c = 0u64;
    let temps_at = consts_bytes;
    let mut tail = align(temps_at + temp_bytes as u64, REGION_ALIGN);
    for (i, b) in p.buffers.iter().enumerate() {
        match b.kind {
            BufKind::Const(_) => {
                offsets[i] = c;
                c += align(sizes[i], REGION_ALIGN);
            }
            BufKind::Temp => offsets[i] = temps_at + temp_off[i] as u64,
            BufKind::Arg(_) => {
                offsets[i] = tail;
                tail += align(sizes[i].max(1), REGION_ALIGN);
            }
            BufKind::Output(_) => {}
        }
    }
    for (i, b) in p.buffers.iter().enumerate() {
        if let BufKind::Output(_) = b.kind {
            offsets[i] = tail;
            tail += align(sizes[i].max(1), REGION_ALIGN);
        }
    }
    Ok((dims, offsets, sizes, tail))
}

/// The dispatch grid of a kernel under `binding` (`Ok(None)`: no work), or why it
/// must run on the host.
pub(crate) fn grid(
    k: &rlx_compile::program::Kernel,
    launch: &Launch,
    binding: &DimBinding,
    max_dim: u32,
) -> Result<Option<[u32; 3]>, String> {
    let n = |d: &[rlx_ir::Dim]| -> Result<u64, String> {
        Ok(concrete(d, binding)
            .ok_or("unbound dim")?
            .iter()
            .map(|&x| x as u64)
            .product())
    };
    // Reductions over nothing: the CPU gives the identity or the error.
    if let KernelKind::Reduce {
        op, in_space, axes, ..
    } = &k.kind
    {
        let red: Vec<_> = axes.iter().map(|&a| in_space[a]).collect();
        if n(&red)? == 0 {
            return Err(format!("reduce_{} over an empty axis", op.name()));
        }
    }
    let split = |groups: u64| -> Result<Option<[u32; 3]>, String> {
        if groups == 0 {
            return Ok(None);
        }
        let x = groups.min(max_dim as u64);
        let y = groups.div_ceil(x);
        if y > max_dim as u64 {
            return Err(format!("{groups} workgroups exceed the device's grid"));
        }
        Ok(Some([x as u32, y as u32, 1]))
    };
    match launch {
        Launch::Threads(d) => split(n(d)?.div_ceil(wgsl::WG as u64)),
        Launch::Groups(d) => {
            if let KernelKind::Row { space, .. } = &k.kind
                && n(&space[space.len() - 1..])? == 0
            {
                return Ok(None);
            }
            split(n(d)?)
        }
        Launch::Tiles {
            m,
            n: nn,
            batch,
            tile,
        } => {
            let (m, nn, b) = (n(&[*m])?, n(&[*nn])?, n(batch)?);
            let t = *tile as u64;
            split(b * m.div_ceil(t) * nn.div_ceil(t))
        }
    }
}

/// The binding of the dynamic dims from the argument dims.
pub(crate) fn binding_from_args(p: &Program, args: &[TensorView<'_>]) -> RuntimeResult<DimBinding> {
    let mut b = DimBinding::new();
    for ((name, shape), a) in p.args.iter().zip(args) {
        let bad = || {
            RuntimeError::new(format!(
                "graph `{}`: argument `{name}` is declared {shape} but got dims {:?}",
                p.name, a.dims
            ))
        };
        if shape.rank() != a.dims.len() {
            return Err(bad());
        }
        for (d, &n) in shape.dims().iter().zip(a.dims) {
            match d {
                rlx_ir::Dim::Static(s) if *s != n => return Err(bad()),
                rlx_ir::Dim::Dynamic(s) => match b.get(*s) {
                    Some(prev) if prev != n => {
                        return Err(RuntimeError::new(format!(
                            "graph `{}`: dynamic dim ?{s} is {prev} elsewhere but `{name}` gives it {n} (dims {:?})",
                            p.name, a.dims
                        )));
                    }
                    _ => b.set(*s, n),
                },
                _ => {}
            }
        }
    }
    Ok(b)
}
