//! Constructors: each makes a fresh graph holding one constant.

use super::Tensor;
use crate::rng::SplitMix64;
use crate::{Error, Result};
use rlx_ir::{DType, Shape, TensorData};

/// The element count of an f32 tensor of `shape`, or an error naming the shape when
/// its byte size overflows (a wrapped count would build a tensor of the wrong size).
fn count(what: &str, shape: &[usize]) -> Result<usize> {
    rlx_ir::checked_bytes(shape.iter().copied(), DType::F32)
        .map(|b| b / 4)
        .ok_or_else(|| {
            Error::shape(format!(
                "{what}: shape {shape:?} is too large: {} f32 bytes exceed the {} bytes one tensor may hold; use a smaller shape",
                if rlx_ir::checked_elements(shape).is_some() { "its" } else { "its element count overflows usize, and its" },
                rlx_ir::MAX_TENSOR_BYTES
            ))
        })
}

/// `n` values `f(0), f(1), …` as f32 bytes, allocated fallibly: a request the
/// allocator refuses is an error naming the bytes, never an abort.
fn f32_bytes(what: &str, n: usize, mut f: impl FnMut(usize) -> f32) -> Result<Vec<u8>> {
    let bytes = n * 4; // n comes from `count`, so this cannot overflow
    let mut v: Vec<u8> = Vec::new();
    v.try_reserve_exact(bytes).map_err(|_| {
        Error::out_of_memory(format!(
            "{what}: out of memory: cannot allocate {bytes} bytes ({}) for {n} f32 values; use a smaller shape",
            rlx_ir::human_bytes(bytes)
        ))
    })?;
    for i in 0..n {
        v.extend_from_slice(&f(i).to_le_bytes());
    }
    Ok(v)
}

/// `data` as little-endian f32 bytes, allocated fallibly like [`f32_bytes`]; one copy
/// of the whole slice, into a spare payload buffer of this thread when it has one
/// (eager code calls this per operand).
fn f32_slice_bytes(what: &str, data: &[f32]) -> Result<Vec<u8>> {
    let mut v = super::pool::spare_bytes();
    let bytes = std::mem::size_of_val(data);
    v.try_reserve_exact(bytes).map_err(|_| {
        Error::out_of_memory(format!(
            "{what}: out of memory: cannot allocate {bytes} bytes ({}) for {} f32 values; use a smaller shape",
            rlx_ir::human_bytes(bytes),
            data.len()
        ))
    })?;
    super::pool::extend_f32_bytes(&mut v, data);
    Ok(v)
}

/// An f32 constant of `shape` from already-encoded bytes.
fn f32_tensor(shape: &[usize], bytes: Vec<u8>) -> Tensor {
    Tensor::new_constant(Shape::new(shape, DType::F32), bytes)
}

impl Tensor {
    /// An f32 tensor from host data. Panics when `data.len()` is not the product of `shape`.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// let t = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], [2, 2]);
    /// assert_eq!(t.dims(), vec![2, 2]);
    /// ```
    #[track_caller]
    pub fn from_vec(data: impl Into<Vec<f32>>, shape: impl AsRef<[usize]>) -> Tensor {
        match Tensor::try_from_vec(data, shape) {
            Ok(t) => t,
            Err(e) => panic!("{e}"),
        }
    }

    /// [`Tensor::from_vec`] returning an error instead of panicking (also when the
    /// shape's size overflows or the copy cannot be allocated).
    pub fn try_from_vec(data: impl Into<Vec<f32>>, shape: impl AsRef<[usize]>) -> Result<Tensor> {
        let data = data.into();
        let shape = shape.as_ref();
        check_len("from_vec", data.len(), shape)?;
        let bytes = f32_slice_bytes("from_vec", &data)?;
        Ok(f32_tensor(shape, bytes))
    }

    /// A tensor holding `data` (any dtype) as a constant.
    pub fn from_data(data: TensorData) -> Tensor {
        Tensor::new_constant(Shape::new(&data.dims, data.dtype), data.bytes)
    }

    /// f32 zeros. Panics when the shape is too large (see [`Tensor::try_full`]).
    #[track_caller]
    pub fn zeros(shape: impl AsRef<[usize]>) -> Tensor {
        Tensor::full(shape, 0.0)
    }

    /// [`Tensor::zeros`] returning an error instead of panicking.
    pub fn try_zeros(shape: impl AsRef<[usize]>) -> Result<Tensor> {
        Tensor::try_full(shape, 0.0)
    }

    /// f32 ones. Panics when the shape is too large (see [`Tensor::try_full`]).
    #[track_caller]
    pub fn ones(shape: impl AsRef<[usize]>) -> Tensor {
        Tensor::full(shape, 1.0)
    }

    /// [`Tensor::ones`] returning an error instead of panicking.
    pub fn try_ones(shape: impl AsRef<[usize]>) -> Result<Tensor> {
        Tensor::try_full(shape, 1.0)
    }

    /// f32 tensor filled with `value`. Panics with [`Tensor::try_full`]'s message when
    /// the shape is too large or its memory cannot be allocated.
    #[track_caller]
    pub fn full(shape: impl AsRef<[usize]>, value: f32) -> Tensor {
        Tensor::try_full(shape, value).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::full`] returning an error (naming the shape or the bytes) instead of
    /// panicking.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// assert!(Tensor::try_full([2, 2], 1.0).is_ok());
    /// let e = Tensor::try_full([usize::MAX], 1.0).unwrap_err();
    /// assert!(e.to_string().contains("too large"), "{e}");
    /// ```
    pub fn try_full(shape: impl AsRef<[usize]>, value: f32) -> Result<Tensor> {
        let shape = shape.as_ref();
        let n = count("full", shape)?;
        Ok(f32_tensor(shape, f32_bytes("full", n, |_| value)?))
    }

    /// The `n × n` f32 identity matrix. Panics when `n × n` is too large (see
    /// [`Tensor::try_eye`]).
    #[track_caller]
    pub fn eye(n: usize) -> Tensor {
        Tensor::try_eye(n).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::eye`] returning an error instead of panicking.
    pub fn try_eye(n: usize) -> Result<Tensor> {
        let total = count("eye", &[n, n])?;
        let bytes = f32_bytes("eye", total, |i| if i % (n + 1) == 0 { 1.0 } else { 0.0 })?;
        Ok(f32_tensor(&[n, n], bytes))
    }

    /// `[0, 1, …, end-1]` as f32 (empty when `end ≤ 0`). Panics when the range is too
    /// long to allocate (see [`Tensor::try_arange_step`]).
    #[track_caller]
    pub fn arange(end: i64) -> Tensor {
        Tensor::arange_step(0, end.max(0), 1)
    }

    /// `start, start+step, …` up to `end` (exclusive) as f32; a negative step counts down.
    /// Panics when `step` is 0 or the range is too long (see [`Tensor::try_arange_step`]).
    #[track_caller]
    pub fn arange_step(start: i64, end: i64, step: i64) -> Tensor {
        Tensor::try_arange_step(start, end, step).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Tensor::arange_step`] returning an error instead of panicking. The length is
    /// computed without stepping (so `arange_step(0, i64::MAX, 1 << 62)` is the two
    /// values `0, 2^62`), and each value is `start + i·step` rounded once to f32.
    ///
    /// ```
    /// use rlx_tensor::Tensor;
    /// assert_eq!(Tensor::try_arange_step(0, i64::MAX, 1 << 62).unwrap().dims(), vec![2]);
    /// assert!(Tensor::try_arange_step(0, 5, 0).is_err());
    /// ```
    pub fn try_arange_step(start: i64, end: i64, step: i64) -> Result<Tensor> {
        if step == 0 {
            return Err(Error::new(format!(
                "arange_step: step must be non-zero (got start {start}, end {end}, step 0)"
            )));
        }
        let (start, end, step) = (start as i128, end as i128, step as i128);
        let span = if step > 0 { end - start } else { start - end };
        let len = if span <= 0 {
            0
        } else {
            (span + step.abs() - 1) / step.abs()
        };
        let Ok(len) = usize::try_from(len) else {
            return Err(Error::shape(format!(
                "arange_step: {len} values from {start} to {end} by {step} is more than one tensor can hold; use a larger step or a shorter range"
            )));
        };
        let n = count("arange_step", &[len])?;
        let bytes = f32_bytes("arange_step", n, |i| (start + i as i128 * step) as f32)?;
        Ok(f32_tensor(&[n], bytes))
    }

    /// An f64 tensor. Panics when the length does not match `shape`.
    #[track_caller]
    pub fn from_f64(data: impl AsRef<[f64]>, shape: impl AsRef<[usize]>) -> Tensor {
        let (data, shape) = (data.as_ref(), shape.as_ref());
        if let Err(e) = check_len("from_f64", data.len(), shape) {
            panic!("{e}");
        }
        Tensor::from_data(TensorData::from_f64(shape, data))
    }

    /// An i64 tensor. Panics when the length does not match `shape`.
    #[track_caller]
    pub fn from_i64(data: impl AsRef<[i64]>, shape: impl AsRef<[usize]>) -> Tensor {
        let (data, shape) = (data.as_ref(), shape.as_ref());
        if let Err(e) = check_len("from_i64", data.len(), shape) {
            panic!("{e}");
        }
        Tensor::from_data(TensorData::from_i64(shape, data))
    }

    /// A 1-D i64 index vector (for `gather` / `index_select`).
    pub fn index_vec(data: impl AsRef<[i64]>) -> Tensor {
        let data = data.as_ref();
        Tensor::from_data(TensorData::from_i64(&[data.len()], data))
    }

    /// Uniform [0, 1) f32 values from a deterministic seed.
    pub fn rand(shape: impl AsRef<[usize]>, seed: u64) -> Tensor {
        Tensor::rand_range(shape, seed, 0.0, 1.0)
    }

    /// Uniform [lo, hi) f32 values from a deterministic seed.
    pub fn rand_range(shape: impl AsRef<[usize]>, seed: u64, lo: f32, hi: f32) -> Tensor {
        let shape = shape.as_ref();
        let mut r = SplitMix64::new(seed);
        let n = count("rand", shape).unwrap_or_else(|e| panic!("{e}"));
        let bytes = f32_bytes("rand", n, |_| lo + (hi - lo) * r.uniform_f32())
            .unwrap_or_else(|e| panic!("{e}"));
        f32_tensor(shape, bytes)
    }

    /// Standard normal f32 values from a deterministic seed.
    pub fn randn(shape: impl AsRef<[usize]>, seed: u64) -> Tensor {
        Tensor::randn_std(shape, seed, 0.0, 1.0)
    }

    /// Normal f32 values with the given mean and standard deviation.
    pub fn randn_std(shape: impl AsRef<[usize]>, seed: u64, mean: f32, std: f32) -> Tensor {
        let shape = shape.as_ref();
        let mut r = SplitMix64::new(seed);
        let n = count("randn", shape).unwrap_or_else(|e| panic!("{e}"));
        let bytes = f32_bytes("randn", n, |_| mean + std * r.normal_f32())
            .unwrap_or_else(|e| panic!("{e}"));
        f32_tensor(shape, bytes)
    }

    /// A constant of any dtype from f64 values (rounded/truncated into `dtype`).
    #[track_caller]
    pub fn from_f64_as(
        data: impl AsRef<[f64]>,
        shape: impl AsRef<[usize]>,
        dtype: DType,
    ) -> Tensor {
        let (data, shape) = (data.as_ref(), shape.as_ref());
        if let Err(e) = check_len("from_f64_as", data.len(), shape) {
            panic!("{e}");
        }
        Tensor::from_data(TensorData::from_f64_as(dtype, shape, data))
    }
}

fn check_len(what: &str, len: usize, shape: &[usize]) -> Result<()> {
    let n = count(what, shape)?;
    if n != len {
        return Err(Error::shape(format!(
            "{what}: {len} values do not fill shape {shape:?} ({n} elements); pass {n} values or change the shape"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `from_vec` copies the slice's bytes whole: every value keeps its exact bits
    /// (signed zero, a NaN payload, subnormals, infinities) in element order.
    #[test]
    fn from_vec_payload_holds_each_values_exact_little_endian_bits() {
        let vals = [
            -0.0f32,
            f32::from_bits(0x7fc0_1234),
            f32::from_bits(1),
            f32::NEG_INFINITY,
            1.5,
            -3.25e-20,
        ];
        let t = Tensor::from_vec(vals.to_vec(), [2, 3]);
        let st = t.cell.state();
        let rlx_ir::Op::Constant { data } = &st.graph.node(t.id).op else {
            panic!("not a constant")
        };
        let want: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(data, &want);
    }

    fn consts(t: &Tensor) -> Vec<f32> {
        let st = t.cell.state();
        let node = st.graph.node(t.id);
        match &node.op {
            rlx_ir::Op::Constant { data } => TensorData::new(
                node.shape.dtype(),
                &node.shape.static_dims().unwrap(),
                data.clone(),
            )
            .unwrap()
            .to_f32_vec(),
            _ => panic!("not a constant"),
        }
    }

    #[test]
    fn arange_counts_up_and_down() {
        assert_eq!(consts(&Tensor::arange(4)), vec![0.0, 1.0, 2.0, 3.0]);
        assert_eq!(consts(&Tensor::arange_step(5, 0, -2)), vec![5.0, 3.0, 1.0]);
        assert_eq!(Tensor::arange(-3).dims(), vec![0]);
    }

    #[test]
    fn eye_full_and_wrong_length() {
        assert_eq!(consts(&Tensor::eye(2)), vec![1.0, 0.0, 0.0, 1.0]);
        assert_eq!(consts(&Tensor::full([3], 2.5)), vec![2.5; 3]);
        let err = Tensor::try_from_vec(vec![1.0; 5], [2, 3]).unwrap_err();
        assert!(
            err.to_string()
                .contains("5 values do not fill shape [2, 3]"),
            "{err}"
        );
    }

    #[test]
    fn random_tensors_are_deterministic_per_seed() {
        assert_eq!(
            consts(&Tensor::randn([8], 3)),
            consts(&Tensor::randn([8], 3))
        );
        assert_ne!(
            consts(&Tensor::randn([8], 3)),
            consts(&Tensor::randn([8], 4))
        );
        let r = consts(&Tensor::rand_range([100], 1, -2.0, 2.0));
        assert!(r.iter().all(|v| (-2.0..2.0).contains(v)));
    }
}
