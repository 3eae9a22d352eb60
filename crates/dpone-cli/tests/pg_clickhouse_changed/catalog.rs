//! Issue 43 on PostgreSQL -> ClickHouse: catalog edits of the source that
//! write no row version (a column dropped and added again, with and
//! without a default; two columns swapped by renames; the table replaced
//! by a copy written in the same transaction), against the authority with
//! and without its scope and the content audit.

use super::*;

/// A 30-day window of `(id, ts, v, d, e)`, `d` and `e` two numerics, for
/// the catalog edits of issue 43; `audit` is the window's audit policy.
fn wide_fixture(prefix: &'static str, audit: &str) -> Fixture {
    let cols = vec![
        col("id", "bigint NOT NULL", "Int64"),
        col("ts", "timestamptz NOT NULL", "DateTime64(6, 'UTC')"),
        col("v", "text NOT NULL", "String"),
        col("d", "numeric(12,2)", "Nullable(Decimal(12, 2))"),
        col("e", "numeric(12,2)", "Nullable(Decimal(12, 2))"),
    ];
    let mut setup = Setup::new(prefix, cols);
    setup.table_engine = Some("MergeTree PARTITION BY toYYYYMMDD(ts) ORDER BY id".into());
    let fx = Fixture::create(setup);
    fx.write_manifest(&ManifestOptions {
        lookback: "P30D".into(),
        block_rows: None,
        delivery: Some("changed".into()),
        audit: Some(audit.into()),
        ..ManifestOptions::default()
    });
    fx
}

/// The rows of the source (in a transaction of its own, with a copy of
/// the table written by the same transaction, one value different).
fn wide_rows(fx: &Fixture) {
    let s = &fx.schema;
    fx.pg_exec(&format!(
        "BEGIN; DELETE FROM {s}.t; CREATE TABLE {s}.copy (LIKE {s}.t INCLUDING ALL);
         INSERT INTO {s}.t SELECT g, '2026-08-10 00:00:00+00'::timestamptz + g * interval '6 hours', 'v' || g, g * 1.25, -g FROM generate_series(0, 119) g;
         INSERT INTO {s}.copy SELECT id, ts, v, CASE WHEN id = 50 THEN 99.99 ELSE d END, e FROM {s}.t; COMMIT"
    ));
}

/// Source and target windows as sorted `id|ts|v|d|e` lines (decimals
/// without trailing zeros on both sides).
fn wide_window(fx: &Fixture) -> (Vec<String>, Vec<String>) {
    let pg = fx.pg_scalar(&format!(
        "SELECT coalesce(string_agg(id || '|' || to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') || '|' || v || '|' \
         || coalesce(trim_scale(d)::text, 'N') || '|' || coalesce(trim_scale(e)::text, 'N'), ',' ORDER BY id), '') FROM {}.t",
        fx.schema
    ));
    let mut source: Vec<String> = pg.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect();
    let mut target = fx.ch_strings(&format!(
        "SELECT concat(toString(id), '|', toString(ts), '|', v, '|', ifNull(toString(d), 'N'), '|', ifNull(toString(e), 'N')) FROM {}.t",
        fx.db
    ));
    source.sort();
    target.sort();
    (source, target)
}

/// `dpone run` with `extra` variables; the JSON report of a success.
pub(crate) fn run_env(fx: &Fixture, extra: &[(&str, &str)]) -> serde_json::Value {
    let m = fx.manifest.display().to_string();
    let args = ["run", m.as_str(), "--interval-end", INTERVAL_END, "--format", "json"];
    let r = fx.dpone_env(&args, extra, harness::DPONE_TIMEOUT);
    assert_eq!(r.code, Some(0), "expected success:\n{}", r.describe());
    r.json()
}

/// The catalog edits of issue 43 that write no row version, each with the
/// chunks it must make move: a column dropped and added again (without
/// and with a default), two columns of one type swapped by three renames,
/// and the table replaced by a copy written in the same transaction.
fn catalog_edits(s: &str) -> Vec<(&'static str, String)> {
    vec![
        ("drop and add a column", format!("ALTER TABLE {s}.t DROP COLUMN d; ALTER TABLE {s}.t ADD COLUMN d numeric(12,2)")),
        (
            "drop and add a column with a default",
            format!("ALTER TABLE {s}.t DROP COLUMN d; ALTER TABLE {s}.t ADD COLUMN d numeric(12,2) DEFAULT 7.25"),
        ),
        (
            "swap two columns by renames",
            format!(
                "ALTER TABLE {s}.t RENAME COLUMN d TO x; ALTER TABLE {s}.t RENAME COLUMN e TO d; ALTER TABLE {s}.t RENAME COLUMN x TO e"
            ),
        ),
        ("replace the table in one transaction", format!("BEGIN; DROP TABLE {s}.t; ALTER TABLE {s}.copy RENAME TO t; COMMIT")),
    ]
}

/// Issue 43: each catalog edit makes the rerun transfer the window, and
/// the target equals the source. The same edit under the authority
/// without its scope (the test switch `DPONE_TEST_LEGACY_AUTHORITY`)
/// carries every chunk and leaves the target different: the scope is
/// what detects it. With `audit: every_run`, the content audit catches
/// each edit even without the scope (`audit_mismatch`): the safety net
/// trusts no authority.
#[test]
fn catalog_edits_at_the_source_are_transferred_and_caught_by_the_audit_without_the_scope() {
    let legacy = [("DPONE_TEST_LEGACY_AUTHORITY", "1")];
    for (n, (what, _)) in catalog_edits("s").into_iter().enumerate() {
        for (mode, audit, env) in
            [("scope", "never", &[][..]), ("legacy", "never", &legacy[..]), ("legacy+audit", "every_run", &legacy[..])]
        {
            let fx = wide_fixture("pgch_changed_catalog", audit);
            wide_rows(&fx);
            let first = run_env(&fx, env);
            assert_eq!(staged(&first).len(), 30, "{what} ({mode}): the first run");
            let (_, edit) = catalog_edits(&fx.schema).swap_remove(n);
            fx.pg_exec(&edit);
            let rerun = run_env(&fx, env);
            let (source, target) = wide_window(&fx);
            match mode {
                "scope" => {
                    assert_eq!(staged(&rerun).len(), 30, "{what}: every chunk reads differently: {:?}", moved(&rerun));
                    assert!(moved(&rerun).iter().all(|(_, d)| d == "changed"), "{what}: {:?}", moved(&rerun));
                    assert_eq!(target, source, "{what}: the target equals the source");
                }
                "legacy" => {
                    assert_eq!(staged(&rerun), set(&[]), "{what}: the row versions alone miss it");
                    assert_ne!(target, source, "{what}: the hole the scope closes");
                }
                _ => {
                    let mismatched: Vec<u64> = moved(&rerun).into_iter().filter(|(_, d)| d == "audit_mismatch").map(|(i, _)| i).collect();
                    assert!(!mismatched.is_empty(), "{what}: the audit finds the difference: {:?}", moved(&rerun));
                    assert_eq!(rerun["delivery"]["audit"]["mismatched"].as_u64(), Some(mismatched.len() as u64), "{}", rerun["delivery"]);
                    assert_eq!(target, source, "{what} ({mode}): the target equals the source");
                }
            }
            let settled = &rerun["delivery"]["settled"];
            if !settled.is_null() {
                let sum = settled["staged_rows"].as_u64().unwrap() + settled["carried_rows"].as_u64().unwrap();
                assert_eq!(Some(sum), settled["target_window_rows"].as_u64(), "{what} ({mode}): staged + carried = the window: {settled}");
            }
            fx.finish();
        }
    }
}
