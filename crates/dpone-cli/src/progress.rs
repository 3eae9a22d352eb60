//! The live progress display of a run on a terminal.
//!
//! Shown only when stderr is a terminal and the output format is text;
//! never in `--format json`. Log lines are written through
//! [`LogWriter`], which suspends the bar while a line is printed, so logs
//! and progress never overwrite each other.

use dpone_engine::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// The bar currently on screen, for the log writer.
static ACTIVE: OnceLock<Mutex<Option<ProgressBar>>> = OnceLock::new();

fn active() -> &'static Mutex<Option<ProgressBar>> {
    ACTIVE.get_or_init(|| Mutex::new(None))
}

#[derive(Debug)]
pub struct TermProgress {
    bar: ProgressBar,
    rows: AtomicU64,
    bytes: AtomicU64,
    phase: Mutex<String>,
    started: Instant,
}

/// A terminal progress display, or None when stderr is not a terminal.
pub fn for_terminal() -> Option<Arc<dyn Progress>> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr_with_hz(8));
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:24} {pos}/{len} chunks  {msg}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(250));
    *active().lock().expect("progress lock") = Some(bar.clone());
    Some(Arc::new(TermProgress {
        bar,
        rows: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        phase: Mutex::new("starting".into()),
        started: Instant::now(),
    }))
}

fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.1} {}", UNITS[i])
}

impl TermProgress {
    fn redraw(&self) {
        let rows = self.rows.load(Ordering::Relaxed);
        let bytes = self.bytes.load(Ordering::Relaxed);
        let secs = self.started.elapsed().as_secs_f64().max(0.001);
        let phase = self.phase.lock().expect("phase lock").clone();
        self.bar.set_message(format!("{phase} · {rows} rows · {} · {:.0} rows/s", human_bytes(bytes), rows as f64 / secs));
    }
}

impl Progress for TermProgress {
    fn phase(&self, name: &str, chunks_total: u64) {
        *self.phase.lock().expect("phase lock") = name.to_string();
        self.bar.set_length(chunks_total);
        self.redraw();
    }

    fn frame(&self, rows: u64, bytes: u64) {
        self.rows.fetch_add(rows, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.redraw();
    }

    fn chunk_done(&self) {
        self.bar.inc(1);
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
        *active().lock().expect("progress lock") = None;
    }
}

impl Drop for TermProgress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

/// stderr for log lines, printed above the progress bar.
#[derive(Clone, Copy, Default)]
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let bar = active().lock().ok().and_then(|g| g.clone());
        match bar {
            Some(b) => b.suspend(|| std::io::stderr().write_all(buf)).map(|_| buf.len()),
            None => std::io::stderr().write_all(buf).map(|_| buf.len()),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;
    fn make_writer(&'a self) -> LogWriter {
        LogWriter
    }
}
