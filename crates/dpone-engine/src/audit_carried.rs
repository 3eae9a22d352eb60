//! The content audit of a `delivery: changed` run (`sink.strategy.window.audit`,
//! docs/changed-delivery.md "The content audit"): the chunks the authority
//! would carry are checked by a content digest that the source (in the
//! run's snapshot) and the target compute alike, trusting no authority. A
//! chunk whose digests differ is transferred (`audit_mismatch`); an audit
//! that cannot be read transfers the chunks it was to check
//! (`audit_error`), never judging them equal or different.

use crate::context::Ctx;
use dpone_core::audit::{AuditSpec, KeyScope};
use dpone_core::delivery::{AuditSummary, Decision, DeliveryDecisions};
use dpone_core::plan::WindowPlan;
use dpone_core::ports::{AdapterError, ErrorKind, Source, Target};
use dpone_core::window::Chunk;
use std::time::Instant;

/// The longest one audit query may take on either server (the run's
/// lease is renewed meanwhile; a stalled server ends the audit, and the
/// chunks are transferred as `audit_error`).
const AUDIT_QUERY_TIMEOUT_MS: u64 = 600_000;

/// Audits the `unchanged` chunks of `d` (the run is to carry them) and
/// journals what it found in `d.audit`.
pub(crate) async fn audit_carried<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    w: &WindowPlan,
    d: &mut DeliveryDecisions,
    reason: &str,
) -> Result<(), AdapterError> {
    let carried: Vec<Chunk> = d
        .chunks
        .iter()
        .filter(|c| c.decision == Decision::Unchanged)
        .map(|c| Chunk { index: c.index, start: c.start, end: c.end })
        .collect();
    if carried.is_empty() {
        return Ok(());
    }
    let started = Instant::now();
    // The source's columns as described (canonical types): both sides
    // digest them after the route's type mapping (docs/audit.md).
    let spec = AuditSpec {
        columns: ctx.probe.source_columns.clone(),
        window_column: w.column.clone(),
        key: Vec::new(),
        key_scope: KeyScope::ALL,
        query_timeout_ms: AUDIT_QUERY_TIMEOUT_MS,
    };
    let found = async {
        spec.classes()?;
        let audits = crate::audit::compare_chunks(ctx.source.as_ref(), ctx.target.as_ref(), &spec, &carried).await?;
        Ok::<_, AdapterError>(audits.into_iter().map(|a| a.equal).collect::<Vec<bool>>())
    }
    .await;
    let mismatched = match found {
        Ok(equal) => {
            let mut n = 0;
            for (chunk, equal) in carried.iter().zip(equal) {
                if !equal {
                    n += 1;
                    set(d, chunk.index, Decision::AuditMismatch);
                }
            }
            n
        }
        Err(e) if e.keeps_run() || e.kind == ErrorKind::Interrupted => return Err(e),
        Err(e) => {
            tracing::warn!(
                "the content audit could not be read ({}): the {} chunks it was to check are transferred",
                e.message,
                carried.len()
            );
            for chunk in &carried {
                set(d, chunk.index, Decision::AuditError);
            }
            0
        }
    };
    // A chunk now transferred: a carried one the target would copy gives way (`carry_costly`).
    if d.chunks.iter().any(|c| c.decision.transfers()) && !ctx.target.keeps_rows_in_place() {
        for c in d.chunks.iter_mut().filter(|c| c.decision == Decision::Unchanged && c.carried_parts.is_none()) {
            (c.decision, c.carried) = (Decision::CarryCostly, None);
        }
    }
    if mismatched > 0 {
        tracing::warn!(
            "the content audit found {mismatched} of {} carried chunks different from the source: they are transferred",
            carried.len()
        );
    }
    let millis = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    d.audit = Some(AuditSummary { reason: reason.to_string(), chunks: carried.len() as u32, mismatched, millis });
    Ok(())
}

/// Chunk `index` is transferred with `decision`: it carries nothing.
fn set(d: &mut DeliveryDecisions, index: u32, decision: Decision) {
    for c in d.chunks.iter_mut().filter(|c| c.index == index) {
        (c.decision, c.carried, c.carried_parts) = (decision, None, None);
    }
}
