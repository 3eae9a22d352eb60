//! A window replace's (or full refresh's) publication on a ClickHouse
//! target: exactly one `EXCHANGE TABLES target AND generation`, the outcome
//! read from the tables' UUIDs, never assumed from the response.

use super::ClickhouseTarget;
use crate::client::{Idempotence, table_is};
use dpone_core::ports::{AdapterError, ErrorClass, PublicationOutcome, Result};

impl ClickhouseTarget {
    /// A window replace or full refresh: one `EXCHANGE TABLES` of the
    /// generation and the target, judged by the target's UUID (`windowed`:
    /// a window's publication, reconciled afterwards).
    pub(super) async fn publish_replace_now(&self, generation: &str, windowed: bool) -> Result<PublicationOutcome> {
        let before = self.table_uuid(&self.database, &self.table).await?;
        let gen_uuid = self.table_uuid(&self.database, generation).await?;
        let (Some(before), Some(gen_uuid)) = (before, gen_uuid) else {
            return Err(AdapterError::permanent("publication_failed", "the target or the generation disappeared before publication"));
        };
        // No merge in the generation from here until the reconciliation
        // after the publication ends (the stop follows the table object
        // into the target's name): its parts stay apart from those other
        // writers add to the published target, so the reconciliation
        // tells them apart by block number (`sink/reconcile.rs`). A full
        // refresh replaces everything: nothing to reconcile.
        if windowed {
            self.ddl(&format!("SYSTEM STOP MERGES {}", self.owned_sql(generation))).await?;
        }
        self.pausable_failpoint("replace.before_exchange").await?;
        let fence = self
            .client
            .scalar(&format!("SELECT max(max_block_number) FROM system.parts WHERE {} AND active", table_is(&self.database, generation)))
            .await?
            .parse::<u64>()
            .map_err(|_| AdapterError::permanent("clickhouse_protocol", "expected a block number"))?;
        *self.exchanged_fence.lock().expect("fence lock") = Some((generation.to_string(), fence));
        let exchange = self
            .client
            .execute(&format!("EXCHANGE TABLES {} AND {}", self.target_sql(), self.owned_sql(generation)), Idempotence::Unsafe)
            .await;
        // Judge by the target's identity, whatever the response said.
        let observed = match self.observe_target_uuid().await {
            Ok(u) => u,
            Err(e) => {
                return Err(AdapterError::indeterminate(
                    "outcome_unknown",
                    format!("the EXCHANGE {} and the target's UUID could not be read afterwards: {}", describe(&exchange), e.message),
                )
                .hint("read system.tables: if the target's UUID equals the run's generation UUID the publication happened"));
            }
        };
        let outcome = match observed {
            Some(u) if u == gen_uuid => PublicationOutcome::Published,
            Some(u) if u == before => PublicationOutcome::Absent,
            _ => PublicationOutcome::Unknown,
        };
        match (outcome, exchange) {
            (PublicationOutcome::Absent, Err(e)) => {
                return Err(AdapterError::new(
                    if e.class == ErrorClass::Indeterminate { ErrorClass::Permanent } else { e.class },
                    "publication_failed",
                    format!("EXCHANGE TABLES did not take effect: {}", e.message),
                ));
            }
            (PublicationOutcome::Unknown, _) => return Ok(PublicationOutcome::Unknown),
            (PublicationOutcome::Absent, Ok(())) => return Ok(PublicationOutcome::Unknown),
            (PublicationOutcome::Published, _) => {}
        }
        Ok(PublicationOutcome::Published)
    }
}

fn describe(r: &Result<()>) -> String {
    match r {
        Ok(()) => "was acknowledged".into(),
        Err(e) => format!("failed ({})", e.message),
    }
}
