//! How a run ends when it does not succeed, and what that means for the
//! caller: one place maps a failure to its kind, its exit code and its
//! JSON status.
//!
//! The kind follows from the phase the run was in, never from an error's
//! class alone: before the publication intent nothing new is visible
//! (`failed`, publication absent); only a publication can have an unknown
//! outcome (`outcome_unknown`, recorded in the journal by the publishing
//! step itself); after the publication the new data is visible even if
//! the evidence could not be written. An interruption keeps the run for
//! the next invocation whatever the phase.

use crate::context::{Ctx, is_halt};
use crate::journal::Journal;
use dpone_core::Diagnostic;
use dpone_core::ports::{AdapterError, ErrorKind, PublicationOutcome, Source, Target};
use dpone_core::state::{JournalError, PublicationIntent, RunState};
use serde::Serialize;

/// Exit codes of `dpone run` (SPEC §1), one rule for every path:
///
/// - 0: the run succeeded;
/// - 1: the run started writing (its journal, the target's staging or the
///   publication) and then failed: `publication` says what is visible and
///   `dpone status` what to do (including an unknown outcome);
/// - 2: nothing was written: a configuration error, a refusal, or a run
///   that could not start (a server unreachable, authentication refused,
///   the target's lease held by another run, the state store unusable):
///   fix the cause or wait, then run again; there is nothing to recover;
/// - 130: interrupted by a signal in any phase (also while publishing: the
///   publication completes or not, and the next run finishes or resumes).
pub const EXIT_OK: u8 = 0;
pub const EXIT_FAILED: u8 = 1;
pub const EXIT_CONFIG: u8 = 2;
pub const EXIT_INTERRUPTED: u8 = 130;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// Refused before any write (exit 2).
    Refused,
    /// Could not start, and wrote nothing (exit 2): a server, the state
    /// store or the target's lease was not available.
    Unavailable,
    /// Failed; see `publication` for what is visible (exit 1).
    Failed,
    /// Publication outcome could not be established (exit 1, operator action).
    OutcomeUnknown,
    /// Stopped by a signal; the next run resumes (exit 130).
    Interrupted,
}

impl FailureKind {
    /// The process exit code of a run that ended this way.
    pub fn exit_code(self) -> u8 {
        match self {
            FailureKind::Refused | FailureKind::Unavailable => EXIT_CONFIG,
            FailureKind::Failed | FailureKind::OutcomeUnknown => EXIT_FAILED,
            FailureKind::Interrupted => EXIT_INTERRUPTED,
        }
    }

    /// The `status` of the run's JSON document.
    pub fn status(self) -> &'static str {
        match self {
            FailureKind::Refused => "refused",
            FailureKind::Unavailable => "unavailable",
            FailureKind::Failed => "failed",
            FailureKind::OutcomeUnknown => "outcome_unknown",
            FailureKind::Interrupted => "interrupted",
        }
    }
}

/// How one process of a batch ended, for the batch's exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessEnd {
    Succeeded,
    Failed(FailureKind),
    /// Not started (another process was refused first, or a signal came).
    NotRun,
}

/// The exit code of a run of several processes, by the same rule as one:
/// 0 only if every process succeeded; 130 if a signal stopped any; 2 if
/// nothing was written (every process that did not succeed was refused,
/// could not start or did not run, and none succeeded); else 1. A single
/// process exits as it would alone.
pub fn batch_exit_code(ends: &[ProcessEnd]) -> u8 {
    if ends.contains(&ProcessEnd::Failed(FailureKind::Interrupted)) {
        return EXIT_INTERRUPTED;
    }
    if !ends.is_empty() && ends.iter().all(|e| *e == ProcessEnd::Succeeded) {
        return EXIT_OK;
    }
    let wrote =
        ends.iter().any(|e| matches!(e, ProcessEnd::Succeeded | ProcessEnd::Failed(FailureKind::Failed | FailureKind::OutcomeUnknown)));
    if wrote { EXIT_FAILED } else { EXIT_CONFIG }
}

/// The phase a run was in when a step stopped: it decides what is visible
/// and what the journal keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Probing, leasing, opening the source: nothing is written yet.
    Admission,
    /// Staging chunks or building the generation: the old target is visible.
    BeforePublication,
    /// The intent is recorded: the publication may or may not have happened.
    Publishing,
    /// The new data is visible.
    AfterPublication,
}

impl Phase {
    pub fn of(state: RunState) -> Phase {
        match state {
            RunState::Planned | RunState::Staging | RunState::Verified => Phase::BeforePublication,
            RunState::Publishing | RunState::OutcomeUnknown => Phase::Publishing,
            RunState::Published | RunState::EvidenceComplete | RunState::Succeeded => Phase::AfterPublication,
            RunState::Failed => Phase::BeforePublication,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RunFailure {
    pub kind: FailureKind,
    pub code: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Whether anything became visible.
    pub publication: Option<PublicationOutcome>,
    pub refusals: Vec<Diagnostic>,
}

impl RunFailure {
    /// A failure in `phase` caused by `e`.
    pub(crate) fn at(phase: Phase, e: AdapterError, run_id: Option<&str>) -> Self {
        let kind = match (e.kind, phase) {
            (ErrorKind::Interrupted | ErrorKind::Crashed, _) => FailureKind::Interrupted,
            // Admission writes nothing of the run: it could not start.
            (_, Phase::Admission) => FailureKind::Unavailable,
            _ => FailureKind::Failed,
        };
        let publication = match phase {
            Phase::Admission => None,
            Phase::BeforePublication => Some(PublicationOutcome::Absent),
            Phase::Publishing => Some(PublicationOutcome::Unknown),
            Phase::AfterPublication => Some(PublicationOutcome::Published),
        };
        RunFailure {
            kind,
            code: e.code,
            message: e.message,
            hint: e.hint,
            run_id: run_id.map(str::to_string),
            publication,
            refusals: Vec::new(),
        }
    }

    pub(crate) fn refused(refusals: Vec<Diagnostic>) -> Self {
        let first = refusals[0].clone();
        RunFailure {
            kind: FailureKind::Refused,
            code: first.code,
            message: first.message,
            hint: first.hint,
            run_id: None,
            publication: None,
            refusals,
        }
    }

    pub(crate) fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The process exit code for this failure.
    pub fn exit_code(&self) -> u8 {
        self.kind.exit_code()
    }
}

impl std::fmt::Display for RunFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "error[{}]: {}", self.code, self.message)?;
        if let Some(h) = &self.hint {
            write!(f, "\n  hint: {h}")?;
        }
        Ok(())
    }
}

/// Why a step of the run stopped.
pub(crate) enum Stop {
    /// An error: what it means follows from the phase.
    Error(AdapterError),
    /// An error while publishing, after the target was judged unchanged:
    /// it ends the run as a failure before the publication does.
    Unpublished(AdapterError),
    /// The step already recorded how the run ended (e.g. an unknown or
    /// absent publication outcome).
    Ended(RunFailure),
}

impl From<AdapterError> for Stop {
    fn from(e: AdapterError) -> Self {
        Stop::Error(e)
    }
}

pub(crate) type Step = Result<(), Stop>;

/// Ends a run whose step stopped in `phase`. Before the publication, an
/// interruption, a lost lease or a state-store failure keeps the journal
/// and the staging for the next invocation; any other failure records
/// `failed` and drops this run's tables. In and after the publication the
/// journal is left as it is: the next invocation reconciles or finishes.
pub(crate) async fn stop<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal, phase: Phase, stop: Stop) -> RunFailure {
    let (phase, e) = match stop {
        Stop::Ended(f) => return f,
        Stop::Error(e) => (phase, e),
        Stop::Unpublished(e) => (Phase::BeforePublication, e),
    };
    let j = journal.snapshot().await;
    if is_halt(&e) {
        return RunFailure::at(phase, e, Some(&j.run_id));
    }
    let cancelled = ctx.options.cancel.is_cancelled();
    let keep = e.keeps_run() || cancelled;
    let mut failure = RunFailure::at(phase, if cancelled { AdapterError::interrupted() } else { e }, Some(&j.run_id));
    match phase {
        Phase::Admission => {}
        Phase::BeforePublication if cancelled && ctx.publication == dpone_core::publication::Publication::Direct => {
            failure = failure.with_hint(
                "the direct publication was rolled back: nothing was published or kept; run the same command again (it reads the source again)",
            );
        }
        Phase::BeforePublication if cancelled => {
            failure = failure.with_hint(format!(
                "{} of {} chunks are verified and kept; run the same command again to resume",
                j.verified_chunks(),
                j.chunk_count
            ));
        }
        Phase::BeforePublication if keep => {}
        Phase::BeforePublication => {
            let (code, message) = (failure.code.clone(), failure.message.clone());
            let recorded = journal
                .update(|j| {
                    j.state = RunState::Failed;
                    j.error = Some(JournalError { code, message });
                })
                .await;
            if recorded.is_ok() {
                let owned: Vec<String> = j.owned.iter().cloned().collect();
                let _ = ctx.target.drop_tables(&owned).await;
            }
        }
        Phase::Publishing if failure.kind != FailureKind::Interrupted && failure.hint.is_none() => {
            failure = failure.with_hint(
                "the publication's outcome was not established yet; run the same command again: it compares the target's identity with the recorded intent and finishes or publishes once",
            );
        }
        Phase::Publishing => {}
        Phase::AfterPublication => {
            if failure.hint.is_none() {
                failure = failure.with_hint("the new data is visible; run the same command again to finish (the source is not read)");
            }
        }
    }
    failure
}

/// The failure of a run whose publication outcome cannot be established.
pub(crate) fn unknown_failure(run_id: &str, intent: &PublicationIntent) -> RunFailure {
    RunFailure {
        kind: FailureKind::OutcomeUnknown,
        code: "outcome_unknown".into(),
        message: format!(
            "whether the publication took effect cannot be established: the target is neither the generation ({}) nor the previous table ({})",
            intent.generation, intent.target_before
        ),
        hint: Some(format!(
            "stop writers, compare the target's identity with the run's generation `{}`; journals and tables are kept. See docs/recovery.md",
            intent.generation_table
        )),
        run_id: Some(run_id.to_string()),
        publication: Some(PublicationOutcome::Unknown),
        refusals: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_and_statuses_follow_the_kind() {
        let all =
            [FailureKind::Refused, FailureKind::Unavailable, FailureKind::Failed, FailureKind::OutcomeUnknown, FailureKind::Interrupted];
        let got: Vec<(u8, &str)> = all.iter().map(|k| (k.exit_code(), k.status())).collect();
        assert_eq!(got, vec![(2, "refused"), (2, "unavailable"), (1, "failed"), (1, "outcome_unknown"), (130, "interrupted")]);
    }

    #[test]
    fn a_batch_exits_as_its_processes_did() {
        use FailureKind as K;
        use ProcessEnd::{Failed as F, NotRun, Succeeded as Ok};
        assert_eq!(batch_exit_code(&[Ok, Ok]), 0);
        assert_eq!(batch_exit_code(&[Ok, F(K::Refused)]), 1, "something was written");
        assert_eq!(batch_exit_code(&[F(K::Refused), F(K::Unavailable), NotRun]), 2, "nothing was written");
        assert_eq!(batch_exit_code(&[F(K::Failed), Ok]), 1);
        assert_eq!(batch_exit_code(&[Ok, F(K::Interrupted), NotRun]), 130);
        for k in [K::Refused, K::Unavailable, K::Failed, K::OutcomeUnknown, K::Interrupted] {
            assert_eq!(batch_exit_code(&[F(k)]), k.exit_code(), "one process exits as it would alone");
        }
    }

    #[test]
    fn only_the_phase_decides_what_is_visible() {
        let e = || AdapterError::indeterminate("x", "y");
        assert_eq!(RunFailure::at(Phase::BeforePublication, e(), None).kind, FailureKind::Failed);
        assert_eq!(RunFailure::at(Phase::BeforePublication, e(), None).publication, Some(PublicationOutcome::Absent));
        assert_eq!(RunFailure::at(Phase::Publishing, e(), None).publication, Some(PublicationOutcome::Unknown));
        assert_eq!(RunFailure::at(Phase::AfterPublication, e(), None).publication, Some(PublicationOutcome::Published));
        assert_eq!(RunFailure::at(Phase::Admission, AdapterError::interrupted(), None).kind, FailureKind::Interrupted);
        assert_eq!(RunFailure::at(Phase::Admission, e(), None).kind, FailureKind::Unavailable);
    }
}
