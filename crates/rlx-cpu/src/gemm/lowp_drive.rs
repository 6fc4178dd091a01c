//! The blocked driver shared by the low-precision GEMM kernels (AMX tiles,
//! `vdpbf16ps`, f32 FMA over converted halves).
//!
//! Loop order: for each super-block of `KS` sums and each block of `NC` columns, B's block
//! (`KS × NC`) is packed once into the kernel's panel layout; for each block of `MC` rows,
//! A's block (`MC × KS`) is packed too; then the sum runs in steps of `KC` and, per step,
//! every `MR × NR` tile of the `MC × NC` block of C gets one micro-kernel call (B's column
//! panels outer and A's row panels inner, or the other way round: [`Blocking::rows_outer`];
//! the sizes and the order come from [`Kernel::blocking`]). A full
//! tile of a C with contiguous rows is computed in place (started from zero, or from C
//! when adding to it), with partial sums between `KC` steps kept in a per-thread buffer of
//! the block (tile by tile contiguous: C's rows are often a power of two apart, 4 KiB at
//! 1024 columns, so a tile's 16–32 rows share one L1 set, and AMX tile loads from C that
//! way ran at half speed, 677 vs 1166 GFLOP/s at 1024 vs 520 columns). Tail tiles and
//! other layouts are computed in the buffer and then added to (or written over) C through
//! its strides. C is never read when it is overwritten (a NaN in it does not leak), and
//! its lines are prefetched for writing before each final step (writing C cost 30% of an
//! AMX product without that), by the kernel inside its sum loop where it can
//! ([`Kernel::PREFETCHES_C`]).
//! Packing reads the operands through their strides (transposes and slices cost no
//! copy of the whole tensor), converts them to the kernel's element type, and zero-pads
//! the tails (rows past M, columns past N, sums past K up to the kernel's granularity), so
//! the micro-kernels only ever see full tiles. Zero padding is exact: a padded product is
//! `0 · 0`, never `0 · ∞`.
//!
//! Each C element's sum runs through the same sequence of kernel steps whichever block of
//! rows or columns a thread owns (partial sums are stored and reloaded exactly between
//! steps), so results do not depend on the thread count.

use super::pieces::Pieces;
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

/// A strided source matrix (16-bit float bits, or 8-bit integers): element `(i, j)` is at
/// `ptr + i·rs + j·cs` (in elements; strides may be negative).
#[derive(Debug)]
pub(crate) struct Src<E = u16> {
    pub(crate) ptr: *const E,
    pub(crate) rs: isize,
    pub(crate) cs: isize,
}

impl<E> Clone for Src<E> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<E> Copy for Src<E> {}

impl<E: Copy> Src<E> {
    /// The view of the sub-matrix starting at `(i, j)`.
    ///
    /// # Safety
    /// `(i, j)` must be an element of the view (or one past the end of an empty one).
    #[inline(always)]
    pub(crate) unsafe fn at(self, i: usize, j: usize) -> Src<E> {
        Src {
            // SAFETY: the caller keeps (i, j) inside the operand, so the offset stays
            // inside its allocation.
            ptr: unsafe { self.ptr.offset(i as isize * self.rs + j as isize * self.cs) },
            ..self
        }
    }

    /// Element `(i, j)`.
    ///
    /// # Safety
    /// `(i, j)` must be an element of the view.
    #[inline(always)]
    pub(crate) unsafe fn get(self, i: usize, j: usize) -> E {
        // SAFETY: the caller keeps (i, j) inside the operand, whose elements are aligned.
        unsafe { *self.ptr.offset(i as isize * self.rs + j as isize * self.cs) }
    }
}

/// A strided output of accumulators (f32 or i32): element `(i, j)` at `ptr + i·rs + j·cs`.
#[derive(Debug)]
pub(crate) struct Dst<T = f32> {
    pub(crate) ptr: *mut T,
    pub(crate) rs: isize,
    pub(crate) cs: isize,
}

impl<T> Clone for Dst<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Dst<T> {}

impl<T> Dst<T> {
    /// Pointer to element `(i, j)`.
    ///
    /// # Safety
    /// `(i, j)` must be an element of the view.
    #[inline(always)]
    pub(crate) unsafe fn at(self, i: usize, j: usize) -> *mut T {
        // SAFETY: the caller keeps (i, j) inside the output view.
        unsafe { self.ptr.offset(i as isize * self.rs + j as isize * self.cs) }
    }
}

/// Where a micro-kernel reads its starting C tile (null: start from zero) and writes its
/// result; strides in elements. `pf_rows`: how many leading rows of `out` the kernel is to
/// prefetch for writing while it computes (non-zero only for kernels with
/// [`Kernel::PREFETCHES_C`], at most one row per `KU` sums of the call). `b_streamed`: the
/// call's B panel is read once per A panel (row panels outer), not kept for the next call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CTile<T = f32> {
    pub(crate) inp: *const T,
    pub(crate) ld_in: isize,
    pub(crate) out: *mut T,
    pub(crate) ld_out: isize,
    pub(crate) pf_rows: usize,
    pub(crate) b_streamed: bool,
}

/// An accumulator type: f32 (float products) or i32 (integer products, wrapping).
pub(crate) trait Accum: Copy + Default + Send + Sync + 'static {
    /// `row[j] = src[j]`, or `row[j] += src[j]` with `add`, for contiguous elements.
    ///
    /// # Safety
    /// `row` must be writable for `src.len()` elements not overlapping `src`; AVX-512 F
    /// present (every kernel of this driver needs it).
    unsafe fn row(src: &[Self], row: *mut Self, add: bool);
    /// `self + other` (wrapping for integers).
    fn plus(self, other: Self) -> Self;
}

impl Accum for f32 {
    unsafe fn row(src: &[f32], row: *mut f32, add: bool) {
        // SAFETY: forwarded contract.
        unsafe { row_f32(src, row, add) }
    }
    fn plus(self, other: f32) -> f32 {
        self + other
    }
}

impl Accum for i32 {
    unsafe fn row(src: &[i32], row: *mut i32, add: bool) {
        // SAFETY: forwarded contract.
        unsafe { row_i32(src, row, add) }
    }
    fn plus(self, other: i32) -> i32 {
        self.wrapping_add(other)
    }
}

/// Block sizes and loop order of one product ([`Kernel::blocking`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Blocking {
    /// Sums per micro-kernel call over packed A (a multiple of `KU` dividing `KS`).
    pub(crate) kc: usize,
    /// Sums per call when A is read in place (a multiple of `KU` dividing `KS`).
    pub(crate) kc_in_place: usize,
    /// Sums per call over packed A when the super-block has at most [`SHORT_SUMS`] sums
    /// (a multiple of `KU` dividing `KS`).
    pub(crate) kc_short: usize,
    /// Rows of A per block (a multiple of `MR`).
    pub(crate) mc: usize,
    /// Columns of B per block (a multiple of `NR`).
    pub(crate) nc: usize,
    /// Within a block, walk the `MR`-row panels of A in the outer loop and B's `NR`-column
    /// panels in the inner one (A's panel stays in L1 while B's block streams from L2),
    /// instead of B's panels outside — for steps whose B block (`kc × nc` packed elements)
    /// fits [`ROWS_OUTER_B_BYTES`]; larger steps keep B's panels outside (each is then
    /// reused by every row panel while it is in cache). Only the order in which C's tiles
    /// are computed changes: each element's sum runs through the same steps either way.
    pub(crate) rows_outer: bool,
}

/// One micro-kernel and its packing formats.
///
/// Packed A holds `MR`-row panels, each `MR · kpad` elements contiguous and followed by
/// [`Kernel::A_TRAILER`] elements of the kernel's own (panels [`Kernel::a_panel_len`]
/// apart); packed B holds `NR`-column panels, each `NR · kpad` contiguous, where `kpad`
/// is the block's sum length rounded up to `KU`. The layout inside a panel is the
/// kernel's own.
pub(crate) trait Kernel: Sync {
    /// Source element type (bf16/f16 bits as u16, or i8).
    type E: Copy;
    /// Packed element type.
    type P: Copy + Default;
    /// Accumulator type of C.
    type C: Accum;
    /// Rows of C per micro-kernel call.
    const MR: usize;
    /// Columns of C per micro-kernel call.
    const NR: usize;
    /// Granularity of the sum (packed sums are zero-padded to a multiple of it).
    const KU: usize;
    /// Sum length per micro-kernel call (a multiple of `KU`).
    const KC: usize;
    /// Sum length per micro-kernel call when A is read in place
    /// ([`Kernel::a_in_place`]; a multiple of `KU` dividing `KS`).
    const KC_IN_PLACE: usize = Self::KC;
    /// Sum length per micro-kernel call over packed A when the super-block has at most
    /// [`SHORT_SUMS`] sums (a multiple of `KU` dividing `KS`).
    const KC_SHORT: usize = Self::KC;
    /// Sums per packed super-block (a multiple of `KC`).
    const KS: usize;
    /// Rows of A per packed block.
    const MC: usize;
    /// Columns of B per packed block.
    const NC: usize;
    /// Whether [`Kernel::micro`] prefetches C's rows for writing itself when
    /// [`CTile::pf_rows`] asks (one row per `KU` sums, spread over its sum loop); the driver
    /// then prefetches only the rows the call's sums do not cover.
    const PREFETCHES_C: bool = false;
    /// Packed elements after each A panel's `MR · kpad` that [`Kernel::pack_a`] fills with
    /// what the kernel derives from the panel once rather than in every call (the VNNI
    /// kernel: its rows' sums, the share of B's bias to subtract).
    const A_TRAILER: usize = 0;

    /// Packed elements from one A panel to the next for blocks of `kpad` sums.
    fn a_panel_len(kpad: usize) -> usize {
        Self::MR * kpad + Self::A_TRAILER
    }

    /// Pack rows `0..mb`, sums `0..kb` of `a` (already offset to the block's corner)
    /// into `dst` (`mb.div_ceil(MR)` panels of [`Kernel::a_panel_len`] elements).
    ///
    /// # Safety
    /// The `mb × kb` block of `a` must be readable.
    unsafe fn pack_a(
        &self,
        a: Src<Self::E>,
        mb: usize,
        kb: usize,
        kpad: usize,
        dst: &mut [Self::P],
    );

    /// Pack sums `0..kb`, columns `0..nb` of `b` into `dst`
    /// (`nb.next_multiple_of(NR) · kpad` elements).
    ///
    /// # Safety
    /// The `kb × nb` block of `b` must be readable.
    unsafe fn pack_b(
        &self,
        b: Src<Self::E>,
        kb: usize,
        nb: usize,
        kpad: usize,
        dst: &mut [Self::P],
    );

    /// `c.out[MR × NR] = c.inp + A panel · B panel` (or without `c.inp` when it is null)
    /// over the `kb` (a multiple of `KU`) sums from `k0` of panels packed with `kpad` sums
    /// each (`sums = (k0, kb, kpad)`). C tiles' rows are `ld_in` / `ld_out` elements apart
    /// (positive), their columns contiguous.
    ///
    /// # Safety
    /// The panels must hold `MR · kpad` (and the A panel's trailer) and `NR · kpad`
    /// packed elements with `k0 + kb <= kpad`; `c.inp` (if not null) must address a readable and `c.out` a
    /// writable `MR × NR` f32 tile with their row strides; [`Kernel::begin`] must have run
    /// on this thread since the last [`Kernel::end`].
    unsafe fn micro(
        &self,
        sums: (usize, usize, usize),
        a: *const Self::P,
        b: *const Self::P,
        c: CTile<Self::C>,
    );

    /// Whether [`Kernel::micro_in_place`] can read the `mb × kb` block of `a` where it lies
    /// (row panels of `MR` rows, `kb` sums from the block's first column), so the driver
    /// need not pack it. Kernels without such a path keep the default (never).
    fn a_in_place(&self, a: Src<Self::E>, mb: usize, kb: usize) -> bool {
        let _ = (a, mb, kb);
        false
    }

    /// [`Kernel::micro`] with the A panel read in place: `a` is the panel's element at
    /// (row 0, sum `k0`) of the unpacked matrix; B and C as for `micro`.
    ///
    /// # Safety
    /// As [`Kernel::micro`], with [`Kernel::a_in_place`] true for a block holding the
    /// panel's `MR` rows and `kb` sums from `a`. The default (for kernels whose
    /// `a_in_place` is never true) is never reached.
    unsafe fn micro_in_place(
        &self,
        sums: (usize, usize, usize),
        a: Src<Self::E>,
        b: *const Self::P,
        c: CTile<Self::C>,
    ) {
        let _ = (sums, a, b, c);
        unreachable!("micro_in_place called on a kernel whose a_in_place is always false")
    }

    /// Whether [`Kernel::blocking`]'s default walks row panels outer
    /// ([`Blocking::rows_outer`]).
    fn rows_outer(&self) -> bool {
        false
    }

    /// The blocking [`drive`] uses: the constants above and [`Kernel::rows_outer`] unless a
    /// kernel chooses at run time (the AMX kernel reads a measurement override,
    /// `RLX_AMX_BLOCKING`).
    fn blocking(&self) -> Blocking {
        Blocking {
            kc: Self::KC,
            kc_in_place: Self::KC_IN_PLACE,
            kc_short: Self::KC_SHORT,
            mc: Self::MC,
            nc: Self::NC,
            rows_outer: self.rows_outer(),
        }
    }

    /// Per-thread set-up before the first micro-kernel call (AMX: load the tile config).
    fn begin(&self) {}
    /// Per-thread tear-down after the last call (AMX: release the tiles).
    fn end(&self) {}
}

thread_local! {
    /// Buffers kept per thread between calls (packed A, packed B, the C block): batched
    /// matmuls run many small products, each would otherwise allocate. They never outgrow
    /// the block sizes.
    static BUFS: RefCell<[Vec<u64>; 3]> = const { RefCell::new([Vec::new(), Vec::new(), Vec::new()]) };
}

/// Run `f` with two 64-byte aligned packing buffers of `na` and `nb` elements of `T` and a
/// C block of `nc` accumulators (contents unspecified: the packers and kernels write every
/// element before reading it).
fn with_buffers<T: Copy + Default, A: Accum, R>(
    (na, nb, nc): (usize, usize, usize),
    f: impl FnOnce(&mut [T], &mut [T], &mut [A]) -> R,
) -> R {
    let words = |bytes: usize| bytes.div_ceil(8) + 8;
    let [mut va, mut vb, mut vc] = BUFS
        .try_with(|p| std::mem::take(&mut *p.borrow_mut()))
        .unwrap_or_default();
    for (v, bytes) in [
        (&mut va, na * size_of::<T>()),
        (&mut vb, nb * size_of::<T>()),
        (&mut vc, nc * size_of::<A>()),
    ] {
        if v.len() < words(bytes) {
            *v = vec![0u64; words(bytes)];
        }
    }
    let r = f(
        align_view::<T>(&mut va, na),
        align_view::<T>(&mut vb, nb),
        align_view::<A>(&mut vc, nc),
    );
    let _ = BUFS.try_with(|p| *p.borrow_mut() = [va, vb, vc]);
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
    // element types is valid; the slice borrows `v` exclusively.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr() as *mut T, n) }
}

/// `C (+)= A·B` for an `m × n` output over `k` sums on the calling thread.
///
/// # Safety
/// `a` must be readable over `m × k`, `b` over `k × n`, `c` writable over `m × n` with
/// pairwise distinct elements not overlapping A or B. `k > 0`, `m > 0`, `n > 0`.
pub(crate) unsafe fn drive<K: Kernel>(
    kern: &K,
    a: Src<K::E>,
    b: Src<K::E>,
    c: Dst<K::C>,
    (m, n, k): (usize, usize, usize),
    accumulate: bool,
) {
    let bl = kern.blocking();
    let kpad_max = K::KS.min(k).next_multiple_of(K::KU);
    let mc_max = bl.mc.min(m).next_multiple_of(K::MR);
    let nc_max = bl.nc.min(n).next_multiple_of(K::NR);
    // A's rows packed once per super-block of sums for every block of B's columns (rather
    // than once per column block) when the packed copy is small enough to keep.
    let a_once = n <= bl.nc
        || m <= bl.mc
        || m.div_ceil(K::MR) * K::a_panel_len(kpad_max) * size_of::<K::P>() <= A_ONCE_BYTES;
    let a_rows = if a_once {
        m.next_multiple_of(K::MR)
    } else {
        mc_max
    };
    let a_len = a_rows / K::MR * K::a_panel_len(kpad_max);
    let lens = (a_len, nc_max * kpad_max, mc_max * nc_max);
    with_buffers::<K::P, K::C, ()>(lens, |ap, bp, cb| {
        kern.begin();
        let direct_layout = c.cs == 1 && c.rs > 0;
        for ks in (0..k).step_by(K::KS) {
            let kb_all = K::KS.min(k - ks);
            let kpad = kb_all.next_multiple_of(K::KU);
            // Add to C unless this is the first super-block of an overwriting product.
            let add = accumulate || ks > 0;
            // A read where it lies (no packing) when the kernel can: every block of rows
            // then starts at its own row of A.
            // SAFETY: (0, ks) is inside A.
            let a_direct = kern.a_in_place(unsafe { a.at(0, ks) }, m, kb_all);
            if a_once && !a_direct {
                // SAFETY: (0, ks) and the m × kb_all block are inside A.
                unsafe { kern.pack_a(a.at(0, ks), m, kb_all, kpad, ap) };
            }
            for jc in (0..n).step_by(bl.nc) {
                let nb = bl.nc.min(n - jc);
                let tiles_n = nb.div_ceil(K::NR);
                // SAFETY: (ks, jc) is inside B (ks < k, jc < n) and the kb_all × nb block too.
                unsafe { kern.pack_b(b.at(ks, jc), kb_all, nb, kpad, bp) };
                for ic in (0..m).step_by(bl.mc) {
                    let mb = bl.mc.min(m - ic);
                    if !a_once && !a_direct {
                        // SAFETY: (ic, ks) and the mb × kb_all block are inside A.
                        unsafe { kern.pack_a(a.at(ic, ks), mb, kb_all, kpad, ap) };
                    }
                    // Row panels of this block inside the packed A.
                    let a_base = if a_once { ic } else { 0 };
                    let tile =
                        |ir: usize, jr: usize| (ir / K::MR * tiles_n + jr / K::NR) * K::MR * K::NR;
                    let kc = match (a_direct, kpad <= SHORT_SUMS) {
                        (true, _) => bl.kc_in_place,
                        (false, true) => bl.kc_short,
                        (false, false) => bl.kc,
                    };
                    let b_step_bytes =
                        kc.min(kpad) * nb.next_multiple_of(K::NR) * size_of::<K::P>();
                    let rows_outer = bl.rows_outer && b_step_bytes <= ROWS_OUTER_B_BYTES;
                    for pc in (0..kpad).step_by(kc) {
                        let kb = kc.min(kpad - pc);
                        let (first, last) = (pc == 0, pc + kb == kpad);
                        let mut step = |ir: usize, jr: usize| {
                            let bpanel = bp[jr * kpad..].as_ptr();
                            let apanel =
                                ap[(a_base + ir) / K::MR * K::a_panel_len(kpad)..].as_ptr();
                            let (mr, nr) = (K::MR.min(mb - ir), K::NR.min(nb - jr));
                            // SAFETY: (ic + ir, jc + jr) is an element of C.
                            let cp = unsafe { c.at(ic + ir, jc + jr) };
                            // A full tile of a C with contiguous rows is read and written
                            // in place; partial sums between steps and every other tile
                            // live in the block buffer (row stride NR).
                            let direct = direct_layout && mr == K::MR && nr == K::NR;
                            let ct = cb[tile(ir, jr)..].as_mut_ptr();
                            let nr_ld = K::NR as isize;
                            let (inp, ld_in) = match (first, add && direct) {
                                (true, true) => (cp as *const K::C, c.rs),
                                (true, false) => (std::ptr::null(), 0),
                                (false, _) => (ct as *const K::C, nr_ld),
                            };
                            let (out, ld_out) = if last && direct {
                                (cp, c.rs)
                            } else {
                                (ct, nr_ld)
                            };
                            // Rows of the output tile the kernel prefetches itself.
                            let pf_rows = if K::PREFETCHES_C && last && direct {
                                (kb / K::KU).min(mr)
                            } else {
                                0
                            };
                            if last && pf_rows < mr {
                                // SAFETY: the tile's rows (from pf_rows < mr on) and columns are
                                // inside C.
                                unsafe {
                                    let rest = c.at(ic + ir + pf_rows, jc + jr);
                                    prefetch_tile(rest, c, (mr - pf_rows, nr))
                                };
                            }
                            // SAFETY: the panels were packed above with kpad >= pc + kb
                            // sums; a buffer tile is MR × NR f32 inside `cb`, a direct
                            // one a full tile of C with row stride c.rs > 0; begin() ran.
                            unsafe {
                                let ctile = CTile {
                                    inp,
                                    ld_in,
                                    out,
                                    ld_out,
                                    pf_rows,
                                    b_streamed: rows_outer,
                                };
                                if a_direct {
                                    let a_at = a.at(ic + ir, ks + pc);
                                    kern.micro_in_place((pc, kb, kpad), a_at, bpanel, ctile)
                                } else {
                                    kern.micro((pc, kb, kpad), apanel, bpanel, ctile)
                                }
                            };
                            if last && !direct {
                                // SAFETY: the mr × nr tile at cp is inside C; the buffer
                                // tile holds MR × NR f32.
                                unsafe {
                                    let t = std::slice::from_raw_parts(ct, K::MR * K::NR);
                                    write_tile::<K>(t, cp, (c.rs, c.cs), (mr, nr), add)
                                };
                            }
                        };
                        if rows_outer {
                            for ir in (0..mb).step_by(K::MR) {
                                for jr in (0..nb).step_by(K::NR) {
                                    step(ir, jr);
                                }
                            }
                        } else {
                            for jr in (0..nb).step_by(K::NR) {
                                for ir in (0..mb).step_by(K::MR) {
                                    step(ir, jr);
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

/// Longest super-block of sums that packed A runs in calls of [`Blocking::kc_short`].
pub(crate) const SHORT_SUMS: usize = 1024;

/// Largest B block per sum step walked with row panels outer ([`Blocking::rows_outer`]):
/// at 2048³ on one thread (AMX, A packed, 2048 sums × 512 columns = 2 MiB per step) rows
/// outer ran 17% slower than column panels outer (B's block streamed from L3 once per row
/// panel); at 1024³ (1 MiB) it was 5–10% faster.
pub(crate) const ROWS_OUTER_B_BYTES: usize = 1 << 20;

/// Largest packed A kept for all column blocks of B (bf16 A up to 1024 × 2048 per
/// super-block of sums): at 1024³ on one thread (AMX) packing A once was 0–3% faster than
/// once per column block; an 8 MiB copy (2048³), which no longer fits L2, was 5% slower.
const A_ONCE_BYTES: usize = 4 << 20;

/// One product's operands, handed to the worker threads.
pub(crate) struct Job<E, C> {
    pub(crate) a: Src<E>,
    pub(crate) b: Src<E>,
    pub(crate) c: Dst<C>,
    pub(crate) mnk: (usize, usize, usize),
    pub(crate) accumulate: bool,
    pub(crate) threads: usize,
}

// SAFETY: a Job carries one product's views into the blocks of a blocking parallel loop:
// A and B are only read, each block writes a disjoint range of C's rows or columns, and
// the views outlive the loop.
unsafe impl<E, C> Send for Job<E, C> {}
// SAFETY: as for Send.
unsafe impl<E, C> Sync for Job<E, C> {}

impl<E: Copy, C> Job<E, C> {
    /// Split C into blocks of rows (or columns, when wider than tall) of nearly equal
    /// whole tiles ([`Pieces`]), one per thread, and drive each on whichever thread of
    /// the team claims it.
    ///
    /// # Safety
    /// As [`drive`] for the whole product.
    pub(crate) unsafe fn run<K: Kernel<E = E, C = C>>(&self, kern: &K) {
        let (m, n, k) = self.mnk;
        let rows = m >= n;
        let (len, grain) = if rows { (m, K::MR) } else { (n, K::NR) };
        let pieces = Pieces::new(len, grain, self.threads, None);
        let parts = pieces.count;
        let block = |part: usize| {
            let (lo, hi) = pieces.range(part);
            // SAFETY: rows (or columns) lo..hi of C, A's rows (or B's columns) with them,
            // are inside the views; blocks are disjoint in C.
            unsafe {
                if rows {
                    drive(
                        kern,
                        self.a.at(lo, 0),
                        self.b,
                        Dst {
                            ptr: self.c.at(lo, 0),
                            ..self.c
                        },
                        (hi - lo, n, k),
                        self.accumulate,
                    )
                } else {
                    drive(
                        kern,
                        self.a,
                        self.b.at(0, lo),
                        Dst {
                            ptr: self.c.at(0, lo),
                            ..self.c
                        },
                        (m, hi - lo, k),
                        self.accumulate,
                    )
                }
            }
        };
        // Pieces claimed by whichever thread is free (`team.rs`): the caller starts at
        // once and takes the other half too if the worker wakes late, as on a shared VM.
        super::team::run_pieces(parts, self.threads.max(1) - 1, &block);
    }
}

/// Ask for the cache lines of C's `mr × nr` tile at `cp` in the exclusive state
/// (PREFETCHW) before the micro-kernel computes it: its stores then find C in cache
/// instead of stalling on a read-for-ownership per line.
///
/// # Safety
/// Every `(i, j) < (mr, nr)` must be an element of C from `cp` (only addresses are formed).
#[inline(always)]
unsafe fn prefetch_tile<T>(cp: *mut T, c: Dst<T>, (mr, nr): (usize, usize)) {
    use std::arch::x86_64::{_MM_HINT_ET0, _mm_prefetch};
    // 16 accumulators (f32 or i32) per 64-byte line.
    let lines = if c.cs == 1 { nr.div_ceil(16) } else { nr };
    for i in 0..mr {
        for l in 0..lines {
            let j = if c.cs == 1 { (16 * l).min(nr - 1) } else { l };
            // SAFETY: (i, j) is an element of C (caller); a prefetch never faults.
            unsafe {
                let p = cp.offset(i as isize * c.rs + j as isize * c.cs);
                _mm_prefetch::<_MM_HINT_ET0>(p as *const i8);
            }
        }
        if c.cs == 1 {
            // The row's last element (a row that does not start on a line boundary
            // spans one more line).
            // SAFETY: as above.
            unsafe {
                let p = cp.offset(i as isize * c.rs + nr as isize - 1);
                _mm_prefetch::<_MM_HINT_ET0>(p as *const i8);
            }
        }
    }
}

/// `C (+)= tile` for the `mr × nr` corner of an `MR × NR` row-major tile, C at `c` with
/// strides `(rs, cs)`.
///
/// # Safety
/// Every `(i, j) < (mr, nr)` must be a writable element of C from `c`, not inside `tile`.
unsafe fn write_tile<K: Kernel>(
    tile: &[K::C],
    c: *mut K::C,
    (rs, cs): (isize, isize),
    (mr, nr): (usize, usize),
    add: bool,
) {
    for (i, src) in tile.chunks_exact(K::NR).take(mr).enumerate() {
        // SAFETY: row i < mr of C (caller).
        let row = unsafe { c.offset(i as isize * rs) };
        if cs == 1 && nr == K::NR && K::NR.is_multiple_of(16) {
            // SAFETY: the row's NR elements are contiguous in C (unit column stride).
            unsafe { K::C::row(src, row, add) };
            continue;
        }
        for (j, &v) in src[..nr].iter().enumerate() {
            // SAFETY: column j < nr of row i (caller).
            unsafe {
                let d = row.offset(j as isize * cs);
                *d = if add { (*d).plus(v) } else { v };
            }
        }
    }
}

/// `row[j] (+)= src[j]` for `src.len()` (a multiple of 16) contiguous f32, 16 at a time
/// (a plain loop here becomes a `memcpy` call per row).
///
/// # Safety
/// `row` must be writable for `src.len()` f32 not overlapping `src`; AVX-512 F present.
#[target_feature(enable = "avx512f")]
unsafe fn row_f32(src: &[f32], row: *mut f32, add: bool) {
    use std::arch::x86_64::*;
    for (g, s) in src.chunks_exact(16).enumerate() {
        // SAFETY: 16 f32 of `src` and of the row at 16·g (caller); unaligned accesses.
        unsafe {
            let v = _mm512_loadu_ps(s.as_ptr());
            let d = row.add(16 * g);
            let v = if add {
                _mm512_add_ps(_mm512_loadu_ps(d), v)
            } else {
                v
            };
            _mm512_storeu_ps(d, v);
        }
    }
}

/// [`row_f32`] for i32 accumulators (wrapping adds).
///
/// # Safety
/// As [`row_f32`].
#[target_feature(enable = "avx512f")]
unsafe fn row_i32(src: &[i32], row: *mut i32, add: bool) {
    use std::arch::x86_64::*;
    for (g, s) in src.chunks_exact(16).enumerate() {
        // SAFETY: 16 i32 of `src` and of the row at 16·g (caller); unaligned accesses.
        unsafe {
            let v = _mm512_loadu_si512(s.as_ptr() as *const __m512i);
            let d = row.add(16 * g) as *mut __m512i;
            let v = if add {
                _mm512_add_epi32(_mm512_loadu_si512(d), v)
            } else {
                v
            };
            _mm512_storeu_si512(d, v);
        }
    }
}
