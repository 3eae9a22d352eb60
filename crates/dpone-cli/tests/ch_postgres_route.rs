//! ClickHouse -> PostgreSQL through the real `dpone` binary, checked by
//! exact multiset equality of what PostgreSQL prints for every value.
//!
//! Each test writes its values once (`ch_postgres_common::V`), inserts them
//! into ClickHouse as SQL literals, pre-fills the PostgreSQL target, runs,
//! and compares the target (`SELECT col::text`) with the rows it predicts in
//! Rust: full refresh, window replace (rows outside the window and rows with
//! a NULL window value untouched), partition swap, duplicates, an empty
//! window, every mapped type at its limits, values PostgreSQL text cannot
//! hold, types refused before any write, and the plan.
//!
//! Window: `[2026-09-06, 2026-09-09)` in three chunks of one day, two at a
//! time, frames of at most 2 rows (chunks span several frames).

mod ch_postgres_common;
mod harness;

use ch_postgres_common::{
    CHUNK_BOUNDS, Col, Fixture, Options, Row, Setup, TS, V, bytes, check_report, col, date, dec, digits, event_cols,
    expected_after_replace, in_range, in_window, int, row, sparse, standard_fixture, standard_fixture_on, standard_fixture_with_rows,
    standard_source, standard_target, text, ts, uuid, with,
};
use harness::{assert_same_rows, codes, messages, state_of};

/// The evidence file a run report names.
fn evidence(doc: &serde_json::Value) -> serde_json::Value {
    let path = doc["evidence_path"].as_str().expect("an evidence path");
    serde_json::from_str(&std::fs::read_to_string(path).expect("the evidence file")).expect("JSON evidence")
}

/// How the evidence says the generation was verified.
fn generation_check(doc: &serde_json::Value) -> String {
    evidence(doc)["generation"]["verified_by"].as_str().expect("generation.verified_by").to_string()
}

/// Runs, expects success, and checks the target, the report, the receipt and
/// that no staging or generation table is left. Returns the report.
fn run_and_check(fx: &Fixture, source: &[Row], before: &[Row], what: &str) -> serde_json::Value {
    let expected = expected_after_replace(before, source, TS);
    let receipts_before = fx.receipts();
    let run = fx.run();
    let doc = run.assert_succeeded(what);
    fx.assert_target(&expected, &format!("{what}: target (its rows outside the window + the source rows inside)"));
    check_report(&doc, source, &expected, what);
    let nulls = before.iter().filter(|r| r[TS] == V::Null).count();
    assert_eq!(doc["kept_null_window_rows"], nulls, "{what}: expected kept_null_window_rows = target rows with a NULL window value");
    assert_eq!(fx.leftovers(), Vec::<String>::new(), "{what}: expected no `_dpone_stg_` / `_dpone_gen_` table after success");
    let stats = &evidence(&doc)["target"];
    let inside = source.iter().filter(|r| in_window(&r[TS])).count() as u64;
    let expected_nulls = expected.iter().filter(|r| r[TS] == V::Null).count() as u64;
    assert_eq!(stats["total_rows"], expected.len() as u64, "{what}: evidence target.total_rows");
    assert_eq!(stats["window_rows"], inside, "{what}: evidence target.window_rows");
    assert_eq!(stats["outside_rows"], expected.len() as u64 - inside, "{what}: evidence target.outside_rows");
    assert_eq!(stats["null_window_rows"], expected_nulls, "{what}: evidence target.null_window_rows");
    let per_day = fx.pg_query(&format!(
        "SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD'), count(*)::text FROM {} WHERE ts >= '{}+00' AND ts < '{}+00' GROUP BY 1",
        fx.target_sql(),
        CHUNK_BOUNDS[0],
        CHUNK_BOUNDS[3]
    ));
    let want: serde_json::Map<String, serde_json::Value> =
        per_day.iter().map(|r| (r[0].clone().unwrap(), serde_json::Value::from(r[1].clone().unwrap().parse::<u64>().unwrap()))).collect();
    assert_eq!(stats["rows_per_utc_day"], serde_json::Value::Object(want), "{what}: evidence target.rows_per_utc_day, day by day");
    assert_eq!(stats["min"].is_null(), inside == 0, "{what}: evidence target.min is set exactly when the window has rows");
    let receipts = fx.receipts();
    assert_eq!(receipts.len(), receipts_before.len() + 1, "{what}: expected exactly one new receipt: {receipts:?}");
    let inside = source.iter().filter(|r| in_window(&r[TS])).count();
    assert_eq!(receipts.last().expect("a receipt").rows, inside as i64, "{what}: expected the receipt to count the window's rows");
    assert_eq!(state_of(&fx.status()), "succeeded", "{what}: expected `dpone status` to say succeeded");
    doc
}

// ---------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------

#[test]
fn full_refresh_replaces_the_whole_target() {
    let fx = standard_fixture("chpg_full");
    fx.write_manifest(&Options { full_refresh: true, ..Options::default() });
    let source = standard_source();

    let run = fx.run();
    let doc = run.assert_succeeded("full refresh");
    // Every source row, the ones outside any window and with a NULL `ts` included.
    fx.assert_target(&source, "target after a full refresh (exactly the source)");
    assert_eq!(doc["inserted_rows"], source.len(), "expected every source row inserted");
    assert_eq!(doc["final_rows"], source.len(), "expected final_rows = source rows");
    assert_eq!(doc["window"], serde_json::Value::Null, "a full refresh has no window");
    let chunks = doc["chunks"].as_array().expect("chunks");
    assert_eq!(chunks.len(), 1, "a full refresh is one chunk: {doc:#}");
    assert_eq!(chunks[0]["rows"], source.len(), "the single chunk carries every source row");
    assert_eq!(fx.leftovers(), Vec::<String>::new(), "no staging or generation table after success");
    let receipts = fx.receipts();
    assert_eq!(receipts.len(), 1, "one receipt per publication: {receipts:?}");
    assert_eq!(receipts[0].rows, source.len() as i64);
    assert_eq!(receipts[0].target, fx.target_sql(), "the receipt names the target");

    // Again: same contents, reported as unchanged, one more receipt.
    let again = fx.run();
    let doc = again.assert_succeeded("second full refresh");
    fx.assert_target(&source, "target after a second full refresh");
    assert_eq!(doc["target_unchanged"], true, "the second run found the target already equal to the source");
    assert_eq!(fx.receipts().len(), 2, "one receipt per publication");
    fx.finish();
}

#[test]
fn full_refresh_from_an_empty_source_empties_the_target() {
    let fx = Fixture::new("chpg_full_empty", event_cols());
    fx.insert_target(&standard_target());
    fx.write_manifest(&Options { full_refresh: true, ..Options::default() });
    let doc = fx.run().assert_succeeded("full refresh from an empty table");
    fx.assert_target(&[], "target after a full refresh from an empty source");
    assert_eq!(doc["inserted_rows"], 0);
    assert_eq!(doc["final_rows"], 0);
    fx.finish();
}

#[test]
fn window_replace_keeps_rows_outside_the_window_and_null_window_rows() {
    let (fx, source, before) = standard_fixture_with_rows("chpg_window");
    let doc = run_and_check(&fx, &source, &before, "window replace");
    assert_eq!(
        generation_check(&doc),
        "counts_view_of_verified_chunks",
        "a plain window replace publishes through a view over the verified staging tables"
    );
    assert_eq!(doc["replaced_rows"], before.iter().filter(|r| in_window(&r[TS])).count(), "replaced_rows = stale window rows");
    assert_eq!(fx.backups(), Vec::<String>::new(), "a DELETE + INSERT publication keeps no backup");

    // The source's window changes; the target's rows outside it do not move.
    fx.ch_exec(&format!("DELETE FROM {} WHERE id = 3", fx.source_sql()));
    let more = vec![row(30, ts("2026-09-07 01:00:00")), sparse(row(31, ts("2026-09-08 02:00:00")))];
    fx.insert_source(&more);
    let mut source2: Vec<Row> = source.into_iter().filter(|r| r[0] != int(3)).collect();
    source2.extend(more);
    let before2 = expected_after_replace(&before, &standard_source(), TS);
    let doc = run_and_check(&fx, &source2, &before2, "second window replace after the source changed");
    assert_eq!(doc["target_unchanged"], false);
    fx.finish();
}

/// `execution.verification.digest: xxh3_128`: ClickHouse digests the source
/// rows with `xxh3_128`, dpone the staging read-back; the window lands as
/// with SHA-256 and the evidence names the algorithm.
#[test]
fn window_replace_under_the_xxh3_128_digest_lands_and_names_its_digest() {
    const TAG: &str = "xxh3_128-rowbinary-sum-mod-2^128/v1";
    let fx = standard_fixture("chpg_xxh3");
    fx.write_manifest(&Options { digest: Some("xxh3_128"), ..Options::default() });
    let doc = run_and_check(&fx, &standard_source(), &standard_target(), "window replace under xxh3_128");
    let ev = evidence(&doc);
    let chunks = ev["chunks"].as_array().expect("chunks");
    assert!(!chunks.is_empty());
    for c in chunks {
        for d in ["stream_digest", "staged_digest"] {
            assert_eq!(c[d]["algorithm"], TAG, "chunk {}'s {d}", c["index"]);
        }
    }
    assert_eq!(ev["generation"]["digest"]["algorithm"], TAG);
    fx.finish();
}

#[test]
fn duplicates_keep_their_multiplicity() {
    let fx = Fixture::new("chpg_dups", event_cols());
    let dup = row(7, ts("2026-09-06 10:00:00"));
    let mut source = vec![dup.clone(); 5];
    source.extend(vec![sparse(row(8, ts("2026-09-07 10:00:00"))); 3]);
    // The same values in two chunks are two rows.
    source.push(with(dup.clone(), TS, ts("2026-09-08 10:00:00")));
    source.push(with(dup.clone(), TS, ts("2026-09-08 10:00:00")));
    fx.insert_source(&source);
    // The target holds the same row inside the window (replaced) and outside (kept, twice).
    let before = vec![dup.clone(), dup.clone(), with(dup.clone(), TS, ts("2026-09-01 10:00:00")), with(dup, TS, ts("2026-09-01 10:00:00"))];
    fx.insert_target(&before);
    run_and_check(&fx, &source, &before, "duplicates");
    let doc = run_and_check(&fx, &source, &expected_after_replace(&before, &source, TS), "duplicates, second run");
    assert_eq!(doc["target_unchanged"], true, "the second run found the window already holding these rows");
    fx.finish();
}

#[test]
fn an_empty_source_window_deletes_the_targets_window() {
    let fx = Fixture::new("chpg_empty_window", event_cols());
    // Source rows exist, but none inside the window.
    let source = vec![row(1, ts("2026-09-05 23:59:59.999999")), row(2, ts("2026-09-09 00:00:00")), row(3, V::Null)];
    fx.insert_source(&source);
    let before = standard_target();
    fx.insert_target(&before);
    let doc = run_and_check(&fx, &source, &before, "empty source window");
    assert_eq!(doc["inserted_rows"], 0, "nothing to insert");
    assert_eq!(doc["chunks"].as_array().map(Vec::len), Some(3), "three chunks, all empty");
    fx.finish();
}

// ---------------------------------------------------------------------------
// Partition swap
// ---------------------------------------------------------------------------

/// A RANGE bound `FOR VALUES FROM (a) TO (b)` on UTC instants.
/// A chunk of several MiB spans many ClickHouse frames and several COPY
/// statements into its staging table (`COPY_BATCH_BYTES` of the PostgreSQL
/// target); every row lands once, verified against the source's digest.
#[test]
fn a_chunk_larger_than_one_copy_statement_lands_whole() {
    let fx = Fixture::new("chpg_batches", ch_postgres_common::id_ts_s_cols());
    // 3 days x 8,000 rows of ~300 bytes: about 2.4 MB per one-day chunk.
    fx.ch_exec(&format!(
        "INSERT INTO {} SELECT number, toDateTime64('2026-09-06 00:00:00', 6, 'UTC') + toIntervalSecond(intDiv(number * 259200, 24000)), \
         concat(toString(number), ':', repeat('x', 290 + number % 7)) FROM numbers(24000)",
        fx.source_sql()
    ));
    for (what, block_rows) in [("frames of 128 KiB", None), ("frames of 37 rows", Some(37))] {
        fx.write_manifest(&Options { block_rows, ..Options::default() });
        let doc = fx.run().assert_succeeded(what);
        assert_eq!(doc["inserted_rows"], 24000, "{what}: every row inserted: {doc:#}");
        let chunks = doc["chunks"].as_array().expect("chunks");
        assert_eq!(chunks.len(), 3, "{what}: one chunk per day: {doc:#}");
        assert!(chunks.iter().all(|c| c["rows"] == 8000), "{what}: 8,000 rows per chunk: {doc:#}");
        let target = fx.target_sql();
        let stats =
            fx.pg_scalar(&format!("SELECT count(*) || ' ' || count(DISTINCT id) || ' ' || sum(length(s)) || ' ' || sum(id) FROM {target}"));
        let expected_len: u64 = (0..24000u64).map(|n| n.to_string().len() as u64 + 1 + 290 + n % 7).sum();
        assert_eq!(stats, Some(format!("24000 24000 {expected_len} {}", 24000u64 * 23999 / 2)), "{what}: every row exactly once");
        assert_eq!(fx.leftovers(), Vec::<String>::new(), "{what}: no staging table left");
    }
    fx.finish();
}

fn range(from: &str, to: &str) -> String {
    format!("FOR VALUES FROM ('{from}+00') TO ('{to}+00')")
}

/// The standard table partitioned by RANGE (ts) with the given partitions.
fn partitioned(prefix: &'static str, partitions: Vec<(&str, String)>) -> Setup {
    Setup {
        pg_table_suffix: "PARTITION BY RANGE (ts)".into(),
        pg_partitions: partitions.into_iter().map(|(n, b)| (n.to_string(), b)).collect(),
        ..Setup::new(prefix, event_cols())
    }
}

/// Partitions around the window: before it, exactly it, after it, and DEFAULT (NULL `ts`).
fn window_partitions() -> Vec<(&'static str, String)> {
    vec![
        ("t_before", range("2026-08-01 00:00:00", CHUNK_BOUNDS[0])),
        ("t_window", range(CHUNK_BOUNDS[0], CHUNK_BOUNDS[3])),
        ("t_after", range(CHUNK_BOUNDS[3], "2026-10-01 00:00:00")),
        ("t_default", "DEFAULT".into()),
    ]
}

/// The partition a table is attached as, with its bound, or None.
fn partition_bound(fx: &Fixture, name: &str) -> Option<String> {
    fx.pg_query(&format!(
        "SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_class c JOIN pg_inherits i ON i.inhrelid = c.oid \
         WHERE c.oid = to_regclass('{}') AND i.inhparent = to_regclass('{}')",
        fx.pg_table(name),
        fx.target_sql()
    ))
    .first()
    .and_then(|r| r[0].clone())
}

#[test]
fn partition_swap_replaces_exactly_the_window_partition() {
    let fx = standard_fixture_on(partitioned("chpg_swap", window_partitions()));
    // ATTACH PARTITION requires every CHECK constraint of the parent.
    fx.pg_exec(&format!("ALTER TABLE {} ADD CONSTRAINT ts_this_century CHECK (ts IS NULL OR ts >= '2000-01-01+00')", fx.pg_table("t")));
    fx.write_manifest(&Options { publication: Some("partition_swap"), ..Options::default() });
    let source = standard_source();
    let before = standard_target();
    let old_window = fx.table_rows(&fx.pg_table("t_window"));
    assert_same_rows_of(&fx, &before.iter().filter(|r| in_window(&r[TS])).cloned().collect::<Vec<_>>(), &old_window, "t_window before");
    let others: Vec<(&str, Vec<_>)> = ["t_before", "t_after", "t_default"].iter().map(|p| (*p, fx.table_rows(&fx.pg_table(p)))).collect();
    let bound = partition_bound(&fx, "t_window").expect("t_window is a partition");

    let plan = fx.plan();
    assert_eq!(plan.code, Some(0), "expected a runnable plan:\n{}", plan.describe());
    assert_eq!(plan.json()["publication"]["method"], "partition_swap", "{}", plan.describe());

    let doc = run_and_check(&fx, &source, &before, "partition swap");
    assert_eq!(generation_check(&doc), "digest", "a swapped-in partition is a real table, verified by digest");
    // The window's partition holds exactly the source's window rows, under its own name and bound.
    let new_window: Vec<Row> = source.iter().filter(|r| in_window(&r[TS])).cloned().collect();
    assert_same_rows(&fx.expected(&new_window), &fx.table_rows(&fx.pg_table("t_window")), "t_window after the swap");
    assert_eq!(partition_bound(&fx, "t_window").as_deref(), Some(bound.as_str()), "t_window is attached again with the same bound");
    let leftover_check = fx.pg_scalar(&format!(
        "SELECT count(*) FROM pg_constraint WHERE conrelid = to_regclass('{}') AND conname = '_dpone_bound'",
        fx.pg_table("t_window")
    ));
    assert_eq!(leftover_check.as_deref(), Some("0"), "the generation's bound CHECK is dropped after the ATTACH");
    for (p, rows) in &others {
        assert_same_rows(rows, &fx.table_rows(&fx.pg_table(p)), &format!("{p} (not the window's partition) untouched"));
    }
    // The replaced partition is kept as this run's backup, detached.
    let backups = fx.backups();
    assert_eq!(backups.len(), 1, "expected exactly one `_dpone_bak_` table: {backups:?}");
    assert_same_rows(&old_window, &fx.table_rows(&fx.pg_table(&backups[0])), "backup = the old window partition");
    assert_eq!(partition_bound(&fx, &backups[0]), None, "the backup is not a partition of the target");
    assert_eq!(doc["replaced_rows"], old_window.len(), "replaced_rows = rows of the old window partition");

    // A second swap keeps only the newest backup: the first swap's window.
    let after_first = fx.table_rows(&fx.pg_table("t_window"));
    fx.insert_source(&[row(40, ts("2026-09-07 04:00:00"))]);
    let mut source2 = source.clone();
    source2.push(row(40, ts("2026-09-07 04:00:00")));
    run_and_check(&fx, &source2, &expected_after_replace(&before, &source, TS), "second partition swap");
    let backups2 = fx.backups();
    assert_eq!(backups2.len(), 1, "one backup per target after the next success: {backups2:?}");
    assert_same_rows(&after_first, &fx.table_rows(&fx.pg_table(&backups2[0])), "backup = the first swap's window");
    fx.finish();
}

fn assert_same_rows_of(fx: &Fixture, expected: &[Row], actual: &[ch_postgres_common::TextRow], what: &str) {
    assert_same_rows(&fx.expected(expected), actual, what);
}

/// Runs a manifest that must be refused with `code` before any write.
fn assert_refused_before_any_write(fx: &Fixture, code: &str, what: &str) -> serde_json::Value {
    let relations = fx.relations();
    let target = fx.target_rows();
    let run = fx.run();
    let doc = run.assert_failed(what, 2, code);
    assert_eq!(doc["status"], "refused", "{what}: expected `status: refused`:\n{}", run.describe());
    assert_same_rows(&target, &fx.target_rows(), &format!("{what}: target unchanged"));
    assert_eq!(fx.relations(), relations, "{what}: expected no relation created or dropped in the target's schema");
    assert_eq!(fx.owned_tables(), Vec::<String>::new(), "{what}: expected no `_dpone_` table");
    assert!(!fx.work_dir().join("state.db").exists(), "{what}: a refused run leaves no state store behind");
    doc
}

#[test]
fn partition_swap_is_refused_unless_the_window_is_exactly_one_partition() {
    // One partition per day: the window spans three.
    let daily = vec![
        ("d06", range(CHUNK_BOUNDS[0], CHUNK_BOUNDS[1])),
        ("d07", range(CHUNK_BOUNDS[1], CHUNK_BOUNDS[2])),
        ("d08", range(CHUNK_BOUNDS[2], CHUNK_BOUNDS[3])),
        ("rest", "DEFAULT".into()),
    ];
    // One partition larger than the window.
    let wide = vec![("wide", range("2026-09-01 00:00:00", "2026-09-30 00:00:00")), ("rest", "DEFAULT".into())];
    for (name, setup) in
        [("daily partitions", partitioned("chpg_swap_daily", daily)), ("a wider partition", partitioned("chpg_swap_wide", wide))]
    {
        let fx = standard_fixture_on(setup);
        fx.write_manifest(&Options { publication: Some("partition_swap"), ..Options::default() });
        let doc = assert_refused_before_any_write(&fx, "partition_swap_unsupported_layout", name);
        assert!(messages(&doc["errors"]).contains("no partition covers exactly the window"), "{name}: {doc:#}");
        let plan = fx.plan();
        assert_eq!(plan.code, Some(2), "{name}: expected the plan to be refused:\n{}", plan.describe());
        assert!(codes(&plan.json()["refusals"]).contains(&"partition_swap_unsupported_layout".to_string()), "{}", plan.describe());
        fx.finish();
    }

    // A target that is not partitioned at all.
    let fx = standard_fixture("chpg_swap_plain");
    fx.write_manifest(&Options { publication: Some("partition_swap"), ..Options::default() });
    let doc = assert_refused_before_any_write(&fx, "partition_swap_unsupported_layout", "an unpartitioned target");
    assert!(messages(&doc["errors"]).contains("not a partitioned table"), "{doc:#}");
    fx.finish();

    // A full refresh has no window to swap.
    let fx = standard_fixture_on(partitioned("chpg_swap_full", window_partitions()));
    fx.write_manifest(&Options { publication: Some("partition_swap"), full_refresh: true, ..Options::default() });
    assert_refused_before_any_write(&fx, "partition_swap_unsupported_layout", "partition swap with a full refresh");
    fx.finish();
}

// ---------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------

/// Every mapped ClickHouse type next to the PostgreSQL type it maps to, and
/// its value in each of the first four limit rows: the maxima; the minima;
/// zeros, negative zeros, the epochs, and every nullable column NULL; the
/// smallest steps (subnormal floats, one unit in the last decimal place,
/// zero bytes inside a FixedString, text that looks like NULL or escapes).
#[rustfmt::skip]
fn type_table() -> Vec<(Col, [V; 4])> {
    let n = |k: usize| digits('9', k);
    vec![
        (col("id", "Int64", "bigint NOT NULL"),                         [int(1), int(2), int(3), int(4)]),
        (col("i8", "Int8", "smallint NOT NULL"),                        [int(i8::MAX), int(i8::MIN), int(0), int(-1)]),
        (col("u8", "UInt8", "smallint NOT NULL"),                       [int(u8::MAX), int(u8::MIN), int(0), int(1)]),
        (col("i16", "Int16", "smallint NOT NULL"),                      [int(i16::MAX), int(i16::MIN), int(0), int(-1)]),
        (col("u16", "UInt16", "integer NOT NULL"),                      [int(u16::MAX), int(u16::MIN), int(0), int(1)]),
        (col("i32", "Int32", "integer NOT NULL"),                       [int(i32::MAX), int(i32::MIN), int(0), int(-1)]),
        (col("u32", "UInt32", "bigint NOT NULL"),                       [int(u32::MAX), int(u32::MIN), int(0), int(1)]),
        (col("i64", "Int64", "bigint NOT NULL"),                        [int(i64::MAX), int(i64::MIN), int(0), int(-1)]),
        (col("u64", "UInt64", "numeric(20,0) NOT NULL"),                [int(u64::MAX), int(u64::MIN), int(0), int(1)]),
        (col("f32", "Float32", "real NOT NULL"),                        [V::F32(f32::MAX), V::F32(f32::MIN), V::F32(-0.0), V::F32(f32::from_bits(1))]),
        (col("f64", "Float64", "double precision NOT NULL"),            [V::F64(f64::MAX), V::F64(f64::MIN), V::F64(-0.0), V::F64(f64::from_bits(1))]),
        (col("d9", "Decimal(9, 2)", "numeric(9,2) NOT NULL"),           [dec(&format!("{}.{}", n(7), n(2))), dec(&format!("-{}.{}", n(7), n(2))), dec("0"), dec("-0.01")]),
        (col("d18", "Decimal(18, 4)", "numeric(18,4) NOT NULL"),        [dec(&format!("{}.{}", n(14), n(4))), dec(&format!("-{}.{}", n(14), n(4))), dec("0"), dec("0.0001")]),
        (col("d38_0", "Decimal(38, 0)", "numeric(38,0) NOT NULL"),      [dec(&n(38)), dec(&format!("-{}", n(38))), dec("0"), dec("-1")]),
        (col("d38_10", "Decimal(38, 10)", "numeric(38,10) NOT NULL"),   [dec(&format!("{}.{}", n(28), n(10))), dec(&format!("-{}.{}", n(28), n(10))), dec("0"), dec(&format!("-{}", tiny(9)))]),
        (col("d38_38", "Decimal(38, 38)", "numeric(38,38) NOT NULL"),   [dec(&format!("0.{}", n(38))), dec(&format!("-0.{}", n(38))), dec("0"), dec(&tiny(37))]),
        (col("d76_0", "Decimal(76, 0)", "numeric(76,0) NOT NULL"),      [dec(&n(76)), dec(&format!("-{}", n(76))), dec("0"), dec("1")]),
        (col("d76_20", "Decimal(76, 20)", "numeric(76,20) NOT NULL"),   [dec(&format!("{}.{}", n(56), n(20))), dec(&format!("-{}.{}", n(56), n(20))), dec("0"), dec(&format!("-{}", tiny(19)))]),
        (col("d76_76", "Decimal(76, 76)", "numeric(76,76) NOT NULL"),   [dec(&format!("0.{}", n(76))), dec(&format!("-0.{}", n(76))), dec("0"), dec(&format!("-{}", tiny(75)))]),
        (col("b", "Bool", "boolean NOT NULL"),                          [V::Bool(true), V::Bool(false), V::Bool(false), V::Bool(true)]),
        (col("s", "String", "text NOT NULL"),                           [text("multi-byte: é ✓ 日本語 🎉 \u{10FFFF}"), text(""), text(" "), text("tab\tnewline\nback\\slash 'quote' \"dq\" \u{7f}")]),
        (col("lc", "LowCardinality(String)", "text NOT NULL"),          [text("low cardinality ✓"), text(""), text("x"), text("日本語")]),
        (col("lcn", "LowCardinality(Nullable(String))", "text"),        [text("lcn 🎉"), text(""), V::Null, text("NULL")]),
        (col("ns", "Nullable(String)", "text"),                         [text("x"), text(""), V::Null, text("\\N")]),
        (col("fs", "FixedString(4)", "bytea NOT NULL"),                 [bytes(&[0xff; 4]), bytes(&[0, 0, 0, 0]), bytes(b"abcd"), bytes(&[0x00, 0x01, 0x00, 0x02])]),
        (col("nfs", "Nullable(FixedString(2))", "bytea"),               [bytes(&[0xff, 0x00]), bytes(&[0, 0]), V::Null, bytes(&[0x00, 0x00])]),
        (col("u", "UUID", "uuid NOT NULL"),                             [uuid("ffffffff-ffff-ffff-ffff-ffffffffffff"), uuid("00000000-0000-0000-0000-000000000000"), uuid("01234567-89ab-cdef-0123-456789abcdef"), uuid("ABCDEF01-2345-6789-ABCD-EF0123456789")]),
        (col("dt", "DateTime('UTC')", "timestamptz NOT NULL"),          [ts("2106-02-07 06:28:15"), ts("1970-01-01 00:00:00"), ts("2000-01-01 00:00:00"), ts("2026-09-06 12:34:56")]),
        (col("dt3", "DateTime64(3, 'UTC')", "timestamptz NOT NULL"),    [ts("2299-12-31 23:59:59.999"), ts("1900-01-01 00:00:00.000"), ts("1969-12-31 23:59:59.999"), ts("2026-09-06 00:00:00.001")]),
        (col("dt6", "DateTime64(6, 'UTC')", "timestamptz NOT NULL"),    [ts("2299-12-31 23:59:59.999999"), ts("1900-01-01 00:00:00"), ts("1999-12-31 23:59:59.999999"), ts("2026-09-06 09:30:00.123456")]),
        (col("ndt6", "Nullable(DateTime64(6, 'UTC'))", "timestamptz"),  [ts("2299-12-31 23:59:59.999999"), ts("1900-01-01 00:00:00"), V::Null, ts("1970-01-01 00:00:00")]),
        (col("ts6", "DateTime64(6)", "timestamp NOT NULL"),             [ts("2299-12-31 23:59:59.999999"), ts("1900-01-01 00:00:00"), ts("1969-12-31 23:59:59.999999"), ts("2026-09-06 09:30:00.000001")]),
        (col("ts3", "DateTime64(3)", "timestamp NOT NULL"),             [ts("2299-12-31 23:59:59.999"), ts("1900-01-01 00:00:00.000"), ts("2000-01-01 00:00:00.001"), ts("2026-09-06 09:30:00.1")]),
        (col("dd", "Date", "date NOT NULL"),                            [date("2149-06-06"), date("1970-01-01"), date("2000-01-01"), date("2026-09-06")]),
        (col("d32", "Date32", "date NOT NULL"),                         [date("2299-12-31"), date("1900-01-01"), date("1969-12-31"), date("2026-09-06")]),
        (col("ni32", "Nullable(Int32)", "integer"),                     [int(i32::MAX), int(i32::MIN), V::Null, int(0)]),
        (col("nu64", "Nullable(UInt64)", "numeric(20,0)"),              [int(u64::MAX), int(0), V::Null, int(9_007_199_254_740_993u64)]),
        (col("nf64", "Nullable(Float64)", "double precision"),          [V::F64(f64::MIN_POSITIVE), V::F64(f64::MIN), V::Null, V::F64(0.1)]),
        (col("nd76", "Nullable(Decimal(76, 20))", "numeric(76,20)"),    [dec(&format!("{}.{}", n(56), n(20))), dec(&format!("-{}.{}", n(56), n(20))), V::Null, dec("0")]),
        (col("nb", "Nullable(Bool)", "boolean"),                        [V::Bool(true), V::Bool(false), V::Null, V::Bool(false)]),
        (col("nu", "Nullable(UUID)", "uuid"),                           [uuid("01234567-89ab-cdef-0123-456789abcdef"), uuid("00000000-0000-0000-0000-000000000000"), V::Null, uuid("00000000-0000-0000-0000-000000000001")]),
        (col("nd32", "Nullable(Date32)", "date"),                       [date("2299-12-31"), date("1900-01-01"), V::Null, date("1970-01-01")]),
    ]
}

fn type_cols() -> Vec<Col> {
    type_table().into_iter().map(|(c, _)| c).collect()
}

/// `0.` followed by `zeros` zeros and a 1.
fn tiny(zeros: usize) -> String {
    format!("0.{}1", digits('0', zeros))
}

/// Rows at every type's limits: maxima, minima, zeros and NULLs, the
/// smallest steps, and the smallest normal floats.
fn limit_rows() -> Vec<Row> {
    let table = type_table();
    let [max, min, zero, step]: [Row; 4] = std::array::from_fn(|i| table.iter().map(|(_, values)| values[i].clone()).collect());
    let normal_min = {
        let mut r = step.clone();
        r[0] = int(5);
        r[9] = V::F32(f32::MIN_POSITIVE);
        r[10] = V::F64(f64::MIN_POSITIVE);
        r[37] = V::F64(1.0 / 3.0);
        r
    };
    vec![max, min, zero, step, normal_min]
}

#[test]
fn every_supported_type_at_its_limits() {
    let cols = type_cols();
    let rows = limit_rows();
    for r in &rows {
        assert_eq!(r.len(), cols.len(), "a limit row has one value per column");
    }
    let fx = Fixture::new("chpg_types", cols);
    fx.write_manifest(&Options { full_refresh: true, ..Options::default() });
    fx.insert_source(&rows);
    // Something to replace: one plain row.
    fx.insert_target(&rows[3..4]);

    let plan = fx.plan();
    assert_eq!(plan.code, Some(0), "expected a runnable plan for every mapped type:\n{}", plan.describe());

    let doc = fx.run().assert_succeeded("every type");
    fx.assert_target(&rows, "target after moving every type at its limits");
    assert_eq!(doc["inserted_rows"], rows.len());
    // Idempotent: the same values read back digest equal.
    let again = fx.run().assert_succeeded("every type, again");
    assert_eq!(again["target_unchanged"], true, "the second run found exactly the same values");
    fx.assert_target(&rows, "target after the second run");
    fx.finish();
}

#[test]
fn text_postgres_cannot_store_fails_the_run_naming_the_column() {
    let cols = vec![
        col("id", "Int64", "bigint NOT NULL"),
        col("ts", "DateTime64(6, 'UTC')", "timestamptz NOT NULL"),
        col("s", "String", "text NOT NULL"),
        col("lc", "LowCardinality(Nullable(String))", "text"),
    ];
    let good = |id: i64, t: &str| vec![int(id), ts(t), text(&format!("ok {id} ✓")), text("fine")];
    // (what, bad row, column named)
    let cases = [
        ("invalid UTF-8 in a String", vec![int(9), ts("2026-09-07 09:00:00"), bytes(&[b'a', 0xff, 0xfe]), V::Null], "s", "UTF-8"),
        (
            "a NUL byte in a LowCardinality(Nullable(String))",
            vec![int(9), ts("2026-09-08 09:00:00"), text("ok"), text("a\0b")],
            "lc",
            "NUL",
        ),
    ];
    for (what, bad, column, reason) in cases {
        let fx = Fixture::new("chpg_badtext", cols.clone());
        let mut source: Vec<Row> = (1..=6).map(|i| good(i, &format!("2026-09-0{} 0{i}:00:00", 6 + i % 3))).collect();
        source.push(bad);
        fx.insert_source(&source);
        let before = vec![good(100, "2026-09-01 00:00:00"), good(101, "2026-09-07 12:00:00")];
        fx.insert_target(&before);

        let run = fx.run();
        let doc = run.assert_failed(what, 1, "invalid_value");
        let msg = messages(&doc["errors"]);
        assert!(msg.contains(&format!("column `{column}`")), "{what}: expected the error to name column `{column}`: {msg}");
        assert!(msg.contains(reason), "{what}: expected the error to say why ({reason}): {msg}");
        assert_eq!(doc["publication"], "absent", "{what}: nothing was published:\n{}", run.describe());
        fx.assert_target(&before, &format!("{what}: target unchanged"));
        assert_eq!(fx.receipts(), Vec::new(), "{what}: no receipt");
        assert_eq!(fx.leftovers(), Vec::<String>::new(), "{what}: the failed run's staging tables are dropped");
        assert_eq!(state_of(&fx.status()), "failed", "{what}: expected `dpone status` to say failed");
        fx.finish();
    }
}

#[test]
fn unsupported_types_are_refused_before_any_write() {
    // (ClickHouse type, a row value, the PostgreSQL column a user would map it to)
    let cases = [
        ("Array(Int32)", "[1, 2]", "integer[]"),
        ("Map(String, Int32)", "map('a', 1)", "jsonb"),
        ("Tuple(Int32, String)", "(1, 'a')", "text"),
        ("Enum8('a' = 1, 'b' = 2)", "'a'", "text"),
        ("Int128", "1", "numeric(39,0)"),
        ("UInt128", "1", "numeric(39,0)"),
        ("Int256", "-57896044618658097711785492504343953926634992332820282019728792003956564819968", "numeric(76,0)"),
        ("UInt256", "1", "numeric(76,0)"),
        ("DateTime64(9, 'UTC')", "'2026-09-07 00:00:00.123456789'", "timestamptz"),
        ("DateTime64(7, 'UTC')", "'2026-09-07 00:00:00.1234567'", "timestamptz"),
        ("Nullable(DateTime64(9, 'UTC'))", "NULL", "timestamptz"),
    ];
    for (ch, value, pg) in cases {
        let cols = vec![col("id", "Int64", "bigint NOT NULL"), col("ts", "DateTime64(6, 'UTC')", "timestamptz NOT NULL"), col("x", ch, pg)];
        let fx = Fixture::new("chpg_refused", cols);
        fx.ch_exec(&format!("INSERT INTO {} VALUES (1, '2026-09-07 01:00:00', {value})", fx.source_sql()));
        fx.pg_exec(&format!("INSERT INTO {} (id, ts) VALUES (100, '2026-09-07 02:00:00+00')", fx.target_sql()));
        let what = format!("source column of type {ch}");
        let doc = assert_refused_before_any_write(&fx, "unsupported_type", &what);
        let msg = messages(&doc["errors"]);
        assert!(msg.contains("source column `x`"), "{what}: expected the refusal to name the source column `x`: {msg}");
        let plan = fx.plan();
        assert_eq!(plan.code, Some(2), "{what}: expected `dpone plan` to refuse too:\n{}", plan.describe());
        assert!(codes(&plan.json()["refusals"]).contains(&"unsupported_type".to_string()), "{}", plan.describe());
        fx.finish();
    }
}

// ---------------------------------------------------------------------------
// Plan
// ---------------------------------------------------------------------------

#[test]
fn plan_shows_the_route_and_the_publication_method() {
    let fx = standard_fixture("chpg_plan");
    let plan = fx.plan();
    assert_eq!(plan.code, Some(0), "expected a runnable plan:\n{}", plan.describe());
    let doc = plan.json();
    assert_eq!(doc["route"]["name"], "clickhouse->postgres", "{doc:#}");
    assert_eq!(doc["route"]["source"], "clickhouse", "{doc:#}");
    assert_eq!(doc["route"]["sink"], "postgres", "{doc:#}");
    assert_eq!(doc["publication"]["method"], "serializable_transaction", "{doc:#}");
    assert_eq!(doc["publication"]["atomic"], true, "{doc:#}");
    assert_eq!(doc["refusals"], serde_json::json!([]), "{doc:#}");
    assert_eq!(doc["window"]["chunk_count"], 3, "{doc:#}");
    let columns: Vec<&str> = doc["columns"].as_array().expect("probed columns").iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(columns, ["id", "ts", "amount", "name", "u", "d", "f", "ok"], "{doc:#}");
    // A plan writes nothing.
    assert_eq!(fx.owned_tables(), Vec::<String>::new(), "a plan creates no table");
    fx.assert_target(&standard_target(), "target after a plan");
    fx.finish();

    let fx = standard_fixture_on(partitioned("chpg_plan_swap", window_partitions()));
    fx.write_manifest(&Options { publication: Some("partition_swap"), ..Options::default() });
    let plan = fx.plan();
    assert_eq!(plan.code, Some(0), "expected a runnable plan:\n{}", plan.describe());
    let doc = plan.json();
    assert_eq!(doc["route"]["name"], "clickhouse->postgres", "{doc:#}");
    assert_eq!(doc["publication"]["method"], "partition_swap", "{doc:#}");
    assert_eq!(doc["publication"]["atomic"], true, "{doc:#}");
    fx.finish();
}

/// The helpers above compare against what the test inserted; this checks the
/// helpers themselves on a window bound, so a wrong helper cannot hide a bug.
#[test]
fn window_helpers_are_half_open() {
    assert!(in_range(&ts("2026-09-06 00:00:00"), CHUNK_BOUNDS[0], CHUNK_BOUNDS[1]));
    assert!(in_range(&ts("2026-09-06 23:59:59.999999"), CHUNK_BOUNDS[0], CHUNK_BOUNDS[1]));
    assert!(!in_range(&ts("2026-09-07 00:00:00.000000"), CHUNK_BOUNDS[0], CHUNK_BOUNDS[1]));
    assert!(!in_window(&V::Null));
    assert!(!in_window(&ts("2026-09-09 00:00:00")));
    assert_eq!(
        ch_postgres_common::pg_text(&ts("2026-09-06 09:30:00.100000"), "timestamp with time zone").as_deref(),
        Some("2026-09-06 09:30:00.1+00")
    );
    assert_eq!(ch_postgres_common::pg_text(&dec("-1.5"), "numeric(38,10)").as_deref(), Some("-1.5000000000"));
}

// ---------------------------------------------------------------------------
// Columns
// ---------------------------------------------------------------------------

#[test]
fn columns_are_matched_by_name_not_by_position() {
    let fx = Fixture::new("chpg_order", event_cols());
    // The source's columns in another order than the target's.
    fx.ch_exec(&format!("ALTER TABLE {} MODIFY COLUMN ok Nullable(Bool) FIRST", fx.source_sql()));
    fx.ch_exec(&format!("ALTER TABLE {} MODIFY COLUMN id Int64 AFTER f", fx.source_sql()));
    fx.ch_exec(&format!("ALTER TABLE {} MODIFY COLUMN name Nullable(String) AFTER ok", fx.source_sql()));
    let order = fx.ch_exec(&format!("SELECT groupArray(name) FROM system.columns WHERE database = '{}' AND table = 't'", fx.db));
    assert_eq!(order.trim(), "['ok','name','ts','amount','u','d','f','id']", "the source's column order differs from the target's");
    let source = standard_source();
    fx.insert_source(&source);
    fx.insert_target(&standard_target());
    run_and_check(&fx, &source, &standard_target(), "source columns in another order");
    fx.finish();
}

#[test]
fn source_columns_left_out_with_options_columns_are_not_read() {
    let fx = Fixture::new("chpg_subset", event_cols());
    // Columns the target does not have, of types this route cannot move.
    fx.ch_exec(&format!("ALTER TABLE {} ADD COLUMN tags Array(String), ADD COLUMN big Int256", fx.source_sql()));
    let source = standard_source();
    fx.insert_source(&source);
    fx.insert_target(&standard_target());
    fx.write_manifest(&Options { columns: Some(vec!["id", "ts", "amount", "name", "u", "d", "f", "ok"]), ..Options::default() });
    run_and_check(&fx, &source, &standard_target(), "source.options.columns leaving out Array and Int256 columns");
    fx.finish();
}

/// Issue 13: a Nullable ClickHouse column into a NOT NULL PostgreSQL
/// column is admitted with a per-row check: the first NULL fails the run
/// naming the column, nothing published; `nullable_into_not_null: refuse`
/// keeps the old refusal.
#[test]
fn a_nullable_source_column_into_a_not_null_target_column_is_checked_row_by_row() {
    let cols = vec![
        col("id", "Int64", "bigint NOT NULL"),
        col("ts", "DateTime64(6, 'UTC')", "timestamptz"),
        col("n", "Nullable(Int32)", "integer NOT NULL"),
    ];
    let fx = Fixture::new("chpg_notnull", cols);
    fx.insert_source(&[vec![int(1), ts("2026-09-07 00:00:00"), V::Null]]);
    fx.insert_target(&[vec![int(100), ts("2026-09-07 01:00:00"), int(5)]]);
    let target = fx.target_rows();
    let run = fx.run();
    let doc = run.assert_failed("a NULL into integer NOT NULL", 1, "invalid_value");
    assert_eq!(doc["publication"], "absent", "{}", run.describe());
    assert!(messages(&doc["errors"]).contains("`n`"), "the failure names the column: {doc:#}");
    assert_same_rows(&target, &fx.target_rows(), "target unchanged after the NULL");
    let yaml = std::fs::read_to_string(&fx.manifest).unwrap();
    std::fs::write(&fx.manifest, yaml.replace("  strategy:", "  options: {nullable_into_not_null: refuse}\n  strategy:")).unwrap();
    // The failed run's journal is history; the refusal must write nothing new.
    std::fs::remove_dir_all(fx.work_dir()).unwrap();
    let doc = assert_refused_before_any_write(&fx, "schema_mismatch", "Nullable(Int32) into integer NOT NULL, refused by option");
    assert!(messages(&doc["errors"]).contains("`n`"), "the refusal names the column: {doc:#}");
    fx.finish();
}

#[test]
fn non_finite_floats_fail_the_run_naming_the_column() {
    let cols = vec![
        col("id", "Int64", "bigint NOT NULL"),
        col("ts", "DateTime64(6, 'UTC')", "timestamptz NOT NULL"),
        col("f", "Float64", "double precision NOT NULL"),
    ];
    for value in ["nan", "inf", "-inf"] {
        let fx = Fixture::new("chpg_nan", cols.clone());
        fx.insert_source(&[vec![int(1), ts("2026-09-07 00:00:00"), V::F64(1.5)]]);
        fx.ch_exec(&format!("INSERT INTO {} VALUES (2, '2026-09-08 00:00:00', {value})", fx.source_sql()));
        let before = vec![vec![int(100), ts("2026-09-07 01:00:00"), V::F64(2.5)]];
        fx.insert_target(&before);
        let what = format!("Float64 {value}");
        let doc = fx.run().assert_failed(&what, 1, "invalid_value");
        assert!(messages(&doc["errors"]).contains("column `f`"), "{what}: expected the error to name column `f`: {doc:#}");
        fx.assert_target(&before, &format!("{what}: target unchanged"));
        assert_eq!(fx.leftovers(), Vec::<String>::new(), "{what}: the failed run's staging tables are dropped");
        fx.finish();
    }
}

#[test]
fn quoted_identifiers_survive_the_route() {
    let cols = vec![
        col("ID", "Int64", "bigint NOT NULL"),
        col("ts", "Nullable(DateTime64(6, 'UTC'))", "timestamptz"),
        col("my col", "Nullable(String)", "text"),
        col("sélect", "Int32", "integer NOT NULL"),
        col("select", "Decimal(9, 3)", "numeric(9,3) NOT NULL"),
    ];
    let fx = Fixture::new("chpg_idents", cols);
    let r = |id: i64, t: V| vec![int(id), t, text(&format!("v{id}")), int(-id), dec(&format!("{id}.5"))];
    let source = vec![r(1, ts("2026-09-06 01:00:00")), r(2, ts("2026-09-07 01:00:00")), r(2, ts("2026-09-07 01:00:00")), r(3, V::Null)];
    let before = vec![r(10, ts("2026-09-01 00:00:00")), r(11, ts("2026-09-08 00:00:00")), r(12, V::Null)];
    fx.insert_source(&source);
    fx.insert_target(&before);
    run_and_check(&fx, &source, &before, "identifiers with upper case, spaces, non-ASCII letters and keywords");
    fx.finish();
}

#[test]
fn a_source_that_changes_during_every_read_is_never_published() {
    // `r` is computed at every read: the re-read after EOF never matches the stream.
    let cols = vec![
        col("id", "Int64", "bigint NOT NULL"),
        col("ts", "DateTime64(6, 'UTC')", "timestamptz NOT NULL"),
        col("r", "UInt32 ALIAS rand()", "bigint NOT NULL"),
    ];
    let fx = Fixture::new("chpg_changing", cols);
    fx.ch_exec(&format!("INSERT INTO {} (id, ts) VALUES (1, '2026-09-06 01:00:00'), (2, '2026-09-07 01:00:00')", fx.source_sql()));
    let before = vec![vec![int(100), ts("2026-09-07 05:00:00"), int(7)]];
    fx.insert_target(&before);
    let run = fx.run();
    let doc = run.assert_failed("a source changing during every read", 1, "source_changed_during_read");
    assert_eq!(doc["publication"], "absent", "nothing was published:\n{}", run.describe());
    fx.assert_target(&before, "target unchanged");
    assert_eq!(fx.leftovers(), Vec::<String>::new(), "the failed run's staging tables are dropped");
    assert_eq!(fx.receipts(), Vec::new(), "no receipt");
    fx.finish();
}

#[test]
fn staging_in_another_schema() {
    for publication in [None, Some("partition_swap")] {
        let setup = match publication {
            Some(_) => partitioned("chpg_stgschema_swap", window_partitions()),
            None => Setup::new("chpg_stgschema", event_cols()),
        };
        let fx = standard_fixture_on(setup);
        let staging = format!("{}_stg", fx.schema);
        fx.pg_exec(&format!("CREATE SCHEMA {}", ch_postgres_common::ident(&staging)));
        fx.write_manifest(&Options { publication, staging_schema: Some(staging.clone()), ..Options::default() });
        let what = format!("staging in schema {staging} ({})", publication.unwrap_or("delete_insert"));
        let source = standard_source();
        let before = standard_target();
        let expected = expected_after_replace(&before, &source, TS);
        let doc = fx.run().assert_succeeded(&what);
        fx.assert_target(&expected, &what);
        check_report(&doc, &source, &expected, &what);
        let in_staging: Vec<String> = fx
            .pg_query(&format!("SELECT tablename::text FROM pg_tables WHERE schemaname = '{staging}' ORDER BY 1"))
            .into_iter()
            .map(|r| r[0].clone().expect("a name"))
            .collect();
        assert_eq!(in_staging, ["_dpone_receipts"], "{what}: only the receipts remain in the staging schema");
        let in_target: Vec<String> = fx.owned_tables();
        let backups = if publication.is_some() { 1 } else { 0 };
        assert_eq!(in_target.len(), backups, "{what}: the target's schema holds only the swap's backup: {in_target:?}");
        fx.pg_exec(&format!("DROP SCHEMA {} CASCADE", ch_postgres_common::ident(&staging)));
        fx.finish();
    }
}
