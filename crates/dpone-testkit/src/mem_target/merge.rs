//! `incremental_merge` on a `MemTarget`, as every adapter does it: the
//! batch resolved to one row per `unique_key` (its greatest cursor;
//! identical rows count once; a NULL key is `merge_key_null`, two
//! different rows at a key's greatest cursor `merge_key_tie`), then, in
//! one step under the store's lock, the mark re-checked, the counts
//! re-checked against those the run recorded, the keys' target rows
//! replaced by the resolved rows and the mark stored. A failed check is a
//! `Verification` error: nothing changed (a definite rollback).

use super::store::{Db, decode_stored};
use dpone_core::incremental::CursorValue;
use dpone_core::ports::{AdapterError, MarkedPublication, MergeCounts, MergeKey, PublicationOutcome, Result, check_publication_unmoved};
use dpone_core::rowbinary::encode_value;
use dpone_core::time::Timestamp;
use dpone_core::types::Column;
use dpone_core::value::Value;
use std::collections::BTreeMap;

/// A key: the RowBinary bytes of each key column's value.
type Key = Vec<Vec<u8>>;

/// The batch in `generation` resolved against `target`: the rows to insert
/// (one per key) and how many target rows their keys replace.
pub(super) struct Resolved {
    pub rows: BTreeMap<Key, Vec<u8>>,
    pub replaced: u64,
}

impl Resolved {
    pub fn counts(&self) -> MergeCounts {
        MergeCounts { inserted: self.rows.len() as u64, replaced: self.replaced }
    }
}

fn index(columns: &[Column], name: &str) -> Result<usize> {
    columns
        .iter()
        .position(|c| c.name == name)
        .ok_or_else(|| AdapterError::permanent("merge_key_column_missing", format!("the target has no column `{name}`")))
}

fn cursor_of(v: &Value) -> Option<CursorValue> {
    match v {
        Value::Int(i) => i64::try_from(*i).ok().map(CursorValue::Integer),
        Value::Micros(m) => Some(CursorValue::Timestamp(Timestamp(*m))),
        Value::Date(d) => Some(CursorValue::Date(*d)),
        _ => None,
    }
}

/// The key of a stored row; None when a key column is NULL (its name).
fn key_of(columns: &[Column], keys: &[usize], row: &[Value]) -> Result<std::result::Result<Key, String>> {
    let mut key = Vec::with_capacity(keys.len());
    for &k in keys {
        if row[k] == Value::Null {
            return Ok(Err(columns[k].name.clone()));
        }
        let mut bytes = Vec::new();
        encode_value(&mut bytes, &columns[k].ty, &row[k])
            .map_err(|e| AdapterError::internal(format!("a key value does not encode: {e}")))?;
        key.push(bytes);
    }
    Ok(Ok(key))
}

pub(super) fn resolve(db: &Db, target: &str, generation: &str, key: &MergeKey) -> Result<Resolved> {
    let (columns, batch) = db.read(generation)?;
    let keys = key.unique_key.iter().map(|k| index(&columns, k)).collect::<Result<Vec<_>>>()?;
    let cursor = index(&columns, &key.cursor)?;
    let mut best: BTreeMap<Key, (CursorValue, Vec<u8>)> = BTreeMap::new();
    for bytes in batch {
        let row = decode_stored(&columns, &bytes)?;
        let k = match key_of(&columns, &keys, &row)? {
            Ok(k) => k,
            Err(column) => {
                return Err(dpone_core::incremental::merge_key_null(&column, 1));
            }
        };
        let c = cursor_of(&row[cursor]).ok_or_else(|| AdapterError::internal("a batch row without a cursor value"))?;
        match best.get(&k) {
            Some((b, _)) if *b > c => {}
            Some((b, kept)) if *b == c && *kept != bytes => {
                return Err(dpone_core::incremental::merge_key_tie(2, &format!("{:?}", row_key(&row, &keys)), &key.cursor, &c.to_string()));
            }
            _ => {
                best.insert(k, (c, bytes));
            }
        }
    }
    let (target_columns, target_rows) = db.read(target)?;
    let mut replaced = 0;
    for bytes in &target_rows {
        let row = decode_stored(&target_columns, bytes)?;
        if let Ok(k) = key_of(&target_columns, &keys, &row)?
            && best.contains_key(&k)
        {
            replaced += 1;
        }
    }
    Ok(Resolved { rows: best.into_iter().map(|(k, (_, r))| (k, r)).collect(), replaced })
}

fn row_key(row: &[Value], keys: &[usize]) -> Vec<Value> {
    keys.iter().map(|&k| row[k].clone()).collect()
}

/// The publishing step (the caller holds the store's lock).
pub(super) fn publish(
    db: &mut Db,
    target: &str,
    publication: MarkedPublication<'_>,
    key: &MergeKey,
    expected: MergeCounts,
) -> Result<PublicationOutcome> {
    let MarkedPublication { generation, before, after } = publication;
    check_publication_unmoved(db.mark.as_ref(), before)?;
    let resolved = resolve(db, target, generation, key)?;
    if resolved.counts() != expected {
        return Err(AdapterError::verification(
            "publication_verification_failed",
            format!("the merge would insert and replace {:?}, but the run checked {expected:?} before its intent", resolved.counts()),
        ));
    }
    let (columns, rows) = db.read(target)?;
    let keys = key.unique_key.iter().map(|k| index(&columns, k)).collect::<Result<Vec<_>>>()?;
    let mut kept = Vec::with_capacity(rows.len());
    for bytes in rows {
        let row = decode_stored(&columns, &bytes)?;
        match key_of(&columns, &keys, &row)? {
            Ok(k) if resolved.rows.contains_key(&k) => {}
            _ => kept.push(bytes),
        }
    }
    kept.extend(resolved.rows.into_values());
    *db.rows_mut(target)? = kept;
    db.mark = Some(after.clone());
    Ok(PublicationOutcome::Published)
}
