//! The `dpone` binary; everything lives in the library (`lib.rs`), so that
//! test builds can switch on its test-only feature.

fn main() -> std::process::ExitCode {
    tune_allocator();
    dpone_cli::main()
}

/// Blocks of 128 KiB and more (frames, encoded COPY pieces, HTTP read
/// buffers) are mapped and unmapped on their own instead of coming from the
/// heap: glibc otherwise raises this threshold after the first such block is
/// freed, and the freed blocks then stay resident in the heaps of the worker
/// threads. Measured on a 5M-row ClickHouse -> PostgreSQL window: peak RSS
/// 3.5 MiB lower, about 0.3 s more system CPU, no wall time change visible
/// in three alternated runs (the development measurement of that route's
/// memory, docs/bench-results/dev-ch_to_postgres-20261202-memory.summary.json).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn tune_allocator() {
    // SAFETY: mallopt only sets an allocator parameter; it is called before
    // the runtime starts any thread, and any value is valid for it (a
    // refusal leaves glibc's default in place).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn tune_allocator() {}
