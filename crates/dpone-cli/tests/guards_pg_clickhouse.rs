//! Every guard of the PostgreSQL -> ClickHouse route fires, on real servers.
//!
//! A run pauses at a failpoint (`DPONE_FAILPOINT_SLEEP`), the test changes
//! one row there by ClickHouse's own SQL, and the run must end with the
//! documented refusal, exit 1, and the target as it was: its rows and its
//! table UUID (the identity an `EXCHANGE` would change).
//!
//! - `staging.after_ack`: a staging row inserted, deleted (lightweight
//!   `DELETE`) or changed (`ALTER TABLE ... UPDATE`, a mutation) ->
//!   `staging_verification_failed`;
//! - `chunk.after_verify`: a staging row inserted, deleted or changed after
//!   the staging table was verified (its parts identified), before the
//!   generation links its parts -> `generation_verification_failed` (the
//!   generation no longer holds the verified parts, so it is digested; an
//!   added part is seen by the count);
//! - `generation.after_build`: the generation holds the kept rows (copied)
//!   and the staging parts (hard links); a row of it inserted, deleted or
//!   changed -> `generation_verification_failed` (a changed row keeps the
//!   count: only the generation's digest sees it);
//! - a kept row of the target changed after the build -> `kept_rows_changed`;
//! - the source session that exported the run's snapshot terminated before
//!   the read (`staging.before_write`) -> `snapshot_lost`;
//! - the verified generation dropped, or replaced by another table of its
//!   name, just before the `EXCHANGE` (`publish.before_exchange`) ->
//!   `generation_changed` (its UUID is compared with the intent's before
//!   the exchange: nothing else is exchanged in), and the next run
//!   publishes the window;
//! - the verified generation dropped after the publication read both
//!   identities (`replace.before_exchange`): the `EXCHANGE` fails, the
//!   target is still the previous table -> `publication_failed`, absent;
//! - the target renamed away just before the `EXCHANGE`
//!   (`publish.before_exchange`) -> `outcome_unknown`: nothing exchanged
//!   in, every table kept, refused until resolved, then the next run
//!   publishes;
//! - a row written into the verified generation just before the `EXCHANGE`
//!   (`publish.before_exchange`): its row count, re-read right before the
//!   exchange -> `generation_changed`, nothing published; written in the
//!   moment after that count (`replace.before_exchange`): no transaction
//!   spans the verification and the exchange, so it is published with the
//!   generation; the generation's parts up to the block number read right
//!   before the exchange no longer add up to the verified rows ->
//!   `publication_verification_failed`, the publication reported as having
//!   happened.
//!
//! The publication is `EXCHANGE TABLES`, which makes the verified
//! generation table itself the target, proven by its UUID
//! (docs/recovery.md); a changed value written in the moment between the
//! generation's verification and the exchange keeps the count and is not
//! seen (ClickHouse has no transaction to close that gap).

mod guards_common;
mod harness;
mod pg_clickhouse_common;

use dpone_core::value::Value;
use guards_common::{assert_first_error_says, assert_refused, spawn, tamper_while_paused, wait, wait_until};
use pg_clickhouse_common::{BOUNDS, Fixture, INTERVAL_END, ManifestOptions, Row, TABLE, assert_same_rows, at, basic_cols, dec, int, text};
use std::process::{Child, Output};
use std::time::Duration;

const PAUSE_MS: &str = "2000";
const LIMIT: Duration = Duration::from_secs(60);

fn row(id: i64, ts: Value) -> Row {
    vec![int(id), ts, dec(&format!("{}.{:04}", id * 7, id % 10_000), 4), text(&format!("name {id} ✓"))]
}

fn source() -> Vec<Row> {
    vec![
        row(1, at(BOUNDS[0], 0)),
        row(2, at(BOUNDS[0], 3_600_000_000)),
        row(3, at(BOUNDS[1], 1)),
        row(3, at(BOUNDS[1], 1)),
        row(4, at(BOUNDS[3], -1)),
        row(5, at(BOUNDS[3], 0)),
    ]
}

const WINDOW_ROWS: usize = 5;

/// The target once a run published the window: its rows outside the window
/// (all but id 200) and the source's rows in it (all but id 5, at the
/// window's end).
fn published() -> Vec<Row> {
    target().into_iter().filter(|r| r[0] != int(200)).chain(source().into_iter().filter(|r| r[0] != int(5))).collect()
}

fn target() -> Vec<Row> {
    vec![row(100, at(BOUNDS[0], -1)), row(101, at(BOUNDS[3], 0)), row(102, Value::Null), row(200, at(BOUNDS[1], 0))]
}

/// The fixture with one chunk covering the window.
fn fixture(prefix: &'static str) -> Fixture {
    fixture_digest(prefix, None)
}

/// [`fixture`] with `execution.verification.digest: <digest>`.
fn fixture_digest(prefix: &'static str, digest: Option<&str>) -> Fixture {
    let fx = Fixture::new(prefix, basic_cols());
    fx.insert_source(&source());
    fx.insert_target(&target());
    fx.write_manifest(&ManifestOptions {
        block_rows: Some(2),
        chunking: false,
        digest: digest.map(str::to_string),
        chunk_interval: "P3D".into(),
        ..ManifestOptions::default()
    });
    fx
}

fn uuid(fx: &Fixture) -> String {
    fx.ch_scalar(&format!("SELECT toString(uuid) FROM system.tables WHERE database = '{}' AND name = '{TABLE}'", fx.db))
}

fn count(fx: &Fixture, table: &str) -> usize {
    fx.ch_scalar(&format!("SELECT count() FROM {}.{table}", fx.db)).trim().parse().expect("a count")
}

fn owned(fx: &Fixture, prefix: &str) -> Option<String> {
    fx.owned_tables().into_iter().find(|t| t.starts_with(prefix))
}

/// A run paused at `point`: once `ready` finds what to tamper with, `tamper` changes it.
fn tampered_run<T>(fx: &Fixture, point: &str, ready: impl FnMut() -> Option<T>, tamper: impl FnOnce(T)) -> Output {
    tampered_run_paused(fx, point, PAUSE_MS, ready, tamper)
}

fn tampered_run_paused<T>(fx: &Fixture, point: &str, pause_ms: &str, ready: impl FnMut() -> Option<T>, tamper: impl FnOnce(T)) -> Output {
    // Written by the run as its pause begins (see `paused`).
    let marker = paused_marker(fx);
    let _ = std::fs::remove_file(&marker);
    let env = vec![
        ("DPONE_CONN_PG".to_string(), dpone_testkit::postgres_url()),
        ("DPONE_CONN_CH".to_string(), fx.clickhouse_url.clone()),
        ("DPONE_FAILPOINT_SLEEP".to_string(), format!("{point}:{pause_ms}")),
        ("DPONE_FAILPOINT_PAUSED".to_string(), marker.display().to_string()),
    ];
    let child = spawn_run(fx, &env);
    tamper_while_paused(child, point, LIMIT, ready, tamper)
}

/// `dpone run` of the fixture's manifest with `env`.
fn spawn_run(fx: &Fixture, env: &[(String, String)]) -> Child {
    let m = fx.manifest.display().to_string();
    spawn(fx.dir(), &["run", &m, "--interval-end", INTERVAL_END, "--format", "json"], env)
}

/// The file a paused run writes as its pause begins.
fn paused_marker(fx: &Fixture) -> std::path::PathBuf {
    fx.dir().join("failpoint-paused")
}

/// Whether the run is inside its failpoint pause.
fn paused(fx: &Fixture) -> bool {
    paused_marker(fx).exists()
}

/// The run's table whose name starts with `prefix`, once the run is inside its pause.
fn paused_owned(fx: &Fixture, prefix: &str) -> Option<String> {
    paused(fx).then(|| owned(fx, prefix)).flatten()
}

/// The generation once it holds all its rows (3 kept + the window's): the
/// table exists before its rows are copied and attached, so only then is
/// the run paused after the build.
fn built(fx: &Fixture) -> Option<String> {
    owned(fx, "_dpone_gen_").filter(|g| count(fx, g) == 3 + WINDOW_ROWS)
}

/// Every way [`tamper`] knows.
const TAMPERINGS: [&str; 3] = ["insert", "delete", "change"];

/// Inserts a row into, deletes the row with id 2 of, or changes it in `table`.
fn tamper(fx: &Fixture, table: &str, how: &str) {
    let t = format!("{}.{table}", fx.db);
    match how {
        "insert" => fx.ch_exec(&format!("INSERT INTO {t} (id, ts, amount, name) VALUES (900, '2026-09-07 01:00:00', 1, 'tampered in')")),
        "delete" => fx.ch_exec(&format!("DELETE FROM {t} WHERE id = 2")),
        "change" => fx.ch_exec(&format!("ALTER TABLE {t} UPDATE name = 'tampered' WHERE id = 2 SETTINGS mutations_sync = 2")),
        other => panic!("no tamper `{other}`"),
    }
}

/// The connections of a run without failpoints.
fn plain_env(fx: &Fixture) -> Vec<(String, String)> {
    vec![("DPONE_CONN_PG".to_string(), dpone_testkit::postgres_url()), ("DPONE_CONN_CH".to_string(), fx.clickhouse_url.clone())]
}

/// A run without failpoints succeeds and publishes the window.
fn assert_next_run_publishes(fx: &Fixture, what: &str) {
    let out = wait(spawn_run(fx, &plain_env(fx)), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{what}:\n{}", guards_common::describe(&out));
    assert_same_rows(&published(), &fx.target_rows(), &format!("{what}: the window published"));
}

fn assert_unchanged(fx: &Fixture, expected: &[Row], uuid_before: &str, what: &str) {
    assert_same_rows(expected, &fx.target_rows(), &format!("{what}: the target's rows"));
    assert_eq!(uuid(fx), uuid_before, "{what}: the target's identity (UUID) is unchanged");
}

/// For each way in `hows`, a run paused at `point` has the table `ready`
/// finds (a `kind` table) tampered with: every run is refused with `code`,
/// the target keeps its rows and identity. `note` ends each case's name.
fn assert_tampering_refused(
    fx: &Fixture,
    point: &str,
    (kind, note): (&str, &str),
    hows: &[&str],
    mut ready: impl FnMut() -> Option<String>,
    code: &str,
) {
    let uuid_before = uuid(fx);
    for how in hows {
        let what = format!("a {kind} row {how} at {point}{note}");
        let out = tampered_run(fx, point, &mut ready, |table| tamper(fx, &table, how));
        assert_refused(&out, code, &what);
        assert_unchanged(fx, &target(), &uuid_before, &what);
    }
}

/// A run paused at `point` once its generation exists, which `tamper`
/// changes (given its name): refused with `code`, the first error saying
/// `says`, the target keeping its rows and identity; the run's report.
fn assert_generation_change_refused(
    fx: &Fixture,
    point: &str,
    tamper: impl FnOnce(String),
    code: &str,
    says: &str,
    what: &str,
) -> serde_json::Value {
    let uuid_before = uuid(fx);
    let out = tampered_run(fx, point, || paused_owned(fx, "_dpone_gen_"), tamper);
    let doc = assert_refused(&out, code, what);
    assert_first_error_says(&doc, says, what);
    assert_unchanged(fx, &target(), &uuid_before, what);
    doc
}

#[test]
fn a_staging_table_tampered_after_its_load_is_refused() {
    let fx = fixture("guard_pgch_stg");
    let loaded = || owned(&fx, "_dpone_stg_").filter(|t| count(&fx, t) == WINDOW_ROWS);
    assert_tampering_refused(&fx, "staging.after_ack", ("staging", ""), &TAMPERINGS, loaded, "staging_verification_failed");
    fx.finish();
}

/// Under `verification.digest: xxh3_128` the staging check is as strong
/// against a changed row: only the digest can see it (the count is equal).
#[test]
fn a_staging_row_changed_after_its_load_is_refused_under_the_xxh3_128_digest() {
    let fx = fixture_digest("guard_pgch_xxh3", Some("xxh3_128"));
    let loaded = || owned(&fx, "_dpone_stg_").filter(|t| count(&fx, t) == WINDOW_ROWS);
    let hows = ["change", "insert"];
    assert_tampering_refused(&fx, "staging.after_ack", ("staging", " (xxh3_128)"), &hows, loaded, "staging_verification_failed");
    fx.finish();
}

/// The staged parts are found in the generation by the identity recorded
/// when the staging table was verified, not digested again: a staging
/// table changed after its verification must not pass as verified.
#[test]
fn a_staging_table_tampered_after_its_verification_is_refused() {
    let fx = fixture("guard_pgch_stgv");
    // The staging table is loaded a moment before its verification
    // ends: tamper only once the run says it is inside the pause.
    let verified = || paused_owned(&fx, "_dpone_stg_");
    assert_tampering_refused(&fx, "chunk.after_verify", ("staging", ""), &TAMPERINGS, verified, "generation_verification_failed");
    fx.finish();
}

#[test]
fn a_generation_tampered_after_its_build_is_refused() {
    let fx = fixture("guard_pgch_gen");
    let built = || built(&fx);
    assert_tampering_refused(&fx, "generation.after_build", ("generation", ""), &TAMPERINGS, built, "generation_verification_failed");
    fx.finish();
}

#[test]
fn a_kept_row_changed_after_the_build_is_refused() {
    let fx = fixture("guard_pgch_kept");
    let uuid_before = uuid(&fx);
    let what = "a kept row changed at generation.after_build";
    let out = tampered_run(
        &fx,
        "generation.after_build",
        || built(&fx),
        |_| fx.ch_exec(&format!("ALTER TABLE {}.{TABLE} UPDATE name = 'changed' WHERE id = 100 SETTINGS mutations_sync = 2", fx.db)),
    );
    assert_refused(&out, "kept_rows_changed", what);
    let expected: Vec<Row> = target().into_iter().map(|r| if r[0] == int(100) { with_name(r, "changed") } else { r }).collect();
    assert_unchanged(&fx, &expected, &uuid_before, what);
    fx.finish();
}

fn with_name(mut r: Row, name: &str) -> Row {
    r[3] = text(name);
    r
}

/// The session that exported the run's snapshot (the keeper) is terminated
/// while the run waits before its read: the chunk reader cannot import the
/// snapshot, so the run stops with `snapshot_lost` and publishes nothing
/// (rows read under another snapshot would not be one source version);
/// the next run re-extracts the window under a new snapshot.
#[test]
fn a_lost_source_snapshot_is_refused_and_the_next_run_re_extracts() {
    let fx = fixture("guard_pgch_snap");
    let uuid_before = uuid(&fx);
    let what = "the snapshot keeper terminated at staging.before_write";
    // The run's own sessions carry a name no other test uses.
    let app = format!("dpone_{}", fx.schema);
    let url = format!(
        "{}{}application_name={app}",
        dpone_testkit::postgres_url(),
        if dpone_testkit::postgres_url().contains('?') { '&' } else { '?' }
    );
    let env = vec![
        ("DPONE_CONN_PG".to_string(), url.clone()),
        ("DPONE_CONN_CH".to_string(), fx.clickhouse_url.clone()),
        ("DPONE_FAILPOINT_SLEEP".to_string(), format!("staging.before_write:{PAUSE_MS}")),
        ("DPONE_FAILPOINT_PAUSED".to_string(), paused_marker(&fx).display().to_string()),
    ];
    let child = spawn_run(&fx, &env);
    let keeper = format!("SELECT count(*) FROM pg_stat_activity WHERE application_name = '{app}' AND query LIKE '%pg_export_snapshot%'");
    // Only once the run is paused before its read: the keeper's session
    // shows the export's query text while the export still runs, and
    // terminating it then fails the export instead of losing the snapshot.
    wait_until("the run's snapshot keeper is open and the run paused", LIMIT, || paused(&fx) && fx.pg_scalar(&keeper) == "1");
    fx.pg_exec(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '{app}' AND query LIKE '%pg_export_snapshot%'"
    ));
    let out = wait(child, LIMIT);
    assert_refused(&out, "snapshot_lost", what);
    assert_unchanged(&fx, &target(), &uuid_before, what);
    // The next run takes a new snapshot and publishes the window.
    let env: Vec<(String, String)> = env.into_iter().filter(|(k, _)| k != "DPONE_FAILPOINT_SLEEP").collect();
    let out = wait(spawn_run(&fx, &env), LIMIT);
    assert_eq!(out.status.code(), Some(0), "the run after a lost snapshot:\n{}", guards_common::describe(&out));
    assert_same_rows(&published(), &fx.target_rows(), "the window re-extracted under a new snapshot");
    fx.finish();
}

/// The verified generation is dropped, or replaced by another table of its
/// name, while the run waits just before its `EXCHANGE`: its UUID is
/// compared with the one the intent recorded, and the run refuses
/// (`generation_changed`) instead of exchanging whatever the name now
/// holds; the target keeps its rows and identity, and the next run builds
/// and publishes the window anew.
#[test]
fn a_generation_dropped_or_replaced_before_the_exchange_is_refused_and_the_next_run_publishes() {
    let fx = fixture("guard_pgch_pubf");
    let uuid_before = uuid(&fx);
    for how in ["dropped", "replaced"] {
        let what = format!("the generation {how} at publish.before_exchange");
        let change = |generation: String| {
            let g = format!("{}.{generation}", fx.db);
            fx.ch_exec(&format!("DROP TABLE {g} SYNC"));
            if how == "replaced" {
                fx.ch_exec(&format!("CREATE TABLE {g} AS {}.{TABLE}", fx.db));
                fx.ch_exec(&format!("INSERT INTO {g} (id, ts, amount, name) VALUES (900, '2026-09-07 01:00:00', 1, 'impostor')"));
            }
        };
        let expected_state = if how == "dropped" { "is gone" } else { "is table" };
        assert_generation_change_refused(&fx, "publish.before_exchange", change, "generation_changed", expected_state, &what);
        // The failed run's tables are dropped, the impostor with them.
        assert!(owned(&fx, "_dpone_gen_").is_none(), "{what}: no generation is left behind");
    }
    assert_next_run_publishes(&fx, "the run after a refused publication");
    assert_ne!(uuid(&fx), uuid_before, "the next run exchanged a new generation in");
    fx.finish();
}

/// The verified generation dropped in the moment after the publication read
/// both identities, right before `EXCHANGE TABLES` (`replace.before_exchange`,
/// after the engine's own re-check): the exchange fails, the target is
/// still the previous table, so the run reports `publication_failed` with
/// the publication absent; its tables are dropped and the next run
/// publishes the window.
#[test]
fn an_exchange_that_fails_leaves_the_target_and_is_publication_failed() {
    let fx = fixture("guard_pgch_xfail");
    let what = "the generation dropped at replace.before_exchange";
    let drop = |generation: String| fx.ch_exec(&format!("DROP TABLE {}.{generation} SYNC", fx.db));
    let doc = assert_generation_change_refused(&fx, "replace.before_exchange", drop, "publication_failed", "did not take effect", what);
    assert_eq!(doc["publication"], "absent", "{what}: {doc:#}");
    assert!(owned(&fx, "_dpone_").is_none(), "{what}: the failed run's tables are dropped: {:?}", fx.owned_tables());
    assert_next_run_publishes(&fx, "the run after a failed exchange");
    fx.finish();
}

/// The target renamed away while the run waits just before its `EXCHANGE`
/// (another name now holds its rows): the target is then neither the
/// recorded previous table nor the generation, so the run ends
/// `outcome_unknown` (docs/recovery.md, "Outcome unknown") with nothing
/// exchanged in and every table kept; renamed back, the target has its rows
/// and identity, a rerun is refused until `dpone resolve --outcome absent`,
/// and the run after that publishes the window.
#[test]
fn a_target_gone_just_before_the_exchange_is_an_unknown_outcome_until_resolved() {
    let fx = fixture("guard_pgch_nopub");
    let uuid_before = uuid(&fx);
    let what = "the target renamed away at publish.before_exchange";
    let moved = format!("{}.{TABLE}_moved", fx.db);
    let out = tampered_run(
        &fx,
        "publish.before_exchange",
        || paused(&fx).then_some(()),
        |()| {
            fx.ch_exec(&format!("RENAME TABLE {}.{TABLE} TO {moved}", fx.db));
        },
    );
    let doc = guards_common::json(&out);
    assert_eq!(
        (out.status.code(), &doc["error_code"], &doc["publication"]),
        (Some(1), &"outcome_unknown".into(), &"unknown".into()),
        "{what}:\n{}",
        guards_common::describe(&out)
    );
    let tables = fx.ch_scalar(&format!("SELECT count() FROM system.tables WHERE database = '{}' AND name = '{TABLE}'", fx.db));
    assert_eq!(tables.trim(), "0", "{what}: no target was created or exchanged in");
    let generation = owned(&fx, "_dpone_gen_").expect("the generation is kept for the operator");
    fx.ch_exec(&format!("RENAME TABLE {moved} TO {}.{TABLE}", fx.db));
    assert_unchanged(&fx, &target(), &uuid_before, what);
    let env = plain_env(&fx);
    let again = wait(spawn_run(&fx, &env), LIMIT);
    assert_eq!(
        guards_common::json(&again)["error_code"],
        "outcome_unknown",
        "{what}: refused until resolved:\n{}",
        guards_common::describe(&again)
    );
    assert_unchanged(&fx, &target(), &uuid_before, &format!("{what}, after the refused rerun"));
    assert_eq!(owned(&fx, "_dpone_gen_").as_deref(), Some(generation.as_str()), "{what}: the refused rerun keeps the tables");
    let m = fx.manifest.display().to_string();
    let resolved = wait(spawn(fx.dir(), &["resolve", m.as_str(), "--outcome", "absent"], &env), LIMIT);
    assert_eq!(resolved.status.code(), Some(0), "`dpone resolve --outcome absent`:\n{}", guards_common::describe(&resolved));
    assert_next_run_publishes(&fx, "the run after the resolution");
    fx.finish();
}

/// A row inserted into the verified generation while the run waits just
/// before its `EXCHANGE` (`publish.before_exchange`): the generation's row
/// count is re-read right before the exchange (the reconciliation after it
/// tells the generation's rows from other writers' by that count), so the
/// run refuses with `generation_changed`, nothing published. Inserted in
/// the moment after that count (`replace.before_exchange`), the row is
/// published with the generation (ClickHouse has no transaction around the
/// two); the generation's parts up to the block number read right before
/// the exchange no longer add up to the verified rows, and the run says so:
/// `publication_verification_failed`, the publication reported as done,
/// exit 1.
#[test]
fn a_row_written_into_the_generation_before_the_exchange_is_refused_or_reported_after_publication() {
    let fx = fixture("guard_pgch_pubv");
    let what = "a generation row inserted at publish.before_exchange";
    let insert = |generation: String| tamper(&fx, &generation, "insert");
    let holds = format!("holds {} rows", 3 + WINDOW_ROWS + 1);
    assert_generation_change_refused(&fx, "publish.before_exchange", insert, "generation_changed", &holds, what);

    let what = "a generation row inserted at replace.before_exchange";
    let ready = || paused_owned(&fx, "_dpone_gen_");
    let out = tampered_run(&fx, "replace.before_exchange", ready, |generation| tamper(&fx, &generation, "insert"));
    let doc = guards_common::json(&out);
    assert!(
        out.status.code() == Some(1) && doc["error_code"] == "publication_verification_failed" && doc["publication"] == "published",
        "{what}: expected exit 1, publication_verification_failed, the publication reported as done:\n{}",
        guards_common::describe(&out)
    );
    let message = doc["errors"][0]["message"].as_str().unwrap_or("");
    assert!(message.contains(&format!("reach {}", 3 + WINDOW_ROWS + 1)), "{what}: {doc:#}");
    assert!(fx.target_rows().iter().any(|r| r[0] == int(900)), "{what}: the row written into the generation was published");
    fx.finish();
}
