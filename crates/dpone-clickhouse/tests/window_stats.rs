//! `Target::window_stats` of a ClickHouse target on 26.x: the partitions
//! settled by the parts' metadata and the ones read give the figures a
//! read of the whole window gives, whatever the partitioning, the window's
//! bounds and the lightweight deletes (`sink/evidence.rs`).

use dpone_clickhouse::{ChClient, ClickhouseConfig, ClickhouseTarget, Idempotence, quote_ident};
use dpone_core::ports::{RowFilter, Target, WindowStats};
use dpone_core::time::Timestamp;

/// 2026-09-01T00:00:00Z in microseconds.
const DAY0: i64 = 1_788_220_800_000_000;
const DAY: i64 = 86_400_000_000;

struct Fixture {
    client: ChClient,
    database: String,
    target: ClickhouseTarget,
}

impl Fixture {
    /// Hourly rows over 2026-08-30 .. 2026-09-06 (8 days, one insert per
    /// day), in a table partitioned by `partition` (`None`: unpartitioned).
    async fn new(partition: Option<&str>) -> Fixture {
        let client = ChClient::new(ClickhouseConfig::from_url(&dpone_testkit::clickhouse_url()).unwrap()).unwrap();
        let database = dpone_testkit::unique_name("dpone_ws");
        let target = ClickhouseTarget::new(client.clone(), database.clone(), "t".into(), None, 1 << 20);
        let f = Fixture { client, database, target };
        f.exec(&format!("CREATE DATABASE {} ENGINE = Atomic", quote_ident(&f.database))).await;
        let by = partition.map(|p| format!("PARTITION BY {p} ")).unwrap_or_default();
        f.exec(&format!("CREATE TABLE {{t}} (id Int64, ts DateTime64(6, 'UTC'), v String) ENGINE = MergeTree {by}ORDER BY id")).await;
        for day in -2..6 {
            f.exec(&format!(
                "INSERT INTO {{t}} SELECT 1000 * ({day} + 2) + number, toDateTime64('2026-09-01 00:00:00', 6, 'UTC') + toIntervalMinute(({day} * 24 + number) * 60 + 7), 'v' FROM numbers(24)"
            ))
            .await;
        }
        f.target.describe().await.unwrap().expect("the table exists");
        f
    }

    async fn exec(&self, sql: &str) {
        let sql = sql.replace("{t}", &format!("{}.t", quote_ident(&self.database)));
        self.client.execute(&sql, Idempotence::Safe).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// The figures of `[start, end)` by one read of every row.
    async fn read_whole(&self, start: i64, end: i64) -> WindowStats {
        let t = format!("{}.t", quote_ident(&self.database));
        let (lo, hi) = (format!("fromUnixTimestamp64Micro({start}, 'UTC')"), format!("fromUnixTimestamp64Micro({end}, 'UTC')"));
        let rows = self
            .client
            .query_rows(&format!(
                "SELECT toString(toDate(ts, 'UTC')) AS d, count() AS n, toUnixTimestamp64Micro(min(ts)) AS lo, toUnixTimestamp64Micro(max(ts)) AS hi \
                 FROM {t} WHERE ts >= {lo} AND ts < {hi} GROUP BY d ORDER BY d"
            ))
            .await
            .unwrap();
        let total: u64 = self.client.scalar(&format!("SELECT count() FROM {t}")).await.unwrap().parse().unwrap();
        let n = |r: &serde_json::Map<String, serde_json::Value>, k: &str| r[k].as_str().map_or_else(|| r[k].to_string(), str::to_string);
        let mut s = WindowStats { total_rows: total, ..Default::default() };
        for r in &rows {
            let rows: u64 = n(r, "n").parse().unwrap();
            s.window_rows += rows;
            s.rows_per_utc_day.insert(n(r, "d"), rows);
            let (lo, hi) = (Timestamp(n(r, "lo").parse().unwrap()), Timestamp(n(r, "hi").parse().unwrap()));
            s.min = Some(s.min.map_or(lo, |m| m.min(lo)));
            s.max = Some(s.max.map_or(hi, |m| m.max(hi)));
        }
        s.outside_rows = total - s.window_rows;
        s
    }

    /// `window_stats` of `[start, end)`, checked against [`Fixture::read_whole`].
    async fn check(&self, start: i64, end: i64, what: &str) -> WindowStats {
        let got = self.target.window_stats(&RowFilter::new("ts", Timestamp(start), Timestamp(end), true)).await.unwrap();
        assert_eq!(got, self.read_whole(start, end).await, "{what}");
        got
    }

    /// Whether the server answers the partitions' rows and extremes from
    /// the parts' metadata, as the target asks it to (or refuses).
    async fn answers_from_metadata(&self) -> bool {
        let sql = format!(
            "SELECT _partition_id, count(), min(ts), max(ts) FROM {}.t GROUP BY _partition_id \
             SETTINGS optimize_use_implicit_projections = 1, force_optimize_projection = 1",
            quote_ident(&self.database)
        );
        match self.client.query_rows(&sql).await {
            Ok(_) => true,
            Err(e) if e.code == "clickhouse_error:584" => false,
            Err(e) => panic!("{sql}: {e}"),
        }
    }

    async fn cleanup(self) {
        self.exec(&format!("DROP DATABASE {} SYNC", quote_ident(&self.database))).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daily_partitions_give_the_figures_of_a_whole_read() {
    let f = Fixture::new(Some("toYYYYMMDD(ts)")).await;
    assert!(f.answers_from_metadata().await, "daily partitions are settled by the parts' metadata");
    let s = f.check(DAY0, DAY0 + 3 * DAY, "three whole days, settled by metadata").await;
    assert_eq!((s.total_rows, s.window_rows, s.rows_per_utc_day.len()), (192, 72, 3));
    f.check(DAY0 + DAY / 2, DAY0 + 3 * DAY + DAY / 3, "bounds inside days: two partitions read").await;
    f.check(DAY0 - 10 * DAY, DAY0 + 10 * DAY, "every row").await;
    let empty = f.check(DAY0 + 20 * DAY, DAY0 + 21 * DAY, "no row").await;
    assert_eq!((empty.window_rows, empty.min, empty.max), (0, None, None));
    // A lightweight delete: the server no longer answers from metadata
    // (its count would still hold the deleted row); the figures stay exact.
    f.exec("DELETE FROM {t} WHERE id = 2005 SETTINGS lightweight_deletes_sync = 2").await;
    assert!(!f.answers_from_metadata().await, "a part with deleted rows is read");
    let s = f.check(DAY0, DAY0 + 3 * DAY, "after a lightweight delete").await;
    assert_eq!((s.total_rows, s.window_rows), (191, 71));
    f.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monthly_and_no_partitions_are_read() {
    for partition in [Some("toYYYYMM(ts)"), None] {
        let f = Fixture::new(partition).await;
        assert_eq!(f.answers_from_metadata().await, partition.is_some(), "{partition:?}: the min-max index covers `ts`");
        let s = f.check(DAY0, DAY0 + 3 * DAY, "a month's partition holds several days").await;
        assert_eq!((s.total_rows, s.window_rows), (192, 72), "{partition:?}");
        f.check(DAY0 - 2 * DAY, DAY0 + DAY, "across the month's end").await;
        f.cleanup().await;
    }
}
