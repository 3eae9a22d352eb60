//! Window replace between two SQLite databases built by the test, checked
//! by exact multiset equality of every row (all columns, with their SQLite
//! storage classes): the target must end up holding its rows outside the
//! window (NULL window values included) plus the source's rows inside it.
//!
//! The window is [2026-09-06, 2026-09-09) in chunks of 16 hours, so the
//! last chunk is shorter (8 hours): bounds 09-06 00:00, 09-06 16:00,
//! 09-07 08:00, 09-08 00:00, 09-08 16:00, 09-09 00:00. Frames carry at most
//! 2 rows, so chunks span several frames.

mod harness;
/// The table, window and manifest of the SQLite recovery tests (the same
/// route), and the `common` helpers they include.
#[allow(dead_code)]
#[path = "recovery_common/sqlite.rs"]
mod sqlite_route;

use dpone_core::time::Timestamp;
use rusqlite::Connection;
use rusqlite::types::Value as Sql;
use sqlite_route::common::{
    INTERVAL_END, Row, Run, dpone, dump, expected_after_replace, multiset_diff, owned_tables, rendered_in_window, schema_sql,
};
use sqlite_route::{BOUNDS, DDL, END, START, TS, manifest, row, text};
use std::path::{Path, PathBuf};

/// The same bounds as RFC 3339 instants, as the plan prints them.
const BOUNDS_RFC3339: [&str; 6] = [
    "2026-09-06T00:00:00Z",
    "2026-09-06T16:00:00Z",
    "2026-09-07T08:00:00Z",
    "2026-09-08T00:00:00Z",
    "2026-09-08T16:00:00Z",
    "2026-09-09T00:00:00Z",
];

// ---------------------------------------------------------------------------
// Rows
// ---------------------------------------------------------------------------

/// `r` with column `col` replaced.
fn with(mut r: Vec<Sql>, col: usize, v: Sql) -> Vec<Sql> {
    r[col] = v;
    r
}

/// The canonical timestamp `micros` microseconds after (or before) `bound`.
fn at(bound: &str, micros: i64) -> String {
    let t = Timestamp::parse_canonical(bound).expect("a canonical bound");
    Timestamp(t.0 + micros).to_canonical()
}

// ---------------------------------------------------------------------------
// Fixture
// ---------------------------------------------------------------------------

struct Fixture {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    source: PathBuf,
    target: PathBuf,
    manifest: String,
}

fn create_db(path: &Path, ddl: &str, rows: &[Vec<Sql>]) {
    let conn = Connection::open(path).expect("create database");
    conn.execute_batch(ddl).expect("create table");
    let n = rows.first().map(Vec::len).unwrap_or(0);
    let sql = format!("INSERT INTO t VALUES ({})", (1..=n).map(|i| format!("?{i}")).collect::<Vec<_>>().join(", "));
    for r in rows {
        conn.execute(&sql, rusqlite::params_from_iter(r.iter())).expect("insert row");
    }
}

impl Fixture {
    fn new(source_rows: &[Vec<Sql>], target_rows: &[Vec<Sql>]) -> Fixture {
        Fixture::with_ddl(DDL, source_rows, DDL, target_rows)
    }

    fn with_ddl(source_ddl: &str, source_rows: &[Vec<Sql>], target_ddl: &str, target_rows: &[Vec<Sql>]) -> Fixture {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().to_path_buf();
        let (source, target) = (dir.join("source.db"), dir.join("target.db"));
        create_db(&source, source_ddl, source_rows);
        create_db(&target, target_ddl, target_rows);
        let manifest = dir.join("manifest.yaml");
        std::fs::write(&manifest, self::manifest()).expect("write manifest");
        Fixture { _dir: tmp, manifest: manifest.display().to_string(), dir, source, target }
    }

    fn run(&self) -> Run {
        dpone(&self.dir, &["run", &self.manifest, "--interval-end", INTERVAL_END, "--format", "json"], &[])
    }

    fn plan(&self, format: &str) -> Run {
        dpone(&self.dir, &["plan", &self.manifest, "--interval-end", INTERVAL_END, "--format", format], &[])
    }

    fn source_rows(&self) -> Vec<Row> {
        dump(&self.source, "t")
    }

    fn target_rows(&self) -> Vec<Row> {
        dump(&self.target, "t")
    }

    /// Runs, expects success, and checks the target against the expected multiset.
    fn run_and_check(&self) -> serde_json::Value {
        let before = self.target_rows();
        let source = self.source_rows();
        let expected = expected_after_replace(&before, &source, TS, START, END);
        let run = self.run();
        assert_eq!(run.code, Some(0), "expected the run to succeed:\n{}", run.describe());
        let doc = run.single_json().unwrap_or_else(|e| panic!("{e}:\n{}", run.describe()));
        assert_eq!(doc["passed"], true, "expected `passed: true`");
        let actual = self.target_rows();
        assert!(actual == expected, "expected target = kept rows + source window rows\n{}", multiset_diff(&expected, &actual));
        assert_eq!(self.source_rows(), source, "expected the source to be unchanged");
        assert_eq!(owned_tables(&self.target), Vec::<String>::new(), "expected no `_dpone_` tables after success");
        let in_window = source.iter().filter(|r| rendered_in_window(&r[TS], START, END)).count();
        assert_eq!(doc["inserted_rows"], in_window, "expected inserted_rows = source rows inside the window");
        assert_eq!(doc["final_rows"], expected.len(), "expected final_rows = rows of the expected target");
        assert_eq!(doc["kept_rows"], expected.len() - in_window, "expected kept_rows = target rows outside the window");
        let per_chunk: Vec<usize> =
            BOUNDS.windows(2).map(|b| source.iter().filter(|r| rendered_in_window(&r[TS], b[0], b[1])).count()).collect();
        let reported: Vec<usize> =
            doc["chunks"].as_array().expect("chunks").iter().map(|c| c["rows"].as_u64().expect("rows") as usize).collect();
        assert_eq!(reported, per_chunk, "expected each chunk to carry exactly the source rows of its half-open bounds");
        doc
    }

    /// Runs and lists what differs from a failure with `exit`/`status`/`code`
    /// whose stderr mentions `mentions`, with the target untouched.
    fn failure_problems(&self, exit: i32, status: &str, code: &str, mentions: &str) -> (Run, Vec<String>) {
        let before = self.target_rows();
        let schema_before = schema_sql(&self.target);
        let run = self.run();
        let mut problems = Vec::new();
        if run.code != Some(exit) {
            problems.push(format!("expected exit code {exit}, got {:?}", run.code));
        }
        match run.single_json() {
            Err(e) => problems.push(e),
            Ok(doc) => {
                if doc["passed"] != false {
                    problems.push("expected `passed: false`".into());
                }
                if doc["status"] != status {
                    problems.push(format!("expected `status: \"{status}\"`, got {}", doc["status"]));
                }
                if doc["error_code"] != code {
                    problems.push(format!("expected `error_code: \"{code}\"`, got {}", doc["error_code"]));
                }
            }
        }
        if !run.stderr.contains(mentions) {
            problems.push(format!("expected stderr to mention {mentions}"));
        }
        if let Some(p) = run.panic_problem() {
            problems.push(p);
        }
        let after = self.target_rows();
        if after != before {
            problems.push(format!("expected the target to be unchanged\n{}", multiset_diff(&before, &after)));
        }
        if schema_sql(&self.target) != schema_before {
            problems.push("expected the target's definition to be unchanged".into());
        }
        let owned = owned_tables(&self.target);
        if !owned.is_empty() {
            problems.push(format!("expected no `_dpone_` tables left, found {owned:?}"));
        }
        (run, problems)
    }

    /// Like `failure_problems`, asserting there are none.
    fn run_expect_failure(&self, exit: i32, status: &str, code: &str, mentions: &str) -> Run {
        let (run, problems) = self.failure_problems(exit, status, code, mentions);
        assert!(problems.is_empty(), "{}\n{}", problems.join("\n"), run.describe());
        run
    }
}

// ---------------------------------------------------------------------------
// Successful replaces
// ---------------------------------------------------------------------------

/// The embedded route under `execution.verification.digest: xxh3_128`:
/// the window lands, and a rerun (its window read back and digested with
/// the same algorithm) is reported unchanged.
#[test]
fn the_xxh3_128_digest_verifies_the_embedded_route() {
    let source: Vec<Vec<Sql>> = (0..6).map(|i| row(i, Some(&at(BOUNDS[1], i * 1_000_000)))).collect();
    let fx = Fixture::new(&source, &[row(100, Some(START))]);
    let manifest = self::manifest().replace(
        "        chunking: {mode: bounded_window, parallelism: 3}\n",
        "        chunking: {mode: bounded_window, parallelism: 3}\n        verification: {digest: xxh3_128}\n",
    );
    assert_ne!(manifest, self::manifest());
    std::fs::write(&fx.manifest, manifest).expect("write manifest");
    let plan = fx.plan("text");
    assert!(plan.stdout.contains("xxh3_128-rowbinary-sum-mod-2^128/v1"), "the plan names the digest:\n{}", plan.describe());
    let doc = fx.run_and_check();
    assert_eq!(doc["inserted_rows"], 6);
    let rerun = fx.run_and_check();
    assert_eq!(rerun["target_unchanged"], true, "expected a rerun to report the target unchanged");
}

#[test]
fn rows_on_every_chunk_bound_land_in_exactly_one_chunk() {
    let mut source = Vec::new();
    let mut id = 0;
    for bound in BOUNDS {
        for offset in [-1, 0, 1] {
            id += 1;
            source.push(row(id, Some(&at(bound, offset))));
        }
    }
    // Start is included, end excluded; one microsecond either side of every bound.
    let target = vec![
        row(100, Some(&at(START, -1))),
        row(101, Some(START)),
        row(102, Some(BOUNDS[2])),
        row(103, Some(&at(END, -1))),
        row(104, Some(END)),
        row(105, Some("2026-09-01 12:00:00.000000")),
    ];
    let fx = Fixture::new(&source, &target);
    let doc = fx.run_and_check();
    // 18 rows; outside: start - 1us, end and end + 1us.
    assert_eq!(doc["inserted_rows"], 15, "expected 15 of the 18 source rows inside [start, end)");
    let per_chunk: Vec<u64> = doc["chunks"].as_array().expect("chunks").iter().map(|c| c["rows"].as_u64().expect("rows")).collect();
    assert_eq!(per_chunk, vec![3; 5], "expected each chunk to hold its lower bound, lower bound + 1us and upper bound - 1us");
    assert_eq!(doc["target_unchanged"], false, "the window changed");

    // Rerun: same contents, reported unchanged.
    let rerun = fx.run_and_check();
    assert_eq!(rerun["target_unchanged"], true, "expected a rerun to report the target unchanged");
}

#[test]
fn empty_window_deletes_the_window_and_keeps_everything_else() {
    let source = vec![row(1, Some(&at(START, -1))), row(2, Some(END)), row(3, Some("2026-09-12 00:00:00.000000")), row(4, None)];
    let target = vec![
        row(10, Some(START)),
        row(11, Some("2026-09-07 12:34:56.789012")),
        row(12, Some(&at(END, -1))),
        row(13, Some("2026-08-01 00:00:00.000000")),
        row(14, Some(END)),
        row(15, None),
    ];
    let fx = Fixture::new(&source, &target);
    let doc = fx.run_and_check();
    assert_eq!(doc["inserted_rows"], 0, "expected no rows inserted from an empty source window");
    assert_eq!(fx.target_rows().len(), 3, "expected only the three rows outside the window to remain");
}

#[test]
fn null_window_values_are_kept_in_the_target_and_not_copied_from_the_source() {
    let source = vec![row(1, None), row(1, None), row(2, Some("2026-09-07 00:00:00.000000")), row(3, None)];
    let target = vec![
        row(10, None),
        row(10, None),
        with(row(11, None), 3, Sql::Null),
        row(12, Some("2026-09-07 00:00:00.000000")),
        row(13, Some("2026-09-10 00:00:00.000000")),
    ];
    let fx = Fixture::new(&source, &target);
    let doc = fx.run_and_check();
    assert_eq!(doc["kept_null_window_rows"], 3, "expected the 3 target rows with NULL ts to be kept");
    let nulls = fx.target_rows().iter().filter(|r| r[TS] == "null").count();
    assert_eq!(nulls, 3, "expected no source row with NULL ts to be copied");
}

#[test]
fn duplicate_rows_keep_their_multiplicity_within_and_across_chunks() {
    let a = row(1, Some("2026-09-06 01:00:00.000000")); // chunk 0
    let b = row(2, Some("2026-09-07 09:00:00.000000")); // chunk 2
    let c = row(3, Some(&at(END, -1))); // last chunk, on the edge
    let mut source = vec![a.clone(), a.clone(), a.clone(), b.clone(), b.clone(), c.clone(), c.clone(), c.clone(), c.clone()];
    // The same values in two chunks: only the timestamp differs.
    source.push(with(a.clone(), TS, text("2026-09-08 17:00:00.000000")));
    source.push(with(a.clone(), TS, text("2026-09-08 17:00:00.000000")));
    let kept = row(9, Some("2026-09-01 00:00:00.000000"));
    let target = vec![kept.clone(), kept.clone(), b.clone(), b.clone(), b.clone(), b.clone(), b.clone()];
    let fx = Fixture::new(&source, &target);
    fx.run_and_check();
    let after = fx.target_rows();
    let count = |r: &Vec<Sql>| {
        let rendered = dump_one(r);
        after.iter().filter(|x| **x == rendered).count()
    };
    assert_eq!(count(&a), 3, "expected the row repeated 3 times in chunk 0 to appear 3 times");
    assert_eq!(count(&b), 2, "expected 2 copies of the source row, not the 5 stale target copies");
    assert_eq!(count(&c), 4, "expected 4 copies of the row just before the end");
    assert_eq!(count(&kept), 2, "expected the duplicated kept row twice");
}

/// Renders one row the way `dump` does, via an in-memory table.
fn dump_one(r: &[Sql]) -> Row {
    let conn = Connection::open_in_memory().expect("in-memory database");
    conn.execute_batch(DDL).expect("create table");
    let sql = format!("INSERT INTO t VALUES ({})", (1..=r.len()).map(|i| format!("?{i}")).collect::<Vec<_>>().join(", "));
    conn.execute(&sql, rusqlite::params_from_iter(r.iter())).expect("insert");
    sqlite_route::common::dump_conn(&conn, "t").remove(0)
}

#[test]
fn empty_strings_and_nulls_stay_distinct() {
    let inside = "2026-09-07 10:00:00.000000";
    let outside = "2026-09-02 10:00:00.000000";
    // Every nullable column except the window column NULL.
    let nulls = |id, ts| {
        let mut r = row(id, ts);
        r[2..].fill(Sql::Null);
        r
    };
    let source = vec![
        with(row(1, Some(inside)), 3, text("")),
        with(row(1, Some(inside)), 3, Sql::Null),
        nulls(2, Some(inside)),
        with(row(3, Some(inside)), 3, text("naïve café ✓ 'quoted' \"double\"\nnew line")),
        with(with(row(4, Some(inside)), 2, text("9999999999.99")), 7, Sql::Real(0.1 + 0.2)),
        with(with(row(5, Some(inside)), 2, text("-0.01")), 5, text("1900-01-01")),
        with(with(row(6, Some(inside)), 2, text("100")), 5, text("2299-12-31")),
    ];
    let target = vec![
        with(row(10, Some(outside)), 3, text("")),
        with(row(10, Some(outside)), 3, Sql::Null),
        nulls(11, Some(outside)),
        nulls(12, None),
        with(row(13, None), 3, text("")),
    ];
    let fx = Fixture::new(&source, &target);
    fx.run_and_check();
    let after = fx.target_rows();
    let names: Vec<&str> = after.iter().filter(|r| r[0] == "int:1").map(|r| r[3].as_str()).collect();
    assert_eq!(names, vec!["null", "text:\"\""], "expected one NULL name and one empty name for id 1");
}

// ---------------------------------------------------------------------------
// Failures and refusals leave the target untouched
// ---------------------------------------------------------------------------

#[test]
fn a_value_that_violates_its_declared_type_fails_the_run_and_leaves_the_target_unchanged() {
    // Every chunk has rows and three run at once; the bad row is in the last
    // chunk, so other chunks are in flight when it fails. Repeated, because
    // cleaning up after in-flight chunks is timing-dependent.
    for attempt in 1..=3 {
        let mut source: Vec<Vec<Sql>> = (1..=8).map(|i| row(i, Some(&at(BOUNDS[(i % 5) as usize], i)))).collect();
        source.push(with(row(99, Some("2026-09-08 20:00:00.000000")), 0, text("abc")));
        let target = vec![row(10, Some("2026-09-07 00:00:00.000000")), row(11, Some("2026-09-01 00:00:00.000000")), row(12, None)];
        let fx = Fixture::new(&source, &target);
        let (run, mut problems) = fx.failure_problems(1, "failed", "invalid_value", "`id`");
        let message = run.single_json().map(|d| d["errors"][0]["message"].as_str().unwrap_or_default().to_string()).unwrap_or_default();
        if !(message.contains("`id`") && message.contains("TEXT")) {
            problems.push(format!("expected the error message to name column `id` and the stored TEXT, got `{message}`"));
        }
        assert!(problems.is_empty(), "attempt {attempt}:\n{}\n{}", problems.join("\n"), run.describe());
    }
}

/// A nullable source column into a NOT NULL target column is checked row
/// by row (issue 13): clean data is published; the first NULL fails the
/// run naming the column with the target unchanged; `plan` says so; the
/// old refusal stays available as `nullable_into_not_null: refuse`.
#[test]
fn a_nullable_source_into_a_not_null_target_is_checked_row_by_row() {
    let not_null = DDL.replace("name TEXT", "name TEXT NOT NULL");
    let target_rows = vec![row(10, Some("2026-09-07 00:00:00.000000"))];
    let clean = vec![row(1, Some("2026-09-07 00:00:00.000000")), row(2, Some("2026-09-01 00:00:00.000000"))];
    let fx = Fixture::with_ddl(DDL, &clean, &not_null, &target_rows);
    let plan = fx.plan("json");
    let doc = plan.single_json().unwrap();
    assert_eq!((plan.code, doc["null_checks"].clone()), (Some(0), serde_json::json!(["name"])), "{}", plan.describe());
    let run = fx.run();
    assert_eq!(run.code, Some(0), "clean data is published: {}", run.describe());

    let mut with_null = row(3, Some("2026-09-08 00:00:00.000000"));
    with_null[3] = Sql::Null;
    let fx = Fixture::with_ddl(DDL, &[clean[0].clone(), with_null], &not_null, &target_rows);
    let run = fx.run_expect_failure(1, "failed", "invalid_value", "`name`");
    assert!(run.stderr.contains("NULL"), "{}", run.describe());

    let yaml = std::fs::read_to_string(&fx.manifest).unwrap();
    std::fs::write(&fx.manifest, yaml.replace("  strategy:", "  options: {nullable_into_not_null: refuse}\n  strategy:")).unwrap();
    fx.run_expect_failure(2, "refused", "schema_mismatch", "`name`");
}

#[test]
fn schema_mismatches_are_refused_before_any_write() {
    // (case, target DDL, expected refusal code, column the refusal must name)
    let cases = [
        ("different_type", DDL.replace("amount DECIMAL(12,2)", "amount TEXT"), "schema_mismatch", "`amount`"),
        ("missing_column", DDL.replace(", f REAL", ""), "schema_mismatch", "`f`"),
        ("extra_column", DDL.replace("f REAL)", "f REAL, g TEXT)"), "schema_mismatch", "`g`"),
        ("window_column_not_a_timestamp", DDL.replace("ts TIMESTAMP", "ts TEXT"), "window_column_type", "`ts`"),
    ];
    let source = vec![row(1, Some("2026-09-07 00:00:00.000000")), row(2, Some("2026-09-01 00:00:00.000000"))];
    for (name, target_ddl, code, column) in cases {
        // Target rows must fit the target's own shape.
        let target_rows: Vec<Vec<Sql>> = if name == "missing_column" {
            vec![row(10, Some("2026-09-07 00:00:00.000000"))[..7].to_vec()]
        } else if name == "extra_column" {
            let mut r = row(10, Some("2026-09-07 00:00:00.000000"));
            r.push(text("extra"));
            vec![r]
        } else {
            vec![row(10, Some("2026-09-07 00:00:00.000000"))]
        };
        let fx = Fixture::with_ddl(DDL, &source, &target_ddl, &target_rows);
        let run = fx.run_expect_failure(2, "refused", code, column);
        assert!(!fx.dir.join("work").exists(), "{name}: expected no work dir or evidence for a refused run");
        assert!(run.stderr.contains("nothing was written"), "{name}: expected stderr to say nothing was written:\n{}", run.describe());

        // `plan` lists the refusals and exits 2.
        let plan = fx.plan("text");
        assert_eq!(plan.code, Some(2), "{name}: expected `plan` to exit 2 on a refused plan:\n{}", plan.describe());
        assert!(plan.stdout.contains("refusals    "), "{name}: expected a refusals line:\n{}", plan.describe());
        assert!(plan.stdout.contains("(nothing will be written)"), "{name}: expected the plan to say nothing will be written");
        assert!(
            plan.stdout.contains(&format!("error[{code}]")) && plan.stdout.contains(column),
            "{name}: expected the refusal naming {column}"
        );
        let plan_json = fx.plan("json");
        assert_eq!(plan_json.code, Some(2), "{name}: expected `plan --format json` to exit 2:\n{}", plan_json.describe());
        let doc = plan_json.single_json().unwrap_or_else(|e| panic!("{name}: {e}:\n{}", plan_json.describe()));
        let codes: Vec<&str> = doc["refusals"].as_array().expect("refusals").iter().filter_map(|r| r["code"].as_str()).collect();
        assert!(codes.contains(&code), "{name}: expected refusal {code} in the JSON plan, got {codes:?}");
        assert_eq!(owned_tables(&fx.target), Vec::<String>::new(), "{name}: expected `plan` to create nothing");
    }
}

#[test]
fn a_malformed_window_timestamp_in_the_source_is_refused() {
    let source = vec![row(1, Some("2026-09-07 00:00:00.000000")), row(2, Some("2026-09-03T00:00:00Z"))];
    let target = vec![row(10, Some("2026-09-07 00:00:00.000000")), row(11, None)];
    let fx = Fixture::new(&source, &target);

    let plan = fx.plan("json");
    let mut problems = Vec::new();
    let plan_refuses = plan.code == Some(2)
        && plan
            .single_json()
            .is_ok_and(|d| d["refusals"].as_array().is_some_and(|r| r.iter().any(|x| x["code"] == "malformed_window_values")));
    if !plan_refuses {
        problems.push(format!(
            "expected `plan` to list the source's malformed window value as a refusal (a read-only check finds it) and exit 2:\n{}",
            plan.describe()
        ));
    }
    let (run, run_problems) = fx.failure_problems(2, "refused", "malformed_window_values", "2026-09-03T00:00:00Z");
    if !run_problems.is_empty() {
        problems.push(format!("`run`: {}\n{}", run_problems.join("\n"), run.describe()));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

#[test]
fn a_malformed_window_timestamp_in_the_target_is_refused() {
    let source = vec![row(1, Some("2026-09-07 00:00:00.000000"))];
    let target = vec![row(10, Some("2026-09-07")), row(11, Some("2026-09-01 00:00:00.000000"))];
    let fx = Fixture::new(&source, &target);
    fx.run_expect_failure(2, "refused", "malformed_window_values", "2026-09-07");
}

// ---------------------------------------------------------------------------
// Plan
// ---------------------------------------------------------------------------

#[test]
fn plan_json_shows_window_chunks_route_publication_and_no_refusals() {
    let fx = Fixture::new(&[row(1, Some("2026-09-07 00:00:00.000000"))], &[row(2, None)]);
    let before = fx.target_rows();
    let plan = fx.plan("json");
    assert_eq!(plan.code, Some(0), "expected a runnable plan to exit 0:\n{}", plan.describe());
    let doc = plan.single_json().unwrap_or_else(|e| panic!("{e}:\n{}", plan.describe()));
    let w = &doc["window"];
    assert_eq!(w["column"], "ts", "window column");
    assert_eq!(w["start"], BOUNDS_RFC3339[0], "window start = end - lookback");
    assert_eq!(w["end"], INTERVAL_END, "window end = --interval-end");
    assert_eq!(w["lookback"], "P3D", "lookback");
    assert_eq!(w["chunk_interval"], "PT16H", "chunk interval");
    assert_eq!(w["chunk_count"], 5, "expected 5 chunks (the last one 8 hours)");
    let chunks: Vec<(String, String)> = w["chunks"]
        .as_array()
        .expect("chunks")
        .iter()
        .map(|c| (c["start"].as_str().expect("start").to_string(), c["end"].as_str().expect("end").to_string()))
        .collect();
    let want: Vec<(String, String)> = BOUNDS_RFC3339.windows(2).map(|b| (b[0].to_string(), b[1].to_string())).collect();
    assert_eq!(chunks, want, "expected contiguous half-open chunks covering the window exactly");
    assert_eq!(doc["route"]["name"], "sqlite->sqlite", "route");
    assert_eq!(doc["publication"]["method"], "sqlite_transaction", "publication method");
    assert_eq!(doc["publication"]["atomic"], true, "atomic publication");
    assert_eq!(doc["staging"]["parallelism"], 3, "chunk parallelism");
    assert_eq!(doc["staging"]["block_rows"], 2, "frame rows");
    assert_eq!(doc["probed"], true, "expected the plan to be probed");
    assert_eq!(doc["columns"].as_array().map(Vec::len), Some(8), "expected the 8 probed columns");
    assert_eq!(doc["refusals"], serde_json::json!([]), "expected an empty refusals list");
    assert_eq!(fx.target_rows(), before, "expected `plan` to leave the target unchanged");
    assert!(!fx.dir.join("work").exists(), "expected `plan` to write no work dir");
}
