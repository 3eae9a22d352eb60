//! Binding a plan to real test results: the receipt.
//!
//! A check is `PASS` only when every suite that proves it (see
//! [`crate::catalog`]) is present in the JUnit files read, executed at least
//! one matching case, and none of its matching cases failed, errored or was
//! skipped, with no failure or skip left unattributed in the suite. Any
//! failure or error makes it `FAIL`; a skip makes it `SKIP`; missing results
//! or zero executed cases leave it `UNVERIFIED`. If any JUnit file could
//! not be read, no check passes (the file might have held a failure).

use crate::catalog::{self, Group, SuiteProof};
use crate::junit::{self, Outcome, Suite};
use crate::report::{self, Plan, PlanBasis, UNVERIFIED};
use crate::{CLASSIFIER_VERSION, PLAN_SCHEMA_VERSION, RECEIPT_SCHEMA_VERSION, git, sha256_hex};
use dpone_core::Diagnostic;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Largest JUnit file read.
pub const MAX_JUNIT_BYTES: usize = 256 << 20;
/// Largest plan file read (a plan is a few kilobytes).
pub const MAX_PLAN_BYTES: usize = 16 << 20;

/// Why [`read_bounded`] returned no bytes.
#[derive(Debug)]
pub enum BoundedReadError {
    /// The file holds more than the limit; nothing past `limit + 1` bytes was read.
    TooLarge { limit: usize },
    /// The file could not be opened or read.
    Io(std::io::Error),
}

impl std::fmt::Display for BoundedReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BoundedReadError::TooLarge { limit } => write!(f, "the file is larger than {limit} bytes"),
            BoundedReadError::Io(e) => write!(f, "{e}"),
        }
    }
}

/// The bytes of `path`, read with a hard bound: at most `limit + 1` bytes
/// are read (the buffer holds at most `limit`), and more than `limit` is
/// refused. The file's metadata is not
/// trusted: a device or a pipe (`/dev/zero`, a FIFO) reports a length of 0
/// and would otherwise be read without end.
pub fn read_bounded(path: &std::path::Path, limit: usize) -> Result<Vec<u8>, BoundedReadError> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(BoundedReadError::Io)?;
    let mut bytes = Vec::new();
    let mut head = file.take(limit as u64);
    head.read_to_end(&mut bytes).map_err(BoundedReadError::Io)?;
    // One byte more, read on its own: the buffer never grows past the limit.
    let mut more = [0u8; 1];
    let extra = loop {
        match head.get_mut().read(&mut more) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => break other.map_err(BoundedReadError::Io)?,
        }
    };
    if extra > 0 {
        return Err(BoundedReadError::TooLarge { limit });
    }
    Ok(bytes)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Status {
    #[serde(rename = "PASS")]
    Pass,
    #[serde(rename = "UNVERIFIED")]
    Unverified,
    #[serde(rename = "SKIP")]
    Skip,
    #[serde(rename = "FAIL")]
    Fail,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Unverified => "UNVERIFIED",
            Status::Skip => "SKIP",
            Status::Fail => "FAIL",
        }
    }
}

/// A JUnit file given to verify, as read by the caller.
#[derive(Debug, Clone)]
pub struct ArtifactInput {
    pub path: String,
    /// `--junit-suite NAME=PATH`: every suite of the file counts as NAME.
    pub suite_override: Option<String>,
    /// The bytes, or why they could not be read.
    pub content: Result<Vec<u8>, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactRecord {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suite_override: Option<String>,
    /// `read`, `unreadable` or `malformed`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Suite names found (after the override).
    pub suites: Vec<String>,
    pub cases: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuiteResult {
    pub suite: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cases: Vec<String>,
    pub status: Status,
    pub found: bool,
    pub executed: u64,
    pub passed: u64,
    pub failed: u64,
    pub errored: u64,
    pub skipped: u64,
    /// Failures, errors and skips counted by the suite but not by a case.
    pub unattributed: u64,
    pub artifacts: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckResult {
    pub id: String,
    pub group: Group,
    pub status: Status,
    pub reason: String,
    pub command: String,
    pub suites: Vec<SuiteResult>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanRef {
    pub path: String,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    pub schema_version: String,
    /// The plan's.
    #[serde(flatten)]
    pub basis: PlanBasis,
    pub plan: PlanRef,
    pub artifacts: Vec<ArtifactRecord>,
    pub checks: Vec<CheckResult>,
    /// Checks per status.
    pub summary: BTreeMap<String, u64>,
    /// True only when every required check is `PASS`.
    pub all_passed: bool,
}

fn invalid(message: impl Into<String>) -> Diagnostic {
    Diagnostic::new("invalid_plan", "--plan", message).hint("pass the plan.json written by `dpone ci plan`, unedited")
}

/// Reads and checks a plan: its versions, its commit ids, and that its
/// checks are exactly what the classifier derives from its file records.
pub fn read_plan(bytes: &[u8]) -> Result<Plan, Diagnostic> {
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| invalid(format!("the plan is not JSON: {e}")))?;
    let version = value.get("schema_version").and_then(|v| v.as_str()).unwrap_or("");
    if version != PLAN_SCHEMA_VERSION {
        return Err(Diagnostic::new(
            "unsupported_plan_version",
            "--plan",
            format!("the plan's schema_version is `{version}`; this dpone reads `{PLAN_SCHEMA_VERSION}`"),
        )
        .hint("make the plan with the same dpone version that verifies it"));
    }
    let plan: Plan = serde_json::from_value(value).map_err(|e| invalid(format!("the plan does not have the plan shape: {e}")))?;
    if plan.basis.classifier_version != CLASSIFIER_VERSION {
        return Err(Diagnostic::new(
            "classifier_version_mismatch",
            "--plan",
            format!("the plan was made by classifier `{}`; this dpone is `{CLASSIFIER_VERSION}`", plan.basis.classifier_version),
        )
        .hint("make the plan with the same dpone version that verifies it"));
    }
    if !git::is_full_sha(&plan.basis.base_sha) || !git::is_full_sha(&plan.basis.head_sha) {
        return Err(invalid("base_sha and head_sha must be full commit ids"));
    }
    if !plan.basis.preserve_existing_required_checks {
        return Err(invalid("preserve_existing_required_checks must be true"));
    }
    if let Some(c) = plan.required_checks.iter().find(|c| c.status != UNVERIFIED) {
        return Err(invalid(format!("check `{}` has status `{}`; a plan's checks are UNVERIFIED", c.id, c.status)));
    }
    for c in &plan.required_checks {
        let Some(def) = catalog::by_id(&c.id) else {
            return Err(invalid(format!("check `{}` is not a check of classifier {CLASSIFIER_VERSION}", c.id)));
        };
        if c.junit != def.proofs() || c.command != def.command {
            return Err(Diagnostic::new(
                "plan_check_mismatch",
                "--plan",
                format!("check `{}` does not have the command and JUnit suites of classifier {CLASSIFIER_VERSION}", c.id),
            )
            .hint("pass the plan.json written by `dpone ci plan`, unedited"));
        }
    }
    let rebuilt = report::build(&plan.basis.base_sha, &plan.basis.head_sha, plan.files.clone());
    let ids = |p: &Plan| p.required_checks.iter().map(|c| c.id.clone()).collect::<Vec<_>>();
    if rebuilt.basis.classification != plan.basis.classification || ids(&rebuilt) != ids(&plan) {
        return Err(invalid(format!(
            "the plan's classification and checks ({}: {}) are not what its file records require ({}: {})",
            plan.basis.classification.as_str(),
            ids(&plan).join(", "),
            rebuilt.basis.classification.as_str(),
            ids(&rebuilt).join(", ")
        )));
    }
    Ok(plan)
}

/// Verifies `plan` against the JUnit files.
pub fn verify(plan: &Plan, plan_ref: PlanRef, inputs: Vec<ArtifactInput>) -> Receipt {
    let mut artifacts = Vec::new();
    let mut by_suite: BTreeMap<String, Vec<(String, Suite)>> = BTreeMap::new();
    for input in inputs {
        let mut rec = ArtifactRecord {
            path: input.path.clone(),
            suite_override: input.suite_override.clone(),
            status: "read".into(),
            sha256: None,
            bytes: None,
            error: None,
            suites: vec![],
            cases: 0,
        };
        match input.content {
            Err(e) => {
                rec.status = "unreadable".into();
                rec.error = Some(e);
            }
            Ok(bytes) => {
                rec.sha256 = Some(sha256_hex(&bytes));
                rec.bytes = Some(bytes.len() as u64);
                let parsed = if bytes.len() > MAX_JUNIT_BYTES {
                    Err(format!("the file is larger than {MAX_JUNIT_BYTES} bytes"))
                } else {
                    std::str::from_utf8(&bytes).map_err(|_| "the file is not UTF-8".to_string()).and_then(junit::parse)
                };
                match parsed {
                    Err(e) => {
                        rec.status = "malformed".into();
                        rec.error = Some(e);
                    }
                    Ok(suites) => {
                        for mut s in suites {
                            if let Some(name) = &input.suite_override {
                                s.name = name.clone();
                            }
                            rec.cases += s.cases.len() as u64;
                            if !rec.suites.contains(&s.name) {
                                rec.suites.push(s.name.clone());
                            }
                            by_suite.entry(s.name.clone()).or_default().push((input.path.clone(), s));
                        }
                    }
                }
            }
        }
        artifacts.push(rec);
    }
    let bad_artifacts: Vec<&str> = artifacts.iter().filter(|a| a.status != "read").map(|a| a.path.as_str()).collect();
    let mut checks = Vec::new();
    for c in &plan.required_checks {
        let proofs = catalog::by_id(&c.id).map(|d| d.proofs()).unwrap_or_else(|| c.junit.clone());
        let suites: Vec<SuiteResult> = proofs.iter().map(|p| judge(p, by_suite.get(&p.suite))).collect();
        let mut status = suites.iter().map(|s| s.status).max().unwrap_or(Status::Unverified);
        let mut reason = reason(&suites, &c.infrastructure);
        if status == Status::Pass && !bad_artifacts.is_empty() {
            status = Status::Unverified;
            reason = format!(
                "the results would pass, but {} could not be read and may hold failures of this check",
                bad_artifacts.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ")
            );
        }
        checks.push(CheckResult { id: c.id.clone(), group: c.group, status, reason, command: c.command.clone(), suites });
    }
    let mut summary: BTreeMap<String, u64> = ["PASS", "FAIL", "SKIP", "UNVERIFIED"].iter().map(|s| (s.to_string(), 0)).collect();
    for c in &checks {
        *summary.entry(c.status.as_str().to_string()).or_default() += 1;
    }
    let all_passed = !checks.is_empty() && checks.iter().all(|c| c.status == Status::Pass);
    Receipt {
        schema_version: RECEIPT_SCHEMA_VERSION.into(),
        basis: plan.basis.clone(),
        plan: plan_ref,
        artifacts,
        checks,
        summary,
        all_passed,
    }
}

fn judge(proof: &SuiteProof, found: Option<&Vec<(String, Suite)>>) -> SuiteResult {
    let mut r = SuiteResult {
        suite: proof.suite.clone(),
        cases: proof.cases.clone(),
        status: Status::Unverified,
        found: found.is_some(),
        executed: 0,
        passed: 0,
        failed: 0,
        errored: 0,
        skipped: 0,
        unattributed: 0,
        artifacts: vec![],
    };
    let Some(found) = found else { return r };
    let mut case_failures = 0;
    for (path, suite) in found {
        if !r.artifacts.contains(path) {
            r.artifacts.push(path.clone());
        }
        r.unattributed += suite.unattributed_failures + suite.unattributed_skips;
        r.failed += suite.unattributed_failures;
        r.skipped += suite.unattributed_skips;
        for case in suite.cases.iter().filter(|c| proof.cases.is_empty() || proof.cases.iter().any(|p| c.path.starts_with(p.as_str()))) {
            match case.outcome {
                Outcome::Passed => r.passed += 1,
                Outcome::Failed => case_failures += 1,
                Outcome::Errored => r.errored += 1,
                Outcome::Skipped => r.skipped += 1,
            }
        }
    }
    r.failed += case_failures;
    r.executed = r.passed + case_failures + r.errored;
    r.status = if r.failed + r.errored > 0 {
        Status::Fail
    } else if r.skipped > 0 {
        Status::Skip
    } else if r.passed == 0 {
        Status::Unverified
    } else {
        Status::Pass
    };
    r
}

fn reason(suites: &[SuiteResult], infrastructure: &[String]) -> String {
    let mut parts = Vec::new();
    for s in suites {
        let name = if s.cases.is_empty() { format!("`{}`", s.suite) } else { format!("`{}` ({})", s.suite, s.cases.join(", ")) };
        match s.status {
            Status::Pass => {}
            Status::Fail => parts.push(format!("{name}: {} failed, {} errored", s.failed, s.errored)),
            Status::Skip => parts.push(format!("{name}: {} skipped; a skipped case is not a pass", s.skipped)),
            Status::Unverified if !s.found => {
                let needs = if infrastructure.is_empty() {
                    String::new()
                } else {
                    format!(" (the check needs {}; without them it cannot run)", infrastructure.join(", "))
                };
                parts.push(format!("{name}: no results in the JUnit files read{needs}"))
            }
            Status::Unverified => parts.push(format!("{name}: no matching test case was executed")),
        }
    }
    if parts.is_empty() {
        let executed: u64 = suites.iter().map(|s| s.executed).sum();
        format!(
            "{executed} cases executed in {}; none failed, errored or was skipped",
            suites.iter().map(|s| format!("`{}`", s.suite)).collect::<Vec<_>>().join(", ")
        )
    } else {
        parts.join("; ")
    }
}

/// The receipt as Markdown.
pub fn markdown(r: &Receipt) -> String {
    let mut s = String::new();
    let verdict = if r.all_passed { "every required check passed" } else { "not every required check passed" };
    s.push_str(&format!("# dpone ci verify: {verdict}\n\n"));
    s.push_str(&format!(
        "Plan `{}` (sha256 `{}`), classification `{}`, base `{}` -> head `{}`, classifier `{}`.\n\n",
        report::cell(&r.plan.path),
        &r.plan.sha256[..r.plan.sha256.len().min(12)],
        r.basis.classification.as_str(),
        r.basis.base_sha,
        r.basis.head_sha,
        r.basis.classifier_version
    ));
    s.push_str("| check | status | reason |\n|---|---|---|\n");
    for c in &r.checks {
        s.push_str(&format!("| `{}` | {} | {} |\n", c.id, c.status.as_str(), report::cell(&c.reason)));
    }
    s.push_str("\n## Artifacts read\n\n| file | status | sha256 | suites |\n|---|---|---|---|\n");
    for a in &r.artifacts {
        s.push_str(&format!(
            "| `{}` | {}{} | `{}` | {} |\n",
            report::cell(&a.path),
            a.status,
            a.error.as_deref().map(|e| format!(": {}", report::cell(e))).unwrap_or_default(),
            a.sha256.as_deref().unwrap_or("-"),
            report::cell(&a.suites.join(", "))
        ));
    }
    s
}

#[cfg(test)]
mod tests;
