//! SQLite source: one read transaction shared by every chunk.
//!
//! `open_snapshot` opens a read-only connection and starts a read
//! transaction; every chunk read runs on that connection, so all chunks see
//! one version of the file. The version id is derived from the file's state
//! (size, modification time, SQLite's change counter), so a restarted run
//! can tell whether the file changed since.

use crate::config::SqliteConfig;
use crate::error::{classify, join_error};
use crate::types::{map_declared_type, quote_ident, read_value};
use dpone_core::digest::RowDigest;
use dpone_core::frames::{FrameLimits, RowFrames};
use dpone_core::incremental::{CursorKind, CursorValue, Lower};
use dpone_core::ports::{AdapterError, FrameTx, ReadRequest, ReadStats, Result, Source, SourceVersion, select_named};
use dpone_core::rowbinary::encode_value;
use dpone_core::time::Timestamp;
use dpone_core::types::{Column, ColumnType};
use dpone_core::value::{format_date, parse_date};
use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{Connection, OpenFlags};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::sync::{Arc, Mutex};

/// Frames are flushed at this size (or earlier at `block_rows`).
const FLUSH_BYTES: usize = 1 << 20;

pub struct SqliteSource {
    config: SqliteConfig,
    window_column: Option<String>,
    /// `incremental_append`'s cursor column (its values are checked by
    /// `preflight` and again in the snapshot by `cursor_max`).
    cursor_column: Option<String>,
    snapshot: Arc<Mutex<Option<Connection>>>,
}

impl SqliteSource {
    pub fn new(config: SqliteConfig, window_column: Option<String>) -> Self {
        SqliteSource { config, window_column, cursor_column: None, snapshot: Arc::new(Mutex::new(None)) }
    }

    /// The source of an `incremental_append` with cursor `column`.
    pub fn with_cursor(mut self, column: Option<String>) -> Self {
        self.cursor_column = column;
        self
    }

    fn table_sql(&self) -> String {
        format!("{}.{}", quote_ident(self.schema()), quote_ident(&self.config.table.name))
    }

    fn open(&self) -> Result<Connection> {
        if !self.config.path.exists() {
            return Err(AdapterError::permanent(
                "source_missing",
                format!("the SQLite source {} does not exist", self.config.path.display()),
            )
            .hint("check source.connection (relative paths are relative to the manifest)"));
        }
        Connection::open_with_flags(&self.config.path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
            .map_err(|e| classify("opening the SQLite source", e))
    }

    fn schema(&self) -> &str {
        self.config.table.schema.as_deref().unwrap_or("main")
    }
}

/// Columns of `schema.table` as declared, mapped to canonical types.
pub(crate) fn describe_table(conn: &Connection, schema: &str, table: &str, side: &str) -> Result<Option<Vec<Column>>> {
    declared_columns(conn, schema, table)?.map(|rows| rows.into_iter().map(|d| d.column(side)).collect()).transpose()
}

/// A column as the table declares it, before its type is mapped.
#[derive(Clone)]
pub(crate) struct Declared {
    name: String,
    decl: String,
    notnull: bool,
}

impl Declared {
    /// The column with its canonical type; an unsupported declaration is
    /// refused naming the column.
    fn column(self, side: &str) -> Result<Column> {
        let Declared { name, decl, notnull } = self;
        let dtype = map_declared_type(&decl).map_err(|reason| {
            AdapterError::permanent("unsupported_type", format!("{side} column `{name}` ({decl}): {reason}"))
                .hint(if side == "source" {
                    "see `dpone schema type-matrix` for the SQLite types dpone moves exactly; exclude the column with source.options.columns or cast it in a view"
                } else {
                    "see `dpone schema type-matrix` for the SQLite types dpone moves exactly"
                })
        })?;
        Ok(Column { name, ty: ColumnType::new(dtype, !notnull), native_type: decl })
    }
}

/// The table's columns as declared, in order; None when it does not exist.
fn declared_columns(conn: &Connection, schema: &str, table: &str) -> Result<Option<Vec<Declared>>> {
    let mut stmt = conn
        .prepare("SELECT name, type, \"notnull\" FROM pragma_table_info(?1, ?2) ORDER BY cid")
        .map_err(|e| classify("reading the table definition", e))?;
    let rows: Vec<(String, String, bool)> = stmt
        .query_map([table, schema], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .and_then(|rows| rows.collect())
        .map_err(|e| classify("reading the table definition", e))?;
    Ok((!rows.is_empty()).then(|| rows.into_iter().map(|(name, decl, notnull)| Declared { name, decl, notnull }).collect()))
}

/// Reads one row's values as `source` types and appends them encoded as
/// `target` types; NULLs are counted into `digest`. `ordinal` (1-based, in
/// its read) names the row a NULL for a NOT NULL column was found in.
pub(crate) fn encode_row(
    row: &rusqlite::Row,
    source: &[Column],
    target: &[ColumnType],
    out: &mut Vec<u8>,
    digest: &mut RowDigest,
    ordinal: Option<u64>,
) -> Result<()> {
    let start = out.len();
    for (i, (col, ty)) in source.iter().zip(target).enumerate() {
        let raw = row.get_ref(i).map_err(|e| classify("reading a row", e))?;
        let value = read_value(raw, &col.ty).map_err(|reason| {
            AdapterError::permanent("invalid_value", format!("column `{}` {reason}", col.name))
                .hint("fix the stored value; dpone never coerces")
        })?;
        if value.is_null() {
            if !ty.nullable {
                let e = dpone_core::frames::TranscodeError::null_into_not_null(col.name.as_str());
                return Err(match ordinal {
                    Some(n) => e.at_row(n),
                    None => e,
                }
                .into_read_error());
            }
            digest.add_null(i);
        }
        encode_value(out, ty, &value).map_err(|e| AdapterError::permanent("invalid_value", format!("column `{}`: {e}", col.name)))?;
    }
    digest.add_row(&out[start..]);
    Ok(())
}

/// `SELECT "a", "b" FROM "schema"."table"`.
pub(crate) fn select_list(columns: &[Column]) -> String {
    columns.iter().map(|c| quote_ident(&c.name)).collect::<Vec<_>>().join(", ")
}

/// Pattern of the canonical timestamp text; anything else is refused.
pub(crate) const CANONICAL_TS_GLOB: &str =
    "[0-9][0-9][0-9][0-9]-[0-1][0-9]-[0-3][0-9] [0-2][0-9]:[0-5][0-9]:[0-6][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]";

/// Refuses a window column holding anything but canonical UTC timestamp
/// text: range predicates on text are only correct for that form.
pub(crate) fn check_window_values(conn: &Connection, table_sql: &str, column: &str, side: &str) -> Result<()> {
    match malformed_window_value(conn, table_sql, column)? {
        Some(v) => Err(malformed_window_values(side, column, &v)),
        None => Ok(()),
    }
}

/// A value of the window column that is not canonical UTC timestamp text, if any.
fn malformed_window_value(conn: &Connection, table_sql: &str, column: &str) -> Result<Option<String>> {
    let col = quote_ident(column);
    let sql = format!(
        "SELECT CAST({col} AS TEXT) FROM {table_sql} WHERE {col} IS NOT NULL AND (typeof({col}) <> 'text' OR {col} NOT GLOB '{CANONICAL_TS_GLOB}') LIMIT 1"
    );
    conn.query_row(&sql, [], |r| r.get(0))
        .map(Some)
        .or_else(|e| if let rusqlite::Error::QueryReturnedNoRows = e { Ok(None) } else { Err(e) })
        .map_err(|e| classify("checking window values", e))
}

fn malformed_window_values(side: &str, column: &str, value: &str) -> AdapterError {
    AdapterError::permanent(
        "malformed_window_values",
        format!("{side} window column `{column}` holds `{value}`, which is not a UTC timestamp `YYYY-MM-DD HH:MM:SS.ffffff`"),
    )
    .hint("store window timestamps in the canonical text form so that range predicates select exactly")
}

/// The SQL value a cursor value is stored as (see `types`): integers as
/// INTEGER, timestamps and dates as their canonical text, whose order is
/// their time order once [`check_cursor_values`] passed.
pub(crate) fn cursor_sql(v: &CursorValue) -> SqlValue {
    match v {
        CursorValue::Integer(i) => SqlValue::Integer(*i),
        CursorValue::Timestamp(t) => SqlValue::Text(t.to_canonical()),
        CursorValue::Date(d) => SqlValue::Text(format_date(*d)),
    }
}

fn cursor_from_sql(raw: ValueRef, kind: CursorKind, column: &str) -> Result<CursorValue> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let v = match (kind, raw) {
        (CursorKind::Integer, ValueRef::Integer(i)) => Some(CursorValue::Integer(i)),
        (CursorKind::Timestamp, ValueRef::Text(b)) => Timestamp::parse_canonical(&text(b)).map(CursorValue::Timestamp),
        (CursorKind::Date, ValueRef::Text(b)) => parse_date(&text(b)).map(CursorValue::Date),
        _ => None,
    };
    v.ok_or_else(|| {
        AdapterError::permanent("invalid_value", format!("cursor column `{column}` holds a value that is not a {}", kind.as_str()))
    })
}

/// Refuses a cursor column with a NULL (such a row is never selected by a
/// cursor range, so it would silently never be moved) or with a value not
/// stored in the form whose SQL order is the cursor's order.
pub(crate) fn check_cursor_values(conn: &Connection, table_sql: &str, column: &str, kind: CursorKind) -> Result<()> {
    let col = quote_ident(column);
    let nulls: i64 = conn
        .query_row(&format!("SELECT count(*) FROM {table_sql} WHERE {col} IS NULL"), [], |r| r.get(0))
        .map_err(|e| classify("checking cursor values", e))?;
    if nulls > 0 {
        return Err(AdapterError::permanent(
            "incremental_cursor_null",
            format!("cursor column `{column}` is NULL in {nulls} source rows; an append selects rows by cursor and would never move them"),
        )
        .hint("give those rows a cursor value (or name a NOT NULL column as source.options.incremental_column); nothing was written"));
    }
    match kind {
        CursorKind::Timestamp => check_window_values(conn, table_sql, column, "source cursor"),
        CursorKind::Integer | CursorKind::Date => {
            let bad = match kind {
                CursorKind::Integer => format!("typeof({col}) <> 'integer'"),
                _ => format!("typeof({col}) <> 'text' OR {col} NOT GLOB '[0-9][0-9][0-9][0-9]-[0-1][0-9]-[0-3][0-9]'"),
            };
            let found: Option<String> = conn
                .query_row(&format!("SELECT CAST({col} AS TEXT) FROM {table_sql} WHERE {bad} LIMIT 1"), [], |r| r.get(0))
                .map(Some)
                .or_else(|e| if let rusqlite::Error::QueryReturnedNoRows = e { Ok(None) } else { Err(e) })
                .map_err(|e| classify("checking cursor values", e))?;
            match found {
                Some(v) => Err(AdapterError::permanent(
                    "malformed_cursor_values",
                    format!("cursor column `{column}` holds `{v}`, which is not stored as a {}", kind.as_str()),
                )
                .hint("store cursor values in the column's declared form (INTEGER, or YYYY-MM-DD text for DATE)")),
                None => Ok(()),
            }
        }
    }
}

fn file_version(path: &std::path::Path) -> std::io::Result<String> {
    let mut h = Sha256::new();
    for p in [path.to_path_buf(), path.with_extension(format!("{}-wal", path.extension().and_then(|e| e.to_str()).unwrap_or("")))] {
        if let Ok(meta) = std::fs::metadata(&p) {
            h.update(meta.len().to_le_bytes());
            let mtime = meta.modified()?.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            h.update(mtime.as_nanos().to_le_bytes());
        }
    }
    let mut header = [0u8; 100];
    let mut f = std::fs::File::open(path)?;
    let n = f.read(&mut header)?;
    h.update(&header[..n]);
    Ok(format!("sqlite-file:{}", &format!("{:x}", h.finalize())[..24]))
}

impl Source for SqliteSource {
    async fn describe(&self, columns: Option<&[String]>) -> Result<Vec<Column>> {
        let conn = self.open()?;
        let all = declared_columns(&conn, self.schema(), &self.config.table.name)?.ok_or_else(|| {
            AdapterError::permanent("source_table_missing", format!("source table {} does not exist", self.config.table))
                .hint("check source.table")
        })?;
        // Only the columns read are mapped: one left out may have any type.
        select_named(all, |d| &d.name, columns)?.into_iter().map(|d| d.column("source")).collect()
    }

    async fn preflight(&self, window_column: Option<&str>) -> Result<Vec<dpone_core::Diagnostic>> {
        if let Some(cursor) = self.cursor_column.clone() {
            let conn = self.open()?;
            let (schema, table, table_sql) = (self.schema().to_string(), self.config.table.name.clone(), self.table_sql());
            return tokio::task::spawn_blocking(move || {
                let columns = describe_table(&conn, &schema, &table, "source")?.unwrap_or_default();
                // A missing column or one of another type is the probe's refusal.
                let Some(kind) = columns.iter().find(|c| c.name == cursor).and_then(|c| CursorKind::of(&c.ty.dtype)) else {
                    return Ok(Vec::new());
                };
                match check_cursor_values(&conn, &table_sql, &cursor, kind) {
                    Ok(()) => Ok(Vec::new()),
                    Err(e) if e.class == dpone_core::ports::ErrorClass::Permanent => {
                        let mut d = dpone_core::Diagnostic::new(e.code, "source.options.incremental_column", e.message);
                        d.hint = e.hint;
                        Ok(vec![d])
                    }
                    Err(e) => Err(e),
                }
            })
            .await
            .map_err(join_error)?;
        }
        let Some(col) = window_column.map(str::to_string) else { return Ok(Vec::new()) };
        let conn = self.open()?;
        let table_sql = format!("{}.{}", quote_ident(self.schema()), quote_ident(&self.config.table.name));
        tokio::task::spawn_blocking(move || match malformed_window_value(&conn, &table_sql, &col)? {
            None => Ok(Vec::new()),
            Some(v) => {
                let e = malformed_window_values("source", &col, &v);
                let mut d = dpone_core::Diagnostic::new(e.code, "sink.strategy.window.column", e.message);
                d.hint = e.hint;
                Ok(vec![d])
            }
        })
        .await
        .map_err(join_error)?
    }

    async fn open_snapshot(&self) -> Result<SourceVersion> {
        let conn = self.open()?;
        let path = self.config.path.clone();
        let table_sql = format!("{}.{}", quote_ident(self.schema()), quote_ident(&self.config.table.name));
        let window_column = self.window_column.clone();
        let slot = self.snapshot.clone();
        tokio::task::spawn_blocking(move || {
            conn.execute_batch("BEGIN").map_err(|e| classify("starting the read transaction", e))?;
            // The read transaction starts at the first read.
            let version =
                file_version(&path).map_err(|e| AdapterError::permanent("source_io", format!("reading {}: {e}", path.display())))?;
            conn.query_row(&format!("SELECT count(*) FROM {table_sql}"), [], |r| r.get::<_, i64>(0))
                .map_err(|e| classify("starting the read transaction", e))?;
            if let Some(col) = &window_column {
                check_window_values(&conn, &table_sql, col, "source")?;
            }
            *slot.lock().expect("snapshot lock") = Some(conn);
            Ok(SourceVersion { id: version, durable: true })
        })
        .await
        .map_err(join_error)?
    }

    async fn cursor_max(&self, column: &str, kind: CursorKind) -> Result<Option<CursorValue>> {
        let slot = self.snapshot.clone();
        let (table_sql, column) = (self.table_sql(), column.to_string());
        tokio::task::spawn_blocking(move || {
            let guard = slot.lock().expect("snapshot lock");
            let conn = guard.as_ref().ok_or_else(|| AdapterError::permanent("internal_error", "cursor_max before open_snapshot"))?;
            // Checked again in the snapshot the batch is read from: a row
            // written since the probe cannot slip through.
            check_cursor_values(conn, &table_sql, &column, kind)?;
            let sql = format!("SELECT max({}) FROM {table_sql}", quote_ident(&column));
            conn.query_row(&sql, [], |r| {
                Ok(match r.get_ref(0)? {
                    ValueRef::Null => Ok(None),
                    raw => cursor_from_sql(raw, kind, &column).map(Some),
                })
            })
            .map_err(|e| classify("reading the cursor's maximum", e))?
        })
        .await
        .map_err(join_error)?
    }

    async fn read(&self, request: ReadRequest, out: FrameTx) -> Result<ReadStats> {
        let slot = self.snapshot.clone();
        let table_sql = format!("{}.{}", quote_ident(self.schema()), quote_ident(&self.config.table.name));
        tokio::task::spawn_blocking(move || {
            let guard = slot.lock().expect("snapshot lock");
            let conn = guard.as_ref().ok_or_else(|| AdapterError::permanent("internal_error", "read before open_snapshot"))?;
            let mut sql = format!("SELECT {} FROM {table_sql}", select_list(&request.columns));
            let mut params: Vec<SqlValue> = Vec::new();
            if let Some((col, chunk)) = &request.bounds {
                let c = quote_ident(col);
                sql.push_str(&format!(" WHERE {c} >= ?1 AND {c} < ?2"));
                params.push(SqlValue::Text(chunk.start.to_canonical()));
                params.push(SqlValue::Text(chunk.end.to_canonical()));
            }
            if let Some(batch) = &request.cursor {
                let c = quote_ident(&batch.column);
                // Upper bound: the snapshot maximum, inclusive; none = no row.
                let upper = match batch.snapshot_max {
                    Some(max) => {
                        params.push(cursor_sql(&max));
                        format!("{c} <= ?{}", params.len())
                    }
                    None => "0".to_string(),
                };
                let lower = match batch.lower {
                    Lower::Unbounded => format!("{c} IS NOT NULL"),
                    Lower::AtLeast(v) => {
                        params.push(cursor_sql(&v));
                        format!("{c} >= ?{}", params.len())
                    }
                    Lower::After(v) => {
                        params.push(cursor_sql(&v));
                        format!("{c} > ?{}", params.len())
                    }
                };
                sql.push_str(&format!("{} {lower} AND {upper}", if request.bounds.is_some() { " AND" } else { " WHERE" }));
            }
            let mut stmt = conn.prepare(&sql).map_err(|e| classify("preparing the chunk query", e))?;
            let mut rows = stmt.query(rusqlite::params_from_iter(params.iter())).map_err(|e| classify("reading the chunk", e))?;
            let ncols = request.columns.len();
            let mut frames = RowFrames::new(&out, ncols, FrameLimits::new(&request, FLUSH_BYTES))?;
            let mut row_buf = Vec::new();
            let mut row_digest = RowDigest::with(request.digest, ncols);
            let mut ordinal = 0;
            while let Some(row) = rows.next().map_err(|e| classify("reading the chunk", e))? {
                row_buf.clear();
                row_digest.clear();
                ordinal += 1;
                // The row is encoded once; its size then decides the framing.
                encode_row(row, &request.columns, &request.target_types, &mut row_buf, &mut row_digest, Some(ordinal))?;
                frames.push(&row_buf, &row_digest)?;
            }
            frames.finish()
        })
        .await
        .map_err(join_error)?
    }

    async fn close_snapshot(&self) -> Result<()> {
        if let Some(conn) = self.snapshot.lock().expect("snapshot lock").take() {
            let _ = conn.execute_batch("COMMIT");
        }
        Ok(())
    }
}
