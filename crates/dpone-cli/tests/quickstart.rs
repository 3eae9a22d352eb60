//! `dpone quickstart` end to end: the window of the seeded target is
//! replaced by exactly the source's window rows, rows outside the window
//! (NULL timestamps included) survive with their multiplicity, and a second
//! run leaves the target unchanged.
//!
//! The expected target is computed independently of the binary: the same
//! deterministic seeding (`dpone_sqlite::demo::seed_quickstart`, which the
//! binary calls) fills a reference folder, and the expected multiset is
//! (reference target rows outside the window) + (reference source rows
//! inside it), compared row by row with every value and storage class.

mod common;
mod harness;

use common::{INTERVAL_END, Row, canonical, dpone, dump, expected_after_replace, multiset_diff, owned_tables, rendered_in_window};
use std::path::Path;

const TABLE: &str = "events";
const WINDOW_START: &str = "2026-09-02T00:00:00Z";
/// Column of `event_ts` in the quick start's table.
const TS: usize = 1;

/// Day bounds of the 7 chunks, as RFC 3339 instants.
fn chunk_bounds() -> Vec<(String, String)> {
    (2..9).map(|d| (format!("2026-09-{d:02}T00:00:00Z"), format!("2026-09-{:02}T00:00:00Z", d + 1))).collect()
}

fn count_in(rows: &[Row], start: &str, end: &str) -> usize {
    rows.iter().filter(|r| rendered_in_window(&r[TS], &canonical(start), &canonical(end))).count()
}

/// The rest of the first stdout line starting with `label`.
fn line<'a>(stdout: &'a str, label: &str) -> Option<&'a str> {
    stdout.lines().find_map(|l| l.strip_prefix(label)).map(str::trim)
}

/// `count` with a comma between groups of three digits, as the report
/// prints it (written apart from the binary's formatter, by recursion).
fn n(count: usize) -> String {
    if count < 1000 { count.to_string() } else { format!("{},{:03}", n(count / 1000), count % 1000) }
}

/// What the quick start must report and leave behind, computed from the reference databases.
struct Expected {
    source: Vec<Row>,
    target: Vec<Row>,
    window_rows: usize,
    replaced_first_run: usize,
    kept: usize,
    kept_null: usize,
    per_chunk: Vec<usize>,
}

fn expected_from_reference(dir: &Path) -> Expected {
    let (src, dst) = (dir.join("source.db"), dir.join("target.db"));
    let created = dpone_sqlite::demo::seed_quickstart(&src, &dst).expect("seeding the reference databases");
    assert_eq!(created, (true, true), "the reference folder starts empty, so both databases are seeded");
    let source = dump(&src, TABLE);
    let before = dump(&dst, TABLE);
    let (start, end) = (canonical(WINDOW_START), canonical(INTERVAL_END));
    let target = expected_after_replace(&before, &source, TS, &start, &end);
    let window_rows = count_in(&source, WINDOW_START, INTERVAL_END);
    let replaced_first_run = count_in(&before, WINDOW_START, INTERVAL_END);
    let kept = before.len() - replaced_first_run;
    let kept_null = before.iter().filter(|r| r[TS] == "null").count();
    let per_chunk = chunk_bounds().iter().map(|(s, e)| count_in(&source, s, e)).collect();
    // The seeded data must exercise what the quick start claims to show.
    assert!(kept_null > 0, "the seeded target holds NULL timestamps");
    assert!(replaced_first_run > 0, "the seeded target holds stale rows inside the window");
    assert!(kept > kept_null, "the seeded target holds rows outside the window");
    assert!(source.windows(2).any(|w| w[0] == w[1]), "the seeded source holds exact duplicate rows");
    Expected { source, target, window_rows, replaced_first_run, kept, kept_null, per_chunk }
}

/// Checks the text summary of one quick start run.
fn check_summary(stdout: &str, exp: &Expected, first_run: bool) {
    let window = line(stdout, "window").unwrap_or_else(|| panic!("expected a `window` line in:\n{stdout}"));
    assert_eq!(
        window,
        format!("event_ts in [{WINDOW_START}, {INTERVAL_END}), 7 chunks of P1D"),
        "expected the window [2026-09-02, 2026-09-09) in 7 chunks of one day"
    );
    for (i, ((start, end), rows)) in chunk_bounds().iter().zip(&exp.per_chunk).enumerate() {
        let want = format!("[{start}, {end})");
        let chunk_line = line(stdout, &format!("  chunk {i:<4} ")).unwrap_or_else(|| panic!("expected a line for chunk {i} in:\n{stdout}"));
        assert!(chunk_line.starts_with(&want), "expected chunk {i} to cover {want}, got `{chunk_line}`");
        assert!(
            chunk_line.ends_with(&format!(" {} rows", n(*rows))),
            "expected chunk {i} to report {rows} source rows, got `{chunk_line}`"
        );
    }
    assert!(!stdout.contains("  chunk 7 "), "expected exactly 7 chunks:\n{stdout}");
    assert_eq!(
        line(stdout, "kept"),
        Some(format!("{} target rows outside the window ({} of them with NULL event_ts)", n(exp.kept), n(exp.kept_null)).as_str()),
        "expected the kept rows (outside the window, NULLs included) to be reported"
    );
    let replaced = if first_run { exp.replaced_first_run } else { exp.window_rows };
    assert_eq!(
        line(stdout, "published"),
        Some(
            format!("{} rows (replacing {}); the target now holds {} rows", n(exp.window_rows), n(replaced), n(exp.target.len())).as_str()
        ),
        "expected the published, replaced and final row counts"
    );
    assert_eq!(
        line(stdout, "publication"),
        Some("sqlite_transaction: published; the published rows' digest equals the generation's"),
        "expected one verified SQLite transaction"
    );
    if first_run {
        assert!(line(stdout, "changed").is_some(), "expected the first run to report that the window changed:\n{stdout}");
        assert!(line(stdout, "idempotent").is_none(), "the first run changes the target; it must not claim idempotence:\n{stdout}");
    } else {
        assert_eq!(
            line(stdout, "idempotent"),
            Some("the window already held exactly these rows: target contents unchanged"),
            "expected the second run to say the target is unchanged:\n{stdout}"
        );
    }
}

/// Checks the evidence file named by the summary.
fn check_evidence(stdout: &str, exp: &Expected) {
    let path = line(stdout, "evidence").unwrap_or_else(|| panic!("expected an `evidence` line in:\n{stdout}"));
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("expected the evidence file {path} to exist: {e}"));
    let ev: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("expected {path} to be valid JSON: {e}"));
    assert_eq!(ev["evidence_version"], "dpone.window_target_evidence.v1", "evidence version");
    let run_id = line(stdout, "run").and_then(|r| r.split_whitespace().next()).expect("a `run` line");
    assert_eq!(ev["run_id"], run_id, "expected the evidence to belong to the reported run");
    assert_eq!(ev["route"], "sqlite->sqlite", "evidence route");
    assert_eq!(ev["window"]["start"], WINDOW_START, "evidence window start");
    assert_eq!(ev["window"]["end"], INTERVAL_END, "evidence window end");
    assert_eq!(ev["source_rows"], exp.window_rows, "expected the evidence to count the source's window rows");
    assert_eq!(ev["target"]["total_rows"], exp.target.len(), "expected the evidence to count the published target's rows");
    assert_eq!(ev["target"]["null_window_rows"], exp.kept_null, "expected the evidence to count NULL window values");
    let chunk_rows: Vec<u64> =
        ev["chunks"].as_array().expect("evidence chunks").iter().map(|c| c["rows"].as_u64().expect("rows")).collect();
    let want: Vec<u64> = exp.per_chunk.iter().map(|&r| r as u64).collect();
    assert_eq!(chunk_rows, want, "expected the evidence's per-chunk rows to match the source");
}

fn check_target(dir: &Path, exp: &Expected, when: &str) {
    let actual = dump(&dir.join("target.db"), TABLE);
    assert!(
        actual == exp.target,
        "{when}: expected the target to hold exactly the kept rows plus the source's window rows\n{}",
        multiset_diff(&exp.target, &actual)
    );
    assert_eq!(owned_tables(&dir.join("target.db")), Vec::<String>::new(), "{when}: expected no `_dpone_` tables left in the target");
    assert_eq!(dump(&dir.join("source.db"), TABLE), exp.source, "{when}: expected the source to be unchanged");
}

#[test]
fn quickstart_replaces_the_window_exactly_and_is_idempotent() {
    let reference = tempfile::tempdir().expect("temp dir");
    let exp = expected_from_reference(reference.path());

    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("qs");
    let dir_arg = dir.display().to_string();

    // First run: seeds both databases and replaces the window.
    let first = dpone(root.path(), &["quickstart", "--dir", &dir_arg], &[]);
    assert_eq!(first.code, Some(0), "expected the first quick start to succeed:\n{}", first.describe());
    assert!(first.panic_problem().is_none(), "{}", first.describe());
    assert!(first.stdout.contains(&format!("seeded     {}", dir.join("source.db").display())), "expected source.db to be seeded");
    assert!(first.stdout.contains(&format!("seeded     {}", dir.join("target.db").display())), "expected target.db to be seeded");
    check_summary(&first.stdout, &exp, true);
    check_evidence(&first.stdout, &exp);
    check_target(&dir, &exp, "after the first quick start");

    // Second run: nothing to seed, same contents, reported as unchanged.
    let second = dpone(root.path(), &["quickstart", "--dir", &dir_arg], &[]);
    assert_eq!(second.code, Some(0), "expected the second quick start to succeed:\n{}", second.describe());
    assert!(!second.stdout.contains("seeded"), "expected the second run to reuse the databases:\n{}", second.stdout);
    check_summary(&second.stdout, &exp, false);
    check_evidence(&second.stdout, &exp);
    check_target(&dir, &exp, "after the second quick start");

    // The same manifest through `run --format json`.
    let manifest = dir.join("manifest.yaml").display().to_string();
    let run = dpone(root.path(), &["run", &manifest, "--interval-end", INTERVAL_END, "--format", "json"], &[]);
    assert_eq!(run.code, Some(0), "expected `run` of the quick start manifest to succeed:\n{}", run.describe());
    let doc = run.single_json().unwrap_or_else(|e| panic!("{e}:\n{}", run.describe()));
    assert_eq!(doc["passed"], true, "expected `passed: true`");
    assert_eq!(doc["status"], "succeeded", "expected `status: succeeded`");
    assert_eq!(doc["error_code"], serde_json::Value::Null, "expected `error_code: null`");
    assert_eq!(doc["route"], "sqlite->sqlite", "expected the route");
    assert_eq!(doc["inserted_rows"], exp.window_rows, "expected inserted_rows = source rows in the window");
    assert_eq!(doc["extracted_rows"], exp.window_rows, "expected extracted_rows = source rows in the window");
    assert_eq!(doc["kept_rows"], exp.kept, "expected kept_rows = target rows outside the window");
    assert_eq!(doc["kept_null_window_rows"], exp.kept_null, "expected kept_null_window_rows = target rows with NULL event_ts");
    assert_eq!(doc["final_rows"], exp.target.len(), "expected final_rows = kept + inserted");
    assert_eq!(doc["target_unchanged"], true, "expected target_unchanged on a rerun");
    assert_eq!(doc["window"]["start"], WINDOW_START, "expected the window start");
    assert_eq!(doc["window"]["end"], INTERVAL_END, "expected the window end");
    let rows: Vec<u64> = doc["chunks"].as_array().expect("chunks").iter().map(|c| c["rows"].as_u64().expect("rows")).collect();
    assert_eq!(rows, exp.per_chunk.iter().map(|&r| r as u64).collect::<Vec<_>>(), "expected per-chunk rows");
    check_target(&dir, &exp, "after `run --format json`");
}
