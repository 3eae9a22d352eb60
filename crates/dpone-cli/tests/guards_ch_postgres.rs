//! Every guard of the ClickHouse -> PostgreSQL route fires, on real servers.
//!
//! A run pauses at a failpoint (`DPONE_FAILPOINT_SLEEP`), the test changes
//! one row of dpone's tables or of the target there, and the run must end
//! with the documented refusal, exit 1, nothing published: the target's
//! rows as they were and no receipt (its identity).
//!
//! - `staging.after_ack` (a chunk's load acknowledged, not verified yet):
//!   a staging row inserted, deleted or changed -> `staging_verification_failed`;
//! - `generation.after_build`: the generation is a view over the staging
//!   tables, so a row of it is a staging row: inserted, deleted or changed
//!   -> `generation_verification_failed` (the publishing transaction
//!   fingerprints the rows it inserts against what the staging held when
//!   verified), also when two rows only exchange a value; a partition
//!   swap's generation is a table, re-digested;
//! - a kept row (outside the window) changed after the build ->
//!   `kept_rows_changed`, by the publishing transaction, which compares
//!   the kept rows' fingerprint with the build's under its lock (before
//!   and after the intent alike);
//! - a row a target trigger adds to the window inside the publishing
//!   transaction -> `publication_verification_failed`;
//! - a target with triggers is published with the inserted rows
//!   fingerprinted as the INSERT returns them: a row trigger changing an
//!   inserted row, or a statement trigger changing dpone's staging table
//!   from inside the publishing transaction (after the generation could
//!   have been fingerprinted) -> `generation_verification_failed`.
//!
//! One chunk (`chunk_interval: P3D`) so that one pause covers the whole window.

mod ch_postgres_common;
mod guards_common;
mod harness;

use ch_postgres_common::{
    Fixture, INTERVAL_END, NAME, Options, Row, TS, V, row, standard_fixture, standard_fixture_on, standard_source, standard_target,
    swap_setup, text, ts, with,
};
use guards_common::{assert_first_error_says, assert_refused, spawn, tamper_while_paused, wait};
use harness::state_of;
use std::process::Output;
use std::time::Duration;

/// Long enough for the test to see the pause and tamper, short enough to keep the test quick.
const PAUSE_MS: &str = "2000";
const LIMIT: Duration = Duration::from_secs(60);

/// Rows of the standard source inside the window.
fn window_rows() -> usize {
    standard_source().iter().filter(|r| ch_postgres_common::in_window(&r[TS])).count()
}

fn one_chunk(fx: &Fixture, publication: Option<&'static str>) {
    fx.write_manifest(&Options { chunk_interval: "P3D", publication, ..Options::default() });
}

/// `dpone run` with the fixture's connections plus `extra`, in the background.
fn spawn_run(fx: &Fixture, extra: &[(&str, &str)]) -> std::process::Child {
    let m = fx.manifest.display().to_string();
    spawn(fx.dir(), &["run", &m, "--interval-end", INTERVAL_END, "--format", "json"], &fx.run_env(extra))
}

/// A run paused at `point`: once `ready` finds what to tamper with, `tamper`
/// changes it; the run's output.
fn tampered_run<T>(fx: &Fixture, point: &str, ready: impl FnMut() -> Option<T>, tamper: impl FnOnce(T)) -> Output {
    let pause = format!("{point}:{PAUSE_MS}");
    let child = spawn_run(fx, &[("DPONE_FAILPOINT_SLEEP", &pause)]);
    tamper_while_paused(child, point, LIMIT, ready, tamper)
}

fn count(fx: &Fixture, table: &str) -> usize {
    fx.pg_scalar(&format!("SELECT count(*) FROM {}", fx.pg_table(table))).expect("a count").parse().expect("a number")
}

/// The staging table, once it holds every row of the window (the load was acknowledged).
fn loaded_staging(fx: &Fixture) -> Option<String> {
    fx.owned_tables().into_iter().filter(|t| t.starts_with("_dpone_stg_")).find(|t| count(fx, t) == window_rows())
}

/// The generation, once built.
fn generation_built(fx: &Fixture) -> Option<String> {
    fx.owned_tables().into_iter().find(|t| t.starts_with("_dpone_gen_"))
}

/// Inserts a row into, deletes one row of, or changes one row of `table`.
fn tamper(fx: &Fixture, table: &str, how: &str) {
    let t = fx.pg_table(table);
    match how {
        "insert" => fx.insert_pg(&t, &[row(900, ts("2026-09-07 01:00:00"))]),
        "delete" => fx.pg_exec(&format!("DELETE FROM {t} WHERE ctid = (SELECT ctid FROM {t} WHERE id = 6)")),
        "change" => fx.pg_exec(&format!("UPDATE {t} SET name = 'tampered' WHERE ctid = (SELECT ctid FROM {t} WHERE id = 6)")),
        // Two rows exchange their names: every column's multiset of values
        // stays the same, which a per-column (linear) row hash cannot see.
        "exchange" => fx.pg_exec(&format!(
            "UPDATE {t} SET name = CASE id WHEN 6 THEN (SELECT name FROM {t} WHERE id = 9) ELSE (SELECT name FROM {t} WHERE id = 6) END \
             WHERE id IN (6, 9)"
        )),
        other => panic!("no tamper `{other}`"),
    }
}

/// Nothing was published: the target holds `expected` and no receipt exists.
fn assert_unpublished(fx: &Fixture, expected: &[Row], what: &str) {
    fx.assert_target(expected, &format!("{what}: the target is unchanged"));
    assert_eq!(fx.receipts(), Vec::new(), "{what}: no receipt: the target's identity is unchanged");
    assert_eq!(state_of(&fx.status()), "failed", "{what}: the journal records the failure");
}

#[test]
fn a_staging_table_tampered_after_its_load_is_refused() {
    let fx = standard_fixture("guard_chpg_stg");
    one_chunk(&fx, None);
    for how in ["insert", "delete", "change"] {
        let what = format!("a staging row {how} at staging.after_ack");
        let out = tampered_run(&fx, "staging.after_ack", || loaded_staging(&fx), |staging| tamper(&fx, &staging, how));
        assert_refused(&out, "staging_verification_failed", &what);
        assert_unpublished(&fx, &standard_target(), &what);
    }
    fx.finish();
}

/// Under `verification.digest: xxh3_128` both digests of a chunk change
/// algorithm (ClickHouse's of the source rows, dpone's of the staging
/// read-back): a changed staging row is still refused.
#[test]
fn a_staging_row_changed_after_its_load_is_refused_under_the_xxh3_128_digest() {
    let fx = standard_fixture("guard_chpg_xxh3");
    fx.write_manifest(&Options { chunk_interval: "P3D", digest: Some("xxh3_128"), ..Options::default() });
    let what = "a staging row changed at staging.after_ack (xxh3_128)";
    let out = tampered_run(&fx, "staging.after_ack", || loaded_staging(&fx), |staging| tamper(&fx, &staging, "change"));
    assert_refused(&out, "staging_verification_failed", what);
    assert_unpublished(&fx, &standard_target(), what);
    fx.finish();
}

#[test]
fn a_generation_tampered_after_its_build_is_refused() {
    let fx = standard_fixture("guard_chpg_gen");
    one_chunk(&fx, None);
    for how in ["insert", "delete", "change", "exchange"] {
        let what = format!("a generation row {how} at generation.after_build");
        let out = tampered_run(
            &fx,
            "generation.after_build",
            || generation_built(&fx),
            |_| {
                // The generation is a view over the staging table: its rows are the staging's.
                let staging = fx.owned_tables().into_iter().find(|t| t.starts_with("_dpone_stg_")).expect("a staging table");
                tamper(&fx, &staging, how)
            },
        );
        let doc = assert_refused(&out, "generation_verification_failed", &what);
        if how == "change" || how == "exchange" {
            // The view's row count is unchanged: only the publishing
            // transaction's fingerprint of what it inserts sees the change.
            assert_first_error_says(&doc, "verified staging", &what);
        }
        assert_unpublished(&fx, &standard_target(), &what);
    }
    fx.finish();
}

#[test]
fn a_partition_swap_generation_tampered_after_its_build_is_refused() {
    let fx = standard_fixture_on(swap_setup("guard_chpg_swap"));
    one_chunk(&fx, Some("partition_swap"));
    let what = "a row of the swap's generation table changed at generation.after_build";
    let out = tampered_run(&fx, "generation.after_build", || generation_built(&fx), |generation| tamper(&fx, &generation, "change"));
    assert_refused(&out, "generation_verification_failed", what);
    assert_unpublished(&fx, &standard_target(), what);
    fx.finish();
}

/// The standard target with its kept row 100 renamed.
fn with_row_100_renamed() -> Vec<Row> {
    standard_target().into_iter().map(|r| if r[0] == ch_postgres_common::int(100) { with(r, NAME, text("changed")) } else { r }).collect()
}

/// A one-chunk run paused at `point` (once `ready` finds the run there)
/// while another writer renames kept row 100: refused with
/// `kept_rows_changed`, nothing published; the first error says `says`,
/// if given.
fn assert_kept_row_change_refused(prefix: &'static str, point: &str, ready: impl Fn(&Fixture) -> bool, says: Option<&str>) {
    let fx = standard_fixture(prefix);
    one_chunk(&fx, None);
    let what = format!("a kept row changed at {point}");
    let out = tampered_run(
        &fx,
        point,
        || ready(&fx).then_some(()),
        |_| fx.pg_exec(&format!("UPDATE {} SET name = 'changed' WHERE id = 100", fx.target_sql())),
    );
    let doc = assert_refused(&out, "kept_rows_changed", &what);
    if let Some(says) = says {
        assert_first_error_says(&doc, says, &what);
    }
    assert_unpublished(&fx, &with_row_100_renamed(), &what);
    fx.finish();
}

#[test]
fn a_kept_row_changed_after_the_build_is_refused() {
    // Compared by the publishing transaction, which rolls back.
    assert_kept_row_change_refused("guard_chpg_kept", "generation.after_build", |fx| generation_built(fx).is_some(), Some("rolled back"));
}

#[test]
fn a_kept_row_changed_after_the_intent_is_refused_by_the_publishing_transaction() {
    // The intent is recorded: only the publishing transaction can see the
    // change now.
    let publishing = |fx: &Fixture| state_of(&fx.status()) == "publishing";
    assert_kept_row_change_refused("guard_chpg_kept_tx", "publish.before_exchange", publishing, Some("rolled back"));
}

/// A one-chunk run of a fixture to whose target `triggers` adds triggers:
/// refused with `code`, its first error saying `says`, nothing published.
fn assert_refused_under_triggers(prefix: &'static str, triggers: impl FnOnce(&Fixture), code: &str, says: &str, what: &str) {
    let fx = standard_fixture(prefix);
    one_chunk(&fx, None);
    triggers(&fx);
    let out = wait(spawn_run(&fx, &[]), LIMIT);
    let doc = assert_refused(&out, code, what);
    assert_first_error_says(&doc, says, what);
    assert_unpublished(&fx, &standard_target(), what);
    fx.finish();
}

#[test]
fn a_row_a_trigger_adds_to_the_window_fails_the_publication_verification() {
    // A statement trigger of the target adds a row to the window whenever
    // dpone's publishing session inserts: the window then holds more than
    // the generation, inside the publishing transaction.
    let add_one = |fx: &Fixture| {
        let extra = ch_postgres_common::pg_literal(&V::Int(999), "bigint");
        let insert = format!("INSERT INTO {} (id, ts) VALUES ({extra}, '2026-09-07 12:00:00+00');", fx.target_sql());
        target_trigger(fx, "add_one", "AFTER INSERT", "STATEMENT", &insert);
    };
    let what = "a trigger adding a window row during the publication";
    assert_refused_under_triggers(
        "guard_chpg_trigger",
        add_one,
        "publication_verification_failed",
        &format!("holds {}", window_rows() + 1),
        what,
    );
}

/// Creates `body` as a trigger function of the fixture's schema and a
/// trigger of the target on `event` (e.g. `BEFORE INSERT`), for each
/// `level` (`ROW`, `STATEMENT`); the function acts only in dpone's
/// publishing session.
fn target_trigger(fx: &Fixture, name: &str, event: &str, level: &str, body: &str) {
    fx.pg_exec(&format!(
        "CREATE FUNCTION {s}.{name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
           IF current_setting('application_name') = 'dpone publish' AND pg_trigger_depth() = 1 THEN {body} END IF; \
           IF TG_LEVEL = 'ROW' THEN RETURN NEW; END IF; RETURN NULL; END $$; \
         CREATE TRIGGER {name} {event} ON {t} FOR EACH {level} EXECUTE FUNCTION {s}.{name}();",
        s = ch_postgres_common::ident(&fx.schema),
        t = fx.target_sql()
    ));
}

#[test]
fn a_row_a_trigger_changes_as_it_is_inserted_fails_the_generation_verification() {
    let change_one = |fx: &Fixture| {
        target_trigger(fx, "change_one", "BEFORE INSERT", "ROW", "IF NEW.id = 6 THEN NEW.name := 'changed'; END IF;");
    };
    let what = "a row trigger changing an inserted row during the publication";
    assert_refused_under_triggers("guard_chpg_rowtrig", change_one, "generation_verification_failed", "verified staging", what);
}

#[test]
fn a_staging_row_a_trigger_changes_inside_the_publishing_transaction_is_refused() {
    // Before the window's DELETE, i.e. after the generation of a target
    // without code of its own would have been fingerprinted: the INSERT
    // reads the transaction's own change of the staging table.
    let tamper_staging = |fx: &Fixture| {
        let body = format!(
            "DECLARE r record; BEGIN FOR r IN SELECT format('%I.%I', schemaname, tablename) AS t FROM pg_tables \
               WHERE schemaname = {schema} AND starts_with(tablename, '_dpone_stg_') LOOP \
               EXECUTE format('UPDATE %s SET name = ''tampered'' WHERE id = 6', r.t); END LOOP; END;",
            schema = ch_postgres_common::pg_literal(&V::Str(fx.schema.clone()), "text")
        );
        target_trigger(fx, "tamper_staging", "BEFORE DELETE OR TRUNCATE", "STATEMENT", &body);
    };
    let what = "a statement trigger changing a staging row inside the publishing transaction";
    assert_refused_under_triggers("guard_chpg_txtamper", tamper_staging, "generation_verification_failed", "verified staging", what);
}
