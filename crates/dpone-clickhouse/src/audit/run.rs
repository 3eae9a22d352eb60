//! Running the audit's SQL (`super`) on ClickHouse: the table's columns
//! from `system.columns`, the longest string of each `String` column over
//! the range (its size subcolumn, no string read), then one grouped query
//! bounded by the server's `max_execution_time` and a client deadline.
//! ClickHouse has no snapshot a second query could join: each call reads
//! the parts visible when it starts.

use super::{Blocks, Native, Query, UNROLL_BLOCKS};
use crate::client::{ChClient, quote_ident, table_is};
use dpone_core::audit::canon::FieldClass;
use dpone_core::audit::{AuditRow, AuditSpec, SegmentDigest};
use dpone_core::ports::{AdapterError, Result};
use dpone_core::time::Timestamp;
use dpone_core::types::{DType, parse_clickhouse_type};
use serde_json::Value as Json;
use std::time::Duration;

/// One side's audit reads of one table.
pub(crate) struct Auditor<'a> {
    pub client: &'a ChClient,
    pub database: &'a str,
    pub table: &'a str,
    /// `source` or `target`, for messages.
    pub side: &'static str,
}

/// A JSON cell as text (64-bit numbers arrive quoted).
fn cell(row: &serde_json::Map<String, Json>, key: &str) -> Option<String> {
    match row.get(key)? {
        Json::Null => None,
        Json::String(s) => Some(s.clone()),
        v => Some(v.to_string()),
    }
}

fn number<T: std::str::FromStr>(row: &serde_json::Map<String, Json>, key: &str) -> Result<T> {
    cell(row, key)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| AdapterError::internal(format!("the audit query answered `{key}` = {:?}, not a number", row.get(key))))
}

impl Auditor<'_> {
    fn table_sql(&self) -> String {
        format!("{}.{}", quote_ident(self.database), quote_ident(self.table))
    }

    /// Runs `sql` with the audit's settings and deadlines.
    async fn rows(&self, spec: &AuditSpec, sql: &str) -> Result<Vec<serde_json::Map<String, Json>>> {
        let secs = spec.query_timeout_ms.div_ceil(1000).max(1).to_string();
        // The program is long text with many subqueries: let the server
        // parse it (its defaults stop at 256 KiB and 50,000 nodes). Keep its
        // layers apart: merged into one expression, each `if` selecting an
        // unrolled block evaluates its branches lazily, under a mask, and
        // recomputes everything below them per branch (3M rows, one string
        // column: 2.4 s merged, 0.4 s apart, ClickHouse 26.9).
        let settings = [
            ("max_execution_time", secs.as_str()),
            ("max_query_size", "67108864"),
            ("max_ast_elements", "10000000"),
            ("max_expanded_ast_elements", "10000000"),
            ("query_plan_merge_expressions", "0"),
            ("short_circuit_function_evaluation", "disable"),
            // Compile the steps on first sight (the default waits for a
            // third query): 0.60 s against 0.72 s on 3M rows, one thread.
            ("min_count_to_compile_expression", "0"),
        ];
        let deadline = Duration::from_millis(spec.query_timeout_ms.max(1)) + Duration::from_secs(30);
        let started = std::time::Instant::now();
        let out = self.client.query_rows_within(sql, &settings, deadline).await;
        tracing::debug!(side = self.side, seconds = started.elapsed().as_secs_f64(), bytes = sql.len(), "clickhouse audit query");
        tracing::trace!(side = self.side, sql, "clickhouse audit query");
        out.map_err(|mut e| {
            e.message = format!("{} audit of {}: {}", self.side, self.table_sql(), e.message);
            if e.code == "clickhouse_error:159" {
                e.code = "audit_query_timeout".into();
                e.hint = Some("the server stopped the audit query at its deadline: raise --query-timeout or audit a shorter window".into());
            }
            e
        })
    }

    /// The audited columns with their classes, the window column, and each
    /// column's native type (refused when it cannot hold the canonical one).
    async fn describe(&self, spec: &AuditSpec) -> Result<(Vec<(Native, FieldClass)>, Native)> {
        let sql = format!("SELECT name, type FROM system.columns WHERE {}", table_is(self.database, self.table));
        let rows = self.rows(spec, &sql).await?;
        if rows.is_empty() {
            return Err(AdapterError::permanent(
                "audit_table_missing",
                format!("the {} table {} does not exist", self.side, self.table_sql()),
            ));
        }
        let native = |name: &str| -> Result<Native> {
            let r = rows.iter().find(|r| cell(r, "name").as_deref() == Some(name)).ok_or_else(|| {
                AdapterError::unsupported("audit_column_missing", format!("{} column `{name}` does not exist", self.side))
                    .hint("the audit compares the manifest's columns on both sides")
            })?;
            let native_type = cell(r, "type").unwrap_or_default();
            let n = Native {
                name: name.to_string(),
                ty: dpone_core::types::ColumnType::new(DType::String, true),
                native_type: native_type.clone(),
            };
            let ty = parse_clickhouse_type(&native_type).map_err(|e| n.refuse(self.side, &e.to_string()))?;
            Ok(Native { ty, ..n })
        };
        let classes = spec.classes()?;
        let columns = spec.columns.iter().zip(classes).map(|(c, class)| Ok((native(&c.name)?, class))).collect::<Result<Vec<_>>>()?;
        let window = native(&spec.window_column)?;
        let fits = match &window.ty.dtype {
            DType::Date | DType::Date32 | DType::DateTime { .. } => true,
            DType::DateTime64 { precision, .. } => *precision <= 6,
            _ => false,
        };
        if !fits {
            return Err(AdapterError::unsupported(
                "audit_window_type",
                format!(
                    "{} window column `{}` is {}, not a Date, DateTime or DateTime64 of at most microseconds",
                    self.side, window.name, window.native_type
                ),
            ));
        }
        Ok((columns, window))
    }

    /// Each `String` column's blocks over `[lo, hi)`: unrolled up to its
    /// longest string, or looped beyond [`UNROLL_BLOCKS`].
    async fn blocks(
        &self,
        spec: &AuditSpec,
        columns: &[(Native, FieldClass)],
        window: &Native,
        lo: Timestamp,
        hi: Timestamp,
    ) -> Result<Vec<Option<Blocks>>> {
        let strings: Vec<usize> = columns
            .iter()
            .enumerate()
            .filter(|(_, (n, c))| *c == FieldClass::Bytes && n.ty.dtype == DType::String)
            .map(|(i, _)| i)
            .collect();
        let mut out = vec![None; columns.len()];
        if strings.is_empty() {
            return Ok(out);
        }
        let w = quote_ident(&window.name);
        let maxes: Vec<String> = strings.iter().map(|i| format!("max(length({})) AS l{i}", quote_ident(&columns[*i].0.name))).collect();
        let sql = format!(
            "SELECT {} FROM {} WHERE {w} >= {} AND {w} < {}",
            maxes.join(", "),
            self.table_sql(),
            super::instant(lo),
            super::instant(hi)
        );
        let rows = self.rows(spec, &sql).await?;
        let row = rows.first().ok_or_else(|| AdapterError::internal("the audit's length query answered no row"))?;
        for i in strings {
            let longest: u64 = number(row, &format!("l{i}")).unwrap_or(0);
            let blocks = longest / 12;
            out[i] = Some(if blocks <= u64::from(UNROLL_BLOCKS) { Blocks::AtMost(blocks as u32) } else { Blocks::Loop });
        }
        Ok(out)
    }

    /// The digests of the segments of `bounds` (see the ports).
    pub(crate) async fn digests(&self, spec: &AuditSpec, bounds: &[Timestamp]) -> Result<Vec<SegmentDigest>> {
        dpone_core::audit::check_bounds(bounds)?;
        let (columns, window) = self.describe(spec).await?;
        let key = spec.key_positions()?;
        let (lo, hi) = (bounds[0], bounds[bounds.len() - 1]);
        let mut blocks = self.blocks(spec, &columns, &window, lo, hi).await?;
        let table_sql = self.table_sql();
        // A longer string written since the lengths were read is hashed
        // wrongly unrolled: the query reports the longest it met, and runs
        // again looping over that column.
        for _ in 0..2 {
            let q = Query {
                table_sql: &table_sql,
                columns: &columns,
                blocks: &blocks,
                window: &window,
                key: &key,
                scope: spec.key_scope,
                side: self.side,
            };
            let rows = self.rows(spec, &q.digests_sql(bounds)?).await?;
            let mut grew = false;
            for (i, b) in blocks.iter_mut().enumerate() {
                if let Some(Blocks::AtMost(n)) = *b {
                    let longest = rows.iter().filter_map(|r| number::<u64>(r, &format!("l{i}")).ok()).max().unwrap_or(0);
                    if longest / 12 > u64::from(n) {
                        *b = Some(Blocks::Loop);
                        grew = true;
                    }
                }
            }
            if grew {
                continue;
            }
            let mut out = vec![SegmentDigest::default(); (bounds.len() - 1) * spec.key_scope.buckets()];
            for r in &rows {
                let seg: usize = number(r, "seg")?;
                let slot = out
                    .get_mut(seg)
                    .ok_or_else(|| AdapterError::internal(format!("an audit digest of segment {seg} outside the range")))?;
                *slot = SegmentDigest { rows: number(r, "n")?, sum: number(r, "d")? };
            }
            return Ok(out);
        }
        Err(AdapterError::transient(
            "audit_data_changed",
            format!("the {} table's strings kept growing while the audit read them", self.side),
        ))
    }

    /// At most `limit` rows of `[start, end)` with their hashes.
    pub(crate) async fn rows_of(&self, spec: &AuditSpec, start: Timestamp, end: Timestamp, limit: u64) -> Result<Vec<AuditRow>> {
        let (columns, window) = self.describe(spec).await?;
        let key = spec.key_positions()?;
        let blocks = vec![Some(Blocks::Loop); columns.len()];
        let table_sql = self.table_sql();
        let q = Query {
            table_sql: &table_sql,
            columns: &columns,
            blocks: &blocks,
            window: &window,
            key: &key,
            scope: spec.key_scope,
            side: self.side,
        };
        let rows = self.rows(spec, &q.rows_sql(start, end, limit)?).await?;
        rows.iter()
            .map(|r| {
                let values: Vec<Option<String>> = (0..columns.len()).map(|i| cell(r, &format!("v{i}"))).collect();
                Ok(AuditRow {
                    hash: number(r, "r")?,
                    window: Some(Timestamp(number(r, "w")?)),
                    key: key.iter().map(|&i| values[i].clone()).collect(),
                    values,
                })
            })
            .collect()
    }
}
