//! The `parts` authority of changed-window delivery on ClickHouse 26.x: a
//! chunk's fingerprint stays equal while its parts do and moves on every
//! insert, update and delete of its rows (docs/changed-delivery.md).

use dpone_clickhouse::{ChClient, ClickhouseConfig, ClickhouseSource, Idempotence, quote_ident};
use dpone_core::delivery::Fingerprint;
use dpone_core::ports::Source;
use dpone_testkit::delivery::{changed, days};

struct Fixture {
    client: ChClient,
    database: String,
    source: ClickhouseSource,
}

impl Fixture {
    /// Five days of hourly rows, one insert (and one partition) per day, and
    /// a day on each side of the window; merges stopped so that parts stay.
    async fn new() -> Fixture {
        let client = ChClient::new(ClickhouseConfig::from_url(&dpone_testkit::clickhouse_url()).unwrap()).unwrap();
        let database = dpone_testkit::unique_name("dpone_fp");
        let f = Fixture { source: ClickhouseSource::new(client.clone(), database.clone(), "events".into()), client, database };
        f.exec(&format!("CREATE DATABASE {}", quote_ident(&f.database))).await;
        f.exec("CREATE TABLE {t} (id Int64, ts Nullable(DateTime64(6, 'UTC')), v String) ENGINE = MergeTree PARTITION BY toDate(ts) ORDER BY id SETTINGS allow_nullable_key = 1").await;
        f.exec("SYSTEM STOP MERGES {t}").await;
        for day in -1..6 {
            f.exec(&format!(
                "INSERT INTO {{t}} SELECT 1000 * ({day} + 1) + number, toDateTime64('2026-09-01 00:00:00', 6, 'UTC') + toIntervalHour({day} * 24 + number), concat('v', toString(number)) FROM numbers(24)"
            ))
            .await;
        }
        f.exec("INSERT INTO {t} VALUES (99999, NULL, 'no window value')").await;
        f
    }

    async fn exec(&self, sql: &str) {
        let sql = sql.replace("{t}", &format!("{}.events", quote_ident(&self.database)));
        self.client.execute(&sql, Idempotence::Safe).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    async fn fingerprints(&self) -> Vec<Fingerprint> {
        let f = self.source.chunk_fingerprints("ts", &days(5), None).await.unwrap().expect("ClickHouse has an authority");
        assert_eq!(f.authority, "clickhouse.parts.v2");
        f.chunks
    }

    async fn cleanup(self) {
        self.exec(&format!("DROP DATABASE {} SYNC", quote_ident(&self.database))).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_fingerprint_moves_when_its_parts_change() {
    let f = Fixture::new().await;
    let first = f.fingerprints().await;
    assert!(first.iter().all(|c| c.rows == 24), "{first:?}");
    assert_eq!(f.fingerprints().await, first, "a replay");
    // Rows outside the window, or with no window value, change no chunk.
    f.exec("INSERT INTO {t} VALUES (50000, '2026-09-06 01:00:00', 'after'), (50001, NULL, 'null')").await;
    assert_eq!(f.fingerprints().await, first);

    // A late row in day 4 moves day 4 only.
    f.exec("INSERT INTO {t} VALUES (60000, '2026-09-05 12:30:00', 'late')").await;
    let second = f.fingerprints().await;
    assert_eq!(changed(&first, &second), vec![4]);

    // A correction in day 1 and a delete in day 3 move exactly those days:
    // a mutation renames every part, but the files of the parts it did not
    // touch stay the same. Mutations run in the merge pool.
    f.exec("SYSTEM START MERGES {t}").await;
    f.exec("ALTER TABLE {t} UPDATE v = 'corrected' WHERE id = 2005 SETTINGS mutations_sync = 2").await;
    let third = f.fingerprints().await;
    assert_eq!(changed(&second, &third), vec![1]);
    f.exec("DELETE FROM {t} WHERE id = 4007 SETTINGS mutations_sync = 2").await;
    let fourth = f.fingerprints().await;
    assert_eq!(changed(&third, &fourth), vec![3]);
    assert_eq!(fourth[3].rows, 23);
    f.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_reads_as_a_change_and_a_new_table_moves_every_chunk() {
    let f = Fixture::new().await;
    let first = f.fingerprints().await;
    // Two parts of day 2 merged into one: the rows are the same, the parts not.
    f.exec("INSERT INTO {t} VALUES (70000, '2026-09-03 05:00:00', 'x')").await;
    let before_merge = f.fingerprints().await;
    f.exec("SYSTEM START MERGES {t}").await;
    f.exec("OPTIMIZE TABLE {t} PARTITION '2026-09-03' FINAL").await;
    assert_eq!(changed(&before_merge, &f.fingerprints().await), vec![2]);
    // The same rows in a new table (another UUID) are another incarnation.
    f.exec("CREATE TABLE {t}_copy AS {t}").await;
    f.exec("INSERT INTO {t}_copy SELECT * FROM {t}").await;
    f.exec("EXCHANGE TABLES {t} AND {t}_copy").await;
    let after = f.fingerprints().await;
    assert_eq!(changed(&first, &after), vec![0, 1, 2, 3, 4]);
    f.cleanup().await;
}
