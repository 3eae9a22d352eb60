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
use dpone_core::ports::{AdapterError, FrameTx, ReadRequest, ReadStats, Result, Source, SourceVersion, select_columns};
use dpone_core::rowbinary::encode_value;
use dpone_core::types::{Column, ColumnType};
use rusqlite::{Connection, OpenFlags};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::sync::{Arc, Mutex};

/// Frames are flushed at this size (or earlier at `block_rows`).
const FLUSH_BYTES: usize = 1 << 20;

pub struct SqliteSource {
    config: SqliteConfig,
    window_column: Option<String>,
    snapshot: Arc<Mutex<Option<Connection>>>,
}

impl SqliteSource {
    pub fn new(config: SqliteConfig, window_column: Option<String>) -> Self {
        SqliteSource { config, window_column, snapshot: Arc::new(Mutex::new(None)) }
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
    let mut stmt = conn
        .prepare("SELECT name, type, \"notnull\" FROM pragma_table_info(?1, ?2) ORDER BY cid")
        .map_err(|e| classify("reading the table definition", e))?;
    let rows: Vec<(String, String, bool)> = stmt
        .query_map([table, schema], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .and_then(|rows| rows.collect())
        .map_err(|e| classify("reading the table definition", e))?;
    if rows.is_empty() {
        return Ok(None);
    }
    rows.into_iter()
        .map(|(name, decl, notnull)| {
            let dtype = map_declared_type(&decl).map_err(|reason| {
                AdapterError::permanent("unsupported_type", format!("{side} column `{name}` ({decl}): {reason}"))
                    .hint("see `dpone schema type-matrix` for the SQLite types dpone moves exactly")
            })?;
            Ok(Column { name, ty: ColumnType::new(dtype, !notnull), native_type: decl })
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// Reads one row's values as `source` types and appends them encoded as
/// `target` types; NULLs are counted into `digest`.
pub(crate) fn encode_row(
    row: &rusqlite::Row,
    source: &[Column],
    target: &[ColumnType],
    out: &mut Vec<u8>,
    digest: &mut RowDigest,
) -> Result<()> {
    let start = out.len();
    for (i, (col, ty)) in source.iter().zip(target).enumerate() {
        let raw = row.get_ref(i).map_err(|e| classify("reading a row", e))?;
        let value = read_value(raw, &col.ty).map_err(|reason| {
            AdapterError::permanent("invalid_value", format!("column `{}` {reason}", col.name))
                .hint("fix the stored value; dpone never coerces")
        })?;
        if value.is_null() {
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
    let col = quote_ident(column);
    let sql = format!(
        "SELECT CAST({col} AS TEXT) FROM {table_sql} WHERE {col} IS NOT NULL AND (typeof({col}) <> 'text' OR {col} NOT GLOB '{CANONICAL_TS_GLOB}') LIMIT 1"
    );
    let bad: Option<String> = conn
        .query_row(&sql, [], |r| r.get(0))
        .map(Some)
        .or_else(|e| if let rusqlite::Error::QueryReturnedNoRows = e { Ok(None) } else { Err(e) })
        .map_err(|e| classify("checking window values", e))?;
    match bad {
        Some(v) => Err(AdapterError::permanent(
            "malformed_window_values",
            format!("{side} window column `{column}` holds `{v}`, which is not a UTC timestamp `YYYY-MM-DD HH:MM:SS.ffffff`"),
        )
        .hint("store window timestamps in the canonical text form so that range predicates select exactly")),
        None => Ok(()),
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
        let all = describe_table(&conn, self.schema(), &self.config.table.name, "source")?.ok_or_else(|| {
            AdapterError::permanent("source_table_missing", format!("source table {} does not exist", self.config.table))
                .hint("check source.table")
        })?;
        select_columns(all, columns)
    }

    async fn preflight(&self, window_column: Option<&str>) -> Result<Vec<dpone_core::Diagnostic>> {
        let Some(col) = window_column.map(str::to_string) else { return Ok(Vec::new()) };
        let conn = self.open()?;
        let table_sql = format!("{}.{}", quote_ident(self.schema()), quote_ident(&self.config.table.name));
        tokio::task::spawn_blocking(move || match check_window_values(&conn, &table_sql, &col, "source") {
            Ok(()) => Ok(Vec::new()),
            Err(e) if e.code == "malformed_window_values" => {
                let mut d = dpone_core::Diagnostic::new(e.code, "sink.strategy.window.column", e.message);
                d.hint = e.hint;
                Ok(vec![d])
            }
            Err(e) => Err(e),
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

    async fn read(&self, request: ReadRequest, out: FrameTx) -> Result<ReadStats> {
        let slot = self.snapshot.clone();
        let table_sql = format!("{}.{}", quote_ident(self.schema()), quote_ident(&self.config.table.name));
        tokio::task::spawn_blocking(move || {
            let guard = slot.lock().expect("snapshot lock");
            let conn = guard.as_ref().ok_or_else(|| AdapterError::permanent("internal_error", "read before open_snapshot"))?;
            let mut sql = format!("SELECT {} FROM {table_sql}", select_list(&request.columns));
            let mut params: Vec<String> = Vec::new();
            if let Some((col, chunk)) = &request.bounds {
                let c = quote_ident(col);
                sql.push_str(&format!(" WHERE {c} >= ?1 AND {c} < ?2"));
                params.push(chunk.start.to_canonical());
                params.push(chunk.end.to_canonical());
            }
            let mut stmt = conn.prepare(&sql).map_err(|e| classify("preparing the chunk query", e))?;
            let mut rows = stmt.query(rusqlite::params_from_iter(params.iter())).map_err(|e| classify("reading the chunk", e))?;
            let ncols = request.columns.len();
            let mut frames = RowFrames::new(&out, ncols, FrameLimits::new(&request, FLUSH_BYTES))?;
            let mut row_buf = Vec::new();
            let mut row_digest = RowDigest::new(ncols);
            while let Some(row) = rows.next().map_err(|e| classify("reading the chunk", e))? {
                row_buf.clear();
                row_digest.clear();
                // The row is encoded once; its size then decides the framing.
                encode_row(row, &request.columns, &request.target_types, &mut row_buf, &mut row_digest)?;
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
