//! Failpoints: named moments of a run where a test makes it crash, pause
//! or meet a simulated fault.
//!
//! The engine calls [`Failpoints::at`] at every point of [`POINTS`] (the
//! names agree with the journal states and the engine's files) and acts on
//! the answer: [`Action::Crash`] stops the run at once without writing
//! anything more (an in-process test's `kill -9`), [`Action::Pause`] waits
//! (to widen a race window), [`Action::Fault`] injects the point's own
//! fault (e.g. `lease.stop_renewal`).
//!
//! Core never decides when a point fires and never reads process state: an
//! [`Injector`] is handed in by the caller. The command line builds one from
//! its environment only in a test build (cargo feature `failpoints` of
//! `dpone-cli`), and that one aborts the process itself; a release build
//! has no injector at all, so every point costs one branch on `None`.
//! The names are documented in docs/recovery.md.

use std::sync::Arc;
use std::time::Duration;

/// Every failpoint, in run order. All but the last two are abort points.
pub const POINTS: &[&str] = &[
    "plan.after_persist",
    "staging.before_write",
    "staging.mid_stream",
    "staging.after_ack",
    "chunk.after_verify",
    "checkpoint.after_write",
    "generation.after_build",
    "publish.before_intent",
    "publish.before_exchange",
    "publish.after_exchange",
    "evidence.before_write",
    "evidence.after_write",
    "state.after_succeeded",
    // Simulated faults (the caller injects them): the lease stops renewing;
    // a ClickHouse reconciliation waits at most 1 s for inserts in flight.
    "lease.stop_renewal",
    "reconcile.short_insert_wait",
];

/// Whether `point` is a simulated fault rather than an abort point.
pub fn is_fault(point: &str) -> bool {
    point == "lease.stop_renewal" || point == "reconcile.short_insert_wait"
}

/// Abort points inside an adapter's generation build, hit only by targets
/// that build by linking partitions (ClickHouse partitioned by an
/// expression of the window column): after the history was linked and
/// straddling partitions copied, and after the staged chunks were attached.
pub const BUILD_POINTS: &[&str] = &["generation.after_link", "generation.after_attach"];

/// Abort (or pause) points inside a ClickHouse append's publication: after
/// the target's partitions were linked into the table that replaces it,
/// and after its mark row was written, right before the exchange.
pub const APPEND_POINTS: &[&str] = &["append.after_link", "append.before_exchange"];

/// Abort (or pause) points inside a ClickHouse replace: once its build
/// copied the target's kept rows (an unpartitioned target's, or those of
/// partitions straddling the window), before it checks them still the
/// target's; and in its publication, after it read the target's and the
/// generation's identities, right before `EXCHANGE TABLES` (the engine's
/// `publish.before_exchange` comes before its own re-check of the
/// generation).
pub const REPLACE_POINTS: &[&str] = &["generation.after_copy", "replace.before_exchange"];

/// Abort (or pause) points inside a ClickHouse replace's reconciliation
/// of concurrent writes, after the publication: once the rows to carry
/// were written into the carry table (before their count and digest are
/// checked), and once they were checked, right before they are moved into
/// the published target.
pub const RECONCILE_POINTS: &[&str] = &["reconcile.after_fill", "reconcile.before_move"];

/// Abort points of a `delivery: changed` run (docs/changed-delivery.md):
/// after the chunks' decisions were journaled, and after the records of a
/// published run were written (before its evidence).
pub const DELIVERY_POINTS: &[&str] = &["delivery.after_decide", "delivery.after_records"];

/// Abort (or pause) points of an `incremental_merge`: after the batch was
/// verified, right before the target resolves it to one row per key
/// (`Target::check_merge`, which checks the generation again).
pub const MERGE_POINTS: &[&str] = &["merge.before_resolve"];

/// Abort points: where a crash can be injected ([`POINTS`] minus faults).
pub fn abort_points() -> impl Iterator<Item = &'static str> {
    POINTS.iter().copied().filter(|p| !is_fault(p))
}

/// What a run does at a failpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Stop now; write nothing more (the process "died" here).
    Crash,
    /// Wait this long, then go on.
    Pause(Duration),
    /// Inject the point's own simulated fault.
    Fault,
}

/// Decides, per hit, what happens at a failpoint. Implementations count
/// hits themselves (e.g. "the 2nd hit of `checkpoint.after_write`").
pub trait Injector: Send + Sync + std::fmt::Debug {
    fn at(&self, point: &str) -> Option<Action>;
}

/// The failpoints of one run: none in production.
#[derive(Debug, Clone, Default)]
pub struct Failpoints(Option<Arc<dyn Injector>>);

impl Failpoints {
    pub fn new(injector: Arc<dyn Injector>) -> Self {
        Failpoints(Some(injector))
    }

    /// What to do at `point` (None: carry on).
    #[inline]
    pub fn at(&self, point: &str) -> Option<Action> {
        debug_assert!(
            POINTS.contains(&point)
                || BUILD_POINTS.contains(&point)
                || APPEND_POINTS.contains(&point)
                || REPLACE_POINTS.contains(&point)
                || RECONCILE_POINTS.contains(&point)
                || DELIVERY_POINTS.contains(&point)
                || MERGE_POINTS.contains(&point),
            "unknown failpoint {point}"
        );
        self.0.as_ref().and_then(|i| i.at(point))
    }

    pub fn is_armed(&self) -> bool {
        self.0.is_some()
    }
}

/// A test injector: the `nth` hit (1-based) of `point` gets `action`.
#[derive(Debug)]
pub struct OnHit {
    pub point: String,
    pub nth: u64,
    pub action: Action,
    hits: std::sync::atomic::AtomicU64,
}

impl OnHit {
    pub fn new(point: impl Into<String>, nth: u64, action: Action) -> Self {
        OnHit { point: point.into(), nth: nth.max(1), action, hits: Default::default() }
    }
}

impl Injector for OnHit {
    fn at(&self, point: &str) -> Option<Action> {
        if point != self.point {
            return None;
        }
        let n = self.hits.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        (n == self.nth || matches!(self.action, Action::Pause(_))).then_some(self.action)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_on_hit_injector_fires_once_at_its_hit() {
        let f = Failpoints::new(Arc::new(OnHit::new("checkpoint.after_write", 2, Action::Crash)));
        assert_eq!(f.at("plan.after_persist"), None);
        assert_eq!(f.at("checkpoint.after_write"), None);
        assert_eq!(f.at("checkpoint.after_write"), Some(Action::Crash));
        assert_eq!(f.at("checkpoint.after_write"), None);
        assert!(!Failpoints::default().is_armed());
        assert_eq!(abort_points().count(), POINTS.len() - 2);
    }
}
