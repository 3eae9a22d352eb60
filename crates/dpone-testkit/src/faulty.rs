//! `FaultyTarget`: wraps any [`Target`] and injects faults at chosen calls.
//!
//! A [`Fault`] names a target method ([`TargetOp`]), the call of it that
//! fails (1-based, counted per method) and how it fails ([`FaultKind`]):
//!
//! - `ack_lost`: the call is performed, then an
//!   [`ErrorClass::Indeterminate`] error is returned, as when a server
//!   applied a write but its acknowledgement never arrived;
//! - `timeout`: the call is not performed, the error is indeterminate (the
//!   caller cannot know that nothing happened);
//! - `transient` / `permanent`: the call is not performed and the error
//!   says so with that class.
//!
//! Faults fire at the port boundary, so an adapter's own reconciliation
//! (ClickHouse re-reading the UUID after `EXCHANGE`) is bypassed: the
//! engine sees the raw failure and must judge the outcome itself. A fault
//! fires once. `Fault::parse_list` reads the `op:kind:n` list form used in
//! an environment variable by the CLI's test build (see [`FAULTS_ENV`]).

use crate::schedule::{Schedule, Scheduled, injected_error};
use dpone_core::Diagnostic;
use dpone_core::ports::{
    AdapterError, Contents, EligibilityRequest, ErrorClass, FrameRx, GenerationBuild, PublicationOutcome, Result, RowFilter, TableRole,
    Target, WindowStats,
};
use std::fmt;
use std::future::Future;

/// The environment variable a test build may read with [`Fault::from_env`].
pub const FAULTS_ENV: &str = "DPONE_TARGET_FAULTS";

/// A [`Target`] method that does I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TargetOp {
    Describe,
    Eligibility,
    CreateStaging,
    Load,
    Inspect,
    Count,
    BuildGeneration,
    EstimateGeneration,
    CompareKept,
    Publish,
    Identity,
    OwnedTables,
    AfterPublication,
    WindowStats,
    DropTables,
    Claim,
    RenewClaim,
    ReleaseClaim,
}

impl TargetOp {
    pub const ALL: [TargetOp; 18] = [
        TargetOp::Describe,
        TargetOp::Eligibility,
        TargetOp::CreateStaging,
        TargetOp::Load,
        TargetOp::Inspect,
        TargetOp::Count,
        TargetOp::BuildGeneration,
        TargetOp::EstimateGeneration,
        TargetOp::CompareKept,
        TargetOp::Publish,
        TargetOp::Identity,
        TargetOp::OwnedTables,
        TargetOp::AfterPublication,
        TargetOp::WindowStats,
        TargetOp::DropTables,
        TargetOp::Claim,
        TargetOp::RenewClaim,
        TargetOp::ReleaseClaim,
    ];

    /// The method's name (`create_staging`).
    pub fn name(self) -> &'static str {
        match self {
            TargetOp::Describe => "describe",
            TargetOp::Eligibility => "eligibility",
            TargetOp::CreateStaging => "create_staging",
            TargetOp::Load => "load",
            TargetOp::Inspect => "inspect",
            TargetOp::Count => "count",
            TargetOp::BuildGeneration => "build_generation",
            TargetOp::EstimateGeneration => "estimate_generation",
            TargetOp::CompareKept => "compare_kept",
            TargetOp::Publish => "publish",
            TargetOp::Identity => "identity",
            TargetOp::OwnedTables => "owned_tables",
            TargetOp::AfterPublication => "after_publication",
            TargetOp::WindowStats => "window_stats",
            TargetOp::DropTables => "drop_tables",
            TargetOp::Claim => "claim",
            TargetOp::RenewClaim => "renew_claim",
            TargetOp::ReleaseClaim => "release_claim",
        }
    }

    /// Whether the method can change what the target stores (its tables;
    /// the claim is the run's admission, not a write: a refused run
    /// releases it and has written nothing).
    pub fn writes(self) -> bool {
        matches!(
            self,
            TargetOp::CreateStaging
                | TargetOp::Load
                | TargetOp::BuildGeneration
                | TargetOp::Publish
                | TargetOp::AfterPublication
                | TargetOp::DropTables
        )
    }

    pub fn parse(s: &str) -> Option<TargetOp> {
        TargetOp::ALL.into_iter().find(|op| op.name() == s)
    }
}

impl fmt::Display for TargetOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How an injected call fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// Performed, then an indeterminate error (a lost acknowledgement).
    AckLost,
    /// Not performed; an indeterminate error.
    Timeout,
    /// Not performed; a transient error.
    Transient,
    /// Not performed; a permanent error.
    Permanent,
}

impl FaultKind {
    pub const ALL: [FaultKind; 4] = [FaultKind::AckLost, FaultKind::Timeout, FaultKind::Transient, FaultKind::Permanent];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::AckLost => "ack_lost",
            FaultKind::Timeout => "timeout",
            FaultKind::Transient => "transient",
            FaultKind::Permanent => "permanent",
        }
    }

    pub fn parse(s: &str) -> Option<FaultKind> {
        FaultKind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Whether the wrapped call runs before the error is returned.
    pub fn performs(self) -> bool {
        self == FaultKind::AckLost
    }

    pub fn class(self) -> ErrorClass {
        match self {
            FaultKind::AckLost | FaultKind::Timeout => ErrorClass::Indeterminate,
            FaultKind::Transient => ErrorClass::Transient,
            FaultKind::Permanent => ErrorClass::Permanent,
        }
    }

    /// The code of the injected error (`injected_ack_lost`).
    pub fn code(self) -> String {
        format!("injected_{}", self.name())
    }
}

/// One injected fault: the `nth` call (1-based) of `op` fails as `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub op: TargetOp,
    pub nth: u32,
    pub kind: FaultKind,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.op, self.kind.name(), self.nth)
    }
}

impl Fault {
    pub fn new(op: TargetOp, kind: FaultKind, nth: u32) -> Self {
        Fault { op, nth, kind }
    }

    /// Parses `op:kind[:n]` (`n` defaults to 1), e.g. `publish:ack_lost:1`.
    pub fn parse(spec: &str) -> std::result::Result<Fault, String> {
        let spec = spec.trim();
        let parts: Vec<&str> = spec.split(':').collect();
        let ops = || TargetOp::ALL.iter().map(|o| o.name()).collect::<Vec<_>>().join(", ");
        let kinds = || FaultKind::ALL.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ");
        let (op, kind, nth) = match parts.as_slice() {
            [op, kind] => (*op, *kind, "1"),
            [op, kind, nth] => (*op, *kind, *nth),
            _ => return Err(format!("fault `{spec}` is not `op:kind[:n]` (e.g. `publish:ack_lost:1`)")),
        };
        let op = TargetOp::parse(op).ok_or_else(|| format!("fault `{spec}`: unknown target operation `{op}` (one of {})", ops()))?;
        let kind = FaultKind::parse(kind).ok_or_else(|| format!("fault `{spec}`: unknown fault kind `{kind}` (one of {})", kinds()))?;
        let nth = match nth.parse::<u32>() {
            Ok(n) if n >= 1 => n,
            _ => return Err(format!("fault `{spec}`: call number `{nth}` is not a whole number from 1")),
        };
        Ok(Fault { op, nth, kind })
    }

    /// Parses a comma-separated list; blank entries are ignored.
    pub fn parse_list(list: &str) -> std::result::Result<Vec<Fault>, String> {
        list.split(',').filter(|s| !s.trim().is_empty()).map(Fault::parse).collect()
    }

    /// The faults listed in `var` (none when unset or empty).
    pub fn from_env(var: &str) -> std::result::Result<Vec<Fault>, String> {
        match std::env::var(var) {
            Ok(v) => Fault::parse_list(&v).map_err(|e| format!("{var}: {e}")),
            Err(_) => Ok(Vec::new()),
        }
    }

    fn error(&self) -> AdapterError {
        injected_error(self.kind, self.op.name(), self.nth, self)
    }
}

impl Scheduled for Fault {
    type Op = TargetOp;
    fn op(&self) -> TargetOp {
        self.op
    }
    fn nth(&self) -> u32 {
        self.nth
    }
    fn performs(&self) -> bool {
        self.kind.performs()
    }
    fn error(&self) -> AdapterError {
        Fault::error(self)
    }
}

/// A target that fails where its faults say. Clones share the counters.
#[derive(Debug, Clone)]
pub struct FaultyTarget<T> {
    inner: T,
    faults: Schedule<Fault>,
}

impl<T: Target> FaultyTarget<T> {
    pub fn new(inner: T, faults: Vec<Fault>) -> Self {
        FaultyTarget { inner, faults: Schedule::new(faults) }
    }

    /// Prints `dpone: injected fault <op:kind:n> fired` to stderr whenever a fault fires.
    #[must_use]
    pub fn announcing(mut self) -> Self {
        self.faults.announcing();
        self
    }

    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// Arms another fault (its call number counts from the first call ever).
    pub fn add(&self, fault: Fault) {
        self.faults.add(fault);
    }

    /// Faults that fired, in order.
    pub fn fired(&self) -> Vec<Fault> {
        self.faults.fired()
    }

    /// Faults armed but not fired yet.
    pub fn pending(&self) -> Vec<Fault> {
        self.faults.pending()
    }

    /// Calls of `op` so far.
    pub fn calls(&self, op: TargetOp) -> u32 {
        self.faults.calls(op)
    }

    async fn run<R>(&self, op: TargetOp, call: impl Future<Output = Result<R>>) -> Result<R> {
        self.faults.run(op, call).await
    }
}

impl<T: Target> Target for FaultyTarget<T> {
    async fn describe(&self) -> Result<Option<Vec<dpone_core::types::Column>>> {
        self.run(TargetOp::Describe, self.inner.describe()).await
    }

    async fn eligibility(&self, request: &EligibilityRequest) -> Result<Vec<Diagnostic>> {
        self.run(TargetOp::Eligibility, self.inner.eligibility(request)).await
    }

    async fn create_staging(&self, name: &str) -> Result<()> {
        self.run(TargetOp::CreateStaging, self.inner.create_staging(name)).await
    }

    async fn load(&self, table: &str, frames: FrameRx) -> Result<u64> {
        // A call that is not performed drops the frames: the reader sees a
        // closed channel, as when the connection broke before the load.
        self.run(TargetOp::Load, self.inner.load(table, frames)).await
    }

    async fn inspect(&self, table: TableRole<'_>, filter: Option<&RowFilter>) -> Result<Contents> {
        self.run(TargetOp::Inspect, self.inner.inspect(table, filter)).await
    }

    async fn count(&self, table: TableRole<'_>, filter: Option<&RowFilter>) -> Result<u64> {
        self.run(TargetOp::Count, self.inner.count(table, filter)).await
    }

    async fn part_identities(&self, table: TableRole<'_>) -> Result<Option<Vec<dpone_core::ports::PartIdentity>>> {
        self.inner.part_identities(table).await
    }

    fn keeps_rows_in_place(&self) -> bool {
        self.inner.keeps_rows_in_place()
    }

    fn publication_check(&self) -> dpone_core::evidence::PublicationCheck {
        self.inner.publication_check()
    }

    async fn build_generation(&self, generation: &str, keep: Option<&RowFilter>, stagings: &[String]) -> Result<GenerationBuild> {
        self.run(TargetOp::BuildGeneration, self.inner.build_generation(generation, keep, stagings)).await
    }

    async fn estimate_generation(&self, keep: Option<&RowFilter>) -> Result<dpone_core::ports::GenerationEstimate> {
        self.run(TargetOp::EstimateGeneration, self.inner.estimate_generation(keep)).await
    }

    async fn compare_kept(&self, generation: &str, keep: &RowFilter) -> Result<u64> {
        self.run(TargetOp::CompareKept, self.inner.compare_kept(generation, keep)).await
    }

    async fn publish(&self, generation: &str, keep: Option<&RowFilter>, backup: &str) -> Result<PublicationOutcome> {
        self.run(TargetOp::Publish, self.inner.publish(generation, keep, backup)).await
    }

    fn publishes_direct(&self) -> bool {
        self.inner.publishes_direct()
    }

    fn direct_identity(&self, generation: &str) -> String {
        self.inner.direct_identity(generation)
    }

    /// A `publish` fault: `timeout` / `transient` / `permanent` end the
    /// publication before its transaction starts, `ack_lost` after its
    /// commit.
    async fn publish_direct(
        &self,
        generation: &str,
        keep: Option<&RowFilter>,
        feed: dpone_core::ports::DirectFeed,
    ) -> Result<PublicationOutcome> {
        self.run(TargetOp::Publish, self.inner.publish_direct(generation, keep, feed)).await
    }

    fn scope(&self) -> String {
        self.inner.scope()
    }

    async fn identity(&self, table: TableRole<'_>) -> Result<Option<String>> {
        self.run(TargetOp::Identity, self.inner.identity(table)).await
    }

    async fn owned_tables(&self) -> Result<Vec<String>> {
        self.run(TargetOp::OwnedTables, self.inner.owned_tables()).await
    }

    async fn claim(&self, request: &dpone_core::ports::ClaimRequest) -> Result<dpone_core::ports::ClaimAttempt> {
        self.run(TargetOp::Claim, self.inner.claim(request)).await
    }

    async fn renew_claim(&self, claim: &dpone_core::ports::TargetClaim, ttl_ms: u64, run: &str) -> Result<()> {
        self.run(TargetOp::RenewClaim, self.inner.renew_claim(claim, ttl_ms, run)).await
    }

    async fn release_claim(&self, claim: &dpone_core::ports::TargetClaim) -> Result<()> {
        self.run(TargetOp::ReleaseClaim, self.inner.release_claim(claim)).await
    }

    async fn after_publication(&self, generation: &str, backup: &str) -> Result<()> {
        self.run(TargetOp::AfterPublication, self.inner.after_publication(generation, backup)).await
    }

    fn reconciles_concurrent_writes(&self) -> bool {
        self.inner.reconciles_concurrent_writes()
    }

    async fn reconcile_concurrent(
        &self,
        previous: &str,
        carry: &str,
        scope: dpone_core::ports::ReconcileScope<'_>,
    ) -> Result<Option<dpone_core::ports::Reconciliation>> {
        self.inner.reconcile_concurrent(previous, carry, scope).await
    }

    async fn window_stats(&self, filter: &RowFilter) -> Result<WindowStats> {
        self.run(TargetOp::WindowStats, self.inner.window_stats(filter)).await
    }

    async fn drop_tables(&self, names: &[String]) -> Result<()> {
        self.run(TargetOp::DropTables, self.inner.drop_tables(names)).await
    }

    async fn datetime64_range(&self) -> Result<Option<dpone_core::rowbinary::DateTime64Range>> {
        self.inner.datetime64_range().await
    }

    /// Faults named `identity`: the mark is the identity of an incremental target.
    async fn read_mark(&self) -> Result<Option<dpone_core::incremental::StoredMark>> {
        self.run(TargetOp::Identity, self.inner.read_mark()).await
    }

    /// Faults named `identity`, as `read_mark`.
    async fn peek_mark(&self) -> Result<Option<dpone_core::incremental::StoredMark>> {
        self.run(TargetOp::Identity, self.inner.peek_mark()).await
    }

    /// Faults named `publish`: the append is the incremental publication.
    async fn publish_append(
        &self,
        generation: &str,
        before: Option<&dpone_core::incremental::StoredMark>,
        after: &dpone_core::incremental::StoredMark,
        rows: u64,
    ) -> Result<PublicationOutcome> {
        self.run(TargetOp::Publish, self.inner.publish_append(generation, before, after, rows)).await
    }

    /// Faults named `inspect`: the merge's check reads the generation.
    async fn check_merge(&self, generation: &str, key: &dpone_core::ports::MergeKey) -> Result<dpone_core::ports::MergeCounts> {
        self.run(TargetOp::Inspect, self.inner.check_merge(generation, key)).await
    }

    /// Faults named `publish`: the merge is the incremental publication.
    async fn publish_merge(
        &self,
        generation: &str,
        before: Option<&dpone_core::incremental::StoredMark>,
        after: &dpone_core::incremental::StoredMark,
        key: &dpone_core::ports::MergeKey,
        expected: dpone_core::ports::MergeCounts,
    ) -> Result<PublicationOutcome> {
        self.run(TargetOp::Publish, self.inner.publish_merge(generation, before, after, key, expected)).await
    }

    /// Faults named `publish`: a reset writes the mark as a publication does.
    async fn reset_mark(
        &self,
        before: Option<&dpone_core::incremental::StoredMark>,
        after: Option<&dpone_core::incremental::StoredMark>,
    ) -> Result<()> {
        self.run(TargetOp::Publish, self.inner.reset_mark(before, after)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_and_names_the_bad_part() {
        let faults = Fault::parse_list("publish:ack_lost:1, load:transient:2,drop_tables:permanent").unwrap();
        assert_eq!(
            faults,
            vec![
                Fault::new(TargetOp::Publish, FaultKind::AckLost, 1),
                Fault::new(TargetOp::Load, FaultKind::Transient, 2),
                Fault::new(TargetOp::DropTables, FaultKind::Permanent, 1),
            ]
        );
        assert_eq!(faults[0].to_string(), "publish:ack_lost:1");
        assert!(Fault::parse_list("").unwrap().is_empty());
        let e = Fault::parse_list("publish:ack_lost:1,pubish:timeout:1").unwrap_err();
        assert!(e.contains("unknown target operation `pubish`"), "{e}");
        let e = Fault::parse_list("load:lost:1").unwrap_err();
        assert!(e.contains("unknown fault kind `lost`") && e.contains("ack_lost"), "{e}");
        let e = Fault::parse("load:timeout:0").unwrap_err();
        assert!(e.contains("call number `0`"), "{e}");
        let e = Fault::parse("load").unwrap_err();
        assert!(e.contains("`load` is not `op:kind[:n]`"), "{e}");
    }

    #[test]
    fn every_op_and_kind_round_trips() {
        for op in TargetOp::ALL {
            for kind in FaultKind::ALL {
                let f = Fault::new(op, kind, 3);
                assert_eq!(Fault::parse(&f.to_string()), Ok(f));
                let e = f.error();
                assert_eq!(e.class, kind.class());
                assert!(e.code.starts_with("injected_") && e.message.contains("injected"), "{e:?}");
            }
        }
    }
}
