//! The `mvcc` authority of changed-window delivery on a real PostgreSQL:
//! a chunk's fingerprint stays equal while nothing of it changes and moves
//! on every insert, update and delete in it (docs/changed-delivery.md).

use dpone_core::delivery::Fingerprint;
use dpone_core::manifest::TableRef;
use dpone_core::ports::Source;
use dpone_postgres::PostgresSource;
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
        self.source.open_snapshot().await.unwrap();
        let f = self.source.chunk_fingerprints("ts", &days(5)).await.unwrap().expect("PostgreSQL has an authority");
        self.source.close_snapshot().await.unwrap();
        assert_eq!(f.authority, "postgres.mvcc.v1");
        f.chunks
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
    let before = f.source.chunk_fingerprints("ts", &days(5)).await.unwrap().unwrap();
    // A change committed after the snapshot was taken is not seen by it.
    f.exec("DELETE FROM {t} WHERE id = 24").await;
    let again = f.source.chunk_fingerprints("ts", &days(5)).await.unwrap().unwrap();
    f.source.close_snapshot().await.unwrap();
    assert_eq!(before, again);
    assert_ne!(f.fingerprints().await[0], before.chunks[0]);
    f.cleanup().await;
}
