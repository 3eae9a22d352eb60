//! Part identities: how a generation that links the verified staging parts
//! is verified without hashing the window's rows a second time.
//!
//! When a staging table is verified, the identities of its parts are read
//! before and after its digest ([`read`], [`settled`]): equal both times,
//! they are the parts that digest verified (an insert, a mutation or a
//! lightweight delete in between makes other parts) and are journaled with
//! the chunk. After the build, the generation must hold every one of them
//! ([`staged_in`]) and the row counts must add up, so nothing else holds
//! window rows. When that cannot be established (a target that does not
//! identify parts, a journal from before this check, a part merged or
//! changed meanwhile) the generation is digested as before: never a weaker
//! check.

use crate::context::Ctx;
use dpone_core::ports::{AdapterError, PartIdentity, Source, TableRole, Target, contains_parts};
use dpone_core::state::RunJournal;

/// The parts of the owned `table`, or None when they cannot be identified
/// (a failed read only costs the shortcut, never the run).
pub(crate) async fn read<S: Source, T: Target>(ctx: &Ctx<S, T>, table: &str) -> Option<Vec<PartIdentity>> {
    match ctx.target.part_identities(TableRole::Owned(table)).await {
        Ok(parts) => parts,
        Err(e) => {
            tracing::warn!(table, error = %e.message, "the parts could not be identified; the generation will be digested");
            None
        }
    }
}

/// The parts a staging table's digest verified: those read before it, if
/// they are still those read after it and hold the verified rows.
pub(crate) fn settled(before: Option<Vec<PartIdentity>>, after: Option<Vec<PartIdentity>>, rows: u64) -> Option<Vec<PartIdentity>> {
    match (before, after) {
        (Some(b), Some(a)) if b == a && b.iter().map(|p| p.rows).sum::<u64>() == rows => Some(b),
        _ => None,
    }
}

/// Every verified chunk's staging parts, or None when a chunk has none recorded.
pub(crate) fn staged(j: &RunJournal) -> Option<Vec<PartIdentity>> {
    let mut all = Vec::new();
    for c in j.chunks.values() {
        all.extend(c.parts.clone()?);
    }
    Some(all)
}

/// Whether `generation` holds every verified staging part (as a multiset)
/// and those parts hold exactly the window's `rows`. False is no verdict:
/// the caller digests instead.
pub(crate) async fn staged_in<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    generation: &str,
    staged: Option<&[PartIdentity]>,
    rows: u64,
) -> Result<bool, AdapterError> {
    let Some(staged) = staged else { return Ok(false) };
    if staged.iter().map(|p| p.rows).sum::<u64>() != rows {
        return Ok(false);
    }
    let Some(have) = ctx.target.part_identities(TableRole::Owned(generation)).await? else { return Ok(false) };
    let found = contains_parts(&have, staged);
    if !found {
        tracing::info!(
            generation,
            "the generation does not hold the verified staging parts as identified (merged or changed); digesting it"
        );
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::settled;
    use dpone_core::ports::PartIdentity;

    fn p(rows: u64, hash: &str) -> PartIdentity {
        PartIdentity { partition: "all".into(), rows, hash: hash.into() }
    }

    #[test]
    fn parts_count_as_verified_only_when_unchanged_across_the_digest_and_holding_its_rows() {
        assert_eq!(settled(Some(vec![p(2, "a"), p(3, "b")]), Some(vec![p(2, "a"), p(3, "b")]), 5), Some(vec![p(2, "a"), p(3, "b")]));
        assert_eq!(settled(Some(vec![p(2, "a")]), Some(vec![p(2, "c")]), 2), None, "changed during the digest");
        assert_eq!(settled(Some(vec![p(2, "a")]), Some(vec![p(2, "a")]), 3), None, "not the verified rows");
        assert_eq!(settled(None, Some(vec![p(2, "a")]), 2), None);
        assert_eq!(settled(Some(vec![]), Some(vec![]), 0), Some(vec![]), "an empty chunk has no parts");
    }
}
