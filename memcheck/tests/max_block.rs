//! `DIPU_MEM_CHECK_MAX_BLOCK` and `DIPU_MEM_CHECK_LOG_INTERVAL`: beyond the
//! limit, one warning naming the count and the bytes every interval of
//! allocations, and the checker keeps recording. (A test binary of its
//! own: the checker's state is per process.)

use std::io::Write;
use std::sync::{Arc, Mutex};

use dipu_memcheck::{on_alloc, on_free, records_count, Config, Location};

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn warns_once_per_interval_beyond_the_limit_and_keeps_working() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    Config {
        enabled: true,
        backtraces: false,
        max_block: 5,
        log_interval: 10,
        log_file: None,
        ..Config::default()
    }
    .apply();

    // 40 live blocks of 100 bytes: sequence numbers 0..40, so the checks
    // at 0, 10, 20 and 30 see 1, 11, 21 and 31 blocks; the last three are
    // over the limit of 5.
    let base = 0x7000_0000usize;
    for i in 0..40 {
        on_alloc(base + i * 4096, 100, Location::Device(0), None);
    }
    assert_eq!(
        records_count(),
        40,
        "the checker kept recording past the limit"
    );
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let warnings: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("exceed DIPU_MEM_CHECK_MAX_BLOCK=5"))
        .collect();
    assert_eq!(
        warnings.len(),
        3,
        "one warning per 10 allocations beyond 5 blocks:\n{text}"
    );
    for (line, (blocks, bytes)) in warnings.iter().zip([(11, 1100), (21, 2100), (31, 3100)]) {
        assert!(
            line.contains(&format!("{blocks} live blocks ({bytes} bytes)")),
            "expected {blocks} blocks, {bytes} bytes in: {line}"
        );
    }

    // Back under the limit: no more warnings.
    for i in 0..40 {
        on_free(base + i * 4096);
    }
    captured.0.lock().unwrap().clear();
    for i in 0..20 {
        on_alloc(base + i * 4096, 100, Location::Device(0), None);
        on_free(base + i * 4096);
    }
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(!text.contains("exceed"), "warned below the limit:\n{text}");
    assert_eq!(records_count(), 0);
}
