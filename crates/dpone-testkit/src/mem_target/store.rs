//! The storage under a `MemTarget`: named tables of RowBinary rows, views
//! and a receipts table, plus the row-level operations every publication
//! model shares (filters, digests, multiplicity comparison, evidence).
//!
//! Rows are stored as the RowBinary bytes of one row under the table's own
//! columns, the way ClickHouse stores what it was sent; every read decodes
//! them, so a tampered or foreign row is seen exactly as stored.

use crate::faulty::TargetOp;
use crate::rows::{Row, add_to_digest, decode};
use dpone_core::Diagnostic;
use dpone_core::digest::RowDigest;
use dpone_core::ports::{AdapterError, Contents, Result, RowFilter, WindowStats};
use dpone_core::time::Timestamp;
use dpone_core::types::{Column, ColumnType};
use dpone_core::value::Value;
use std::collections::{BTreeMap, HashMap};

/// One receipt row of the `InPlaceReceipt` model (PostgreSQL's `_dpone_receipts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub target: String,
    pub generation: String,
    pub rows: u64,
}

/// A call the target received, with the tables it named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetCall {
    pub op: TargetOp,
    pub tables: Vec<String>,
}

#[derive(Debug, Clone)]
pub(crate) enum Body {
    Rows(Vec<Vec<u8>>),
    /// `UNION ALL` of these tables' rows, read when the view is read.
    View(Vec<String>),
    Receipts(Vec<Receipt>),
}

#[derive(Debug, Clone)]
pub(crate) struct Table {
    /// Object identity: stays with the table through renames and exchanges.
    pub id: u64,
    pub columns: Vec<Column>,
    pub body: Body,
    pub comment: Option<String>,
    /// The target's kept rows when an in-place generation was built: what
    /// `compare_kept` and the publication compare against, since such a
    /// generation holds only the window's rows (PostgreSQL's fingerprint of
    /// the kept rows).
    pub kept_at_build: Option<Vec<Vec<u8>>>,
    /// `InPlaceReceipt`: the rows `inspect` verified (a staging table), or
    /// their union (a generation): what the publication compares the rows
    /// it inserts with (PostgreSQL's recorded fingerprints).
    pub verified_rows: Option<Vec<Vec<u8>>>,
}

#[derive(Debug)]
pub(crate) struct Db {
    pub tables: BTreeMap<String, Table>,
    pub next_id: u64,
    pub calls: Vec<TargetCall>,
    pub refusals: Vec<Diagnostic>,
    pub compare_kept_gap: bool,
    /// `InPlaceReceipt` only: publish directly (`publication: direct`).
    pub direct: bool,
    /// A direct publication inserts a copy of the first row of each chunk
    /// (a trigger of the target, for tests of the chunk check).
    pub direct_tamper: bool,
    /// What `datetime64_range` reports (a server with a narrower range).
    pub datetime64_range: Option<dpone_core::rowbinary::DateTime64Range>,
    /// `incremental_append`: the stored high-water mark of the target
    /// (its `_dpone_marks` row), written in the publishing step.
    pub mark: Option<dpone_core::incremental::StoredMark>,
    /// The target's claim (its claims row) and the fence of its last grant.
    pub claim: Option<dpone_core::ports::ClaimRecord>,
    pub claim_fence: u64,
}

pub(crate) fn unknown_table(name: &str) -> AdapterError {
    AdapterError::permanent("mem_unknown_table", format!("table `{name}` does not exist"))
}

pub(crate) fn table_exists(name: &str) -> AdapterError {
    AdapterError::permanent("mem_table_exists", format!("table `{name}` already exists"))
}

impl Db {
    pub fn new() -> Self {
        Db {
            tables: BTreeMap::new(),
            next_id: 1,
            calls: Vec::new(),
            refusals: Vec::new(),
            compare_kept_gap: false,
            direct: false,
            direct_tamper: false,
            datetime64_range: None,
            mark: None,
            claim: None,
            claim_fence: 0,
        }
    }

    /// Creates `name`; an existing table of that name is an error.
    pub fn create(&mut self, name: &str, columns: Vec<Column>, body: Body) -> Result<()> {
        if self.tables.contains_key(name) {
            return Err(table_exists(name));
        }
        let id = self.next_id;
        self.next_id += 1;
        self.tables.insert(name.to_string(), Table { id, columns, body, comment: None, kept_at_build: None, verified_rows: None });
        Ok(())
    }

    pub fn get(&self, name: &str) -> Result<&Table> {
        self.tables.get(name).ok_or_else(|| unknown_table(name))
    }

    /// The stored rows of a plain table (not a view).
    pub fn rows_mut(&mut self, name: &str) -> Result<&mut Vec<Vec<u8>>> {
        match self.tables.get_mut(name).map(|t| &mut t.body) {
            Some(Body::Rows(r)) => Ok(r),
            Some(_) => Err(AdapterError::permanent("mem_not_a_table", format!("`{name}` is not a table that holds rows"))),
            None => Err(unknown_table(name)),
        }
    }

    /// The rows `name` shows (a view's are its tables' rows, read now).
    pub fn read(&self, name: &str) -> Result<(Vec<Column>, Vec<Vec<u8>>)> {
        let t = self.get(name)?;
        match &t.body {
            Body::Rows(r) => Ok((t.columns.clone(), r.clone())),
            Body::View(over) => {
                let mut all = Vec::new();
                for s in over {
                    match &self.get(s)?.body {
                        Body::Rows(r) => all.extend(r.iter().cloned()),
                        _ => return Err(AdapterError::permanent("mem_not_a_table", format!("view `{name}` reads `{s}`, not a table"))),
                    }
                }
                Ok((t.columns.clone(), all))
            }
            Body::Receipts(_) => Err(AdapterError::permanent("mem_not_a_table", format!("`{name}` is the receipts table"))),
        }
    }

    /// Views (other than those in `except`) that read `name`.
    pub fn views_over(&self, name: &str, except: &[String]) -> Vec<String> {
        self.tables
            .iter()
            .filter(|(v, t)| matches!(&t.body, Body::View(over) if over.iter().any(|s| s == name)) && !except.contains(v))
            .map(|(v, _)| v.clone())
            .collect()
    }
}

/// Decodes a stored row of `columns`.
pub(crate) fn decode_stored(columns: &[Column], bytes: &[u8]) -> Result<Row> {
    let types: Vec<ColumnType> = columns.iter().map(|c| c.ty.clone()).collect();
    decode(&types, bytes).map_err(|e| AdapterError::permanent("mem_corrupt_row", format!("a stored row does not decode: {e}")))
}

/// Position of `filter`'s column in `columns`.
fn window_index(columns: &[Column], column: &str) -> Result<usize> {
    columns
        .iter()
        .position(|c| c.name == column)
        .ok_or_else(|| AdapterError::permanent("mem_unknown_column", format!("no column `{column}`")))
}

/// The window column's value as a timestamp; None for NULL.
fn window_value(row: &[Value], i: usize) -> Result<Option<Timestamp>> {
    match &row[i] {
        Value::Null => Ok(None),
        Value::Micros(m) => Ok(Some(Timestamp(*m))),
        Value::Seconds(s) => Ok(Some(Timestamp(s * 1_000_000))),
        v => Err(AdapterError::permanent("mem_window_type", format!("window value {v} is not a timestamp"))),
    }
}

/// Whether a row falls in `[start, end)`; NULL never does.
/// The rows of `rows` that `filter` selects (all when None): inside =
/// `start <= v < end`; outside = the rest, NULL window values included.
pub(crate) fn select(columns: &[Column], rows: Vec<Vec<u8>>, filter: Option<&RowFilter>) -> Result<Vec<Vec<u8>>> {
    let Some(f) = filter else { return Ok(rows) };
    let i = window_index(columns, &f.column)?;
    let mut out = Vec::new();
    for r in rows {
        let ts = window_value(&decode_stored(columns, &r)?, i)?;
        if f.selects(ts) {
            out.push(r);
        }
    }
    Ok(out)
}

/// Count and digest of stored rows, as a target computes them on read-back.
pub(crate) fn contents(columns: &[Column], ncols: usize, rows: &[Vec<u8>]) -> Result<Contents> {
    let mut digest = RowDigest::new(ncols);
    for r in rows {
        let values = decode_stored(columns, r)?;
        add_to_digest(&mut digest, r, &values[..ncols.min(values.len())]);
    }
    Ok(Contents { rows: digest.rows, digest })
}

/// Row groups whose multiplicity differs between two multisets of rows
/// (`GROUP BY all columns HAVING sum(+1 / -1) != 0`).
pub(crate) fn multiplicity_difference(a: &[Vec<u8>], b: &[Vec<u8>]) -> u64 {
    let mut net: HashMap<&[u8], i64> = HashMap::new();
    for r in a {
        *net.entry(r).or_default() += 1;
    }
    for r in b {
        *net.entry(r).or_default() -= 1;
    }
    net.values().filter(|n| **n != 0).count() as u64
}

/// Evidence facts over `rows` for the window of `filter`.
pub(crate) fn window_stats(columns: &[Column], rows: &[Vec<u8>], filter: &RowFilter) -> Result<WindowStats> {
    let i = window_index(columns, &filter.column)?;
    let mut s = WindowStats::default();
    let inside = RowFilter { inside: true, ..filter.clone() };
    for r in rows {
        let ts = window_value(&decode_stored(columns, r)?, i)?;
        s.total_rows += 1;
        match ts {
            None => s.null_window_rows += 1,
            Some(t) if inside.selects(Some(t)) => {
                s.window_rows += 1;
                *s.rows_per_utc_day.entry(t.to_canonical()[..10].to_string()).or_default() += 1;
                s.min = Some(s.min.map_or(t, |m| m.min(t)));
                s.max = Some(s.max.map_or(t, |m| m.max(t)));
            }
            Some(_) => {}
        }
    }
    s.outside_rows = s.total_rows - s.window_rows;
    Ok(s)
}
