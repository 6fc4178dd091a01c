//! Per-kernel timings of a compiled program (`RLX_PROFILE=1`), as data.

use std::fmt;

/// The timings one compiled program collected over its runs so far.
///
/// Backends fill it when `RLX_PROFILE=1` is set (the CPU backend does; see
/// [`crate::Executable::profile`]). Its `Display` is the table `explain()` ends with.
///
/// ```
/// use rlx_runtime::{KernelProfile, Profile};
/// let p = Profile {
///     program: "mlp".into(),
///     runs: 2,
///     kernels: vec![
///         KernelProfile { index: 0, kind: "matmul".into(), ops: vec!["matmul".into(), "relu".into()], calls: 2, total_s: 4e-3 },
///         KernelProfile { index: 1, kind: "elementwise".into(), ops: vec!["add".into()], calls: 2, total_s: 1e-3 },
///     ],
/// };
/// assert_eq!(p.total_s(), 5e-3);
/// assert_eq!(p.kernels[0].mean_s(), 2e-3);
/// assert!(p.to_string().contains("matmul"));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// The program's (graph's) name.
    pub program: String,
    /// Runs timed so far.
    pub runs: u64,
    /// One row per kernel, slowest (most total time) first.
    pub kernels: Vec<KernelProfile>,
}

/// One kernel's row of a [`Profile`].
#[derive(Debug, Clone, PartialEq)]
pub struct KernelProfile {
    /// The kernel's position in the program (as `explain()` numbers kernels).
    pub index: usize,
    /// What kind of kernel it is (its label: `elementwise`, `matmul`, `reduce`, …).
    pub kind: String,
    /// The names of the ops fused into it, in program order.
    pub ops: Vec<String>,
    /// Times it ran.
    pub calls: u64,
    /// Seconds spent in it over all calls.
    pub total_s: f64,
}

impl KernelProfile {
    /// Mean seconds per call (0 before its first call).
    pub fn mean_s(&self) -> f64 {
        self.total_s / self.calls.max(1) as f64
    }
}

impl Profile {
    /// Seconds spent in all kernels over all runs.
    pub fn total_s(&self) -> f64 {
        self.kernels.iter().map(|k| k.total_s).sum()
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.total_s();
        writeln!(
            f,
            "profile of `{}` (RLX_PROFILE): {} run(s), {:.1} µs of kernels per run",
            self.program,
            self.runs,
            total / self.runs.max(1) as f64 * 1e6
        )?;
        for k in &self.kernels {
            writeln!(
                f,
                "  kernel {:>3}: {:>9.1} µs/run {:>5.1} %  {} [{}]",
                k.index,
                k.mean_s() * 1e6,
                100.0 * k.total_s / total.max(1e-30),
                k.kind,
                k.ops.join(", ")
            )?;
        }
        Ok(())
    }
}
