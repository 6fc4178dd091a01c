//! A device choice that is not the one asked for is a `debug` event of target
//! `rlx::device` (its own test binary: it sets `RLX_FORCE_DEVICE` for the process).
#![cfg(feature = "eval")]

use rlx_tensor::Tensor;
use std::io::Write;
use std::sync::{Arc, Mutex};

/// A log sink the test reads back.
#[derive(Clone)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn an_unknown_forced_device_is_logged_as_a_fallback_on_rlx_device() {
    // SAFETY: this binary's only test sets the variable before it starts any thread
    // that reads the environment.
    unsafe { std::env::set_var("RLX_FORCE_DEVICE", "warp-drive") };
    let sink = Sink(Arc::new(Mutex::new(Vec::new())));
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let values = tracing::subscriber::with_default(subscriber, || {
        (Tensor::from_vec(vec![1.0, -1.0], [2]) * 2.0).to_vec()
    });
    assert_eq!(values, vec![2.0, -2.0]);
    let log = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    let line = log
        .lines()
        .find(|l| l.contains("rlx::device"))
        .unwrap_or_else(|| panic!("no rlx::device event in:\n{log}"));
    assert!(line.contains("DEBUG"), "{line}");
    assert!(line.contains("\"warp-drive\" names no device"), "{line}");
    assert!(line.contains("using CPU"), "{line}");
}
