//! rlx on AMD GPUs through HIP (ROCm): kernels lowered once to the loop IR
//! ([`rlx_compile::loops`]), rendered as HIP C++ by the renderer CUDA shares
//! ([`render_c`] with [`Dialect::Hip`]), and compiled at run time by hiprtc
//! ([`hiprtc`], loaded with `dlopen`: nothing is needed to build).
//!
//! **Status**: kernel compilation only. Every kernel kind the loop IR lowers compiles
//! to AMDGPU code objects (tested in CI for `gfx90a` and `gfx1100`, without a GPU). The
//! run-time half — device memory, module loading, launches, rocBLAS — is not written
//! yet, so `Device::Rocm` is not available to `rlx-tensor` and asking for it is an error
//! that says so.
//!
//! ```no_run
//! use rlx_ir::{Activation, DType, Graph, Op, Shape};
//! let mut g = Graph::new("relu");
//! let x = g.input("x", Shape::new(&[1024], DType::F32));
//! let y = g.add_op(Op::Activation(Activation::Relu), vec![x]).unwrap();
//! g.set_outputs(vec![y]);
//! let p = rlx_compile::compile(&g, &rlx_compile::CompileOptions::default()).unwrap();
//! let kernels = rlx_rocm::compile_program(&p, "gfx90a").unwrap();
//! assert_eq!(kernels.len(), p.kernels.len());
//! ```

pub mod hiprtc;

use rlx_compile::Program;
use rlx_compile::loops::lower_kernel;
pub use rlx_compile::loops::{Dialect, LoopKernel, render_c};

/// One compiled kernel: its lowered form, its HIP source and its code object.
#[derive(Debug, Clone)]
pub struct CompiledKernel {
    /// The lowered kernel (entry name, buffer slots, dynamic-dim parameters).
    pub kernel: LoopKernel,
    /// The HIP C++ source it was compiled from.
    pub source: String,
    /// The AMDGPU code object (an ELF image for `hipModuleLoadData`).
    pub code_object: Vec<u8>,
}

/// Lower, render and compile every kernel of `p` for `arch` (e.g. `gfx90a`).
///
/// Errors name the kernel: one the loop IR does not lower yet (attention, opaque ops,
/// integer arithmetic), or one hiprtc rejects (with its log), or hiprtc missing.
pub fn compile_program(p: &Program, arch: &str) -> Result<Vec<CompiledKernel>, String> {
    (0..p.kernels.len())
        .map(|k| {
            let kernel = lower_kernel(p, k).map_err(|e| e.to_string())?;
            let source = render_c(&kernel, Dialect::Hip);
            let code_object = hiprtc::compile(&source, &format!("{}.hip", kernel.name), arch)
                .map_err(|e| format!("kernel {k} ({}): {e}", kernel.name))?;
            Ok(CompiledKernel {
                kernel,
                source,
                code_object,
            })
        })
        .collect()
}
