//! [`Unparsed`]: the received bytes a [`Transcoder`] has not parsed yet,
//! parsed in place from the transport's chunk.

use super::{FrameBuf, Parsed, TranscodeError, Transcoder};
use bytes::Bytes;

/// Received bytes not parsed yet, parsed in place: rows inside one received
/// chunk are parsed straight from it (no copy); only a row that straddles
/// two chunks is copied, together with as much of the next chunk as it
/// needs, into a small carry buffer. Once the carry's own bytes are
/// consumed, parsing returns to the chunk itself, so the memory held is one
/// chunk (the transport's) plus about one row, whatever the chunk size.
#[derive(Debug, Default)]
pub struct Unparsed {
    /// A row that straddles chunks (its start from earlier chunks), then
    /// the last `borrowed` bytes copied from the front of `chunk[..at]`.
    pub(super) carry: Vec<u8>,
    /// Bytes of `carry` already parsed.
    start: usize,
    /// How many of `carry`'s last bytes are `chunk[at - borrowed..at]`.
    borrowed: usize,
    /// The chunk received last, and how far into it parsing (or copying
    /// into `carry`) has gone.
    chunk: Bytes,
    at: usize,
}

/// The least a straddling row's carry takes from the next chunk at a time.
pub(super) const CARRY_STEP: usize = 4096;

impl Unparsed {
    /// Takes the next received chunk. The drivers push after parsing asked
    /// for more ([`Parsed::NeedMore`]), when the previous chunk is used up;
    /// pushed earlier, the rest of the previous chunk is carried, never lost.
    pub fn push(&mut self, data: Bytes) {
        if self.start == self.carry.len() {
            self.carry.clear();
            self.start = 0;
        }
        if self.at < self.chunk.len() {
            // `carry` ends with chunk[at - borrowed..at]: the rest follows.
            self.carry.extend_from_slice(&self.chunk[self.at..]);
        }
        self.borrowed = 0;
        self.chunk = data;
        self.at = 0;
    }

    /// Bytes received but not parsed yet.
    pub fn len(&self) -> usize {
        self.carry.len() - self.start + self.chunk.len() - self.at
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Parses what is pending into `frame` and drops the bytes consumed; on
    /// an error nothing is consumed.
    #[inline]
    pub fn parse_into<T: Transcoder + ?Sized>(
        &mut self,
        transcoder: &mut T,
        frame: &mut FrameBuf,
    ) -> std::result::Result<Parsed, TranscodeError> {
        loop {
            if self.start < self.carry.len() {
                let (used, parsed) = transcoder.parse(&self.carry[self.start..], frame)?;
                self.start += used;
                let own = self.carry.len() - self.borrowed;
                if self.start >= own {
                    // The straddling row is consumed: what is left of the
                    // carry was borrowed from the chunk, parse it there.
                    self.at -= self.carry.len() - self.start;
                    self.carry.clear();
                    self.start = 0;
                    self.borrowed = 0;
                    if parsed == Parsed::NeedMore && self.at < self.chunk.len() {
                        continue;
                    }
                } else if parsed == Parsed::NeedMore && self.at < self.chunk.len() {
                    // The row needs more of the chunk: take at least as
                    // much again as is pending, so a long row is copied in
                    // a few steps, each parse of it O(its fields).
                    let n = (self.chunk.len() - self.at).min((self.carry.len() - self.start).max(CARRY_STEP));
                    self.carry.extend_from_slice(&self.chunk[self.at..self.at + n]);
                    self.at += n;
                    self.borrowed += n;
                    continue;
                }
                if parsed == Parsed::NeedMore {
                    // The chunk is used up (any of it still pending is in
                    // the carry now): let it go before the next one comes.
                    self.borrowed = 0;
                    self.chunk = Bytes::new();
                    self.at = 0;
                }
                return Ok(parsed);
            }
            let (used, parsed) = transcoder.parse(&self.chunk[self.at..], frame)?;
            self.at += used;
            if parsed == Parsed::NeedMore {
                // Keep the partial row and let the chunk go before the
                // transport is asked for the next one.
                self.carry.clear();
                self.start = 0;
                self.carry.extend_from_slice(&self.chunk[self.at..]);
                self.chunk = Bytes::new();
                self.at = 0;
            }
            return Ok(parsed);
        }
    }
}
