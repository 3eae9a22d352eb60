//! The merge scenarios' rows and model: `(id, region, ver, ts, name)`,
//! the key `id` (or `region, id`), the cursor `ver`.

use super::{Cell, IncrementalRoute, Row, id_of};
use crate::harness::Run;
use std::collections::BTreeMap;

/// The key `id`.
pub const ID: &[usize] = &[0];
/// The key `region, id`.
pub const REGION_ID: &[usize] = &[1, 0];
/// The cursor's column.
const VER: usize = 2;

/// Key `id` in region `eu`, version `ver`, at midnight of day `day` of September 2026.
pub fn mrow(id: i64, ver: i64, day: u32, name: &str) -> Row {
    mrow_in(id, "eu", ver, day, name)
}

pub fn mrow_in(id: i64, region: &str, ver: i64, day: u32, name: &str) -> Row {
    vec![Cell::Int(id), Cell::Text(region.into()), Cell::Int(ver), Cell::At(format!("2026-09-{day:02} 00:00:00")), Cell::Text(name.into())]
}

/// A row without a key.
pub fn null_key_row(ver: i64, day: u32, name: &str) -> Row {
    let mut r = mrow(0, ver, day, name);
    r[0] = Cell::Null;
    r
}

/// A row without a cursor value.
pub fn null_cursor_row(id: i64, name: &str) -> Row {
    let mut r = mrow(id, 0, 1, name);
    r[VER] = Cell::Null;
    r
}

fn ver_of(r: &Row) -> i64 {
    match r[VER] {
        Cell::Int(v) => v,
        ref other => panic!("expected an integer version, got {other:?}"),
    }
}

fn key_of(key: &[usize], r: &Row) -> String {
    format!("{:?}", key.iter().map(|i| &r[*i]).collect::<Vec<_>>())
}

/// The source as the test wrote it, row for row.
#[derive(Default, Clone)]
pub struct Versions {
    pub rows: Vec<Row>,
}

impl Versions {
    pub fn insert<R: IncrementalRoute>(&mut self, fx: &R, rows: &[Row]) {
        fx.insert_source(rows);
        self.rows.extend(rows.iter().cloned());
    }

    /// Key `id_of(to)`'s new version: its rows updated in place where the
    /// source takes an update, else a new row.
    pub fn new_version<R: IncrementalRoute>(&mut self, fx: &R, to: Row) {
        if !R::UPDATES_IN_PLACE {
            return self.insert(fx, &[to]);
        }
        let id = id_of(&to).expect("a key");
        fx.update_source(id, &to);
        for r in self.rows.iter_mut().filter(|r| id_of(r) == Some(id)) {
            *r = to.clone();
        }
    }

    /// The rows a batch `(after, upto]` reads (`after` None: from the start).
    pub fn batch(&self, after: Option<i64>, upto: i64) -> Vec<Row> {
        self.rows.iter().filter(|r| after.is_none_or(|a| ver_of(r) > a) && ver_of(r) <= upto).cloned().collect()
    }

    pub fn max(&self) -> Option<i64> {
        self.rows.iter().map(ver_of).max()
    }

    /// Whether key `id` has a row at version `ver`.
    pub fn holds(&self, id: i64, ver: i64) -> bool {
        self.rows.iter().any(|r| id_of(r) == Some(id) && ver_of(r) == ver)
    }
}

/// Per key of the batch, its row at the greatest version.
fn resolved(batch: &[Row], key: &[usize]) -> BTreeMap<String, Row> {
    let mut best: BTreeMap<String, Row> = BTreeMap::new();
    for r in batch {
        let k = key_of(key, r);
        if best.get(&k).is_none_or(|old| ver_of(old) < ver_of(r)) {
            best.insert(k, r.clone());
        }
    }
    best
}

/// The target after merging `batch` into `target`: per key of the batch
/// its row at the greatest version replaces every target row of that key.
pub fn merged(target: &[Row], batch: &[Row], key: &[usize]) -> Vec<Row> {
    let resolved = resolved(batch, key);
    let mut out: Vec<Row> = target.iter().filter(|r| !resolved.contains_key(&key_of(key, r))).cloned().collect();
    out.extend(resolved.into_values());
    out
}

/// What a merge of `batch` into `target` reports: the rows it writes (one
/// per key) and the target rows it replaces.
pub fn counts(target: &[Row], batch: &[Row], key: &[usize]) -> (u64, u64) {
    let resolved = resolved(batch, key);
    let replaced = target.iter().filter(|r| resolved.contains_key(&key_of(key, r))).count();
    (resolved.len() as u64, replaced as u64)
}

/// A successful merge: the target is exactly `want`, the mark `mark`, the
/// report's counts `(written, replaced)`. As the original reports a merge,
/// the replaced rows are `updated_rows` and only the others `inserted_rows`.
pub fn check_merge<R: IncrementalRoute>(fx: &R, run: &Run, want: &[Row], mark: i64, counts: (u64, u64), what: &str) -> serde_json::Value {
    let doc = check_rows(fx, run, want, mark, what);
    let (written, replaced) = counts;
    assert_eq!(doc["inserted_rows"], written.saturating_sub(replaced), "{what}: inserted_rows: {doc:#}");
    assert_eq!(doc["result"]["inserted_rows"], written.saturating_sub(replaced), "{what}: result.inserted_rows: {doc:#}");
    assert_eq!(doc["result"]["updated_rows"], replaced, "{what}: result.updated_rows: {doc:#}");
    assert_eq!(doc["replaced_rows"], replaced, "{what}: replaced_rows: {doc:#}");
    assert_eq!(doc["incremental"]["rows_replaced"], replaced, "{what}: incremental.rows_replaced: {doc:#}");
    super::check_final_rows::<R>(&doc, want.len(), what);
    assert_eq!(doc["incremental"]["new_mark"]["value"].to_string(), mark.to_string(), "{what}: the report's new mark: {doc:#}");
    doc
}

/// A successful merge left exactly `want` and the mark `mark`, and no
/// staging or generation table.
pub fn check_rows<R: IncrementalRoute>(fx: &R, run: &Run, want: &[Row], mark: i64, what: &str) -> serde_json::Value {
    let doc = run.assert_succeeded(what);
    fx.assert_target(want, &format!("{what}: target = the model"));
    assert_eq!(fx.mark_value(), Some(mark.to_string()), "{what}: expected the stored mark {mark}");
    assert_eq!(fx.leftovers(), Vec::<String>::new(), "{what}: expected no staging or generation table after success");
    doc
}
