//! Helpers shared by the crash-recovery tests (`recovery_*.rs`).
//!
//! The tests run the real `dpone` binary, make it abort at a failpoint
//! (`DPONE_FAILPOINT=<name>[:<n>]`: SIGABRT, no destructors, no cleanup,
//! as close to `kill -9` as a test gets), then run the same command again
//! and compare the target with the expected multiset of rows exactly.
//!
//! - this file: running `dpone` (in the foreground or the background),
//!   reading its JSON and its exit status, polling;
//! - `pgch.rs`: a PostgreSQL source schema and a ClickHouse target database
//!   per test (typed rows, decoded from `FORMAT RowBinary`);
//! - `sqlite.rs`: SQLite source and target files per test.
#![allow(dead_code)]

pub mod pgch;
pub mod sqlite;

#[path = "../crash_points/mod.rs"]
mod crash_points;
pub use crash_points::*;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub const DPONE: &str = env!("CARGO_BIN_EXE_dpone");

/// SIGABRT: what `std::process::abort` at a failpoint ends with.
pub const SIGABRT: i32 = 6;

// ---------------------------------------------------------------------------
// One invocation
// ---------------------------------------------------------------------------

/// What one invocation of `dpone` produced.
#[derive(Debug)]
pub struct Run {
    pub args: Vec<String>,
    /// The `DPONE_*` test variables set for this run (connections left out).
    pub env: Vec<(String, String)>,
    pub code: Option<i32>,
    /// The signal that ended the process, if any.
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    fn from_output(args: Vec<String>, env: Vec<(String, String)>, status: ExitStatus, stdout: &[u8], stderr: &[u8]) -> Run {
        Run {
            args,
            env,
            code: status.code(),
            signal: status.signal(),
            stdout: String::from_utf8_lossy(stdout).into_owned(),
            stderr: String::from_utf8_lossy(stderr).into_owned(),
        }
    }

    /// The command and its output, for assertion messages.
    pub fn describe(&self) -> String {
        let env: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
        format!(
            "`{}dpone {}` (exit {:?}, signal {:?})\n--- stdout ---\n{}\n--- stderr ---\n{}",
            env.concat(),
            self.args.join(" "),
            self.code,
            self.signal,
            self.stdout,
            self.stderr
        )
    }

    /// The single JSON document on stdout.
    pub fn json(&self) -> serde_json::Value {
        let docs: Vec<serde_json::Value> = serde_json::Deserializer::from_str(&self.stdout)
            .into_iter::<serde_json::Value>()
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("expected JSON on stdout ({e}):\n{}", self.describe()));
        assert_eq!(docs.len(), 1, "expected exactly one JSON document on stdout:\n{}", self.describe());
        docs.into_iter().next().expect("one document")
    }

    /// Panics if the process panicked instead of reporting an error.
    pub fn assert_no_panic(&self) {
        let all = format!("{}\n{}", self.stdout, self.stderr);
        for needle in ["panicked", "stack backtrace"] {
            assert!(!all.contains(needle), "expected no panic, found `{needle}`:\n{}", self.describe());
        }
    }

    /// Asserts that the process aborted at `point` (SIGABRT, no exit code).
    pub fn assert_aborted_at(&self, point: &str) {
        self.assert_no_panic();
        assert!(
            self.code.is_none() && self.signal == Some(SIGABRT),
            "expected the process to abort (SIGABRT, no exit code) at failpoint {point}:\n{}",
            self.describe()
        );
        assert!(
            self.stderr.contains(&format!("failpoint {point} fired")),
            "expected stderr to say that failpoint {point} fired:\n{}",
            self.describe()
        );
    }

    /// Asserts exit 0 and `passed: true`; returns the JSON report.
    pub fn assert_succeeded(&self, what: &str) -> serde_json::Value {
        self.assert_no_panic();
        assert_eq!(self.code, Some(0), "{what}: expected exit 0:\n{}", self.describe());
        let doc = self.json();
        assert_eq!(doc["passed"], true, "{what}: expected `passed: true`:\n{}", self.describe());
        assert_eq!(doc["status"], "succeeded", "{what}: expected `status: succeeded`:\n{}", self.describe());
        assert_eq!(doc["publication"], "published", "{what}: expected `publication: published`:\n{}", self.describe());
        doc
    }

    /// Asserts a failed run: exit `code`, JSON `error_code`; returns the JSON.
    pub fn assert_failed(&self, what: &str, exit: i32, error_code: &str) -> serde_json::Value {
        self.assert_no_panic();
        let doc = self.json();
        assert!(
            self.code == Some(exit) && doc["error_code"] == error_code && doc["passed"] == false,
            "{what}: expected exit {exit} with `error_code: {error_code}` and `passed: false`:\n{}",
            self.describe()
        );
        doc
    }
}

/// `dpone` with a clean `DPONE_*` environment (plus `env`) in `cwd`;
/// `RUST_BACKTRACE=1` makes a panic visible.
pub fn command(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(DPONE);
    cmd.args(args).current_dir(cwd).env("RUST_BACKTRACE", "1").env_remove("DPONE_LOG");
    for (k, _) in std::env::vars() {
        if k.starts_with("DPONE_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

fn owned(args: &[&str], env: &[(&str, &str)]) -> (Vec<String>, Vec<(String, String)>) {
    (
        args.iter().map(|s| s.to_string()).collect(),
        env.iter().filter(|(k, _)| !k.starts_with("DPONE_CONN_")).map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    )
}

/// Runs `dpone` to completion.
pub fn run(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let out = command(cwd, args, env).output().expect("the dpone binary starts");
    let (args, env) = owned(args, env);
    Run::from_output(args, env, out.status, &out.stdout, &out.stderr)
}

/// A `dpone` process running in the background.
pub struct Background {
    child: Option<Child>,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

/// Starts `dpone` in the background (stdout and stderr captured).
pub fn spawn(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Background {
    let child = command(cwd, args, env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the dpone binary starts");
    let (args, env) = owned(args, env);
    Background { child: Some(child), args, env }
}

impl Background {
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("a running child").id()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().expect("a running child").try_wait(), Ok(None))
    }

    /// Sends `signal` (e.g. `INT`) with kill(1).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill").arg(format!("-{signal}")).arg(self.pid().to_string()).status().expect("kill(1) runs");
        assert!(status.success(), "kill -{signal} {} failed", self.pid());
    }

    /// Waits for the process and returns what it produced.
    pub fn wait(mut self) -> Run {
        let child = self.child.take().expect("a running child");
        let out = child.wait_with_output().expect("waiting for dpone");
        Run::from_output(std::mem::take(&mut self.args), std::mem::take(&mut self.env), out.status, &out.stdout, &out.stderr)
    }
}

impl Drop for Background {
    /// A failing test must not leave its own child running.
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Polls `done` every 50 ms until it returns true; panics after `timeout`.
pub fn wait_until(timeout: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < timeout, "timed out after {timeout:?} waiting until {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------------------
// `dpone status --format json`
// ---------------------------------------------------------------------------

/// The journal's state (`planned`, `staging`, ... or null when none).
pub fn state_of(status: &serde_json::Value) -> String {
    status["state"].as_str().unwrap_or("none").to_string()
}

/// `(index, staging table)` of every chunk the journal records as verified.
pub fn verified_stagings(status: &serde_json::Value) -> Vec<(u64, String)> {
    status["journal"]["chunks"]
        .as_object()
        .map(|chunks| {
            chunks
                .values()
                .filter(|c| c["state"] == "verified")
                .map(|c| (c["index"].as_u64().expect("chunk index"), c["staging_table"].as_str().expect("staging table").to_string()))
                .collect()
        })
        .unwrap_or_default()
}
