//! Stage limits end to end on the embedded SQLite route: independent
//! encoding and import parallelism, the byte budget in evidence, strict
//! validation before any I/O, oversized rows, and stored limits (and the
//! verification digest) on resume.

use std::path::{Path, PathBuf};
use std::process::Command;

fn dpone(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dpone"));
    cmd.args(args).current_dir(dir).env_remove("DPONE_FAILPOINT").env_remove("DPONE_INTERVAL_END");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("the dpone binary runs")
}

const END: &str = "2026-09-09T00:00:00Z";

/// A seeded source and target with a manifest using `native_chunks`.
fn fixture(native_chunks: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    dpone_sqlite::demo::seed_quickstart(&dir.path().join("source.db"), &dir.path().join("target.db")).unwrap();
    let manifest = format!(
        "kind: dpone.batch.v1
source:
  type: sqlite
  connection: {{connection_type: params, params: {{path: source.db}}}}
  table: {{name: events}}
  options:
    native_transfer:
      execution:
        chunking: {{mode: bounded_window}}
        native_chunks: {native_chunks}
sink:
  type: sqlite
  connection: {{connection_type: params, params: {{path: target.db}}}}
  table: {{name: events}}
  strategy:
    mode: replace
    window: {{column: event_ts, anchor: data_interval_end, lookback: P7D, chunk_interval: P1D}}
runtime: {{storage: {{work_dir: work}}}}
"
    );
    let path = dir.path().join("manifest.yaml");
    std::fs::write(&path, manifest).unwrap();
    (dir, path)
}

fn json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is one JSON document ({e}):\n{}", String::from_utf8_lossy(&out.stdout)))
}

fn target_rows(dir: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(dir.join("target.db")).unwrap();
    let mut stmt = conn.prepare("SELECT quote(id)||'|'||quote(event_ts)||'|'||quote(user_id)||'|'||quote(amount)||'|'||quote(country)||'|'||quote(note) FROM events").unwrap();
    let mut rows: Vec<String> = stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
    rows.sort();
    rows
}

const LIMITS: &str = "{max_rows: 100, max_bytes: 65536, max_row_bytes: 4096, max_pending: 1, encoding_parallelism: 3, import_parallelism: 1, stage_allocated_bytes_stop_threshold: 1000000000}";

#[test]
fn different_encoding_and_import_parallelism_work_and_are_recorded() {
    let (dir, manifest) = fixture(LIMITS);
    let out = dpone(dir.path(), &["run", manifest.to_str().unwrap(), "--interval-end", END, "--format", "json"], &[]);
    assert_eq!(out.status.code(), Some(0), "the run succeeds:\n{}", String::from_utf8_lossy(&out.stderr));
    let report = json(&out);
    let evidence: serde_json::Value = serde_json::from_slice(&std::fs::read(report["evidence_path"].as_str().unwrap()).unwrap()).unwrap();
    let limits = &evidence["limits"];
    assert_eq!(limits["form"], "native_chunks.v2");
    assert_eq!(limits["encoding_parallelism"], 3);
    assert_eq!(limits["import_parallelism"], 1);
    assert_eq!(limits["capacity"], 4, "C = max(E, I) + max_pending");
    assert_eq!(limits["payload_budget_bytes"], 5 * 65536, "(C + 1) * max_bytes");
    let memory = &evidence["memory"];
    assert_eq!(memory["payload_budget_bytes"], 5 * 65536);
    assert!(memory["payload_budget_peak_reserved_bytes"].as_u64().unwrap() <= 5 * 65536, "the budget was never exceeded");
    assert!(memory["process_peak_rss_bytes"].as_u64().unwrap() > 0, "the observed RSS is reported separately");
    let frames_bounded = evidence["chunks"].as_array().unwrap().iter().all(|c| c["rows"].as_u64().unwrap() > 0);
    assert!(frames_bounded, "every day of the quick-start window has rows");
}

#[test]
fn the_plan_shows_resolved_limits() {
    let (dir, manifest) = fixture(LIMITS);
    let out = dpone(dir.path(), &["plan", manifest.to_str().unwrap(), "--interval-end", END, "--format", "json", "--offline"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let plan = json(&out);
    assert_eq!(plan["limits"]["encoding_parallelism"], 3);
    assert_eq!(plan["limits"]["import_parallelism"], 1);
    assert_eq!(plan["limits_stored"]["payload_budget_bytes"], 5 * 65536);
}

#[test]
fn invalid_limits_exit_2_with_a_refusal_document_before_any_io() {
    for (limits, code) in [
        ("{encoding_parallelism: 65, stage_allocated_bytes_stop_threshold: 100000000}", "invalid_limit:encoding_parallelism"),
        ("{import_parallelism: 0, stage_allocated_bytes_stop_threshold: 100000000}", "invalid_limit:import_parallelism"),
        ("{max_rows: 2.5, stage_allocated_bytes_stop_threshold: 100000000}", "invalid_limit:max_rows"),
        ("{max_bytes: '1MB', stage_allocated_bytes_stop_threshold: 100000000}", "invalid_limit:max_bytes"),
        ("{max_bytes: 1000}", "invalid_limit:stage_allocated_bytes_stop_threshold"),
        ("{max_bytes: 1000, max_row_bytes: 2000, stage_allocated_bytes_stop_threshold: 100000}", "invalid_limit:max_row_bytes"),
        ("{max_total_encoded_bytes: 10, stage_allocated_bytes_stop_threshold: 100000000}", "invalid_limit:max_total_encoded_bytes"),
        ("{max_pending: -1, stage_allocated_bytes_stop_threshold: 100000000}", "invalid_limit:max_pending"),
        ("{max_pendingg: 1, stage_allocated_bytes_stop_threshold: 100000000}", "invalid_limit:max_pendingg"),
    ] {
        let (dir, manifest) = fixture(limits);
        let before = target_rows(dir.path());
        let out = dpone(dir.path(), &["plan", manifest.to_str().unwrap(), "--interval-end", END, "--format", "json"], &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{limits}: exit 2\n{stderr}");
        // Issue 31 (which wins over SPEC §1's empty stdout): a refused
        // plan prints its refusal document, and nothing else.
        let doc = json(&out);
        assert_eq!((doc["runnable"].as_bool(), doc["error_code"].as_str()), (Some(false), Some(code)), "{limits}: {doc:#}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1, "{limits}: one document");
        assert!(stderr.contains(&format!("error[{code}]")), "{limits}: expected {code} on stderr:\n{stderr}");
        let run = dpone(dir.path(), &["run", manifest.to_str().unwrap(), "--interval-end", END, "--format", "json"], &[]);
        assert_eq!(run.status.code(), Some(2));
        assert_eq!(json(&run)["error_code"], code);
        assert_eq!(target_rows(dir.path()), before, "{limits}: the target is untouched");
        assert!(!dir.path().join("work").exists(), "{limits}: no state was written");
    }
}

#[test]
fn a_row_larger_than_max_row_bytes_fails_naming_the_limit_and_leaves_the_target() {
    let (dir, manifest) = fixture("{max_row_bytes: 40, max_bytes: 65536, stage_allocated_bytes_stop_threshold: 100000000}");
    let before = target_rows(dir.path());
    let out = dpone(dir.path(), &["run", manifest.to_str().unwrap(), "--interval-end", END, "--format", "json"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let report = json(&out);
    assert_eq!(report["error_code"], "row_too_large");
    assert!(report["errors"][0]["message"].as_str().unwrap().contains("40 bytes"), "the message names the limit: {report}");
    assert_eq!(target_rows(dir.path()), before, "the target is unchanged");
    let conn = rusqlite::Connection::open(dir.path().join("target.db")).unwrap();
    let leftovers: i64 =
        conn.query_row("SELECT count(*) FROM sqlite_master WHERE name LIKE '\\_dpone\\_%' ESCAPE '\\'", [], |r| r.get(0)).unwrap();
    assert_eq!(leftovers, 0, "no staging table is left behind");
}

/// A run crashed after its second checkpoint; its manifest edited by
/// `change` is refused before any write (`unfinished_run_differs`), and
/// restored it resumes: the resumed run's report.
fn assert_a_resume_requires_the_same(change: impl Fn(&str) -> String) -> serde_json::Value {
    let (dir, manifest) = fixture(LIMITS);
    let crashed =
        dpone(dir.path(), &["run", manifest.to_str().unwrap(), "--interval-end", END], &[("DPONE_FAILPOINT", "checkpoint.after_write:2")]);
    assert_eq!(crashed.status.code(), None, "the failpoint aborts the process");
    let original = std::fs::read_to_string(&manifest).unwrap();
    let changed = change(&original);
    assert_ne!(changed, original);
    std::fs::write(&manifest, changed).unwrap();
    let before = target_rows(dir.path());
    let out = dpone(dir.path(), &["run", manifest.to_str().unwrap(), "--interval-end", END, "--format", "json"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json(&out)["error_code"], "unfinished_run_differs");
    assert_eq!(target_rows(dir.path()), before, "the refused run wrote nothing");
    std::fs::write(&manifest, original).unwrap();
    let out = dpone(dir.path(), &["run", manifest.to_str().unwrap(), "--interval-end", END, "--format", "json"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let report = json(&out);
    assert_eq!(report["resumed"], true, "{report}");
    report
}

#[test]
fn a_resumed_run_requires_the_same_stored_limits() {
    let report = assert_a_resume_requires_the_same(|m| m.replace("encoding_parallelism: 3", "encoding_parallelism: 2"));
    assert!(report["reused_chunks"].as_u64().unwrap() >= 1, "verified chunks of the durable SQLite source are reused: {report}");
}

/// The verification digest is part of what a resumed run must match: an
/// unfinished run's manifest switched to `xxh3_128` is refused before any
/// write (its journal holds SHA-256 sums), and switched back it resumes.
#[test]
fn a_resumed_run_requires_the_same_verification_digest() {
    assert_a_resume_requires_the_same(|m| {
        m.replace(
            "        chunking: {mode: bounded_window}\n",
            "        chunking: {mode: bounded_window}\n        verification: {digest: xxh3_128}\n",
        )
    });
}
