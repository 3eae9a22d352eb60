//! The standard data set: [`event_cols`], its source and target rows, and
//! the fixtures pre-filled with them.

use super::{CHUNK_BOUNDS, Col, Fixture, Row, Setup, V, col, date, dec, in_window, int, rows_per_chunk, text, ts, uuid};
use crate::harness::WindowReport;

/// `id`, a window column `ts` NOT NULL in the source and a string `s`:
/// the table of the tests that fill it with their own rows.
pub fn id_ts_s_cols() -> Vec<Col> {
    vec![col("id", "Int64", "bigint NOT NULL"), col("ts", "DateTime64(6, 'UTC')", "timestamptz"), col("s", "String", "text")]
}

/// Columns of the standard table: ClickHouse source type, PostgreSQL target type.
pub fn event_cols() -> Vec<Col> {
    vec![
        col("id", "Int64", "bigint NOT NULL"),
        col("ts", "Nullable(DateTime64(6, 'UTC'))", "timestamptz"),
        col("amount", "Nullable(Decimal(18, 4))", "numeric(18,4)"),
        col("name", "Nullable(String)", "text"),
        col("u", "Nullable(UUID)", "uuid"),
        col("d", "Nullable(Date32)", "date"),
        col("f", "Nullable(Float64)", "double precision"),
        col("ok", "Nullable(Bool)", "boolean"),
    ]
}

/// Index of the window column `ts` in [`event_cols`].
pub const TS: usize = 1;

/// Index of the text column `name` in [`event_cols`].
pub const NAME: usize = 3;

/// A row of [`event_cols`] whose values derive from `id`; `ts` is a timestamp or NULL.
pub fn row(id: i64, t: V) -> Row {
    let sign = if id % 3 == 0 { "-" } else { "" };
    vec![
        int(id),
        t,
        dec(&format!("{sign}{}.{:04}", id * 7, id % 10_000)),
        text(&format!("name {id} ✓ é 日本 🎉")),
        uuid(&format!("0c8f1e7a-1f4b-4c55-9b7e-{id:012x}")),
        date(&format!("2026-{:02}-{:02}", 1 + id % 12, 1 + id % 28)),
        V::F64(id as f64 / 10.0),
        V::Bool(id % 2 == 0),
    ]
}

/// `r` with column `c` replaced.
pub fn with(mut r: Row, c: usize, v: V) -> Row {
    r[c] = v;
    r
}

/// `r` with every nullable column except the window column NULL.
pub fn sparse(r: Row) -> Row {
    r.into_iter().enumerate().map(|(i, v)| if i == 0 || i == TS { v } else { V::Null }).collect()
}

/// Source rows: every chunk spans several 2-row frames, with duplicates
/// (within and across chunks), rows on the chunk bounds, sparse rows, an
/// empty string, and rows outside the window or with a NULL window value
/// (which a window replace never copies).
pub fn standard_source() -> Vec<Row> {
    let mut s = Vec::new();
    // Chunk 0: [09-06, 09-07), 7 rows.
    s.push(row(1, ts("2026-09-06 00:00:00")));
    s.push(row(2, ts("2026-09-06 03:00:00")));
    s.extend(vec![row(3, ts("2026-09-06 09:30:00.123456")); 3]);
    s.push(sparse(row(4, ts("2026-09-06 12:00:00"))));
    s.push(row(5, ts("2026-09-06 23:59:59.999999")));
    // Chunk 1: [09-07, 09-08), 6 rows.
    s.push(row(6, ts("2026-09-07 00:00:00")));
    s.extend(vec![row(7, ts("2026-09-07 07:07:07")); 2]);
    s.push(row(3, ts("2026-09-07 09:30:00")));
    s.push(with(row(8, ts("2026-09-07 15:00:00")), NAME, text("")));
    s.push(row(9, ts("2026-09-07 18:00:00.5")));
    // Chunk 2: [09-08, 09-09), 4 rows.
    s.push(row(10, ts("2026-09-08 00:00:00.000001")));
    s.push(row(11, ts("2026-09-08 11:11:11.111111")));
    s.push(row(11, ts("2026-09-08 11:11:11.111111")));
    s.push(row(12, ts("2026-09-08 23:59:59.999999")));
    // Outside the window, or no window value: never copied by a window replace.
    s.push(row(20, ts("2026-09-05 23:59:59.999999")));
    s.push(row(21, ts("2026-09-09 00:00:00")));
    s.push(row(22, V::Null));
    s.push(row(23, ts("2025-01-01 00:00:00")));
    s
}

/// Target rows before the run: rows outside the window (before, at the end
/// bound, long after), rows with a NULL window value (a duplicate and a
/// sparse one), and stale rows inside the window (one equal to a source row).
pub fn standard_target() -> Vec<Row> {
    vec![
        row(100, ts("2026-09-01 00:00:00")),
        row(101, ts("2026-09-05 23:59:59.999999")),
        row(102, ts("2026-09-09 00:00:00")),
        row(103, ts("2026-12-31 00:00:00")),
        row(104, V::Null),
        row(104, V::Null),
        sparse(row(105, V::Null)),
        row(1, ts("2026-09-06 00:00:00")),
        row(200, ts("2026-09-07 12:00:00")),
        row(201, ts("2026-09-08 23:59:59.999999")),
        row(202, ts("2026-09-06 06:00:00")),
        row(202, ts("2026-09-06 06:00:00")),
    ]
}

/// The standard fixture: [`event_cols`], source and target pre-filled.
pub fn standard_fixture(prefix: &'static str) -> Fixture {
    standard_fixture_on(Setup::new(prefix, event_cols()))
}

/// [`standard_fixture`] and the rows it holds: the fixture,
/// [`standard_source`] and [`standard_target`].
pub fn standard_fixture_with_rows(prefix: &'static str) -> (Fixture, Vec<Row>, Vec<Row>) {
    (standard_fixture(prefix), standard_source(), standard_target())
}

/// The standard table, RANGE-partitioned on `ts`: one partition `t_window`
/// that is exactly the window (what `publication: partition_swap` swaps),
/// and a DEFAULT partition `t_rest` for everything else.
pub fn swap_setup(prefix: &'static str) -> Setup {
    Setup {
        pg_table_suffix: "PARTITION BY RANGE (ts)".into(),
        pg_partitions: vec![
            ("t_window".into(), format!("FOR VALUES FROM ('{}+00') TO ('{}+00')", CHUNK_BOUNDS[0], CHUNK_BOUNDS[3])),
            ("t_rest".into(), "DEFAULT".into()),
        ],
        ..Setup::new(prefix, event_cols())
    }
}

/// [`standard_fixture`] on a given setup (another ClickHouse server, a partitioned target).
pub fn standard_fixture_on(setup: Setup) -> Fixture {
    let fx = Fixture::create(setup);
    fx.insert_source(&standard_source());
    fx.insert_target(&standard_target());
    fx.assert_target(&standard_target(), "target as the test inserted it");
    fx
}

/// Checks a successful window replace's report against `source` and the expected target.
pub fn check_report(doc: &serde_json::Value, source: &[Row], expected: &[Row], what: &str) {
    let inserted = source.iter().filter(|r| in_window(&r[TS])).count();
    let rows_per_chunk = rows_per_chunk(source, TS);
    crate::harness::check_window_report(doc, &WindowReport { inserted, final_rows: expected.len(), rows_per_chunk: &rows_per_chunk }, what);
}
