//! PyTorch's W11 training step in the same run (`--torch PATH`, see `peer.rs`):
//! `peers/w11_torch_bf16.py --rows` runs the same GPT step eagerly in f32 (`--f32`) and
//! under `torch.autocast` in bf16, each for as many steps as rlx's rows, and prints a
//! `W11PEER W11_gpt_train_step torch_<f32|bf16> median_s=… …` line. The f32 row goes
//! below rlx's f32 row, the bf16 row below `rlx_bf16` (bf16 products, f32 master weights).

use crate::peer;
use crate::report::Row;
use std::process::Command;

/// The peer script, relative to the repository root.
const SCRIPT: &str = "crates/rlx-bench/peers/w11_torch_bf16.py";

/// The rlx row a torch W11 row mirrors: `torch_f32` → `rlx`, `torch_bf16` → `rlx_bf16`.
pub(crate) fn rlx_system_for(peer_system: &str) -> Option<String> {
    match peer_system {
        "torch_f32" => Some("rlx".into()),
        "torch_bf16" => Some("rlx_bf16".into()),
        _ => None,
    }
}

/// Runs the peer in f32 and in bf16 autocast for `steps` steps on `threads` threads and
/// adds its rows; returns lines to print after the table (losses, failures).
pub(crate) fn add_rows(
    rows: &mut Vec<Row>,
    python: &str,
    steps: usize,
    threads: usize,
) -> Vec<String> {
    let mut after = Vec::new();
    for precision in [Some("--f32"), None] {
        let mut cmd = Command::new(python);
        cmd.arg(peer::script(SCRIPT))
            .arg("--rows")
            .args(["--steps", &steps.to_string()])
            .args(["--threads", &threads.to_string()])
            .args(precision)
            .env("OMP_NUM_THREADS", threads.to_string());
        after.extend(peer::add_rows(
            rows,
            cmd,
            ("W11PEER", "W11 peer"),
            rlx_system_for,
        ));
    }
    after
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timing::Timing;

    #[test]
    fn torch_rows_map_to_the_rlx_step_of_their_precision() {
        assert_eq!(rlx_system_for("torch_f32").as_deref(), Some("rlx"));
        assert_eq!(rlx_system_for("torch_bf16").as_deref(), Some("rlx_bf16"));
        assert_eq!(rlx_system_for("torch_bf16_autocast"), None);
        assert_eq!(rlx_system_for("torch_compile_f32"), None);
    }

    #[test]
    fn a_missing_python_is_reported_for_each_precision_and_adds_no_rows() {
        let mut rows = vec![Row::new("W11_gpt_train_step", "rlx", Timing::zero())];
        let after = add_rows(&mut rows, "/nonexistent/python-for-rlx-bench", 20, 2);
        assert_eq!(rows.len(), 1);
        let cannot: Vec<&String> = after
            .iter()
            .filter(|l| l.starts_with("W11 peer: cannot start"))
            .collect();
        assert_eq!(cannot.len(), 2, "{after:?}");
    }
}
