//! PyTorch's W4 rows in the same run (`--torch PATH`, see `peer.rs`): `peers/w4_torch.py
//! --rows` times `torch.matmul` in f32 (MKL), bf16 and f16 (oneDNN, AMX where present)
//! and `torch._int_mm` in int8 on 1 and all of rlx's threads, and prints one
//! `W4PEER W4_matmul_<n> torch_<dtype>_<threads>t median_s=… …` line per product. Each
//! becomes a row right after the rlx kernel row of the same dtype and thread count, with
//! a note giving rlx's rate over torch's. On all threads it also times the decoding-step
//! products of `W4_decode_4096` in f32 and bf16 (`torch_f32_rows<m>`,
//! `torch_bf16_rows<m>`, and `_wt` with the weight stored `[out, in]`), placed after
//! rlx's rows of the same name.

use crate::peer;
use crate::report::Row;
use std::process::Command;

/// The peer script, relative to the repository root.
const SCRIPT: &str = "crates/rlx-bench/peers/w4_torch.py";

/// The rlx row a torch W4 row mirrors: `torch_f32_<t>t` → `rlx_cpu::sgemm_<t>t`,
/// `torch_bf16_<t>t` / `torch_f16_<t>t` → `rlx_cpu::gemm_half_<dtype>_<t>t`,
/// `torch_int8_<t>t` → `rlx_cpu::gemm_i8_<t>t`.
pub(crate) fn rlx_system_for(peer_system: &str) -> Option<String> {
    let rest = peer_system.strip_prefix("torch_")?;
    // The decoding-step rows: `torch_<f32|bf16>_rows<m>[_wt]` → `rlx_<dtype>_rows<m>[_wt]`.
    for dtype in ["f32", "bf16"] {
        if let Some(shape) = rest
            .strip_prefix(dtype)
            .and_then(|r| r.strip_prefix("_rows"))
        {
            let m = shape.strip_suffix("_wt").unwrap_or(shape);
            return (!m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))
                .then(|| format!("rlx_{dtype}_rows{shape}"));
        }
    }
    let (dtype, threads) = rest.split_once('_')?;
    let count = threads.strip_suffix('t')?;
    if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(match dtype {
        "f32" => format!("rlx_cpu::sgemm_{threads}"),
        "bf16" | "f16" => format!("rlx_cpu::gemm_half_{dtype}_{threads}"),
        "int8" => format!("rlx_cpu::gemm_i8_{threads}"),
        _ => return None,
    })
}

/// Runs the peer script with `python` on 1 and `threads` threads and adds its rows;
/// returns lines to print after the table (failures, rows without an rlx row).
pub(crate) fn add_rows(rows: &mut Vec<Row>, python: &str, threads: usize) -> Vec<String> {
    let mut cmd = Command::new(python);
    cmd.arg(peer::script(SCRIPT))
        .arg("--rows")
        .args(["--threads", &threads.to_string()])
        .env("OMP_NUM_THREADS", threads.to_string());
    peer::add_rows(rows, cmd, ("W4PEER", "W4 peer"), rlx_system_for)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timing::Timing;

    #[test]
    fn torch_rows_map_to_the_rlx_kernel_row_of_their_dtype_and_threads() {
        let map = |s: &str| rlx_system_for(s);
        assert_eq!(map("torch_f32_1t").as_deref(), Some("rlx_cpu::sgemm_1t"));
        assert_eq!(map("torch_f32_16t").as_deref(), Some("rlx_cpu::sgemm_16t"));
        assert_eq!(
            map("torch_bf16_2t").as_deref(),
            Some("rlx_cpu::gemm_half_bf16_2t")
        );
        assert_eq!(
            map("torch_f16_1t").as_deref(),
            Some("rlx_cpu::gemm_half_f16_1t")
        );
        assert_eq!(map("torch_int8_2t").as_deref(), Some("rlx_cpu::gemm_i8_2t"));
        assert_eq!(map("torch_f32_rows8").as_deref(), Some("rlx_f32_rows8"));
        assert_eq!(
            map("torch_f32_rows1_wt").as_deref(),
            Some("rlx_f32_rows1_wt")
        );
        assert_eq!(map("torch_bf16_rows8").as_deref(), Some("rlx_bf16_rows8"));
        assert_eq!(
            map("torch_bf16_rows1_wt").as_deref(),
            Some("rlx_bf16_rows1_wt")
        );
        for bad in [
            "torch_f32_rows",
            "torch_f32_rows_wt",
            "torch_f32_rows1_x",
            "torch_bf16_rows",
            "torch_bf16_rows8_x",
            "torch_fp8_1t",
            "torch_f32",
            "torch_f32_t",
            "torch_f32_2x",
            "numpy_f32_1t",
        ] {
            assert_eq!(map(bad), None, "{bad}");
        }
    }

    #[test]
    fn peer_lines_land_after_their_rlx_rows_with_the_rate_ratio() {
        let t = |s: f64| Timing {
            median_s: s,
            ..Timing::zero()
        };
        let w = "W4_matmul_1024";
        let mut rows = vec![
            Row::new(w, "rlx_cpu::sgemm_1t", t(0.010)).flops(2e9),
            Row::new(w, "rlx_cpu::gemm_i8_1t", t(0.001)).flops(2e9),
        ];
        let out = "# torch 2.15\n\
            W4PEER W4_matmul_1024 torch_f32_1t median_s=0.012 min_s=0.011 max_s=0.013 repeats=9 inner=1\n\
            W4PEER W4_matmul_1024 torch_int8_1t median_s=0.0015 min_s=0.0014 max_s=0.002 repeats=9 inner=1\n\
            W4PEER W4_matmul_1024 torch_bf16_1t median_s=0.002 min_s=0.002 max_s=0.002 repeats=9 inner=1\n\
            W4PEER W4_matmul_1024 torch_f32_1t median_s=oops min_s=1 max_s=1 repeats=1 inner=1\n";
        let after = peer::place_lines(&mut rows, out, ("W4PEER", "W4 peer"), rlx_system_for);
        let systems: Vec<&str> = rows.iter().map(|r| r.system()).collect();
        assert_eq!(
            systems,
            [
                "rlx_cpu::sgemm_1t",
                "torch_f32_1t",
                "rlx_cpu::gemm_i8_1t",
                "torch_int8_1t"
            ]
        );
        assert_eq!(rows[1].flop_rate(), Some(2e9 / 0.012 / 1e9));
        assert!(
            rows[1].note_text().contains("runs 1.20× this rate"),
            "{}",
            rows[1].note_text()
        );
        assert!(
            rows[3].note_text().contains("runs 1.50× this rate"),
            "{}",
            rows[3].note_text()
        );
        // No bf16 row in rlx's table, and a malformed line: both reported, nothing added.
        assert_eq!(after.len(), 2, "{after:?}");
        assert!(after[0].contains("no rlx row W4_matmul_1024 rlx_cpu::gemm_half_bf16_1t"));
        assert!(after[1].contains("median_s=oops"));
    }

    #[test]
    fn a_missing_python_is_reported_and_adds_no_rows() {
        let mut rows = vec![Row::new(
            "W4_matmul_1024",
            "rlx_cpu::sgemm_1t",
            Timing::zero(),
        )];
        let after = add_rows(&mut rows, "/nonexistent/python-for-rlx-bench", 2);
        assert_eq!(rows.len(), 1);
        assert!(
            after.iter().any(|l| l.starts_with("W4 peer: cannot start")),
            "{after:?}"
        );
    }
}
