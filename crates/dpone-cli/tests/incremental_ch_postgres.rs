//! `incremental_append` on the ClickHouse -> PostgreSQL route through the
//! real `dpone` binary and real servers: each run appends the source rows
//! whose cursor lies above the target's stored mark and at most the
//! cursor's maximum when the run started, and stores the new mark in
//! `<target schema>._dpone_marks` in the same SERIALIZABLE transaction.
//!
//! The expected target is computed by the test from the rows it wrote into
//! the source (an independent model), compared with the whole target as an
//! exact multiset of PostgreSQL's text of every value; the mark is read
//! from `_dpone_marks` directly. The crash matrix aborts a run at every
//! failpoint, changes the source while the run is down (a row above the
//! batch, a late row below the mark), resumes, and checks that exactly the
//! journaled batch was appended once.

mod ch_postgres_common;
mod crash_points;
mod harness;

use ch_postgres_common::{Fixture, Row, col, ident, int, text, ts};
use harness::{Run, state_of};

/// The cursor column is Nullable in the source so that a NULL can be
/// written (and refused); the target column is a plain bigint.
fn fixture(prefix: &'static str) -> Fixture {
    let fx = Fixture::new(
        prefix,
        vec![col("id", "Nullable(Int64)", "bigint"), col("ts", "DateTime64(6, 'UTC')", "timestamptz"), col("name", "String", "text")],
    );
    write_manifest(&fx, "id", "");
    fx
}

fn write_manifest(fx: &Fixture, column: &str, extra_options: &str) {
    let q = |s: &str| serde_json::to_string(s).expect("a JSON string");
    let yaml = format!(
        "kind: dpone.batch.v1
source:
  type: clickhouse
  connection: {{connection_type: env, connection_id: CH}}
  table: {{schema: {db}, name: t}}
  options:
    incremental_column: {column}
    native_transfer:
      wire: {{block_rows: 2}}
{extra_options}sink:
  type: postgres
  connection: {{connection_type: env, connection_id: PG}}
  table: {{schema: {schema}, name: t}}
  strategy:
    mode: incremental_append
runtime:
  storage: {{work_dir: {work}}}
",
        db = q(&fx.db),
        schema = q(&fx.schema),
        work = q(&fx.work_dir().display().to_string()),
    );
    std::fs::write(&fx.manifest, yaml).expect("write the manifest");
}

fn row(id: i64, day: u32, hour: u32) -> Row {
    vec![int(id), ts(&format!("2026-09-{day:02} {hour:02}:00:00")), text(&format!("row {id}"))]
}

fn run_with(fx: &Fixture, env: &[(&str, &str)]) -> Run {
    let m = fx.manifest.display().to_string();
    fx.dpone(&["run", &m, "--format", "json"], env)
}

fn run(fx: &Fixture) -> Run {
    run_with(fx, &[])
}

/// The stored mark (text) and the run that stored it, from the target itself.
fn mark(fx: &Fixture) -> Option<(Option<String>, String)> {
    let table = fx.pg_table("_dpone_marks");
    if fx.pg_scalar(&format!("SELECT to_regclass('{}') IS NOT NULL", table.replace('\'', "''"))).as_deref() != Some("t") {
        return None;
    }
    let rows = fx.pg_query(&format!("SELECT mark, run FROM {table} WHERE target_table = 't'"));
    rows.first().map(|r| (r[0].clone(), r[1].clone().expect("a run id")))
}

fn mark_value(fx: &Fixture) -> Option<String> {
    mark(fx).and_then(|(m, _)| m)
}

/// The source rows the test wrote with `after < id <= upto`.
fn between(source: &[Row], after: i64, upto: i64) -> Vec<Row> {
    source
        .iter()
        .filter(|r| match r[0] {
            ch_postgres_common::V::Int(i) => i > after as i128 && i <= upto as i128,
            _ => false,
        })
        .cloned()
        .collect()
}

fn plus(a: &[Row], b: &[Row]) -> Vec<Row> {
    a.iter().chain(b).cloned().collect()
}

/// A successful run appended exactly `batch` to `before`; the mark is `mark`.
fn check_append(fx: &Fixture, run: &Run, before: &[Row], batch: &[Row], want: &str, what: &str) -> serde_json::Value {
    let doc = run.assert_succeeded(what);
    fx.assert_target(&plus(before, batch), &format!("{what}: target = rows before + the batch, once"));
    assert_eq!(mark_value(fx).as_deref(), Some(want), "{what}: expected the stored mark {want}");
    assert_eq!(doc["inserted_rows"], batch.len(), "{what}: inserted_rows");
    assert_eq!(doc["final_rows"], before.len() + batch.len(), "{what}: final_rows");
    let reported = match &doc["incremental"]["new_mark"]["value"] {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if doc["incremental"]["new_mark"]["kind"] == "date" {
        // The JSON carries a date mark as days since 1970-01-01; the batch names it.
        assert!(doc["incremental"]["batch"].as_str().unwrap_or_default().contains(want), "{what}: the report's batch: {doc:#}");
    } else {
        assert_eq!(reported, want, "{what}: the report's new mark: {doc:#}");
    }
    assert_eq!(fx.leftovers(), Vec::<String>::new(), "{what}: expected no staging or generation table after success");
    doc
}

/// Source ids 1..=5, target two older rows.
fn standard(prefix: &'static str) -> (Fixture, Vec<Row>, Vec<Row>) {
    let fx = fixture(prefix);
    let source: Vec<Row> = (1..=5).map(|i| row(i, 1, i as u32)).collect();
    let target = vec![row(-2, 1, 0), row(-1, 1, 0)];
    fx.insert_source(&source);
    fx.insert_target(&target);
    (fx, source, target)
}

// ---------------------------------------------------------------------------
// Semantics
// ---------------------------------------------------------------------------

#[test]
fn first_run_no_new_rows_new_rows_and_late_rows() {
    let (fx, mut source, target) = standard("inc_chpg_sem");
    let doc = check_append(&fx, &run(&fx), &target, &source, "5", "first run");
    assert_eq!(doc["incremental"]["previous_mark"], serde_json::Value::Null, "{doc:#}");
    let status = fx.status();
    assert_eq!(status["incremental"]["stored_mark"]["value"]["value"], 5, "status shows the stored mark: {status:#}");
    let (_, first_run) = mark(&fx).expect("a mark");

    // No new rows: nothing appended, the mark stays, a receipt of its own.
    let before = plus(&target, &source);
    check_append(&fx, &run(&fx), &before, &[], "5", "a run without new rows");
    let (_, second_run) = mark(&fx).expect("a mark");
    assert_ne!(first_run, second_run, "the empty publication leaves a receipt of its own");

    // New rows (a duplicate included) and late rows at or below the mark.
    let new = vec![row(6, 2, 1), row(7, 2, 2), row(7, 2, 2)];
    let late = vec![row(5, 3, 0), row(3, 3, 0), row(-10, 3, 0)];
    fx.insert_source(&new);
    fx.insert_source(&late);
    source.extend(new.iter().cloned());
    source.extend(late.iter().cloned());
    let doc = check_append(&fx, &run(&fx), &before, &new, "7", "a run after new and late rows");
    assert_eq!(doc["incremental"]["previous_mark"]["value"], 5, "{doc:#}");

    // The plan names the mark and what a run would read now.
    fx.insert_source(&[row(9, 4, 0)]);
    let m = fx.manifest.display().to_string();
    let plan = fx.dpone(&["plan", &m, "--format", "json"], &[]);
    assert_eq!(plan.code, Some(0), "{}", plan.describe());
    let json = plan.json();
    assert_eq!(json["incremental"]["stored_mark"]["value"]["value"], 7, "{json:#}");
    assert_eq!(json["incremental"]["batch"]["snapshot_max"]["value"], 9, "{json:#}");
    fx.finish();
}

#[test]
fn a_timestamp_cursor_from_initial_value() {
    let fx = fixture("inc_chpg_ts");
    write_manifest(&fx, "ts", "    initial_value: \"2026-09-03T00:00:00Z\"\n");
    let source: Vec<Row> = (1..=6).map(|i| row(i, i as u32, 0)).collect();
    fx.insert_source(&source);
    check_append(&fx, &run(&fx), &[], &source[2..], "2026-09-06T00:00:00Z", "first run from initial_value");
    // Row 7 sits exactly on the mark (late, not read); row 8 is above it by a microsecond.
    let on_mark = row(7, 6, 0);
    let mut above = row(8, 6, 0);
    above[1] = ts("2026-09-06 00:00:00.000001");
    fx.insert_source(&[on_mark, above.clone()]);
    check_append(&fx, &run(&fx), &source[2..], &[above], "2026-09-06T00:00:00.000001Z", "second run");
    fx.finish();
}

#[test]
fn a_null_cursor_value_is_refused_naming_the_column() {
    let (fx, _, target) = standard("inc_chpg_null");
    fx.insert_source(&[vec![ch_postgres_common::V::Null, ts("2026-09-01 09:00:00"), text("no id")]]);
    let doc = run(&fx).assert_failed("a NULL cursor", 2, "incremental_cursor_null");
    let message = doc["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("`id`"), "expected the error to name the column: {doc:#}");
    fx.assert_target(&target, "target unchanged");
    assert!(mark(&fx).is_none(), "no mark stored");
    assert_eq!(fx.leftovers(), Vec::<String>::new());
    fx.finish();
}

// ---------------------------------------------------------------------------
// Crashes and resumption
// ---------------------------------------------------------------------------

/// Abort points a run of one chunk passes (every run-order failpoint).
const POINTS: &[&str] = &crash_points::ABORT_POINTS;

#[test]
fn the_core_failpoints_are_all_exercised() {
    let core: Vec<&str> = dpone_core::failpoint::abort_points().collect();
    assert_eq!(core, POINTS, "a new failpoint needs a case in the incremental crash matrix");
}

/// For every failpoint: the first run publishes the mark 5; the second
/// run's batch is (5, 9]; it aborts at the failpoint; while it is down the
/// source gets a row above the batch (10) and a late row below the mark
/// (4); the resumed run appends exactly (5, 9] once and stores 9; the next
/// run appends 10.
#[test]
fn a_crash_at_any_failpoint_then_resume_appends_the_batch_exactly_once() {
    for point in POINTS {
        let (fx, mut source, target) = standard("inc_chpg_crash");
        run(&fx).assert_succeeded("first run");
        let batch = vec![row(6, 2, 1), row(7, 2, 2), row(8, 2, 3), row(9, 2, 4), row(9, 2, 4)];
        fx.insert_source(&batch);
        source.extend(batch.iter().cloned());
        let before = plus(&target, &between(&source, i64::MIN, 5));

        run_with(&fx, &[("DPONE_FAILPOINT", point)]).assert_aborted_at(point);
        let published = mark_value(&fx).as_deref() == Some("9");
        if published {
            fx.assert_target(&plus(&before, &batch), &format!("{point}: rows and mark are published together"));
        } else {
            fx.assert_target(&before, &format!("{point}: no new mark, no rows"));
            assert_eq!(mark_value(&fx).as_deref(), Some("5"), "{point}");
        }
        let status = fx.status();
        assert_eq!(status["journal"]["cursor"]["snapshot_max"]["value"], 9, "{point}: the batch is journaled: {status:#}");
        let finished = state_of(&status) == "succeeded";

        let later = vec![row(10, 3, 1), row(4, 3, 2)];
        fx.insert_source(&later);
        source.extend(later.iter().cloned());
        if finished {
            check_append(&fx, &run(&fx), &plus(&before, &batch), &between(&source, 9, 10), "10", &format!("the run after {point}"));
        } else {
            let doc = check_append(&fx, &run(&fx), &before, &batch, "9", &format!("resume after {point}"));
            assert_eq!(doc["resumed"], true, "{point}: expected the interrupted run to be continued: {doc:#}");
            let now = plus(&before, &batch);
            check_append(&fx, &run(&fx), &now, &between(&source, 9, 10), "10", &format!("the run after {point}'s resume"));
        }
        fx.finish();
    }
}

/// A lost acknowledgement of the publishing transaction is judged from the
/// stored mark: published once, never re-applied.
#[test]
fn a_lost_publication_acknowledgement_is_judged_by_the_mark() {
    let (fx, source, target) = standard("inc_chpg_ack");
    let run = run_with(&fx, &[("DPONE_TARGET_FAULTS", "publish:ack_lost:1")]);
    check_append(&fx, &run, &target, &source, "5", "a lost acknowledgement");
    fx.finish();
}

// ---------------------------------------------------------------------------
// Guards (each made to fire)
// ---------------------------------------------------------------------------

/// A run crashed after staging; someone changes a verified staging table.
/// The ClickHouse source is not durable, so the resumed run re-extracts the
/// journaled batch instead of reusing the staging: what it publishes is the
/// source's rows, never the tampered ones.
#[test]
fn a_tampered_staging_table_is_re_extracted_not_published() {
    let (fx, source, target) = standard("inc_chpg_stg");
    run_with(&fx, &[("DPONE_FAILPOINT", "checkpoint.after_write")]).assert_aborted_at("checkpoint.after_write");
    let status = fx.status();
    let table = harness::verified_stagings(&status).into_iter().next().expect("a verified chunk").1;
    fx.pg_exec(&format!("UPDATE {} SET name = 'tampered' WHERE id = 3", fx.pg_table(&table)));
    let doc = check_append(&fx, &run(&fx), &target, &source, "5", "resume after a tampered staging");
    assert_eq!(doc["reused_chunks"], 0, "{doc:#}");
    fx.finish();
}

/// A staging table under the generation (a view) is changed while the run
/// pauses right before publishing: the publishing transaction fingerprints
/// the rows it inserts, finds them unlike the verified ones and rolls back.
#[test]
fn a_staging_changed_under_the_publication_is_rolled_back() {
    let (fx, _, target) = standard("inc_chpg_stg2");
    let m = fx.manifest.display().to_string();
    let pg = dpone_testkit::postgres_url();
    let child = harness::spawn(
        fx.dir(),
        &["run", &m, "--format", "json"],
        &[
            ("DPONE_CONN_CH", fx.clickhouse_url.as_str()),
            ("DPONE_CONN_PG", pg.as_str()),
            ("DPONE_FAILPOINT_SLEEP", "publish.before_exchange:4000"),
        ],
    );
    harness::wait_until(std::time::Duration::from_secs(60), "the run records its intent", || state_of(&fx.status()) == "publishing");
    let table = harness::verified_stagings(&fx.status()).into_iter().next().expect("a verified chunk").1;
    fx.pg_exec(&format!("UPDATE {} SET name = 'tampered' WHERE id = 3", fx.pg_table(&table)));
    let doc = child.wait().assert_failed("a staging changed under the publication", 1, "generation_verification_failed");
    assert_eq!(doc["publication"], "absent", "the transaction rolled back: {doc:#}");
    fx.assert_target(&target, "target unchanged");
    assert!(mark(&fx).is_none(), "no mark stored");
    fx.finish();
}

/// The mark moved while the run paused right before its publication (its
/// intent recorded by this very invocation): the publishing transaction
/// re-checks the mark and rolls back: the run is `failed`
/// (`incremental_mark_moved`), nothing of it published.
#[test]
fn a_mark_moved_during_the_run_is_refused_by_the_publishing_transaction() {
    let (fx, mut source, target) = standard("inc_chpg_moved");
    run(&fx).assert_succeeded("first run");
    let new = vec![row(6, 2, 1), row(7, 2, 2)];
    fx.insert_source(&new);
    source.extend(new);
    let before = plus(&target, &between(&source, i64::MIN, 5));
    let m = fx.manifest.display().to_string();
    let pg = dpone_testkit::postgres_url();
    let child = harness::spawn(
        fx.dir(),
        &["run", &m, "--format", "json"],
        &[
            ("DPONE_CONN_CH", fx.clickhouse_url.as_str()),
            ("DPONE_CONN_PG", pg.as_str()),
            ("DPONE_FAILPOINT_SLEEP", "publish.before_exchange:4000"),
        ],
    );
    harness::wait_until(std::time::Duration::from_secs(60), "the run records its intent", || state_of(&fx.status()) == "publishing");
    fx.pg_exec(&format!("UPDATE {} SET mark = '6'", fx.pg_table("_dpone_marks")));
    child.wait().assert_failed("a mark moved during the run", 1, "incremental_mark_moved");
    assert_eq!(state_of(&fx.status()), "failed", "the run is failed, not outcome-unknown");
    fx.assert_target(&before, "target unchanged: the transaction rolled back");
    assert_eq!(mark_value(&fx).as_deref(), Some("6"), "the mark is left as found");
    fx.finish();
}

/// The mark moved while the run was down after the batch was fixed: the
/// run stops before publishing (rows would be duplicated or skipped).
#[test]
fn a_mark_moved_before_the_intent_stops_the_run() {
    let (fx, mut source, target) = standard("inc_chpg_moved2");
    run(&fx).assert_succeeded("first run");
    let new = vec![row(6, 2, 1), row(7, 2, 2)];
    fx.insert_source(&new);
    source.extend(new);
    run_with(&fx, &[("DPONE_FAILPOINT", "generation.after_build")]).assert_aborted_at("generation.after_build");
    fx.pg_exec(&format!("UPDATE {} SET mark = '6'", fx.pg_table("_dpone_marks")));
    run(&fx).assert_failed("a moved mark", 1, "incremental_mark_moved");
    fx.assert_target(&plus(&target, &between(&source, i64::MIN, 5)), "target unchanged");
    assert_eq!(mark_value(&fx).as_deref(), Some("6"), "the mark is left as found");
    fx.finish();
}

/// The publishing transaction checks that the target grew by exactly the
/// batch: a trigger of the target that adds a row makes it roll back.
#[test]
fn a_target_that_grows_by_more_than_the_batch_rolls_the_append_back() {
    let (fx, _, target) = standard("inc_chpg_trig");
    let f = fx.pg_table("echo");
    fx.pg_exec(&format!(
        "CREATE FUNCTION {f}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
         IF NEW.id = 3 THEN INSERT INTO {t} VALUES (1003, NEW.ts, 'echo'); END IF; RETURN NULL; END $$; \
         CREATE TRIGGER echo AFTER INSERT ON {t} FOR EACH ROW EXECUTE FUNCTION {f}()",
        t = fx.target_sql()
    ));
    let doc = run(&fx).assert_failed("a target trigger adding rows", 1, "publication_verification_failed");
    assert_eq!(doc["publication"], "absent", "the transaction rolled back: {doc:#}");
    fx.assert_target(&target, "target unchanged");
    assert!(mark(&fx).is_none(), "no mark stored");
    assert_eq!(state_of(&fx.status()), "failed");
    fx.finish();
}

/// A generation changed behind dpone's back between its verification and
/// the publication: the resumed run refuses it.
#[test]
fn a_tampered_generation_is_not_published() {
    let (fx, _, target) = standard("inc_chpg_gen");
    run_with(&fx, &[("DPONE_FAILPOINT", "publish.before_exchange")]).assert_aborted_at("publish.before_exchange");
    let status = fx.status();
    let generation = status["journal"]["intent"]["generation_table"].as_str().expect("a generation").to_string();
    // The generation is a view over the staging: change a staging row under it.
    let table = harness::verified_stagings(&status).into_iter().next().expect("a verified chunk").1;
    fx.pg_exec(&format!("INSERT INTO {} VALUES (42, NULL, 'smuggled')", fx.pg_table(&table)));
    let run = run(&fx);
    // Re-verification reads the staging under the generation view.
    run.assert_failed(&format!("a tampered generation ({generation})"), 1, "staging_changed");
    fx.assert_target(&target, "target unchanged");
    assert!(mark(&fx).is_none(), "no mark stored");
    fx.finish();
}

// ---------------------------------------------------------------------------
// Randomized: runs with random source changes between them, random crashes
// ---------------------------------------------------------------------------

/// A small deterministic generator (the seed is printed on failure).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn max_id(rows: &[Row]) -> Option<i64> {
    rows.iter()
        .filter_map(|r| match r[0] {
            ch_postgres_common::V::Int(i) => Some(i as i64),
            _ => None,
        })
        .max()
}

/// The expected target is computed from the rows the test wrote: after
/// each completed run it gains the source rows with a cursor in (mark,
/// source maximum] (the source only changes while no run is unfinished, so
/// the batch a crashed run fixed is what its completion reads), and the
/// mark becomes that maximum.
#[test]
fn twenty_random_runs_with_random_crashes_end_with_the_expected_target() {
    let seed = 0x5eed_u64 ^ std::process::id() as u64;
    let mut rng = Lcg(seed);
    let (fx, mut source, target) = standard("inc_chpg_rand");
    let mut model = target;
    let mut mark: Option<i64> = None;
    let mut applied: Option<(String, u64)> = None;
    let mut unfinished = false;
    let mut next_id = 6;
    let complete = |model: &mut Vec<Row>, mark: &mut Option<i64>, source: &[Row]| {
        if let Some(max) = max_id(source).filter(|m| mark.is_none_or(|old| *m > old)) {
            model.extend(between(source, mark.unwrap_or(i64::MIN), max));
            *mark = Some(max);
        }
    };
    for i in 0..20 {
        let what = format!("seed {seed:#x}, run {i}");
        if !unfinished {
            for _ in 0..rng.next(4) {
                let id = match rng.next(3) {
                    0 => next_id - 1 - rng.next(6) as i64, // late: at or below the newest id
                    _ => {
                        next_id += 1;
                        next_id - 1
                    }
                };
                let r = row(id, 1 + rng.next(20) as u32, rng.next(24) as u32);
                fx.insert_source(std::slice::from_ref(&r));
                source.push(r);
            }
        }
        let point = match rng.next(2) {
            0 => None,
            _ => Some(POINTS[rng.next(POINTS.len() as u64) as usize]),
        };
        let run = match point {
            Some(p) => run_with(&fx, &[("DPONE_FAILPOINT", p)]),
            None => run(&fx),
        };
        run.assert_no_panic();
        let status = fx.status();
        unfinished = state_of(&status) != "succeeded";
        if point.is_none() {
            assert_eq!(run.code, Some(0), "{what}: a run without a failpoint succeeds:\n{}", run.describe());
        }
        let this = (status["run_id"].as_str().unwrap_or_default().to_string(), status["execution"].as_u64().unwrap_or(0));
        if !unfinished && applied.as_ref() != Some(&this) {
            complete(&mut model, &mut mark, &source);
            applied = Some(this);
            fx.assert_target(&model, &format!("{what}: target after a completed run"));
            assert_eq!(mark_value(&fx), mark.map(|m| m.to_string()), "{what}: mark after a completed run");
        }
    }
    if unfinished {
        run(&fx).assert_succeeded("the final resume");
        complete(&mut model, &mut mark, &source);
    }
    fx.assert_target(&model, &format!("seed {seed:#x}: final target"));
    assert_eq!(mark_value(&fx), mark.map(|m| m.to_string()), "seed {seed:#x}: final mark");
    fx.finish();
}

/// Date and second-precision DateTime cursors: values compare as days and
/// instants, the mark is
/// stored in the cursor's type.
#[test]
fn date_and_datetime_cursors() {
    let fx = Fixture::new(
        "inc_chpg_date",
        vec![col("id", "Int32", "integer"), col("d", "Date32", "date"), col("at", "DateTime('UTC')", "timestamptz")],
    );
    let r = |id: i64, day: &str, at: &str| vec![int(id), ch_postgres_common::date(day), ts(at)];
    let first = vec![r(1, "1960-01-01", "2026-09-01 00:00:00"), r(2, "2026-09-01", "2026-09-01 00:00:01")];
    fx.insert_source(&first);
    write_manifest(&fx, "d", "");
    check_append(&fx, &run(&fx), &[], &first, "2026-09-01", "a date cursor, first run");
    let more = vec![r(3, "2026-09-01", "2026-09-02 00:00:00"), r(4, "2026-09-02", "2026-09-02 00:00:00")];
    fx.insert_source(&more);
    check_append(&fx, &run(&fx), &first, &more[1..], "2026-09-02", "a date cursor: the row on the mark is late");

    // The same target continued by another cursor is refused (the mark names `d`).
    write_manifest(&fx, "at", "");
    run(&fx).assert_failed("another cursor column", 2, "incremental_column_changed");
    fx.pg_exec(&format!("DELETE FROM {}", fx.pg_table("_dpone_marks")));
    fx.pg_exec(&format!("DELETE FROM {}", fx.target_sql()));
    let all = plus(&first, &more);
    check_append(&fx, &run(&fx), &[], &all, "2026-09-02T00:00:00Z", "a DateTime cursor after the mark was deleted");
    fx.finish();
}

/// The run is killed (SIGKILL) while its publishing transaction waits for
/// a lock of the target: the server still runs the orphaned session (which
/// holds the target's advisory lock). The next run judges the publication
/// from the stored mark, finds the old one (nothing appended), re-verifies
/// and publishes the batch once. (The orphan never got its COMMIT, so this
/// does not prove the wait for a publishing session before reading the
/// mark; that wait is the one receipts use, `sink/transaction.rs`.)
#[test]
fn a_run_killed_inside_its_publishing_transaction_is_judged_by_the_mark() {
    let (fx, source, target) = standard("inc_chpg_kill");
    let m = fx.manifest.display().to_string();
    let pg = dpone_testkit::postgres_url();
    let child = harness::spawn(
        fx.dir(),
        &["run", &m, "--format", "json"],
        &[
            ("DPONE_CONN_CH", fx.clickhouse_url.as_str()),
            ("DPONE_CONN_PG", pg.as_str()),
            ("DPONE_FAILPOINT_SLEEP", "publish.before_exchange:2000"),
        ],
    );
    harness::wait_until(std::time::Duration::from_secs(60), "the run records its intent", || state_of(&fx.status()) == "publishing");
    // The lock is held by a session of its own: the fixture's session polls
    // pg_stat_activity, whose contents a transaction would freeze.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let (locker, connection) = rt.block_on(tokio_postgres::connect(&pg, tokio_postgres::NoTls)).expect("connect");
    rt.spawn(connection);
    rt.block_on(locker.batch_execute(&format!("BEGIN; LOCK TABLE {} IN ACCESS EXCLUSIVE MODE", fx.target_sql()))).expect("lock");
    harness::wait_until(std::time::Duration::from_secs(60), "the publishing transaction waits for the target's lock", || {
        fx.pg_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'dpone publish' AND wait_event_type = 'Lock'")
            .as_deref()
            == Some("1")
    });
    child.signal("KILL");
    let killed = child.wait();
    assert_eq!(killed.code, None, "killed by a signal:\n{}", killed.describe());
    rt.block_on(locker.batch_execute("COMMIT")).expect("unlock");
    fx.assert_target(&target, "after the kill: nothing appended");
    assert!(mark(&fx).is_none(), "after the kill: no mark stored");
    let doc = check_append(&fx, &run(&fx), &target, &source, "5", "the run after the kill");
    assert_eq!(doc["resumed"], true, "{doc:#}");
    fx.finish();
}

// ---------------------------------------------------------------------------
// `dpone state show|reset`
// ---------------------------------------------------------------------------

fn state(fx: &Fixture, args: &[&str]) -> Run {
    let m = fx.manifest.display().to_string();
    let mut all = vec!["state", args[0], m.as_str()];
    all.extend_from_slice(&args[1..]);
    fx.dpone(&all, &[("DPONE_OPERATOR", "bob")])
}

fn show(fx: &Fixture) -> serde_json::Value {
    let s = state(fx, &["show", "--format", "json"]);
    assert_eq!(s.code, Some(0), "dpone state show:\n{}", s.describe());
    s.json()
}

fn assert_reset_refused(run: &Run, code: &str, what: &str) {
    assert_eq!(run.code, Some(2), "{what}: expected exit 2:\n{}", run.describe());
    assert!(run.stderr.contains(code) || run.stdout.contains(code), "{what}: expected `{code}`:\n{}", run.describe());
}

#[test]
fn state_show_and_reset_move_the_mark_and_the_next_run_reappends_above_it() {
    let (fx, source, target) = standard("inc_chpg_state");
    assert_eq!(show(&fx)["mark"], serde_json::Value::Null, "no mark before the first run");
    check_append(&fx, &run(&fx), &target, &source, "5", "first run");
    let shown = show(&fx);
    assert_eq!(
        (shown["mark"]["column"].as_str(), shown["mark"]["type"].as_str(), shown["mark"]["value"].as_str()),
        (Some("id"), Some("integer"), Some("5")),
        "{shown:#}"
    );
    assert_eq!(shown["mark"]["run_id"].as_str(), mark(&fx).map(|(_, r)| r).as_deref(), "{shown:#}");
    let receipt = shown["mark"]["receipt"].as_str().expect("a receipt").to_string();
    let all = plus(&target, &source);

    // Refusals: no reason, a bad value, both or neither of --to/--clear.
    for (args, code) in [
        (vec!["reset", "--to", "2", "--yes"], "reset_reason_required"),
        (vec!["reset", "--to", "x", "--reason", "r", "--yes"], "invalid_mark_value"),
        (vec!["reset", "--reason", "r", "--yes"], "invalid_value"),
    ] {
        assert_reset_refused(&state(&fx, &args), code, &format!("{args:?}"));
        assert_eq!(mark_value(&fx).as_deref(), Some("5"), "{args:?}: the mark is unchanged");
    }

    // Reset to 2: rows untouched, the next run appends 3, 4, 5 again.
    let reset = state(&fx, &["reset", "--to", "2", "--reason", "replay 3..5", "--expect", &receipt, "--yes"]);
    assert_eq!(reset.code, Some(0), "{}", reset.describe());
    fx.assert_target(&all, "a reset does not touch the rows");
    let (value, run_id) = mark(&fx).expect("a mark");
    assert_eq!((value.as_deref(), run_id.starts_with("reset-")), (Some("2"), true), "{run_id}");
    let last = show(&fx)["last_reset"].clone();
    assert_eq!(
        (last["operator"].as_str(), last["reason"].as_str(), last["state"].as_str()),
        (Some("bob"), Some("replay 3..5"), Some("applied")),
        "{last:#}"
    );
    assert_eq!(fx.status()["incremental"]["last_reset"]["operator"], "bob");
    check_append(&fx, &run(&fx), &all, &between(&source, 2, 5), "5", "the run after a reset to 2");

    // The mark moved since it was shown (the receipt is the first run's).
    assert_reset_refused(
        &state(&fx, &["reset", "--to", "1", "--reason", "r", "--expect", &receipt, "--yes"]),
        "incremental_mark_moved",
        "stale --expect",
    );
    assert_eq!(mark_value(&fx).as_deref(), Some("5"));

    // Clear: the next run reads every row again.
    let before = plus(&all, &between(&source, 2, 5));
    let reset = state(&fx, &["reset", "--clear", "--reason", "start over", "--yes"]);
    assert_eq!(reset.code, Some(0), "{}", reset.describe());
    assert!(mark(&fx).is_none(), "the mark row is gone");
    check_append(&fx, &run(&fx), &before, &source, "5", "the run after a cleared mark");
    fx.finish();
}

/// The target's own compare-and-set: a reset whose mark moved between its
/// read and its transaction changes nothing.
#[test]
fn the_postgres_target_refuses_a_reset_whose_mark_moved_in_between() {
    use dpone_core::incremental::{CursorValue, StoredMark};
    use dpone_core::ports::Target;
    use std::str::FromStr;
    let (fx, source, target) = standard("inc_chpg_cas");
    check_append(&fx, &run(&fx), &target, &source, "5", "first run");
    let (_, run_id) = mark(&fx).expect("a mark");
    let seen = StoredMark { column: "id".into(), value: Some(CursorValue::Integer(5)), run_id };
    fx.pg_exec(&format!("UPDATE {} SET mark = '4'", fx.pg_table("_dpone_marks")));
    let config = tokio_postgres::Config::from_str(&dpone_testkit::postgres_url()).expect("a URL");
    let pg = dpone_postgres::PostgresTarget::new(
        config,
        dpone_core::manifest::TableRef { schema: Some(fx.schema.clone()), name: "t".into() },
        None,
        false,
    );
    let after = StoredMark { column: "id".into(), value: Some(CursorValue::Integer(1)), run_id: "reset-x".into() };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    for after in [Some(&after), None] {
        let err = rt.block_on(pg.reset_mark(Some(&seen), after)).expect_err("a moved mark is refused");
        assert_eq!(err.code, "incremental_mark_moved", "{err:?}");
        assert_eq!(mark_value(&fx).as_deref(), Some("4"), "the mark is left as found");
    }
    fx.finish();
}

#[test]
fn a_reset_is_refused_while_a_run_holds_the_lease_or_is_unfinished() {
    let (fx, source, target) = standard("inc_chpg_state_lease");
    check_append(&fx, &run(&fx), &target, &source, "5", "first run");
    fx.insert_source(&[row(6, 2, 1)]);
    let m = fx.manifest.display().to_string();
    let pg = dpone_testkit::postgres_url();
    let env = [
        ("DPONE_CONN_CH", fx.clickhouse_url.as_str()),
        ("DPONE_CONN_PG", pg.as_str()),
        ("DPONE_FAILPOINT_SLEEP", "publish.before_intent:5000"),
    ];
    let child = harness::spawn(fx.dir(), &["run", &m, "--format", "json"], &env);
    harness::wait_until(std::time::Duration::from_secs(60), "the run is verified", || state_of(&fx.status()) == "verified");
    assert_reset_refused(&state(&fx, &["reset", "--to", "2", "--reason", "r", "--yes"]), "lease_held", "a run holds the lease");
    assert_eq!(mark_value(&fx).as_deref(), Some("5"), "the mark is unchanged");
    child.wait().assert_succeeded("the run");
    fx.insert_source(&[row(7, 2, 2)]);
    run_with(&fx, &[("DPONE_FAILPOINT", "publish.before_intent")]).assert_aborted_at("publish.before_intent");
    assert_reset_refused(&state(&fx, &["reset", "--to", "2", "--reason", "r", "--yes"]), "unfinished_run", "an unfinished run");
    assert_eq!(mark_value(&fx).as_deref(), Some("6"), "the mark is unchanged");
    run(&fx).assert_succeeded("the resumed run");
    assert_eq!(mark_value(&fx).as_deref(), Some("7"));
    fx.finish();
}

/// Read-only commands do not wait out a running publication (up to 300 s
/// for a run's own judgement): after a short bounded wait they say a
/// publication is in progress.
#[test]
fn read_only_commands_do_not_block_on_a_running_publication() {
    let (fx, source, target) = standard("inc_chpg_peek");
    check_append(&fx, &run(&fx), &target, &source, "5", "first run");
    // A publishing session of the target, as the publication takes it.
    let key = format!("dpone publication of {}.{}", ident(&fx.schema), ident("t")).replace('\'', "''");
    fx.pg_exec(&format!("SELECT pg_advisory_lock(hashtextextended('{key}', 0))"));
    let started = std::time::Instant::now();
    let shown = state(&fx, &["show"]);
    assert_eq!(shown.code, Some(2), "{}", shown.describe());
    assert!(shown.stderr.contains("publication_in_progress"), "{}", shown.describe());
    let status = fx.status();
    let error = status["incremental"]["error"].as_str().unwrap_or_default().to_string();
    assert!(error.contains("publication_in_progress"), "status says so: {status:#}");
    let m = fx.manifest.display().to_string();
    let plan = fx.dpone(&["plan", &m], &[]);
    assert_ne!(plan.code, Some(0), "{}", plan.describe());
    assert!(plan.stdout.contains("publication_in_progress") || plan.stderr.contains("publication_in_progress"), "{}", plan.describe());
    assert!(started.elapsed() < std::time::Duration::from_secs(60), "the three commands took {:?}", started.elapsed());
    fx.pg_exec(&format!("SELECT pg_advisory_unlock(hashtextextended('{key}', 0))"));
    assert_eq!(show(&fx)["mark"]["value"], "5", "once the publication ended, the mark is shown");
    fx.finish();
}
