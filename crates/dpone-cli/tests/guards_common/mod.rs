//! Helpers of the guard tests (`guards_*.rs`, `external_kill.rs`): running
//! `dpone` in the background, waiting for a moment of the run, a seeded
//! random number generator.
#![allow(dead_code)]

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub const DPONE: &str = env!("CARGO_BIN_EXE_dpone");

/// `dpone <args>` started in `dir` with a clean `DPONE_*` environment plus
/// `env`, its output captured.
pub fn spawn(dir: &std::path::Path, args: &[&str], env: &[(String, String)]) -> Child {
    let mut cmd = Command::new(DPONE);
    cmd.args(args).current_dir(dir).env("RUST_BACKTRACE", "1").stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("DPONE_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("the dpone binary starts")
}

/// Waits for a spawned run; panics after `limit`.
pub fn wait(child: Child, limit: Duration) -> Output {
    let pid = child.id();
    let deadline = Instant::now() + limit;
    let mut child = child;
    loop {
        if child.try_wait().expect("wait for dpone").is_some() {
            return child.wait_with_output().expect("dpone's output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("dpone (pid {pid}) did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `kill -9` of a spawned run; its output.
pub fn kill9(mut child: Child) -> Output {
    let _ = child.kill();
    child.wait_with_output().expect("dpone's output")
}

/// Polls `cond` every 20 ms until it holds; panics with `what` after `limit`.
pub fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out after {limit:?} waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The output of `child`, a run pausing at failpoint `point`: once `ready`
/// finds what to tamper with (polled until `limit`), `tamper` changes it
/// while the run waits.
pub fn tamper_while_paused<T>(
    child: Child,
    point: &str,
    limit: Duration,
    mut ready: impl FnMut() -> Option<T>,
    tamper: impl FnOnce(T),
) -> Output {
    let mut child = child;
    let deadline = Instant::now() + limit;
    let found = loop {
        if let Some(found) = ready() {
            break found;
        }
        // A run that ended, or never got there, says why in its output.
        let ended = child.try_wait().expect("wait for dpone").is_some();
        if ended || Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("dpone's output");
            panic!(
                "the run did not pause at {point} within {limit:?} ({}):\nstdout: {}\nstderr: {}",
                if ended { "it ended" } else { "killed" },
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    tamper(found);
    wait(child, limit)
}

/// The first error of a run's report says `text`.
pub fn assert_first_error_says(doc: &serde_json::Value, text: &str, what: &str) {
    let message = doc["errors"][0]["message"].as_str().unwrap_or("");
    assert!(message.contains(text), "{what}: expected the first error to say `{text}`: {doc:#}");
}

/// The single JSON document on a run's stdout.
pub fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("expected one JSON document on stdout ({e}):\n{}", describe(out)))
}

/// A run's exit and output, for assertion messages.
pub fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Asserts a run that failed with `code`: exit 1, `status: failed`, nothing published.
pub fn assert_refused(out: &Output, code: &str, what: &str) -> serde_json::Value {
    let doc = json(out);
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!all.contains("panicked"), "{what}: the binary panicked:\n{}", describe(out));
    assert!(
        out.status.code() == Some(1) && doc["error_code"] == code && doc["status"] == "failed",
        "{what}: expected exit 1, `status: failed`, `error_code: {code}`:\n{}",
        describe(out)
    );
    assert_ne!(doc["publication"], "published", "{what}: a refused run publishes nothing:\n{}", describe(out));
    doc
}

/// A small deterministic generator (SplitMix64): seeded test schedules
/// that a failure report can reproduce.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, n)`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// The seed of a randomized test: `DPONE_TEST_SEED` if set (to reproduce a
/// failure), else one derived from the clock; printed either way.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("DPONE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1));
    eprintln!("{test}: seed {seed} (rerun with DPONE_TEST_SEED={seed})");
    seed
}
