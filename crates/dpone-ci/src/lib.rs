//! dpone ci: impact-aware acceptance.
//!
//! `dpone ci plan` compares two commits of a repository holding dpone
//! manifests and schedule files and says which acceptance checks the change
//! needs, and why; `dpone ci verify` binds that plan to real JUnit results.
//!
//! - [`git`]: the only I/O of planning: resolving revisions, the raw tree
//!   diff and blob contents, through the system `git` binary. The working
//!   tree is never read.
//! - [`schedules`]: the `dpone.schedules.v1` domain file and its JSON Schema.
//! - [`normalize`]: parsed documents compared field by field, the schedule
//!   set apart.
//! - [`classify`]: one conservative record per changed file.
//! - [`catalog`]: every check a plan can require, with the JUnit suites that
//!   prove it.
//! - [`report`]: the plan document (JSON and Markdown).
//! - [`junit`], [`verify`]: reading JUnit XML and the receipt.
//!
//! The classifier is conservative by construction: a file narrows the checks
//! only when every rule that could make it narrower holds; anything unknown,
//! unparseable or unexpected selects the broad set.

pub mod catalog;
pub mod classify;
pub mod git;
pub mod junit;
pub mod normalize;
pub mod report;
pub mod schedules;
pub mod verify;

/// Version of the classification rules and of the check catalog. Bumped
/// whenever a rule, a check or a check's JUnit proof changes; a plan is only
/// verified by the classifier version that made it.
pub const CLASSIFIER_VERSION: &str = "dpone-ci-classifier/3";
/// Version of the plan document (`dpone ci plan`).
pub const PLAN_SCHEMA_VERSION: &str = "dpone.ci.plan.v1";
/// Version of the receipt document (`dpone ci verify`).
pub const RECEIPT_SCHEMA_VERSION: &str = "dpone.ci.receipt.v1";

/// Hex SHA-256 of bytes, as recorded for every artifact.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    format!("{:x}", Sha256::digest(bytes))
}
