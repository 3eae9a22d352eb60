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

use crate::schedule::{Faulty, PortFault, PortOp};
use dpone_core::ports::{ErrorClass, Target};
use std::fmt;

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
    /// The content audit's digests and rows (`content_digests`, `content_rows`).
    ContentDigests,
}

impl TargetOp {
    pub const ALL: [TargetOp; 19] = [
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
        TargetOp::ContentDigests,
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
            TargetOp::ContentDigests => "content_digests",
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

/// The operation whose faults a call of a `Target` method meets: its own,
/// or the one it stands for. The mark is the identity of an incremental
/// target (`read_mark`, `peek_mark`); an append, a merge, a mark reset and
/// a direct publication are publications (a direct one's `timeout` /
/// `transient` / `permanent` end it before its transaction starts,
/// `ack_lost` after its commit); the merge's check reads the generation
/// (`inspect`). None: the call passes through (`part_identities`,
/// `datetime64_range`, `reconcile_concurrent`, the calls without I/O).
impl PortOp for TargetOp {
    fn of_method(method: &str) -> Option<TargetOp> {
        match method {
            "read_mark" | "peek_mark" => Some(TargetOp::Identity),
            "publish_direct" | "publish_append" | "publish_merge" | "reset_mark" => Some(TargetOp::Publish),
            "check_merge" => Some(TargetOp::Inspect),
            "content_rows" => Some(TargetOp::ContentDigests),
            other => TargetOp::parse(other),
        }
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
pub type Fault = PortFault<TargetOp>;

/// A target that fails where its faults say (every `Target` method
/// forwarded, module `dpone_core::ports::forward`). Clones share the counters.
pub type FaultyTarget<T> = Faulty<T, Fault>;

dpone_core::forward_target! { impl[T: Target] FaultyTarget<T> => wrap(inner) }

impl Fault {
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
        Ok(Fault::new(op, kind, nth))
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Scheduled;

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
