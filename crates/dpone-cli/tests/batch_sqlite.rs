//! Batch manifests on the SQLite route (no server): three processes of one
//! manifest written in the original's form, run together, each compared
//! with the exact multiset it must hold; selection, `--jobs`, a failing
//! process among succeeding ones, a crash in the middle of the batch and
//! its resumption, `--run-id`, `--retry-attempts`, the envelope's keys.

mod common;
mod harness;

use common::{Row, canonical, dpone, dump, expected_after_replace, multiset_diff, owned_tables};
use serde_json::Value;
use std::path::{Path, PathBuf};

const END: &str = "2026-09-09T00:00:00Z";
const START: &str = "2026-09-02T00:00:00Z";
/// Column of `event_ts` in the quick start's table.
const TS: usize = 1;

/// Three processes: `main.events` into target.db, `events_b` into
/// target_b.db (params, the original's JSON), `events_c` into target_c.db
/// (env, from the component variable DPONE_CONN_TGT_C_DATABASE).
fn batch_manifest() -> String {
    common::quickstart_batch_manifest(
        "  name: \"{{ src_table }}_{{ target_db }}\"\n",
        "      native_transfer:\n        execution:\n          chunking: {mode: bounded_window, parallelism: 2, checkpointing: resumable}\n",
        "      - table: events\n        id: events_c\n        vars: {target_db: target_c}\n        overrides:\n          sink:\n            connection_type: env\n            connection_id: tgt-c\n",
    )
}

struct Batch {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    manifest: String,
    source: Vec<Row>,
    before: Vec<Row>,
}

impl Batch {
    fn new() -> Batch {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("b");
        std::fs::create_dir(&dir).unwrap();
        dpone_sqlite::demo::seed_quickstart(&dir.join("source.db"), &dir.join("target.db")).unwrap();
        for t in ["target_b.db", "target_c.db"] {
            std::fs::copy(dir.join("target.db"), dir.join(t)).unwrap();
        }
        let manifest = dir.join("batch.yaml");
        std::fs::write(&manifest, batch_manifest()).unwrap();
        let (source, before) = (dump(&dir.join("source.db"), "events"), dump(&dir.join("target.db"), "events"));
        Batch { _tmp: tmp, manifest: manifest.display().to_string(), dir, source, before }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![("DPONE_CONN_TGT_C_DATABASE", self.dir.join("target_c.db").display().to_string())]
    }

    fn run(&self, extra: &[&str], env: &[(&str, &str)]) -> common::Run {
        let mut args = vec!["run", self.manifest.as_str(), "--interval-end", END, "--format", "json"];
        args.extend(extra);
        let base = self.env();
        let mut all: Vec<(&str, &str)> = base.iter().map(|(k, v)| (*k, v.as_str())).collect();
        all.extend(env);
        dpone(&self.dir, &args, &all)
    }

    fn expected(&self) -> Vec<Row> {
        expected_after_replace(&self.before, &self.source, TS, &canonical(START), &canonical(END))
    }

    /// Every target holds exactly its expected multiset, and nothing of dpone's.
    fn assert_targets(&self, which: &[&str]) {
        for t in which {
            let db = self.dir.join(t);
            let got = dump(&db, "events");
            assert!(got == self.expected(), "{t}: {}", multiset_diff(&self.expected(), &got));
            assert_eq!(owned_tables(&db), Vec::<String>::new(), "{t}: no staging or generation table is left");
        }
    }
}

fn docs(run: &common::Run) -> Vec<Value> {
    serde_json::Deserializer::from_str(&run.stdout)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("stdout is not JSON lines ({e}):\n{}", run.describe()))
}

fn by_selector<'a>(docs: &'a [Value], selector: &str) -> &'a Value {
    docs.iter().find(|d| d["selector"] == selector).unwrap_or_else(|| panic!("no document for {selector}: {docs:?}"))
}

fn keys(v: &Value) -> Vec<&str> {
    v.as_object().expect("an object").keys().map(String::as_str).collect()
}

#[test]
fn three_processes_run_two_at_a_time_and_each_target_is_exact() {
    let b = Batch::new();
    let run = b.run(&["--jobs", "2"], &[]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let docs = docs(&run);
    assert_eq!(docs.len(), 3, "one document per process, one per line:\n{}", run.stdout);
    assert_eq!(run.stdout.lines().count(), 3, "JSON lines: one compact document per line");
    for (selector, process) in [("main.events", "events_target"), ("events_b", "events_target_b"), ("events_c", "events_target_c")] {
        let d = by_selector(&docs, selector);
        assert_eq!((d["process"].as_str(), d["passed"].as_bool(), d["status"].as_str()), (Some(process), Some(true), Some("succeeded")));
        assert_eq!(d["result"]["status"], "succeeded");
        assert_eq!(d["result"]["inserted_rows"], d["inserted_rows"]);
        assert_eq!((d["attempts"].as_u64(), d["max_attempts"].as_u64()), (Some(1), Some(1)));
    }
    let evidence: std::collections::BTreeSet<&str> = docs.iter().map(|d| d["evidence_path"].as_str().unwrap()).collect();
    assert_eq!(evidence.len(), 3, "each process has its own run and evidence: {evidence:?}");
    b.assert_targets(&["target.db", "target_b.db", "target_c.db"]);
}

#[test]
fn one_failing_process_does_not_stop_the_others() {
    let b = Batch::new();
    // target_c has no `events` table: that process is refused by its probe.
    let conn = rusqlite::Connection::open(b.dir.join("target_c.db")).unwrap();
    conn.execute_batch("ALTER TABLE events RENAME TO other").unwrap();
    drop(conn);
    let run = b.run(&[], &[]);
    assert_eq!(run.code, Some(1), "something was written and something failed: exit 1\n{}", run.describe());
    let docs = docs(&run);
    assert_eq!(docs.len(), 3);
    assert_eq!(by_selector(&docs, "events_c")["status"], "refused");
    assert_eq!(by_selector(&docs, "main.events")["status"], "succeeded");
    assert_eq!(by_selector(&docs, "events_b")["status"], "succeeded");
    b.assert_targets(&["target.db", "target_b.db"]);
}

/// kill -9 in the middle of the batch (the test build aborts the process at
/// the 10th chunk acknowledgement: the second process, mid-staging). The
/// same command then skips the finished process, resumes the unfinished
/// one, runs the last, and every target holds its rows exactly once.
#[test]
fn a_crash_mid_batch_resumes_only_the_unfinished_process() {
    let b = Batch::new();
    let crashed = b.run(&["--jobs", "1"], &[("DPONE_FAILPOINT", "staging.after_ack:10")]);
    assert_ne!(crashed.code, Some(0), "the failpoint aborts the process\n{}", crashed.describe());
    assert!(crashed.stderr.contains("aborting the process at staging.after_ack"), "{}", crashed.describe());
    let first = docs(&crashed);
    assert_eq!(first.len(), 1, "the first process ended before the crash:\n{}", crashed.stdout);
    assert_eq!((first[0]["selector"].as_str(), first[0]["status"].as_str()), (Some("main.events"), Some("succeeded")));
    b.assert_targets(&["target.db"]);
    assert_eq!(dump(&b.dir.join("target_b.db"), "events"), b.before, "the crashed process published nothing");

    let rerun = b.run(&["--jobs", "1"], &[]);
    assert_eq!(rerun.code, Some(0), "{}", rerun.describe());
    let second = docs(&rerun);
    let done = by_selector(&second, "main.events");
    assert_eq!((done["skipped"].as_bool(), done["attempts"].as_u64()), (Some(true), Some(0)), "not redone: {done}");
    assert_eq!(done["journal_run_id"], first[0]["journal_run_id"]);
    let resumed = by_selector(&second, "events_b");
    assert_eq!(resumed["resumed"], true, "the unfinished process is resumed: {resumed}");
    assert_eq!(by_selector(&second, "events_c")["status"], "succeeded");
    b.assert_targets(&["target.db", "target_b.db", "target_c.db"]);
    // The finished process's journal did not run again.
    let status = dpone(&b.dir, &["status", &b.manifest, "--selector", "main.events", "--format", "json"], &[]);
    let s: Value = status.single_json().unwrap_or_else(|e| panic!("{e}\n{}", status.describe()));
    assert_eq!(s["execution"], 1, "{s}");

    // The operation is complete: the same command runs every process again.
    let again = b.run(&["--jobs", "1"], &[]);
    assert_eq!(again.code, Some(0), "{}", again.describe());
    assert!(docs(&again).iter().all(|d| d["skipped"] == false && d["target_unchanged"] == true), "{}", again.stdout);
}

#[test]
fn a_run_id_names_the_operation() {
    let b = Batch::new();
    let first = b.run(&["--run-id", "airflow-2026-09-09"], &[]);
    assert_eq!(first.code, Some(0), "{}", first.describe());
    assert!(docs(&first).iter().all(|d| d["run_id"] == "airflow-2026-09-09" && d["journal_run_id"].is_string()));
    let again = b.run(&["--run-id", "airflow-2026-09-09"], &[]);
    assert_eq!(again.code, Some(0), "{}", again.describe());
    let repeated = docs(&again);
    assert_eq!(repeated.len(), 3);
    assert!(repeated.iter().all(|d| d["skipped"] == true && d["attempts"] == 0 && d["passed"] == true), "{}", again.stdout);
    let other = b.run(&["--run-id", "airflow-2026-09-09", "--select", "main.*", "--exclude", "events_c"], &[]);
    assert_eq!(other.code, Some(2), "{}", other.describe());
    assert_eq!(docs_first_code(&other), "run_id_conflict");
}

fn docs_first_code(run: &common::Run) -> String {
    docs(run)[0]["error_code"].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_retry_resumes_the_failed_process() {
    let b = Batch::new();
    let faults = [("DPONE_TARGET_FAULTS", "build_generation:permanent:1")];
    let failed = b.run(&["--select", "events_b"], &faults);
    assert_eq!(failed.code, Some(1), "{}", failed.describe());
    assert_eq!(docs(&failed)[0]["status"], "failed");
    let retried = b.run(&["--select", "events_b", "--retry-attempts", "2", "--retry-backoff-seconds", "0.05"], &faults);
    assert_eq!(retried.code, Some(0), "{}", retried.describe());
    let d = &docs(&retried)[0];
    assert_eq!((d["attempts"].as_u64(), d["max_attempts"].as_u64(), d["retry_backoff_seconds"].as_f64()), (Some(2), Some(3), Some(0.05)));
    assert!(retried.stderr.contains("retrying in 0.05 s"), "{}", retried.describe());
    b.assert_targets(&["target_b.db"]);
}

#[test]
fn success_failure_and_refusal_documents_have_the_same_keys() {
    let b = Batch::new();
    let success = b.run(&["--selector", "main.events"], &[]);
    let failure = b.run(&["--selector", "events_b"], &[("DPONE_TARGET_FAULTS", "build_generation:permanent:1")]);
    let refusal = b.run(&["--selector", "nope"], &[]);
    let unreadable = dpone(&b.dir, &["run", "missing.yaml", "--interval-end", END, "--format", "json"], &[]);
    // The key list itself is pinned by the envelope's unit test, for every
    // kind of body; here every real document must carry exactly the keys,
    // in the order, of the refusal.
    let golden = refusal.single_json().unwrap_or_else(|e| panic!("refusal: {e}\n{}", refusal.describe()));
    for (what, run, code, status) in [
        ("success", &success, 0, "succeeded"),
        ("failure", &failure, 1, "failed"),
        ("refusal", &refusal, 2, "refused"),
        ("unreadable", &unreadable, 2, "refused"),
    ] {
        assert_eq!(run.code, Some(code), "{what}: {}", run.describe());
        let d = run.single_json().unwrap_or_else(|e| panic!("{what}: {e}\n{}", run.describe()));
        assert_eq!(keys(&d), keys(&golden), "{what}: the envelope's keys");
        assert_eq!(keys(&d["result"]), keys(&golden["result"]), "{what}: the result's keys");
        assert_eq!((d["status"].as_str(), d["result"]["status"].as_str()), (Some(status), Some(status)), "{what}");
        assert_eq!(d["passed"], code == 0, "{what}");
        assert_eq!(d["result"]["errors"].as_array().map(Vec::len), d["errors"].as_array().map(Vec::len), "{what}");
        assert!(d["result"]["errors"].as_array().unwrap().iter().all(Value::is_string), "{what}: the original's errors are text");
    }
    let d = refusal.single_json().unwrap();
    assert_eq!(
        (d["error_code"].as_str(), d["errors"][0]["path"].as_str(), d["selector"].as_str()),
        (Some("unknown_selector"), Some("--selector"), Some("nope"))
    );
}

#[test]
fn selection_errors_and_listing() {
    let b = Batch::new();
    for (args, code, path) in [
        (vec!["--select", "zzz*"], "selection_empty", "--select"),
        (vec!["--max-selected", "2"], "too_many_selected", "--max-selected"),
        (vec!["--selector", "events_b", "--select", "x"], "conflicting_selection", "--selector"),
        (vec!["--selector", "events_bb"], "unknown_selector", "--selector"),
    ] {
        let run = b.run(&args, &[]);
        assert_eq!(run.code, Some(2), "{args:?}: {}", run.describe());
        let d = run.single_json().unwrap();
        assert_eq!((d["error_code"].as_str(), d["errors"][0]["path"].as_str()), (Some(code), Some(path)), "{args:?}");
        assert!(run.stderr.contains(&format!("error[{code}] at {path}")), "{}", run.describe());
    }
    assert!(!b.dir.join("work").exists(), "selection errors write nothing");
    let status = dpone(&b.dir, &["status", &b.manifest], &[]);
    assert_eq!(status.code, Some(2), "{}", status.describe());
    assert!(status.stderr.contains("error[selector_required]"), "{}", status.describe());

    let list = dpone(&b.dir, &["manifest", "list", &b.manifest, "--format", "json"], &[]);
    let l = list.single_json().unwrap();
    let ids: Vec<&str> = l["processes"].as_array().unwrap().iter().map(|p| p["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec!["main.events", "events_b", "events_c"]);
    assert_eq!(l["processes"][1]["route"], "sqlite->sqlite");
    let render = dpone(&b.dir, &["manifest", "render", &b.manifest, "--selector", "events_b"], &[]);
    assert_eq!(render.code, Some(0), "{}", render.describe());
    assert!(render.stdout.contains("path: \"target_b.db\"") && render.stdout.contains("name: \"events_target_b\""), "{}", render.stdout);
    let plan = dpone(
        &b.dir,
        &["plan", &b.manifest, "--interval-end", END, "--format", "json", "--offline"],
        &b.env().iter().map(|(k, v)| (*k, v.as_str())).collect::<Vec<_>>(),
    );
    assert_eq!(plan.code, Some(0), "{}", plan.describe());
    assert_eq!(
        docs(&plan).iter().map(|d| d["selector"].as_str().unwrap()).collect::<Vec<_>>(),
        vec!["main.events", "events_b", "events_c"]
    );
    let _ = Path::new(&b.manifest);
}
