//! Which kernel runs an f32 product: faer's (portable, with its own AVX2 / AVX-512
//! micro-kernels) or rlx's own packed AVX-512 kernel ([`super::f32_avx512`]: vectorized
//! packing, an 8 × 48 FMA micro-kernel on Intel and 12 × 32 elsewhere, blocks sized from
//! the detected L1d and L2). On AVX-512 F/BW CPUs the default, [`F32Path::Auto`], takes
//! the own kernel for the products where it measured faster than faer and faer for the
//! rest; other CPUs use faer.
//!
//! The choice is fixed per process from the CPU's features and per product from the
//! operands' layout, never timed, so results are reproducible run to run.
//! `RLX_GEMM_F32=faer`, `avx512` or `auto` forces a path for testing and benchmarking; an
//! unknown or unavailable value is reported once and the default is used. [`sgemm_with`]
//! takes the path per call, so paths can be compared in one process. On the own kernel's
//! threads, `RLX_GEMM_F32_LINGER_US` (microseconds, default 1000, `0` off) is how long a
//! worker that finished its share of a product waits, spinning and running pending rayon
//! work, to be handed the next product instead of being woken from sleep.
//!
//! Exactness: the own kernel sums each element in blocks of at most `KC` sums (256, or
//! twice the L1d in 48-column rows on Intel: 512 on Sapphire Rapids; split
//! into equal blocks), each one chain of
//! fused multiply-adds in k order from zero, added to the stored partial sum; faer blocks
//! its sums differently on long ones (k = 2100 differs in the last bits), so the two
//! paths agree within the dot-product error bound, not bit for bit. Each is
//! deterministic and independent of the thread count. Products with `alpha ≠ 1` and
//! outputs of at most 16 columns (the narrow kernels of `narrow.rs`) take the same route
//! on both paths.

use super::narrow::Narrow;
use super::{GemmError, MatMut, MatRef};
use std::sync::OnceLock;

/// The kernel family of an f32 GEMM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum F32Path {
    /// faer's matmul (any CPU).
    Faer,
    /// rlx's packed AVX-512 FMA kernel (`f32_avx512.rs`) for every product (AVX-512 F/BW
    /// CPUs).
    Avx512,
    /// On AVX-512 F/BW CPUs, the own kernel where it measured faster than faer — products
    /// that read A transposed (A's columns contiguous: the weight gradients `Xᵀ·dY`,
    /// 1.4–2× faer at W11's shapes) of at least 2²² multiply-adds and, on CPUs that run
    /// its 8 × 48 tile (Intel), those with A's rows contiguous, at least 2²⁴ multiply-adds
    /// and a multiple of 48 or at least 256 columns (1.02–1.09× faer on Sapphire Rapids
    /// from 512 columns; at 256, 1.05–1.12× on two threads and 0.98–1.03× on one) — and
    /// faer for the rest (0.75–0.9 on small products; `examples/gemm_shapes.rs`).
    Auto,
}

impl F32Path {
    /// Every path, in declaration order.
    pub const ALL: [F32Path; 3] = [F32Path::Faer, F32Path::Avx512, F32Path::Auto];

    /// The name `RLX_GEMM_F32` uses.
    pub fn name(self) -> &'static str {
        match self {
            F32Path::Faer => "faer",
            F32Path::Avx512 => "avx512",
            F32Path::Auto => "auto",
        }
    }

    /// The path named `s` (as [`F32Path::name`] spells it).
    pub fn parse(s: &str) -> Option<F32Path> {
        F32Path::ALL.into_iter().find(|p| p.name() == s.trim())
    }

    /// Whether this path can run on this CPU.
    pub fn available(self) -> bool {
        match self {
            F32Path::Faer => true,
            #[cfg(target_arch = "x86_64")]
            F32Path::Avx512 | F32Path::Auto => super::f32_avx512::available(),
            #[cfg(not(target_arch = "x86_64"))]
            F32Path::Avx512 | F32Path::Auto => false,
        }
    }

    /// The path `sgemm` uses: `RLX_GEMM_F32` if it names an available path, else
    /// [`F32Path::Auto`] on AVX-512 CPUs and faer elsewhere (AVX2-only CPUs keep faer:
    /// nothing here was measured against it there). Decided once per process.
    pub fn default_path() -> F32Path {
        static PATH: OnceLock<F32Path> = OnceLock::new();
        *PATH.get_or_init(|| {
            let best = if F32Path::Auto.available() {
                F32Path::Auto
            } else {
                F32Path::Faer
            };
            let Ok(v) = std::env::var("RLX_GEMM_F32") else {
                return best;
            };
            match F32Path::parse(&v) {
                Some(p) if p.available() => p,
                Some(p) => {
                    tracing::warn!(
                        target: "rlx::gemm",
                        "RLX_GEMM_F32={v}: the {} path needs AVX-512 F/BW, which this CPU lacks; \
                         using {}",
                        p.name(),
                        best.name()
                    );
                    best
                }
                None => {
                    tracing::warn!(
                        target: "rlx::gemm",
                        "RLX_GEMM_F32={v} is not an f32 GEMM path (expected faer, avx512 or auto); \
                         using {}",
                        best.name()
                    );
                    best
                }
            }
        })
    }
}

/// [`super::sgemm`] on a given path. Panics if the path is not available on this CPU
/// (see [`F32Path::available`]), and as `sgemm` does on invalid views;
/// [`try_sgemm_with`] returns those as a [`GemmError`] instead.
#[track_caller]
pub fn sgemm_with(
    path: F32Path,
    alpha: f32,
    a: MatRef<'_, f32>,
    b: MatRef<'_, f32>,
    beta: f32,
    c: MatMut<'_, f32>,
    threads: usize,
) {
    super::checks::or_panic(try_sgemm_with(path, alpha, a, b, beta, c, threads));
}

/// [`sgemm_with`] returning a [`GemmError`] (and writing nothing) where it would panic.
pub fn try_sgemm_with(
    path: F32Path,
    alpha: f32,
    a: MatRef<'_, f32>,
    b: MatRef<'_, f32>,
    beta: f32,
    c: MatMut<'_, f32>,
    threads: usize,
) -> Result<(), GemmError> {
    if !path.available() {
        return Err(GemmError::PathUnavailable {
            op: "sgemm_with",
            path: path.name(),
            operands: "f32",
            needs: "it needs AVX-512 F/BW",
            fix: "use F32Path::default_path() or check F32Path::available first",
        });
    }
    super::sgemm_on("sgemm_with", path, alpha, a, b, beta, c, threads)
}

/// Multiply-adds from which [`F32Path::Auto`] gives a product that reads A's rows
/// contiguously to the own kernel (with enough columns, `own_untransposed`).
const AUTO_OWN_MIN_MNK: usize = 1 << 24;

/// Multiply-adds from which [`F32Path::Auto`] gives a transposed-A product to the own
/// kernel. Below, faer's small-matrix kernels win: on one Sapphire Rapids thread own/faer
/// ran 0.75–0.9 at 64³ and 128×128×32 (TN), 0.93 at 128×512×128, 1.0–1.05 at 256³ and
/// 256×64×256 (`examples/gemm_shapes.rs`; the threshold was 2²⁴ then). On two threads
/// faer's split of a small product loses more than its kernels gain: on an Emerald Rapids (2 vCPUs,
/// 2026-12-04, MKL in the same process) 256×64×256 and 128×512×128 ran at 84–104 GFLOP/s
/// in faer against 163–192 in the own kernel (MKL 189–204); on one thread faer is 0–8%
/// ahead there. The choice cannot depend on the thread count (results would then
/// differ in their last bits between 1 and 2 threads), so the own kernel takes them
/// whatever the count. 128×128×32 and 64³ (below 2²²) still run faster in faer.
const AUTO_OWN_MIN_MNK_TRANSPOSED_A: usize = 1 << 22;

/// Whether the own kernel takes an `n`-column product that reads A's rows contiguously
/// under [`F32Path::Auto`] (see `f32_avx512::takes_untransposed`).
fn own_untransposed(n: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::f32_avx512::takes_untransposed(n)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = n;
        false
    }
}

/// The element types with an own (non-faer) kernel.
pub(crate) trait OwnGemm: Sized {
    /// Compute `C (+)= A·B` on `path` if it is an own kernel that takes this product
    /// (`alpha = 1`); `false` leaves it to faer.
    ///
    /// # Safety
    /// The views must be in bounds for `p.mnk` (`m, n, k > 0`) and C's elements distinct
    /// and not overlapping A or B (as `sgemm` checks).
    unsafe fn try_own(path: F32Path, p: Narrow<Self>, threads: usize) -> bool;
}

impl OwnGemm for f64 {
    unsafe fn try_own(_: F32Path, _: Narrow<f64>, _: usize) -> bool {
        false
    }
}

impl OwnGemm for f32 {
    unsafe fn try_own(path: F32Path, p: Narrow<f32>, threads: usize) -> bool {
        let transposed_a = p.a_strides.0 == 1 && p.a_strides.1 != 1;
        let (m, n, k) = p.mnk;
        let own = match path {
            F32Path::Faer => false,
            F32Path::Avx512 => true,
            F32Path::Auto => {
                let min_mnk = if transposed_a {
                    AUTO_OWN_MIN_MNK_TRANSPOSED_A
                } else {
                    AUTO_OWN_MIN_MNK
                };
                m * n * k >= min_mnk && (transposed_a || own_untransposed(n))
            }
        };
        if !own || p.alpha != 1.0 {
            return false;
        }
        #[cfg(target_arch = "x86_64")]
        {
            use super::lowp_drive::{Dst, Src};
            let (a, b, c) = (
                Src {
                    ptr: p.a,
                    rs: p.a_strides.0,
                    cs: p.a_strides.1,
                },
                Src {
                    ptr: p.b,
                    rs: p.b_strides.0,
                    cs: p.b_strides.1,
                },
                Dst {
                    ptr: p.c,
                    rs: p.c_strides.0,
                    cs: p.c_strides.1,
                },
            );
            // SAFETY: the caller guarantees the views are in bounds with m, n, k > 0 and C
            // distinct and disjoint from A and B (sgemm's contract); `path.available()`
            // (checked by every entry point) is the kernel's AVX-512 F/BW requirement.
            unsafe { super::f32_avx512::sgemm(a, b, c, p.mnk, p.add, threads.max(1)) };
            true
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (p, threads);
            false
        }
    }
}
