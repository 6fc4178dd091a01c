//! PyTorch's timings of the OPS rows in the same run (`--torch PATH`, see `peer.rs`): the
//! script `peers/ops_torch.py` times each op at the same shapes and prints one
//! `OPSPEER <workload> torch_<suffix> median_s=… min_s=… max_s=… repeats=… inner=…` line
//! per row; each becomes a row credited with the bytes or flops of the rlx row
//! `rlx_<suffix>` of the same workload, inserted after it.

use crate::peer;
use crate::report::Row;
use crate::timing::Plan;
use rlx_bench::gpt::GptConfig;
use std::process::Command;

/// The peer script, relative to the repository root.
const SCRIPT: &str = "crates/rlx-bench/peers/ops_torch.py";

/// The rlx system a peer's system is compared with: `torch_<suffix>` → `rlx_<suffix>`;
/// AdamW's fused and foreach updates both against rlx's f32-math step.
pub(crate) fn rlx_system_for(peer_system: &str) -> Option<String> {
    let suffix = peer_system.strip_prefix("torch_")?;
    Some(match suffix {
        "f32_fused" => "rlx_f32".into(),
        s => format!("rlx_{s}"),
    })
}

/// `--adamw-shapes` for the script: W11's parameters, as the rlx AdamW row updates them.
fn adamw_shapes(c: &GptConfig) -> String {
    c.param_shapes()
        .iter()
        .map(|(_, d)| {
            d.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join("x")
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Adds the peer's rows after their rlx rows; returns lines to print after the table
/// (failures, lines without an rlx row).
pub(crate) fn add_rows(rows: &mut Vec<Row>, plan: Plan, python: &str) -> Vec<String> {
    let threads = rayon::current_num_threads().to_string();
    let mut cmd = Command::new(python);
    cmd.arg(peer::script(SCRIPT))
        .args(["--repeats", &plan.repeats.to_string()])
        .args(["--warmup", &plan.warmup.to_string()])
        .args(["--adamw-shapes", &adamw_shapes(&GptConfig::w11(4))])
        .env("OMP_NUM_THREADS", &threads);
    if let Ok(only) = std::env::var("RLX_OPS_ONLY") {
        cmd.args(["--only", &only]);
    }
    peer::add_rows(rows, cmd, ("OPSPEER", "OPS peer"), rlx_system_for)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timing::Timing;

    #[test]
    fn peer_systems_map_to_the_rlx_row_they_mirror() {
        assert_eq!(rlx_system_for("torch_bwd").as_deref(), Some("rlx_bwd"));
        assert_eq!(
            rlx_system_for("torch_k256_n768").as_deref(),
            Some("rlx_k256_n768")
        );
        assert_eq!(
            rlx_system_for("torch_f32_fused").as_deref(),
            Some("rlx_f32")
        );
        assert_eq!(rlx_system_for("candle_fwd"), None);
    }

    fn plan() -> Plan {
        Plan {
            warmup: 0,
            repeats: 1,
        }
    }

    #[test]
    fn a_missing_or_failing_peer_is_reported_and_adds_no_rows() {
        let t = Timing::zero();
        let mut rows = vec![Row::new("OPS_layer_norm", "rlx_fwd", t)];
        let after = add_rows(&mut rows, plan(), "/nonexistent/python-for-rlx-bench");
        assert_eq!(rows.len(), 1);
        assert!(
            after.iter().any(|l| l.contains("cannot start")),
            "{after:?}"
        );
        // `false` starts and exits non-zero without printing a line.
        let after = add_rows(&mut rows, plan(), "false");
        assert_eq!(rows.len(), 1);
        assert!(after.iter().any(|l| l.contains("failed")), "{after:?}");
    }

    #[test]
    fn adamw_shapes_list_every_w11_parameter() {
        let c = GptConfig::w11(4);
        let s = adamw_shapes(&c);
        assert_eq!(s.split(',').count(), c.param_shapes().len());
        let total: usize = s
            .split(',')
            .map(|d| {
                d.split('x')
                    .map(|x| x.parse::<usize>().unwrap())
                    .product::<usize>()
            })
            .sum();
        assert_eq!(total, c.param_count());
    }
}
