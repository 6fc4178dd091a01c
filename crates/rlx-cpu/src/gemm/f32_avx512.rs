//! rlx's own f32 GEMM for AVX-512 CPUs: packing, FMA micro-kernels and the blocked
//! driver. bf16 / f16 products on `LowpPath::Avx512F32` run here too ([`sgemm_half`]):
//! their operands are widened exactly while they are packed (`pack.rs`'s `Load`), and the
//! rest is the f32 product's (the other half-precision paths keep the shared driver of
//! `lowp_drive.rs`).
//!
//! Register tile ([`plan`] picks one per CPU): 8 × 48 on Intel (24 zmm accumulators; per
//! sum three vectors of B, eight broadcasts of A, 24 FMAs) or 12 × 32 elsewhere (24
//! accumulators; two vectors of B, twelve elements of A each broadcast from memory inside
//! its two FMAs). The sum loops are inline assembly (`micro.rs`), including the 8 × 32
//! loop of the narrower last strips on the 8 × 48 plan (two in 22 strips at 1024
//! columns). The C tile's lines are prefetched into L2 before the sums, and the next B
//! strip inside the sum loops of a strip's first panels ([`prefetch_slice`]); the last
//! strip of a block, when narrower than the tile, runs only the vectors it stores. On the
//! 8 × 48 plan a row-major f32 A is not packed: the loops read its eight rows in place
//! ([`IN_PLACE_LDA`]).
//!
//! Blocking (per thread; sizes from the detected L1d / L2, see `plan.rs`): for each
//! `NC`-column block of B and each `KC`-sum block, B's `KC × NC` block is packed into
//! strips of the tile's width; for each `MC`-row block of A, A's `MC × KC` block is packed
//! into panels of the tile's height (or read in place, see above); then for each B strip
//! the A panels of the block stream past it from L2. Packing (`pack.rs`) reads the
//! sources in memory order where the layout allows and is vectorized for the layouts the
//! graphs produce. Threads split
//! C's rows (or its columns when it is wider than tall) into pieces of nearly equal size
//! ([`Pieces`]), one per thread, each packing its own B (or, split by columns, reading
//! or packing all of A); the calling thread takes pieces without waiting for workers
//! that have not started (`team.rs`). With `RLX_GEMM_F32_SHARE_B=1` threads splitting
//! rows share one packing of B instead (`shared.rs`, off by default: reading the other
//! core's half cost more than packing it) and take pieces of `MC` rows times one packed
//! block of B from a counter, block after block. The buffers are kept between calls, so
//! a call allocates only its phase flags (and, sharing, its packing flags) once a thread
//! has seen its sizes.
//!
//! Measured 2026-12-04 (same VM, MKL in the same process with both libraries' threads
//! awake between calls: `gemm_shapes --batch 10`, two threads): with B's packing shared
//! and column pieces rounded up to the 48-column tile, 256³ ran 0.87× MKL, W6's three
//! column-split products 0.94–0.98× and W11's products 0.96–1.14×. The column rounding
//! had cut W6's 512 columns 288 + 224, so one thread ran 27 % longer (`rdtsc` per
//! piece: 935 k against 737 k cycles, and the slow piece followed the columns, not the
//! thread); cut 256 + 256, W6 l1 / l2 / dX2 ran 1.06 / 1.02 / 1.03×. Packing B per
//! thread then took 256³ to 1.02× (see `shared.rs`).
//!
//! Measured (2-vCPU Sapphire Rapids-class Xeon under KVM, 48 KiB L1d / 2 MiB L2, calls
//! interleaved in one process with MKL 2024.2's `SGEMM` from torch's build,
//! `examples/gemm_shapes.rs --mkl`, one thread timed by its CPU time, medians of three
//! processes on a machine shared with several builds): 0.94–1.11× MKL over 512³–2048³
//! and W5/W6/W11's products (1024³ 0.98×, 2048³ 0.94×, W11 fc and dXfc2 0.94–0.96×),
//! where the kernel before the packing rework and KC 512 read 0.90–1.07× (1024³ and
//! 2048³ 0.90×). MKL's own kernel on that CPU is also 8 × 48. Products under 2²⁴
//! multiply-adds (attention-sized) go to faer under `Auto`: 0.85–0.97× MKL. Two-thread
//! wall times on that machine measured its other tenants (0.3–12× MKL run to run); the
//! shared packing of B is measured by CPU time in `shared.rs`. By process CPU time on two
//! threads (`--cpu`, 2026-12-03, the benchmark at raised priority) the own kernel ran
//! 0.96–1.02× MKL at 1024³, 0.93–0.96× at 2048³ and 0.98–1.08× at W11's fc and fc2, the
//! same as before pieces were claimed (`team.rs`) and as on one thread: two threads took
//! about 3 % more CPU time than one at 1024³ (11.9 against 11.5 ms, timed per thread),
//! and what they lose beyond that in wall time is the worker's late start, which
//! `team.rs` takes off the caller's path.
//!
//! Two-thread wall time against torch 2.15's MKL (`OMP_NUM_THREADS=2`, its threads spin
//! between calls), rlx-bench's W4 rows and the same shapes in torch alternated over four
//! rounds, each process in its own autogroup at nice -20 while about five other agents
//! built (2026-12-03, after the lingering worker of `team.rs` and the phase-major
//! pieces): 1024³ 0.85–0.99× (median 0.94), 2048³ 0.93–1.02× (0.96); one thread
//! 1.02–1.16× and 0.93–0.99×. With the lingering worker alone the same setting read
//! 0.93× and 0.92× on two threads; without it, a sleeping worker's wake-up under load
//! could leave a 1024³ product to the calling thread alone (13.2 ms against 7.1).
//!
//! Later the same day (one thread by CPU time, MKL in the same process, two processes
//! while about five agents built, load ~10): 1024³ 0.98–0.99×, 2048³ 1.00–1.01×, 512³
//! 1.00–1.03×, W5 1.02–1.03×, W6 0.98–1.03×, W11 0.93–1.08× (dXfc2 the lowest). MKL's
//! two-thread calls in that process got one CPU under that load (medians 110–180
//! GFLOP/s, bests 320–390), so two-thread changes were compared against this kernel
//! only. A trace of 1024³ on two threads showed both threads inside pieces for 98–99 %
//! of the wall time (12.2–12.4 ms of piece time per 6.15–6.2 ms call): what two threads
//! lack against MKL is speed per thread, not idle time. Tried there and not kept, each
//! within the noise (±2–3 %) or slower, same binary with run-time switches, medians of
//! 6–10 alternated runs: prefetching B's strip into L1 768 or 1536 bytes ahead inside
//! the 8 × 48 loop; prefetching the next strip into L2 a slice per A panel; packed
//! buffers on 2 MiB pages (`madvise(MADV_HUGEPAGE)`, 2 MiB aligned); splitting C by
//! columns on two threads (each thread packs all of A and its half of B: 1024³ equal,
//! 2048³ −1.5 %, W5 −8 %); `MC` 128 and 512 at two threads (−5 %). Kept: row pieces
//! of nearly equal size ([`Pieces`]) and `Auto` giving this kernel 256-column
//! products ([`takes_untransposed`]); whole steps on two threads, rlx-bench against the
//! binary before them, 8 alternated rounds in the same conditions: W11 (4 blocks) 108.1 →
//! 104.9 ms, W6's training step 4.26 → 4.20 ms (medians).
//!
//! In the evening (same VM and MKL, the benchmark at raised priority, load 2–4) two
//! threads still ran each at less than one thread's speed (2048³: 176 → about 160
//! GFLOP/s a thread, MKL unchanged). Each piece's parts timed with `rdtsc` put the loss
//! on the first A panel of every B strip: the strip (96 KiB at `KC` 512, then the block size) comes from L3
//! — with B's packing shared, half the strips out of the other core's packing — while
//! the other panels find it in L2. Those first panels took 2.1× a panel's time on one
//! thread and 3.1× on two (3 % and 6 % of the product per thread); with the strip kept
//! in L2 (a diagnostic reading strip 0 for all) two threads ran 7–13 % faster. Now the
//! panels after the first ask for the next strip into L2, a line per two sums inside
//! the sum loop ([`prefetch_slice`]). Same binary with the prefetch switched per call,
//! the two variants taking turns at running first: 2048³ +3 % on one thread and +3–5 %
//! on two, 1024³ +2–3 %, W11's fc +4–6 % and fc2 +2–6 % on two, nothing measurably
//! slower. Against MKL, 16 processes on two threads and 11 on one, alternated with the
//! binary before, median paired ratios over the rounds where MKL got both CPUs: two
//! threads 2048³ 0.95 → 1.02×, 1024³ 0.98 → 0.99×, W11 fc 0.94 → 0.98×, fc2 0.99 →
//! 1.02×, dXfc2 0.97 → 1.00×, the other W5/W6/W11 products 1.02–1.19× (−1 to +4 %); one
//! thread 2048³ 1.00 → 1.02×, 1024³ 0.99 → 1.01×, W11 fc 0.97 → 0.99×, the rest within
//! ±2 % (W11's products 0.97–1.07×). Tried there and not kept (same
//! in-process A/B): B's shared packing claimed by bands of 32 sums over all strips, so
//! that the packers read whole rows of a row-major B (30 % fewer packing cycles at
//! 2048³ on two threads, wall time ±1 %); that packing with streaming stores (±0);
//! every other A block walking the strips last to first, to find the previous block's
//! last strips in L2 (−2 % on one thread); the next-strip prefetch as a burst of 48
//! lines before each panel (−2.5 % on one thread, ±2 % on two); `MC` 384, 512 and 1024
//! at two threads (−2 to −3 %, ±1 %); B packed per thread (±2 %).
//!
//! Then (same VM, 2026-12-03 evening) a row-major A is read in place on the 8 × 48 plan
//! ([`IN_PLACE_LDA`]): the switch per call in one process, three rounds each, gained
//! 2–9 % on every NN/NT product with rows at most 4 KiB apart on one thread (W11's proj,
//! fc2, dXqkv, dXhead 5–9 %, fc and dXfc2 0–1.5 %, 1024³ ±1 %) and 1–10 % on two. Against
//! MKL in the same process, five rounds alternated with the binary before, one thread
//! (median paired ratios, before → after): 256³ 1.00 → 1.04, 512³ 1.04 → 1.07, W5/W6's
//! NN products 1.00–1.02 → 1.02–1.05, W11 proj 0.98 → 1.06, fc 0.99 → 1.02, fc2 1.00 →
//! 1.04, head 0.97 → 1.04, dXqkv 1.00 → 1.03, dXfc2 0.97 → 1.01, dXhead 1.01 → 1.07;
//! 1024³ 1.02 → 1.00 and 2048³ 1.03 → 1.01, the TN products unchanged but W11 dWqkv
//! 1.05 → 1.00. 2048³ and dWqkv pack A: they lost to the in-place branches in the same
//! code (alternated with a build of the commit before, both orders, four rounds: −1.5 %
//! and −4 %), and with a separate instantiation for products that never read A in
//! place ([`blocks`]' `ROWS`) −1 % and −1.5 % (within the spread), the other rows the
//! same (fc +3 %, fc2 +6 %, proj, head, dXqkv, dXhead +6–7 %); the ratios above are of
//! the build before that split. MKL's two-thread calls got one CPU in half of those
//! processes, so two threads were compared in-process only. Tried there
//! and not kept (same in-process switch): at k = 256 (one sum block) `MC` scaled up so
//! that A's block keeps the bytes of a 512-sum block (512 rows: fc −1 to +0 %, dXfc2
//! −3 to −5 %) or twice that (−2 to −7 %); asking for strip 0 of the block into L2
//! during the last strip, for the next `MC` rows (W11 ±2 %).
//!
//! Then (same VM, 2026-12-03, night) the sum blocks grew from 512 to 1024 on the 48 KiB
//! L1d (`plan.rs`: A's 8-row panel, not B's strip, is what stays in L1), which halves
//! the passes over C of every product with k > 512: in-process against MKL, medians of
//! four alternated rounds in two separate runs, one thread 1024³ 1.00 → 1.04–1.05×,
//! 2048³ 1.02 → 1.04×, W11 fc2 and dXqkv +4–5 %, W5/W6 +3 %, the TN products with
//! k = 1024 −1.5 to −3.5 %; two threads 1024³ 0.975 → 1.00–1.015×, 2048³ 0.98–0.995 →
//! 0.985–1.005×, fc2 +4 %. Tried there: `MC` raised back to at most 256 rows for
//! products whose sums fit a shorter block (the A block's bytes kept): within noise.
//!
//! W11's weight gradient dWqkv (256 × 1024 × 768, A transposed) stays the slowest
//! product against MKL: 0.96–0.98× on one thread, 0.95–0.97× on two, where MKL's two
//! threads each run at its one-thread speed (2026-12-04, same VM, threads awake). Timed
//! with `rdtsc` on one thread, B's packing takes 11 % of it (0.72 cycles an f32: the 3 MiB
//! packed block passes L2) and A's 3.5 %; split by columns on two threads, each thread
//! packs all of A (7 % of its time). Tried then and not kept (run-time switches in one
//! binary, MKL in the same process, two rounds on one and two threads):
//! - B packed strip by strip (alone or four at a time) just before the first `MC` rows
//!   use it, so the strip is still in L2: 0–2 % slower on one thread, 1–4 % on two
//!   (a strip's source is 192 bytes of each of `kc` rows, which the prefetchers do not
//!   follow as they follow whole rows).
//! - A transposed A read in place, its sums `cs` apart (each sum's eight rows are
//!   contiguous, as in a packed panel): dWqkv (1 KiB apart) 13 % slower, dWhead (2 KiB)
//!   35 %, dWfc2 (4 KiB) 42 %: the sums' lines fall into a few L1 sets and every
//!   fourth sum, or every one, is a new page.
//! - Prefetching the next 16 or 32 sums of a transposed A while packing it: ±2 %.
//! - `KC` 512, `MC` 256, or `NC` 384 (B's block inside L2, A packed twice): 0.92–1.00×
//!   against 0.96–0.97× for the plan's blocks, no variant ahead on both thread counts.
//!
//! On the 2-vCPU Emerald Rapids VM (2026-12-04, AMX hidden), two threads read 0.88–1.05×
//! MKL's paired medians at the W shapes while the bests of both were equal (1024³ 302
//! against 305 GFLOP/s, 2048³ 317 against 319); one thread's own CPU time moved between
//! 115 and 160 GFLOP/s from run to run on either vCPU, so the machine sets the medians.
//! Tried then and not kept (a run-time switch in one binary, the variants alternated
//! twelve times per shape, eight shapes): the 8 × 48 in-place loop loading the next
//! sum's three B vectors into a second set of registers between the rows, as MKL's
//! kernel on that CPU does (all 32 zmm in use): bests ±1 % on one thread, medians and
//! bests ±4 % on two. Row-split products cut into pieces of `MC` rows claimed by whichever
//! thread is free, each thread packing B once and keeping it for its later pieces (so a
//! thread slowed by the host takes fewer rows): medians 0.93–1.04× of one piece per
//! thread, bests equal.
//!
//! Summation order: each C element is summed in blocks of `KC` sums starting at sum 0,
//! each block one chain of fused multiply-adds in k order from zero, then written over C
//! (the first block of an overwriting product) or added to it. The sequence does not
//! depend on where the element's tile lies or which thread computes it, so results are
//! identical for every thread count (`KC` is fixed per process by the CPU's L1d size).
//! Zero padding of partial tiles adds `0 · 0` terms only to lanes that are never stored.

mod kernel;
mod micro;
mod pack;
mod plan;
mod shared;
use super::team;

use super::avx512::avx512bw;
use super::lowp_drive::{Dst, Half, Src};
use super::pieces::Pieces;
use kernel::{CTile, micro};
pub(crate) use pack::{F32, Load, Loads, Pair};
use pack::{Strips, pack_a, pack_b};
use plan::{Plan, TileShape};
use shared::SharedB;
use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Whether this CPU can run the kernel (AVX-512 F; BW and VL are asked for too: the
/// packers' code decoders use them, every other AVX-512 path of this module family needs
/// BW, and no CPU has F without both).
pub(crate) fn available() -> bool {
    avx512bw() && is_x86_feature_detected!("avx512vl")
}

/// Whether [`super::F32Path::Auto`] should give an `n`-column product whose A rows are
/// contiguous to this kernel rather than faer: on CPUs that run the 8 × 48 tile (Intel),
/// from 256 columns or at a multiple of the tile's 48. Measured on Sapphire Rapids
/// (`examples/gemm_shapes.rs`, 2026-12-03): 1.02–1.09× faer at 512–2048 columns; at 256
/// columns (the last strips run the 8 × 32 loop) two threads ran 256³ 1.12× faer's
/// speed and W11's 256-column products (proj, fc2, dXqkv, dXhead) 1.05–1.08×, one thread
/// 0.98–1.03× (256³ equal). An earlier kernel, before the 8 × 32 loop, read 0.94–0.96×
/// at 256 columns.
pub(crate) fn takes_untransposed(n: usize) -> bool {
    let plan = plan::plan();
    plan.tile == TileShape::M8N48 && (n.is_multiple_of(plan.tile.nr()) || n >= 256)
}

/// `C (+)= A·B` for an `m × n` output over `k` sums, on up to `threads` threads of the
/// current rayon pool: C's rows (or columns, when it is wider than tall) are split into
/// pieces of nearly equal size ([`Pieces`]: one per thread, or at most `MC` rows when the
/// threads share B's packing), which the calling thread and the workers that join it
/// claim one at a time; each piece runs the blocked product on its thread's packing
/// buffers.
///
/// # Safety
/// [`available`] must be true; `a` must be readable over `m × k`, `b` over `k × n`, `c`
/// writable over `m × n` with pairwise distinct elements that overlap neither A nor B;
/// `m, n, k > 0`.
pub(crate) unsafe fn sgemm(
    a: Src<f32>,
    b: Src<f32>,
    c: Dst<f32>,
    mnk: (usize, usize, usize),
    accumulate: bool,
    threads: usize,
) {
    // SAFETY: forwarded contract.
    unsafe { sgemm_decoding(F32, a, b, c, mnk, accumulate, threads) }
}

/// [`sgemm`] over bf16 or f16 operands (`kind`'s bits), widened exactly to f32 while
/// they are packed: the same blocking, threads, micro-kernels and summation order as an
/// f32 product of the widened values, so the result has the bits [`sgemm`] gives for
/// f32 copies of A and B. The half-precision paths of `lowp.rs` run here by default
/// (until issue #17 they ran a 12 × 32 kernel of their own on `lowp_drive.rs`).
///
/// # Safety
/// As [`sgemm`], for 16-bit elements.
pub(crate) unsafe fn sgemm_half(
    kind: Half,
    a: Src<u16>,
    b: Src<u16>,
    c: Dst<f32>,
    mnk: (usize, usize, usize),
    accumulate: bool,
    threads: usize,
) {
    // SAFETY: forwarded contract.
    unsafe { sgemm_decoding(kind, a, b, c, mnk, accumulate, threads) }
}

/// [`sgemm`] over operands stored in any form `l` decodes exactly to f32 while the
/// packers read it (A's elements through `l.a()`, B's through `l.b()`): f32 itself, bf16
/// / f16 ([`sgemm_half`]) or the scaled matmul's codes (`exec/scaled/codes.rs`). Only
/// an f32 A is ever read in place.
///
/// # Safety
/// As [`sgemm`] for `l`'s element type; where a reader needs the position of what it
/// reads (the codes' block scales), each view must have a unit stride and `k > 1`, so
/// that every packed run lies along one stored row of its operand (see [`Load::load`]).
pub(crate) unsafe fn sgemm_decoding<L: Loads>(
    l: L,
    a: Src<L::E>,
    b: Src<L::E>,
    c: Dst<f32>,
    mnk: (usize, usize, usize),
    accumulate: bool,
    threads: usize,
) {
    let plan = plan::plan();
    let job = Job::new(a, b, c, mnk, accumulate);
    // SAFETY: forwarded contract; each instantiation is the tile the plan names.
    unsafe {
        match plan.tile {
            TileShape::M12N32 => sgemm_on::<_, 12, 2>(l, plan, job, threads),
            TileShape::M8N48 => sgemm_on::<_, 8, 3>(l, plan, job, threads),
        }
    }
}

/// [`sgemm`] of `job` with an `MR × 16·NV` tile and the plan's blocks, the sources read
/// through `l`.
///
/// # Safety
/// As [`sgemm`] for `job`'s views and sizes; `(MR, NV)` is `plan.tile`.
unsafe fn sgemm_on<L: Loads, const MR: usize, const NV: usize>(
    l: L,
    plan: Plan,
    job: Job<L::E>,
    threads: usize,
) {
    let Job { m, n, k, .. } = job;
    // A square product goes to the split that packs less twice: splitting rows has every
    // thread pack all of B, splitting columns all of A. With A read in place and B
    // packed by transposing it (its costliest layout), each thread then transposes only
    // its half of B: W11's dXfc2 (1024 × 256 × 1024, B transposed) on two threads of the
    // 2-vCPU Sapphire Rapids VM,
    // against MKL in the same process with threads awake, six alternated rounds,
    // 0.94–0.98× (median 0.96) split by rows and 0.98–1.00× (0.985) by columns. Square
    // products with B in rows measured alike either way (256³–2048³, W11's fc).
    let transposing_b = job.b.cs != 1 && job.b.rs == 1;
    let rows = m > n || (m == n && !(transposing_b && in_place_rows::<L, MR, NV>(job.a)));
    // Column pieces are cut at whole vectors, not whole tiles: rounding each thread's
    // share up to the 48-column tile split W6's 512 columns 288 + 224, and the wider
    // piece held the product's end (on the 2-vCPU Sapphire Rapids VM its thread ran 27 %
    // longer than the other's, timed with `rdtsc`: 935 k against 737 k cycles; the
    // strips of any width run the assembly loops, see `Strips`).
    let (len, grain) = if rows { (m, MR) } else { (n, 16) };
    let split = len.div_ceil(threads.max(1)).next_multiple_of(grain);
    // Threads splitting C's rows may share one packing of B (`shared.rs`, opt-in); the
    // buffer is the calling thread's, taken out of its slot for the call so that a product started on
    // this thread while it waits for the others gets its own.
    let kc = balanced(k, plan.kc);
    let (nc, nr) = (plan.nc, 16 * NV);
    let share = len > split
        && rows
        && shared::enabled()
        && SharedB::len(n, k, nc, nr) <= shared::MAX_SHARED;
    // With B shared, a piece is `MC` rows times one of B's packed blocks (a phase): a
    // piece costs what the same rows cost inside a larger one (one packing of A, B's
    // strips read once per `MC` rows either way), so the pieces are that small and a
    // thread that starts late takes fewer of them (`team.rs`). Pieces are claimed phase
    // by phase, so both threads read the same packed block of B until its rows are done,
    // while it is still in the cache: with pieces of `MC` rows over every block in turn,
    // each piece read all of B's blocks (16 MiB packed at 2048³, out of cache) and 2048³
    // on two threads ran 6 % slower than one piece per thread (Sapphire Rapids VM). A
    // piece of a later phase waits for its rows' previous phase (`Phases`), which the
    // thread that claimed it is running. Unshared, every piece packs B (or, split by
    // columns, A) again: one per thread, all phases in one piece.
    let pieces = Pieces::new(len, grain, threads, share.then_some(plan.mc));
    let phases = if share {
        Phases::new(pieces.count, n.div_ceil(nc), k.div_ceil(kc))
    } else {
        Phases::new(pieces.count, 1, 1)
    };
    let parts = pieces.count * phases.count;
    let mut keep = Vec::new();
    let shared = share.then(|| {
        keep = SHARED_B
            .try_with(|v| std::mem::take(&mut *v.borrow_mut()))
            .unwrap_or_default();
        let buf = aligned(&mut keep, SharedB::len(n, k, nc, nr));
        // SAFETY: `buf` holds `len` f32, 64-byte aligned, and outlives the value (`keep`
        // is dropped or put back after the parallel loop); nc is a multiple of nr.
        unsafe { SharedB::new(buf, (n, k), (kc, nc, nr)) }
    });
    let shared = shared.as_ref();
    let block = |part: usize| {
        let (phase, rp) = (part / pieces.count, part % pieces.count);
        let (lo, hi) = pieces.range(rp);
        // The (jc, pc) block this piece runs (every block when there is one phase).
        let only = share.then(|| phases.block(phase, nc, kc));
        phases.wait(rp, phase);
        // SAFETY: rows (or columns) lo..hi of C, with A's rows (or B's columns), lie
        // inside the views (caller); the blocks are disjoint in C; the CPU has AVX-512 F.
        unsafe {
            if rows {
                drive::<L, MR, NV>(l, plan, job.rows(lo, hi), shared, only)
            } else {
                drive::<L, MR, NV>(l, plan, job.cols(lo, hi), None, None)
            }
        }
        phases.done(rp, phase);
    };
    // The calling thread takes pieces itself and never waits for a worker that has not
    // started (`team.rs`).
    team::run_pieces(parts, threads.max(1) - 1, &block);
    if share {
        let _ = SHARED_B.try_with(|v| *v.borrow_mut() = keep);
    }
}

/// The phase each row piece of a product has reached: pieces are claimed phase by phase
/// (phase `i` runs packed block `i` of B, blocks in the `jc`, `pc` order of [`blocks`]),
/// and a piece's sums add to what its rows' previous phase stored, so it starts only
/// once that phase is done.
struct Phases {
    /// Phases completed by each row piece.
    done: Vec<AtomicUsize>,
    /// Phases per row piece.
    count: usize,
    /// B's sum blocks per column block.
    pk: usize,
}

impl Phases {
    /// `rows` row pieces over `nj` column blocks × `pk` sum blocks of B.
    fn new(rows: usize, nj: usize, pk: usize) -> Phases {
        Phases {
            done: (0..rows).map(|_| AtomicUsize::new(0)).collect(),
            count: nj * pk,
            pk,
        }
    }

    /// The first column and first sum of phase `i`'s block of B.
    fn block(&self, i: usize, nc: usize, kc: usize) -> (usize, usize) {
        ((i / self.pk) * nc, (i % self.pk) * kc)
    }

    /// Wait until row piece `r` has finished its phases before `phase`. The piece of the
    /// previous phase was claimed earlier (claims go in order) by a thread that runs it
    /// without waiting for this one, so the wait ends.
    fn wait(&self, r: usize, phase: usize) {
        let mut spins = 0u32;
        while self.done[r].load(Ordering::Acquire) < phase {
            spins += 1;
            if spins < 1 << 12 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Record that row piece `r` has finished `phase` (its C writes visible to the next).
    fn done(&self, r: usize, phase: usize) {
        self.done[r].store(phase + 1, Ordering::Release);
    }
}

/// One product, or the rows or columns of it that a piece runs: the views of A, B and
/// C, the sizes (`m × n` outputs over `k` sums) and whether the sums add to C. Shared by
/// the pieces of the parallel loop, which take their parts of it through methods (so
/// closures capture the `Sync` struct whole, not its raw-pointer fields).
#[derive(Clone, Copy)]
struct Job<E> {
    a: Src<E>,
    b: Src<E>,
    c: Dst<f32>,
    m: usize,
    n: usize,
    k: usize,
    accumulate: bool,
}

impl<E: Copy> Job<E> {
    /// The product `C (+)= A·B` of `m × n` outputs over `k` sums.
    fn new(
        a: Src<E>,
        b: Src<E>,
        c: Dst<f32>,
        (m, n, k): (usize, usize, usize),
        accumulate: bool,
    ) -> Job<E> {
        Job {
            a,
            b,
            c,
            m,
            n,
            k,
            accumulate,
        }
    }

    /// Rows `lo..hi` of the product (those of A and C).
    ///
    /// # Safety
    /// `lo < hi <= m`.
    unsafe fn rows(&self, lo: usize, hi: usize) -> Job<E> {
        // SAFETY: row lo of A and of C lies inside the views (caller).
        unsafe {
            Job {
                a: self.a.at(lo, 0),
                c: Dst {
                    ptr: self.c.at(lo, 0),
                    ..self.c
                },
                m: hi - lo,
                ..*self
            }
        }
    }

    /// Columns `lo..hi` of the product (those of B and C).
    ///
    /// # Safety
    /// `lo < hi <= n`.
    unsafe fn cols(&self, lo: usize, hi: usize) -> Job<E> {
        // SAFETY: column lo of B and of C lies inside the views (caller).
        unsafe {
            Job {
                b: self.b.at(0, lo),
                c: Dst {
                    ptr: self.c.at(0, lo),
                    ..self.c
                },
                n: hi - lo,
                ..*self
            }
        }
    }
}

// SAFETY: a job crosses into the pieces of one blocking parallel loop: A and B are only
// read, each piece writes a disjoint range of C's rows or columns, and the views outlive
// the loop (`sgemm`'s contract).
unsafe impl<E> Send for Job<E> {}
// SAFETY: as for Send.
unsafe impl<E> Sync for Job<E> {}

thread_local! {
    /// Packed A and packed B of this thread, kept between calls (batched products run
    /// many small GEMMs per thread). They never outgrow `MC × KC` and `KC × NC` f32.
    static BUFS: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
    /// The B packing shared by the threads of a row-split product started on this
    /// thread, kept between calls (at most `shared::MAX_SHARED` f32).
    static SHARED_B: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// A 64-byte aligned run of `n` f32 inside `v` (grown to fit, never shrunk).
fn aligned(v: &mut Vec<f32>, n: usize) -> *mut f32 {
    if v.len() < n + 16 {
        *v = vec![0.0; n + 16];
    }
    let p = v.as_mut_ptr();
    let skip = ((p as usize).next_multiple_of(64) - p as usize) / size_of::<f32>();
    // SAFETY: `skip < 16` and `v` holds `n + 16` f32, so the run fits.
    unsafe { p.add(skip) }
}

/// The blocked product on the calling thread; B's packing comes from `shared` when
/// given (the threads of a row-split product), else from this thread's buffer. With
/// `only`, just the sums of B's block whose first column and sum are `only` run (one
/// phase of a row piece, see [`Phases`]), added to C unless it is the first sum block of
/// an overwriting product.
///
/// # Safety
/// As [`sgemm_on`] for `job`; `shared` must be the packing of this product's B (the
/// same `b`, `n`, `k` and plan); with `only`, the phases before it must have run.
#[target_feature(enable = "avx512f")]
unsafe fn drive<L: Loads, const MR: usize, const NV: usize>(
    l: L,
    plan: Plan,
    job: Job<L::E>,
    shared: Option<&SharedB>,
    only: Option<(usize, usize)>,
) {
    let Job { m, n, k, .. } = job;
    let run = |(va, vb): &mut (Vec<f32>, Vec<f32>)| {
        let ap = aligned(va, plan.mc.min(m).next_multiple_of(MR) * plan.kc.min(k));
        let packed = match shared {
            Some(sh) => PackedB::Shared(sh),
            None => PackedB::Own(aligned(
                vb,
                plan.nc.min(n).next_multiple_of(16 * NV) * plan.kc.min(k),
            )),
        };
        // SAFETY: the buffers hold the largest packed blocks; the caller's contract
        // covers the views and the shared packing.
        unsafe {
            // Products whose A is never read in place run an instantiation without the
            // in-place loops: with them, 2048³ and W11's dWqkv (packed A) ran 1.5–4 %
            // slower on one thread (Sapphire Rapids VM, alternated binaries).
            if in_place_rows::<L, MR, NV>(job.a) {
                blocks::<L, MR, NV, true>(l, plan, job, ap, packed, only)
            } else {
                blocks::<L, MR, NV, false>(l, plan, job, ap, packed, only)
            }
        };
    };
    let done = BUFS.try_with(|bufs| run(&mut bufs.borrow_mut())).is_ok();
    if !done {
        // Thread-local storage already torn down (a call from a destructor).
        run(&mut (Vec::new(), Vec::new()));
    }
}

/// Where [`blocks`] finds B's packed blocks.
#[derive(Clone, Copy)]
enum PackedB<'a> {
    /// This thread packs each block into the buffer (64-byte aligned, `NC·KC` f32).
    Own(*mut f32),
    /// The threads of the product share the packing.
    Shared(&'a SharedB),
}

/// The loops of [`drive`] over packed blocks in `ap` / `packed`; with `ROWS` (A's rows
/// pass [`in_place_rows`]) the blocks of full panels read A in place instead of `ap`.
///
/// # Safety
/// As [`drive`]; `ap` must hold `MC·KC` f32 (or the product's smaller block sizes),
/// 64-byte aligned.
#[target_feature(enable = "avx512f")]
unsafe fn blocks<L: Loads, const MR: usize, const NV: usize, const ROWS: bool>(
    l: L,
    plan: Plan,
    job: Job<L::E>,
    ap: *mut f32,
    packed: PackedB,
    only: Option<(usize, usize)>,
) {
    let Job {
        a,
        b,
        c,
        m,
        n,
        k,
        accumulate,
    } = job;
    let nr_full = 16 * NV;
    let kc = balanced(k, plan.kc);
    // A tile of a C with contiguous, ascending rows is read and written in place (only its
    // rows and columns inside C); other layouts go through a tile on the stack.
    let direct_layout = c.cs == 1 && c.rs > 0;
    let mut tile = StackTile([0.0; STACK_TILE]);
    let tp = tile.0.as_mut_ptr();
    for jc in (0..n).step_by(plan.nc) {
        let nb = plan.nc.min(n - jc);
        for pc in (0..k).step_by(kc) {
            if only.is_some_and(|o| o != (jc, pc)) {
                continue;
            }
            let kb = kc.min(k - pc);
            let add = accumulate || pc > 0;
            // SAFETY: (pc, jc) and the kb × nb block are inside B; the buffer holds its
            // strips.
            let bp = unsafe {
                match packed {
                    PackedB::Own(bp) => {
                        pack_b::<L::B, NV>(l.b(), b.at(pc, jc), kb, nb, bp);
                        bp
                    }
                    PackedB::Shared(sh) => {
                        sh.pack(l.b(), b.at(pc, jc), (jc, pc), kb, nb);
                        sh.block(jc, pc, kb)
                    }
                }
            };
            for ic in (0..m).step_by(plan.mc) {
                let mb = plan.mc.min(m - ic);
                let strips = Strips { nb, nr: nr_full };
                let (count, panels) = (strips.count(), mb.div_ceil(MR));
                // A's rows are read where they are stored when every panel is full and
                // every strip runs an assembly loop (see `IN_PLACE_LDA`).
                let in_place = ROWS && mb.is_multiple_of(MR) && strips.get(count - 1).1 > 16;
                if !in_place {
                    // SAFETY: (ic, pc) and the mb × kb block are inside A; ap holds its
                    // panels.
                    unsafe { pack_a::<L::A, MR>(l.a(), a.at(ic, pc), mb, kb, ap) };
                }
                for s in 0..count {
                    let (jr, nr, ldb) = strips.get(s);
                    if let PackedB::Shared(sh) = packed {
                        sh.wait((jc, pc), s);
                    }
                    // SAFETY: the strip of columns jr.. of the packed block (kb·ldb f32).
                    let bpanel = unsafe { bp.add(jr * kb) };
                    // The next strip of the block (packed: its flag was waited for or
                    // it is this thread's), asked into L2 while this one runs.
                    let ahead = (s + 1 < count).then(|| {
                        let (jr, _, ldb) = strips.get(s + 1);
                        // SAFETY: strip s + 1 of the packed block, kb·ldb f32.
                        (unsafe { bp.add(jr * kb) } as *const f32, kb * ldb)
                    });
                    for ir in (0..mb).step_by(MR) {
                        let mr = MR.min(mb - ir);
                        // SAFETY: panel ir / MR of the packed block; (ic + ir, jc + jr) is
                        // an element of C.
                        let (apanel, cp) = unsafe { (ap.add(ir * kb), c.at(ic + ir, jc + jr)) };
                        let (apanel, lda) = if in_place {
                            // SAFETY: (ic + ir, pc) is an element of A; IN_PLACE loads
                            // store f32, so A's elements are the panel's values.
                            (
                                unsafe { a.at(ic + ir, pc) }.ptr as *const f32,
                                a.rs as usize,
                            )
                        } else {
                            (apanel as *const f32, 0)
                        };
                        let next = ahead
                            .and_then(|strip| prefetch_slice(ir / MR, panels, strip, kb))
                            .unwrap_or(apanel);
                        let apanel = (apanel, lda, next);
                        if direct_layout {
                            // SAFETY: rows 0..mr, columns 0..nr of the tile are elements
                            // of C, with unit column stride and row stride c.rs > 0; the
                            // panels hold kb sums.
                            unsafe {
                                let out = CTile {
                                    ptr: cp,
                                    ldc: c.rs,
                                    add,
                                    rows: mr,
                                    cols: nr,
                                };
                                micro::<MR, NV, ROWS>(kb, apanel, (bpanel, ldb), out)
                            };
                            continue;
                        }
                        // SAFETY: the stack tile holds MR × NR f32 with row stride NR,
                        // 64-byte aligned; then the mr × nr corner is merged into C, whose
                        // elements (ic + ir + i, jc + jr + j) exist for i < mr, j < nr.
                        unsafe {
                            let out = CTile {
                                ptr: tp,
                                ldc: nr_full as isize,
                                add: false,
                                rows: MR,
                                cols: nr,
                            };
                            micro::<MR, NV, ROWS>(kb, apanel, (bpanel, ldb), out);
                            for i in 0..mr {
                                let row = cp.offset(i as isize * c.rs);
                                for j in 0..nr {
                                    let d = row.offset(j as isize * c.cs);
                                    let v = *tp.add(i * nr_full + j);
                                    *d = if add { *d + v } else { v };
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Where panel `q` of a strip's `panels` asks for the next strip (`(start, f32)`) into
/// L2, for `kb` sums: panels 1, 2, … each take the next [`micro::next_lines`] lines, one
/// per two sums inside the sum loop, until the strip is covered (at 512 sums, a
/// 48-column strip's 1536 lines in six panels); `None` for the others. Panel 0 is left
/// out unless the strip has too few panels: it reads its own strip from L3, which every
/// later panel finds in L2. Without this the first panel of each strip ran at half the
/// others' speed on one thread and a third on two (timed by `rdtsc` on the Sapphire
/// Rapids VM: 3 % of a 2048³ product on one thread, 6 % per thread on two, where half
/// the strips come out of the other core's packing). The same prefetches as a burst of
/// 48 lines before each panel's sums measured 2.5 % slower than none on one thread
/// (they probably hold the fill buffers that the sums' own loads need).
fn prefetch_slice(
    q: usize,
    panels: usize,
    (start, len): (*const f32, usize),
    kb: usize,
) -> Option<*const f32> {
    let per = micro::next_lines(kb);
    if per == 0 {
        return None;
    }
    let calls = (len / 16).div_ceil(per);
    let q0 = usize::from(panels > calls);
    (q >= q0 && q < q0 + calls).then(|| start.wrapping_add((q - q0) * per * 16))
}

/// The sums per block for `k` sums in blocks of at most `kc`: the fewest blocks, of
/// nearly equal size (k = 300 with `kc` 256 runs two blocks of 150, not 256 + 44, whose
/// short block would pay the C tile's reads and writes for a third of the work).
fn balanced(k: usize, kc: usize) -> usize {
    k.div_ceil(k.div_ceil(kc)).max(1)
}

/// Whether [`blocks`] may read the rows of `a` in place (see [`IN_PLACE_LDA`]): f32 rows
/// with unit column stride, at most `IN_PLACE_LDA` apart, on the 8 × 48 tile.
fn in_place_rows<L: Loads, const MR: usize, const NV: usize>(a: Src<L::E>) -> bool {
    <L::A as Load>::IN_PLACE && a.cs == 1 && a.rs > 0 && a.rs <= IN_PLACE_LDA && (MR, NV) == (8, 3)
}

/// The largest row stride (f32) at which the 8 × 48 plan reads an f32 A's rows where they
/// are stored instead of packing them into panels. A row-major A's rows already hold a
/// panel's sums in order (the packed loop's bits, the same FMAs in the same order), and
/// its packing cost what the sum loops gain from a contiguous panel: measured on the
/// Sapphire Rapids VM (one thread, the two variants switched per call in one process,
/// three rounds): 256³ +6 %, 512³ +4 %, W5/W6's products +1–5 %, W11's proj, fc2, dXqkv
/// and dXhead +5–9 %, fc and dXfc2 ±1 %, 1024³ ±1 %. Rows 8 KiB apart (2048³) ran 2–4 %
/// slower: the eight rows' lines fall into the same L1 sets (and A's block crowds a few
/// L2 sets), so wider strides keep packing.
const IN_PLACE_LDA: isize = 1024;

/// f32 in the largest register tile (12 × 32 and 8 × 48 both hold 384).
const STACK_TILE: usize = 384;

/// A C tile on the stack, aligned for whole-vector stores.
#[repr(align(64))]
struct StackTile([f32; STACK_TILE]);

/// The mask of the low `n <= 16` lanes.
#[inline(always)]
pub(crate) fn mask16(n: usize) -> u16 {
    if n >= 16 { u16::MAX } else { (1u16 << n) - 1 }
}

#[cfg(test)]
mod tests;
