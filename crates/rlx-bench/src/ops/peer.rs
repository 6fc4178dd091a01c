//! PyTorch's timings of the OPS rows in the same run (`--ops-python PATH`): the script
//! `peers/ops_torch.py` times each op at the same shapes and prints one
//! `OPSPEER <workload> torch_<suffix> median_s=… min_s=… max_s=… repeats=… inner=…` line
//! per row; each becomes a row credited with the bytes or flops of the rlx row
//! `rlx_<suffix>` of the same workload, inserted after it.

use crate::report::Row;
use crate::timing::{Plan, Timing};
use rlx_bench::gpt::GptConfig;
use std::path::Path;
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

/// One parsed `OPSPEER` line: workload, system and its timing.
pub(crate) fn parse_line(line: &str) -> Result<(String, String, Timing), String> {
    let mut f = line.split_whitespace();
    if f.next() != Some("OPSPEER") {
        return Err(format!("not an OPSPEER line: `{line}`"));
    }
    let (Some(workload), Some(system)) = (f.next(), f.next()) else {
        return Err(format!("`{line}` lacks a workload and a system"));
    };
    let fields: Vec<(&str, &str)> = f.filter_map(|kv| kv.split_once('=')).collect();
    let get = |key: &str| -> Result<f64, String> {
        let v = fields
            .iter()
            .find(|(k, _)| *k == key)
            .ok_or_else(|| format!("`{key}` missing from `{line}`"))?
            .1;
        v.parse::<f64>()
            .map_err(|e| format!("`{key}={v}` in `{line}`: {e}"))
    };
    let t = Timing {
        median_s: get("median_s")?,
        min_s: get("min_s")?,
        max_s: get("max_s")?,
        repeats: get("repeats")? as usize,
        inner: get("inner")? as usize,
    };
    if t.median_s.is_nan() || t.median_s <= 0.0 {
        return Err(format!("`{line}`: the median must be a positive time"));
    }
    Ok((workload.into(), system.into(), t))
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
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let threads = rayon::current_num_threads().to_string();
    let mut cmd = Command::new(python);
    cmd.arg(root.join(SCRIPT))
        .args(["--repeats", &plan.repeats.to_string()])
        .args(["--warmup", &plan.warmup.to_string()])
        .args(["--adamw-shapes", &adamw_shapes(&GptConfig::w11(4))])
        .env("OMP_NUM_THREADS", &threads);
    if let Ok(only) = std::env::var("RLX_OPS_ONLY") {
        cmd.args(["--only", &only]);
    }
    let out = match cmd.output() {
        Ok(o) => o,
        Err(e) => return vec![format!("OPS peer: cannot start {cmd:?}: {e}")],
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut after = Vec::new();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(5).collect();
        after.push(format!(
            "OPS peer: {cmd:?} failed ({}): {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ));
    }
    for line in stdout.lines() {
        if let Some(info) = line.strip_prefix("# ") {
            after.push(format!("OPS peer: {info}"));
            continue;
        }
        if !line.starts_with("OPSPEER ") {
            continue;
        }
        let (workload, system, t) = match parse_line(line) {
            Ok(p) => p,
            Err(e) => {
                after.push(format!("OPS peer: {e}"));
                continue;
            }
        };
        let Some(rlx) = rlx_system_for(&system) else {
            after.push(format!("OPS peer: unexpected system `{system}`"));
            continue;
        };
        let Some(at) = rows
            .iter()
            .position(|r| r.workload() == workload && r.system() == rlx)
        else {
            after.push(format!(
                "OPS peer: no rlx row {workload} {rlx} for `{system}`"
            ));
            continue;
        };
        // After the rlx row and any peer rows already placed behind it.
        let mut pos = at + 1;
        while pos < rows.len()
            && rows[pos].workload() == workload
            && rows[pos].system().starts_with("torch_")
        {
            pos += 1;
        }
        let row = rows[at].peer_of(&system, t);
        rows.insert(pos, row);
    }
    after
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_line_parses_into_its_timing() {
        let (w, s, t) = parse_line(
            "OPSPEER OPS_layer_norm torch_bwd median_s=0.0002 min_s=0.00019 max_s=0.0003 repeats=7 inner=250",
        )
        .unwrap();
        assert_eq!((w.as_str(), s.as_str()), ("OPS_layer_norm", "torch_bwd"));
        assert_eq!((t.median_s, t.min_s, t.max_s), (0.0002, 0.00019, 0.0003));
        assert_eq!((t.repeats, t.inner), (7, 250));
    }

    #[test]
    fn malformed_peer_lines_are_named_errors() {
        for bad in [
            "OPSPEER OPS_x",
            "OPSPEER OPS_x torch_fwd min_s=1 max_s=1 repeats=1 inner=1",
            "OPSPEER OPS_x torch_fwd median_s=abc min_s=1 max_s=1 repeats=1 inner=1",
            "OPSPEER OPS_x torch_fwd median_s=0 min_s=0 max_s=0 repeats=1 inner=1",
            "W12PEER torch f32",
        ] {
            assert!(parse_line(bad).is_err(), "{bad}");
        }
    }

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
