//! What the matmul examples share: the CPU's name, and running a peer script under the
//! peers' Python (`$RLX_PEER_PYTHON`, else `/tmp/peers/bin/python`).

/// The CPU's model name from `/proc/cpuinfo` ("unknown CPU" elsewhere).
pub fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            let l = s.lines().find(|l| l.starts_with("model name"))?;
            Some(l.split(':').nth(1)?.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// Standard output of `python -c script`, or `None` (said why on stdout) when the
/// interpreter is missing or the script fails.
pub fn run_python(script: &str) -> Option<String> {
    let py = std::env::var("RLX_PEER_PYTHON").unwrap_or_else(|_| "/tmp/peers/bin/python".into());
    if !std::path::Path::new(&py).exists() {
        println!("torch: {py} not found; no peer comparison");
        return None;
    }
    let out = std::process::Command::new(&py)
        .args(["-c", script])
        .output()
        .ok()?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        println!(
            "torch: {py} failed: {}",
            err.lines().last().unwrap_or("(no message)")
        );
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `n` seeded pseudo-random values in [−1, 1) (an LCG: the same data on every run).
pub fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}
