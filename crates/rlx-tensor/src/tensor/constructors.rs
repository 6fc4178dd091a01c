//! Constructors: each makes a fresh graph holding one constant.

use super::Tensor;
use crate::rng::SplitMix64;
use crate::{Error, Result};
use rlx_ir::{DType, Shape, TensorData};

fn count(shape: &[usize]) -> usize {
    shape.iter().product()
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

    /// [`Tensor::from_vec`] returning an error instead of panicking.
    pub fn try_from_vec(data: impl Into<Vec<f32>>, shape: impl AsRef<[usize]>) -> Result<Tensor> {
        let data = data.into();
        let shape = shape.as_ref();
        check_len("from_vec", data.len(), shape)?;
        Ok(Tensor::from_data(TensorData::from_f32(shape, &data)))
    }

    /// A tensor holding `data` (any dtype) as a constant.
    pub fn from_data(data: TensorData) -> Tensor {
        Tensor::new_constant(Shape::new(&data.dims, data.dtype), data.bytes)
    }

    /// f32 zeros.
    pub fn zeros(shape: impl AsRef<[usize]>) -> Tensor {
        Tensor::full(shape, 0.0)
    }

    /// f32 ones.
    pub fn ones(shape: impl AsRef<[usize]>) -> Tensor {
        Tensor::full(shape, 1.0)
    }

    /// f32 tensor filled with `value`.
    pub fn full(shape: impl AsRef<[usize]>, value: f32) -> Tensor {
        let shape = shape.as_ref();
        Tensor::from_data(TensorData::from_f32(shape, &vec![value; count(shape)]))
    }

    /// The `n × n` f32 identity matrix.
    pub fn eye(n: usize) -> Tensor {
        let mut v = vec![0.0f32; n * n];
        for i in 0..n {
            v[i * n + i] = 1.0;
        }
        Tensor::from_data(TensorData::from_f32(&[n, n], &v))
    }

    /// `[0, 1, …, end-1]` as f32 (empty when `end ≤ 0`).
    pub fn arange(end: i64) -> Tensor {
        Tensor::arange_step(0, end.max(0), 1)
    }

    /// `start, start+step, …` up to `end` (exclusive) as f32; a negative step counts down.
    /// Panics when `step` is 0.
    #[track_caller]
    pub fn arange_step(start: i64, end: i64, step: i64) -> Tensor {
        assert!(
            step != 0,
            "arange_step: step must be non-zero (got start {start}, end {end}, step 0)"
        );
        let mut v = Vec::new();
        let mut x = start;
        while (step > 0 && x < end) || (step < 0 && x > end) {
            v.push(x as f32);
            x += step;
        }
        let n = v.len();
        Tensor::from_data(TensorData::from_f32(&[n], &v))
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
        let v: Vec<f32> = (0..count(shape))
            .map(|_| lo + (hi - lo) * r.uniform_f32())
            .collect();
        Tensor::from_data(TensorData::from_f32(shape, &v))
    }

    /// Standard normal f32 values from a deterministic seed.
    pub fn randn(shape: impl AsRef<[usize]>, seed: u64) -> Tensor {
        Tensor::randn_std(shape, seed, 0.0, 1.0)
    }

    /// Normal f32 values with the given mean and standard deviation.
    pub fn randn_std(shape: impl AsRef<[usize]>, seed: u64, mean: f32, std: f32) -> Tensor {
        let shape = shape.as_ref();
        let mut r = SplitMix64::new(seed);
        let v: Vec<f32> = (0..count(shape))
            .map(|_| mean + std * r.normal_f32())
            .collect();
        Tensor::from_data(TensorData::from_f32(shape, &v))
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
    let n = count(shape);
    if n != len {
        return Err(Error::new(format!(
            "{what}: {len} values do not fill shape {shape:?} ({n} elements); pass {n} values or change the shape"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consts(t: &Tensor) -> Vec<f32> {
        let st = t.cell.state();
        let node = st.graph.node(t.id);
        match &node.op {
            rlx_ir::Op::Constant { data } => {
                TensorData::new(node.shape.dtype(), &t.dims(), data.clone())
                    .unwrap()
                    .to_f32_vec()
            }
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
