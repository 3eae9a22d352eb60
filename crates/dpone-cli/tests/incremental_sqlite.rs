//! `incremental_append` on the SQLite -> SQLite route: what only this route
//! tests (the scenarios every route runs are in `incremental_append.rs`).
//! Each run appends the source rows whose cursor lies above the target's
//! stored mark and at most the source snapshot's maximum, and stores the
//! new mark in the same transaction as the rows.
//!
//! Every check compares the whole target as an exact multiset of rows (all
//! columns, with their storage classes) with what an independent model
//! expects, and reads the mark from `_dpone_marks` directly.

mod ch_postgres_common;
mod harness;
mod incremental_common;
mod pg_clickhouse_common;

use harness::state_of;
use incremental_common::sqlite::{SqliteToSqlite, dump};
use incremental_common::{IncrementalRoute, Manifest, Row, assert_tampered_resume_refused, between, check_append, plus, row};
use rusqlite::Connection;

/// Cursor `id`; the source holds ids 1..=5 at 01:00..05:00 on September 1,
/// the target two older rows.
fn standard() -> (SqliteToSqlite, Vec<Row>, Vec<Row>) {
    with(&(1..=5).map(|i| row(i, 1, i as u32)).collect::<Vec<_>>(), &[row(-2, 1, 0), row(-1, 1, 0)], &Manifest::APPEND)
}

fn with(source: &[Row], target: &[Row], m: &Manifest<'_>) -> (SqliteToSqlite, Vec<Row>, Vec<Row>) {
    let fx = SqliteToSqlite::set_up("", false);
    fx.write_manifest(m);
    fx.insert_source(source);
    fx.insert_target(target);
    (fx, source.to_vec(), target.to_vec())
}

// ---------------------------------------------------------------------------
// Semantics
// ---------------------------------------------------------------------------

/// An append under `execution.verification.digest: xxh3_128`: the batch is
/// verified with the other digest and appended once, twice in a row.
#[test]
fn an_append_under_the_xxh3_128_digest_appends_each_batch_once() {
    let source: Vec<_> = (1..=5).map(|i| row(i, 1, i as u32)).collect();
    let options = "      execution: {verification: {digest: xxh3_128}}\n";
    let (fx, _, target) = with(&source, &[row(-2, 1, 0)], &Manifest { options, ..Manifest::APPEND });
    check_append(&fx, &fx.run(), &target, &source, "5", "first run under xxh3_128");
    let more = vec![row(6, 2, 1), row(6, 2, 2)];
    fx.insert_source(&more);
    check_append(&fx, &fx.run(), &plus(&target, &source), &more, "6", "second run under xxh3_128");
}

#[test]
fn plan_shows_the_strategy_the_stored_mark_and_the_batch() {
    let (fx, source, target) = standard();
    let plan = fx.plan(&[]);
    assert_eq!(plan.code, Some(0), "{}", plan.describe());
    for line in ["strategy    incremental_append", "mark        none", "reads       id <= 5"] {
        assert!(plan.stdout.contains(line), "expected `{line}` in the plan:\n{}", plan.describe());
    }
    fx.run().assert_succeeded("first run");
    fx.insert_source(&[row(6, 2, 1), row(9, 2, 2)]);
    let plan = fx.plan(&[]);
    for line in ["mark        5 (run ", "reads       5 < id <= 9"] {
        assert!(plan.stdout.contains(line), "expected `{line}` in the plan:\n{}", plan.describe());
    }
    let json = fx.plan(&["--format", "json"]).json();
    assert_eq!(json["strategy"], "incremental_append");
    assert_eq!(json["incremental"]["stored_mark"]["value"]["value"], 5, "{json:#}");
    assert_eq!(json["incremental"]["batch"]["snapshot_max"]["value"], 9, "{json:#}");
    fx.assert_target(&plus(&target, &source), "plan wrote nothing");
}

// ---------------------------------------------------------------------------
// Refusals before any write
// ---------------------------------------------------------------------------

fn assert_refused(fx: &SqliteToSqlite, target: &[Row], code: &str, what: &str) -> serde_json::Value {
    let doc = fx.run().assert_failed(what, 2, code);
    fx.assert_target(target, &format!("{what}: target unchanged"));
    assert!(!fx.has_marks_table(), "{what}: expected no marks table");
    assert_eq!(fx.leftovers(), Vec::<String>::new(), "{what}: expected no table written");
    doc
}

#[test]
fn cursor_columns_that_cannot_order_rows_are_refused() {
    for (column, options, code) in [
        ("name", "", "incremental_column_type"),
        ("nope", "", "incremental_column_missing"),
        ("id", "    initial_value: yesterday\n", "invalid_initial_value"),
    ] {
        let source: Vec<_> = (1..=3).map(|i| row(i, 1, i as u32)).collect();
        let (fx, _, _) = with(&source, &[], &Manifest { column, options, ..Manifest::APPEND });
        assert_refused(&fx, &[], code, &format!("cursor `{column}` {options}"));
    }
}

#[test]
fn lookback_is_refused_with_append_and_merge_needs_a_key() {
    let (fx, _, _) = with(&[], &[], &Manifest { strategy: "    lookback: P1D\n", ..Manifest::APPEND });
    assert_refused(&fx, &[], "incremental_lookback_requires_merge", "lookback");
    // incremental_merge is tested in tests/incremental_merge_sqlite.rs.
    let (fx, _, _) = with(&[], &[], &Manifest { mode: "incremental_merge", ..Manifest::APPEND });
    assert_refused(&fx, &[], "merge_key_missing", "incremental_merge without unique_key");
}

// ---------------------------------------------------------------------------
// Guards (each made to fire)
// ---------------------------------------------------------------------------

/// A run crashed at `point`; `sql` (its `{table}` the table `table_of`
/// finds in the run's status) tampers with one of the run's tables: the
/// resumed run is refused with `error_code`, nothing published.
fn assert_table_tamper_refused(point: &str, table_of: fn(&serde_json::Value) -> String, sql: &str, what: &str, error_code: &str) {
    let (fx, _, target) = standard();
    let tamper = |status: &serde_json::Value| {
        fx.target_exec(&sql.replace("{table}", &table_of(status)));
        what.to_string()
    };
    assert_tampered_resume_refused(&fx, &target, point, tamper, error_code);
}

/// A run crashed after staging; someone changes a verified staging table:
/// the resumed run refuses to publish it.
#[test]
fn a_tampered_staging_table_is_not_published() {
    let staging = |status: &serde_json::Value| harness::verified_stagings(status).into_iter().next().expect("a verified chunk").1;
    let sql = "UPDATE \"{table}\" SET name = 'tampered' WHERE id = 3";
    assert_table_tamper_refused("checkpoint.after_write", staging, sql, "a tampered staging table", "staging_changed");
}

/// A run crashed after its intent; someone adds a row to its generation:
/// the resumed run re-verifies the generation and refuses.
#[test]
fn a_tampered_generation_is_not_published() {
    let generation =
        |status: &serde_json::Value| status["journal"]["intent"]["generation_table"].as_str().expect("a generation").to_string();
    let sql = "INSERT INTO \"{table}\" VALUES (42, NULL, 'smuggled')";
    assert_table_tamper_refused("publish.before_exchange", generation, sql, "a tampered generation", "generation_changed");
}

/// The publishing transaction checks that the target grew by exactly the
/// batch: a trigger of the target that adds a row makes it roll back.
#[test]
fn a_target_that_grows_by_more_than_the_batch_rolls_the_append_back() {
    let (fx, _, target) = standard();
    fx.target_exec("CREATE TRIGGER echo AFTER INSERT ON t WHEN NEW.id = 3 BEGIN INSERT INTO t VALUES (1003, NEW.ts, 'echo'); END;");
    let doc = fx.run().assert_failed("a target trigger adding rows", 1, "publication_verification_failed");
    assert_eq!(doc["publication"], "absent", "the transaction rolled back: {doc:#}");
    fx.assert_target(&target, "target unchanged");
    assert!(fx.mark().is_none(), "no mark stored");
    assert_eq!(state_of(&fx.status()), "failed");
}

/// A mark stored for another cursor column is not continued: plan and run
/// refuse before any write, naming both columns.
#[test]
fn a_mark_of_another_cursor_column_is_refused() {
    let (fx, source, target) = standard();
    fx.run().assert_succeeded("first run");
    fx.write_manifest(&Manifest { column: "ts", ..Manifest::APPEND });
    let plan = fx.plan(&[]);
    assert_eq!(plan.code, Some(2), "{}", plan.describe());
    assert!(plan.stdout.contains("incremental_column_changed"), "{}", plan.describe());
    let before = plus(&target, &source);
    let doc = fx.run().assert_failed("another cursor column", 2, "incremental_column_changed");
    let message = doc["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("`id`") && message.contains("`ts`"), "{doc:#}");
    fx.assert_target(&before, "target unchanged");
    assert_eq!(fx.mark_value().as_deref(), Some("5"));
    // The documented way out: a reset to a value of the new cursor (typed
    // by the target's column), after which runs continue by `ts`.
    let reset = fx.state("reset", &["--to", "2026-09-01T03:00:00Z", "--reason", "cursor is now ts", "--yes"]);
    assert_eq!(reset.code, Some(0), "{}", reset.describe());
    let batch = between(&source, 3, 5);
    check_append(&fx, &fx.run(), &before, &batch, "2026-09-01T05:00:00Z", "the run after a reset to the new cursor");
}

// ---------------------------------------------------------------------------
// `dpone state show|reset`
// ---------------------------------------------------------------------------

/// The compare-and-set of the target's own transaction: a reset whose
/// mark moved between its read and its transaction changes nothing.
#[test]
fn the_target_refuses_a_reset_whose_mark_moved_in_between() {
    use dpone_core::incremental::{CursorValue, StoredMark};
    use dpone_core::ports::Target;
    let (fx, _, _) = standard();
    fx.run().assert_succeeded("first run");
    let (_, run_id) = fx.mark().expect("a mark");
    let seen = StoredMark { column: "id".into(), value: Some(CursorValue::Integer(5)), run_id };
    fx.move_mark("id", "4");
    let target = dpone_sqlite::SqliteTarget::new(dpone_sqlite::SqliteConfig {
        path: fx.target.clone(),
        table: dpone_core::manifest::TableRef { schema: None, name: "t".into() },
    });
    let after = StoredMark { column: "id".into(), value: Some(CursorValue::Integer(1)), run_id: "reset-x".into() };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let err = rt.block_on(target.reset_mark(Some(&seen), Some(&after))).expect_err("a moved mark is refused");
    assert_eq!(err.code, "incremental_mark_moved", "{err:?}");
    assert_eq!(fx.mark_value().as_deref(), Some("4"), "the mark is left as found");
    let err = rt.block_on(target.reset_mark(Some(&seen), None)).expect_err("a clear too");
    assert_eq!(err.code, "incremental_mark_moved", "{err:?}");
    assert_eq!(fx.mark_value().as_deref(), Some("4"), "the mark is left as found");
}

/// A run from another work dir (its own state store: the lease is free)
/// holds the target's claim: a reset of the mark is refused
/// (`target_claimed`) and the mark stays; once that run ended, it applies.
#[test]
fn a_reset_is_refused_while_a_run_of_another_work_dir_claims_the_target() {
    let (fx, _, _) = standard();
    fx.run().assert_succeeded("first run");
    fx.insert_source(&[row(6, 2, 1)]);
    let other = fx.dir.join("other-work");
    let m = fx.manifest();
    let child = fx.spawn(
        &["run", &m, "--work-dir", other.to_str().expect("a path"), "--format", "json"],
        &[("DPONE_FAILPOINT_SLEEP", "publish.before_intent:4000")],
    );
    harness::wait_until(std::time::Duration::from_secs(30), "the other run claims the target", || {
        other.exists() && !dump(&fx.target, "SELECT 1 FROM sqlite_master WHERE name = '_dpone_claims'").is_empty()
    });
    let mark = fx.mark();
    let run = fx.state("reset", &["--to", "2", "--reason", "r", "--yes"]);
    incremental_common::assert_reset_refused(&run, "target_claimed", "a run of another work dir claims the target");
    assert_eq!(fx.mark(), mark, "the mark is unchanged");
    child.wait().assert_succeeded("the other run");
    let run = fx.state("reset", &["--to", "2", "--reason", "r", "--yes"]);
    assert_eq!(run.code, Some(0), "the reset once the claim is released:\n{}", run.describe());
    assert_eq!(fx.mark_value().as_deref(), Some("2"));
}

/// A mark row that cannot be read (an edit of `_dpone_marks` by hand) stops
/// the next run before it writes anything: `mark_unreadable`, target and
/// mark untouched.
#[test]
fn an_unreadable_mark_is_refused_and_nothing_is_appended() {
    let (fx, source, target) = standard();
    fx.run().assert_succeeded("first run");
    let conn = Connection::open(&fx.target).expect("open target");
    conn.execute("UPDATE _dpone_marks SET mark_kind = 'no-such-kind'", []).expect("corrupt the mark");
    drop(conn);
    let run = fx.run();
    run.assert_no_panic();
    assert_ne!(run.code, Some(0), "expected the run to be refused:\n{}", run.describe());
    assert!(run.stdout.contains("mark_unreadable") || run.stderr.contains("mark_unreadable"), "{}", run.describe());
    fx.assert_target(&plus(&target, &source), "nothing appended over an unreadable mark");
    let shown = fx.state("show", &[]);
    assert!(shown.stdout.contains("mark_unreadable") || shown.stderr.contains("mark_unreadable"), "{}", shown.describe());
}

/// `dpone state` on a process that keeps no mark says so instead of
/// printing "no mark".
#[test]
fn state_commands_refuse_a_process_that_is_not_an_append() {
    let (fx, _, _) = standard();
    let full_refresh = Manifest::APPEND
        .yaml(&fx.endpoints())
        .replace("    incremental_column: id\n", "")
        .replace("mode: incremental_append", "mode: full_refresh");
    std::fs::write(fx.dir.join("full.yaml"), full_refresh).expect("write manifest");
    for args in [&["show", "full.yaml"][..], &["reset", "full.yaml", "--clear", "--reason", "x", "--yes"][..]] {
        let mut all = vec!["state"];
        all.extend_from_slice(args);
        let run = fx.dpone(&all, &[]);
        assert_eq!(run.code, Some(2), "state {args:?}: expected exit 2:\n{}", run.describe());
        assert!(run.stderr.contains("not_incremental") || run.stdout.contains("not_incremental"), "{}", run.describe());
    }
}
