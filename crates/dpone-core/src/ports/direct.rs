//! A direct publication: the verified chunks are loaded straight into the
//! target inside its one publishing transaction, instead of into staging
//! tables that a later transaction copies into the target.
//!
//! # Protocol
//!
//! The engine starts [`super::Target::publish_direct`] with a [`DirectFeed`]
//! and drives it through a [`DirectDriver`], one step at a time:
//!
//! 1. the target opens its transaction, locks the target against other
//!    writers and removes the window (everything, for a full refresh);
//! 2. per chunk attempt, a [`DirectStep::Load`]: the target loads the
//!    frames inside a savepoint of its own, then reads back what it now
//!    holds in the chunk's range ([`DirectLoaded`]); the engine compares
//!    that with what the source sent and answers with a verdict: keep
//!    (the savepoint is released) or undo (rolled back to it, the
//!    transaction goes on). A load that fails is rolled back to its
//!    savepoint by the target and answered as an error; whether the chunk
//!    is tried again is the engine's decision;
//! 3. [`DirectStep::Commit`]: the target re-checks what it can only check
//!    at the end (rows outside the window, when code of the target's own
//!    ran in the transaction), writes its receipt and commits.
//!
//! A feed dropped without a `Commit` (the run failed, was interrupted or
//! crashed) rolls the whole transaction back: nothing of the run is
//! visible. The outcome of the commit is judged like any publication's,
//! from the target's identity (its receipt), never assumed.

use super::{AdapterError, Contents, FrameRx, Result, RowFilter};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// A rewrite of the errors a direct publication answers a load with (the
/// composition root's redaction of the manifest's credentials).
pub type ErrorMap = Arc<dyn Fn(AdapterError) -> AdapterError + Send + Sync>;

/// Where a direct publication answers a [`DirectStep::Load`]. Its errors
/// pass through the feed's [`ErrorMap`] on the way to the engine: they
/// leave the target without crossing the adapter's return value, where
/// every other error of the target is rewritten.
pub struct LoadedReply {
    tx: oneshot::Sender<Result<DirectLoaded>>,
    map: Option<ErrorMap>,
}

impl std::fmt::Debug for LoadedReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedReply").field("mapped", &self.map.is_some()).finish()
    }
}

impl LoadedReply {
    /// Answers the load; the result back when the engine stopped waiting.
    pub fn send(self, r: Result<DirectLoaded>) -> std::result::Result<(), Result<DirectLoaded>> {
        let r = match (&self.map, r) {
            (Some(map), Err(e)) => Err(map(e)),
            (_, r) => r,
        };
        self.tx.send(r)
    }
}

/// What a direct publication's target reports after loading one chunk.
#[derive(Debug, Clone, PartialEq)]
pub struct DirectLoaded {
    /// Rows the target confirmed written.
    pub written: u64,
    /// Row count and digest of the target's rows in the chunk's range, read
    /// back inside the transaction.
    pub contents: Contents,
    /// Seconds the read-back took (evidence: the chunk's `verify` phase).
    pub read_back_seconds: f64,
    /// Evidence facts of the rows read back (their window values), when
    /// the target tallied them.
    pub window: Option<super::WindowStats>,
}

/// One step the engine asks of a direct publication.
#[derive(Debug)]
pub enum DirectStep {
    /// Load `frames` inside a savepoint, read back the rows of `range`
    /// (all rows of the target when None: a full refresh's one chunk),
    /// answer on `loaded`, then keep (true) or undo (false) the chunk as
    /// `verdict` says; a verdict never sent undoes the chunk.
    Load { index: u32, range: Option<RowFilter>, frames: FrameRx, loaded: LoadedReply, verdict: oneshot::Receiver<bool> },
    /// Every chunk is kept and holds `rows` rows in total: final checks,
    /// the receipt, `COMMIT`. Before the receipt the target may send on
    /// `outside` the evidence facts of its rows outside the window
    /// (`total_rows`, `outside_rows`, `null_window_rows`), counted in the
    /// transaction.
    Commit { rows: u64, outside: oneshot::Sender<super::WindowStats> },
}

/// The steps a direct publication receives.
pub struct DirectFeed {
    steps: mpsc::Receiver<DirectStep>,
    ready: Option<oneshot::Sender<()>>,
    map: Option<ErrorMap>,
}

impl std::fmt::Debug for DirectFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectFeed").field("ready_sent", &self.ready.is_none()).field("mapped", &self.map.is_some()).finish()
    }
}

impl DirectFeed {
    /// Rewrites every error the publication answers a load with by `map`
    /// (after any earlier map).
    #[must_use]
    pub fn map_errors(mut self, map: ErrorMap) -> Self {
        self.map = Some(match self.map.take() {
            Some(first) => Arc::new(move |e| map(first(e))),
            None => map,
        });
        self
    }

    /// Tells the engine that the transaction holds its lock and removed
    /// the window: the sources may start streaming (a source read waiting
    /// for a lock or a long `DELETE` could time out).
    pub fn ready(&mut self) {
        if let Some(r) = self.ready.take() {
            let _ = r.send(());
        }
    }

    /// The next step; None once the engine dropped its end.
    pub async fn recv(&mut self) -> Option<DirectStep> {
        let mut step = self.steps.recv().await?;
        if let DirectStep::Load { loaded, .. } = &mut step {
            loaded.map.clone_from(&self.map);
        }
        Some(step)
    }
}

/// The engine's end of a direct publication.
#[derive(Debug)]
pub struct DirectDriver {
    steps: mpsc::Sender<DirectStep>,
    ready: Option<oneshot::Receiver<()>>,
}

/// A chunk loaded but not judged yet: [`PendingChunk::keep`] or
/// [`PendingChunk::undo`] it (dropping it undoes it).
#[derive(Debug)]
#[must_use = "a loaded chunk is undone unless it is kept"]
pub struct PendingChunk {
    verdict: oneshot::Sender<bool>,
}

impl PendingChunk {
    pub fn keep(self) {
        let _ = self.verdict.send(true);
    }

    pub fn undo(self) {
        let _ = self.verdict.send(false);
    }
}

/// A channel between the engine and a direct publication.
pub fn direct_channel() -> (DirectDriver, DirectFeed) {
    let (steps, feed) = mpsc::channel(1);
    let (ready_tx, ready_rx) = oneshot::channel();
    (DirectDriver { steps, ready: Some(ready_rx) }, DirectFeed { steps: feed, ready: Some(ready_tx), map: None })
}

fn gone() -> super::AdapterError {
    super::AdapterError::of(super::ErrorKind::Cancelled, "cancelled", "the publishing transaction ended before the run asked it to")
}

impl DirectDriver {
    /// Waits until the publication said it is [`DirectFeed::ready`]; an
    /// error when it ended first (its own result says why).
    pub async fn ready(&mut self) -> Result<()> {
        match self.ready.take() {
            Some(r) => r.await.map_err(|_| gone()),
            None => Ok(()),
        }
    }

    /// Hands `frames` to the publication and waits for what the target
    /// holds in `range` afterwards. An error is the load's (its chunk was
    /// rolled back) or the publication's end.
    pub async fn load(&self, index: u32, range: Option<RowFilter>, frames: FrameRx) -> Result<(DirectLoaded, PendingChunk)> {
        let (loaded_tx, loaded_rx) = oneshot::channel();
        let (verdict_tx, verdict_rx) = oneshot::channel();
        let loaded = LoadedReply { tx: loaded_tx, map: None };
        self.steps.send(DirectStep::Load { index, range, frames, loaded, verdict: verdict_rx }).await.map_err(|_| gone())?;
        let loaded = loaded_rx.await.map_err(|_| gone())??;
        Ok((loaded, PendingChunk { verdict: verdict_tx }))
    }

    /// Asks the publication to commit `rows` rows; its outcome is what the
    /// publication's future returns. The receiver gets the facts of the
    /// rows outside the window, if the target counts them.
    pub async fn commit(self, rows: u64) -> Result<oneshot::Receiver<super::WindowStats>> {
        let (outside, facts) = oneshot::channel();
        self.steps.send(DirectStep::Commit { rows, outside }).await.map_err(|_| gone())?;
        Ok(facts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::RowDigest;

    /// A stand-in publication that loads nothing and reports the frames' count.
    async fn serve(mut feed: DirectFeed) -> Vec<String> {
        let mut log = Vec::new();
        feed.ready();
        while let Some(step) = feed.recv().await {
            match step {
                DirectStep::Load { index, mut frames, loaded, verdict, .. } => {
                    let mut rows = 0;
                    while let Some(f) = frames.recv().await {
                        rows += f.rows;
                    }
                    let contents = Contents { rows, digest: RowDigest::new(1) };
                    let _ = loaded.send(Ok(DirectLoaded { written: rows, contents, read_back_seconds: 0.0, window: None }));
                    log.push(format!("{index}:{}", if verdict.await.unwrap_or(false) { "kept" } else { "undone" }));
                }
                DirectStep::Commit { rows, .. } => {
                    log.push(format!("commit {rows}"));
                    return log;
                }
            }
        }
        log.push("rolled back".into());
        log
    }

    fn no_frames() -> FrameRx {
        let (_tx, rx) = crate::ports::frame_channel(1);
        rx
    }

    #[tokio::test]
    async fn verdicts_reach_the_publication_and_a_dropped_driver_rolls_back() {
        let (mut driver, feed) = direct_channel();
        let server = tokio::spawn(serve(feed));
        driver.ready().await.unwrap();
        let (l, pending) = driver.load(0, None, no_frames()).await.unwrap();
        assert_eq!(l.written, 0);
        pending.keep();
        let (_, pending) = driver.load(1, None, no_frames()).await.unwrap();
        drop(pending);
        driver.commit(7).await.unwrap();
        assert_eq!(server.await.unwrap(), vec!["0:kept", "1:undone", "commit 7"]);

        let (driver, feed) = direct_channel();
        let server = tokio::spawn(serve(feed));
        let (_, pending) = driver.load(0, None, no_frames()).await.unwrap();
        pending.undo();
        drop(driver);
        assert_eq!(server.await.unwrap(), vec!["0:undone", "rolled back"]);
    }

    #[tokio::test]
    async fn a_publication_that_ended_is_an_error_not_a_hang() {
        let (mut driver, feed) = direct_channel();
        drop(feed);
        assert_eq!(driver.ready().await.unwrap_err().kind, crate::ports::ErrorKind::Cancelled, "never ready");
        let e = driver.load(0, None, no_frames()).await.unwrap_err();
        assert_eq!(e.kind, crate::ports::ErrorKind::Cancelled);
    }

    #[tokio::test]
    async fn a_load_error_reaches_the_engine_through_the_feeds_maps() {
        let (driver, feed) = direct_channel();
        let redact: ErrorMap = Arc::new(|e: AdapterError| AdapterError { message: e.message.replace("pw", "<redacted>"), ..e });
        let tag: ErrorMap = Arc::new(|e: AdapterError| AdapterError { message: format!("{} (mapped)", e.message), ..e });
        let mut feed = feed.map_errors(redact).map_errors(tag);
        let server = tokio::spawn(async move {
            if let Some(DirectStep::Load { loaded, .. }) = feed.recv().await {
                let _ = loaded.send(Err(AdapterError::permanent("postgres_error:P0001", "server said pw")));
            }
        });
        let e = driver.load(0, None, no_frames()).await.unwrap_err();
        server.await.unwrap();
        assert_eq!((e.code.as_str(), e.message.as_str()), ("postgres_error:P0001", "server said <redacted> (mapped)"));
    }
}
