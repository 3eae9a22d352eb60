//! The `mvcc` authority of changed-window delivery on a real PostgreSQL:
//! a chunk's fingerprint stays equal while nothing of it changes and moves
//! on every insert, update and delete in it (docs/changed-delivery.md).

use dpone_core::delivery::{ChunkFingerprints, Expected, Fingerprint, SourcePass};
use dpone_core::manifest::TableRef;
use dpone_core::ports::Source;
use dpone_core::window::Chunk;
use dpone_postgres::PostgresSource;
use dpone_postgres::delivery::{Blocks, fingerprint_sql, fingerprints};
use dpone_postgres::source::quote_ident;
use dpone_testkit::delivery::{changed, days};
use std::str::FromStr;

struct Fixture {
    client: tokio_postgres::Client,
    schema: String,
    source: PostgresSource,
}

impl Fixture {
    async fn new() -> Fixture {
        let url = dpone_testkit::postgres_url();
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("the PostgreSQL test server");
        tokio::spawn(connection);
        let schema = dpone_testkit::unique_name("dpone_fp");
        // Five days of 24 hourly rows, and rows outside the window on both sides.
        let sql = format!(
            "CREATE SCHEMA {s}; CREATE TABLE {s}.events (id bigint, ts timestamptz, v text);
             INSERT INTO {s}.events SELECT g, '2026-09-01 00:00:00+00'::timestamptz + (g - 24) * interval '1 hour', 'v' || g
             FROM generate_series(0, 24 * 7) g;",
            s = quote_ident(&schema)
        );
        client.batch_execute(&sql).await.unwrap();
        let config = tokio_postgres::Config::from_str(&url).unwrap();
        let source = PostgresSource::new(config, TableRef { schema: Some(schema.clone()), name: "events".into() });
        Fixture { client, schema, source }
    }

    async fn exec(&self, sql: &str) {
        self.client.batch_execute(&sql.replace("{t}", &format!("{}.events", quote_ident(&self.schema)))).await.unwrap();
    }

    /// The fingerprints of the five days, in a snapshot of their own.
    async fn fingerprints(&self) -> Vec<Fingerprint> {
        self.pass(None).await.chunks
    }

    /// The five days' fingerprints with their pass, `expected` as a run
    /// passes its records', in a snapshot of their own.
    async fn pass(&self, expected: Option<&Expected>) -> ChunkFingerprints {
        self.source.open_snapshot().await.unwrap();
        let f = self.source.chunk_fingerprints("ts", &days(5), expected).await.unwrap().expect("PostgreSQL has an authority");
        self.source.close_snapshot().await.unwrap();
        assert_eq!(f.authority, "postgres.mvcc.v3");
        f
    }

    /// Makes the statistics count this connection's writes before the
    /// statement answers (they are otherwise sent up to a second later).
    async fn flush_statistics(&self) {
        self.client.batch_execute("SELECT pg_stat_force_next_flush()").await.unwrap();
    }

    /// The fingerprints of `chunks` read by the test's own connection with
    /// the query of `version`, split into the heap block ranges `parts`,
    /// after the session statements `settings`.
    async fn direct(&self, chunks: &[Chunk], version: i32, parts: &[Option<Blocks>], settings: &str) -> Vec<Fingerprint> {
        let table = format!("{}.events", quote_ident(&self.schema));
        self.client.batch_execute(&format!("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; {settings}")).await.unwrap();
        let mut rows = Vec::new();
        for part in parts {
            let sql = fingerprint_sql(&table, "ts", chunks, version, *part).unwrap();
            let got = self.client.query(&sql, &[]).await.unwrap();
            rows.extend(got.iter().map(|r| (r.get::<_, i32>(0), r.get::<_, i64>(1), r.get::<_, String>(2))));
        }
        self.client.batch_execute("COMMIT").await.unwrap();
        fingerprints(chunks, &rows).unwrap().chunks
    }

    async fn cleanup(self) {
        self.client.batch_execute(&format!("DROP SCHEMA {} CASCADE", quote_ident(&self.schema))).await.unwrap();
    }
}

/// The days whose fingerprints differ.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_fingerprint_moves_on_every_change_of_the_chunk_and_only_then() {
    let f = Fixture::new().await;
    let first = f.fingerprints().await;
    assert!(first.iter().all(|c| c.rows == 24), "{first:?}");
    // Nothing changed: a replay sees the same fingerprints.
    assert_eq!(f.fingerprints().await, first);
    // A rolled back change and a change outside the window change nothing.
    f.exec("BEGIN; DELETE FROM {t} WHERE id = 30; ROLLBACK; UPDATE {t} SET v = 'x' WHERE id IN (0, 160)").await;
    assert_eq!(f.fingerprints().await, first);

    // A correction in day 1, a delete in day 3, a late row in day 4.
    f.exec("UPDATE {t} SET v = 'corrected' WHERE id = 24 + 24 + 5").await;
    f.exec("DELETE FROM {t} WHERE id = 24 + 3 * 24 + 7").await;
    f.exec("INSERT INTO {t} VALUES (1000, '2026-09-05 12:30:00+00', 'late')").await;
    let second = f.fingerprints().await;
    assert_eq!(changed(&first, &second), vec![1, 3, 4]);
    assert_eq!(second.iter().map(|c| c.rows).collect::<Vec<_>>(), vec![24, 24, 24, 23, 25]);

    // An update that writes the same values, and a delete and an insert
    // that keep the count, still move the fingerprint: a new row version.
    f.exec("UPDATE {t} SET v = v WHERE id = 24 + 2 * 24").await;
    f.exec("BEGIN; DELETE FROM {t} WHERE id = 24; INSERT INTO {t} VALUES (24, '2026-09-01 00:00:00+00', 'v24'); COMMIT").await;
    let third = f.fingerprints().await;
    assert_eq!(changed(&second, &third), vec![0, 2]);
    assert_eq!(third[0].rows, 24);

    // A row at a chunk's end bound belongs to the next chunk only.
    f.exec("INSERT INTO {t} VALUES (2000, '2026-09-03 00:00:00+00', 'edge')").await;
    assert_eq!(changed(&third, &f.fingerprints().await), vec![2]);
    f.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fingerprints_are_read_in_the_runs_snapshot() {
    let f = Fixture::new().await;
    f.source.open_snapshot().await.unwrap();
    let before = f.source.chunk_fingerprints("ts", &days(5), None).await.unwrap().unwrap();
    // A change committed after the snapshot was taken is not seen by it.
    f.exec("DELETE FROM {t} WHERE id = 24").await;
    let again = f.source.chunk_fingerprints("ts", &days(5), None).await.unwrap().unwrap();
    f.source.close_snapshot().await.unwrap();
    assert_eq!(before, again);
    assert_ne!(f.fingerprints().await[0], before.chunks[0]);
    f.cleanup().await;
}

/// What the cheaper query must not depend on: the transaction that reads
/// it (its reference xid moves between runs), freezing, the plan (forced
/// parallel, no `date_bin` before PostgreSQL 14), the split into block
/// ranges, and chunks of unequal length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_digest_depends_on_the_row_versions_only() {
    let f = Fixture::new().await;
    // More row versions, over many pages and many transactions.
    for k in 0..4 {
        f.exec(&format!("INSERT INTO {{t}} SELECT 10000 + g, '2026-09-01 00:00:00+00'::timestamptz + (g * 97 % 432000) * interval '1 second', repeat('p', 200) FROM generate_series({}, 1999, 4) g", k)).await;
    }
    let first = f.fingerprints().await;
    assert_eq!(first.iter().map(|c| c.rows).sum::<u64>(), 5 * 24 + 2000);

    // Transaction ids consumed elsewhere move age()'s reference, not the digest.
    for _ in 0..5 {
        f.exec("CREATE TEMP TABLE burn (x int); DROP TABLE burn").await;
    }
    assert_eq!(f.fingerprints().await, first);
    // Freezing keeps xmin (PostgreSQL 9.4+ marks it frozen in the infomask).
    f.exec("VACUUM (FREEZE) {t}").await;
    assert_eq!(f.fingerprints().await, first);

    // The queries below read the row versions only (no scope).
    let first: Vec<Fingerprint> = first.iter().map(|c| Fingerprint::new(c.rows, c.digest.clone())).collect();
    let days = days(5);
    let whole = [None];
    assert_eq!(f.direct(&days, 150000, &whole, "").await, first);
    // width_bucket instead of date_bin (servers before 14) reads the same.
    assert_eq!(f.direct(&days, 130000, &whole, "").await, first);
    // A plan forced parallel: age() stays in the leader (parallel restricted).
    let parallel = "SET LOCAL parallel_setup_cost = 0; SET LOCAL parallel_tuple_cost = 0; \
                    SET LOCAL min_parallel_table_scan_size = 0; SET LOCAL force_parallel_mode = on";
    assert_eq!(f.direct(&days, 150000, &whole, parallel).await, first);
    // Block ranges that cover the heap add up to the whole, however split.
    let split = [Some(Blocks { start: 0, end: Some(3) }), Some(Blocks { start: 3, end: Some(4) }), Some(Blocks { start: 4, end: None })];
    assert_eq!(f.direct(&days, 150000, &split, "").await, first);

    // Chunks of unequal length (width_bucket over their bounds): each is the sum of its days.
    let uneven = [
        Chunk { index: 0, start: days[0].start, end: days[0].end },
        Chunk { index: 1, start: days[1].start, end: days[3].end },
        Chunk { index: 2, start: days[4].start, end: days[4].end },
    ];
    let merged = f.direct(&uneven, 150000, &whole, "").await;
    let add = |a: &Fingerprint, b: &Fingerprint, c: &Fingerprint| {
        let d = |x: &Fingerprint| x.digest.parse::<i128>().unwrap();
        Fingerprint::new(a.rows + b.rows + c.rows, (d(a) + d(b) + d(c)).to_string())
    };
    assert_eq!(merged[0], first[0]);
    assert_eq!(merged[1], add(&first[1], &first[2], &first[3]));
    assert_eq!(merged[2], first[4]);

    // The source itself split into parts of 2 blocks (the server allows
    // max_parallel_workers_per_gather + 1 parts), read on connections that
    // imported the run's snapshot: the same fingerprints, and a change
    // committed after the snapshot is seen by none of them.
    let config = tokio_postgres::Config::from_str(&dpone_testkit::postgres_url()).unwrap();
    let table = TableRef { schema: Some(f.schema.clone()), name: "events".into() };
    let split_source = PostgresSource::new(config, table).with_fingerprint_part_blocks(2).with_legacy_authority(true);
    split_source.open_snapshot().await.unwrap();
    assert_eq!(split_source.chunk_fingerprints("ts", &days, None).await.unwrap().unwrap().chunks, first);
    f.exec("DELETE FROM {t} WHERE id = 10000 + 1998").await;
    assert_eq!(split_source.chunk_fingerprints("ts", &days, None).await.unwrap().unwrap().chunks, first);
    split_source.close_snapshot().await.unwrap();
    let first: Vec<Fingerprint> = f.fingerprints().await.into_iter().map(|c| Fingerprint::new(c.rows, c.digest)).collect();

    // And the split still moves with a change in any part.
    f.exec("UPDATE {t} SET v = v WHERE id = 10000 + 1999").await;
    let moved = f.direct(&days, 150000, &split, "").await;
    assert_eq!(changed(&first, &moved).len(), 1);
    f.cleanup().await;
}

/// Records of one pass are proven for the whole window by one ungrouped
/// read when the statistics count no write since; a change the statistics
/// have not counted (here: a pass whose count is made to agree) fails the
/// proof and every chunk is computed: a delete (one row fewer), a
/// correction and a row moved between days (rows of newer transactions,
/// the count unchanged). Records of a pass over other relations are never
/// proven.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_of_one_pass_is_proven_whole_until_any_of_its_rows_changes() {
    let f = Fixture::new().await;
    f.flush_statistics().await;
    let first = f.pass(None).await;
    assert!(!first.by_window);
    let pass = first.pass.clone().expect("PostgreSQL names its pass");
    assert!(pass.writes.as_deref().is_some_and(|w| w.ends_with(&format!(":{}", 24 * 7 + 1))), "{pass:?}");
    let expected = Expected { pass: pass.clone(), chunks: first.chunks.clone() };
    assert!(pass.relations.as_deref().is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit())), "{pass:?}");
    let again = f.pass(Some(&expected)).await;
    assert!(again.by_window, "no write since the pass: proven as a whole");
    assert_eq!((again.chunks, again.pass.as_ref().map(|p| &p.writes)), (first.chunks.clone(), Some(&pass.writes)));
    // Records of a pass over other relations (the table replaced by
    // another one with rows of the same transactions) prove nothing.
    let elsewhere = Expected { pass: SourcePass { relations: Some("1".into()), ..pass.clone() }, chunks: first.chunks.clone() };
    assert!(!f.pass(Some(&elsewhere)).await.by_window);

    // A delete in day 2 that the statistics have not counted: no row of
    // a newer transaction, one row fewer.
    f.exec("DELETE FROM {t} WHERE id = 24 + 2 * 24 + 1").await;
    f.flush_statistics().await;
    let deleted = f.pass(None).await;
    assert_eq!(changed(&first.chunks, &deleted.chunks), vec![2]);
    let stale =
        Expected { pass: SourcePass { writes: deleted.pass.clone().unwrap().writes, ..pass.clone() }, chunks: first.chunks.clone() };
    let refused = f.pass(Some(&stale)).await;
    assert!(!refused.by_window, "a row deleted: never proven");
    assert_eq!(refused.chunks, deleted.chunks);

    // Since the pass after the delete: a correction in day 1, and a row
    // moved from day 3 to day 0 (the window's count unchanged).
    let before = deleted.pass.clone().unwrap();
    f.exec("UPDATE {t} SET v = 'corrected' WHERE id = 24 + 24 + 5").await;
    f.exec("BEGIN; DELETE FROM {t} WHERE id = 24 + 3 * 24 + 7; INSERT INTO {t} VALUES (3000, '2026-09-01 05:00:00+00', 'moved'); COMMIT")
        .await;
    f.flush_statistics().await;
    let now = f.pass(None).await;
    assert_eq!(changed(&deleted.chunks, &now.chunks), vec![0, 1, 3]);
    let expected = Expected { pass: before.clone(), chunks: deleted.chunks.clone() };
    // Counted by the statistics: the proof is not even tried.
    let counted = f.pass(Some(&expected)).await;
    assert!(!counted.by_window);
    assert_eq!(counted.chunks, now.chunks);
    // Not counted (stale or reset statistics): the proof fails on the rows
    // of newer transactions.
    let stale = Expected { pass: SourcePass { writes: now.pass.clone().unwrap().writes, ..before }, chunks: deleted.chunks.clone() };
    let refused = f.pass(Some(&stale)).await;
    assert!(!refused.by_window, "the window's rows changed: never proven");
    assert_eq!(refused.chunks, now.chunks);
    f.cleanup().await;
}

/// The fingerprints of the five days of `source`, in a snapshot of its own.
async fn fingerprints_of(source: &PostgresSource) -> Vec<Fingerprint> {
    source.open_snapshot().await.unwrap();
    let f = source.chunk_fingerprints("ts", &days(5), None).await.unwrap().expect("PostgreSQL has an authority");
    source.close_snapshot().await.unwrap();
    f.chunks
}

/// Issue 43: edits of the catalog that write no row version change what
/// the same row versions read as. Each makes every chunk's fingerprint
/// differ (its scope), and the legacy authority (without the scope, the
/// test switch) sees none of them: the scope is what detects them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_edits_that_write_no_row_version_change_every_fingerprint() {
    let f = Fixture::new().await;
    let config = tokio_postgres::Config::from_str(&dpone_testkit::postgres_url()).unwrap();
    let table = TableRef { schema: Some(f.schema.clone()), name: "events".into() };
    let legacy = PostgresSource::new(config, table).with_legacy_authority(true);
    f.exec("ALTER TABLE {t} ADD COLUMN d numeric(12,2), ADD COLUMN e numeric(12,2); UPDATE {t} SET d = id, e = -id").await;
    let edits = [
        ("a column dropped and added again", "ALTER TABLE {t} DROP COLUMN d; ALTER TABLE {t} ADD COLUMN d numeric(12,2)"),
        ("... with a default", "ALTER TABLE {t} DROP COLUMN d; ALTER TABLE {t} ADD COLUMN d numeric(12,2) DEFAULT 7.25"),
        (
            "two columns of one type swapped by renames",
            "ALTER TABLE {t} RENAME COLUMN d TO x; ALTER TABLE {t} RENAME COLUMN e TO d; ALTER TABLE {t} RENAME COLUMN x TO e",
        ),
        ("a default for rows to come", "ALTER TABLE {t} ALTER COLUMN e SET DEFAULT 1"),
        ("a row security policy", "ALTER TABLE {t} ENABLE ROW LEVEL SECURITY; CREATE POLICY p ON {t} USING (id % 2 = 0)"),
    ];
    for (what, sql) in edits {
        let (before, before_legacy) = (f.fingerprints().await, fingerprints_of(&legacy).await);
        assert!(before.iter().all(|c| c.scope.is_some()) && before_legacy.iter().all(|c| c.scope.is_none()));
        f.exec(sql).await;
        let (after, after_legacy) = (f.fingerprints().await, fingerprints_of(&legacy).await);
        assert_eq!(changed(&before, &after), vec![0, 1, 2, 3, 4], "{what}: every chunk reads differently");
        assert_eq!(
            after.iter().map(|c| (c.rows, &c.digest)).collect::<Vec<_>>(),
            before.iter().map(|c| (c.rows, &c.digest)).collect::<Vec<_>>(),
            "{what}: the row versions are the same"
        );
        assert_eq!(after_legacy, before_legacy, "{what}: the row versions alone do not see it");
    }
    f.cleanup().await;
}

/// Issue 43: a table replaced by a copy written in the same transaction
/// (the same `xmin` in every chunk, one value different) is another
/// relation: its scope differs, although its row versions sum the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_replaced_by_a_copy_of_the_same_transaction_is_another_scope() {
    let f = Fixture::new().await;
    let config = tokio_postgres::Config::from_str(&dpone_testkit::postgres_url()).unwrap();
    let legacy =
        PostgresSource::new(config, TableRef { schema: Some(f.schema.clone()), name: "events".into() }).with_legacy_authority(true);
    let s = quote_ident(&f.schema);
    // Both tables written by one transaction.
    f.exec(&format!(
        "DROP TABLE {{t}}; BEGIN; CREATE TABLE {{t}} (id bigint, ts timestamptz, v text); CREATE TABLE {s}.copy (LIKE {{t}});
         INSERT INTO {{t}} SELECT g, '2026-09-01 00:00:00+00'::timestamptz + g * interval '1 hour', 'v' || g FROM generate_series(0, 119) g;
         INSERT INTO {s}.copy SELECT id, ts, CASE WHEN id = 50 THEN 'different' ELSE v END FROM {{t}}; COMMIT"
    ))
    .await;
    let (before, before_legacy) = (f.fingerprints().await, fingerprints_of(&legacy).await);
    f.exec(&format!("BEGIN; DROP TABLE {{t}}; ALTER TABLE {s}.copy RENAME TO events; COMMIT")).await;
    let (after, after_legacy) = (f.fingerprints().await, fingerprints_of(&legacy).await);
    assert_eq!(after_legacy, before_legacy, "the same xmin in the same numbers per chunk");
    assert_eq!(changed(&before, &after), vec![0, 1, 2, 3, 4], "another relation");
    f.cleanup().await;
}

/// Issue 43: a view has no row versions. Its fingerprints are refused
/// (`fingerprint_unsupported`) before any query could abort the snapshot
/// keeper's transaction: the snapshot stays usable for the chunk reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_is_refused_without_touching_the_snapshot() {
    let f = Fixture::new().await;
    f.exec(&format!("CREATE VIEW {}.v AS SELECT * FROM {{t}}", quote_ident(&f.schema))).await;
    let config = tokio_postgres::Config::from_str(&dpone_testkit::postgres_url()).unwrap();
    let view = PostgresSource::new(config, TableRef { schema: Some(f.schema.clone()), name: "v".into() });
    view.describe(None).await.unwrap();
    view.open_snapshot().await.unwrap();
    let err = view.chunk_fingerprints("ts", &days(5), None).await.unwrap_err();
    assert_eq!(err.code, "fingerprint_unsupported", "{err:?}");
    assert!(err.message.contains("is a view") && err.message.contains("transferred"), "{}", err.message);
    // The keeper's transaction is intact: the snapshot still reads.
    assert_eq!(
        view.cursor_max("id", dpone_core::incremental::CursorKind::Integer).await.unwrap().map(|v| v.to_string()),
        Some("168".into())
    );
    view.close_snapshot().await.unwrap();
    f.cleanup().await;
}
