//! ClickHouse -> PostgreSQL with `sink.options.postgres.publication:
//! direct`, through the real `dpone` binary on real servers: the chunks
//! are loaded into the target inside the publishing transaction (no
//! staging table, no generation), each read back there.
//!
//! - a window replace and a full refresh land exactly (multiset of what
//!   PostgreSQL prints), with one receipt, no owned table, the plan and
//!   the evidence saying how the rows were checked;
//! - every guard of the transaction fires on a target whose own code
//!   interferes, and nothing is published: a trigger that changes a
//!   loaded row (`chunk_verification_failed`), one that writes a row into
//!   the range of a chunk already verified (`publication_verification_failed`),
//!   one that changes a row outside the window (`kept_rows_changed`);
//! - a writer outside dpone waits for the commit (the target is locked for
//!   the whole load), its row then stays;
//! - a chunk whose COPY fails part-way with a transient error, or whose
//!   source changed while it streamed, is rolled back to its savepoint,
//!   read from ClickHouse again and loaded again;
//!   one that fails on all three attempts fails the run, nothing published;
//! - `direct` is refused before any write where it cannot apply.
//!
//! Crashes at every failpoint are in the crash matrix
//! (`clickhouse_to_postgres_direct`).

mod ch_postgres_common;
mod guards_common;
mod harness;

use ch_postgres_common::{
    Fixture, INTERVAL_END, Options, Row, TS, check_report, expected_after_replace, ident, in_window, standard_fixture, standard_source,
    standard_target,
};
use guards_common::{json, spawn, wait, wait_until};
use harness::{codes, state_of};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(60);

fn direct() -> Options {
    Options { publication: Some("direct"), ..Options::default() }
}

fn evidence(doc: &serde_json::Value) -> serde_json::Value {
    let path = doc["evidence_path"].as_str().expect("an evidence path");
    serde_json::from_str(&std::fs::read_to_string(path).expect("the evidence file")).expect("JSON evidence")
}

/// The attempt that landed, per chunk, as the evidence records it.
fn attempts(ev: &serde_json::Value) -> Vec<u64> {
    ev["chunks"].as_array().expect("chunks").iter().map(|c| c["attempt"].as_u64().expect("an attempt")).collect()
}

fn expected() -> Vec<Row> {
    expected_after_replace(&standard_target(), &standard_source(), TS)
}

fn window_rows() -> usize {
    standard_source().iter().filter(|r| in_window(&r[TS])).count()
}

/// [`standard_fixture`] with the [`direct`] manifest.
fn direct_fixture(prefix: &'static str) -> Fixture {
    let fx = standard_fixture(prefix);
    fx.write_manifest(&direct());
    fx
}

/// A trigger `name` on the target, `when` (`BEFORE INSERT`, ...) `FOR
/// EACH <each>` (`ROW`, `STATEMENT`), running a function of the same name
/// (plpgsql `body`, then `RETURN NEW`).
fn trigger(fx: &Fixture, name: &str, when: &str, each: &str, body: &str) {
    let f = format!("{}.{}", ident(&fx.schema), ident(name));
    fx.pg_exec(&format!("CREATE FUNCTION {f}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {body} RETURN NEW; END $$"));
    fx.pg_exec(&format!("CREATE TRIGGER {name} {when} ON {} FOR EACH {each} EXECUTE FUNCTION {f}()", fx.target_sql()));
}

/// A run refused by a guard of the publishing transaction: exit 1 with
/// `code`, publication absent, the target, receipts and owned tables as
/// before, the journal `failed`.
fn assert_rolled_back(fx: &Fixture, code: &str, what: &str) -> serde_json::Value {
    let run = fx.run();
    let doc = run.assert_failed(what, 1, code);
    assert_eq!(doc["publication"], "absent", "{what}: nothing was published: {doc:#}");
    fx.assert_target(&standard_target(), &format!("{what}: the target is unchanged"));
    assert!(fx.receipts().is_empty(), "{what}: no receipt");
    assert_eq!(fx.leftovers(), Vec::<String>::new(), "{what}: no table of dpone's");
    assert_eq!(state_of(&fx.status()), "failed", "{what}");
    doc
}

#[test]
fn a_direct_window_replace_lands_exactly_without_staging() {
    let fx = direct_fixture("direct_chpg_window");
    let plan = fx.plan();
    let p = plan.json();
    assert_eq!(p["publication"]["method"], "direct", "{}", plan.describe());
    assert_eq!(p["staging"]["scope"], "direct", "{}", plan.describe());
    assert_eq!(codes(&p["refusals"]), Vec::<String>::new(), "{}", plan.describe());
    let text = fx.dpone(&["plan", &fx.manifest.display().to_string(), "--interval-end", INTERVAL_END], &[]);
    assert!(text.stdout.contains("inside the publishing transaction"), "the text plan says where the chunks go:\n{}", text.describe());

    let run = fx.run();
    let doc = run.assert_succeeded("a direct window replace");
    fx.assert_target(&expected(), "the target after a direct window replace");
    check_report(&doc, &standard_source(), &expected(), "a direct window replace");
    let receipts = fx.receipts();
    assert_eq!(receipts.len(), 1, "one publication: {receipts:?}");
    assert_eq!(receipts[0].rows, window_rows() as i64);
    assert_eq!(fx.leftovers(), Vec::<String>::new(), "no staging or generation table, ever");
    let ev = evidence(&doc);
    assert_eq!(ev["generation"]["verified_by"], "chunks_read_back_in_publication", "{ev:#}");
    assert_eq!(ev["generation"]["kept_verified_by"], "in_place_under_lock", "{ev:#}");
    assert_eq!(ev["publication"]["method"], "direct", "{ev:#}");
    // The evidence's facts of the target, counted inside the publishing
    // transaction, are what the published target holds.
    let stats = &ev["target"];
    let (inside, all) = (window_rows() as u64, expected().len() as u64);
    let nulls = expected().iter().filter(|r| r[TS] == ch_postgres_common::V::Null).count() as u64;
    assert_eq!(
        (&stats["total_rows"], &stats["window_rows"], &stats["outside_rows"], &stats["null_window_rows"]),
        (&all.into(), &inside.into(), &(all - inside).into(), &nulls.into()),
        "{stats:#}"
    );
    let per_day = fx.pg_query(&format!(
        "SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD'), count(*)::text FROM {} WHERE ts >= '{}+00' AND ts < '{}+00' GROUP BY 1 ORDER BY 1",
        fx.target_sql(),
        ch_postgres_common::CHUNK_BOUNDS[0],
        ch_postgres_common::CHUNK_BOUNDS[3]
    ));
    let want: serde_json::Map<String, serde_json::Value> =
        per_day.iter().map(|r| (r[0].clone().unwrap(), serde_json::Value::from(r[1].clone().unwrap().parse::<u64>().unwrap()))).collect();
    assert_eq!(stats["rows_per_utc_day"], serde_json::Value::Object(want), "{stats:#}");
    let bound = |f: &str| {
        fx.pg_scalar(&format!(
            "SELECT (extract(epoch FROM {f}(ts)) * 1000000)::int8 FROM {} WHERE ts >= '{}+00' AND ts < '{}+00'",
            fx.target_sql(),
            ch_postgres_common::CHUNK_BOUNDS[0],
            ch_postgres_common::CHUNK_BOUNDS[3]
        ))
        .map(|v| v.parse::<i64>().unwrap())
    };
    let micros = |v: &serde_json::Value| v.as_str().map(|s| dpone_core::time::Timestamp::parse_rfc3339(s).unwrap().0);
    assert_eq!(micros(&stats["min"]), bound("min"), "{stats:#}");
    assert_eq!(micros(&stats["max"]), bound("max"), "{stats:#}");
    for c in ev["chunks"].as_array().expect("chunks") {
        assert_eq!(c["staging_table"], "", "a chunk loaded into the target has no staging table: {c:#}");
        assert_eq!(c["stream_digest"], c["staged_digest"], "what the target held equals what was sent: {c:#}");
    }
    assert_eq!(state_of(&fx.status()), "succeeded");
    // Again, replacing the window the first run published.
    let again = fx.run().assert_succeeded("a second direct window replace");
    assert_eq!(again["execution"], 2, "{again:#}");
    fx.assert_target(&expected(), "the target after a second direct window replace");
    assert_eq!(fx.receipts().len(), 2);
    fx.finish();
}

#[test]
fn a_direct_full_refresh_replaces_the_whole_target() {
    let fx = standard_fixture("direct_chpg_full");
    fx.write_manifest(&Options { full_refresh: true, ..direct() });
    let doc = fx.run().assert_succeeded("a direct full refresh");
    fx.assert_target(&standard_source(), "the target is exactly the source");
    assert_eq!(doc["inserted_rows"], standard_source().len(), "{doc:#}");
    assert_eq!(fx.receipts().len(), 1);
    assert_eq!(fx.leftovers(), Vec::<String>::new());
    assert_eq!(evidence(&doc)["generation"]["kept_verified_by"], "none");
    fx.finish();
}

#[test]
fn a_trigger_that_changes_a_loaded_row_is_refused_and_nothing_is_published() {
    let fx = direct_fixture("direct_chpg_changed");
    trigger(&fx, "rename", "BEFORE INSERT", "ROW", "IF NEW.id = 9 THEN NEW.name := 'changed by a trigger'; END IF;");
    let doc = assert_rolled_back(&fx, "chunk_verification_failed", "a trigger changing a loaded row");
    assert!(doc["errors"].to_string().contains("chunk 1"), "the message names the chunk: {doc:#}");
    fx.finish();
}

/// A direct run whose target has an `AFTER INSERT` row trigger `name`
/// running `body` (given the target's name): rolled back with `code`.
fn assert_row_trigger_rolls_back(prefix: &'static str, name: &str, body: impl FnOnce(&str) -> String, code: &str, what: &str) {
    let fx = direct_fixture(prefix);
    trigger(&fx, name, "AFTER INSERT", "ROW", &body(&fx.target_sql()));
    assert_rolled_back(&fx, code, what);
    fx.finish();
}

#[test]
fn a_trigger_that_writes_into_a_verified_chunk_range_is_refused() {
    // When the last chunk's row 12 arrives, a row appears in chunk 0's
    // range, which was read back and verified before.
    let extra = |t: &str| format!("IF NEW.id = 12 THEN INSERT INTO {t} (id, ts) VALUES (990, '2026-09-06 01:00:00+00'); END IF;");
    let what = "a trigger writing into a verified chunk's range";
    assert_row_trigger_rolls_back("direct_chpg_extra", "extra", extra, "publication_verification_failed", what);
}

#[test]
fn a_trigger_that_changes_a_row_outside_the_window_is_refused() {
    let touch_kept = |t: &str| format!("IF NEW.id = 6 THEN UPDATE {t} SET name = 'touched' WHERE id = 100; END IF;");
    let what = "a trigger changing a row outside the window";
    assert_row_trigger_rolls_back("direct_chpg_kept", "touch_kept", touch_kept, "kept_rows_changed", what);
}

/// A sequence `inserts` and a BEFORE INSERT trigger that counts every row
/// the target is sent (`nextval`, which no rollback undoes) and raises a
/// serialization failure (SQLSTATE 40001, transient) when `fail_when`
/// (plpgsql over `n`, the row's count) holds. Returns the sequence.
fn flaky_target(fx: &Fixture, fail_when: &str) -> String {
    let seq = format!("{}.{}", ident(&fx.schema), ident("inserts"));
    fx.pg_exec(&format!("CREATE SEQUENCE {seq}"));
    trigger(
        fx,
        "flaky",
        "BEFORE INSERT",
        "ROW",
        &format!(
            "DECLARE n bigint := nextval('{seq}'); BEGIN IF {fail_when} THEN \
             RAISE EXCEPTION 'injected failure at row % (id %)', n, NEW.id USING ERRCODE = '40001'; END IF; END;"
        ),
    );
    seq
}

#[test]
fn a_chunk_whose_copy_failed_part_way_is_rolled_back_and_loaded_again() {
    let fx = direct_fixture("direct_chpg_retry");
    let per_chunk = ch_postgres_common::rows_per_chunk(&standard_source(), TS);
    assert!(per_chunk[0] >= 2, "the first chunk has a row before the failing one: {per_chunk:?}");
    // The first chunk's second row fails once: its first row is in the
    // target (inside the chunk's savepoint) when the COPY breaks off.
    let seq = flaky_target(&fx, "n = 2");
    let doc = fx.run().assert_succeeded("a chunk loaded again after a failure part-way");
    fx.assert_target(&expected(), "the target after a chunk was rolled back and loaded again");
    check_report(&doc, &standard_source(), &expected(), "a chunk loaded again");
    let ev = evidence(&doc);
    assert_eq!(attempts(&ev), vec![2, 1, 1], "the first chunk took two attempts: {ev:#}");
    // Every window row was sent once, plus the two of the failed attempt.
    let sent: u64 = fx.pg_scalar(&format!("SELECT last_value FROM {seq}")).expect("a sequence value").parse().unwrap();
    assert_eq!(sent, window_rows() as u64 + 2, "the failed attempt's rows were sent, then rolled back");
    assert_eq!(fx.receipts().len(), 1, "one publication");
    assert_eq!(fx.leftovers(), Vec::<String>::new(), "no table of dpone's");
    fx.finish();
}

/// A row written into the first chunk's range in ClickHouse while that
/// chunk streams (the run paused after its first frame was handed to the
/// target's COPY, `staging.mid_stream`): the source's count after EOF
/// differs from what was streamed (`source_changed_during_read`,
/// transient), so the chunk's rows already loaded are rolled back to its
/// savepoint and the chunk is read again, this time with the new row; the
/// target ends with exactly the window as the source now holds it.
#[test]
fn a_chunk_whose_source_changed_during_its_read_is_rolled_back_and_read_again() {
    let fx = direct_fixture("direct_chpg_reread");
    assert!(ch_postgres_common::rows_per_chunk(&standard_source(), TS)[0] > 2, "the first chunk streams more than one frame");
    let marker = fx.dir().join("paused");
    let m = fx.manifest.display().to_string();
    let env = vec![
        ("DPONE_CONN_CH".to_string(), fx.clickhouse_url.clone()),
        ("DPONE_CONN_PG".to_string(), dpone_testkit::postgres_url()),
        ("DPONE_FAILPOINT_SLEEP".to_string(), "staging.mid_stream:1000".to_string()),
        ("DPONE_FAILPOINT_PAUSED".to_string(), marker.display().to_string()),
    ];
    let child = spawn(fx.dir(), &["run", &m, "--interval-end", INTERVAL_END, "--format", "json"], &env);
    wait_until("the first chunk's read paused part-way", LIMIT, || marker.exists());
    let late = ch_postgres_common::row(60, ch_postgres_common::ts("2026-09-06 18:00:00"));
    fx.insert_source(std::slice::from_ref(&late));
    let out = wait(child, LIMIT);
    let doc = json(&out);
    assert_eq!(doc["status"], "succeeded", "{}", guards_common::describe(&out));
    let mut source = standard_source();
    source.push(late);
    let want = expected_after_replace(&standard_target(), &source, TS);
    fx.assert_target(&want, "the target after a chunk was read again");
    check_report(&doc, &source, &want, "a chunk read again");
    let ev = evidence(&doc);
    assert_eq!(attempts(&ev), vec![2, 1, 1], "the first chunk was read twice: {ev:#}");
    assert_eq!(fx.receipts().len(), 1, "one publication");
    fx.finish();
}

#[test]
fn a_chunk_that_fails_on_every_attempt_fails_the_run_and_publishes_nothing() {
    let fx = direct_fixture("direct_chpg_retries_out");
    // Every row fails: each attempt breaks off at its first row.
    let seq = flaky_target(&fx, "true");
    let doc = assert_rolled_back(&fx, "postgres_error:40001", "a chunk failing on every attempt");
    assert!(doc["errors"].to_string().contains("injected failure"), "the server's message is reported: {doc:#}");
    let sent = fx.pg_scalar(&format!("SELECT last_value FROM {seq}"));
    assert_eq!(sent.as_deref(), Some("3"), "three attempts, each stopped at its first row");
    fx.finish();
}

#[test]
fn a_writer_outside_dpone_waits_for_the_commit_and_its_row_stays() {
    let fx = direct_fixture("direct_chpg_writer");
    // Each chunk's COPY takes a second: room for the writer to try.
    trigger(
        &fx,
        "slow",
        "AFTER INSERT",
        "STATEMENT",
        "IF current_setting('application_name') = 'dpone publish' THEN PERFORM pg_sleep(1); END IF;",
    );
    let m = fx.manifest.display().to_string();
    let env = fx.run_env(&[]);
    let child = spawn(fx.dir(), &["run", &m, "--interval-end", INTERVAL_END, "--format", "json"], &env);
    let locked = || {
        fx.pg_scalar(&format!(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'dpone publish' \
             AND l.relation = to_regclass('{}') AND l.mode = 'ShareRowExclusiveLock' AND l.granted",
            fx.target_sql().replace('\'', "''")
        ))
        .as_deref()
            != Some("0")
    };
    wait_until("the publishing transaction holds the target's lock", LIMIT, locked);
    let started = Instant::now();
    fx.pg_exec(&format!("INSERT INTO {} (id, ts) VALUES (950, '2026-09-07 13:00:00+00')", fx.target_sql()));
    let waited = started.elapsed();
    let out = wait(child, LIMIT);
    let doc = json(&out);
    assert_eq!(doc["status"], "succeeded", "{}", guards_common::describe(&out));
    assert!(waited >= Duration::from_millis(500), "the writer waited for the publication ({waited:?})");
    assert!(!fx.receipts().is_empty(), "the publication had committed when the writer's INSERT returned");
    let stays = fx.pg_scalar(&format!("SELECT count(*) FROM {} WHERE id = 950", fx.target_sql()));
    assert_eq!(stays.as_deref(), Some("1"), "the writer's row, written after the publication, stays");
    fx.finish();
}

#[test]
fn direct_is_refused_before_any_write_where_it_cannot_apply() {
    let fx = direct_fixture("direct_chpg_refused");
    let m = fx.manifest.display().to_string();
    // An incremental strategy publishes a verified batch.
    let q = |s: &str| serde_json::to_string(s).expect("a JSON string");
    let yaml = harness::env_manifest(
        ["clickhouse", "CH", &q(&fx.db), "t", "\n  options: {incremental_column: id}"],
        [
            "postgres",
            "PG",
            &q(&fx.schema),
            "t",
            "\n  strategy: {mode: incremental_append}\n  options:\n    postgres: {publication: direct}",
        ],
        &q(&fx.work_dir().display().to_string()),
    );
    std::fs::write(&fx.manifest, yaml).unwrap();
    let run = fx.dpone(&["run", &m, "--interval-end", INTERVAL_END, "--format", "json"], &[]);
    let doc = run.assert_failed("direct with incremental_append", 2, "unsupported_route_option:postgres.publication");
    assert!(doc["errors"].to_string().contains("sink.options.postgres.publication"), "the path is named: {doc:#}");
    fx.assert_target(&standard_target(), "nothing was written");
    assert!(fx.receipts().is_empty());
    fx.finish();
}

#[test]
fn a_publication_that_never_started_publishes_nothing_and_the_next_run_does() {
    let fx = direct_fixture("direct_chpg_timeout");
    // The publishing call times out before its transaction begins: an
    // indeterminate error, but no intent was recorded, so nothing can
    // have been published.
    let run = fx.run_with(&[("DPONE_TARGET_FAULTS", "publish:timeout:1")]);
    let doc = run.assert_failed("a publication that timed out before it began", 1, "injected_timeout");
    assert_eq!(doc["publication"], "absent", "{doc:#}");
    fx.assert_target(&standard_target(), "the target is unchanged");
    assert!(fx.receipts().is_empty());
    assert_eq!(state_of(&fx.status()), "failed");
    fx.run().assert_succeeded("the next run");
    fx.assert_target(&expected(), "the next run published");
    assert_eq!(fx.receipts().len(), 1);
    fx.finish();
}

/// `url` with `password` as its password (the test server trusts its
/// clients and never asks for it: the password only has to be configured).
fn with_password(url: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (user, host) = match authority.rsplit_once('@') {
        Some((userinfo, host)) => (userinfo.split(':').next().unwrap_or("postgres").to_string(), host),
        None => ("postgres".to_string(), authority),
    };
    format!("{scheme}://{user}:{password}@{host}{path}")
}

/// A chunk's load error leaves the target through the direct publication's
/// feed, not through the adapter's return value, and is logged on its way
/// (at `warn`, the default level, by the target and by the engine's retry):
/// a server message that echoes the connection's password (here a trigger
/// raising it, transient so that every attempt logs) is redacted in every
/// log line, in the run's result and in the work dir.
#[test]
fn a_password_a_failing_chunk_load_echoes_is_redacted_everywhere() {
    const SECRET: &str = "Dpone-direct-s3cret-7";
    let fx = direct_fixture("direct_chpg_redact");
    trigger(
        &fx,
        "echo",
        "BEFORE INSERT",
        "ROW",
        &format!("RAISE EXCEPTION 'login with password {SECRET} refused' USING ERRCODE = '40001';"),
    );
    let url = with_password(&dpone_testkit::postgres_url(), SECRET);
    let run = fx.run_with(&[("DPONE_CONN_PG", url.as_str())]);
    let all = format!("{}\n{}", run.stdout, run.stderr);
    assert!(!all.contains(SECRET), "the password leaked into the output:\n{}", run.describe());
    assert!(run.stderr.contains("loading the chunk failed"), "the target's warning is logged:\n{}", run.describe());
    assert!(all.contains("<redacted>"), "the echoed password is shown redacted:\n{}", run.describe());
    run.assert_failed("a chunk load echoing the password", 1, "postgres_error:40001");
    let mut files = vec![fx.dir().to_path_buf()];
    while let Some(p) = files.pop() {
        if p.is_dir() {
            files.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        } else if p.extension().is_none_or(|e| e != "yaml") {
            let bytes = std::fs::read(&p).unwrap();
            assert!(!String::from_utf8_lossy(&bytes).contains(SECRET), "the password leaked into {}", p.display());
        }
    }
    fx.finish();
}

/// `target_unchanged` of a direct publication is judged as on the staged
/// path: the first run replaces stale window rows (false), a rerun of the
/// unchanged window finds the rows it replaces equal to the new ones
/// (true), and a window row changed by someone in between makes it false
/// again (the run puts the source's row back).
#[test]
fn a_direct_rerun_of_an_unchanged_window_reports_the_target_unchanged() {
    let fx = direct_fixture("direct_chpg_unchanged");
    let doc = fx.run().assert_succeeded("the first direct run");
    assert_eq!(doc["target_unchanged"], false, "the first run replaced stale rows: {doc:#}");
    let doc = fx.run().assert_succeeded("a direct rerun of the same window");
    assert_eq!(doc["target_unchanged"], true, "the rerun found the window already holding these rows: {doc:#}");
    fx.assert_target(&expected(), "the target after the rerun");
    let changed = fx.pg_query(&format!(
        "SELECT count(*)::text FROM {t} WHERE ts >= '{}+00' AND ts < '{}+00'",
        ch_postgres_common::CHUNK_BOUNDS[0],
        ch_postgres_common::CHUNK_BOUNDS[3],
        t = fx.target_sql()
    ));
    assert_ne!(changed[0][0].as_deref(), Some("0"), "the window holds rows");
    // One window row's copy removed: same source, but the target differs.
    fx.pg_exec(&format!(
        "DELETE FROM {t} WHERE ctid = (SELECT ctid FROM {t} WHERE ts >= '{}+00' AND ts < '{}+00' LIMIT 1)",
        ch_postgres_common::CHUNK_BOUNDS[0],
        ch_postgres_common::CHUNK_BOUNDS[3],
        t = fx.target_sql()
    ));
    let doc = fx.run().assert_succeeded("a direct run after a window row was deleted");
    assert_eq!(doc["target_unchanged"], false, "the run restored a deleted row: {doc:#}");
    fx.assert_target(&expected(), "the target after the third run");
    fx.finish();
}
