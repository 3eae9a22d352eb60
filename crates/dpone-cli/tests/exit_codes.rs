//! The exit-code rule of README.md, one test per class, through the real
//! binary on the SQLite route (no server):
//!
//! - 0: success;
//! - 1: the run started writing and then failed;
//! - 2: nothing was written: a configuration error, a refusal, or a run
//!   that could not start (the target's lease held by another run, the
//!   state store unusable; an unreachable server or refused credentials
//!   are pinned in `hostile_servers.rs`);
//! - 130: interrupted, in any phase, also while publishing.

mod common;
mod harness;

use common::{DPONE, Run, dpone};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const END: &str = "2026-09-09T00:00:00Z";

/// The interval end of the runs after the quickstart's own (a day later).
const NEXT: &str = "2026-09-10T00:00:00Z";

fn quickstart() -> (tempfile::TempDir, PathBuf, String) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("qs");
    let run = dpone(tmp.path(), &["quickstart", "--dir", dir.to_str().unwrap(), "--format", "json"], &[]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let manifest = dir.join("manifest.yaml").display().to_string();
    (tmp, dir, manifest)
}

fn json(run: &Run) -> serde_json::Value {
    run.single_json().unwrap_or_else(|e| panic!("{e}\n{}", run.describe()))
}

/// `dpone run <manifest> --interval-end <NEXT> --format json` with `env`: the run and its JSON report.
fn run_next(dir: &Path, manifest: &str, env: &[(&str, &str)]) -> (Run, serde_json::Value) {
    let run = dpone(dir, &["run", manifest, "--interval-end", NEXT, "--format", "json"], env);
    let doc = json(&run);
    (run, doc)
}

fn target(dir: &Path) -> Vec<common::Row> {
    common::dump(&dir.join("target.db"), "events")
}

/// `dpone run` in the background with test switches; stdout/stderr piped.
fn spawn_run(dir: &Path, manifest: &str, env: &[(&str, &str)]) -> Child {
    let mut cmd = Command::new(DPONE);
    cmd.args(["run", manifest, "--interval-end", NEXT, "--format", "json"]).current_dir(dir);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("DPONE_")) {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().copied()).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.spawn().unwrap()
}

/// Waits until `stderr_file`-less progress is visible: the journal exists
/// and says `state`.
fn wait_for_state(dir: &Path, manifest: &str, states: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let run = dpone(dir, &["status", manifest, "--format", "json"], &[]);
        if let Ok(v) = run.single_json()
            && states.iter().any(|s| v["state"] == *s)
        {
            return;
        }
        assert!(Instant::now() < deadline, "the background run never reached {states:?}: {}", run.describe());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGINT to our own child, by its pid; returns its exit code and stdout.
fn interrupt(child: Child) -> (Option<i32>, String) {
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn success_exits_0() {
    let (_tmp, dir, m) = quickstart();
    let run = dpone(&dir, &["run", &m, "--interval-end", END, "--format", "json"], &[]);
    assert_eq!((run.code, json(&run)["status"].as_str()), (Some(0), Some("succeeded")), "{}", run.describe());
}

/// The run staged its chunks, then a permanent target failure ended it.
#[test]
fn a_run_that_wrote_and_failed_exits_1() {
    let (_tmp, dir, m) = quickstart();
    let before = target(&dir);
    let (run, v) = run_next(&dir, &m, &[("DPONE_TARGET_FAULTS", "build_generation:permanent:1")]);
    assert_eq!(
        (run.code, v["status"].as_str(), v["publication"].as_str()),
        (Some(1), Some("failed"), Some("absent")),
        "{}",
        run.describe()
    );
    assert_eq!(target(&dir), before, "the target is unchanged");
}

/// A configuration error and a plan refusal write nothing: exit 2.
#[test]
fn configuration_errors_and_refusals_exit_2() {
    let (_tmp, dir, m) = quickstart();
    let run = dpone(&dir, &["run", &m, "--format", "json"], &[]);
    assert_eq!((run.code, json(&run)["error_code"].as_str()), (Some(2), Some("missing_interval_end")), "{}", run.describe());
    let text = std::fs::read_to_string(&m).unwrap();
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, text.replace("name: events}\n  strategy", "name: missing}\n  strategy")).unwrap();
    let run = dpone(&dir, &["run", bad.to_str().unwrap(), "--interval-end", END, "--format", "json"], &[]);
    assert_eq!((run.code, json(&run)["status"].as_str()), (Some(2), Some("refused")), "{}", run.describe());
}

/// Asserts exit 2, `status: unavailable` and `error_code` of a run and its JSON.
fn assert_unavailable(run: &Run, v: &serde_json::Value, error_code: &str) {
    let got = (run.code, v["status"].as_str(), v["error_code"].as_str());
    assert_eq!(got, (Some(2), Some("unavailable"), Some(error_code)), "{}", run.describe());
}

/// The state store cannot be opened (`state.db` is a folder): nothing was
/// written, exit 2 (it was 1).
#[test]
fn an_unusable_state_store_exits_2() {
    let (_tmp, dir, m) = quickstart();
    std::fs::remove_dir_all(dir.join("work")).unwrap();
    std::fs::create_dir_all(dir.join("work/state.db/x")).unwrap();
    let before = target(&dir);
    let (run, v) = run_next(&dir, &m, &[]);
    assert_unavailable(&run, &v, "state_store_unavailable");
    assert_eq!(target(&dir), before);
}

/// The work dir cannot be written (a file stands where it should be, which
/// blocks root too): refused before any write, exit 2, naming the key and
/// what to set instead.
#[test]
fn an_unwritable_work_dir_is_refused_before_any_write() {
    let (_tmp, dir, m) = quickstart();
    std::fs::remove_dir_all(dir.join("work")).unwrap();
    std::fs::write(dir.join("work"), "not a folder").unwrap();
    let before = target(&dir);
    let (run, v) = run_next(&dir, &m, &[]);
    assert_eq!(
        (run.code, v["status"].as_str(), v["error_code"].as_str(), v["errors"][0]["path"].as_str()),
        (Some(2), Some("refused"), Some("work_dir_not_writable"), Some("runtime.storage.work_dir")),
        "{}",
        run.describe()
    );
    assert!(run.stderr.contains("DPONE_WORK_DIR"), "the hint names the variable: {}", run.describe());
    assert_eq!(target(&dir), before);
    // The variable and the flag move it elsewhere (the flag first).
    let elsewhere = dir.join("elsewhere");
    let flag = dir.join("flag");
    let (run, v) = run_next(&dir, &m, &[("DPONE_WORK_DIR", elsewhere.to_str().unwrap())]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(elsewhere.join("state.db").is_file() && v["evidence_path"].as_str().unwrap().starts_with(elsewhere.to_str().unwrap()));
    let args = ["run", &m, "--interval-end", "2026-09-11T00:00:00Z", "--work-dir", flag.to_str().unwrap(), "--format", "json"];
    let run = dpone(&dir, &args, &[("DPONE_WORK_DIR", elsewhere.to_str().unwrap())]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(json(&run)["evidence_path"].as_str().unwrap().starts_with(flag.to_str().unwrap()), "{}", run.describe());
}

/// A second run while the first holds the target's lease: `lease_held`,
/// exit 2 (it was 1). Then the first, interrupted while staging, exits 130
/// and the next run resumes it.
#[test]
fn a_held_lease_exits_2_and_an_interrupted_run_exits_130() {
    let (_tmp, dir, m) = quickstart();
    let first = spawn_run(&dir, &m, &[("DPONE_FAILPOINT_SLEEP", "checkpoint.after_write:400")]);
    wait_for_state(&dir, &m, &["staging", "planned"]);
    let (second, v) = run_next(&dir, &m, &[]);
    assert_unavailable(&second, &v, "lease_held");
    let (code, stdout) = interrupt(first);
    assert_eq!(code, Some(130), "{stdout}");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&stdout).unwrap()["status"], "interrupted");
    let (resumed, v) = run_next(&dir, &m, &[]);
    assert_eq!((resumed.code, v["resumed"].as_bool()), (Some(0), Some(true)), "{}", resumed.describe());
}

/// Ctrl-C while publishing: the publication completes (it is one atomic
/// step), then the run stops as interrupted: exit 130 (it was 0), the JSON
/// says the new data is visible, and the next run finishes it.
#[test]
fn ctrl_c_while_publishing_exits_130_and_the_next_run_finishes() {
    let (_tmp, dir, m) = quickstart();
    let first = spawn_run(&dir, &m, &[("DPONE_FAILPOINT_SLEEP", "publish.after_exchange:1500")]);
    wait_for_state(&dir, &m, &["publishing"]);
    let (code, stdout) = interrupt(first);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!((code, v["status"].as_str(), v["publication"].as_str()), (Some(130), Some("interrupted"), Some("published")), "{stdout}");
    let status = json(&dpone(&dir, &["status", &m, "--format", "json"], &[]));
    assert_eq!(status["state"], "published", "the journal says what is visible");
    let (next, v) = run_next(&dir, &m, &[]);
    assert_eq!((next.code, v["status"].as_str()), (Some(0), Some("succeeded")), "{}", next.describe());
}

/// Ctrl-C after the intent but before the publishing call: the publication
/// is not started, exit 130, nothing visible; the next run publishes.
#[test]
fn ctrl_c_before_the_publishing_call_publishes_nothing() {
    let (_tmp, dir, m) = quickstart();
    let before = target(&dir);
    let first = spawn_run(&dir, &m, &[("DPONE_FAILPOINT_SLEEP", "publish.before_exchange:1500")]);
    wait_for_state(&dir, &m, &["publishing"]);
    let (code, stdout) = interrupt(first);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!((code, v["publication"].as_str()), (Some(130), Some("absent")), "{stdout}");
    assert_eq!(target(&dir), before, "nothing was published");
    let next = dpone(&dir, &["run", &m, "--interval-end", NEXT, "--format", "json"], &[]);
    assert_eq!(next.code, Some(0), "{}", next.describe());
    assert_ne!(target(&dir), before, "published by the next run");
}

/// A reader that closed stdout before dpone printed (`dpone ... | head`)
/// ends dpone quietly with 141 (128 + SIGPIPE), as other Unix tools end,
/// never with a panic's text.
#[test]
fn a_closed_stdout_ends_quietly_with_141() {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = Command::new(DPONE).args(["manifest", "schema"]).stdout(writer).stderr(Stdio::piped()).output().expect("run dpone");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "exit 141:\n{stderr}");
    assert!(!stderr.contains("panicked"), "no panic text:\n{stderr}");
}
