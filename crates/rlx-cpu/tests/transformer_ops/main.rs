//! The native paths behind W11's per-op rows (`rlx-bench --workloads OPS`), each checked
//! against the oracle and, where it promises the interpreter's bits, against a graph the
//! fast path does not recognize (so the generic tile code computes it):
//! - `conv_pool`: the f32 convolution-gradient and pooling kernels against the oracle;
//! - `cumsum`: the running-sum kernel against the oracle's bytes;
//! - `copies`: elementwise kernels that only copy through a strided view (`narrow`,
//!   `transpose`: the q/k/v split), moved row by row;
//! - `ce_backward`: a softmax cross-entropy's backward epilogue `(p − onehot(label))·s`
//!   evaluated on the softmax rows in place;
//! - `reduce_jit`: reduction prologues run as machine code (a norm's backward);
//! - `row_group`: a norm's or softmax's backward as one row-group kernel.

mod ce_backward;
mod conv_pool;
mod copies;
mod cumsum;
mod norm_gather;
mod reduce_jit;
mod row_group;

use rlx_cpu::CpuBackend;
use rlx_ir::{Graph, TensorData};
use rlx_runtime::{Backend, Device};

/// The compiled CPU program's outputs for `args`.
pub(crate) fn run(g: &Graph, args: &[TensorData]) -> Vec<TensorData> {
    let exe = CpuBackend.compile(Device::Cpu, g).unwrap();
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    exe.run(&views).unwrap()
}

/// The oracle's outputs for `args`.
pub(crate) fn oracle(g: &Graph, args: &[TensorData]) -> Vec<TensorData> {
    rlx_testkit::oracle(g, args).unwrap()
}

/// Bit patterns of an f32 result (NaNs compared by payload too).
pub(crate) fn bits(t: &TensorData) -> Vec<u32> {
    t.to_f32_vec().iter().map(|v| v.to_bits()).collect()
}
