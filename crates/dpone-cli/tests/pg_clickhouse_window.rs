//! Window replace from PostgreSQL into ClickHouse through the real `dpone`
//! binary, checked by exact typed multiset equality.
//!
//! Every test builds the expected target in Rust: the target rows it
//! pre-inserted whose window value is NULL or outside `[start, end)`, plus
//! the source rows it inserted inside the window, duplicates kept. The actual
//! target is read back as RowBinary and decoded under the target's column
//! types, so a single changed bit, a lost duplicate or a rounded digit fails.
//!
//! Every successful run is also checked in text: ClickHouse's own
//! `toString` of the target against PostgreSQL's own text of the source
//! (`pg_clickhouse_common/render.rs`), so a value dpone's decoder and
//! encoder agreed on but ClickHouse reads differently still fails.
//!
//! Window: `[2026-09-06, 2026-09-09)` in three chunks of one day, two chunks
//! at a time, frames of at most 3 rows (chunks span several frames).

mod harness;
mod pg_clickhouse_common;
/// Types: every value moved exactly, or the run fails naming the column.
#[path = "pg_clickhouse_window/types.rs"]
mod types;
#[path = "pg_clickhouse_common/window.rs"]
mod window;

use dpone_core::value::Value;
use harness::codes;
use pg_clickhouse_common::{
    BOUNDS, Fixture, ManifestOptions, Row, Setup, assert_same_rows, at, col, dec, expected_after_replace, expected_after_replace_in,
    id_ts_not_null, in_window, int, micros, rows_per_chunk, text,
};
use window::{TS, basic_cols, replace_and_check, row, run_and_check, with};

// ---------------------------------------------------------------------------
// Which rows are replaced
// ---------------------------------------------------------------------------

#[test]
fn an_empty_source_window_removes_the_targets_window_rows_and_keeps_the_rest() {
    let target = vec![
        row(10, at(BOUNDS[0], 0)),
        row(11, at("2026-09-07T12:34:56.789012Z", 0)),
        row(12, at(BOUNDS[3], -1)),
        row(13, at("2026-08-01T00:00:00Z", 0)),
        row(14, at(BOUNDS[3], 0)),
        row(15, at(BOUNDS[0], -1)),
        row(16, Value::Null),
    ];
    // (case, source rows): an empty table, and rows that all miss the window.
    let cases = [
        ("empty source table", vec![]),
        (
            "source rows only outside the window",
            vec![row(1, at(BOUNDS[0], -1)), row(2, at(BOUNDS[3], 0)), row(3, at("2026-09-12T00:00:00Z", 0)), row(4, Value::Null)],
        ),
    ];
    for (case, source) in cases {
        let fx = Fixture::new("pgch_empty", basic_cols());
        let doc = replace_and_check(&fx, &source, &target);
        assert_eq!(doc["inserted_rows"], 0, "{case}: expected nothing inserted");
        assert_eq!(doc["replaced_rows"], 3, "{case}: expected the 3 target rows inside the window to be replaced");
        assert_eq!(fx.target_rows().len(), 4, "{case}: expected the 4 rows outside the window (one NULL) to remain");
        fx.finish();
    }
}

#[test]
fn null_window_values_stay_in_the_target_and_are_not_copied_from_the_source() {
    let fx = Fixture::new("pgch_nulls", basic_cols());
    let source = vec![
        row(1, Value::Null),
        row(1, Value::Null),
        with(row(2, Value::Null), 3, Value::Null),
        row(3, at("2026-09-07T00:00:00Z", 0)),
        with(with(row(4, at("2026-09-08T01:00:00Z", 0)), 2, Value::Null), 3, Value::Null),
    ];
    let target = vec![
        row(10, Value::Null),
        row(10, Value::Null),
        with(with(row(11, Value::Null), 2, Value::Null), 3, Value::Null),
        row(12, at("2026-09-07T00:00:00Z", 0)),
        row(13, at("2026-09-10T00:00:00Z", 0)),
    ];
    let doc = replace_and_check(&fx, &source, &target);
    assert_eq!(doc["kept_null_window_rows"], 3, "expected the 3 target rows with a NULL ts to be kept");
    let nulls: Vec<Row> = fx.target_rows().into_iter().filter(|r| r[TS].is_null()).collect();
    assert_same_rows(&target[..3], &nulls, "rows with a NULL ts after the run (exactly the target's, none from the source)");
    fx.finish();
}

#[test]
fn duplicate_rows_keep_their_multiplicity_within_and_across_chunks() {
    let fx = Fixture::new("pgch_dups", basic_cols());
    let a = row(1, at("2026-09-06T01:00:00Z", 0)); // chunk 0
    let b = row(2, at("2026-09-07T09:00:00Z", 0)); // chunk 1
    let c = row(3, at(BOUNDS[3], -1)); // chunk 2, on its edge
    let a_later = with(a.clone(), TS, at("2026-09-08T17:00:00Z", 0)); // a's values in chunk 2
    let mut source = vec![a.clone(); 7]; // more rows than a frame holds
    source.extend(vec![b.clone(); 2]);
    source.extend(vec![c.clone(); 4]);
    source.extend(vec![a_later.clone(); 2]);
    let kept = row(9, at("2026-09-01T00:00:00Z", 0));
    let mut target = vec![kept.clone(); 2];
    target.extend(vec![b.clone(); 5]); // stale copies inside the window
    replace_and_check(&fx, &source, &target);
    let after = fx.target_rows();
    let count = |r: &Row| after.iter().filter(|x| *x == r).count();
    assert_eq!(count(&a), 7, "expected the row repeated 7 times in chunk 0 to appear 7 times");
    assert_eq!(count(&b), 2, "expected the source's 2 copies of b, not the target's 5 stale ones");
    assert_eq!(count(&c), 4, "expected 4 copies of the row 1us before the end");
    assert_eq!(count(&a_later), 2, "expected 2 copies of a's values in chunk 2");
    assert_eq!(count(&kept), 2, "expected the duplicated kept row twice");
    fx.finish();
}

#[test]
fn rows_on_every_chunk_bound_and_their_microsecond_neighbours_land_in_exactly_one_chunk() {
    let fx = Fixture::new("pgch_bounds", basic_cols());
    let mut source = Vec::new();
    for (i, bound) in BOUNDS.iter().enumerate() {
        for (j, offset) in [-1, 0, 1].into_iter().enumerate() {
            source.push(row((i * 3 + j) as i64 + 1, at(bound, offset)));
        }
    }
    // Start is included, end excluded.
    let target = vec![
        row(100, at(BOUNDS[0], -1)),
        row(101, at(BOUNDS[0], 0)),
        row(102, at(BOUNDS[1], 0)),
        row(103, at(BOUNDS[2], -1)),
        row(104, at(BOUNDS[3], -1)),
        row(105, at(BOUNDS[3], 0)),
        row(106, at(BOUNDS[3], 1)),
    ];
    let doc = replace_and_check(&fx, &source, &target);
    assert_eq!(doc["inserted_rows"], 9, "expected 9 of the 12 source rows inside [start, end): not start - 1us, end, end + 1us");
    let per_chunk: Vec<u64> = doc["chunks"].as_array().expect("chunks").iter().map(|c| c["rows"].as_u64().expect("rows")).collect();
    assert_eq!(per_chunk, vec![3, 3, 3], "expected each chunk to hold its lower bound, lower bound + 1us and upper bound - 1us");
    assert_eq!(doc["kept_rows"], 3, "expected the target rows at start - 1us, end and end + 1us to be kept");
    fx.finish();
}

#[test]
fn target_rows_outside_the_window_are_untouched() {
    let fx = Fixture::new("pgch_outside", basic_cols());
    // Source rows outside the window must not be copied either.
    let source = vec![
        row(1, at("2026-09-06T08:00:00Z", 0)),
        row(2, at("2026-09-08T23:00:00Z", 0)),
        row(3, at("2026-09-05T23:59:59.999999Z", 0)),
        row(4, at("2026-09-20T00:00:00Z", 0)),
    ];
    // Values that exist nowhere in the source.
    let outside = vec![
        vec![int(-900), at("1970-01-01T00:00:00Z", 0), dec("-0.0001", 4), text("")],
        vec![int(901), at("2026-09-05T23:59:59.999999Z", 0), dec("99999999999999.9999", 4), text("kept 🦀 \u{0}")],
        vec![int(902), at(BOUNDS[3], 0), Value::Null, Value::Null],
        vec![int(903), at("2299-12-31T23:59:59.999999Z", 0), dec("-99999999999999.9999", 4), text("ünïcödé")],
        vec![int(i64::MIN), Value::Null, dec("0", 4), text("null window")],
    ];
    let mut target = outside.clone();
    target.push(row(5, at("2026-09-07T00:00:00Z", 0)));
    replace_and_check(&fx, &source, &target);
    let after_outside: Vec<Row> = fx.target_rows().into_iter().filter(|r| !in_window(&r[TS])).collect();
    assert_same_rows(&outside, &after_outside, "target rows outside the window after the run (exactly the pre-existing ones)");
    fx.finish();
}

// ---------------------------------------------------------------------------
// Reruns, evidence and the backup
// ---------------------------------------------------------------------------

fn some_rows() -> (Vec<Row>, Vec<Row>) {
    let source = vec![
        row(1, at("2026-09-06T10:00:00Z", 0)),
        row(2, at("2026-09-07T10:00:00Z", 0)),
        row(2, at("2026-09-07T10:00:00Z", 0)),
        row(3, at("2026-09-08T10:00:00Z", 0)),
        row(4, at("2026-09-01T10:00:00Z", 0)),
        row(5, Value::Null),
    ];
    let target = vec![
        row(20, at("2026-09-06T10:00:00Z", 0)),
        row(21, at("2026-08-30T10:00:00Z", 0)),
        row(22, Value::Null),
        row(23, at("2026-09-10T00:00:00Z", 0)),
    ];
    (source, target)
}

#[test]
fn rerunning_the_same_command_gives_the_same_target_and_reports_it_unchanged() {
    let fx = Fixture::new("pgch_rerun", basic_cols());
    let (source, target) = some_rows();
    let first = replace_and_check(&fx, &source, &target);
    assert_eq!(first["target_unchanged"], false, "expected the first run to change the window");
    let after_first = fx.target_rows();

    let second = run_and_check(&fx, &source);
    assert_same_rows(&after_first, &fx.target_rows(), "target after the rerun (identical to after the first run)");
    assert_eq!(second["target_unchanged"], true, "expected the rerun to report `target_unchanged: true`");
    assert_eq!(second["replaced_rows"], second["inserted_rows"], "expected the rerun to replace the window with as many rows");
    fx.finish();
}

#[test]
fn a_target_whose_window_already_holds_the_source_rows_is_reported_unchanged_on_the_first_run() {
    let fx = Fixture::new("pgch_same", basic_cols());
    let (source, outside) = some_rows();
    let mut target: Vec<Row> = source.iter().filter(|r| in_window(&r[TS])).cloned().collect();
    target.extend(outside.into_iter().filter(|r| !in_window(&r[TS])));
    let doc = replace_and_check(&fx, &source, &target);
    assert_same_rows(&target, &fx.target_rows(), "target after the run (unchanged)");
    assert_eq!(doc["target_unchanged"], true, "expected `target_unchanged: true` when the window already held exactly the source rows");
    fx.finish();
}

/// A window anchored off the day grid, to the microsecond: the bounds are
/// rendered into PostgreSQL and ClickHouse SQL without losing a digit.
#[test]
fn a_window_anchored_at_an_arbitrary_microsecond_has_exact_bounds() {
    let fx = Fixture::new("pgch_anchor", basic_cols());
    let end_text = "2026-09-09T13:14:15.123457Z";
    let end = micros(end_text);
    let day = 86_400_000_000;
    let bounds = [end - 3 * day, end - 2 * day, end - day, end];
    let mut source = Vec::new();
    for (i, b) in bounds.iter().enumerate() {
        for (j, offset) in [-1, 0, 1].into_iter().enumerate() {
            source.push(row((i * 3 + j) as i64 + 1, Value::Micros(b + offset)));
        }
    }
    let target = vec![
        row(100, Value::Micros(bounds[0] - 1)),
        row(101, Value::Micros(bounds[0])),
        row(102, Value::Micros(end - 1)),
        row(103, Value::Micros(end)),
    ];
    fx.insert_source(&source);
    fx.insert_target(&target);
    let m = fx.manifest.display().to_string();
    let run = fx.dpone(&["run", &m, "--interval-end", end_text, "--format", "json"]);
    assert_eq!(run.code, Some(0), "expected the run to succeed:\n{}", run.describe());
    let expected = expected_after_replace_in(&target, &source, TS, bounds[0], end);
    assert_same_rows(&expected, &fx.target_rows(), "target after a run anchored at an arbitrary microsecond");
    let doc = run.json();
    let per_chunk: Vec<u64> = doc["chunks"].as_array().expect("chunks").iter().map(|c| c["rows"].as_u64().expect("rows")).collect();
    assert_eq!(per_chunk, vec![3, 3, 3], "expected each chunk to hold its lower bound, lower bound + 1us and upper bound - 1us");
    fx.finish();
}

/// Every rerun keeps, as the target's only backup, the target that this
/// run replaced (here: with a row someone added to the window in between),
/// never the one an earlier run replaced, under a name no earlier
/// execution used. Names carry a token per execution, so this holds
/// whether or not two runs share a run id (they do when no PostgreSQL
/// transaction took an xid in between; the engine's fake-port tests cover
/// that case deterministically).
#[test]
fn every_rerun_keeps_the_target_it_replaced_as_the_only_backup() {
    let fx = Fixture::new("pgch_samerun", basic_cols());
    let (source, target) = some_rows();
    fx.insert_source(&source);
    fx.insert_target(&target);
    let mut names = std::collections::BTreeSet::new();
    run_and_check(&fx, &source);
    names.extend(fx.owned_tables());
    for attempt in 0..3 {
        // Someone writes into the target's window; PostgreSQL is untouched.
        fx.insert_target(&[row(1000 + attempt, at("2026-09-07T12:00:00Z", attempt))]);
        let before = fx.target_rows();
        run_and_check(&fx, &source);
        let backups = fx.owned_tables();
        assert_eq!(backups.len(), 1, "rerun {attempt}: expected one backup table, found {backups:?}");
        assert!(names.insert(backups[0].clone()), "rerun {attempt}: the backup name {} was used before: {names:?}", backups[0]);
        assert_same_rows(&before, &fx.table_rows(&backups[0]), &format!("rerun {attempt}: the backup is the target it replaced"));
    }
    fx.finish();
}

fn read_evidence(doc: &serde_json::Value) -> serde_json::Value {
    let path = doc["evidence_path"].as_str().expect("the report names its evidence file");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("expected the evidence file {path} to exist: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("expected {path} to be JSON: {e}"))
}

/// Checks one run's evidence against what the test knows, and returns the backup table's name.
fn check_evidence(fx: &Fixture, doc: &serde_json::Value, source: &[Row], target_before: &[Row]) -> String {
    let ev = read_evidence(doc);
    assert_eq!(ev["run_id"], doc["run_id"], "expected the evidence to belong to the reported run");
    assert_eq!(ev["publication"]["outcome"], "published", "expected `publication.outcome: published` in the evidence");
    let inside = source.iter().filter(|r| in_window(&r[TS])).count() as u64;
    let chunks: Vec<u64> = ev["chunks"].as_array().expect("evidence chunks").iter().map(|c| c["rows"].as_u64().expect("rows")).collect();
    assert_eq!(chunks.iter().sum::<u64>(), inside, "expected the evidence's chunk rows to sum to the source rows inside the window");
    assert_eq!(chunks, rows_per_chunk(source, TS), "expected the evidence's per-chunk rows");
    assert_eq!(ev["source_rows"], inside, "expected source_rows = source rows inside the window");
    let kept = target_before.iter().filter(|r| !in_window(&r[TS])).count() as u64;
    assert_eq!(ev["generation"]["kept_rows"], kept, "expected generation.kept_rows = target rows outside the window");
    assert_eq!(ev["generation"]["rows"], kept + inside, "expected generation.rows = kept + window rows");
    // The kept rows were copied and digested: their digest counts their NULL window values.
    let null_window = target_before.iter().filter(|r| r[TS].is_null()).count() as u64;
    assert_eq!(ev["generation"]["kept_verified_by"], "digest", "expected the copied kept rows to be digested");
    assert_eq!(ev["generation"]["kept_digest"]["rows"], kept, "expected the kept digest to count the kept rows");
    assert_eq!(ev["generation"]["kept_digest"]["null_counts"][TS], null_window, "expected the kept digest's NULL window values");
    let backup = ev["publication"]["backup_table"].as_str().expect("the evidence names the backup table").to_string();
    assert_eq!(fx.owned_tables(), vec![backup.clone()], "expected the evidence's backup table to be the only `_dpone_` table");
    assert_same_rows(target_before, &fx.table_rows(&backup), "backup table (the target as it was before the run)");
    backup
}

#[test]
fn evidence_records_the_publication_and_exactly_one_backup_of_the_previous_target_is_kept() {
    let fx = Fixture::new("pgch_evidence", basic_cols());
    let (mut source, target) = some_rows();
    fx.insert_source(&source);
    fx.insert_target(&target);
    let first = run_and_check(&fx, &source);
    let backup1 = check_evidence(&fx, &first, &source, &target);

    // A new source row gives a new source version, hence a new run.
    let extra = row(6, at("2026-09-08T20:00:00Z", 0));
    fx.insert_source(std::slice::from_ref(&extra));
    source.push(extra);
    let after_first = fx.target_rows();
    let second = run_and_check(&fx, &source);
    assert_ne!(first["run_id"], second["run_id"], "expected a changed source to give a new run id");
    let backup2 = check_evidence(&fx, &second, &source, &after_first);
    assert_ne!(backup1, backup2, "expected the second run to keep its own backup");
    fx.finish();
}

/// `execution.verification.digest: xxh3_128`: the same window moves and
/// verifies (the stream's digest against ClickHouse's
/// `sum(xxh3_128(formatRowNoNewline(...)))` of each staging table), and the
/// plan and every digest of the evidence name the algorithm.
#[test]
fn the_xxh3_128_digest_verifies_the_window_and_names_itself_in_plan_and_evidence() {
    const TAG: &str = "xxh3_128-rowbinary-sum-mod-2^128/v1";
    let fx = Fixture::new("pgch_xxh3", basic_cols());
    fx.write_manifest(&ManifestOptions { digest: Some("xxh3_128".into()), ..ManifestOptions::default() });
    let plan = fx.plan();
    assert_eq!(plan.code, Some(0), "{}", plan.describe());
    assert_eq!(plan.json()["staging"]["digest"], "xxh3_128", "{}", plan.describe());
    assert_eq!(plan.json()["staging"]["digest_tag"], TAG, "{}", plan.describe());
    let (source, target) = some_rows();
    let doc = replace_and_check(&fx, &source, &target);
    check_evidence(&fx, &doc, &source, &target);
    let ev = read_evidence(&doc);
    assert!(ev["digest_note"].as_str().is_some_and(|n| n.contains("XXH3-128")), "{}", ev["digest_note"]);
    for c in ev["chunks"].as_array().expect("chunks") {
        for d in ["stream_digest", "staged_digest"] {
            assert_eq!(c[d]["algorithm"], TAG, "chunk {}'s {d}", c["index"]);
            assert!(c[d]["sum"].as_str().is_some_and(|s| s.starts_with("xxh3_128:")), "chunk {}'s {d}: {}", c["index"], c[d]);
        }
    }
    assert_eq!(ev["generation"]["digest"]["algorithm"], TAG);
    assert_eq!(ev["generation"]["kept_digest"]["algorithm"], TAG);
    fx.finish();
}

#[test]
fn plan_lists_no_refusals_for_a_runnable_window() {
    let fx = Fixture::new("pgch_plan", basic_cols());
    let plan = fx.plan();
    assert_eq!(plan.code, Some(0), "expected a runnable plan to exit 0:\n{}", plan.describe());
    let doc = plan.json();
    assert_eq!(codes(&doc["refusals"]), Vec::<String>::new(), "expected no refusals");
    assert_eq!(doc["route"]["name"], "postgres->clickhouse", "route");
    assert_eq!(doc["publication"]["method"], "exchange_tables", "publication method");
    assert_eq!(doc["window"]["chunk_count"], 3, "expected 3 chunks of one day");
    let names: Vec<&str> = doc["columns"].as_array().expect("probed columns").iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, vec!["id", "ts", "amount", "name"], "expected the probed columns in target order");
    assert_eq!(fx.owned_tables(), Vec::<String>::new(), "expected `plan` to create nothing");
    assert!(!fx.work_dir().exists(), "expected `plan` to write no work dir");
    fx.finish();
}

// ---------------------------------------------------------------------------
// Target layouts that are admitted
// ---------------------------------------------------------------------------

/// A partitioned, sorted target with LowCardinality and compressed columns
/// is a plain MergeTree: every chunk's parts and the kept rows must land in
/// the right partitions, exactly.
#[test]
fn a_partitioned_sorted_target_with_low_cardinality_and_codecs_is_replaced_exactly() {
    let cols = id_ts_not_null([
        col("amount", "numeric(18,4)", "Nullable(Decimal(18, 4))"),
        col("name", "text", "LowCardinality(Nullable(String))"),
    ]);
    let mut setup = Setup::new("pgch_partitioned", cols);
    setup.target[2].ch_suffix = "CODEC(ZSTD(3))".into();
    setup.table_engine = Some("MergeTree PARTITION BY toYYYYMMDD(ts) ORDER BY (id, ts) SETTINGS index_granularity = 2".into());
    let fx = Fixture::create(setup);
    let r = |id: i64, ts: &str| vec![int(id), at(ts, 0), dec(&format!("{id}.5"), 4), text(&format!("group {}", id % 3))];
    let source: Vec<Row> =
        (1..=12).map(|i| r(i, &format!("2026-09-0{}T{:02}:00:00Z", 6 + i % 3, i))).chain([r(13, "2026-09-05T23:00:00Z")]).collect();
    let target = vec![
        r(20, "2026-09-06T05:00:00Z"),
        r(21, "2026-09-08T23:59:59Z"),
        r(22, "2026-09-05T12:00:00Z"), // same partition as a kept row, outside
        r(23, "2026-09-09T00:00:00Z"),
        r(24, "2026-08-01T00:00:00Z"),
    ];
    replace_and_check(&fx, &source, &target);
    fx.finish();
}

/// Staging tables may live in another database (`sink.staging.schema`);
/// none is left there afterwards.
#[test]
fn a_separate_staging_database_is_used_and_left_clean() {
    let fx = Fixture::new("pgch_staging", basic_cols());
    let staging = format!("{}_stg", fx.db);
    fx.ch_exec(&format!("CREATE DATABASE {staging} ENGINE = Atomic"));
    fx.write_manifest(&ManifestOptions { staging_schema: Some(staging.clone()), ..Default::default() });
    let (source, target) = some_rows();
    let doc = replace_and_check(&fx, &source, &target);
    let ev = read_evidence(&doc);
    let staged_in: Vec<&str> = ev["chunks"].as_array().expect("chunks").iter().filter_map(|c| c["staging_table"].as_str()).collect();
    assert_eq!(staged_in.len(), 3, "expected one staging table per chunk in the evidence");
    let left = fx.ch_strings(&format!("SELECT name FROM system.tables WHERE database = '{staging}'"));
    assert_eq!(left, Vec::<String>::new(), "expected no table left in the staging database");
    fx.ch_exec(&format!("DROP DATABASE {staging} SYNC"));
    fx.finish();
}

/// A view reading another table whose name merely starts with the target's
/// name does not depend on the target and must not block the run.
#[test]
fn a_view_on_a_table_whose_name_extends_the_targets_does_not_block_the_run() {
    let fx = Fixture::new("pgch_viewprefix", basic_cols());
    fx.ch_exec(&format!("CREATE TABLE {}.t_archive (id Int64) ENGINE = MergeTree ORDER BY id", fx.db));
    fx.ch_exec(&format!("CREATE VIEW {0}.archive_view AS SELECT id FROM {0}.t_archive", fx.db));
    let (source, target) = some_rows();
    fx.insert_source(&source);
    fx.insert_target(&target);
    let plan = fx.plan();
    assert_eq!(plan.code, Some(0), "expected no refusal: the view reads {}.t_archive, not {}.t\n{}", fx.db, fx.db, plan.describe());
    let before = fx.target_rows();
    let run = fx.run();
    assert_eq!(run.code, Some(0), "expected the run to succeed:\n{}", run.describe());
    assert_same_rows(&expected_after_replace(&before, &source, TS), &fx.target_rows(), "target after the run");
    fx.finish();
}

/// Columns are matched by name, whatever their order on each side.
#[test]
fn columns_in_a_different_order_on_each_side_are_matched_by_name() {
    let source_cols = basic_cols();
    // Target order: name, ts, id, amount (the window column stays at index 1).
    let order = [3, 1, 0, 2];
    let mut setup = Setup::new("pgch_order", source_cols.clone());
    setup.target = order.iter().map(|&i| source_cols[i].clone()).collect();
    let fx = Fixture::create(setup);
    let reorder = |r: &Row| -> Row { order.iter().map(|&i| r[i].clone()).collect() };
    let (source, target) = some_rows();
    fx.insert_source(&source);
    fx.insert_target(&target.iter().map(reorder).collect::<Vec<_>>());
    run_and_check(&fx, &source.iter().map(reorder).collect::<Vec<_>>());
    fx.finish();
}

/// Names that need quoting on both sides: spaces, mixed case, a reserved
/// word, a double quote, a non-ASCII character; the window column among them.
#[test]
fn column_names_that_need_quoting_are_moved_exactly() {
    let cols = vec![
        col("id", "bigint NOT NULL", "Int64"),
        col("Event Time", "timestamptz", "Nullable(DateTime64(6, 'UTC'))"),
        col("Amount €", "numeric(18,4)", "Nullable(Decimal(18, 4))"),
        col("weird\"name", "text", "Nullable(String)"),
        col("select", "integer", "Nullable(Int32)"),
        col("MiXeD", "boolean", "Nullable(Bool)"),
    ];
    let fx = Fixture::new("pgch_quoting", cols);
    fx.write_manifest(&ManifestOptions { window_column: "Event Time".into(), ..Default::default() });
    let r = |id: i64, ts: Value| {
        vec![int(id), ts, dec(&format!("{id}.25"), 4), text(&format!("n{id}")), int(id as i32), Value::Bool(id % 2 == 0)]
    };
    let source = vec![
        r(1, at("2026-09-06T01:00:00Z", 0)),
        r(2, at("2026-09-08T01:00:00Z", 0)),
        r(3, Value::Null),
        r(4, at("2026-09-01T00:00:00Z", 0)),
    ];
    let target = vec![r(10, at("2026-09-07T01:00:00Z", 0)), r(11, at("2026-08-01T00:00:00Z", 0)), r(12, Value::Null)];
    replace_and_check(&fx, &source, &target);
    fx.finish();
}

/// Thousands of rows per chunk in frames of at most 1 KiB: every chunk is
/// sent as several INSERT requests (at most 64 frames each) into its
/// staging table, and still arrives exactly once.
#[test]
fn many_rows_per_chunk_across_several_insert_requests_arrive_exactly_once() {
    volume("pgch_volume", 1024, 20, 3);
}

/// Frames smaller than a KiB are allowed (`block_bytes` >= 1); a run with
/// them must finish (or refuse), never stall.
#[test]
fn frames_smaller_than_a_kibibyte_do_not_stall_the_run() {
    volume("pgch_small_frames", 512, 50, 3);
}

/// One row every 30 s from 2026-09-05T12:00Z for four days (every 97th name
/// NULL, every 1000th row twice), moved in frames of `block_bytes`.
fn volume(prefix: &'static str, block_bytes: u64, block_rows: u64, parallelism: u32) {
    let fx = Fixture::new(prefix, basic_cols());
    fx.write_manifest(&ManifestOptions { parallelism, block_rows: Some(block_rows), block_bytes: Some(block_bytes), ..Default::default() });
    let first = micros("2026-09-05T12:00:00Z");
    let n: i64 = 4 * 2880;
    let gen_row = |i: i64| -> Row {
        let name = if i % 97 == 0 { Value::Null } else { text(&format!("row {i}")) };
        vec![int(i), Value::Micros(first + i * 30_000_000), Value::Decimal { unscaled: ethnum::I256::from(i), scale: 4 }, name]
    };
    let select = "SELECT i, timestamptz '2026-09-05 12:00:00+00' + i * interval '30 seconds', i * 0.0001, \
                  CASE WHEN i % 97 = 0 THEN NULL ELSE 'row ' || i END";
    fx.pg_exec(&format!("INSERT INTO {}.t {select} FROM generate_series(0, {}) AS i", fx.schema, n - 1));
    fx.pg_exec(&format!("INSERT INTO {}.t {select} FROM generate_series(0, {}, 1000) AS i", fx.schema, n - 1));
    let mut source: Vec<Row> = (0..n).map(gen_row).collect();
    source.extend((0..n).step_by(1000).map(gen_row));
    let target: Vec<Row> = (0..3000).map(|i| row(100_000 + i, Value::Micros(first + i * 123_456_789))).collect();
    fx.insert_target(&target);
    let doc = run_and_check(&fx, &source);
    assert!(doc["inserted_rows"].as_u64().unwrap_or(0) > 8_000, "expected thousands of rows inside the window");
    fx.finish();
}

/// `source.options.columns` moves only the listed columns, in whatever
/// order they are listed; `extra` (a type the target lacks) is not read.
fn column_subset(prefix: &'static str, extra_type: &str, extra_value: &str) {
    let mut setup = Setup::new(prefix, basic_cols());
    setup.source.push(col("extra", extra_type, ""));
    let fx = Fixture::create(setup);
    fx.write_manifest(&ManifestOptions { columns: Some(["name", "ts", "id", "amount"].map(String::from).to_vec()), ..Default::default() });
    let (source, target) = some_rows();
    fx.insert_source_columns(&["id", "ts", "amount", "name"], &source);
    fx.pg_exec(&format!("UPDATE {}.t SET extra = {extra_value}", fx.schema));
    fx.insert_target(&target);
    run_and_check(&fx, &source);
    fx.finish();
}

#[test]
fn a_column_subset_moves_only_the_listed_columns() {
    column_subset("pgch_subset", "bigint", "7");
}

/// The remedy the `unsupported_type` refusal suggests ("exclude the column
/// with source.options.columns") must work: an unlisted column of an
/// unsupported type is never read, so it cannot be refused.
#[test]
fn an_unsupported_column_left_out_of_the_column_list_does_not_block_the_run() {
    column_subset("pgch_subset_unsupported", "jsonb", "'{\"k\": 1}'");
}

/// A PostgreSQL view is a source like a table (the refusals' hint says
/// "cast it in a view"): here it casts a json column to text. View columns
/// carry no NOT NULL, so every target column is nullable.
#[test]
fn a_postgresql_view_that_casts_an_unsupported_column_is_a_valid_source() {
    let cols = vec![
        col("id", "bigint", "Nullable(Int64)"),
        col("ts", "timestamptz", "Nullable(DateTime64(6, 'UTC'))"),
        col("payload", "json", "Nullable(String)"),
    ];
    let mut setup = Setup::new("pgch_view", cols);
    setup.target[2].ch = "Nullable(String)".into();
    let fx = Fixture::create(setup);
    fx.pg_exec(&format!("CREATE VIEW {0}.v AS SELECT id, ts, payload::text AS payload FROM {0}.t", fx.schema));
    fx.write_manifest(&ManifestOptions { source_table: Some("v".into()), ..Default::default() });
    let r = |id: i64, ts: Value, payload: &str| vec![int(id), ts, text(payload)];
    let source = vec![r(1, at("2026-09-07T01:00:00Z", 0), r#"{"a": [1, 2.5, "x"]}"#), r(2, at("2026-09-01T00:00:00Z", 0), "null")];
    fx.insert_source(&source);
    let target = vec![r(10, at("2026-09-08T00:00:00Z", 0), "{}"), r(11, Value::Null, "[]")];
    fx.insert_target(&target);
    run_and_check(&fx, &source);
    fx.finish();
}

/// A range-partitioned PostgreSQL table is read through its parent, across
/// partitions that cut through the chunks.
#[test]
fn a_partitioned_postgresql_table_is_read_across_its_partitions() {
    let mut setup = Setup::new("pgch_pgpart", basic_cols());
    setup.source[0].pg = "bigint NOT NULL".into();
    let fx = Fixture::create(setup);
    fx.pg_exec(&format!(
        "DROP TABLE {0}.t; \
         CREATE TABLE {0}.t (id bigint NOT NULL, ts timestamptz, amount numeric(18,4), name text) PARTITION BY RANGE (ts); \
         CREATE TABLE {0}.t_a PARTITION OF {0}.t FOR VALUES FROM (MINVALUE) TO ('2026-09-06 12:00:00+00'); \
         CREATE TABLE {0}.t_b PARTITION OF {0}.t FOR VALUES FROM ('2026-09-06 12:00:00+00') TO ('2026-09-08 06:00:00+00'); \
         CREATE TABLE {0}.t_c PARTITION OF {0}.t FOR VALUES FROM ('2026-09-08 06:00:00+00') TO (MAXVALUE); \
         CREATE TABLE {0}.t_null PARTITION OF {0}.t DEFAULT",
        fx.schema
    ));
    let source: Vec<Row> = (0..40)
        .map(|i| row(i, if i % 9 == 0 { Value::Null } else { Value::Micros(micros("2026-09-05T20:00:00Z") + i * 7_200_000_000) }))
        .collect();
    let (_, target) = some_rows();
    replace_and_check(&fx, &source, &target);
    fx.finish();
}
