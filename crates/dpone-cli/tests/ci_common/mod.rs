//! Shared helpers of the `dpone ci` tests: real temporary git repositories
//! and the real `dpone` binary.

#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const DPONE: &str = env!("CARGO_BIN_EXE_dpone");

/// A SQLite -> SQLite manifest with a schedule.
pub const SQLITE_MANIFEST: &str = "# events, replaced daily
kind: dpone.batch.v1
source:
  type: sqlite
  connection:
    connection_type: params
    params: {path: source.db}
  table: {name: events}
sink:
  type: sqlite
  connection:
    connection_type: params
    params: {path: target.db}
  table: {name: events}
  strategy:
    mode: replace
    atomicity: target_atomic
    window:
      column: event_ts
      anchor: data_interval_end
      lookback: P7D
      chunk_interval: P1D
schedule:
  cron: \"0 3 * * *\"
";

/// A PostgreSQL -> ClickHouse manifest with a schedule and transport settings.
pub const PG_CH_MANIFEST: &str = "kind: dpone.batch.v1
source:
  type: postgres
  connection: {connection_type: env, connection_id: pg}
  table: {schema: public, name: events}
  options:
    native_transfer:
      wire: {block_rows: 65536}
      execution:
        chunking: {mode: bounded_window, parallelism: 2, checkpointing: resumable}
sink:
  type: clickhouse
  connection: {connection_type: env, connection_id: ch}
  table: {schema: analytics, name: events}
  strategy:
    mode: replace
    atomicity: target_atomic
    window: {column: ts, anchor: data_interval_end, lookback: P7D, chunk_interval: P1D, timezone: UTC}
schedule: {cron: '15 1 * * *', timezone: UTC}
";

pub const SCHEDULES: &str = "kind: dpone.schedules.v1
workloads:
  - name: events_daily
    manifest: manifests/events.yaml
    cron: \"0 3 * * *\"
  - name: events_ch
    manifest: manifests/events_ch.yaml
    cron: \"15 1 * * *\"
    depends_on: [events_daily]
";

/// A git repository in a temporary folder, isolated from the user's git configuration.
pub struct Repo {
    pub dir: tempfile::TempDir,
}

impl Repo {
    /// A repository whose first commit holds `files`.
    pub fn with(files: &[(&str, &str)]) -> (Repo, String) {
        let repo = Repo { dir: tempfile::tempdir().unwrap() };
        repo.git(&["init", "-q", "-b", "main"]);
        for (p, c) in files {
            repo.write(p, c);
        }
        let sha = repo.commit("base");
        (repo, sha)
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn git(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .arg("-C")
            .arg(self.path())
            .args(["-c", "user.name=dpone test", "-c", "user.email=test@dpone.invalid", "-c", "commit.gpgsign=false"])
            .args(["-c", "core.fileMode=true", "-c", "core.autocrlf=false"])
            .args(args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .expect("git runs");
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    pub fn write(&self, path: &str, content: &str) {
        let p = self.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    pub fn chmod(&self, path: &str, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(self.path().join(path), std::fs::Permissions::from_mode(mode)).unwrap();
    }

    pub fn read(&self, path: &str) -> String {
        std::fs::read_to_string(self.path().join(path)).unwrap()
    }

    /// Rewrites a file with `f` applied to its content.
    pub fn edit(&self, path: &str, f: impl FnOnce(String) -> String) {
        let new = f(self.read(path));
        self.write(path, &new);
    }

    /// Commits everything (additions, deletions, mode changes) and returns the commit id.
    pub fn commit(&self, message: &str) -> String {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "--allow-empty", "-m", message]);
        self.git(&["rev-parse", "HEAD"])
    }
}

pub fn dpone(cwd: &Path, args: &[&str]) -> Output {
    Command::new(DPONE)
        .args(args)
        .current_dir(cwd)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("dpone runs")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `dpone ci plan` of `base..head`, asserted to succeed; the plan JSON.
pub fn plan(repo: &Repo, base: &str, head: &str) -> Value {
    let o = dpone(repo.path(), &["ci", "plan", "--base", base, "--head", head]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("the plan is JSON")
}

pub fn check_ids(plan: &Value) -> Vec<String> {
    plan["required_checks"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap().to_string()).collect()
}

pub const GATES: [&str; 3] = ["gate.fmt", "gate.clippy", "gate.unit"];
pub const CONTRACTS: [&str; 4] = ["contract.parser", "contract.serialization", "contract.interval", "contract.scheduling"];

pub fn gates_and_contracts() -> Vec<String> {
    GATES.iter().chain(CONTRACTS.iter()).map(|s| s.to_string()).collect()
}

/// A JUnit `<testsuite>` with cases `(name, inner xml)`.
pub fn suite(name: &str, cases: &[(&str, &str)]) -> String {
    let body: String = cases
        .iter()
        .map(|(n, inner)| format!("    <testcase name=\"{n}\" classname=\"{name}\" time=\"0.001\">{inner}</testcase>\n"))
        .collect();
    format!("  <testsuite name=\"{name}\" tests=\"{}\">\n{body}  </testsuite>\n", cases.len())
}

pub fn junit(suites: &[String]) -> String {
    format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"nextest-run\">\n{}</testsuites>\n", suites.concat())
}

pub fn write_file(dir: &Path, name: &str, content: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, content).unwrap();
    p
}
