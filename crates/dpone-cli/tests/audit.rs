//! `dpone audit` on PostgreSQL 15 and ClickHouse 26.x, both routes
//! (docs/audit.md).
//!
//! - A 3M-row window created directly on both servers with identical
//!   values (`generate_series`, `numbers()`): equal, then a value changed
//!   on one side, on the other, a row deleted and a row duplicated. The
//!   same two tables serve both routes (a change in ClickHouse is a target
//!   change for postgres -> clickhouse and a source change for clickhouse
//!   -> postgres), so each scenario is audited in both directions.
//! - A type without a canonical form on either side is refused (exit 2)
//!   naming the column; a route without content digests too.
//! - The canonical encoding proven across servers over every type of both
//!   routes' type matrices with edge values (`audit_common/encoding.rs`).

mod audit_common;
mod harness;
#[allow(unused_imports)]
mod pg_clickhouse_common;

use audit_common::{Route, Servers, differences, encoding};

/// Rows of the window: 100,000 a day for 30 days, 864 ms apart.
const ROWS: u64 = 3_000_000;

/// The same 3M rows on both servers: `id`, `ts`, `v`, `s` (an MD5 text),
/// `amount` (Decimal(18, 4)), `n` (NULL every seventh row).
fn seed(s: &Servers) {
    s.pg_exec(&format!(
        "CREATE TABLE {n}.t (id bigint NOT NULL, ts timestamptz NOT NULL, v bigint NOT NULL, s text NOT NULL, amount numeric(18,4) NOT NULL, n integer);
         INSERT INTO {n}.t SELECT g, timestamptz '2026-08-10 00:00:00+00' + ((g - 1) * 864000) * interval '1 microsecond',
           (g * 7919) % 1000000007, md5(g::text), (((g * 37) % 1000000)::numeric / 10000)::numeric(18,4),
           CASE WHEN g % 7 = 0 THEN NULL ELSE (g % 1000)::int END
         FROM generate_series(1::bigint, {ROWS}) g;
         ANALYZE {n}.t",
        n = s.name
    ));
    s.ch_exec(&format!(
        "CREATE TABLE {}.t (id Int64, ts DateTime64(6, 'UTC'), v Int64, s String, amount Decimal(18, 4), n Nullable(Int32)) ENGINE = MergeTree ORDER BY id",
        s.name
    ));
    s.ch_exec(&format!(
        "INSERT INTO {}.t SELECT g, addMicroseconds(toDateTime64('2026-08-10 00:00:00', 6, 'UTC'), (g - 1) * 864000), (g * 7919) % 1000000007,
           lower(hex(MD5(toString(g)))),
           toDecimal64(concat(toString(intDiv((g * 37) % 1000000, 10000)), '.', leftPad(toString((g * 37) % 10000), 4, '0')), 4),
           if(g % 7 = 0, NULL, toInt32(g % 1000))
         FROM (SELECT number + 1 AS g FROM numbers({ROWS}))",
        s.name
    ));
}

/// The chunk (day of the window) of row `id`.
fn chunk_of(id: u64) -> u64 {
    (id - 1) / 100_000
}

fn assert_equal(s: &Servers, what: &str) {
    for route in [Route::PgToCh, Route::ChToPg] {
        let (run, doc) = s.audit(route, &[]);
        assert_eq!(run.code, Some(0), "{what}, {route:?}: expected exit 0\n{}", run.describe());
        assert_eq!(doc["status"], "equal", "{what}, {route:?}");
        assert_eq!(doc["route"], route.name());
        assert_eq!((doc["totals"]["source_rows"].as_u64(), doc["totals"]["target_rows"].as_u64()), (Some(ROWS), Some(ROWS)), "{what}");
        assert_eq!(doc["chunks"].as_array().map(Vec::len), Some(30), "{what}");
    }
}

/// Audits both routes with the key `id`: exit 1, and exactly `want` as
/// `(chunk, side, key, count)` for postgres -> clickhouse (sides swapped
/// for clickhouse -> postgres).
fn assert_found(s: &Servers, want: &[(u64, &str, &str, u64)], what: &str) {
    for route in [Route::PgToCh, Route::ChToPg] {
        let (run, doc) = s.audit(route, &["--key", "id"]);
        assert_eq!(run.code, Some(1), "{what}, {route:?}: expected exit 1\n{}", run.describe());
        assert_eq!(doc["status"], "different", "{what}, {route:?}");
        let swap = |side: &str| -> String {
            match (route, side) {
                (Route::ChToPg, "source_only") => "target_only".into(),
                (Route::ChToPg, "target_only") => "source_only".into(),
                (_, side) => side.into(),
            }
        };
        let mut expected: Vec<(u64, String, String, u64)> = want.iter().map(|(c, sd, k, n)| (*c, swap(sd), k.to_string(), *n)).collect();
        expected.sort();
        assert_eq!(differences(&doc), expected, "{what}, {route:?}:\n{}", run.describe());
        assert!(
            doc["incomplete"].as_array().is_some_and(Vec::is_empty),
            "{what}, {route:?}: every differing row found: {}",
            doc["incomplete"]
        );
        assert!(doc["differences"][0]["row"]["values"].as_array().is_some_and(Vec::is_empty), "values only with --show-values");
    }
}

#[test]
fn a_3m_row_window_is_equal_then_each_change_is_found_on_both_routes() {
    let s = Servers::new("audit_3m");
    seed(&s);
    assert_equal(&s, "identical rows");

    // One value changed in ClickHouse (the target of postgres -> clickhouse).
    s.ch_exec_with(&format!("ALTER TABLE {}.t UPDATE s = 'changed' WHERE id = 1234567", s.name), &[("mutations_sync", "2")]);
    assert_found(
        &s,
        &[(chunk_of(1234567), "source_only", "1234567", 1), (chunk_of(1234567), "target_only", "1234567", 1)],
        "a value changed in ClickHouse",
    );
    s.ch_exec_with(
        &format!("ALTER TABLE {}.t UPDATE s = lower(hex(MD5(toString(id)))) WHERE id = 1234567", s.name),
        &[("mutations_sync", "2")],
    );

    // One value changed in PostgreSQL (the source of postgres -> clickhouse).
    s.pg_exec(&format!("UPDATE {}.t SET amount = amount + 0.0001 WHERE id = 2222222", s.name));
    assert_found(
        &s,
        &[(chunk_of(2222222), "source_only", "2222222", 1), (chunk_of(2222222), "target_only", "2222222", 1)],
        "a value changed in PostgreSQL",
    );
    s.pg_exec(&format!("UPDATE {}.t SET amount = amount - 0.0001 WHERE id = 2222222", s.name));
    assert_equal(&s, "the changes undone");

    // A row deleted from ClickHouse and another one duplicated there.
    s.ch_exec_with(&format!("DELETE FROM {}.t WHERE id = 77", s.name), &[("lightweight_deletes_sync", "2")]);
    s.ch_exec(&format!("INSERT INTO {n}.t SELECT * FROM {n}.t WHERE id = 2999999", n = s.name));
    assert_found(
        &s,
        &[(0, "source_only", "77", 1), (chunk_of(2999999), "target_only", "2999999", 1)],
        "a row deleted and a row duplicated",
    );
    s.finish();
}

#[test]
fn rows_sharing_one_instant_are_told_apart_by_the_key_hash_or_reported_incomplete() {
    let s = Servers::new("audit_instant");
    s.pg_exec(&format!(
        "CREATE TABLE {n}.t (id bigint NOT NULL, ts timestamptz NOT NULL, s text);
         INSERT INTO {n}.t SELECT g, timestamptz '2026-09-01 12:00:00.123456+00', 'same ' || g FROM generate_series(1, 101000) g",
        n = s.name
    ));
    s.ch_exec(&format!("CREATE TABLE {}.t (id Int64, ts DateTime64(6, 'UTC'), s Nullable(String)) ENGINE = MergeTree ORDER BY id", s.name));
    s.ch_exec(&format!(
        "INSERT INTO {}.t SELECT g, toDateTime64('2026-09-01 12:00:00.123456', 6, 'UTC'), concat('same ', toString(g)) FROM (SELECT number + 1 AS g FROM numbers(101000))",
        s.name
    ));
    s.ch_exec_with(&format!("ALTER TABLE {}.t UPDATE s = NULL WHERE id = 4321", s.name), &[("mutations_sync", "2")]);
    // More rows than a fetch takes (100,000), all at one microsecond: the
    // key's hash splits them (the prefix filters and buckets of both
    // servers' SQL, two levels); without a key the comparison is capped
    // and says so.
    assert_found(&s, &[(22, "source_only", "4321", 1), (22, "target_only", "4321", 1)], "one instant, a key");
    for route in [Route::PgToCh, Route::ChToPg] {
        let (run, doc) = s.audit(route, &[]);
        assert_eq!(run.code, Some(1), "{route:?}\n{}", run.describe());
        let incomplete = doc["incomplete"].as_array().expect("incomplete segments");
        assert_eq!(incomplete.len(), 1, "{route:?}: {doc}");
        assert!(incomplete[0]["reason"].as_str().unwrap_or_default().contains("no key (--key)"), "{route:?}: {}", incomplete[0]);
    }
    s.finish();
}

#[test]
fn a_column_without_a_canonical_form_is_refused_naming_it_on_both_routes() {
    let s = Servers::new("audit_refused");
    s.pg_exec(&format!("CREATE TABLE {}.t (id bigint NOT NULL, ts timestamptz NOT NULL, fine_ns timestamptz)", s.name));
    s.ch_exec(&format!(
        "CREATE TABLE {}.t (id Int64, ts DateTime64(6, 'UTC'), fine_ns Nullable(DateTime64(9, 'UTC'))) ENGINE = MergeTree ORDER BY id",
        s.name
    ));
    for route in [Route::PgToCh, Route::ChToPg] {
        let (run, doc) = s.audit(route, &[]);
        assert_eq!(run.code, Some(2), "{route:?}\n{}", run.describe());
        assert_eq!(doc["status"], "refused", "{route:?}: a type is configuration, not an unreadable server\n{}", run.describe());
        let message = doc["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("`fine_ns`") && message.contains("DateTime64(9, 'UTC')"),
            "{route:?}: names the column and its type: {message}"
        );
        assert!(doc["chunks"].as_array().is_some_and(Vec::is_empty), "nothing compared");
    }
    s.finish();
}

#[test]
fn a_route_without_content_digests_is_refused() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let q = dir.path().join("q");
    let seeded = harness::run(dir.path(), &["quickstart", "--dir", q.to_str().expect("a path"), "--format", "json"], &[]);
    assert_eq!(seeded.code, Some(0), "{}", seeded.describe());
    let m = q.join("manifest.yaml");
    let run = harness::run(
        dir.path(),
        &["audit", m.to_str().expect("a path"), "--interval-end", "2026-09-09T00:00:00Z", "--format", "json"],
        &[],
    );
    assert_eq!(run.code, Some(2), "{}", run.describe());
    let doc = run.json();
    assert_eq!((doc["status"].as_str(), doc["error"]["code"].as_str()), (Some("refused"), Some("audit_unsupported_route")), "{doc}");
}

#[test]
fn both_servers_hash_every_type_of_both_routes_exactly_as_the_reference() {
    for (route, cases) in [(Route::PgToCh, encoding::pg_to_ch()), (Route::ChToPg, encoding::ch_to_pg())] {
        let s = Servers::new("audit_types");
        let rows = encoding::rows(&cases);
        encoding::create(&s, &cases, &rows);
        encoding::check(&s, route, &rows);
        // The audit of the same tables through the command line, as text.
        let m = s.manifest(route).display().to_string();
        let (pg, ch) = (dpone_testkit::postgres_url(), dpone_testkit::clickhouse_url());
        let text = harness::run(
            s.tmp.path(),
            &["audit", &m, "--interval-end", audit_common::INTERVAL_END],
            &[("DPONE_CONN_PG", &pg), ("DPONE_CONN_CH", &ch)],
        );
        assert_eq!(text.code, Some(0), "{route:?}\n{}", text.describe());
        let last = text.stdout.lines().last().unwrap_or_default();
        assert!(last.starts_with(&format!("equal: 0 of 30 chunks differ; {} source rows", rows.len())), "{route:?}: {last}");
        s.finish();
    }
}

/// What the audit cannot compare is exit 2, never `different`: a manifest
/// that is not a windowed replace (`audit_not_windowed`), a target that
/// does not exist (`audit_target_missing`, refused), and a source the
/// audit cannot read in time (its table locked by another session:
/// `audit_query_timeout`, `unavailable`).
#[test]
fn what_cannot_be_compared_is_refused_or_unavailable_never_different() {
    let s = Servers::new("audit_cannot");
    s.pg_exec(&format!(
        "CREATE TABLE {n}.t (id bigint NOT NULL, ts timestamptz NOT NULL);
         INSERT INTO {n}.t SELECT g, timestamptz '2026-08-20 00:00:00+00' + g * interval '1 minute' FROM generate_series(1, 100) g",
        n = s.name
    ));
    let (run, doc) = s.audit(Route::PgToCh, &[]);
    assert_eq!(
        (run.code, doc["status"].as_str(), doc["error"]["code"].as_str()),
        (Some(2), Some("refused"), Some("audit_target_missing")),
        "{}",
        run.describe()
    );

    s.ch_exec(&format!("CREATE TABLE {}.t (id Int64, ts DateTime64(6, 'UTC')) ENGINE = MergeTree ORDER BY id", s.name));
    let m = s.manifest(Route::PgToCh);
    let text = std::fs::read_to_string(&m).expect("the manifest");
    let full = text.replace("mode: replace\n    atomicity: target_atomic\n    window: {column: ts, anchor: data_interval_end, lookback: P30D, chunk_interval: P1D}", "mode: full_refresh");
    assert_ne!(full, text, "the manifest has the window this test removes");
    let full_path = s.tmp.path().join("full_refresh.yaml");
    std::fs::write(&full_path, full).expect("write the manifest");
    let (pg, ch) = (dpone_testkit::postgres_url(), dpone_testkit::clickhouse_url());
    let env = [("DPONE_CONN_PG", pg.as_str()), ("DPONE_CONN_CH", ch.as_str())];
    let args = ["audit", full_path.to_str().expect("a path"), "--interval-end", "2026-09-09T00:00:00Z", "--format", "json"];
    let run = harness::run(s.tmp.path(), &args, &env);
    let doc = run.json();
    assert_eq!(
        (run.code, doc["status"].as_str(), doc["error"]["code"].as_str()),
        (Some(2), Some("refused"), Some("audit_not_windowed")),
        "{}",
        run.describe()
    );

    // Another session holds the source table: the audit's query waits for
    // its lock until the server cancels it at the deadline.
    s.pg_exec(&format!("BEGIN; LOCK TABLE {}.t IN ACCESS EXCLUSIVE MODE", s.name));
    let (run, doc) = s.audit(Route::PgToCh, &["--query-timeout", "2"]);
    s.pg_exec("ROLLBACK");
    assert_eq!(run.code, Some(2), "{}", run.describe());
    assert_eq!(
        (doc["status"].as_str(), doc["error"]["code"].as_str()),
        (Some("unavailable"), Some("audit_query_timeout")),
        "{}",
        run.describe()
    );
    let (run, doc) = s.audit(Route::PgToCh, &[]);
    assert_eq!((run.code, doc["status"].as_str()), (Some(1), Some("different")), "the target is empty: {}", run.describe());
    s.finish();
}
