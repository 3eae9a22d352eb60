//! Helpers shared by the integration tests: running the real `dpone`
//! binary, reading its JSON output, and dumping SQLite tables as exact
//! multisets of rows.
#![allow(dead_code)]

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use std::path::Path;
use std::process::Output;

/// The binary under test (every test binary declaring `common` declares
/// `harness` too).
pub const DPONE: &str = crate::harness::DPONE;

/// The interval end every test passes explicitly.
pub const INTERVAL_END: &str = "2026-09-09T00:00:00Z";

/// What one invocation of `dpone` produced.
#[derive(Debug)]
pub struct Run {
    pub args: Vec<String>,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// One line naming the command, for assertion messages.
    pub fn describe(&self) -> String {
        format!("`dpone {}` (exit {:?})\n--- stdout ---\n{}\n--- stderr ---\n{}", self.args.join(" "), self.code, self.stdout, self.stderr)
    }

    /// Exactly one JSON document on stdout, parsed.
    pub fn single_json(&self) -> Result<serde_json::Value, String> {
        let docs: Vec<serde_json::Value> = serde_json::Deserializer::from_str(&self.stdout)
            .into_iter::<serde_json::Value>()
            .collect::<Result<_, _>>()
            .map_err(|e| format!("stdout is not a sequence of JSON documents ({e})"))?;
        match docs.len() {
            1 => Ok(docs.into_iter().next().expect("one document")),
            n => Err(format!("expected exactly one JSON document on stdout, found {n}")),
        }
    }

    /// A problem if the process panicked or printed a backtrace.
    pub fn panic_problem(&self) -> Option<String> {
        let all = format!("{}\n{}", self.stdout, self.stderr);
        ["panicked", "RUST_BACKTRACE", "stack backtrace"]
            .iter()
            .find(|needle| all.contains(*needle))
            .map(|needle| format!("output contains `{needle}`: the binary panicked instead of reporting an error"))
    }
}

/// Runs `dpone` in `cwd` with a clean `DPONE_*` environment plus `env`
/// ([`crate::harness::command`]).
pub fn dpone(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let Output { status, stdout, stderr } = crate::harness::command(cwd, args, env).output().expect("the dpone binary starts");
    Run {
        args: args.iter().map(|s| s.to_string()).collect(),
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// A SQLite -> SQLite window-replace manifest between `source.db` and
/// `target.db` beside it: source table `source_table`, target table `t`,
/// `options` the lines of `source.options` (indented four spaces, "" for
/// none), `window` the fields of `sink.strategy.window`, and the work dir
/// `work` if `work_dir`.
pub fn sqlite_manifest(source_table: &str, options: &str, window: &str, work_dir: bool) -> String {
    let options = if options.is_empty() { String::new() } else { format!("  options:\n{options}") };
    let runtime = if work_dir { "runtime:\n  storage: {work_dir: work}\n" } else { "" };
    format!(
        "kind: dpone.batch.v1
source:
  type: sqlite
  connection: {{connection_type: params, params: {{path: source.db}}}}
  table: {{name: {source_table}}}
{options}sink:
  type: sqlite
  connection: {{connection_type: params, params: {{path: target.db}}}}
  table: {{name: t}}
  strategy:
    mode: replace
    window: {{{window}}}
{runtime}"
    )
}

/// A batch manifest in the original's form over the quick start's
/// `events` (`dpone_sqlite::demo`): `main.events` into target.db and
/// `events_b` into target_b.db, replaced over weekly windows. `defaults`
/// starts with `name` (a line, "" for none), the source gets the lines
/// `source_options` (indented six spaces, "" for none), and the entries
/// `more_tables` (lines indented six spaces) follow those two.
pub fn quickstart_batch_manifest(name: &str, source_options: &str, more_tables: &str) -> String {
    let source_options = if source_options.is_empty() { String::new() } else { format!("    options:\n{source_options}") };
    format!(
        r#"kind: dpone.batch.v1
vars:
  target_db: target
defaults:
{name}  source:
    type: sqlite
    connection_type: params
    connection_id: '{{"path": "source.db"}}'
{source_options}  sink:
    type: sqlite
    connection_type: params
    connection_id: '{{"path": "{{{{ target_db }}}}.db"}}'
    table: {{name: "{{{{ src_table }}}}"}}
    strategy:
      mode: replace
      atomicity: target_atomic
      window: {{column: event_ts, anchor: data_interval_end, lookback: P7D}}
runtime:
  storage: {{work_dir: work}}
schemas:
  main:
    tables:
      - events
      - table: events
        id: events_b
        vars: {{target_db: target_b}}
{more_tables}"#
    )
}

/// [`sqlite_manifest`]'s `options` for frames of two rows and, with
/// `parallelism`, bounded-window chunks that many at a time.
pub fn frames_of_two(parallelism: Option<u32>) -> String {
    let mut options = "    native_transfer:\n      wire: {block_rows: 2}\n".to_string();
    if let Some(p) = parallelism {
        options += &format!("      execution:\n        chunking: {{mode: bounded_window, parallelism: {p}}}\n");
    }
    options
}

/// One SQLite value rendered with its storage class, so that `1`, `1.0`,
/// `'1'` and NULL stay distinct.
pub fn render(v: ValueRef<'_>) -> String {
    match v {
        ValueRef::Null => "null".to_string(),
        ValueRef::Integer(i) => format!("int:{i}"),
        ValueRef::Real(f) => format!("real:{f:?}"),
        ValueRef::Text(t) => format!("text:{:?}", String::from_utf8_lossy(t)),
        ValueRef::Blob(b) => format!("blob:{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>()),
    }
}

/// A row as rendered values, in column order.
pub type Row = Vec<String>;

/// An existing database, opened read-write but never created: a process
/// aborted mid-write leaves a hot journal, which the next connection rolls
/// back (SQLite's crash recovery, as dpone's next run would); a read-only
/// connection cannot, and fails with `SQLITE_READONLY_ROLLBACK`.
fn open_existing(db: &Path) -> Connection {
    Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_WRITE).unwrap_or_else(|e| panic!("open {}: {e}", db.display()))
}

/// Every row of `table` (all columns), sorted: an exact multiset.
pub fn dump(db: &Path, table: &str) -> Vec<Row> {
    let conn = open_existing(db);
    dump_conn(&conn, table)
}

pub fn dump_conn(conn: &Connection, table: &str) -> Vec<Row> {
    query_rows(conn, &format!("SELECT * FROM \"{table}\""))
}

/// The rows `sql` selects, rendered, sorted: an exact multiset.
pub fn query_rows(conn: &Connection, sql: &str) -> Vec<Row> {
    let mut stmt = conn.prepare(sql).unwrap_or_else(|e| panic!("prepare `{sql}`: {e}"));
    let n = stmt.column_count();
    let mut rows: Vec<Row> = stmt
        .query_map([], |r| (0..n).map(|i| r.get_ref(i).map(render)).collect::<rusqlite::Result<Row>>())
        .expect("query rows")
        .collect::<rusqlite::Result<_>>()
        .expect("read rows");
    rows.sort();
    rows
}

/// Index of `column` in `table`.
pub fn column_index(db: &Path, table: &str, column: &str) -> usize {
    let names = strings(db, &format!("SELECT name FROM pragma_table_info('{table}') ORDER BY cid"));
    names.iter().position(|n| n == column).unwrap_or_else(|| panic!("{table} has no column {column}: {names:?}"))
}

/// Names of tables dpone owns (`_dpone_*`) left in a database.
pub fn owned_tables(db: &Path) -> Vec<String> {
    strings(db, "SELECT name FROM sqlite_master WHERE name LIKE '\\_dpone\\_%' ESCAPE '\\' ORDER BY name")
}

/// The `CREATE` statements of a database, to prove its definition did not change.
pub fn schema_sql(db: &Path) -> Vec<String> {
    strings(db, "SELECT coalesce(sql, '') FROM sqlite_master ORDER BY type, name")
}

/// The first column of every row `sql` selects, as text.
fn strings(db: &Path, sql: &str) -> Vec<String> {
    let conn = open_existing(db);
    conn.prepare(sql)
        .unwrap_or_else(|e| panic!("prepare `{sql}`: {e}"))
        .query_map([], |r| r.get(0))
        .unwrap_or_else(|e| panic!("query `{sql}`: {e}"))
        .collect::<rusqlite::Result<_>>()
        .unwrap_or_else(|e| panic!("read `{sql}`: {e}"))
}

/// Canonical text of a window bound, as SQLite stores timestamps.
pub fn canonical(ts: &str) -> String {
    // `2026-09-02T00:00:00Z` -> `2026-09-02 00:00:00.000000`
    let body = ts.strip_suffix('Z').expect("a UTC instant ending in Z");
    let (date, time) = body.split_once('T').expect("an instant with a T");
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    format!("{date} {hms}.{frac:0<6}")
}

/// Whether a rendered window value lies in `[start, end)` (canonical text bounds).
/// NULL is never inside.
pub fn rendered_in_window(v: &str, start: &str, end: &str) -> bool {
    match v.strip_prefix("text:") {
        Some(quoted) => {
            let text: String = serde_json::from_str(quoted).expect("rendered text is a quoted string");
            text.as_str() >= start && text.as_str() < end
        }
        None => {
            assert_eq!(v, "null", "window values are canonical text or NULL");
            false
        }
    }
}

/// The expected target after a window replace: target rows outside the
/// window (NULL window values included) plus source rows inside it, with
/// multiplicity, sorted.
pub fn expected_after_replace(target_before: &[Row], source: &[Row], window_col: usize, start: &str, end: &str) -> Vec<Row> {
    let mut out: Vec<Row> = target_before.iter().filter(|r| !rendered_in_window(&r[window_col], start, end)).cloned().collect();
    out.extend(source.iter().filter(|r| rendered_in_window(&r[window_col], start, end)).cloned());
    out.sort();
    out
}

/// A readable difference between two sorted multisets of rows.
pub fn multiset_diff(expected: &[Row], actual: &[Row]) -> String {
    use std::collections::BTreeMap;
    let mut count: BTreeMap<&Row, i64> = BTreeMap::new();
    for r in expected {
        *count.entry(r).or_default() += 1;
    }
    for r in actual {
        *count.entry(r).or_default() -= 1;
    }
    let mut lines: Vec<String> = count
        .iter()
        .filter(|(_, n)| **n != 0)
        .take(20)
        .map(|(r, n)| if *n > 0 { format!("  missing x{n}: {r:?}") } else { format!("  unexpected x{}: {r:?}", -n) })
        .collect();
    if lines.is_empty() {
        lines.push("  (no difference)".into());
    }
    format!("expected {} rows, found {}\n{}", expected.len(), actual.len(), lines.join("\n"))
}
