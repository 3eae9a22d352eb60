//! `FaultySource`: wraps any [`Source`] and injects faults at chosen calls,
//! as [`crate::FaultyTarget`] does for targets.
//!
//! A [`SourceFault`] names a source method ([`SourceOp`]), the call of it
//! that fails (1-based, counted per method) and how ([`FaultKind`]):
//! `ack_lost` performs the call (a read streams every frame) then returns
//! an indeterminate error; `timeout` / `transient` / `permanent` do not
//! perform it (a read's stream is closed without a frame). A fault built
//! with [`SourceFault::snapshot_lost`] fails a read as a source whose
//! frozen snapshot ended does (the PostgreSQL source's `snapshot_lost`: a
//! permanent error; rows read under another snapshot would not be one
//! version). Other calls pass through; every call is counted and logged
//! ([`FaultySource::calls`], [`FaultySource::log`]). A fault fires once.

use crate::faulty::FaultKind;
use crate::schedule::{Faulty, PortFault, PortOp, Scheduled, injected_error};
use dpone_core::ports::{AdapterError, Source};
use std::fmt;

/// A [`Source`] method that does I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SourceOp {
    Describe,
    Preflight,
    OpenSnapshot,
    Read,
    ReadGroup,
    AccessPath,
    EstimateRead,
    CloseSnapshot,
    CursorMax,
    ChunkFingerprints,
}

impl SourceOp {
    pub const ALL: [SourceOp; 10] = [
        SourceOp::Describe,
        SourceOp::Preflight,
        SourceOp::OpenSnapshot,
        SourceOp::Read,
        SourceOp::ReadGroup,
        SourceOp::AccessPath,
        SourceOp::EstimateRead,
        SourceOp::CloseSnapshot,
        SourceOp::CursorMax,
        SourceOp::ChunkFingerprints,
    ];

    /// The operation named `s` (a `Source` method's name).
    pub fn parse(s: &str) -> Option<SourceOp> {
        SourceOp::ALL.into_iter().find(|op| op.name() == s)
    }

    /// The method's name (`open_snapshot`).
    pub fn name(self) -> &'static str {
        match self {
            SourceOp::Describe => "describe",
            SourceOp::Preflight => "preflight",
            SourceOp::OpenSnapshot => "open_snapshot",
            SourceOp::Read => "read",
            SourceOp::ReadGroup => "read_group",
            SourceOp::AccessPath => "access_path",
            SourceOp::EstimateRead => "estimate_read",
            SourceOp::CloseSnapshot => "close_snapshot",
            SourceOp::CursorMax => "cursor_max",
            SourceOp::ChunkFingerprints => "chunk_fingerprints",
        }
    }
}

/// Every `Source` method that does I/O meets the faults of its own name.
impl PortOp for SourceOp {
    fn of_method(method: &str) -> Option<SourceOp> {
        SourceOp::parse(method)
    }
}

impl fmt::Display for SourceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One injected fault: the `nth` call (1-based) of `op` fails as `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceFault {
    pub op: SourceOp,
    pub nth: u32,
    pub kind: FaultKind,
    /// The error is the lost snapshot's (`snapshot_lost`), not `injected_<kind>`.
    pub snapshot_lost: bool,
}

impl SourceFault {
    pub fn new(op: SourceOp, kind: FaultKind, nth: u32) -> Self {
        SourceFault { op, nth, kind, snapshot_lost: false }
    }

    /// The `nth` read fails because the run's snapshot is gone: a
    /// permanent `snapshot_lost` error, nothing streamed.
    pub fn snapshot_lost(nth: u32) -> Self {
        SourceFault { snapshot_lost: true, ..SourceFault::new(SourceOp::Read, FaultKind::Permanent, nth) }
    }
}

impl fmt::Display for SourceFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.snapshot_lost { "snapshot_lost" } else { self.kind.name() };
        write!(f, "{}:{kind}:{}", self.op, self.nth)
    }
}

impl Scheduled for SourceFault {
    type Op = SourceOp;
    fn fault(&self) -> PortFault<SourceOp> {
        PortFault::new(self.op, self.kind, self.nth)
    }
    fn error(&self) -> AdapterError {
        if self.snapshot_lost {
            return AdapterError::permanent(
                "snapshot_lost",
                format!("{} call {}: the run's source snapshot is gone (injected fault `{self}`)", self.op, self.nth),
            )
            .hint("the snapshot keeper ended; the run must re-extract the window under a new snapshot");
        }
        injected_error(self.kind, self.op.name(), self.nth, self)
    }
}

/// A source that fails where its faults say (every `Source` method
/// forwarded, module `dpone_core::ports::forward`; a group read's own reads
/// of the inner source are not calls of this wrapper). Clones share the
/// counters.
pub type FaultySource<S> = Faulty<S, SourceFault>;

dpone_core::forward_source! { impl[S: Source] FaultySource<S> => wrap(inner) }

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemSource;
    use crate::mem_source::SourceCall;
    use crate::rows::types_of;
    use crate::target_conformance::{standard_columns, target_rows};
    use dpone_core::ports::{ErrorClass, ReadRequest, ReadStats, Result, frame_channel};

    fn request() -> ReadRequest {
        ReadRequest {
            target_types: types_of(&standard_columns()),
            columns: standard_columns(),
            bounds: None,
            block_rows: 2,
            block_bytes: 1 << 20,
            max_row_bytes: 1 << 16,
            cursor: None,
            digest: Default::default(),
            datetime64_range: None,
        }
    }

    /// Reads the whole table; the read's result and the rows that arrived.
    async fn read_all(source: &FaultySource<MemSource>) -> (Result<ReadStats>, u64) {
        let (tx, mut rx) = frame_channel(4);
        let drain = async move {
            let mut rows = 0;
            while let Some(frame) = rx.recv().await {
                rows += frame.rows;
            }
            rows
        };
        tokio::join!(source.read(request(), tx), drain)
    }

    #[tokio::test]
    async fn faults_fire_once_at_their_call_and_other_calls_pass_through() {
        let mem = MemSource::new(standard_columns(), target_rows());
        let faults = vec![
            SourceFault::new(SourceOp::Describe, FaultKind::Timeout, 2),
            SourceFault::new(SourceOp::OpenSnapshot, FaultKind::Transient, 1),
            SourceFault::new(SourceOp::Read, FaultKind::AckLost, 1),
            SourceFault::snapshot_lost(2),
        ];
        let source = FaultySource::new(mem.clone(), faults.clone());
        assert_eq!(source.describe(None).await.unwrap(), standard_columns());
        let e = source.describe(None).await.unwrap_err();
        assert_eq!((e.class, e.code.as_str()), (ErrorClass::Indeterminate, "injected_timeout"));
        assert!(e.message.contains("describe call 2") && e.message.contains("`describe:timeout:2`"), "{e:?}");
        assert_eq!(source.open_snapshot().await.unwrap_err().class, ErrorClass::Transient);
        source.open_snapshot().await.unwrap();

        // `ack_lost`: every row streamed, then the acknowledgement is lost.
        let (read, rows) = read_all(&source).await;
        assert_eq!((read.unwrap_err().class, rows), (ErrorClass::Indeterminate, target_rows().len() as u64));
        // `snapshot_lost`: nothing streamed, a permanent error saying what to do.
        let (read, rows) = read_all(&source).await;
        let e = read.unwrap_err();
        assert_eq!((e.class, e.code.as_str(), rows), (ErrorClass::Permanent, "snapshot_lost", 0));
        assert!(e.hint.as_deref().is_some_and(|h| h.contains("new snapshot")), "{e:?}");
        let (read, rows) = read_all(&source).await;
        assert_eq!(read.unwrap().rows, rows);

        assert_eq!(source.fired(), faults);
        assert!(source.pending().is_empty());
        assert_eq!((source.calls(SourceOp::Read), source.calls(SourceOp::CloseSnapshot)), (3, 0));
        use SourceOp::*;
        assert_eq!(source.log(), vec![Describe, Describe, OpenSnapshot, OpenSnapshot, Read, Read, Read]);
        // The inner source saw only the calls that were performed.
        let performed = mem.calls().into_iter().filter(|c| matches!(c, SourceCall::Read { .. })).count();
        assert_eq!(performed, 2, "the ack_lost read and the last one");
        assert_eq!(SourceFault::snapshot_lost(2).to_string(), "read:snapshot_lost:2");
    }
}
