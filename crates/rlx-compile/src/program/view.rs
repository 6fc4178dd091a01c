//! Views as index maps: chains of movement steps over a dense buffer, bound to
//! strides per call.

use rlx_ir::{Dim, DimBinding};

/// One movement step of a load's view chain. Each step maps the tensor produced by
/// the steps before it (starting from the buffer's dense layout) to a new tensor.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ViewStep {
    /// Row-major reshape to these dims.
    Reshape(Vec<Dim>),
    /// Output axis `i` is input axis `perm[i]`.
    Transpose(Vec<usize>),
    /// Elements `start..start + len` of `axis`.
    Narrow {
        /// The axis.
        axis: usize,
        /// First element kept.
        start: usize,
        /// Elements kept.
        len: usize,
    },
    /// NumPy broadcast (right-aligned, size-1 axes stretch) to these dims.
    Expand(Vec<Dim>),
}

/// A bound view: element at multi-index `i` is at `offset + Σ i[d]·strides[d]`
/// (in elements of the buffer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Strided {
    /// Concrete dims of the view.
    pub dims: Vec<usize>,
    /// Stride per dim (0 on broadcast axes).
    pub strides: Vec<isize>,
    /// Element offset of index 0.
    pub offset: usize,
}

impl Strided {
    /// The dense row-major layout of `dims`.
    pub fn dense(dims: &[usize]) -> Strided {
        let mut strides = vec![0isize; dims.len()];
        let mut acc = 1isize;
        for i in (0..dims.len()).rev() {
            strides[i] = acc;
            acc *= dims[i] as isize;
        }
        Strided {
            dims: dims.to_vec(),
            strides,
            offset: 0,
        }
    }

    /// Whether the view reads a dense row-major block (`offset..offset + numel`).
    pub fn is_dense(&self) -> bool {
        let mut acc = 1isize;
        for i in (0..self.dims.len()).rev() {
            if self.dims[i] != 1 && self.strides[i] != acc {
                return false;
            }
            acc *= self.dims[i] as isize;
        }
        true
    }

    /// Element count.
    pub fn numel(&self) -> usize {
        self.dims.iter().product()
    }
}

/// The dims after each step of `steps` applied to a buffer of `buf` dims (index 0 is
/// the buffer itself, the last entry the view's dims).
pub fn chain_dims(buf: &[Dim], steps: &[ViewStep]) -> Vec<Vec<Dim>> {
    let mut out = vec![buf.to_vec()];
    for s in steps {
        let prev = out.last().expect("starts non-empty");
        let next = match s {
            ViewStep::Reshape(d) | ViewStep::Expand(d) => d.clone(),
            ViewStep::Transpose(perm) => perm.iter().map(|&p| prev[p]).collect(),
            ViewStep::Narrow { axis, len, .. } => {
                let mut n = prev.clone();
                n[*axis] = Dim::Static(*len);
                n
            }
        };
        out.push(next);
    }
    out
}

/// Bind dims of a step list under `binding`.
fn bind_dims(d: &[Dim], binding: &DimBinding) -> Option<Vec<usize>> {
    d.iter().map(|x| x.resolve(binding)).collect()
}

/// The strided form of `steps` applied to a dense buffer of `buf_dims`, or `None` when
/// some reshape of a non-contiguous view cannot be expressed with strides (then use
/// [`gather_map`]) or a dim is unbound.
pub fn bind_load(buf_dims: &[usize], steps: &[ViewStep], binding: &DimBinding) -> Option<Strided> {
    let mut v = Strided::dense(buf_dims);
    for s in steps {
        v = apply(&v, s, binding)?;
    }
    Some(v)
}

fn apply(v: &Strided, s: &ViewStep, binding: &DimBinding) -> Option<Strided> {
    Some(match s {
        ViewStep::Reshape(d) => reshape(v, &bind_dims(d, binding)?)?,
        ViewStep::Transpose(perm) => Strided {
            dims: perm.iter().map(|&p| v.dims[p]).collect(),
            strides: perm.iter().map(|&p| v.strides[p]).collect(),
            offset: v.offset,
        },
        ViewStep::Narrow { axis, start, len } => {
            let mut n = v.clone();
            n.dims[*axis] = *len;
            if *len > 0 {
                n.offset = (v.offset as isize + *start as isize * v.strides[*axis]) as usize;
            }
            n
        }
        ViewStep::Expand(d) => {
            let dims = bind_dims(d, binding)?;
            let off = dims.len().checked_sub(v.dims.len())?;
            let strides = (0..dims.len())
                .map(|i| {
                    if i < off || v.dims[i - off] == 1 && dims[i] != 1 {
                        0
                    } else {
                        v.strides[i - off]
                    }
                })
                .collect();
            Strided {
                dims,
                strides,
                offset: v.offset,
            }
        }
    })
}

/// Strides for viewing `v` with `new` dims in row-major order, when expressible.
fn reshape(v: &Strided, new: &[usize]) -> Option<Strided> {
    let numel: usize = new.iter().product();
    if numel == 0 || v.numel() == 0 {
        return Some(Strided {
            dims: new.to_vec(),
            strides: vec![0; new.len()],
            offset: v.offset,
        });
    }
    // Old axes without the size-1 ones (their strides are irrelevant).
    let old: Vec<(usize, isize)> = v
        .dims
        .iter()
        .zip(&v.strides)
        .filter(|(d, _)| **d != 1)
        .map(|(d, s)| (*d, *s))
        .collect();
    let mut strides = vec![0isize; new.len()];
    let (mut oi, mut ni) = (0usize, 0usize);
    while ni < new.len() {
        if new[ni] == 1 {
            ni += 1;
            continue;
        }
        // Grow a group of old axes and new axes with equal products.
        let (o0, n0) = (oi, ni);
        let (mut po, mut pn) = (old.get(oi)?.0, new[ni]);
        oi += 1;
        ni += 1;
        while po != pn {
            if po < pn {
                po *= old.get(oi)?.0;
                oi += 1;
            } else {
                while ni < new.len() && new[ni] == 1 {
                    ni += 1;
                }
                pn *= *new.get(ni)?;
                ni += 1;
            }
        }
        // The old axes of the group must be mutually contiguous.
        for k in o0..oi - 1 {
            if old[k].1 != old[k + 1].1 * old[k + 1].0 as isize {
                return None;
            }
        }
        let mut acc = old[oi - 1].1;
        for k in (n0..ni).rev() {
            if new[k] == 1 {
                continue;
            }
            strides[k] = acc;
            acc *= new[k] as isize;
        }
    }
    Some(Strided {
        dims: new.to_vec(),
        strides,
        offset: v.offset,
    })
}

/// For every element (row-major) of the view `steps` over a dense buffer of
/// `buf_dims`, the flat buffer offset it reads. Works for every chain.
pub fn gather_map(
    buf_dims: &[usize],
    steps: &[ViewStep],
    binding: &DimBinding,
) -> Option<Vec<usize>> {
    // Dims after each step.
    let mut dims_at = vec![buf_dims.to_vec()];
    for s in steps {
        let prev = dims_at.last().unwrap();
        let next = match s {
            ViewStep::Reshape(d) | ViewStep::Expand(d) => bind_dims(d, binding)?,
            ViewStep::Transpose(perm) => perm.iter().map(|&p| prev[p]).collect(),
            ViewStep::Narrow { axis, len, .. } => {
                let mut n = prev.clone();
                n[*axis] = *len;
                n
            }
        };
        dims_at.push(next);
    }
    let out_dims = dims_at.last().unwrap().clone();
    // `None` as well when the table cannot be allocated (the caller reports it).
    let n = rlx_ir::checked_elements(&out_dims)?;
    let mut map = Vec::new();
    map.try_reserve_exact(n).ok()?;
    for flat in 0..n {
        let mut idx = unravel(flat, &out_dims);
        for (k, s) in steps.iter().enumerate().rev() {
            let in_dims = &dims_at[k];
            idx = match s {
                ViewStep::Reshape(_) => unravel(ravel(&idx, &dims_at[k + 1]), in_dims),
                ViewStep::Transpose(perm) => {
                    let mut i = vec![0; perm.len()];
                    for (o, &p) in perm.iter().enumerate() {
                        i[p] = idx[o];
                    }
                    i
                }
                ViewStep::Narrow { axis, start, .. } => {
                    let mut i = idx.clone();
                    i[*axis] += start;
                    i
                }
                ViewStep::Expand(_) => {
                    let off = idx.len() - in_dims.len();
                    (0..in_dims.len())
                        .map(|j| if in_dims[j] == 1 { 0 } else { idx[j + off] })
                        .collect()
                }
            };
        }
        map.push(ravel(&idx, buf_dims));
    }
    Some(map)
}

fn unravel(mut flat: usize, dims: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    for i in (0..dims.len()).rev() {
        if dims[i] > 0 {
            idx[i] = flat % dims[i];
            flat /= dims[i];
        }
    }
    idx
}

fn ravel(idx: &[usize], dims: &[usize]) -> usize {
    idx.iter().zip(dims).fold(0, |a, (&i, &d)| a * d + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(d: &[usize]) -> Vec<Dim> {
        d.iter().map(|&x| Dim::Static(x)).collect()
    }

    /// Offsets a strided view reads, row-major.
    fn offsets(v: &Strided) -> Vec<usize> {
        let n = v.numel();
        (0..n)
            .map(|f| {
                let idx = unravel(f, &v.dims);
                (v.offset as isize
                    + idx
                        .iter()
                        .zip(&v.strides)
                        .map(|(&i, &s)| i as isize * s)
                        .sum::<isize>()) as usize
            })
            .collect()
    }

    #[test]
    fn strided_binding_agrees_with_the_gather_map_on_view_chains() {
        let b = DimBinding::new();
        let chains: Vec<(Vec<usize>, Vec<ViewStep>)> = vec![
            (vec![2, 3, 4], vec![ViewStep::Transpose(vec![2, 0, 1])]),
            (
                vec![2, 3, 4],
                vec![
                    ViewStep::Narrow {
                        axis: 2,
                        start: 1,
                        len: 2,
                    },
                    ViewStep::Transpose(vec![1, 0, 2]),
                ],
            ),
            (vec![3, 1], vec![ViewStep::Expand(st(&[2, 3, 5]))]),
            (vec![6, 4], vec![ViewStep::Reshape(st(&[2, 3, 2, 2]))]),
            (
                vec![4, 6],
                vec![
                    ViewStep::Narrow {
                        axis: 0,
                        start: 1,
                        len: 2,
                    },
                    ViewStep::Reshape(st(&[2, 2, 3])),
                ],
            ),
            (
                vec![5],
                vec![
                    ViewStep::Reshape(st(&[1, 5, 1])),
                    ViewStep::Expand(st(&[2, 5, 3])),
                ],
            ),
        ];
        for (dims, steps) in chains {
            let s = bind_load(&dims, &steps, &b).expect("expressible");
            assert_eq!(
                offsets(&s),
                gather_map(&dims, &steps, &b).unwrap(),
                "{steps:?}"
            );
        }
    }

    #[test]
    fn reshape_of_a_transposed_view_is_not_expressible_but_still_gathers() {
        let b = DimBinding::new();
        let steps = vec![ViewStep::Transpose(vec![1, 0]), ViewStep::Reshape(st(&[6]))];
        assert!(bind_load(&[2, 3], &steps, &b).is_none());
        assert_eq!(
            gather_map(&[2, 3], &steps, &b).unwrap(),
            vec![0, 3, 1, 4, 2, 5]
        );
    }

    #[test]
    fn dense_detects_row_major_blocks_only() {
        assert!(Strided::dense(&[2, 3]).is_dense());
        let t = bind_load(
            &[2, 3],
            &[ViewStep::Transpose(vec![1, 0])],
            &DimBinding::new(),
        )
        .unwrap();
        assert!(!t.is_dense());
        let e = bind_load(
            &[1, 3],
            &[ViewStep::Expand(st(&[1, 3]))],
            &DimBinding::new(),
        )
        .unwrap();
        assert!(e.is_dense());
    }
}
