//! `dpone audit` on PostgreSQL (docs/audit.md): the canonical row hash of
//! `dpone_core::audit::canon` as SQL over the table's own column types,
//! shared by the source and the target. This file builds the SQL (pure,
//! unit-tested); `audit/session.rs` runs it.
//!
//! Every field is PostgreSQL's own lookup3 (`hashint8extended`,
//! `hashint4extended`, `hashtextextended`, `uuid_hash_extended`,
//! `hash_array_extended` of a one-element array of a value's binary form,
//! `hash_record_extended` of a one-column row for `bytea`), seeded per
//! column; the fields are XORed in a
//! subquery (`OFFSET 0` keeps the planner from inlining it, which would
//! compute the XOR twice) and mixed once more. Rows are put in their
//! segment by `date_bin` (integer arithmetic) when the segments have one
//! width, by `width_bucket` over the bounds otherwise, as
//! `crate::delivery` does for fingerprints; the scan is split by heap
//! block ranges ([`crate::delivery::parts`]).

mod session;

pub(crate) use session::Auditor;

use crate::catalog::{CatalogColumn, oid};
use crate::delivery::Blocks;
use crate::source::{quote_ident, timestamptz_literal};
use dpone_core::audit::canon::{self, FieldClass, KEY_SEEDS, ROW_SEEDS};
use dpone_core::audit::{AuditSpec, KeyScope, SegmentDigest, stride, type_refusal};
use dpone_core::ports::{AdapterError, Result};
use dpone_core::time::Timestamp;
use dpone_core::types::{Column, ColumnType};

/// A seed as the `int8` literal PostgreSQL's hash functions take.
fn lit(v: u64) -> String {
    (v as i64).to_string()
}

/// `hashint8extended` of the high and low 32-bit halves of the `int8`
/// expression `x`, XORed ([`canon::mix64`], [`canon::int_field`]).
fn halves(x: &str, seeds: (u64, u64)) -> String {
    format!("(hashint8extended({x} >> 32, {}) # hashint8extended({x} & 4294967295, {}))", lit(seeds.0), lit(seeds.1))
}

/// The field (an `int8`) of the column `c` of the table, at position
/// `index` of the audited columns, of canonical class `class`; a native
/// type that the class cannot read exactly is refused, naming it.
pub fn field_sql(c: &CatalogColumn, class: FieldClass, index: usize, side: &str) -> Result<String> {
    let q = quote_ident(&c.name);
    let s1 = lit(canon::seed(index, 1));
    let refuse = |why: &str| {
        let column =
            Column { name: c.name.clone(), ty: ColumnType::new(dpone_core::types::DType::String, true), native_type: c.formatted.clone() };
        Err(type_refusal(side, &column, why))
    };
    let numeric_scale = (c.oid == oid::NUMERIC && c.typmod >= 4).then(|| ((c.typmod - 4) & 0x7ff) ^ 1024).map(|s| s - 1024);
    let is_int = matches!(c.oid, oid::INT2 | oid::INT4 | oid::INT8);
    let field = match class {
        FieldClass::Int if is_int => halves(&format!("{q}::int8"), (canon::seed(index, 1), canon::seed(index, 2))),
        FieldClass::DecimalText { scale } if numeric_scale == Some(i32::from(scale)) || (scale == 0 && is_int) => {
            format!("hashtextextended({q}::text, {s1})")
        }
        FieldClass::Bool if c.oid == oid::BOOL => format!("hashint4extended({q}::int4, {s1})"),
        FieldClass::Bytes => match c.oid {
            oid::TEXT | oid::VARCHAR => format!("hashtextextended({q}::text COLLATE \"C\", {s1})"),
            // bpchar's text cast drops the padding the COPY sends.
            oid::BPCHAR => format!("hashtextextended(textin(bpcharout({q})) COLLATE \"C\", {s1})"),
            oid::BYTEA => format!("hash_record_extended(ROW({q}), {s1})"),
            _ => return refuse("a string or bytes column needs text, varchar, char or bytea"),
        },
        FieldClass::Float32 if c.oid == oid::FLOAT4 => format!("hash_array_extended(ARRAY[float4send({q})], {s1})"),
        FieldClass::Float64 if c.oid == oid::FLOAT8 => format!("hash_array_extended(ARRAY[float8send({q})], {s1})"),
        FieldClass::Date if c.oid == oid::DATE => format!("hashint4extended({q} - DATE '1970-01-01', {s1})"),
        FieldClass::Timestamp if c.oid == oid::TIMESTAMPTZ => format!("hash_array_extended(ARRAY[timestamptz_send({q})], {s1})"),
        FieldClass::Timestamp if c.oid == oid::TIMESTAMP => format!("hash_array_extended(ARRAY[timestamp_send({q})], {s1})"),
        FieldClass::Uuid if c.oid == oid::UUID => format!("uuid_hash_extended({q}, {s1})"),
        FieldClass::DecimalText { scale } => {
            return refuse(&format!("the canonical type needs numeric with scale {scale} (or an integer for scale 0)"));
        }
        other => return refuse(&format!("its type does not hold the canonical {other:?} values exactly")),
    };
    // Not coalesce: `hash_record_extended(ROW(NULL), ..)` is a hash (of a
    // row holding a NULL), not NULL.
    Ok(if c.not_null { field } else { format!("CASE WHEN {q} IS NULL THEN {} ELSE {field} END", lit(canon::null_field(index))) })
}

/// The audited columns of the table (its catalog rows `catalog`) with
/// their fields, in `spec.columns` order; a missing column is refused.
pub fn fields(catalog: &[CatalogColumn], spec: &AuditSpec, side: &str) -> Result<Vec<(CatalogColumn, String)>> {
    let classes = spec.classes()?;
    spec.columns
        .iter()
        .zip(classes)
        .enumerate()
        .map(|(i, (col, class))| {
            let c = catalog.iter().find(|c| c.name == col.name).ok_or_else(|| {
                AdapterError::unsupported("audit_column_missing", format!("{side} column `{}` does not exist", col.name))
                    .hint("the audit compares the manifest's columns on both sides")
            })?;
            Ok((c.clone(), field_sql(c, class, i, side)?))
        })
        .collect()
}

/// The window column's catalog row, which must be a date or timestamp.
pub fn window_column<'a>(catalog: &'a [CatalogColumn], spec: &AuditSpec, side: &str) -> Result<&'a CatalogColumn> {
    let c = catalog.iter().find(|c| c.name == spec.window_column).ok_or_else(|| {
        AdapterError::unsupported("audit_column_missing", format!("{side} window column `{}` does not exist", spec.window_column))
    })?;
    if !matches!(c.oid, oid::TIMESTAMPTZ | oid::TIMESTAMP | oid::DATE) {
        return Err(AdapterError::unsupported(
            "audit_window_type",
            format!("{side} window column `{}` is {}, not a date or timestamp", c.name, c.formatted),
        ));
    }
    Ok(c)
}

/// What a query reads: the table, its fields, the window column and the
/// key's positions.
pub struct Query<'a> {
    pub table_sql: &'a str,
    pub fields: &'a [(CatalogColumn, String)],
    pub window: &'a CatalogColumn,
    pub key: &'a [usize],
    pub scope: KeyScope,
}

impl Query<'_> {
    /// The innermost query: the window value `w`, the XOR of the fields
    /// `x`, of the key's fields `k` (when the scope needs it) and `extra`
    /// select items, over the rows of `[lo, hi)` in `part`.
    fn inner(&self, lo: Timestamp, hi: Timestamp, part: Option<Blocks>, extra: &[String]) -> String {
        let w = quote_ident(&self.window.name);
        let xor = |fields: Vec<&str>| fields.join(" # ");
        let mut items = vec![format!("{w} AS w"), format!("{} AS x", xor(self.fields.iter().map(|f| f.1.as_str()).collect()))];
        if self.keyed() {
            items.push(format!("{} AS k", xor(self.key.iter().map(|&i| self.fields[i].1.as_str()).collect())));
        }
        items.extend(extra.iter().cloned());
        let blocks = match part {
            None => String::new(),
            Some(Blocks { start, end: None }) => format!("ctid >= '({start},0)'::tid AND "),
            Some(Blocks { start, end: Some(end) }) => format!("ctid >= '({start},0)'::tid AND ctid < '({end},0)'::tid AND "),
        };
        format!(
            "SELECT {} FROM {} WHERE {blocks}{w} >= {} AND {w} < {} OFFSET 0",
            items.join(", "),
            self.table_sql,
            timestamptz_literal(lo),
            timestamptz_literal(hi)
        )
    }

    /// Whether the key hash is needed (a scope narrower than every row).
    fn keyed(&self) -> bool {
        !self.key.is_empty() && self.scope != KeyScope::ALL
    }

    /// The key hash's used top bits as an unsigned number, and the filter
    /// of the scope's prefix, over the key hash `kh`.
    fn key_bits(&self) -> Option<(String, String)> {
        let used = u32::from(self.scope.prefix_bits) + u32::from(self.scope.split_bits);
        if !self.keyed() || used == 0 {
            return None;
        }
        let top = format!("((kh >> {}) & {})", 64 - used, (1u64 << used) - 1);
        let filter = format!("({top} >> {}) = {}", self.scope.split_bits, self.scope.prefix);
        Some((top, filter))
    }

    /// The middle query: the row hash `r` and the key hash `kh` of each
    /// row of the inner one, filtered by the key scope's prefix.
    fn hashed(&self, inner: String, extra: &[&str]) -> String {
        let mut items = vec!["w".to_string(), format!("{} AS r", halves("x", ROW_SEEDS))];
        if self.keyed() {
            items.push(format!("{} AS kh", halves("k", KEY_SEEDS)));
        }
        items.extend(extra.iter().map(|e| e.to_string()));
        let hashed = format!("SELECT {} FROM ({inner}) AS q OFFSET 0", items.join(", "));
        match self.key_bits() {
            Some((_, filter)) => format!("SELECT * FROM ({hashed}) AS h WHERE {filter}"),
            None => hashed,
        }
    }

    /// The digests of the segments of `bounds` over the heap blocks `part`:
    /// rows `(segment, count, sum as text)`, the segment 0-based and
    /// segment-major over the scope's key buckets.
    pub fn digests_sql(&self, bounds: &[Timestamp], version: i32, part: Option<Blocks>) -> Result<String> {
        dpone_core::audit::check_bounds(bounds)?;
        let (lo, hi) = (bounds[0], bounds[bounds.len() - 1]);
        let array = format!("ARRAY[{}]", bounds.iter().map(|b| timestamptz_literal(*b)).collect::<Vec<_>>().join(", "));
        let (group, segment) = match stride(bounds) {
            Some(stride) if version >= 140000 => (
                format!("date_bin('{stride} microseconds'::interval, w, {})", timestamptz_literal(lo)),
                format!("width_bucket(b, {array}) - 1"),
            ),
            _ => (format!("width_bucket(w, {array})"), "b - 1".to_string()),
        };
        let buckets = self.scope.buckets();
        let (bucket, segment) = match self.key_bits() {
            Some((top, _)) if buckets > 1 => (format!(", {top} & {} AS kb", buckets - 1), format!("({segment}) * {buckets} + kb")),
            _ => (String::new(), segment),
        };
        let group_by = if bucket.is_empty() { "1" } else { "1, 2" };
        Ok(format!(
            "SELECT ({segment})::int4 AS seg, n, d::text FROM (SELECT {group} AS b{bucket}, count(*) AS n, sum(r) AS d FROM ({}) AS g0 GROUP BY {group_by}) AS g",
            self.hashed(self.inner(lo, hi, part, &[]), &[])
        ))
    }

    /// At most `limit` rows of `[lo, hi)`: `(hash, window micros, key
    /// texts..., value texts...)`.
    pub fn rows_sql(&self, lo: Timestamp, hi: Timestamp, limit: u64) -> String {
        let texts: Vec<String> =
            self.fields.iter().enumerate().map(|(i, (c, _))| format!("{}::text AS v{i}", quote_ident(&c.name))).collect();
        let micros = match self.window.oid {
            oid::DATE => "(w - DATE '1970-01-01')::int8 * 86400000000".to_string(),
            _ => "(extract(epoch FROM w) * 1000000)::int8".to_string(),
        };
        let outer: Vec<String> = (0..self.fields.len()).map(|i| format!("v{i}")).collect();
        let outer_refs: Vec<&str> = outer.iter().map(String::as_str).collect();
        format!(
            "SELECT r, {micros}, {} FROM ({}) AS h LIMIT {limit}",
            outer.join(", "),
            self.hashed(self.inner(lo, hi, None, &texts), &outer_refs)
        )
    }
}

/// The digests of `segments` segments (times the scope's buckets) from the
/// rows `(segment, count, sum)` of every part's query; parts add up.
pub fn combine(slots: usize, rows: &[(i32, i64, String)]) -> Result<Vec<SegmentDigest>> {
    let mut out = vec![SegmentDigest::default(); slots];
    for (seg, n, d) in rows {
        let slot = usize::try_from(*seg).ok().and_then(|s| out.get_mut(s));
        let slot = slot.ok_or_else(|| AdapterError::internal(format!("an audit digest of segment {seg} outside the {slots} asked for")))?;
        let sum: i128 = d.parse().map_err(|_| AdapterError::internal(format!("an audit sum `{d}` that is not an integer")))?;
        let rows = u64::try_from(*n).map_err(|_| AdapterError::internal("a negative count"))?;
        *slot = slot.plus(SegmentDigest { rows, sum }).ok_or_else(|| AdapterError::internal("an audit sum past 2^127"))?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
