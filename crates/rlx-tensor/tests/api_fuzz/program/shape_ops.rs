//! Movement and indexing calls: reshape, transpose, narrow, slice (`s!` with `ax`,
//! `ix`, `rg`, `tail`), select, pad, cat/stack, split/chunk, tile, broadcast,
//! (un)squeeze, flatten, flip, roll, gather/index_select — each with arguments that
//! are usually valid for the operand's shape and often not (axes past the rank,
//! ranges past the end, sizes that do not add up, permutations with repeats).

use super::Config;
use super::case::Case;
use super::leaves;
use super::source::Draw;
use rlx_tensor::{Dim, SliceAxis, SliceSpec, Tensor, ax, ix, rg, tail};

/// An operand: the newest usable tensor half the time, else any usable one.
pub fn operand(c: &Case, d: &mut Draw) -> Option<usize> {
    let u = c.usable();
    if u.is_empty() {
        return None;
    }
    if d.percent(50) {
        u.last().copied()
    } else {
        Some(d.pick(&u))
    }
}

/// An axis of a rank-`rank` tensor: valid most of the time, else just past the end
/// or absurd.
pub fn axis(d: &mut Draw, rank: usize) -> usize {
    if rank > 0 && !d.percent(12) {
        return d.below(rank);
    }
    d.pick(&[rank, rank + 1, rank + 7, usize::MAX])
}

/// A signed axis (`softmax`, `cumsum`): valid from either end most of the time.
pub fn signed_axis(d: &mut Draw, rank: usize) -> i32 {
    let r = rank as i32;
    if rank > 0 && !d.percent(12) {
        return d.range(-(r as i64), r as i64 - 1) as i32;
    }
    d.pick(&[r, -r - 1, i32::MAX, i32::MIN])
}

/// The size of `axis` if static, else a plausible run-time size (so generated
/// ranges on a dynamic axis are sometimes too large for the size bound later).
pub fn size_of(c: &Case, x: usize, axis: usize, d: &mut Draw) -> usize {
    let s = c.shape(x);
    match s.dims().get(axis) {
        Some(Dim::Static(n)) => *n,
        Some(Dim::Dynamic(_)) => d.below(5),
        None => d.below(4),
    }
}

/// A `(start, len)` on an axis of size `n`: in range most of the time.
fn span(d: &mut Draw, n: usize, huge: bool) -> (usize, usize) {
    if huge && d.percent(30) {
        return d.pick(&[
            (usize::MAX, 2),
            (1, usize::MAX),
            (usize::MAX / 2 + 1, usize::MAX / 2 + 1),
        ]);
    }
    if d.percent(15) {
        return (d.below(n + 3), d.below(n + 3));
    }
    let start = d.below(n + 1);
    (start, d.below(n - start + 1))
}

/// One movement or indexing call on a random operand.
pub fn step(c: &mut Case, d: &mut Draw, cfg: &Config) {
    let Some(x) = operand(c, d) else { return };
    let shape = c.shape(x);
    let rank = shape.rank();
    let xn = c.name(x);
    let huge = cfg.huge;
    match d.below(20) {
        0 | 1 => {
            let target = reshape_target(c, x, d, huge);
            c.call(format!("{xn}.try_reshape({target:?})"), &[x], move |t| {
                t[0].try_reshape(target).map(|t| vec![t])
            });
        }
        2 => {
            let mut perm: Vec<usize> = (0..rank).collect();
            for i in (1..perm.len()).rev() {
                perm.swap(i, d.below(i + 1));
            }
            match d.below(10) {
                0 if rank > 0 => perm[0] = perm[rank - 1],
                1 => perm.push(rank),
                2 => {
                    perm.pop();
                }
                _ => {}
            }
            c.call(format!("{xn}.try_transpose({perm:?})"), &[x], move |t| {
                t[0].try_transpose(perm).map(|t| vec![t])
            });
        }
        3 => {
            c.call(format!("{xn}.try_t()"), &[x], |t| {
                t[0].try_t().map(|t| vec![t])
            });
        }
        4 | 5 => {
            let a = axis(d, rank);
            let n = size_of(c, x, a, d);
            let (start, len) = span(d, n, huge);
            c.call(
                format!("{xn}.try_narrow({a}, {start}, {len})"),
                &[x],
                move |t| t[0].try_narrow(a, start, len).map(|t| vec![t]),
            );
        }
        6 | 7 => {
            let entries = slice_entries(c, x, d);
            let shown: Vec<String> = entries.iter().map(entry_code).collect();
            c.call(
                format!("{xn}.try_slice(s![{}])", shown.join(", ")),
                &[x],
                move |t| t[0].try_slice(SliceSpec::new(entries)).map(|t| vec![t]),
            );
        }
        8 => {
            let a = axis(d, rank);
            let n = size_of(c, x, a, d) as i64;
            let i = if d.percent(15) {
                d.pick(&[n, -n - 1, i64::MIN, i64::MAX])
            } else {
                d.range(-n, (n - 1).max(0))
            };
            c.call(format!("{xn}.try_select({a}, {i})"), &[x], move |t| {
                t[0].try_select(a, i).map(|t| vec![t])
            });
        }
        9 => {
            let a = axis(d, rank);
            let (before, after) = if huge && d.percent(40) {
                d.pick(&[
                    (usize::MAX, 1),
                    (usize::MAX / 2, usize::MAX / 2 + 2),
                    (1 << 40, 1 << 40),
                ])
            } else {
                (d.below(3), d.below(3))
            };
            let v = d.pick(&[0.0f32, -1.0, 2.5]);
            c.call(
                format!("{xn}.try_pad({a}, {before}, {after}, {v:?})"),
                &[x],
                move |t| t[0].try_pad(a, before, after, v).map(|t| vec![t]),
            );
        }
        10 => cat_or_stack(c, d, x),
        11 => {
            let a = axis(d, rank);
            let n = size_of(c, x, a, d);
            let sizes = split_sizes(d, n, huge);
            c.call(format!("{xn}.try_split({a}, &{sizes:?})"), &[x], move |t| {
                t[0].try_split(a, &sizes)
            });
        }
        12 => {
            let a = axis(d, rank);
            let n = if huge && d.percent(30) {
                usize::MAX
            } else {
                d.below(5)
            };
            c.call(format!("{xn}.try_chunk({a}, {n})"), &[x], move |t| {
                t[0].try_chunk(a, n)
            });
        }
        13 => {
            let a = axis(d, rank);
            let reps = if huge && d.percent(30) {
                1usize << 40
            } else {
                d.below(4)
            };
            c.call(format!("{xn}.try_tile({a}, {reps})"), &[x], move |t| {
                t[0].try_tile(a, reps).map(|t| vec![t])
            });
        }
        14 => {
            let target = broadcast_target(c, x, d, huge);
            c.call(
                format!("{xn}.try_broadcast_to({target:?})"),
                &[x],
                move |t| t[0].try_broadcast_to(target).map(|t| vec![t]),
            );
        }
        15 => {
            let a = if d.percent(85) {
                d.below(rank + 1)
            } else {
                rank + 1 + d.below(3)
            };
            c.call(format!("{xn}.try_unsqueeze({a})"), &[x], move |t| {
                t[0].try_unsqueeze(a).map(|t| vec![t])
            });
        }
        16 => match d.below(3) {
            0 => {
                let a = axis(d, rank);
                c.call(format!("{xn}.try_squeeze({a})"), &[x], move |t| {
                    t[0].try_squeeze(a).map(|t| vec![t])
                });
            }
            1 => {
                c.call(format!("{xn}.try_squeeze_all()"), &[x], |t| {
                    t[0].try_squeeze_all().map(|t| vec![t])
                });
            }
            _ => {
                c.call(format!("{xn}.try_flatten()"), &[x], |t| {
                    t[0].try_flatten().map(|t| vec![t])
                });
            }
        },
        17 => {
            let a = axis(d, rank);
            if d.percent(50) {
                c.call(format!("{xn}.try_flip({a})"), &[x], move |t| {
                    t[0].try_flip(a).map(|t| vec![t])
                });
            } else {
                let s = if d.percent(10) {
                    usize::MAX
                } else {
                    d.below(7)
                };
                c.call(format!("{xn}.try_roll({a}, {s})"), &[x], move |t| {
                    t[0].try_roll(a, s).map(|t| vec![t])
                });
            }
        }
        _ => gather(c, d, x),
    }
}

/// A reshape target: a regrouping of the element count (with a `-1` now and then)
/// or an invalid one (wrong count, two `-1`s, negative sizes, overflowing products).
fn reshape_target(c: &Case, x: usize, d: &mut Draw, huge: bool) -> Vec<i64> {
    let s = c.shape(x);
    if huge && d.percent(40) {
        return d.pick(&[
            vec![1 << 32, 1 << 32],
            vec![i64::MAX, 2],
            vec![-1, 0],
            vec![1 << 62, 1 << 62, -1],
        ]);
    }
    let Some(n) = s.static_dims().map(|v| v.iter().product::<usize>()) else {
        // A dynamic operand: keep its element count symbolic with one `-1`.
        let mut t: Vec<i64> = vec![-1];
        if d.percent(50) {
            t.insert(d.below(2), d.pick(&[1, 2, 3]));
        }
        return t;
    };
    if d.percent(15) {
        let k = d.below(4);
        return (0..k).map(|_| d.pick(&[-1, -2, 0, 1, 2, 3, 5])).collect();
    }
    // Split n into factors.
    let mut rest = n;
    let mut out = Vec::new();
    while rest > 1 && out.len() < 3 && d.percent(70) {
        let divs: Vec<usize> = (2..=rest).filter(|k| rest % k == 0).collect();
        let f = d.pick(&divs);
        out.push(f as i64);
        rest /= f;
    }
    out.push(rest as i64);
    if n == 0 {
        out = vec![0, d.pick(&[1, 2, 3])];
    }
    if d.percent(20) {
        out.insert(d.below(out.len() + 1), 1);
    }
    if d.percent(35) && n > 0 {
        let i = d.below(out.len());
        out[i] = -1;
    }
    out
}

/// Per-axis slice entries for `x`: in range most of the time; negative positions,
/// empty and reversed ranges, positions past the end and one entry too many otherwise.
fn slice_entries(c: &Case, x: usize, d: &mut Draw) -> Vec<SliceAxis> {
    let rank = c.shape(x).rank();
    let k = if d.percent(10) {
        rank + 1
    } else {
        d.below(rank + 1)
    };
    (0..k)
        .map(|a| {
            let n = size_of(c, x, a, d) as i64;
            let bad = d.percent(12);
            let p = |d: &mut Draw| {
                if bad {
                    d.range(-n - 3, n + 3)
                } else {
                    d.range(-n, n.max(1) - 1)
                }
            };
            match d.below(4) {
                0 => ax(),
                1 => ix(p(d)),
                2 => {
                    let a0 = p(d);
                    let b0 = if bad { p(d) } else { d.range(-n, n) };
                    rg(a0, b0)
                }
                _ => tail(p(d)),
            }
        })
        .collect()
}

/// Rust source of one slice entry.
fn entry_code(e: &SliceAxis) -> String {
    match e {
        SliceAxis::All => "ax()".into(),
        SliceAxis::Index(i) => format!("ix({i})"),
        SliceAxis::Range { start, end } => format!("rg({start}, {end})"),
        SliceAxis::From(s) => format!("tail({s})"),
    }
}

/// Split sizes for an axis of `n`: adding up to `n` most of the time.
fn split_sizes(d: &mut Draw, n: usize, huge: bool) -> Vec<usize> {
    if huge && d.percent(40) {
        return d.pick(&[
            vec![usize::MAX, 2],
            vec![usize::MAX / 2 + 1, usize::MAX / 2 + 1],
            vec![1 << 40],
        ]);
    }
    if d.percent(15) {
        return (0..d.below(4)).map(|_| d.below(4)).collect();
    }
    let mut rest = n;
    let mut out = Vec::new();
    while rest > 0 && d.percent(60) {
        let k = 1 + d.below(rest);
        out.push(k);
        rest -= k;
    }
    if rest > 0 || out.is_empty() {
        out.push(rest);
    }
    out
}

/// A broadcast target: `x`'s dims with size-1 axes stretched, new leading axes and
/// `-1`s, or something incompatible.
fn broadcast_target(c: &Case, x: usize, d: &mut Draw, huge: bool) -> Vec<i64> {
    if huge && d.percent(40) {
        return d.pick(&[vec![1 << 40, 1 << 40], vec![i64::MAX], vec![-5]]);
    }
    let s = c.shape(x);
    let mut t: Vec<i64> = s
        .dims()
        .iter()
        .map(|dim| match dim {
            Dim::Static(1) if d.percent(50) => d.pick(&[2, 3, 4]),
            Dim::Static(n) if d.percent(70) => *n as i64,
            Dim::Static(_) => -1,
            Dim::Dynamic(_) => -1,
        })
        .collect();
    for _ in 0..d.below(3) {
        t.insert(0, d.pick(&[1, 2, 3]));
    }
    if d.percent(15) && !t.is_empty() {
        let i = d.below(t.len());
        t[i] = d.pick(&[0, 5, 7, -2]);
    }
    if d.percent(5) {
        t.pop();
    }
    t
}

/// `cat` or `stack` of `x` with itself or other tensors (often mismatched), or of nothing.
fn cat_or_stack(c: &mut Case, d: &mut Draw, x: usize) {
    let mut ids = vec![x];
    for _ in 0..d.below(3) {
        let other = if d.percent(60) {
            x
        } else {
            operand(c, d).unwrap_or(x)
        };
        ids.push(other);
    }
    if d.percent(4) {
        ids.clear();
    }
    let rank = c.shape(x).rank();
    let a = if d.percent(50) {
        axis(d, rank)
    } else {
        axis(d, rank + 1)
    };
    let names: Vec<String> = ids.iter().map(|&i| format!("&{}", c.name(i))).collect();
    let list = names.join(", ");
    if d.percent(65) {
        c.call(format!("try_cat(&[{list}], {a})"), &ids, move |t| {
            let refs: Vec<&Tensor> = t.iter().collect();
            rlx_tensor::try_cat(&refs, a).map(|t| vec![t])
        });
    } else {
        c.call(format!("try_stack(&[{list}], {a})"), &ids, move |t| {
            let refs: Vec<&Tensor> = t.iter().collect();
            rlx_tensor::try_stack(&refs, a).map(|t| vec![t])
        });
    }
}

/// `gather` / `index_select` with i64 (sometimes f32 or 2-D) indices: in range
/// (negative ones count from the end) most of the time, past either end otherwise.
fn gather(c: &mut Case, d: &mut Draw, x: usize) {
    let rank = c.shape(x).rank();
    let a = axis(d, rank);
    let n = size_of(c, x, a, d) as i64;
    let (lo, hi) = if d.percent(15) {
        (-n - 2, n + 2)
    } else {
        (-n, (n - 1).max(0))
    };
    let len = d.below(5);
    let idx = if d.percent(25) {
        let rows = 1 + d.below(2);
        let v: Vec<f64> = (0..rows * len).map(|_| d.range(lo, hi) as f64).collect();
        let dt = d.pick(&[
            rlx_tensor::DType::I64,
            rlx_tensor::DType::I32,
            rlx_tensor::DType::F32,
        ]);
        let dims = [rows, len];
        let code = format!(
            "Tensor::from_f64_as({}, {dims:?}, DType::{dt:?})",
            leaves::vec_code(&v)
        );
        c.call(code, &[], move |_| {
            Ok(vec![Tensor::from_f64_as(&v, dims, dt)])
        })
        .map(|v| v[0])
    } else {
        leaves::index_vec(c, d, len, lo, hi)
    };
    let Some(idx) = idx else { return };
    let (xn, iname) = (c.name(x), c.name(idx));
    if d.percent(50) {
        c.call(
            format!("{xn}.try_gather(&{iname}, {a})"),
            &[x, idx],
            move |t| t[0].try_gather(&t[1], a).map(|t| vec![t]),
        );
    } else {
        c.call(
            format!("{xn}.try_index_select({a}, &{iname})"),
            &[x, idx],
            move |t| t[0].try_index_select(a, &t[1]).map(|t| vec![t]),
        );
    }
}
