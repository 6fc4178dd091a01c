//! How a product's rows or columns are dealt out to threads ([`Pieces`]), shared by the
//! own f32 driver (`f32_avx512.rs`) and the half-precision / int8 driver
//! (`lowp_drive.rs`).

/// How a product's rows (or columns) are cut into pieces for its threads: `count`
/// pieces of whole tiles of `grain`, whose sizes differ by at most one tile, so that
/// threads taking pieces in turn finish together.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pieces {
    /// Rows (or columns) of the product.
    len: usize,
    /// The tile: every piece but the last starts and ends on a multiple of it.
    grain: usize,
    /// How many pieces there are.
    pub(crate) count: usize,
}

impl Pieces {
    /// One piece per thread, or with `most`, each thread's share cut into the fewest
    /// pieces of at most `most` (a multiple of `grain`). Pieces of exactly `most` rows
    /// left a short last piece: 784 rows on two threads ran 256 + 256 + 256 + 16 (W6's
    /// weight gradient on the f32 kernel, two threads of the 2-vCPU Sapphire Rapids VM,
    /// medians of 5 runs alternated with the build before: nearly equal pieces took it
    /// from 250 to 322 GFLOP/s), and pieces sized per thread's share rounded up to a tile left the last piece short by up to
    /// a tile per piece (784 rows in MC 128: seven pieces of 104 rows and one of 56, one
    /// thread 416 rows and the other 368). Whole tiles are dealt out over all pieces
    /// instead.
    pub(crate) fn new(len: usize, grain: usize, threads: usize, most: Option<usize>) -> Pieces {
        let tiles = len.div_ceil(grain).max(1);
        let per_thread = tiles.div_ceil(threads.max(1));
        let per_piece = most.map_or(per_thread, |most| (most / grain).max(1));
        let count = (threads.max(1) * per_thread.div_ceil(per_piece)).min(tiles);
        Pieces { len, grain, count }
    }

    /// Rows (or columns) `lo..hi` of piece `p < count`.
    pub(crate) fn range(self, p: usize) -> (usize, usize) {
        let tiles = self.len.div_ceil(self.grain);
        let edge = |q: usize| (q * tiles / self.count * self.grain).min(self.len);
        (edge(p), edge(p + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_whole_tiles_of_nearly_equal_size_covering_the_product_once() {
        let sizes = |p: Pieces| -> Vec<usize> {
            (0..p.count)
                .map(|i| {
                    let (lo, hi) = p.range(i);
                    hi - lo
                })
                .collect()
        };
        // 784 rows on two threads in pieces of at most 128: eight pieces of 96 or 104 rows,
        // four each (not seven of 104 and a last one of 56).
        let p = Pieces::new(784, 8, 2, Some(128));
        assert_eq!(sizes(p), [96, 96, 96, 104, 96, 96, 96, 104]);
        // W6's 512 columns on two threads: 256 + 256 (rounding each share up to the 48-column
        // tile cut 288 + 224).
        assert_eq!(sizes(Pieces::new(512, 16, 2, None)), [256, 256]);
        // A product smaller than one tile per thread runs as one piece.
        assert_eq!(sizes(Pieces::new(5, 8, 2, Some(128))), [5]);
        assert_eq!(sizes(Pieces::new(1024, 8, 1, None)), [1024]);
        for len in 1..=1100usize {
            for (grain, most) in [
                (8, Some(128)),
                (12, Some(192)),
                (8, Some(24)),
                (16, None),
                (8, None),
            ] {
                for threads in 1..=3 {
                    let p = Pieces::new(len, grain, threads, most);
                    let tiles = len.div_ceil(grain);
                    let mut next = 0;
                    for i in 0..p.count {
                        let (lo, hi) = p.range(i);
                        assert_eq!(
                            lo, next,
                            "{len} {grain} {most:?} {threads}: piece {i} starts"
                        );
                        assert!(hi > lo, "{len} {grain} {most:?} {threads}: piece {i} empty");
                        assert!(
                            hi == len || hi.is_multiple_of(grain),
                            "piece {i} ends mid-tile"
                        );
                        if let Some(most) = most {
                            assert!(
                                hi - lo <= most,
                                "{len} {grain} {most} {threads}: {lo}..{hi}"
                            );
                        }
                        next = hi;
                    }
                    assert_eq!(next, len, "{len} {grain} {most:?} {threads}: covered");
                    // Whole pieces differ by at most one tile.
                    let whole: Vec<usize> = (0..p.count)
                        .map(|i| p.range(i))
                        .filter(|&(_, hi)| hi < len || len.is_multiple_of(grain))
                        .map(|(lo, hi)| (hi - lo) / grain)
                        .collect();
                    if let (Some(lo), Some(hi)) = (whole.iter().min(), whole.iter().max()) {
                        assert!(hi - lo <= 1, "{len} {grain} {most:?} {threads}: {whole:?}");
                    }
                    // Each thread gets pieces: at least one per thread while there are tiles.
                    assert!(
                        p.count >= threads.min(tiles),
                        "{len} {grain} {threads}: {}",
                        p.count
                    );
                    if most.is_none() {
                        assert_eq!(p.count, threads.min(tiles));
                    }
                }
            }
        }
    }
}
