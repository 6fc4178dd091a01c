//! Result rows, the printed table and JSON lines (same keys as `shared/bench/peers.py`).

use crate::timing::Timing;

/// One measurement of one system on one workload.
pub struct Row {
    workload: String,
    system: String,
    t: Timing,
    bytes: Option<f64>,
    flops: Option<f64>,
    gbps: Option<f64>,
    gflops: Option<f64>,
    steps: bool,
    tokens: bool,
    check: Option<f64>,
    note: String,
    bound: Option<Bound>,
}

/// Which machine limit a row is reported against (per-op microbenchmarks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// Memory bandwidth: the STREAM triad (and the in-cache triad, in the note).
    Bandwidth,
    /// The f32 FMA peak.
    Fma,
}

impl Row {
    /// A row with only a timing.
    pub fn new(workload: &str, system: &str, t: Timing) -> Row {
        Row {
            workload: workload.into(),
            system: system.into(),
            t,
            bytes: None,
            flops: None,
            gbps: None,
            gflops: None,
            steps: false,
            tokens: false,
            check: None,
            note: String::new(),
            bound: None,
        }
    }
    /// Nominal bytes moved per call (rate in GB/s).
    pub fn bytes(mut self, b: f64) -> Row {
        self.bytes = Some(b);
        self
    }
    /// Nominal flops per call (rate in GFLOP/s).
    pub fn flops(mut self, f: f64) -> Row {
        self.flops = Some(f);
        self
    }
    /// A rate measured directly in GB/s (probes).
    pub fn gbps(mut self, g: f64) -> Row {
        self.gbps = Some(g);
        self
    }
    /// A rate measured directly in GFLOP/s (probes).
    pub fn gflops(mut self, g: f64) -> Row {
        self.gflops = Some(g);
        self
    }
    /// Also report steps per second.
    pub fn steps(mut self) -> Row {
        self.steps = true;
        self
    }
    /// The timing is seconds per token: the rate is tokens/s (W12).
    pub fn tokens(mut self) -> Row {
        self.tokens = true;
        self
    }
    /// Largest relative difference from the reference result.
    pub fn check(mut self, c: f64) -> Row {
        self.check = Some(c);
        self
    }
    /// Report the row as a fraction of this machine limit.
    #[cfg_attr(not(all(feature = "train", feature = "transforms")), allow(dead_code))]
    pub fn bound(mut self, b: Bound) -> Row {
        self.bound = Some(b);
        self
    }
    /// Free-text note.
    pub fn note(mut self, n: &str) -> Row {
        self.note = n.into();
        self
    }
    /// The workload's name.
    pub fn workload(&self) -> &str {
        &self.workload
    }
    /// The system measured.
    pub fn system(&self) -> &str {
        &self.system
    }
    /// The median time per call, in seconds.
    pub fn median_s(&self) -> f64 {
        self.t.median_s
    }
    /// The rate in GFLOP/s, when the row counts flops.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn flop_rate(&self) -> Option<f64> {
        self.rate_gflops()
    }
    /// The free-text note.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn note_text(&self) -> &str {
        &self.note
    }
    /// Replace the free-text note.
    pub fn set_note(&mut self, n: &str) {
        self.note = n.into();
    }
    /// A peer's row for the same work: `system`'s timing `t`, credited with this row's
    /// bytes, flops and bound (so both print as fractions of the same machine limit).
    pub fn peer_of(&self, system: &str, t: Timing) -> Row {
        Row {
            system: system.into(),
            t,
            check: None,
            note: String::new(),
            bytes: self.bytes,
            flops: self.flops,
            bound: self.bound,
            ..Row::new(&self.workload, system, Timing::zero())
        }
    }
    fn rate_gbps(&self) -> Option<f64> {
        self.gbps.or(self.bytes.map(|b| b / self.t.median_s / 1e9))
    }
    fn rate_gflops(&self) -> Option<f64> {
        self.gflops
            .or(self.flops.map(|f| f / self.t.median_s / 1e9))
    }
    fn rate(&self) -> String {
        if let Some(g) = self.rate_gbps() {
            format!("{g:8.2} GB/s")
        } else if let Some(g) = self.rate_gflops() {
            format!("{g:8.1} GFLOP/s")
        } else if self.tokens {
            format!("{:8.1} tok/s", 1.0 / self.t.median_s)
        } else {
            String::new()
        }
    }

    /// One JSON object in the format of `peers.py` records (rates rounded to 4
    /// decimals; the note escaped as JSON requires).
    pub fn json(&self) -> String {
        let round4 = |x: f64| (x * 1e4).round() / 1e4;
        let mut o = serde_json::Map::new();
        o.insert("peer".into(), self.system.clone().into());
        o.insert("workload".into(), self.workload.clone().into());
        o.insert("median_s".into(), self.t.median_s.into());
        o.insert("min_s".into(), self.t.min_s.into());
        o.insert("max_s".into(), self.t.max_s.into());
        o.insert("repeats".into(), self.t.repeats.into());
        o.insert("inner".into(), self.t.inner.into());
        if let Some(g) = self.rate_gbps() {
            o.insert("gbps".into(), round4(g).into());
        }
        if let Some(g) = self.rate_gflops() {
            o.insert("gflops".into(), round4(g).into());
        }
        if self.steps {
            o.insert("steps_per_s".into(), round4(1.0 / self.t.median_s).into());
        }
        if self.tokens {
            o.insert("tokens_per_s".into(), round4(1.0 / self.t.median_s).into());
        }
        if let Some(c) = self.check {
            o.insert("check".into(), c.into());
        }
        if !self.note.is_empty() {
            o.insert("note".into(), self.note.clone().into());
        }
        serde_json::Value::Object(o).to_string()
    }
}

/// W1's target as a fraction of the triad bandwidth.
const W1_TARGET: f64 = 0.85;

/// The machine bounds measured by the probes: the larger of the 1-thread and all-thread
/// results (on a busy machine the all-thread run can come out lower).
#[derive(Default)]
pub struct Bounds {
    /// STREAM triad GB/s.
    pub triad_gbps: Option<f64>,
    /// FMA peak GFLOP/s.
    pub fma_gflops: Option<f64>,
    /// STREAM triad GB/s on arrays of the per-op microbenchmarks' size (cache-resident).
    pub triad_cache_gbps: Option<f64>,
}

fn fmt_time(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:8.3} s ")
    } else if s >= 1e-3 {
        format!("{:8.3} ms", s * 1e3)
    } else {
        format!("{:8.3} µs", s * 1e6)
    }
}

/// Prints the machine and load the run starts under.
pub fn print_env(threads: usize) {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "rlx-bench: {cpu}, {threads} threads (rayon), load average {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
}

/// The result table: per workload, every system's median and rate; for rlx rows the speedup
/// over the first `ndarray*` row (time ratio, > 1 = rlx faster) and the fraction of the
/// machine bound (W1: triad bandwidth, target ≥ 0.85; W4: FMA peak).
pub fn print_table(rows: &[Row], bounds: &Bounds) {
    println!();
    println!(
        "{:<24} {:<22} {:>11} {:>16} {:>9} {:>9} {:>9}  note",
        "workload", "system", "median", "rate", "vs nd", "vs bound", "check"
    );
    let mut last = "";
    for r in rows {
        if r.workload != last && !last.is_empty() {
            println!();
        }
        last = &r.workload;
        // The first ndarray row of a workload is its baseline (W1: the eager form).
        let nd = rows
            .iter()
            .find(|o| o.workload == r.workload && o.system.starts_with("ndarray"));
        let vs_nd = match nd {
            Some(nd) if !r.system.starts_with("ndarray") => {
                format!("{:8.2}x", nd.t.median_s / r.t.median_s)
            }
            _ => String::new(),
        };
        let vs_bound = if r.bound == Some(Bound::Bandwidth) {
            bounds
                .triad_gbps
                .zip(r.rate_gbps())
                .map(|(b, g)| format!("{:8.2}T", g / b))
        } else if r.bound == Some(Bound::Fma) {
            bounds
                .fma_gflops
                .zip(r.rate_gflops())
                .map(|(b, g)| format!("{:8.2}P", g / b))
        } else if r.workload.starts_with("W1_") {
            bounds
                .triad_gbps
                .zip(r.rate_gbps())
                .map(|(b, g)| format!("{:8.2}T", g / b))
        } else if r.workload.starts_with("W4") {
            bounds
                .fma_gflops
                .zip(r.rate_gflops())
                .map(|(b, g)| format!("{:8.2}P", g / b))
        } else {
            None
        }
        .unwrap_or_default();
        let check = r.check.map(|c| format!("{c:9.1e}")).unwrap_or_default();
        let steps = if r.steps {
            format!(" ({:.1} steps/s)", 1.0 / r.t.median_s)
        } else {
            String::new()
        };
        // W1's goal: rlx within 15 % of the triad bandwidth.
        let target = match (
            r.system == "rlx" && r.workload.starts_with("W1_"),
            bounds.triad_gbps,
            r.rate_gbps(),
        ) {
            (true, Some(b), Some(g)) if g >= W1_TARGET * b => " [W1 target met]",
            (true, Some(_), Some(_)) => " [below the W1 target of 0.85T]",
            _ => "",
        };
        let in_cache = match (r.bound, bounds.triad_cache_gbps, r.rate_gbps()) {
            (Some(Bound::Bandwidth), Some(b), Some(g)) => format!(" [{:.2}Tc]", g / b),
            _ => String::new(),
        };
        let once = if r.t.repeats == 1 && r.t.inner == 1 && r.workload != "W9_compile_latency" {
            " [timed once: slow]"
        } else {
            ""
        };
        println!(
            "{:<24} {:<22} {:>11} {:>16} {:>9} {:>9} {:>9}  {}{in_cache}{steps}{once}{target}",
            r.workload,
            r.system,
            fmt_time(r.t.median_s),
            r.rate(),
            vs_nd,
            vs_bound,
            check,
            r.note
        );
    }
    println!();
    println!(
        "vs nd: ndarray time ÷ this time (> 1: faster than ndarray). vs bound: T = fraction of the"
    );
    println!(
        "STREAM triad bandwidth (W1 target ≥ 0.85), P = fraction of the FMA peak (best of 1 and all threads)."
    );
    if bounds.triad_cache_gbps.is_some() && rows.iter().any(|r| r.bound == Some(Bound::Bandwidth)) {
        println!(
            "Tc: fraction of the triad on arrays of the OPS rows' size (1 MiB each, cache-resident)."
        );
    }
    println!(
        "check: largest |x − ref| / max(1, |ref|) against the ndarray result (W8: hand value)."
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_rows_parse_back_with_rates_and_an_escaped_note() {
        let t = Timing {
            median_s: 0.002,
            min_s: 0.0019,
            max_s: 0.0031,
            repeats: 7,
            inner: 25,
        };
        let row = Row::new("W1", "rlx", t)
            .bytes(3.0e6)
            .steps()
            .check(1.5e-7)
            .note("fused \"a + b\"\nthen relu");
        let v: serde_json::Value = serde_json::from_str(&row.json()).unwrap();
        assert_eq!(v["peer"], "rlx");
        assert_eq!(v["workload"], "W1");
        assert_eq!(v["median_s"], 0.002);
        assert_eq!(v["repeats"], 7);
        assert_eq!(v["inner"], 25);
        // 3e6 bytes in 2 ms: 1.5 GB/s; 500 steps/s.
        assert_eq!(v["gbps"], 1.5);
        assert_eq!(v["steps_per_s"], 500.0);
        assert_eq!(v["check"], 1.5e-7);
        assert_eq!(v["note"], "fused \"a + b\"\nthen relu");
        assert!(v.get("gflops").is_none());
    }

    #[test]
    fn token_rows_report_the_inverse_of_seconds_per_token() {
        let t = Timing {
            median_s: 0.025,
            min_s: 0.02,
            max_s: 0.03,
            repeats: 3,
            inner: 1,
        };
        let row = Row::new("W12_llama100m_decode_f32", "rlx", t).tokens();
        assert_eq!(row.rate().trim(), "40.0 tok/s");
        let v: serde_json::Value = serde_json::from_str(&row.json()).unwrap();
        assert_eq!(v["tokens_per_s"], 40.0);
        assert!(v.get("gbps").is_none());
    }
}
