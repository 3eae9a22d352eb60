//! `incremental_append` on a PostgreSQL source: the cursor's maximum and
//! the predicate of a batch, as SQL generated from typed values (never
//! from user text).
//!
//! The maximum is read by the snapshot keeper, inside the exported
//! snapshot every batch read imports, so the batch's upper bound and the
//! rows read are of one database version: a row committed after the
//! snapshot is neither counted in the maximum nor read, and the next run
//! reads it (its cursor is above this run's mark unless it arrived late).
//! NULL cursors are counted in the same query and refused naming the
//! column (`incremental_cursor_null`, as the other sources do).
//!
//! The batch predicate compares the column itself with literals of the
//! column's own type (an index on the cursor column serves the read); the
//! maximum is converted to [`CursorValue`]'s units in SQL: the integer,
//! microseconds since the epoch (`extract(epoch ...)` is exact numeric
//! since PostgreSQL 14; a `timestamp` without time zone is read as UTC,
//! as its values are moved), days since 1970-01-01.

use crate::catalog::oid;
use crate::source::quote_ident;
use dpone_core::incremental::{CursorBatch, CursorKind, CursorValue, Lower};
use dpone_core::ports::{AdapterError, Result};
use dpone_core::time::Timestamp;

/// A typed literal of `v` for a column of type `type_oid`.
fn literal(v: &CursorValue, type_oid: u32) -> String {
    match v {
        CursorValue::Integer(i) => i.to_string(),
        CursorValue::Timestamp(t) if type_oid == oid::TIMESTAMP => format!("'{}'::timestamp", t.to_canonical()),
        CursorValue::Timestamp(t) => format!("'{}+00'::timestamptz", t.to_canonical()),
        CursorValue::Date(d) => format!("'{}'::date", dpone_core::value::format_date(*d)),
    }
}

/// The rows of `batch` (`type_oid`: the cursor column's type): above the
/// lower bound and at most the snapshot maximum, none when the batch has
/// no maximum.
pub(crate) fn batch_predicate(batch: &CursorBatch, type_oid: u32) -> String {
    let c = quote_ident(&batch.column);
    let Some(max) = batch.snapshot_max else { return "false".into() };
    let lower = match batch.lower {
        Lower::Unbounded => format!("{c} IS NOT NULL"),
        Lower::AtLeast(v) => format!("{c} >= {}", literal(&v, type_oid)),
        Lower::After(v) => format!("{c} > {}", literal(&v, type_oid)),
    };
    format!("({lower} AND {c} <= {})", literal(&max, type_oid))
}

/// One query over `table_sql`: the number of NULL cursors, of rows, and
/// the maximum in [`CursorValue`]'s units as `int8`.
pub(crate) fn max_query(table_sql: &str, column: &str, kind: CursorKind) -> String {
    let c = quote_ident(column);
    let max = match kind {
        CursorKind::Integer => format!("max({c})::int8"),
        CursorKind::Timestamp => format!("(extract(epoch FROM max({c})) * 1000000)::int8"),
        CursorKind::Date => format!("(max({c}) - DATE '1970-01-01')::int8"),
    };
    format!("SELECT count(*) FILTER (WHERE {c} IS NULL), count(*), {max} FROM {table_sql}")
}

/// The maximum from [`max_query`]'s row, or the refusal of NULL cursors.
pub(crate) fn max_from(column: &str, kind: CursorKind, nulls: i64, max: Option<i64>) -> Result<Option<CursorValue>> {
    if nulls > 0 {
        return Err(AdapterError::permanent(
            "incremental_cursor_null",
            format!("cursor column `{column}` is NULL in {nulls} source rows; an append selects rows by cursor and would never move them"),
        )
        .hint("give those rows a cursor value (or name a NOT NULL column as source.options.incremental_column); nothing was written"));
    }
    let Some(n) = max else { return Ok(None) };
    Ok(Some(match kind {
        CursorKind::Integer => CursorValue::Integer(n),
        CursorKind::Timestamp => CursorValue::Timestamp(Timestamp(n)),
        CursorKind::Date => CursorValue::Date(i32::try_from(n).map_err(|_| {
            AdapterError::permanent("invalid_value", format!("cursor column `{column}` holds a date out of range ({n} days)"))
        })?),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpone_core::incremental::StoredMark;

    fn batch(previous: Option<i64>, max: Option<i64>) -> CursorBatch {
        let previous = previous.map(|v| StoredMark { column: "id".into(), value: Some(CursorValue::Integer(v)), run_id: "r".into() });
        CursorBatch::new("id", CursorKind::Integer, previous, None, max.map(CursorValue::Integer))
    }

    #[test]
    fn a_batch_is_above_the_mark_and_at_most_the_snapshot_maximum() {
        assert_eq!(batch_predicate(&batch(Some(7), Some(10)), oid::INT8), "(\"id\" > 7 AND \"id\" <= 10)");
        assert_eq!(batch_predicate(&batch(None, Some(10)), oid::INT8), "(\"id\" IS NOT NULL AND \"id\" <= 10)");
        assert_eq!(batch_predicate(&batch(Some(7), None), oid::INT8), "false");
    }

    #[test]
    fn literals_have_the_column_type() {
        let t = CursorValue::Timestamp(Timestamp(1_000_001));
        assert_eq!(literal(&t, oid::TIMESTAMPTZ), "'1970-01-01 00:00:01.000001+00'::timestamptz");
        assert_eq!(literal(&t, oid::TIMESTAMP), "'1970-01-01 00:00:01.000001'::timestamp");
        assert_eq!(literal(&CursorValue::Date(1), oid::DATE), "'1970-01-02'::date");
    }

    #[test]
    fn null_cursors_are_refused_naming_the_column() {
        let e = max_from("id", CursorKind::Integer, 2, Some(3)).unwrap_err();
        assert_eq!(e.code, "incremental_cursor_null");
        assert!(e.message.contains("`id`") && e.message.contains("2 source rows"), "{}", e.message);
        assert_eq!(max_from("id", CursorKind::Integer, 0, None).unwrap(), None);
        assert_eq!(max_from("d", CursorKind::Date, 0, Some(3)).unwrap(), Some(CursorValue::Date(3)));
    }
}
