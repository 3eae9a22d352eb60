//! Frames and the bounded, guarded channel that carries them from a
//! source's reader to a target's loader, with budget reservations.

use super::error::{AdapterError, Result};
use crate::budget::{ByteBudget, FrameBuffer, OverBudget};
use crate::digest::RowDigest;

/// Whole RowBinary rows plus their count and digest. The bytes hold their
/// budget reservation until they are dropped.
#[derive(Debug)]
pub struct Frame {
    pub bytes: FrameBuffer,
    pub rows: u64,
    pub digest: RowDigest,
}

/// A check run by the sending side of a frame channel: lease still held,
/// run not cancelled, limits respected. It sees each frame before it is
/// sent (`Some`) and is also run on its own (`None`) at least every
/// [`crate::state::LEASE_CHECK_ROWS`] rows. An error stops the stream.
pub type FrameGuard = std::sync::Arc<dyn Fn(Option<&Frame>) -> Result<()> + Send + Sync>;

/// Sending half of a bounded frame channel.
#[derive(Clone)]
pub struct FrameTx {
    tx: tokio::sync::mpsc::Sender<Frame>,
    guard: Option<FrameGuard>,
    budget: Option<ByteBudget>,
}

impl std::fmt::Debug for FrameTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameTx")
            .field("guarded", &self.guard.is_some())
            .field("budget", &self.budget.as_ref().map(ByteBudget::total))
            .finish()
    }
}

/// Receiving half of a bounded frame channel.
#[derive(Debug)]
pub struct FrameRx(tokio::sync::mpsc::Receiver<Frame>);

/// A channel holding at most `capacity` frames: a full channel pauses the sender.
pub fn frame_channel(capacity: usize) -> (FrameTx, FrameRx) {
    let (tx, rx) = tokio::sync::mpsc::channel(capacity.max(1));
    (FrameTx { tx, guard: None, budget: None }, FrameRx(rx))
}

/// Like [`frame_channel`], with `guard` run before every frame and by
/// [`FrameTx::check`], and frame buffers reserved from `budget`.
pub fn guarded_frame_channel(capacity: usize, guard: FrameGuard, budget: ByteBudget) -> (FrameTx, FrameRx) {
    let (mut tx, rx) = frame_channel(capacity);
    tx.guard = Some(guard);
    tx.budget = Some(budget);
    (tx, rx)
}

fn over_budget(e: OverBudget) -> AdapterError {
    AdapterError::limit("over_budget", format!("a frame buffer of {} bytes does not fit the payload budget of {} bytes", e.needed, e.total))
        .hint("raise native_chunks.max_bytes (the budget is (C + 1) * max_bytes) or lower the row size")
}

impl FrameTx {
    /// Runs the guard. Sources call it at least every
    /// [`crate::state::LEASE_CHECK_ROWS`] rows, so a lost lease or a
    /// cancellation stops a long frame early.
    #[inline]
    pub fn check(&self) -> Result<()> {
        match &self.guard {
            Some(g) => g(None),
            None => Ok(()),
        }
    }

    /// A new frame buffer with `bytes` reserved from the run's budget;
    /// waits while the budget is exhausted (backpressure).
    pub async fn buffer(&self, bytes: u64) -> Result<FrameBuffer> {
        Ok(match &self.budget {
            Some(b) => {
                let reservation = b.reserve(bytes).await.map_err(over_budget)?;
                FrameBuffer::new(b.vec(bytes as usize), Some(reservation))
            }
            None => FrameBuffer::new(Vec::with_capacity(bytes as usize), None),
        })
    }

    /// [`FrameTx::buffer`] for adapters that read on a blocking thread.
    pub fn blocking_buffer(&self, bytes: u64) -> Result<FrameBuffer> {
        Ok(match &self.budget {
            Some(b) => {
                let reservation = b.blocking_reserve(bytes).map_err(over_budget)?;
                FrameBuffer::new(b.vec(bytes as usize), Some(reservation))
            }
            None => FrameBuffer::new(Vec::with_capacity(bytes as usize), None),
        })
    }

    /// Grows `buffer`'s reservation to `bytes` (a row larger than planned).
    pub async fn grow(&self, buffer: &mut FrameBuffer, bytes: u64) -> Result<()> {
        match buffer.reservation_mut() {
            Some(r) => r.grow_to(bytes).await.map_err(over_budget),
            None => Ok(()),
        }
    }

    /// [`FrameTx::grow`] on a blocking thread.
    pub fn blocking_grow(&self, buffer: &mut FrameBuffer, bytes: u64) -> Result<()> {
        match buffer.reservation_mut() {
            Some(r) => r.blocking_grow_to(bytes).map_err(over_budget),
            None => Ok(()),
        }
    }

    pub async fn send(&self, mut frame: Frame) -> Result<()> {
        if let Some(g) = &self.guard {
            g(Some(&frame))?;
        }
        frame.bytes.seal();
        self.tx.send(frame).await.map_err(|_| AdapterError::cancelled())
    }

    /// For adapters that read on a blocking thread.
    pub fn blocking_send(&self, mut frame: Frame) -> Result<()> {
        if let Some(g) = &self.guard {
            g(Some(&frame))?;
        }
        frame.bytes.seal();
        self.tx.blocking_send(frame).map_err(|_| AdapterError::cancelled())
    }
}

impl FrameRx {
    pub async fn recv(&mut self) -> Option<Frame> {
        self.0.recv().await
    }

    pub fn blocking_recv(&mut self) -> Option<Frame> {
        self.0.blocking_recv()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::RowDigest;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A fast reader feeding a slow consumer pauses on the budget: the
    /// bytes it holds never exceed the budget, however much it could read.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_budget_pauses_the_reader() {
        let frame_bytes = 64 * 1024u64;
        let budget = ByteBudget::new(4 * frame_bytes);
        let guard: FrameGuard = std::sync::Arc::new(|_| Ok(()));
        let (tx, mut rx) = guarded_frame_channel(8, guard, budget.clone());
        let produced = std::sync::Arc::new(AtomicU64::new(0));
        let reader = {
            let produced = produced.clone();
            tokio::spawn(async move {
                for _ in 0..64 {
                    let mut buf = tx.buffer(frame_bytes).await.unwrap();
                    buf.bytes.resize(frame_bytes as usize, 7);
                    tx.send(Frame { bytes: buf, rows: 1, digest: RowDigest::new(0) }).await.unwrap();
                    produced.fetch_add(1, Ordering::SeqCst);
                }
            })
        };
        let mut consumed = 0u64;
        while let Some(frame) = rx.recv().await {
            // The reader may be at most budget/frame frames ahead, although
            // the channel alone would let it run 8 frames ahead.
            let ahead = produced.load(Ordering::SeqCst) - consumed;
            assert!(ahead <= 5, "the reader ran {ahead} frames ahead of a slow consumer");
            assert!(budget.reserved() <= budget.total());
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            drop(frame);
            consumed += 1;
        }
        reader.await.unwrap();
        assert_eq!(consumed, 64);
        assert!(budget.waits() > 0, "the reader waited for budget");
        assert!(budget.peak() <= budget.total());
        assert_eq!(budget.reserved(), 0, "every reservation was released");
    }

    #[tokio::test]
    async fn a_frame_larger_than_the_budget_is_an_error_not_a_wait() {
        let budget = ByteBudget::new(1024 * 1024);
        let (tx, _rx) = guarded_frame_channel(1, std::sync::Arc::new(|_| Ok(())), budget);
        let err = tx.buffer(2 * 1024 * 1024).await.unwrap_err();
        assert_eq!(err.code, "over_budget");
    }
}
