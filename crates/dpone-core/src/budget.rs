//! The byte budget of frame buffers, as RAII reservations.
//!
//! Every encoder-owned frame buffer holds a [`Reservation`] of the bytes it
//! may fill. Reserving waits while the budget is exhausted, so a fast reader
//! pauses (backpressure) instead of buffering more; a single reservation
//! larger than the whole budget is an error, never a wait. A reservation is
//! released when its buffer is dropped: for ClickHouse when the HTTP client
//! has written the frame to the connection, for SQLite when its rows are
//! inserted. Modelled on DataFusion's `MemoryPool::try_grow` /
//! `MemoryReservation`.
//!
//! Released buffers (up to 8, of at most 2 MiB each) are kept idle for the
//! next reservation instead of being freed: reusing them keeps resident
//! memory flat however many frames a run moves. Idle buffers are not
//! reserved, so they may add at most 16 MiB to what the budget bounds, and
//! a buffer is handed out again only to a reservation of at least half its
//! capacity, so a buffer in use holds at most twice its reservation.
//!
//! The budget bounds dpone's own payload buffers only. Driver, HTTP client
//! and server allocations are outside it; evidence reports the budget and
//! the observed peak RSS separately.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Reservations are counted in 16-byte units: fine enough not to inflate
/// small frames, coarse enough that one u32 reservation covers 64 GiB.
const UNIT: u64 = 16;

fn units(bytes: u64) -> u64 {
    bytes.div_ceil(UNIT)
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{needed} bytes cannot be reserved from a budget of {total} bytes")]
pub struct OverBudget {
    pub needed: u64,
    pub total: u64,
}

/// Idle frame buffers kept for reuse: at most this many ...
const POOL_MAX_BUFFERS: usize = 8;
/// ... each of at most this capacity (a buffer grown for one huge row is
/// freed, not kept).
const POOL_MAX_BUFFER_BYTES: usize = 2 << 20;

#[derive(Debug)]
struct Inner {
    sem: Arc<Semaphore>,
    total_units: u64,
    reserved_units: AtomicU64,
    peak_units: AtomicU64,
    waits: AtomicU64,
    /// Buffers of released frames. Reusing them, rather than freeing and
    /// allocating a megabyte per frame on different threads, keeps the
    /// allocator from fragmenting, so resident memory does not drift with
    /// the number of frames a run moves.
    pool: std::sync::Mutex<Vec<Vec<u8>>>,
}

/// A shared byte budget.
#[derive(Debug, Clone)]
pub struct ByteBudget(Arc<Inner>);

impl ByteBudget {
    pub fn new(bytes: u64) -> Self {
        let total_units = units(bytes).clamp(1, u32::MAX as u64);
        ByteBudget(Arc::new(Inner {
            sem: Arc::new(Semaphore::new(total_units as usize)),
            total_units,
            reserved_units: AtomicU64::new(0),
            peak_units: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            pool: std::sync::Mutex::new(Vec::new()),
        }))
    }

    /// An empty buffer of at least `capacity` bytes, reused when one is idle.
    /// An idle buffer is reused only if it holds at most twice `capacity`.
    pub fn vec(&self, capacity: usize) -> Vec<u8> {
        let reused = {
            let mut pool = self.0.pool.lock().expect("buffer pool lock");
            let fits = |v: &Vec<u8>| v.capacity() >= capacity && v.capacity() <= capacity.saturating_mul(2);
            pool.iter().position(fits).map(|i| pool.swap_remove(i))
        };
        reused.unwrap_or_else(|| Vec::with_capacity(capacity))
    }

    /// Keeps a released buffer for reuse, if it is of reusable size.
    fn recycle(&self, mut bytes: Vec<u8>) {
        if bytes.capacity() == 0 || bytes.capacity() > POOL_MAX_BUFFER_BYTES {
            return;
        }
        bytes.clear();
        let mut pool = self.0.pool.lock().expect("buffer pool lock");
        if pool.len() < POOL_MAX_BUFFERS {
            pool.push(bytes);
        }
    }

    /// Room for exactly `frames` frames of `frame_bytes` each, whatever the
    /// rounding of reservations: `(C + 1) * max_bytes` as frames.
    pub fn for_frames(frames: u64, frame_bytes: u64) -> Self {
        Self::new(frames.saturating_mul(units(frame_bytes).max(1) * UNIT))
    }

    /// The budget in bytes (rounded up to whole units).
    pub fn total(&self) -> u64 {
        self.0.total_units * UNIT
    }

    /// Largest amount reserved at once so far.
    pub fn peak(&self) -> u64 {
        self.0.peak_units.load(Ordering::Relaxed) * UNIT
    }

    pub fn reserved(&self) -> u64 {
        self.0.reserved_units.load(Ordering::Relaxed) * UNIT
    }

    /// How often a reservation had to wait for others to be released.
    pub fn waits(&self) -> u64 {
        self.0.waits.load(Ordering::Relaxed)
    }

    async fn acquire(&self, n: u64) -> Result<OwnedSemaphorePermit, OverBudget> {
        if n > self.0.total_units {
            return Err(OverBudget { needed: n * UNIT, total: self.total() });
        }
        let permit = match self.0.sem.clone().try_acquire_many_owned(n as u32) {
            Ok(p) => p,
            Err(_) => {
                self.0.waits.fetch_add(1, Ordering::Relaxed);
                self.0.sem.clone().acquire_many_owned(n as u32).await.expect("the budget's semaphore is never closed")
            }
        };
        let now = self.0.reserved_units.fetch_add(n, Ordering::Relaxed) + n;
        self.0.peak_units.fetch_max(now, Ordering::Relaxed);
        Ok(permit)
    }

    /// Reserves `bytes`, waiting while the budget is exhausted.
    pub async fn reserve(&self, bytes: u64) -> Result<Reservation, OverBudget> {
        let n = units(bytes).max(1);
        let permit = self.acquire(n).await?;
        Ok(Reservation { budget: self.clone(), permit: Some(permit) })
    }

    /// [`ByteBudget::reserve`] for code running on a blocking thread.
    pub fn blocking_reserve(&self, bytes: u64) -> Result<Reservation, OverBudget> {
        futures_lite_block_on(self.reserve(bytes))
    }
}

/// Runs a future to completion on the current (blocking) thread, parking
/// it until the future's waker fires. Enough for a semaphore acquisition;
/// no runtime is involved.
fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

/// A held part of a [`ByteBudget`]; released on drop.
#[derive(Debug)]
pub struct Reservation {
    budget: ByteBudget,
    permit: Option<OwnedSemaphorePermit>,
}

impl Reservation {
    pub fn bytes(&self) -> u64 {
        self.permit.as_ref().map(|p| p.num_permits() as u64).unwrap_or(0) * UNIT
    }

    /// Grows the reservation to at least `bytes`, waiting if needed.
    pub async fn grow_to(&mut self, bytes: u64) -> Result<(), OverBudget> {
        let have = self.permit.as_ref().map(|p| p.num_permits() as u64).unwrap_or(0);
        let want = units(bytes);
        if want <= have {
            return Ok(());
        }
        if want > self.budget.0.total_units {
            return Err(OverBudget { needed: bytes, total: self.budget.total() });
        }
        let more = self.budget.acquire(want - have).await?;
        match &mut self.permit {
            Some(p) => p.merge(more),
            None => self.permit = Some(more),
        }
        Ok(())
    }

    /// [`Reservation::grow_to`] for code running on a blocking thread.
    pub fn blocking_grow_to(&mut self, bytes: u64) -> Result<(), OverBudget> {
        futures_lite_block_on(self.grow_to(bytes))
    }

    /// Returns what exceeds `bytes` to the budget.
    pub fn shrink_to(&mut self, bytes: u64) {
        let keep = units(bytes).max(1);
        if let Some(p) = &mut self.permit {
            let have = p.num_permits() as u64;
            if have > keep
                && let Some(extra) = p.split((have - keep) as usize)
            {
                self.budget.0.reserved_units.fetch_sub(have - keep, Ordering::Relaxed);
                drop(extra);
            }
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(p) = self.permit.take() {
            self.budget.0.reserved_units.fetch_sub(p.num_permits() as u64, Ordering::Relaxed);
        }
    }
}

/// A frame's bytes together with the reservation that pays for them.
#[derive(Debug, Default)]
pub struct FrameBuffer {
    pub bytes: Vec<u8>,
    reservation: Option<Reservation>,
}

impl FrameBuffer {
    pub fn new(bytes: Vec<u8>, reservation: Option<Reservation>) -> Self {
        FrameBuffer { bytes, reservation }
    }

    pub fn reservation_mut(&mut self) -> Option<&mut Reservation> {
        self.reservation.as_mut()
    }

    /// Reserved bytes (0 when unbudgeted).
    pub fn reserved(&self) -> u64 {
        self.reservation.as_ref().map(Reservation::bytes).unwrap_or(0)
    }

    /// Shrinks the reservation to the bytes actually held (a sealed frame).
    pub fn seal(&mut self) {
        let len = self.bytes.len() as u64;
        if let Some(r) = &mut self.reservation {
            r.shrink_to(len);
        }
    }

    /// Zero-copy `Bytes` that keep the reservation until the last clone is
    /// dropped (e.g. once an HTTP client has written them out).
    pub fn into_bytes(self) -> bytes::Bytes {
        bytes::Bytes::from_owner(self)
    }
}

impl Drop for FrameBuffer {
    /// Returns the buffer to its budget's pool, then (field drop order)
    /// releases the reservation.
    fn drop(&mut self) {
        if let Some(r) = &self.reservation {
            r.budget.recycle(std::mem::take(&mut self.bytes));
        }
    }
}

impl AsRef<[u8]> for FrameBuffer {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl std::ops::Deref for FrameBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reservations_wait_and_release() {
        let budget = ByteBudget::new(4 * 1024);
        let a = budget.reserve(3 * 1024).await.unwrap();
        assert_eq!(budget.reserved(), 3 * 1024);
        // Too much for what is left: the second reservation waits.
        let b = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.reserve(2 * 1024).await.unwrap() })
        };
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!b.is_finished(), "a reservation beyond the budget waits");
        drop(a);
        let b = b.await.unwrap();
        assert_eq!(b.bytes(), 2 * 1024);
        assert_eq!(budget.waits(), 1);
        assert!(budget.peak() <= budget.total());
        assert!(budget.reserve(5 * 1024).await.is_err(), "more than the whole budget is an error, not a wait");
    }

    #[test]
    fn blocking_reservations_wait_too() {
        let budget = ByteBudget::new(2 * 1024);
        let a = budget.blocking_reserve(2 * 1024).unwrap();
        let b = {
            let budget = budget.clone();
            std::thread::spawn(move || budget.blocking_reserve(1024).unwrap().bytes())
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!b.is_finished());
        drop(a);
        assert_eq!(b.join().unwrap(), 1024);
    }

    #[tokio::test]
    async fn grow_shrink_and_bytes_owner() {
        let budget = ByteBudget::new(8 * 1024);
        let mut r = budget.reserve(1024).await.unwrap();
        r.grow_to(5 * 1024).await.unwrap();
        assert_eq!(budget.reserved(), 5 * 1024);
        r.shrink_to(2000);
        assert_eq!(budget.reserved(), 2000);
        let mut buf = FrameBuffer::new(vec![7u8; 100], Some(r));
        buf.seal();
        assert_eq!(budget.reserved(), 112, "sealing keeps what the bytes need, rounded to 16-byte units");
        let bytes = buf.into_bytes();
        assert_eq!(bytes.len(), 100);
        assert_eq!(budget.reserved(), 112, "the reservation lives as long as the bytes");
        drop(bytes);
        assert_eq!(budget.reserved(), 0);
    }

    #[tokio::test]
    async fn released_buffers_are_reused_within_bounds() {
        let budget = ByteBudget::new(64 << 20);
        let r = budget.reserve(4096).await.unwrap();
        let mut buf = FrameBuffer::new(budget.vec(4096), Some(r));
        buf.bytes.extend_from_slice(b"frame");
        let ptr = buf.bytes.as_ptr();
        drop(buf.into_bytes());
        assert_eq!(budget.reserved(), 0);
        let small = budget.vec(1024);
        assert_ne!(small.as_ptr(), ptr, "a buffer more than twice the request is not handed out");
        let again = budget.vec(2048);
        assert_eq!(again.as_ptr(), ptr, "the released buffer is handed out again");
        assert!(again.is_empty() && again.capacity() >= 4096);
        // A buffer grown for one huge row is freed, not kept.
        let r = budget.reserve(POOL_MAX_BUFFER_BYTES as u64 + 1).await.unwrap();
        drop(FrameBuffer::new(Vec::with_capacity(POOL_MAX_BUFFER_BYTES + 1), Some(r)));
        assert!(budget.vec(POOL_MAX_BUFFER_BYTES + 1).capacity() > POOL_MAX_BUFFER_BYTES);
        assert!(budget.0.pool.lock().unwrap().is_empty());
        // At most POOL_MAX_BUFFERS idle buffers are kept.
        for _ in 0..POOL_MAX_BUFFERS + 3 {
            budget.recycle(Vec::with_capacity(16));
        }
        assert_eq!(budget.0.pool.lock().unwrap().len(), POOL_MAX_BUFFERS);
    }
}
