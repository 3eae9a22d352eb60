//! Where [`assemble`](super::assemble) puts its frames: the run's channel or a digest-only read-back.

use super::TranscodeError;
use crate::budget::FrameBuffer;
use crate::ports::{AdapterError, Frame, FrameTx, Result};
use std::future::Future;

/// Where [`assemble`] puts its frames: buffers reserved from a budget,
/// frames sent, the guard. [`FrameTx`] is the run's; [`DigestOnly`] keeps
/// nothing but the stats.
pub trait FrameSink {
    /// A buffer for the next frame, reserving `bytes` (may wait for budget).
    fn buffer(&mut self, bytes: u64) -> impl Future<Output = Result<FrameBuffer>> + Send;

    /// Grows `buffer`'s reservation to `bytes` (may wait for budget).
    fn grow(&mut self, buffer: &mut FrameBuffer, bytes: u64) -> impl Future<Output = Result<()>> + Send;

    /// Hands a full frame on.
    fn send(&mut self, frame: Frame) -> impl Future<Output = Result<()>> + Send;

    /// The guard: lease held, run not cancelled.
    fn check(&self) -> Result<()>;

    /// How a refused row is reported; a source tells how to fix it.
    fn refused(&self, error: TranscodeError) -> AdapterError {
        error.into_read_error()
    }
}

impl FrameSink for FrameTx {
    fn buffer(&mut self, bytes: u64) -> impl Future<Output = Result<FrameBuffer>> + Send {
        FrameTx::buffer(self, bytes)
    }

    fn grow(&mut self, buffer: &mut FrameBuffer, bytes: u64) -> impl Future<Output = Result<()>> + Send {
        FrameTx::grow(self, buffer, bytes)
    }

    fn send(&mut self, frame: Frame) -> impl Future<Output = Result<()>> + Send {
        FrameTx::send(self, frame)
    }

    fn check(&self) -> Result<()> {
        FrameTx::check(self)
    }
}

/// A sink that keeps no frame, for reading rows back only to count and
/// digest them: one buffer is reused, no budget is reserved, and a refused
/// value is reported as what the table stores, without the source's hint.
#[derive(Debug, Default)]
pub struct DigestOnly {
    spare: Vec<u8>,
}

impl FrameSink for DigestOnly {
    async fn buffer(&mut self, _bytes: u64) -> Result<FrameBuffer> {
        let mut bytes = std::mem::take(&mut self.spare);
        bytes.clear();
        Ok(FrameBuffer::new(bytes, None))
    }

    async fn grow(&mut self, _buffer: &mut FrameBuffer, _bytes: u64) -> Result<()> {
        Ok(())
    }

    async fn send(&mut self, mut frame: Frame) -> Result<()> {
        self.spare = std::mem::take(&mut frame.bytes.bytes);
        Ok(())
    }

    fn check(&self) -> Result<()> {
        Ok(())
    }

    fn refused(&self, error: TranscodeError) -> AdapterError {
        AdapterError::permanent(error.code(), error.to_string())
    }
}
