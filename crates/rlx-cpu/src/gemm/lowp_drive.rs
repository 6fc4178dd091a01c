//! The blocked driver shared by the low-precision GEMM kernels (AMX tiles,
//! `vdpbf16ps`, f32 FMA over converted halves).
//!
//! Loop order: for each super-block of `KS` sums and each block of `NC` columns, B's block
//! (`KS × NC`) is packed once into the kernel's panel layout; for each block of `MC` rows,
//! A's block (`MC × KS`) is packed too; then the sum runs in steps of `KC` and, per step,
//! every `MR × NR` tile of the `MC × NC` block of C gets one micro-kernel call. The C block
//! stays in L2 across the `KC` steps (one pass over C per `KS` sums, not per `KC`: with
//! AMX, C's round trips to memory at every `KC` step cost as much as the products), the
//! `NR`-column panel of B stays in L1 across a column of tiles, A's `MC × KC` slice in L2.
//! Packing reads the operands through their strides (transposes and slices cost no
//! copy of the whole tensor), converts them to the kernel's element type, and zero-pads
//! the tails (rows past M, columns past N, sums past K up to the kernel's granularity), so
//! the micro-kernels only ever see full tiles. Zero padding is exact: a padded product is
//! `0 · 0`, never `0 · ∞`.
//!
//! Each C element's sum runs through the same sequence of kernel steps whichever block of
//! rows or columns a thread owns (C is stored and reloaded exactly between steps), so
//! results do not depend on the thread count.

use std::cell::RefCell;

/// The storage type of a half-precision source operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Half {
    /// bfloat16 bits.
    Bf16,
    /// IEEE binary16 bits.
    F16,
}

impl Half {
    /// The f32 value of the element with these bits (both conversions are exact).
    #[inline(always)]
    pub(crate) fn to_f32(self, bits: u16) -> f32 {
        match self {
            Half::Bf16 => f32::from_bits((bits as u32) << 16),
            Half::F16 => f16_to_f32(bits),
        }
    }
}

/// The exact f32 value of binary16 bits, inlinable (`half`'s conversion is an out-of-line
/// call per element; measured as the bulk of an f16 packing loop).
#[inline(always)]
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    let mag = match exp {
        // Zero and subnormals: man · 2⁻²⁴, exact in f32.
        0 => (man as f32 * f32::from_bits(0x3380_0000)).to_bits(),
        // Infinities and NaNs (payload kept, shifted like the significand).
        31 => 0x7f80_0000 | (man << 13),
        // Normal: rebias the exponent (15 → 127).
        _ => ((exp + 112) << 23) | (man << 13),
    };
    f32::from_bits(sign | mag)
}

/// A strided source matrix of 16-bit elements: element `(i, j)` is at
/// `ptr + i·rs + j·cs` (in elements; strides may be negative).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Src {
    pub(crate) ptr: *const u16,
    pub(crate) rs: isize,
    pub(crate) cs: isize,
}

impl Src {
    /// The view of the sub-matrix starting at `(i, j)`.
    ///
    /// # Safety
    /// `(i, j)` must be an element of the view (or one past the end of an empty one).
    #[inline(always)]
    pub(crate) unsafe fn at(self, i: usize, j: usize) -> Src {
        Src {
            // SAFETY: the caller keeps (i, j) inside the operand, so the offset stays
            // inside its allocation.
            ptr: unsafe { self.ptr.offset(i as isize * self.rs + j as isize * self.cs) },
            ..self
        }
    }

    /// The bits of element `(i, j)`.
    ///
    /// # Safety
    /// `(i, j)` must be an element of the view.
    #[inline(always)]
    pub(crate) unsafe fn get(self, i: usize, j: usize) -> u16 {
        // SAFETY: the caller keeps (i, j) inside the operand; 16-bit elements are aligned.
        unsafe { *self.ptr.offset(i as isize * self.rs + j as isize * self.cs) }
    }
}

/// A strided f32 output: element `(i, j)` at `ptr + i·rs + j·cs`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dst {
    pub(crate) ptr: *mut f32,
    pub(crate) rs: isize,
    pub(crate) cs: isize,
}

impl Dst {
    /// Pointer to element `(i, j)`.
    ///
    /// # Safety
    /// `(i, j)` must be an element of the view.
    #[inline(always)]
    pub(crate) unsafe fn at(self, i: usize, j: usize) -> *mut f32 {
        // SAFETY: the caller keeps (i, j) inside the output view.
        unsafe { self.ptr.offset(i as isize * self.rs + j as isize * self.cs) }
    }
}

/// One micro-kernel and its packing formats.
///
/// Packed A holds `MR`-row panels, each `MR · kpad` elements contiguous; packed B holds
/// `NR`-column panels, each `NR · kpad` contiguous, where `kpad` is the block's sum length
/// rounded up to `KU`. The layout inside a panel is the kernel's own.
pub(crate) trait Kernel: Sync {
    /// Packed element type.
    type P: Copy + Default;
    /// Rows of C per micro-kernel call.
    const MR: usize;
    /// Columns of C per micro-kernel call.
    const NR: usize;
    /// Granularity of the sum (packed sums are zero-padded to a multiple of it).
    const KU: usize;
    /// Sum length per micro-kernel call (a multiple of `KU`).
    const KC: usize;
    /// Sums per packed super-block (a multiple of `KC`).
    const KS: usize;
    /// Rows of A per packed block.
    const MC: usize;
    /// Columns of B per packed block.
    const NC: usize;

    /// Pack rows `0..mb`, sums `0..kb` of `a` (already offset to the block's corner)
    /// into `dst` (`mb.next_multiple_of(MR) · kpad` elements).
    ///
    /// # Safety
    /// The `mb × kb` block of `a` must be readable.
    unsafe fn pack_a(&self, a: Src, mb: usize, kb: usize, kpad: usize, dst: &mut [Self::P]);

    /// Pack sums `0..kb`, columns `0..nb` of `b` into `dst`
    /// (`nb.next_multiple_of(NR) · kpad` elements).
    ///
    /// # Safety
    /// The `kb × nb` block of `b` must be readable.
    unsafe fn pack_b(&self, b: Src, kb: usize, nb: usize, kpad: usize, dst: &mut [Self::P]);

    /// `C[MR × NR] (+)= A panel · B panel` over the `kb` (a multiple of `KU`) sums from `k0`
    /// of panels packed with `kpad` sums each (`sums = (k0, kb, kpad)`); C's rows are `ldc` elements apart, its
    /// columns contiguous. `load = false` overwrites C without reading it.
    ///
    /// # Safety
    /// The panels must hold `MR · kpad` and `NR · kpad` packed elements with
    /// `k0 + kb <= kpad`, `c` must address a writable `MR × NR` tile with row stride `ldc`,
    /// and [`Kernel::begin`] must have run on this thread since the last [`Kernel::end`].
    unsafe fn micro(
        &self,
        sums: (usize, usize, usize),
        a: *const Self::P,
        b: *const Self::P,
        c: *mut f32,
        ldc: isize,
        load: bool,
    );

    /// Per-thread set-up before the first micro-kernel call (AMX: load the tile config).
    fn begin(&self) {}
    /// Per-thread tear-down after the last call (AMX: release the tiles).
    fn end(&self) {}
}

thread_local! {
    /// Packing buffers (A's, B's) kept per thread between calls: batched matmuls run many
    /// small products, each would otherwise allocate. They never outgrow the block sizes.
    static PACK: RefCell<(Vec<u64>, Vec<u64>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Run `f` with two 64-byte aligned packing buffers of `na` and `nb` elements of `T`
/// (contents unspecified: the packers write every element).
fn with_buffers<T: Copy + Default, R>(
    na: usize,
    nb: usize,
    f: impl FnOnce(&mut [T], &mut [T]) -> R,
) -> R {
    let words = |n: usize| (n * size_of::<T>()).div_ceil(8) + 8;
    let (mut va, mut vb) = PACK
        .try_with(|p| std::mem::take(&mut *p.borrow_mut()))
        .unwrap_or_default();
    if va.len() < words(na) {
        va = vec![0u64; words(na)];
    }
    if vb.len() < words(nb) {
        vb = vec![0u64; words(nb)];
    }
    let r = f(align_view::<T>(&mut va, na), align_view::<T>(&mut vb, nb));
    let _ = PACK.try_with(|p| *p.borrow_mut() = (va, vb));
    r
}

/// `n` elements of `T` inside `v`, starting at its first 64-byte boundary (`v` has 64
/// spare bytes for that).
fn align_view<T: Copy + Default>(v: &mut [u64], n: usize) -> &mut [T] {
    let base = v.as_mut_ptr() as usize;
    let skip = (base.next_multiple_of(64) - base) / 8;
    let words = &mut v[skip..];
    assert!(words.len() * 8 >= n * size_of::<T>());
    // SAFETY: `words` is 64-byte aligned (so aligned for T, whose alignment is at most 8),
    // holds at least `n · size_of::<T>()` bytes, and every bit pattern of the u16/u32/f32
    // packed types is valid; the slice borrows `v` exclusively.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr() as *mut T, n) }
}

/// `C (+)= A·B` for an `m × n` output over `k` sums on the calling thread.
///
/// # Safety
/// `a` must be readable over `m × k`, `b` over `k × n`, `c` writable over `m × n` with
/// pairwise distinct elements not overlapping A or B. `k > 0`, `m > 0`, `n > 0`.
pub(crate) unsafe fn drive<K: Kernel>(
    kern: &K,
    a: Src,
    b: Src,
    c: Dst,
    (m, n, k): (usize, usize, usize),
    accumulate: bool,
) {
    let kpad_max = K::KS.min(k).next_multiple_of(K::KU);
    let mc_max = K::MC.min(m).next_multiple_of(K::MR);
    let nc_max = K::NC.min(n).next_multiple_of(K::NR);
    with_buffers::<K::P, ()>(mc_max * kpad_max, nc_max * kpad_max, |ap, bp| {
        kern.begin();
        // An edge tile (or a C the micro-kernel cannot address) goes through this buffer.
        let mut edge = vec![0f32; K::MR * K::NR];
        let direct_layout = c.cs == 1 && c.rs > 0;
        for ks in (0..k).step_by(K::KS) {
            let kb_all = K::KS.min(k - ks);
            let kpad = kb_all.next_multiple_of(K::KU);
            for jc in (0..n).step_by(K::NC) {
                let nb = K::NC.min(n - jc);
                // SAFETY: (ks, jc) is inside B (ks < k, jc < n) and the kb_all × nb block too.
                unsafe { kern.pack_b(b.at(ks, jc), kb_all, nb, kpad, bp) };
                for ic in (0..m).step_by(K::MC) {
                    let mb = K::MC.min(m - ic);
                    // SAFETY: (ic, ks) and the mb × kb_all block are inside A.
                    unsafe { kern.pack_a(a.at(ic, ks), mb, kb_all, kpad, ap) };
                    for pc in (0..kpad).step_by(K::KC) {
                        let kb = K::KC.min(kpad - pc);
                        let load = accumulate || ks > 0 || pc > 0;
                        for jr in (0..nb).step_by(K::NR) {
                            let nr = K::NR.min(nb - jr);
                            let bpanel = bp[jr * kpad..].as_ptr();
                            for ir in (0..mb).step_by(K::MR) {
                                let mr = K::MR.min(mb - ir);
                                let apanel = ap[ir * kpad..].as_ptr();
                                // SAFETY: (ic + ir, jc + jr) is an element of C.
                                let cp = unsafe { c.at(ic + ir, jc + jr) };
                                let ks3 = (pc, kb, kpad);
                                if direct_layout && mr == K::MR && nr == K::NR {
                                    // SAFETY: the full MR × NR tile at cp lies inside C (rows
                                    // with stride c.rs > 0, columns contiguous); the panels
                                    // were packed above with kpad >= pc + kb sums; begin() ran.
                                    unsafe { kern.micro(ks3, apanel, bpanel, cp, c.rs, load) };
                                    continue;
                                }
                                let at = |i: usize, j: usize| i as isize * c.rs + j as isize * c.cs;
                                // SAFETY: every (i, j) < (mr, nr) is an element of C from cp;
                                // the edge buffer is a full MR × NR tile with row stride NR.
                                unsafe {
                                    if load {
                                        for i in 0..mr {
                                            for j in 0..nr {
                                                edge[i * K::NR + j] = *cp.offset(at(i, j));
                                            }
                                        }
                                    }
                                    let e = edge.as_mut_ptr();
                                    kern.micro(ks3, apanel, bpanel, e, K::NR as isize, load);
                                    for i in 0..mr {
                                        for j in 0..nr {
                                            *cp.offset(at(i, j)) = edge[i * K::NR + j];
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        kern.end();
    });
}
