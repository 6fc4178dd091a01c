//! The bound operands of opaque kernels (`opaque.rs` binds them, the native paths of
//! `nn_ops`, `rope` and `scatter` read them): where each operand's elements lie, and the
//! copy of them into dense memory.

use super::copy::{Copies, FineView};
use super::loads::LoadPlan;
use rlx_ir::{DType, TensorData};

/// How an operand's elements are found.
pub(crate) enum Read {
    /// Fine strided axes, with the copy that materializes them densely.
    Fine(FineView, Copies),
    /// An offset per element (views strides cannot express even split into factors).
    Table(LoadPlan),
}

/// One bound operand of an opaque kernel.
pub(crate) struct Operand {
    pub(crate) buf: usize,
    pub(crate) dtype: DType,
    pub(crate) dims: Vec<usize>,
    pub(crate) read: Read,
}

impl Operand {
    /// `Some(offset)` when the operand is `numel` consecutive elements of its buffer.
    pub(crate) fn dense_offset(&self) -> Option<usize> {
        match &self.read {
            Read::Fine(v, _) => v.dense_offset(),
            Read::Table(_) => None,
        }
    }
}

/// The elements an operand reads, as owned dense data.
pub(crate) fn gather(o: &Operand, bases: &[*mut u8]) -> TensorData {
    let n: usize = o.dims.iter().product();
    let mut bytes = vec![0u8; n * o.dtype.size_bytes()];
    // SAFETY: `o` is a bound operand of `n` elements; `bytes` is a fresh Vec of `n·w` bytes.
    unsafe { gather_into(o, bases, bytes.as_mut_ptr()) };
    TensorData {
        dtype: o.dtype,
        dims: o.dims.clone(),
        bytes,
    }
}

/// Write the elements an operand reads, densely, at `dst`.
///
/// # Safety
/// `o` must be bound to the buffers of `bases`; `dst` must hold its `numel` elements and
/// overlap none of them.
pub(crate) unsafe fn gather_into(o: &Operand, bases: &[*mut u8], dst: *mut u8) {
    let w = o.dtype.size_bytes();
    let n: usize = o.dims.iter().product();
    match &o.read {
        Read::Fine(_, c) => {
            debug_assert_eq!(c.elems(), n);
            // SAFETY: the copy reads the operand's bound view (inside its buffer) and writes
            // its `n` elements at `dst` (caller), each once.
            unsafe { c.run(bases, dst) };
        }
        Read::Table(p) => {
            let src = bases[p.buf] as *const u8;
            let mut idx = vec![0usize; o.dims.len()];
            for f in 0..n {
                let off = p.element_offset(f, &o.dims, &mut idx);
                // SAFETY: `off` is a table entry or `offset + Σ idx·stride` of the bound plan
                // for an index inside `dims`: an element of the source buffer; `f < n` is an
                // element of `dst` (caller).
                unsafe { std::ptr::copy_nonoverlapping(src.add(off * w), dst.add(f * w), w) };
            }
        }
    }
}
