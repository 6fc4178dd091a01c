//! Fine views against the gather map, and copies byte by byte.

use super::*;
use rlx_compile::program::view::gather_map;
use rlx_ir::Dim;

fn st(d: &[usize]) -> Vec<Dim> {
    d.iter().map(|&x| Dim::Static(x)).collect()
}

/// The offsets a fine view reads, row-major over its dims.
fn offsets(v: &FineView) -> Vec<usize> {
    let axes = v.dense_axes();
    let n = v.numel();
    let mut out = vec![usize::MAX; n];
    let mut idx = vec![0usize; axes.len()];
    for _ in 0..axes.iter().map(|a| a.n).product::<usize>().min(n) {
        let (mut s, mut d) = (v.offset as isize, 0isize);
        for (a, &i) in axes.iter().zip(&idx) {
            s += i as isize * a.src;
            d += i as isize * a.dst;
        }
        out[d as usize] = s as usize;
        for k in (0..axes.len()).rev() {
            idx[k] += 1;
            if idx[k] < axes[k].n {
                break;
            }
            idx[k] = 0;
        }
    }
    out
}

fn check(buf: &[usize], steps: Vec<ViewStep>) -> FineView {
    let b = DimBinding::new();
    let v = fine_view(buf, &steps, &b).expect("expressible as fine axes");
    assert_eq!(
        offsets(&v),
        gather_map(buf, &steps, &b).unwrap(),
        "{steps:?}"
    );
    v
}

#[test]
fn reshape_of_a_transposed_head_split_reads_runs_of_the_head_dim() {
    // [B, H, T, hd] → [B, T, H, hd] → [B, T, H·hd]: the q/k/v split's backward.
    let v = check(
        &[2, 3, 4, 5],
        vec![
            ViewStep::Transpose(vec![0, 2, 1, 3]),
            ViewStep::Reshape(st(&[2, 4, 15])),
        ],
    );
    let a = v.dense_axes();
    assert_eq!(
        a.last().unwrap(),
        &Axis {
            n: 5,
            src: 1,
            dst: 1
        }
    );
    assert_eq!(a.len(), 4, "{a:?}");
}

#[test]
fn view_chains_agree_with_the_gather_map() {
    let chains: Vec<(Vec<usize>, Vec<ViewStep>)> = vec![
        (
            vec![6, 4],
            vec![
                ViewStep::Transpose(vec![1, 0]),
                ViewStep::Reshape(st(&[2, 12])),
            ],
        ),
        (
            vec![6, 4],
            vec![
                ViewStep::Transpose(vec![1, 0]),
                ViewStep::Reshape(st(&[4, 2, 3])),
            ],
        ),
        (
            vec![4, 6],
            vec![
                ViewStep::Narrow {
                    axis: 1,
                    start: 2,
                    len: 3,
                },
                ViewStep::Transpose(vec![1, 0]),
                ViewStep::Reshape(st(&[3, 2, 2])),
            ],
        ),
        (
            vec![2, 12],
            vec![
                ViewStep::Reshape(st(&[2, 3, 4])),
                ViewStep::Transpose(vec![0, 2, 1]),
                ViewStep::Reshape(st(&[2, 12])),
                ViewStep::Narrow {
                    axis: 1,
                    start: 3,
                    len: 6,
                },
            ],
        ),
        (
            vec![3, 1],
            vec![
                ViewStep::Expand(st(&[2, 3, 5])),
                ViewStep::Reshape(st(&[6, 5])),
            ],
        ),
        (
            vec![5],
            vec![
                ViewStep::Reshape(st(&[1, 5, 1])),
                ViewStep::Expand(st(&[2, 5, 3])),
            ],
        ),
        (
            vec![1, 1],
            vec![ViewStep::Reshape(st(&[1])), ViewStep::Expand(st(&[4]))],
        ),
        (vec![], vec![ViewStep::Expand(st(&[3, 2]))]),
        (
            vec![7],
            vec![ViewStep::Narrow {
                axis: 0,
                start: 6,
                len: 1,
            }],
        ),
    ];
    for (buf, steps) in chains {
        check(&buf, steps);
    }
}

#[test]
fn a_narrow_across_factors_or_an_unaligned_reshape_has_no_fine_view() {
    let b = DimBinding::new();
    // [2, 3]ᵀ flattened, then elements 1..4 of the 6: crosses the factor boundary.
    let steps = vec![
        ViewStep::Transpose(vec![1, 0]),
        ViewStep::Reshape(st(&[6])),
        ViewStep::Narrow {
            axis: 0,
            start: 1,
            len: 3,
        },
    ];
    assert!(fine_view(&[2, 3], &steps, &b).is_none());
    let steps = vec![
        ViewStep::Transpose(vec![1, 0]),
        ViewStep::Reshape(st(&[2, 3])),
    ];
    assert!(fine_view(&[2, 3], &steps, &b).is_none());
}

#[test]
fn empty_views_copy_nothing() {
    let b = DimBinding::new();
    let v = fine_view(&[0, 3], &[ViewStep::Transpose(vec![1, 0])], &b).unwrap();
    assert!(v.dense_axes().is_empty());
    let v = fine_view(
        &[4, 3],
        &[ViewStep::Narrow {
            axis: 0,
            start: 4,
            len: 0,
        }],
        &b,
    )
    .unwrap();
    assert_eq!((v.numel(), v.dense_axes().len()), (0, 0));
}

#[test]
fn copies_move_strided_runs_and_fills_of_every_width() {
    for w in [1usize, 2, 4, 8, 16, 3] {
        // A [3, 4] source read transposed into a [4, 3] destination, then a fill.
        let src: Vec<u8> = (0..12 * w).map(|i| i as u8).collect();
        let mut dst = vec![0u8; 14 * w];
        let jobs = vec![
            Job {
                src: Src::Buf { buf: 0, offset: 0 },
                dst_off: 0,
                axes: vec![
                    Axis {
                        n: 4,
                        src: 1,
                        dst: 3,
                    },
                    Axis {
                        n: 3,
                        src: 4,
                        dst: 1,
                    },
                ],
            },
            Job {
                src: Src::Fill(vec![0xAB; w]),
                dst_off: 12,
                axes: vec![Axis {
                    n: 2,
                    src: 0,
                    dst: 1,
                }],
            },
        ];
        let c = Copies::new(jobs, w);
        assert_eq!(c.elems(), 14);
        let bases = [src.as_ptr() as *mut u8];
        // SAFETY: the source holds 12 elements, the destination 14, read and written at
        // the offsets above.
        unsafe { c.run(&bases, dst.as_mut_ptr()) };
        for r in 0..4 {
            for k in 0..3 {
                let (de, se) = (r * 3 + k, k * 4 + r);
                assert_eq!(
                    dst[de * w..(de + 1) * w],
                    src[se * w..(se + 1) * w],
                    "w {w}"
                );
            }
        }
        assert!(dst[12 * w..].iter().all(|&x| x == 0xAB));
    }
}

#[test]
fn side_by_side_jobs_copy_row_by_row_with_the_same_bytes() {
    // Three slabs of a last-axis concat (the second read transposed, the third a
    // fill) over enough rows that the chunks split them: grouped into one chunk run,
    // and every destination element is the one the job-by-job reading gives.
    let (rows, wa, wb, wc) = (3000usize, 5usize, 3usize, 2usize);
    let wd = wa + wb + wc;
    let a: Vec<u32> = (0..rows * wa).map(|i| i as u32).collect();
    let b: Vec<u32> = (0..rows * wb).map(|i| 1_000_000 + i as u32).collect();
    let row = |n: usize, src: isize| Axis {
        n,
        src,
        dst: wd as isize,
    };
    let jobs = vec![
        Job {
            src: Src::Buf { buf: 0, offset: 0 },
            dst_off: 0,
            axes: vec![
                row(rows, wa as isize),
                Axis {
                    n: wa,
                    src: 1,
                    dst: 1,
                },
            ],
        },
        Job {
            // b holds the slab transposed: element (r, k) at k·rows + r.
            src: Src::Buf { buf: 1, offset: 0 },
            dst_off: wa,
            axes: vec![
                row(rows, 1),
                Axis {
                    n: wb,
                    src: rows as isize,
                    dst: 1,
                },
            ],
        },
        Job {
            src: Src::Fill(7u32.to_le_bytes().to_vec()),
            dst_off: wa + wb,
            axes: vec![
                row(rows, 0),
                Axis {
                    n: wc,
                    src: 0,
                    dst: 1,
                },
            ],
        },
    ];
    let c = Copies::new(jobs, 4);
    assert!(c.chunks.len() > 1, "{} chunk(s)", c.chunks.len());
    assert!(
        c.chunks.iter().all(|ch| (ch.j0, ch.j1) == (0, 3)),
        "{:?}",
        c.chunks
    );
    let mut dst = vec![0u32; rows * wd];
    let bases = [a.as_ptr() as *mut u8, b.as_ptr() as *mut u8];
    // SAFETY: every job reads inside its source and writes inside the destination of
    // rows·wd elements; the slabs are disjoint.
    unsafe { c.run(&bases, dst.as_mut_ptr() as *mut u8) };
    for r in 0..rows {
        let got = &dst[r * wd..(r + 1) * wd];
        let mut want: Vec<u32> = a[r * wa..(r + 1) * wa].to_vec();
        want.extend((0..wb).map(|k| b[k * rows + r]));
        want.extend([7, 7]);
        assert_eq!(got, &want[..], "row {r}");
    }
}

#[test]
fn slabs_that_are_not_side_by_side_stay_separate_chunks() {
    // A concat on the first axis: the second slab starts after all rows of the first.
    let ax = |n| {
        vec![
            Axis { n, src: 4, dst: 4 },
            Axis {
                n: 4,
                src: 1,
                dst: 1,
            },
        ]
    };
    let jobs = vec![
        Job {
            src: Src::Buf { buf: 0, offset: 0 },
            dst_off: 0,
            axes: ax(2),
        },
        Job {
            src: Src::Buf { buf: 1, offset: 0 },
            dst_off: 8,
            axes: ax(2),
        },
    ];
    let c = Copies::new(jobs, 4);
    assert!(
        c.chunks.iter().all(|ch| ch.j1 == ch.j0 + 1),
        "{:?}",
        c.chunks
    );
    let (a, b) = (
        [1u32, 2, 3, 4, 5, 6, 7, 8],
        [9u32, 10, 11, 12, 13, 14, 15, 16],
    );
    let mut dst = [0u32; 16];
    let bases = [a.as_ptr() as *mut u8, b.as_ptr() as *mut u8];
    // SAFETY: two [2, 4] sources into the two halves of a [4, 4] destination.
    unsafe { c.run(&bases, dst.as_mut_ptr() as *mut u8) };
    assert_eq!(dst, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]);
}
