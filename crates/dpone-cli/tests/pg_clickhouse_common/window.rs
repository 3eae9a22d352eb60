//! The table and the checks of the PostgreSQL -> ClickHouse window-replace
//! tests (`pg_clickhouse_window.rs` and its `types` module): a run is
//! checked by exact typed multiset equality against the expected target
//! (the target's rows outside the window, NULL window values included, plus
//! the source's rows inside it), by ClickHouse's own text of the values,
//! and by the report's counts.
#![allow(dead_code)] // each test binary uses its part

use crate::pg_clickhouse_common::{Fixture, Row, assert_same_rows, dec, expected_after_replace, in_window, int, rows_per_chunk, text};
use dpone_core::value::Value;

// ---------------------------------------------------------------------------
// A plain table: id, window column, a decimal and a string
// ---------------------------------------------------------------------------

pub use crate::pg_clickhouse_common::basic_cols;

/// Index of the window column in `basic_cols` and in every table below.
pub const TS: usize = 1;

/// A row of `basic_cols`; `ts` is `at(..)` or `Value::Null`.
pub fn row(id: i64, ts: Value) -> Row {
    vec![int(id), ts, dec(&format!("{}.{:04}", id * 7, id % 10_000), 4), text(&format!("name {id} ✓"))]
}

pub fn with(mut r: Row, col: usize, v: Value) -> Row {
    r[col] = v;
    r
}

/// Pre-inserts `source` and `target`, runs, and checks the target against
/// the expected multiset and the JSON report's counts. Returns the report.
pub fn replace_and_check(fx: &Fixture, source: &[Row], target: &[Row]) -> serde_json::Value {
    fx.insert_source(source);
    fx.insert_target(target);
    assert_same_rows(target, &fx.target_rows(), "target before the run (as pre-inserted)");
    run_and_check(fx, source)
}

/// Runs and checks against the current target; `source` is the whole source table.
pub fn run_and_check(fx: &Fixture, source: &[Row]) -> serde_json::Value {
    let before = fx.target_rows();
    let rendered_before = fx.ch_rendered();
    let expected = expected_after_replace(&before, source, TS);
    let run = fx.run();
    run.assert_no_panic();
    assert_eq!(run.code, Some(0), "expected the run to succeed:\n{}", run.describe());
    let doc = run.json();
    assert_eq!(doc["passed"], true, "expected `passed: true`:\n{}", run.describe());
    assert_eq!(doc["publication"], "published", "expected the window to be published");
    assert_same_rows(&expected, &fx.target_rows(), "target after the run (its rows outside the window + the source rows inside)");
    fx.assert_rendered_alike(&rendered_before, "target after the run, as ClickHouse itself prints it");

    let inside = source.iter().filter(|r| in_window(&r[TS])).count();
    let nulls = before.iter().filter(|r| r[TS].is_null()).count();
    assert_eq!(doc["inserted_rows"], inside, "expected inserted_rows = source rows inside the window");
    assert_eq!(doc["kept_rows"], expected.len() - inside, "expected kept_rows = target rows outside the window (NULLs included)");
    assert_eq!(doc["kept_null_window_rows"], nulls, "expected kept_null_window_rows = target rows with a NULL window value");
    assert_eq!(doc["final_rows"], expected.len(), "expected final_rows = rows of the expected target");
    let reported: Vec<u64> = doc["chunks"].as_array().expect("chunks").iter().map(|c| c["rows"].as_u64().expect("rows")).collect();
    assert_eq!(reported, rows_per_chunk(source, TS), "expected each chunk to carry exactly the source rows of its half-open bounds");

    let owned = fx.owned_tables();
    let backups = owned.iter().filter(|t| t.starts_with("_dpone_bak_")).count();
    assert!(backups == 1 && owned.len() == 1, "expected exactly one `_dpone_bak_` table and no other `_dpone_` table, found {owned:?}");
    doc
}
