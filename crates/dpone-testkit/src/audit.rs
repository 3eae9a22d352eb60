//! Content digests of in-memory rows (`dpone audit` on the fakes): the
//! reference encoding of [`dpone_core::audit`] over typed rows, what
//! `MemSource` and `MemTarget` answer to `content_digests` and
//! `content_rows`, so that the engine's audit runs on the fakes.

use crate::rows::Row;
use dpone_core::audit::{AuditRow, AuditSpec, SegmentDigest, reference_key_hash, reference_row_hash};
use dpone_core::ports::{AdapterError, Result};
use dpone_core::time::Timestamp;
use dpone_core::types::Column;
use dpone_core::value::Value;

/// The audited values of each row of `table` (columns `columns`) in the
/// spec's column order, with its window value.
fn audited(columns: &[Column], rows: &[Row], spec: &AuditSpec) -> Result<Vec<(Option<Timestamp>, Vec<Value>)>> {
    let index = |name: &str| {
        columns
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| AdapterError::unsupported("audit_column_missing", format!("column `{name}` does not exist")))
    };
    let positions = spec.columns.iter().map(|c| index(&c.name)).collect::<Result<Vec<_>>>()?;
    let window = index(&spec.window_column)?;
    spec.classes()?;
    Ok(rows
        .iter()
        .map(|r| {
            let w = match &r[window] {
                Value::Micros(m) => Some(Timestamp(*m)),
                _ => None,
            };
            (w, positions.iter().map(|&i| r[i].clone()).collect())
        })
        .collect())
}

fn hashes(spec: &AuditSpec, values: &[Value], key: &[usize]) -> Result<(i64, i64)> {
    let e = |m: String| AdapterError::permanent("invalid_value", m);
    Ok((reference_row_hash(&spec.columns, values).map_err(e)?, reference_key_hash(&spec.columns, values, key).map_err(e)?))
}

/// The digests of `rows` (of a table of `columns`) per segment of `bounds`
/// and key bucket of `spec.key_scope`.
pub fn digests(columns: &[Column], rows: &[Row], spec: &AuditSpec, bounds: &[Timestamp]) -> Result<Vec<SegmentDigest>> {
    dpone_core::audit::check_bounds(bounds)?;
    let key = spec.key_positions()?;
    let buckets = spec.key_scope.buckets();
    let mut out = vec![SegmentDigest::default(); (bounds.len() - 1) * buckets];
    for (w, values) in audited(columns, rows, spec)? {
        let Some(w) = w else { continue };
        let Some(seg) = bounds.windows(2).position(|b| b[0] <= w && w < b[1]) else { continue };
        let (hash, key_hash) = hashes(spec, &values, &key)?;
        let Some(bucket) = spec.key_scope.bucket_of(key_hash) else { continue };
        let d = &mut out[seg * buckets + bucket];
        *d = d.plus(SegmentDigest { rows: 1, sum: i128::from(hash) }).ok_or_else(|| AdapterError::internal("a digest past 2^127"))?;
    }
    Ok(out)
}

/// At most `limit` of `rows` whose window value lies in `[start, end)` and
/// whose key hash has `spec.key_scope`'s prefix, with their hashes.
pub fn audit_rows(
    columns: &[Column],
    rows: &[Row],
    spec: &AuditSpec,
    start: Timestamp,
    end: Timestamp,
    limit: u64,
) -> Result<Vec<AuditRow>> {
    let key = spec.key_positions()?;
    let scope = dpone_core::audit::KeyScope { split_bits: 0, ..spec.key_scope };
    let text = |v: &Value| (!v.is_null()).then(|| format!("{v:?}"));
    let mut out = Vec::new();
    for (w, values) in audited(columns, rows, spec)? {
        if !w.is_some_and(|w| start <= w && w < end) {
            continue;
        }
        let (hash, key_hash) = hashes(spec, &values, &key)?;
        if scope.bucket_of(key_hash).is_none() {
            continue;
        }
        if out.len() as u64 >= limit {
            break;
        }
        let key = key.iter().map(|&i| text(&values[i])).collect();
        out.push(AuditRow { hash, window: w, key, values: values.iter().map(text).collect() });
    }
    Ok(out)
}
