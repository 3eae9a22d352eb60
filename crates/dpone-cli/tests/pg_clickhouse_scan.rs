//! One scan per chunk group: a PostgreSQL source without an index (or
//! partitions) on the window column is read one group of adjacent chunks
//! at a time, each row routed to its chunk's staging table, through the
//! real `dpone` binary against real servers.
//!
//! The fixture (`recovery_common::pgch`) moves the window `[2026-09-06,
//! 2026-09-09)` in three one-day chunks with frames of at most 3 rows; its
//! source table `t` has no index. At parallelism 1 the legacy stage limits
//! admit groups of 3 chunks (`Resolved::chunks_per_scan`), so the whole
//! window is one scan; at parallelism 2 groups of 2 (chunks 0-1, then 2
//! on its own). PostgreSQL's own counter of sequential scans of `t`
//! (`pg_stat_user_tables.seq_scan`) shows how many reads dpone made.

mod harness;
mod recovery_common;

use recovery_common::pgch::{Fixture, Standard, assert_same_rows};
use std::time::{Duration, Instant};

/// The fixture's manifest with `parallelism: <n>`.
fn set_parallelism(fx: &Fixture, n: u32) {
    let yaml = std::fs::read_to_string(&fx.manifest).expect("the manifest");
    assert!(yaml.contains("parallelism: 2"), "the fixture's manifest sets parallelism 2:\n{yaml}");
    std::fs::write(&fx.manifest, yaml.replace("parallelism: 2", &format!("parallelism: {n}"))).expect("rewrite the manifest");
}

/// [`Standard`] whose manifest reads one chunk group at a time (`parallelism: 1`).
fn serial(prefix: &'static str) -> Standard {
    let s = Standard::new(prefix);
    set_parallelism(&s.fx, 1);
    s
}

/// Sequential scans PostgreSQL counted on the fixture's source table so
/// far, once the count has settled (backends report their counters when
/// they end, shortly after dpone's connections close).
fn seq_scans(fx: &Fixture) -> i64 {
    async fn read(client: &tokio_postgres::Client, schema: &str) -> i64 {
        let row = client
            .query_one("SELECT coalesce(seq_scan, 0) FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 't'", &[&schema])
            .await
            .expect("read pg_stat_user_tables");
        row.get::<_, i64>(0)
    }
    let schema = fx.schema.clone();
    fx.block_on(async move {
        let (client, connection) = tokio_postgres::connect(&dpone_testkit::postgres_url(), tokio_postgres::NoTls)
            .await
            .expect("connect to the PostgreSQL test server");
        tokio::spawn(connection);
        let (mut last, mut since) = (read(&client, &schema).await, Instant::now());
        let started = Instant::now();
        while since.elapsed() < Duration::from_millis(1500) && started.elapsed() < Duration::from_secs(15) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = read(&client, &schema).await;
            if now != last {
                (last, since) = (now, Instant::now());
            }
        }
        last
    })
}

/// A run of the fixture (with the variables `env`) publishes (`what`),
/// reading the source with `scans` sequential scans (`expected` says why).
fn assert_published_with_scans(s: &Standard, env: &[(&str, &str)], what: &str, scans: i64, expected: &str) {
    let before = seq_scans(&s.fx);
    s.published(&s.fx.run_with(env), what);
    assert_eq!(seq_scans(&s.fx) - before, scans, "{expected}");
}

/// `dpone plan` of the fixture, text and JSON.
fn plan(fx: &Fixture) -> (String, serde_json::Value) {
    let m = fx.manifest.display().to_string();
    let args = ["plan", m.as_str(), "--interval-end", recovery_common::pgch::INTERVAL_END];
    let text = fx.dpone(&args, &[]);
    text.assert_no_panic();
    assert_eq!(text.code, Some(0), "expected `dpone plan` to exit 0:\n{}", text.describe());
    let mut json_args = args.to_vec();
    json_args.extend(["--format", "json"]);
    let json = fx.dpone(&json_args, &[]);
    assert_eq!(json.code, Some(0), "expected `dpone plan --format json` to exit 0:\n{}", json.describe());
    (text.stdout.clone(), json.json())
}

#[test]
fn an_unindexed_source_is_read_with_one_scan_for_the_whole_window() {
    let s = serial("scan_one");
    let fx = &s.fx;

    let (text, json) = plan(fx);
    assert!(
        text.contains("access      the window column `ts` has no index and the table is not partitioned on it: one scan per chunk group (up to 3 chunks per scan, 1 scan)"),
        "expected the plan to say how the window is read:\n{text}"
    );
    let access = &json["access"];
    assert_eq!(access["read"], "one scan per chunk group", "{json:#}");
    assert_eq!(access["index"], serde_json::Value::Null, "{json:#}");
    assert_eq!(access["partitioned"], false, "{json:#}");
    assert_eq!((access["chunks_per_scan"].as_u64(), access["scans"].as_u64()), (Some(3), Some(1)), "{json:#}");

    assert_published_with_scans(
        &s,
        &[],
        "a run reading the window with one scan",
        1,
        "expected one scan of the source for the three chunks",
    );
    s.finish();
}

#[test]
fn groups_of_two_chunks_and_a_chunk_on_its_own_give_exactly_the_window() {
    let s = Standard::new("scan_two");
    let fx = &s.fx;
    let (text, json) = plan(fx);
    assert!(text.contains("one scan per chunk group (up to 2 chunks per scan, 2 scans)"), "{text}");
    assert_eq!(json["access"]["scans"], 2, "{json:#}");
    assert_published_with_scans(
        &s,
        &[],
        "a run reading chunks 0-1 with one scan and chunk 2 with another",
        2,
        "expected two scans of the source: the group 0-1 and chunk 2",
    );
    s.finish();
}

#[test]
fn an_indexed_or_partitioned_source_keeps_per_chunk_range_reads() {
    let s = serial("scan_idx");
    let fx = &s.fx;
    fx.pg_exec(&format!("CREATE INDEX t_ts_idx ON {}.t (ts)", fx.schema));
    let (text, json) = plan(fx);
    assert!(
        text.contains(&format!("access      the window column `ts` is indexed ({}.t_ts_idx): per-chunk range reads", fx.schema)),
        "expected the plan to name the index:\n{text}"
    );
    assert_eq!(json["access"]["read"], "per-chunk range reads", "{json:#}");
    assert_eq!(json["access"]["scans"], 3, "{json:#}");
    s.published(&fx.run(), "a run with per-chunk range reads");

    // A partial index does not select every row of a range; a btree index
    // whose first column is another one does not help either.
    fx.pg_exec(&format!("DROP INDEX {s}.t_ts_idx; CREATE INDEX ON {s}.t (ts) WHERE id > 5; CREATE INDEX ON {s}.t (id, ts)", s = fx.schema));
    let (_, json) = plan(fx);
    assert_eq!(json["access"]["read"], "one scan per chunk group", "{json:#}");

    // A range-partitioned source: per-chunk reads prune partitions.
    fx.pg_exec(&format!(
        "ALTER TABLE {s}.t RENAME TO t_old; \
         CREATE TABLE {s}.t (LIKE {s}.t_old) PARTITION BY RANGE (ts); \
         CREATE TABLE {s}.t_all PARTITION OF {s}.t DEFAULT; \
         INSERT INTO {s}.t SELECT * FROM {s}.t_old; DROP TABLE {s}.t_old",
        s = fx.schema
    ));
    let (text, json) = plan(fx);
    assert!(text.contains("the table is partitioned on the window column `ts`: per-chunk range reads"), "{text}");
    assert_eq!(json["access"]["partitioned"], true, "{json:#}");
    s.finish();
}

#[test]
fn a_crash_in_the_middle_of_a_group_read_is_resumed_exactly() {
    for (point, spec) in [("staging.mid_stream", "staging.mid_stream"), ("checkpoint.after_write", "checkpoint.after_write:2")] {
        let s = serial("scan_crash");
        let fx = &s.fx;
        fx.run_with(&[("DPONE_FAILPOINT", spec)]).assert_aborted_at(point);
        assert_same_rows(&s.before, &fx.target_rows(), &format!("{point}: the target after the crash (untouched)"));
        s.published(&fx.run(), &format!("the run after a crash at {spec}"));
        s.finish();
    }
}

#[test]
fn a_chunk_of_a_group_that_fails_transiently_is_read_again_on_its_own() {
    let s = serial("scan_retry");
    // The first load fails transiently: its chunk is retried with a
    // per-chunk range read, the other chunks of the group keep the scan's rows.
    let faults = [("DPONE_TARGET_FAULTS", "load:transient:1")];
    let expected = "expected the group's scan and one more read for the retried chunk";
    assert_published_with_scans(&s, &faults, "a run with a failed chunk load", 2, expected);
    s.finish();
}
