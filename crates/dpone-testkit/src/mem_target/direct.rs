//! The direct publication of a receipt-model `MemTarget`
//! ([`MemTarget::set_direct`]), as PostgreSQL's `publication: direct`.

use super::port::split_frame;
use super::store::{Body, Receipt, contents, select, window_stats};
use super::{MemTarget, RECEIPTS_TABLE};
use crate::faulty::TargetOp;
use dpone_core::ports::{AdapterError, DirectFeed, DirectLoaded, DirectStep, PublicationOutcome, Result, RowFilter};

impl MemTarget {
    /// PostgreSQL's `sink/direct.rs`: the transaction works on a copy of
    /// the target (the window removed), loads each chunk, reads its range
    /// back from the copy, keeps or drops it as the verdict says; the
    /// commit replaces the target with the copy and writes the receipt in
    /// one step. The lock that keeps other writers out is modelled by
    /// refusing a target changed meanwhile. A feed dropped before its
    /// commit leaves everything as it was.
    pub(super) async fn publish_direct_here(
        &self,
        generation: &str,
        keep: Option<&RowFilter>,
        mut feed: DirectFeed,
    ) -> Result<PublicationOutcome> {
        self.log(TargetOp::Publish, vec![generation.to_string()]);
        let described = self.columns()?;
        let (columns, before) = self.lock().read(&self.table)?;
        let mut rows = match keep {
            Some(k) => select(&columns, before.clone(), Some(&RowFilter { inside: false, ..k.clone() }))?,
            None => Vec::new(),
        };
        feed.ready();
        loop {
            let step = feed.recv().await.ok_or_else(|| {
                AdapterError::of(dpone_core::ports::ErrorKind::Cancelled, "cancelled", "the run stopped before the publication's commit")
            })?;
            match step {
                DirectStep::Load { range, mut frames, loaded, verdict, .. } => {
                    let mut chunk = Vec::new();
                    let mut written = 0;
                    let mut failed = None;
                    while let Some(f) = frames.recv().await {
                        match split_frame(&columns, &f.bytes, f.rows) {
                            Ok(r) => chunk.extend(r),
                            Err(e) => failed = Some(e),
                        }
                        written += f.rows;
                    }
                    if let Some(e) = failed {
                        let _ = loaded.send(Err(e));
                        continue;
                    }
                    // A trigger inserting a copy of the first row loaded.
                    if self.lock().direct_tamper
                        && let Some(first) = chunk.first().cloned()
                    {
                        chunk.push(first);
                    }
                    let all: Vec<Vec<u8>> = rows.iter().chain(&chunk).cloned().collect();
                    let read = select(&columns, all, range.as_ref())?;
                    let window = match &range {
                        Some(r) => Some(window_stats(&columns, &read, r)?),
                        None => None,
                    };
                    let contents = contents(&columns, described.len(), &read)?;
                    let _ = loaded.send(Ok(DirectLoaded { written, contents, read_back_seconds: 0.0, window }));
                    if verdict.await.unwrap_or(false) {
                        rows.extend(chunk);
                    }
                }
                DirectStep::Commit { rows: n, outside } => {
                    let mut db = self.lock();
                    if db.read(&self.table)?.1 != before {
                        return Err(AdapterError::verification("kept_rows_changed", "the target changed during the direct publication"));
                    }
                    if let Some(k) = keep {
                        let kept = select(&columns, rows.clone(), Some(&RowFilter { inside: false, ..k.clone() }))?;
                        let _ = outside.send(window_stats(&columns, &kept, k)?);
                    }
                    if !db.tables.contains_key(RECEIPTS_TABLE) {
                        db.create(RECEIPTS_TABLE, Vec::new(), Body::Receipts(Vec::new()))?;
                    }
                    *db.rows_mut(&self.table)? = rows;
                    if let Some(Body::Receipts(r)) = db.tables.get_mut(RECEIPTS_TABLE).map(|t| &mut t.body) {
                        r.push(Receipt { target: self.table.clone(), generation: generation.to_string(), rows: n });
                    }
                    return Ok(PublicationOutcome::Published);
                }
            }
        }
    }
}
