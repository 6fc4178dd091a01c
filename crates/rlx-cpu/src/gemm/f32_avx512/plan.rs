//! The own f32 kernel's register tile and block sizes for the CPU it runs on, decided
//! once per process from CPUID: the vendor picks the tile, the detected L1d and L2 sizes
//! the blocks.
//!
//! - **Intel** (Skylake-SP to Sapphire Rapids and later: two 512-bit FMA ports, loads
//!   cheaper than FMAs but limited to 2–3 a cycle): an 8 × 48 tile, whose sum step is 3
//!   vector loads of B, 8 broadcasts of A and 24 FMAs — 11 loads where the 12 × 32
//!   tile needs 26, since each broadcast feeds three FMAs. With both panels in L1 it ran
//!   at 236 GFLOP/s on one Sapphire Rapids core where the 12 × 32 tile ran 196–216
//!   (MKL's own f32 kernel on that core uses the same 8 × 48 shape). `KC` sums make A's
//!   8-row panel two thirds of the L1d (B's `KC × 48` strip streams from L2 past it),
//!   `MC` rows make A's `MC × KC` block a quarter of the L2.
//! - **AMD and others**: the 12 × 32 tile with the blocks it was measured with
//!   (`KC` 256, `MC` 192, `NC` 2048), unchanged, since Zen 4/5 split each 512-bit FMA
//!   into two 256-bit halves and were not re-measured.
//!
//! `RLX_GEMM_F32_PLAN=<tile>,<kc>,<mc>,<nc>` (tile `12x32` or `8x48`) overrides the
//! choice for benchmarking; a malformed value is reported once and ignored.

use std::sync::OnceLock;

/// A register tile of the own kernel: `MR` rows × `16·NV` columns of C.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TileShape {
    /// 12 rows × 32 columns (24 accumulators; A broadcast inside each FMA).
    M12N32,
    /// 8 rows × 48 columns (24 accumulators; A broadcast once per row into a register).
    M8N48,
}

impl TileShape {
    /// The name `RLX_GEMM_F32_PLAN` uses.
    fn name(self) -> &'static str {
        match self {
            TileShape::M12N32 => "12x32",
            TileShape::M8N48 => "8x48",
        }
    }

    /// Rows of the tile.
    pub(crate) fn mr(self) -> usize {
        match self {
            TileShape::M12N32 => 12,
            TileShape::M8N48 => 8,
        }
    }

    /// Columns of the tile.
    pub(crate) fn nr(self) -> usize {
        match self {
            TileShape::M12N32 => 32,
            TileShape::M8N48 => 48,
        }
    }
}

/// Tile and block sizes of the own kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The register tile.
    pub(crate) tile: TileShape,
    /// Sums per packed block.
    pub(crate) kc: usize,
    /// Rows of A per packed block (a multiple of the tile's rows).
    pub(crate) mc: usize,
    /// Columns of B per packed block (a multiple of the tile's columns).
    pub(crate) nc: usize,
}

/// Data cache sizes in bytes, as CPUID reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caches {
    /// Level-1 data cache of one core.
    pub(crate) l1d: usize,
    /// Level-2 cache of one core.
    pub(crate) l2: usize,
}

/// The CPU's vendor, as far as the plan cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vendor {
    Intel,
    Other,
}

/// The plan for this process (see the module docs).
pub(crate) fn plan() -> Plan {
    static PLAN: OnceLock<Plan> = OnceLock::new();
    *PLAN.get_or_init(|| {
        let auto = plan_for(vendor(), caches());
        let Ok(v) = std::env::var("RLX_GEMM_F32_PLAN") else {
            return auto;
        };
        parse(&v).unwrap_or_else(|| {
            tracing::warn!(
                target: "rlx::gemm",
                "RLX_GEMM_F32_PLAN={v} is not <12x32|8x48>,<kc>,<mc>,<nc> (positive sizes); \
                 using {auto:?}"
            );
            auto
        })
    })
}

/// The plan `RLX_GEMM_F32_PLAN` spells, with `mc` and `nc` rounded up to whole tiles.
fn parse(v: &str) -> Option<Plan> {
    let f: Vec<&str> = v.split(',').map(str::trim).collect();
    let [tile, kc, mc, nc] = f[..] else {
        return None;
    };
    let tile = [TileShape::M12N32, TileShape::M8N48]
        .into_iter()
        .find(|t| t.name() == tile)?;
    let num = |s: &str| s.parse::<usize>().ok().filter(|&x| x > 0);
    Some(Plan {
        tile,
        kc: num(kc)?,
        mc: num(mc)?.next_multiple_of(tile.mr()),
        nc: num(nc)?.next_multiple_of(tile.nr()),
    })
}

/// The plan for a vendor and cache sizes (`None`: CPUID did not say).
pub(crate) fn plan_for(vendor: Vendor, caches: Option<Caches>) -> Plan {
    match (vendor, caches) {
        (Vendor::Intel, Some(c)) => {
            let tile = TileShape::M8N48;
            // A's 8-row panel (8 · KC f32) fills two thirds of the L1d and stays there
            // while B's strip (4 × the L1d) streams from L2 past it (the L1 prefetcher
            // keeps up with its 192 bytes a sum); the longer the sum blocks, the fewer
            // times C is read and written. Measured on Sapphire Rapids (48 KiB L1d, 2 MiB
            // L2), MKL in the same process: KC 512 ran 1024³ at 1.00× MKL where 256 ran
            // 0.91× and 128 lost 3–5 % at 2048³ (one thread); then (2026-12-03, medians
            // of four alternated rounds, twice) KC 1024 against 512: one thread 1024³
            // 1.00 → 1.04–1.05×, 2048³ 1.02 → 1.04×, W11's fc2 1.06 → 1.10×, dXqkv 1.05 →
            // 1.10×, W5/W6's k = 784 products +3–4 %, the TN weight gradients with k =
            // 1024 −1.5 to −3.5 % (dWhead 1.07–1.08 → 1.05×, dWfc2 1.035 → 1.015×); two
            // threads 1024³ 0.975 → 1.00–1.015×, 2048³ 0.98–0.995 → 0.985–1.005×, fc2
            // +4–5 %, the k = 256 products (one block either way) within noise.
            let kc = (2 * c.l1d / 3 / (tile.mr() * size_of::<f32>()) / 16 * 16).clamp(64, 1024);
            // A's block takes a quarter of the L2: the rest holds the B strips passing
            // through and the C lines prefetched into L2. Measured (2 MiB L2, KC 512):
            // 256 rows within noise of 128 at 1024³, up to 5 % faster on W11's k = 256
            // products; with KC 1024 (128 rows) a cap of 256 rows for products whose sum
            // blocks are shorter measured within noise of none.
            let mc = (c.l2 / 4 / (kc * size_of::<f32>()) / tile.mr() * tile.mr()).clamp(96, 4096);
            Plan {
                tile,
                kc,
                mc,
                nc: 8160,
            }
        }
        _ => Plan {
            tile: TileShape::M12N32,
            kc: 256,
            mc: 192,
            nc: 2048,
        },
    }
}

/// Whether CPUID names the vendor "GenuineIntel".
fn vendor() -> Vendor {
    let id = std::arch::x86_64::__cpuid(0);
    // The vendor string is EBX, EDX, ECX: "Genu" "ineI" "ntel".
    if (id.ebx, id.edx, id.ecx) == (0x756e_6547, 0x4965_6e69, 0x6c65_746e) {
        Vendor::Intel
    } else {
        Vendor::Other
    }
}

/// L1d and L2 sizes from CPUID's cache descriptors: leaf 4 on Intel, 0x8000001D on AMD
/// (the same layout); `None` when neither is present or either level is missing.
fn caches() -> Option<Caches> {
    use std::arch::x86_64::__cpuid_count;
    let max = __cpuid_count(0, 0).eax;
    let max_ext = __cpuid_count(0x8000_0000, 0).eax;
    let leaf = if max >= 4 && vendor() == Vendor::Intel {
        4
    } else if max_ext >= 0x8000_001d {
        0x8000_001d
    } else {
        return None;
    };
    let (mut l1d, mut l2) = (None, None);
    for sub in 0..16 {
        let r = __cpuid_count(leaf, sub);
        let kind = r.eax & 0x1f; // 0: no more caches, 1: data, 2: instruction, 3: unified
        if kind == 0 {
            break;
        }
        let level = (r.eax >> 5) & 0x7;
        let ways = ((r.ebx >> 22) & 0x3ff) as usize + 1;
        let parts = ((r.ebx >> 12) & 0x3ff) as usize + 1;
        let line = (r.ebx & 0xfff) as usize + 1;
        let sets = r.ecx as usize + 1;
        let size = ways * parts * line * sets;
        match (level, kind) {
            (1, 1) => l1d = Some(size),
            (2, 1 | 3) => l2 = Some(size),
            _ => {}
        }
    }
    Some(Caches { l1d: l1d?, l2: l2? })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intel_blocks_follow_the_cache_sizes_and_other_vendors_keep_the_12x32_plan() {
        let spr = Caches {
            l1d: 48 << 10,
            l2: 2 << 20,
        };
        // 2/3 · 48 KiB / (8 · 4 B) = 1024 sums; 512 KiB / (1024 · 4 B) = 128 rows.
        assert_eq!(
            plan_for(Vendor::Intel, Some(spr)),
            Plan {
                tile: TileShape::M8N48,
                kc: 1024,
                mc: 128,
                nc: 8160
            }
        );
        let skx = Caches {
            l1d: 32 << 10,
            l2: 1 << 20,
        };
        // 2/3 · 32 KiB / 32 B = 682 → 672 sums; 256 KiB / 2688 B = 97 → 96 rows.
        let p = plan_for(Vendor::Intel, Some(skx));
        assert_eq!((p.kc, p.mc), (672, 96));
        let old = Plan {
            tile: TileShape::M12N32,
            kc: 256,
            mc: 192,
            nc: 2048,
        };
        assert_eq!(plan_for(Vendor::Other, Some(spr)), old);
        assert_eq!(plan_for(Vendor::Intel, None), old);
    }

    #[test]
    fn plan_override_parses_and_rounds_blocks_to_whole_tiles() {
        assert_eq!(
            parse("8x48, 192, 100, 1000"),
            Some(Plan {
                tile: TileShape::M8N48,
                kc: 192,
                mc: 104,
                nc: 1008
            })
        );
        assert_eq!(
            parse("12x32,256,192,2048").map(|p| p.tile),
            Some(TileShape::M12N32)
        );
        assert_eq!(parse("8x48,0,100,1000"), None);
        assert_eq!(parse("4x64,128,100,1000"), None);
        assert_eq!(parse("8x48,128"), None);
    }
}
