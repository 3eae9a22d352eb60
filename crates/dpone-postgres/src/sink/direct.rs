//! `sink.options.postgres.publication: direct`: the verified chunks are
//! loaded straight into the target inside the one publishing transaction
//! (the protocol of `dpone_core::ports::DirectStep`), so every row is
//! written once and read back once, where the staged publication writes it
//! twice (staging, then the target) and reads it back once.
//!
//! One SERIALIZABLE transaction, on one session holding the target's
//! publication advisory lock (as `transaction.rs`):
//!
//! 1. `LOCK TABLE target IN SHARE ROW EXCLUSIVE MODE` before any query
//!    takes the snapshot: no other writer changes the target until the
//!    commit (readers go on reading the old rows);
//! 2. when the target, a partition or an inheritance child has a trigger
//!    or a rule of its own (code that runs inside the transaction), the
//!    fingerprint of the rows outside the window;
//! 3. `DELETE` of the window (of every row, for a full refresh: `TRUNCATE`
//!    would lock readers out for the whole load);
//! 4. per chunk attempt: `SAVEPOINT`, one binary `COPY` of its frames into
//!    the target, the target's rows of the chunk's range read back with
//!    binary COPY and digested under the canonical types; the engine
//!    compares them with the stream and the chunk is released or rolled
//!    back to its savepoint;
//! 5. with code of the target's own: the window must hold exactly the rows
//!    loaded (`publication_verification_failed`) and the rows outside it
//!    the fingerprint of step 2 (`kept_rows_changed`); without, nothing
//!    but dpone's statements ran, so the chunks' read-backs cover every
//!    row the publication changed (the evidence's count of the rows
//!    outside the window is taken after step 3, before the loads);
//! 6. the receipt naming the run's generation, then `COMMIT`, judged as in
//!    `transaction.rs` (only a lost answer is `outcome_unknown`).
//!
//! What this costs: the target is locked against other writers for the
//! whole load, not only for the publication; a run interrupted before its
//! commit published nothing and keeps nothing, so its next invocation
//! reads the source again (docs/recovery.md). Each chunk's read-back
//! selects its range: with no index on the window column (and no
//! partitioning by it) it scans the target.

use super::batch::{PieceEncoder, send_piece};
use super::fingerprint::SESSION;
use super::transaction::{LOCK_WAIT, commit_outcome, lock_text, rolled_back};
use super::{PostgresTarget, filter_sql};
use crate::encode::{COPY_HEADER, COPY_TRAILER, CopyEncoder};
use crate::error::classify;
use crate::source::quote_ident;
use dpone_core::ports::{
    AdapterError, DirectFeed, DirectLoaded, DirectStep, ErrorKind, FrameRx, PublicationOutcome, Result, RowFilter, WindowStats,
};
use futures_util::SinkExt;
use std::time::Instant;
use tokio_postgres::Client;

/// The savepoint every chunk attempt is loaded under.
const SAVEPOINT: &str = "dpone_chunk";

impl PostgresTarget {
    /// The direct publication (see the module docs).
    pub(super) async fn publish_direct_here(
        &self,
        generation: &str,
        keep: Option<&RowFilter>,
        mut feed: DirectFeed,
    ) -> Result<PublicationOutcome> {
        self.ensure_receipts().await?;
        let client = self.connect().await?;
        let setup = format!("SET application_name = 'dpone publish'; SET lock_timeout = '{LOCK_WAIT}'; {SESSION}");
        client.batch_execute(&setup).await.map_err(|e| classify("preparing the publication", e))?;
        client
            .query_one("SELECT pg_advisory_lock(hashtextextended($1, 0))", &[&lock_text(&self.target_sql())])
            .await
            .map_err(|e| classify("waiting for another publication of this target", e))?;
        client.batch_execute("BEGIN ISOLATION LEVEL SERIALIZABLE").await.map_err(|e| classify("starting the publication", e))?;
        match self.direct_statements(&client, generation, keep, &mut feed).await {
            // Nothing was committed: the session's end (or this ROLLBACK)
            // rolls everything back.
            Err(e) => {
                let _ = client.batch_execute("ROLLBACK").await;
                Err(rolled_back(e))
            }
            Ok(()) => commit_outcome(client.batch_execute("COMMIT").await),
        }
    }

    /// Steps 1-6 of the module docs but the `COMMIT`.
    async fn direct_statements(&self, client: &Client, generation: &str, keep: Option<&RowFilter>, feed: &mut DirectFeed) -> Result<()> {
        let target = self.target_sql();
        client
            .batch_execute(&format!("LOCK TABLE {target} IN SHARE ROW EXCLUSIVE MODE"))
            .await
            .map_err(|e| classify("locking the target", e))?;
        let own_code = self.runs_own_code(client).await?;
        let kept_before = match keep {
            Some(k) if own_code => Some(self.kept_fingerprint(client, k).await?),
            _ => None,
        };
        let remove = match keep {
            Some(k) => format!("DELETE FROM {target} WHERE {}", filter_sql(&RowFilter { inside: true, ..k.clone() })),
            None => format!("DELETE FROM {target}"),
        };
        client.batch_execute(&remove).await.map_err(|e| classify("removing the window", e))?;
        // What stays outside the window, counted before the loads (the
        // lock keeps writers out; code of the target's own that changed it
        // is refused at the commit): counted after them, the scan would
        // read every loaded row too.
        let mut outside_facts = match keep {
            Some(k) => Some(self.outside_facts(client, k).await?),
            None => None,
        };
        feed.ready();
        loop {
            let step = feed
                .recv()
                .await
                .ok_or_else(|| AdapterError::of(ErrorKind::Cancelled, "cancelled", "the run stopped before the publication's commit"))?;
            match step {
                DirectStep::Load { index, range, frames, loaded, verdict } => {
                    savepoint(client, "SAVEPOINT").await?;
                    match self.load_direct_chunk(client, range.as_ref(), frames).await {
                        Ok(l) => {
                            let _ = loaded.send(Ok(l));
                            let kept = verdict.await.unwrap_or(false);
                            savepoint(client, if kept { "RELEASE SAVEPOINT" } else { "ROLLBACK TO SAVEPOINT" }).await?;
                        }
                        Err(e) => {
                            // The code only: this log is written before the
                            // composition root redacts the manifest's
                            // credentials, and a server's message may echo
                            // them. The error itself goes back to the engine.
                            tracing::warn!(chunk = index, code = %e.code, "loading the chunk failed; rolled back to its savepoint");
                            // A session that cannot roll back ends the publication.
                            savepoint(client, "ROLLBACK TO SAVEPOINT").await?;
                            let _ = loaded.send(Err(e));
                        }
                    }
                }
                DirectStep::Commit { rows, outside } => {
                    if own_code {
                        self.check_published(client, keep, rows).await?;
                        if let (Some(k), Some(before)) = (keep, kept_before) {
                            let now = self.kept_fingerprint(client, k).await?;
                            now.check_is(
                                before,
                                "kept_rows_changed",
                                |now, before| {
                                    format!("the target's rows outside the window changed inside the publishing transaction: {before}, then {now}")
                                },
                                "a trigger or rule of the target changed rows outside the window; nothing was published",
                            )?;
                        }
                    }
                    if let Some(facts) = outside_facts.take() {
                        let _ = outside.send(facts);
                    }
                    let receipt = format!("INSERT INTO {} (target, generation, rows) VALUES ($1, $2, $3)", self.receipts_sql());
                    client
                        .execute(&receipt, &[&target, &generation, &(rows as i64)])
                        .await
                        .map_err(|e| classify("writing the receipt", e))?;
                    return Ok(());
                }
            }
        }
    }

    /// One chunk attempt: its frames in one binary COPY into the target,
    /// then the target's rows of `range` read back and digested.
    async fn load_direct_chunk(&self, client: &Client, range: Option<&RowFilter>, mut frames: FrameRx) -> Result<DirectLoaded> {
        let cols = self.columns()?;
        let mut pieces = PieceEncoder::new(
            CopyEncoder::new(cols.iter().map(|c| (c.name.clone(), c.ty.clone())).collect())
                .map_err(|e| AdapterError::permanent("unsupported_type", e.to_string()))?,
        );
        let copy_sql = format!("COPY {} ({}) FROM STDIN (FORMAT binary)", self.target_sql(), self.column_list()?);
        let sink = client.copy_in::<_, bytes::Bytes>(&copy_sql).await.map_err(|e| classify("starting the COPY into the target", e))?;
        futures_util::pin_mut!(sink);
        let (mut sent, mut first) = (0u64, true);
        while let Some(frame) = frames.recv().await {
            // Each frame (and its budget slot) is released once encoded;
            // its piece once sent: nothing is kept for a retry, which
            // rolls back to the savepoint and reads the chunk again.
            let piece = pieces.piece(&frame, first)?;
            first = false;
            sent += frame.rows;
            drop(frame);
            send_piece(&mut sink, &piece).await.map_err(|e| classify("sending the COPY into the target", e))?;
        }
        if first {
            sink.send(bytes::Bytes::from_static(&COPY_HEADER)).await.map_err(|e| classify("sending the COPY into the target", e))?;
        }
        sink.send(bytes::Bytes::from_static(&COPY_TRAILER)).await.map_err(|e| classify("sending the COPY into the target", e))?;
        let written = sink.as_mut().finish().await.map_err(|e| classify("finishing the COPY into the target", e))?;
        if written != sent {
            return Err(AdapterError::permanent(
                "chunk_verification_failed",
                format!("the server confirmed {written} rows for a COPY of {sent}"),
            ));
        }
        let started = Instant::now();
        let window = range.map(|r| r.column.as_str());
        let (contents, tally) = self.read_back_tallying(client, &self.target_sql(), range, window).await?;
        Ok(DirectLoaded {
            written,
            contents,
            read_back_seconds: started.elapsed().as_secs_f64(),
            window: tally.map(|t| t.into_window_stats()),
        })
    }

    /// Evidence facts of the rows outside the window, counted under the
    /// transaction's lock: what the commit leaves there.
    async fn outside_facts(&self, client: &Client, keep: &RowFilter) -> Result<WindowStats> {
        let outside = filter_sql(&RowFilter { inside: false, ..keep.clone() });
        let row = client
            .query_one(
                &format!(
                    "SELECT count(*), count(*) FILTER (WHERE {} IS NULL) FROM {} WHERE {outside}",
                    quote_ident(&keep.column),
                    self.target_sql()
                ),
                &[],
            )
            .await
            .map_err(|e| classify("counting the rows outside the window", e))?;
        let (rows, nulls): (i64, i64) = (row.get(0), row.get(1));
        Ok(WindowStats { total_rows: rows as u64, outside_rows: rows as u64, null_window_rows: nulls as u64, ..WindowStats::default() })
    }
}

async fn savepoint(client: &Client, verb: &str) -> Result<()> {
    client.batch_execute(&format!("{verb} {SAVEPOINT}")).await.map_err(|e| classify("managing a chunk's savepoint", e))
}
