//! B packed once for all threads of a product whose rows are split between them.
//!
//! With C's rows split, every thread multiplies its rows by all of B; packing B in each
//! thread repeats the same `K × N` copy per thread, and with two threads that copy is
//! twice the share of each thread's time it is on one (4–6 % of a 1024³ product on one
//! thread before the packing was reordered). Here B's packed blocks live in one buffer
//! for the whole product, and the threads share the packing: each group of strips has a
//! flag that a thread claims (0 → 1) before packing the group and publishes (→ 2)
//! after. A thread entering a block claims and packs every group still unclaimed, then
//! multiplies; before it reads a strip it waits for the group's flag to read 2. A flag
//! reads 1 only while the thread that claimed it is packing the group (it claimed it
//! while running and waits for nothing until it publishes), so a wait never depends on
//! a thread that has not started, and a thread that starts late finds B packed.
//!
//! The packed bytes are those of [`super::pack::pack_b`] for the same block, so which
//! thread packed a strip changes no result.
//!
//! **Off by default** (`RLX_GEMM_F32_SHARE_B=1` turns it on, read once per process).
//! Sharing trades half of each thread's packing for reading the other half of B from
//! the other core's cache, and on the 2-vCPU Sapphire Rapids VM (2026-12-04) that read
//! cost more than the packing it saves: timed per thread with `rdtsc` at 256 × 512 ×
//! 512, a shared packing took 35–70 k cycles per thread where packing all of B took
//! 130 k, but the multiplications that followed ran 113 k cycles longer (about 0.9
//! cycles per f32 of B read across, against 0.5 to pack it). Against MKL in the same
//! process with both libraries' threads awake (`gemm_shapes --batch 10`, medians of three
//! rounds, two threads), packing per thread ran 256³ 0.88 → 1.02×, W6's weight gradient
//! 0.94 → 0.99×, W11's head 0.97 → 1.06×, proj 0.99 → 1.03×, dXqkv 1.03 → 1.09×, the
//! other row-split products the same or up to 3 % faster; with the threads asleep
//! between calls (interleaved single calls) the two were within 1 %. Earlier (2026-12-03)
//! sharing had measured 5–9 % less CPU time than per-thread packing at 512³–1024³ and
//! W11's fc, head, qkv and dXfc2 (`gemm_shapes --cpu`, spinning included), the counter
//! this module was kept for; the wall times above are what a loop of products sees.

use super::super::lowp_drive::Src;
use super::pack::{Load, Strips, pack_b_strips};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};

/// Strips per claimed group: 4 strips of 48 columns read 768 contiguous bytes per row of
/// B (a run the prefetchers follow), and 1024 columns still give six groups to share.
const GROUP: usize = 4;

/// Largest packed B (f32) shared between threads; larger products pack per thread, as
/// the shared buffer holds all of B's blocks at once (64 MiB here).
pub(super) const MAX_SHARED: usize = 1 << 24;

/// Whether row-split products share B's packing: only with `RLX_GEMM_F32_SHARE_B=1`
/// (see the module docs), or while a test asks for it (`FORCE`).
pub(super) fn enabled() -> bool {
    #[cfg(test)]
    if FORCE.load(std::sync::atomic::Ordering::Relaxed) {
        return true;
    }
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("RLX_GEMM_F32_SHARE_B").is_ok_and(|v| v.trim() == "1"))
}

/// Makes [`enabled`] true for the rest of the test process. Other tests running
/// meanwhile may then share B too, which changes none of their results: which thread
/// packed a strip changes no bit.
#[cfg(test)]
pub(super) static FORCE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The packed B of one product and the flags of its strip groups.
pub(super) struct SharedB {
    /// Start of the packed blocks (64-byte aligned): block `(jc, pc)` at
    /// `pc · npad + jc · kb`.
    buf: *mut f32,
    /// One flag per strip group (0 free, 1 being packed, 2 packed), `gmax` per block,
    /// blocks in `(pc / kc, jc / nc)` order.
    flags: Vec<AtomicU8>,
    /// Columns of the packed B: the last column block padded to whole strips.
    npad: usize,
    /// Sums per block (the balanced block size of the product).
    kc: usize,
    /// Columns per block.
    nc: usize,
    /// The tile's width.
    nr: usize,
    /// Column blocks.
    nj: usize,
    /// Flag slots per block.
    gmax: usize,
}

// SAFETY: the buffer is written only by the thread holding a group's claim and read only
// after the flag's release store is seen with acquire ordering; the flags are atomics.
unsafe impl Sync for SharedB {}

impl SharedB {
    /// F32 the packed B of an `n`-column, `k`-sum product takes with blocks of `kc` sums
    /// and `nc` columns and an `nr`-column tile.
    pub(super) fn len(n: usize, k: usize, nc: usize, nr: usize) -> usize {
        k * Self::padded(n, nc, nr)
    }

    /// Columns of the packed B (the last column block padded to whole strips).
    fn padded(n: usize, nc: usize, nr: usize) -> usize {
        let last = (n - 1) / nc * nc;
        last + (n - last).next_multiple_of(nr)
    }

    /// The shared packing of an `n`-column, `k`-sum product into `buf`.
    ///
    /// # Safety
    /// `buf` must be 64-byte aligned and writable for [`SharedB::len`] f32 while the
    /// value is used; `nc` a multiple of `nr`, `nr` a multiple of 16; `n, k, kc > 0`.
    pub(super) unsafe fn new(
        buf: *mut f32,
        (n, k): (usize, usize),
        (kc, nc, nr): (usize, usize, usize),
    ) -> SharedB {
        let nj = n.div_ceil(nc);
        let gmax = nc.min(n).div_ceil(nr).div_ceil(GROUP);
        let flags = (0..k.div_ceil(kc) * nj * gmax)
            .map(|_| AtomicU8::new(0))
            .collect();
        SharedB {
            buf,
            flags,
            npad: Self::padded(n, nc, nr),
            kc,
            nc,
            nr,
            nj,
            gmax,
        }
    }

    /// The packed block whose first column is `jc` and first sum `pc` (`kb` sums).
    pub(super) fn block(&self, jc: usize, pc: usize, kb: usize) -> *mut f32 {
        // SAFETY: (jc, pc) starts a block, whose kb × padded columns lie inside the
        // buffer (`len`).
        unsafe { self.buf.add(pc * self.npad + jc * kb) }
    }

    /// The flag of the group holding strip `s` of block `(jc, pc)`.
    fn flag(&self, jc: usize, pc: usize, s: usize) -> &AtomicU8 {
        &self.flags[((pc / self.kc) * self.nj + jc / self.nc) * self.gmax + s / GROUP]
    }

    /// Claim and pack every group of block `(jc, pc)` (`kb` sums, `nb` columns of `b`,
    /// which is B at the block's corner) that no thread has claimed yet.
    ///
    /// # Safety
    /// `b` must be readable over `kb × nb`; the block is one of the product's; AVX-512 F,
    /// BW and VL present.
    pub(super) unsafe fn pack<L: Load>(
        &self,
        l: L,
        b: Src<L::E>,
        (jc, pc): (usize, usize),
        kb: usize,
        nb: usize,
    ) {
        let strips = Strips { nb, nr: self.nr };
        let count = strips.count();
        for g in (0..count).step_by(GROUP) {
            let flag = self.flag(jc, pc, g);
            if flag
                .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                // SAFETY: this thread holds the group's claim, so no other thread writes
                // or reads these strips until the release store below; the block lies
                // in the buffer (caller, `block`).
                unsafe {
                    pack_b_strips(
                        l,
                        b,
                        kb,
                        strips,
                        g..(g + GROUP).min(count),
                        self.block(jc, pc, kb),
                    )
                };
                flag.store(2, Ordering::Release);
            }
        }
    }

    /// Wait until the group holding strip `s` of block `(jc, pc)` is packed. The block
    /// must have been passed to [`SharedB::pack`] by this thread (so the group is claimed
    /// and its packer running).
    pub(super) fn wait(&self, (jc, pc): (usize, usize), s: usize) {
        let flag = self.flag(jc, pc, s);
        let mut spins = 0u32;
        while flag.load(Ordering::Acquire) != 2 {
            spins += 1;
            if spins < 1 << 12 {
                std::hint::spin_loop();
            } else {
                // The packer was descheduled (a loaded machine): give it the core.
                std::thread::yield_now();
            }
        }
    }
}
