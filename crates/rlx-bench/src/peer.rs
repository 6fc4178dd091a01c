//! PyTorch's rows in the same run as rlx's. A peer script (`peers/*.py`, run by the Python
//! that `--torch` names) times the same work and prints one line per row,
//! `<TAG> <workload> torch_<suffix> median_s=… min_s=… max_s=… repeats=… inner=…`;
//! [`run_script`] runs it, [`parse_line`] reads each line and [`place`] puts the row right
//! after the rlx row it mirrors, credited with that row's bytes or flops, so the table
//! shows both rates side by side; [`add_rows`] does all three. The W4, W11 and OPS peers
//! (`w4_peer.rs`, `w11_peer.rs`, `ops/peer.rs`) differ only in their scripts and in
//! which rlx row each torch row mirrors.

use crate::report::Row;
use crate::timing::Timing;
use std::path::PathBuf;
use std::process::Command;

/// A peer script's path from its path relative to the repository root.
pub(crate) fn script(relative: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join(relative)
}

/// One parsed `<tag>` line: workload, system and its timing.
pub(crate) fn parse_line(tag: &str, line: &str) -> Result<(String, String, Timing), String> {
    let mut f = line.split_whitespace();
    if f.next() != Some(tag) {
        return Err(format!("not a {tag} line: `{line}`"));
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

/// Run `cmd`: its standard output, and an error naming the command when it cannot start
/// or exits with an error (with the end of its standard error).
pub(crate) fn output(mut cmd: Command) -> (String, Option<String>) {
    let out = match cmd.output() {
        Ok(o) => o,
        Err(e) => return (String::new(), Some(format!("cannot start {cmd:?}: {e}"))),
    };
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        return (stdout, None);
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = err.lines().rev().take(5).collect();
    let failed = format!(
        "{cmd:?} failed ({}): {}",
        out.status,
        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
    );
    (stdout, Some(failed))
}

/// Run a peer script: its standard output, and lines for after the table, each starting
/// with `label`: the failure [`output`] reports, and the script's `# …` lines as
/// information.
pub(crate) fn run_script(label: &str, cmd: Command) -> (String, Vec<String>) {
    let (stdout, failed) = output(cmd);
    let mut after: Vec<String> = failed
        .map(|e| format!("{label}: {e}"))
        .into_iter()
        .collect();
    for line in stdout.lines() {
        if let Some(info) = line.strip_prefix("# ") {
            after.push(format!("{label}: {info}"));
        }
    }
    (stdout, after)
}

/// Insert the peer's row `system` of `workload` after the rlx row `rlx` of the same
/// workload (and after any peer rows already placed behind it), credited with that row's
/// bytes or flops and noting rlx's rate over the peer's; returns the new row's index. An
/// error names the missing rlx row.
pub(crate) fn place(
    rows: &mut Vec<Row>,
    (workload, rlx): (&str, &str),
    system: &str,
    t: Timing,
) -> Result<usize, String> {
    let at = rows
        .iter()
        .position(|r| r.workload() == workload && r.system() == rlx)
        .ok_or_else(|| format!("no rlx row {workload} {rlx} for `{system}`"))?;
    let mut pos = at + 1;
    while pos < rows.len()
        && rows[pos].workload() == workload
        && rows[pos].system().starts_with("torch_")
    {
        pos += 1;
    }
    // No ratio against an rlx row without a time (one that did not run).
    let rlx_s = rows[at].median_s();
    let ratio = (rlx_s > 0.0).then(|| t.median_s / rlx_s);
    let mut row = rows[at].peer_of(system, t);
    if let Some(ratio) = ratio {
        row.set_note(&format!("{rlx} runs {ratio:.2}× this rate"));
    }
    rows.insert(pos, row);
    Ok(pos)
}

/// Places every `<tag>` line of a peer script's `stdout` after the rlx row `rlx_for`
/// names for its system ([`place`]); returns a message, starting with `label`, for each
/// line that could not be read or placed.
pub(crate) fn place_lines(
    rows: &mut Vec<Row>,
    stdout: &str,
    (tag, label): (&str, &str),
    rlx_for: impl Fn(&str) -> Option<String>,
) -> Vec<String> {
    let mut errors = Vec::new();
    let prefix = format!("{tag} ");
    for line in stdout.lines().filter(|l| l.starts_with(&prefix)) {
        let placed = parse_line(tag, line).and_then(|(workload, system, t)| {
            let rlx = rlx_for(&system).ok_or_else(|| format!("unexpected system `{system}`"))?;
            place(rows, (&workload, &rlx), &system, t)
        });
        if let Err(e) = placed {
            errors.push(format!("{label}: {e}"));
        }
    }
    errors
}

/// Runs a peer script ([`run_script`]) and places its `<tag>` lines ([`place_lines`]);
/// returns every line for after the table, each starting with `label`.
pub(crate) fn add_rows(
    rows: &mut Vec<Row>,
    cmd: Command,
    (tag, label): (&str, &str),
    rlx_for: impl Fn(&str) -> Option<String>,
) -> Vec<String> {
    let (stdout, mut after) = run_script(label, cmd);
    after.extend(place_lines(rows, &stdout, (tag, label), rlx_for));
    after
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_line_parses_into_its_timing() {
        let (w, s, t) = parse_line(
            "OPSPEER",
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
            "W4PEER W4_matmul_1024 torch_f32_1t median_s=0.01 min_s=0.01 max_s=0.01 repeats=9 inner=1",
        ] {
            assert!(parse_line("OPSPEER", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_missing_or_failing_script_is_reported_with_its_label() {
        let (out, after) = run_script("W4 peer", Command::new("/nonexistent/python-for-rlx"));
        assert!(out.is_empty());
        assert!(
            after.len() == 1 && after[0].starts_with("W4 peer: cannot start"),
            "{after:?}"
        );
        // `false` starts and exits non-zero without printing a line.
        let (out, after) = run_script("W4 peer", Command::new("false"));
        assert!(out.is_empty());
        assert!(after.iter().any(|l| l.contains("failed")), "{after:?}");
    }

    #[test]
    fn a_peer_row_goes_after_its_rlx_row_and_earlier_peer_rows_with_its_flops() {
        let t = |s: f64| Timing {
            median_s: s,
            ..Timing::zero()
        };
        let mut rows = vec![
            Row::new("W4_matmul_1024", "rlx_cpu::sgemm_1t", t(0.01)).flops(2e9),
            Row::new("W4_matmul_1024", "rlx", t(0.005)).flops(2e9),
        ];
        let w = "W4_matmul_1024";
        assert_eq!(
            place(&mut rows, (w, "rlx_cpu::sgemm_1t"), "torch_f32_1t", t(0.02)),
            Ok(1)
        );
        assert_eq!(
            place(&mut rows, (w, "rlx_cpu::sgemm_1t"), "torch_x_1t", t(0.02)),
            Ok(2)
        );
        let systems: Vec<&str> = rows.iter().map(|r| r.system()).collect();
        assert_eq!(
            systems,
            ["rlx_cpu::sgemm_1t", "torch_f32_1t", "torch_x_1t", "rlx"]
        );
        assert_eq!(rows[1].flop_rate(), Some(100.0));
        assert_eq!(
            rows[1].note_text(),
            "rlx_cpu::sgemm_1t runs 2.00× this rate"
        );
        let mut untimed = vec![Row::new(w, "rlx", Timing::zero()).flops(2e9)];
        place(&mut untimed, (w, "rlx"), "torch_f32_2t", t(0.02)).unwrap();
        assert_eq!(untimed[1].note_text(), "", "no ratio against a zero time");
        let missing = place(&mut rows, (w, "rlx_cpu::sgemm_9t"), "torch_f32_9t", t(0.02));
        assert!(
            missing
                .unwrap_err()
                .contains("no rlx row W4_matmul_1024 rlx_cpu::sgemm_9t")
        );
        assert_eq!(rows.len(), 4);
    }
}
