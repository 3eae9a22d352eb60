//! A resumed run's re-check of what it staged: every chunk the journal
//! records as verified must still be in its staging table, unchanged.

use crate::context::Ctx;
use crate::failure::{Phase, RunFailure};
use dpone_core::ports::{AdapterError, Source, TableRole, Target};
use dpone_core::state::{ChunkState, RunJournal};

/// Re-inspects the staging table of every chunk the journal records as
/// verified: it must still hold exactly the recorded rows (a missing or
/// changed table is terminal: dpone never publishes unverified data).
/// Returns how many chunks were re-verified.
pub(crate) async fn recheck_verified_chunks<S: Source, T: Target>(ctx: &Ctx<S, T>, j: &RunJournal) -> Result<usize, RunFailure> {
    let failed = |code: &str, message: String, hint: &str| {
        RunFailure::at(Phase::BeforePublication, AdapterError::verification(code, message).hint(hint), Some(&j.run_id))
    };
    let vendor = |e: AdapterError| RunFailure::at(Phase::BeforePublication, e, Some(&j.run_id));
    let mut reused = 0;
    for c in j.chunks.values().filter(|c| c.state == ChunkState::Verified) {
        let recorded = c.digest().ok_or_else(|| vendor(AdapterError::internal("unreadable chunk digest in the journal")))?;
        if ctx.target.identity(TableRole::Owned(&c.staging_table)).await.map_err(vendor)?.is_none() {
            return Err(failed(
                "staging_lost",
                format!("chunk {} is recorded as verified in `{}`, but that table no longer exists", c.index, c.staging_table),
                "someone removed dpone's staging table; see docs/recovery.md (abandon the run and rerun)",
            ));
        }
        let now = ctx.target.inspect(TableRole::Owned(&c.staging_table), None).await.map_err(vendor)?;
        if now.rows != recorded.rows || now.digest != recorded {
            return Err(failed(
                "staging_changed",
                format!(
                    "chunk {} staging `{}` no longer holds the recorded rows ({} vs {})",
                    c.index, c.staging_table, now.digest, recorded
                ),
                "someone modified dpone's staging table, or a PostgreSQL server's crash recovery emptied it (its staging tables are UNLOGGED); \
                 see docs/recovery.md (abandon the run and rerun)",
            ));
        }
        reused += 1;
    }
    Ok(reused)
}
