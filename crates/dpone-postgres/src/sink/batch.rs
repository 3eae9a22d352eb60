//! The pieces of a staging COPY: frames encoded into binary COPY data, kept
//! until the server confirms the statement's rows.

use crate::encode::{COPY_HEADER, CopyEncoder};
use dpone_core::ports::{AdapterError, Frame, Result};

/// The encoded pieces of one COPY statement (the header in the first), kept
/// until the server confirms its rows.
#[derive(Default)]
pub(super) struct CopyBatch {
    pub(super) pieces: Vec<bytes::Bytes>,
    pub(super) bytes: usize,
    pub(super) rows: u64,
}

impl CopyBatch {
    pub(super) fn push(&mut self, piece: bytes::Bytes, rows: u64) {
        self.bytes += piece.len();
        self.rows += rows;
        self.pieces.push(piece);
    }
}

/// COPY data is copied into the connection's write buffer one message at a
/// time: a piece goes out in views of at most this size (not copies), so
/// that buffer stays this small instead of growing to the largest piece.
const SEND_SLICE: usize = 64 << 10;

/// Sends `piece` into a COPY in views of at most [`SEND_SLICE`] bytes.
pub(super) async fn send_piece<S>(sink: &mut S, piece: &bytes::Bytes) -> std::result::Result<(), S::Error>
where
    S: futures_util::Sink<bytes::Bytes> + Unpin,
{
    use futures_util::SinkExt;
    for start in (0..piece.len()).step_by(SEND_SLICE) {
        sink.send(piece.slice(start..(start + SEND_SLICE).min(piece.len()))).await?;
    }
    Ok(())
}

/// Encodes frames into pieces sized to what they hold: the capacity comes
/// from the expansion of the frame before, and slack is trimmed, so the
/// pieces a batch keeps until it is confirmed hold little unused memory.
pub(super) struct PieceEncoder {
    encoder: CopyEncoder,
    /// Encoded bytes per 1024 frame bytes in the last frame.
    expansion: usize,
}

impl PieceEncoder {
    pub(super) fn new(encoder: CopyEncoder) -> Self {
        PieceEncoder { encoder, expansion: 1536 }
    }

    /// `frame` as binary COPY data, after the header when `first`.
    pub(super) fn piece(&mut self, frame: &Frame, first: bool) -> Result<bytes::Bytes> {
        let n = frame.bytes.len();
        let mut payload = Vec::with_capacity(n * self.expansion / 1024 + n / 16 + COPY_HEADER.len());
        if first {
            payload.extend_from_slice(&COPY_HEADER);
        }
        self.encoder
            .encode_rows(&frame.bytes, frame.rows, &mut payload)
            .map_err(|e| AdapterError::permanent("invalid_value", e.to_string()).hint("dpone never alters a value to make it fit"))?;
        if let Some(expansion) = (payload.len() * 1024).checked_div(n) {
            self.expansion = expansion;
        }
        if payload.capacity() - payload.len() > payload.len() / 8 {
            payload.shrink_to_fit();
        }
        // Moved into `Bytes`, not copied.
        Ok(bytes::Bytes::from(payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpone_core::budget::FrameBuffer;
    use dpone_core::digest::RowDigest;
    use dpone_core::rowbinary::encode_row;
    use dpone_core::types::parse_clickhouse_type;
    use dpone_core::value::Value;

    /// Pieces are the encoder's bytes (the header in the first only), for
    /// frames whose expansion changes from one to the next.
    #[test]
    fn pieces_are_the_encoded_frames() {
        let types = vec![parse_clickhouse_type("Int64").unwrap(), parse_clickhouse_type("String").unwrap()];
        let columns: Vec<(String, _)> = types.iter().enumerate().map(|(i, t)| (format!("c{i}"), t.clone())).collect();
        let reference = CopyEncoder::new(columns.clone()).unwrap();
        let mut pieces = PieceEncoder::new(CopyEncoder::new(columns).unwrap());
        for (k, text_len) in [0usize, 300, 1, 5000, 2].into_iter().enumerate() {
            let mut rb = Vec::new();
            let rows = 50u64;
            for i in 0..rows {
                encode_row(&mut rb, &types, &[Value::Int(ethnum::I256::from(i)), Value::Bytes("x".repeat(text_len).into_bytes())]).unwrap();
            }
            let frame = Frame { bytes: FrameBuffer::new(rb.clone(), None), rows, digest: RowDigest::new(2) };
            let mut want = if k == 0 { COPY_HEADER.to_vec() } else { Vec::new() };
            reference.encode_rows(&rb, rows, &mut want).unwrap();
            assert_eq!(pieces.piece(&frame, k == 0).unwrap(), want, "frame {k}");
        }
    }
}
