//! Running the real `dpone` binary and reading what it says; shared by the
//! integration tests of the routes (`recovery_*.rs`, `ch_postgres_*.rs`,
//! `pg_clickhouse_*.rs`, `crash_matrix.rs`), which declare it at their crate
//! root (`mod harness;`) so that every fixture of a test binary returns the
//! same [`Run`].
//!
//! - one invocation in the foreground ([`run`]) or the background
//!   ([`spawn`]), with a clean `DPONE_*` environment, killed (failing its
//!   test) if it takes longer than [`DPONE_TIMEOUT`];
//! - its exit status, JSON report and the failpoint it aborted at;
//! - `dpone status --format json` ([`state_of`], [`verified_stagings`]) and
//!   diagnostics ([`codes`], [`messages`]);
//! - exact multiset comparison of rows ([`assert_same_rows`]).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
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
    /// The route the invoking fixture moves (`sqlite->sqlite`, ...): a
    /// successful report must name it. None: not checked.
    pub route: Option<&'static str>,
}

impl Run {
    fn from_output(args: Vec<String>, env: Vec<(String, String)>, status: ExitStatus, stdout: &[u8], stderr: &[u8]) -> Run {
        Run {
            args,
            env,
            route: None,
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

    /// The document of a `dpone status --format json` that exited 0 without a panic.
    pub fn status_json(&self) -> serde_json::Value {
        self.assert_no_panic();
        assert_eq!(self.code, Some(0), "expected `dpone status` to exit 0:\n{}", self.describe());
        self.json()
    }

    /// Asserts that the process aborted at failpoint `point` (SIGABRT, no exit code).
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

    /// The same invocation, whose successful report must name `route`.
    pub fn of_route(self, route: &'static str) -> Run {
        Run { route: Some(route), ..self }
    }

    /// Asserts exit 0, `passed: true`, `status: succeeded`, `publication:
    /// published` and the fixture's route, if known; returns the JSON report.
    pub fn assert_succeeded(&self, what: &str) -> serde_json::Value {
        self.assert_no_panic();
        assert_eq!(self.code, Some(0), "{what}: expected exit 0:\n{}", self.describe());
        let doc = self.json();
        assert_eq!(doc["passed"], true, "{what}: expected `passed: true`:\n{}", self.describe());
        assert_eq!(doc["status"], "succeeded", "{what}: expected `status: succeeded`:\n{}", self.describe());
        assert_eq!(doc["publication"], "published", "{what}: expected `publication: published`:\n{}", self.describe());
        if let Some(route) = self.route {
            assert_eq!(doc["route"], route, "{what}: expected the route {route}:\n{}", self.describe());
        }
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

/// A manifest between two endpoints reached by env connections, working
/// in `work_dir`. `source` and `sink` are each `[type, connection id,
/// schema, table, rest]`: schema and table as YAML scalars, `rest` the
/// lines after the table, each beginning with a newline.
pub fn env_manifest(source: [&str; 5], sink: [&str; 5], work_dir: &str) -> String {
    let side = |name: &str, [system, id, schema, table, rest]: [&str; 5]| {
        format!(
            "{name}:\n  type: {system}\n  connection: {{connection_type: env, connection_id: {id}}}\n  table: {{schema: {schema}, name: {table}}}{rest}\n"
        )
    };
    format!("kind: dpone.batch.v1\n{}{}runtime:\n  storage: {{work_dir: {work_dir}}}\n", side("source", source), side("sink", sink))
}

/// Longest one invocation may take (they take about a second): a stalled
/// run is killed and fails its test instead of hanging the suite.
pub const DPONE_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `dpone` to completion (at most [`DPONE_TIMEOUT`]).
pub fn run(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    spawn(cwd, args, env).wait()
}

/// Runs `dpone` to completion, killing it after `limit`.
pub fn run_within(cwd: &Path, args: &[&str], env: &[(&str, &str)], limit: Duration) -> Run {
    spawn(cwd, args, env).wait_within(limit)
}

/// A `dpone` process running in the background, its output read as it comes.
pub struct Background {
    child: Option<Child>,
    stdout: Option<JoinHandle<Vec<u8>>>,
    stderr: Option<JoinHandle<Vec<u8>>>,
    args: Vec<String>,
    env: Vec<(String, String)>,
    route: Option<&'static str>,
}

/// Reads a pipe to its end in a thread of its own.
fn drain(mut pipe: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = pipe.read_to_end(&mut out);
        out
    })
}

/// Starts `dpone` in the background (stdout and stderr captured).
pub fn spawn(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Background {
    let mut child = command(cwd, args, env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the dpone binary starts");
    let stdout = child.stdout.take().map(drain);
    let stderr = child.stderr.take().map(drain);
    let (args, env) = owned(args, env);
    Background { child: Some(child), stdout, stderr, args, env, route: None }
}

impl Background {
    /// The same process, whose successful report must name `route`.
    pub fn of_route(mut self, route: &'static str) -> Background {
        self.route = Some(route);
        self
    }

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

    /// Waits for the process (at most [`DPONE_TIMEOUT`]) and returns what it produced.
    pub fn wait(self) -> Run {
        self.wait_within(DPONE_TIMEOUT)
    }

    /// Waits for the process and returns what it produced; after `limit`
    /// it is killed and the test fails, showing what it printed.
    pub fn wait_within(mut self, limit: Duration) -> Run {
        let mut child = self.child.take().expect("a running child");
        let pid = child.id();
        let (done, finished) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let status = child.wait();
            let _ = done.send(());
            status
        });
        let timed_out = finished.recv_timeout(limit).is_err();
        if timed_out {
            // Our own child, by its id: not reaped before `waiter` returns, so the id is still its.
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
        let status = waiter.join().expect("the waiting thread").expect("waiting for dpone");
        let output = |h: Option<JoinHandle<Vec<u8>>>| h.map(|h| h.join().expect("a pipe reader")).unwrap_or_default();
        let (stdout, stderr) = (output(self.stdout.take()), output(self.stderr.take()));
        let run = Run::from_output(std::mem::take(&mut self.args), std::mem::take(&mut self.env), status, &stdout, &stderr);
        let run = Run { route: self.route, ..run };
        assert!(!timed_out, "expected dpone to finish within {limit:?}; it was killed:\n{}", run.describe());
        run
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

/// Runs `dpone` with `args` and `env` paused for 4 s at failpoint `point`
/// (`DPONE_FAILPOINT_SLEEP`), calls `during` once the pause is reached
/// (the marker `DPONE_FAILPOINT_PAUSED` in `cwd`), and returns the
/// finished run.
pub fn run_paused_at(cwd: &Path, args: &[&str], env: &[(&str, &str)], point: &str, during: impl FnOnce()) -> Run {
    let paused = cwd.join("paused");
    let _ = std::fs::remove_file(&paused);
    let sleep = format!("{point}:4000");
    let marker = paused.display().to_string();
    let mut all = env.to_vec();
    all.extend([("DPONE_FAILPOINT_SLEEP", sleep.as_str()), ("DPONE_FAILPOINT_PAUSED", marker.as_str())]);
    let child = spawn(cwd, args, &all);
    wait_until(Duration::from_secs(60), &format!("the run reached {point}"), || paused.exists());
    during();
    child.wait_within(Duration::from_secs(120))
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

/// Codes of the diagnostics in a JSON list (`errors` of a run, `refusals` of a plan).
pub fn codes(list: &serde_json::Value) -> Vec<String> {
    list.as_array().map(|a| a.iter().filter_map(|d| d["code"].as_str().map(str::to_string)).collect()).unwrap_or_default()
}

/// The messages of every diagnostic in a JSON list, one `[code] message` a line.
pub fn messages(list: &serde_json::Value) -> String {
    let lines: Vec<String> = list
        .as_array()
        .map(|a| a.iter().map(|d| format!("[{}] {}", d["code"].as_str().unwrap_or("?"), d["message"].as_str().unwrap_or(""))).collect())
        .unwrap_or_default();
    lines.join("\n")
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

// ---------------------------------------------------------------------------
// Reports and rows
// ---------------------------------------------------------------------------

/// What a successful window replace must report.
pub struct WindowReport<'a> {
    /// Source rows inside the window (`inserted_rows`).
    pub inserted: usize,
    /// Rows of the target after the run (`final_rows`).
    pub final_rows: usize,
    /// Source rows inside each chunk, in chunk order (`chunks[].rows`).
    pub rows_per_chunk: &'a [u64],
}

/// Checks a successful window replace's report: row counts (inserted,
/// final, kept), each chunk's rows, and that the evidence file exists.
pub fn check_window_report(doc: &serde_json::Value, want: &WindowReport<'_>, what: &str) {
    assert_eq!(doc["inserted_rows"], want.inserted, "{what}: expected inserted_rows = source rows inside the window");
    assert_eq!(doc["final_rows"], want.final_rows, "{what}: expected final_rows = rows of the expected target");
    assert_eq!(doc["kept_rows"], want.final_rows - want.inserted, "{what}: expected kept_rows = target rows outside the window");
    let per_chunk: Vec<u64> = doc["chunks"].as_array().expect("chunks").iter().map(|c| c["rows"].as_u64().expect("rows")).collect();
    assert_eq!(per_chunk, want.rows_per_chunk, "{what}: expected each chunk to carry exactly the source rows of its bounds");
    let evidence = doc["evidence_path"].as_str().expect("an evidence path");
    assert!(Path::new(evidence).is_file(), "{what}: expected the evidence file {evidence} to exist");
}

/// Rows rendered exactly (`Debug` keeps NULL apart from empty text, `-0.0`
/// apart from `0.0` and every float digit), sorted: a multiset.
pub fn rendered<R: Debug>(rows: &[R]) -> Vec<String> {
    let mut out: Vec<String> = rows.iter().map(|r| format!("{r:?}")).collect();
    out.sort();
    out
}

/// Panics with a readable difference unless `actual` is exactly the multiset `expected`.
pub fn assert_same_rows<R: Debug>(expected: &[R], actual: &[R], what: &str) {
    assert_same_multiset(&rendered(expected), &rendered(actual), what);
}

/// [`assert_same_rows`] for rows already [`rendered`].
pub fn assert_same_multiset(expected: &[String], actual: &[String], what: &str) {
    let mut count: BTreeMap<&String, i64> = BTreeMap::new();
    for r in expected {
        *count.entry(r).or_default() += 1;
    }
    for r in actual {
        *count.entry(r).or_default() -= 1;
    }
    let lines: Vec<String> = count
        .iter()
        .filter(|(_, n)| **n != 0)
        .take(30)
        .map(|(r, n)| if *n > 0 { format!("  missing x{n}: {r}") } else { format!("  unexpected x{}: {r}", -n) })
        .collect();
    if !lines.is_empty() {
        panic!("{what}: expected exactly {} rows, found {}\n{}", expected.len(), actual.len(), lines.join("\n"));
    }
}
