//! `incremental_merge` in a transactional SQL target (PostgreSQL, SQLite),
//! written once: the statements over the verified batch and the target in
//! standard SQL (a window function, a row-value `IN`), and the checks its
//! publishing transaction makes. Only text is built here; each adapter
//! quotes its identifiers and runs the statements.

use super::{AdapterError, MergeCounts, MergeKey, Result};
use serde::Serialize;

/// What `dpone plan` says about an `incremental_merge` into a target
/// ([`super::Target::merge_shape`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MergeShape {
    /// The target's index (or sorting key) that finds a key's rows, in
    /// words (`merge_t_id: unique index on (id)`); None: a merge scans
    /// the target for the batch's keys.
    pub key_index: Option<String>,
    /// What a merge rewrites, in words.
    pub rewrites: String,
}

/// `incremental_merge`'s SQL over a verified batch table and the target.
pub struct MergeSql {
    /// The key columns, quoted: `"a", "b"`.
    pub key: String,
    /// The batch resolved to one row per key: the rows at their key's
    /// greatest cursor, identical rows once (a tie leaves two rows of one key).
    pub resolved: String,
    /// Target rows whose key is in the batch (`FROM .. WHERE ..`).
    pub in_batch: String,
}

impl MergeSql {
    /// The statements over the batch `gen_sql` and the target `target_sql`
    /// (both quoted), `cols` the quoted column list, identifiers of `key`
    /// quoted by `quote`.
    pub fn new(target_sql: &str, gen_sql: &str, cols: &str, key: &MergeKey, quote: impl Fn(&str) -> String) -> MergeSql {
        let k = key.unique_key.iter().map(|c| quote(c)).collect::<Vec<_>>().join(", ");
        let c = quote(&key.cursor);
        MergeSql {
            resolved: format!(
                "SELECT DISTINCT {cols} FROM (SELECT {cols}, max({c}) OVER (PARTITION BY {k}) AS _dpone_top FROM {gen_sql}) AS b \
                 WHERE {c} = _dpone_top"
            ),
            in_batch: format!("FROM {target_sql} WHERE ({k}) IN (SELECT {k} FROM {gen_sql})"),
            key: k,
        }
    }

    /// Counts the batch's keys that the target does not hold exactly once.
    pub fn not_once(&self) -> String {
        format!("SELECT count(*) FROM (SELECT 1 {} GROUP BY {} HAVING count(*) <> 1) AS k", self.in_batch, self.key)
    }
}

/// `publication_verification_failed` of a merge's publishing transaction:
/// nothing was published.
pub fn merge_failed(what: String) -> AdapterError {
    AdapterError::verification("publication_verification_failed", what).hint(
        "another writer changed the target's rows of the batch's keys during the run (or a trigger did); nothing was published: run again",
    )
}

/// The batch resolved again under the publication's lock must count what
/// the run checked before its intent (`expected`).
pub fn check_merge_unchanged(counts: MergeCounts, expected: MergeCounts) -> Result<()> {
    if counts == expected {
        return Ok(());
    }
    Err(merge_failed(format!(
        "the merge would insert {} and replace {} rows, but the run checked {} and {} before its intent",
        counts.inserted, counts.replaced, expected.inserted, expected.replaced
    )))
}

/// What a merge's DELETE and INSERT did, counted in its transaction.
#[derive(Debug, Clone, Copy)]
pub struct MergeApplied {
    pub rows_before: u64,
    pub deleted: u64,
    pub inserted: u64,
    pub rows_after: u64,
    /// Batch keys the target does not hold exactly once ([`MergeSql::not_once`]).
    pub not_once: u64,
    /// Resolved rows the target does not hold.
    pub missing: u64,
}

impl MergeApplied {
    /// The merge replaced and inserted the `expected` rows, the target's
    /// count moved by exactly their difference, each batch key appears
    /// once and every resolved row is present.
    pub fn check(&self, expected: MergeCounts) -> Result<()> {
        let MergeApplied { rows_before, deleted, inserted, rows_after, not_once, missing } = *self;
        if deleted == expected.replaced
            && inserted == expected.inserted
            && rows_after + deleted == rows_before + inserted
            && not_once == 0
            && missing == 0
        {
            return Ok(());
        }
        Err(merge_failed(format!(
            "the merge deleted {deleted} rows and inserted {inserted} (expected {} and {}); the target went from {rows_before} to {rows_after} rows; \
             {not_once} batch keys do not appear exactly once; {missing} batch rows are missing",
            expected.replaced, expected.inserted
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> MergeKey {
        MergeKey { unique_key: vec!["id".into(), "region".into()], cursor: "ts".into() }
    }

    #[test]
    fn statements_quote_through_the_adapter() {
        let sql = MergeSql::new("t", "g", "a, b", &key(), |c| format!("[{c}]"));
        assert_eq!(sql.key, "[id], [region]");
        assert_eq!(sql.in_batch, "FROM t WHERE ([id], [region]) IN (SELECT [id], [region] FROM g)");
        assert!(sql.resolved.contains("max([ts]) OVER (PARTITION BY [id], [region])"), "{}", sql.resolved);
        assert!(sql.not_once().contains("GROUP BY [id], [region] HAVING count(*) <> 1"));
    }

    #[test]
    fn checks_refuse_as_verification() {
        let expected = MergeCounts { inserted: 2, replaced: 1 };
        assert!(check_merge_unchanged(expected, expected).is_ok());
        let e = check_merge_unchanged(MergeCounts { inserted: 3, replaced: 1 }, expected).unwrap_err();
        assert_eq!(e.code, "publication_verification_failed");
        let ok = MergeApplied { rows_before: 5, deleted: 1, inserted: 2, rows_after: 6, not_once: 0, missing: 0 };
        assert!(ok.check(expected).is_ok());
        for bad in [MergeApplied { missing: 1, ..ok }, MergeApplied { rows_after: 7, ..ok }, MergeApplied { not_once: 1, ..ok }] {
            assert_eq!(bad.check(expected).unwrap_err().code, "publication_verification_failed");
        }
    }
}
