//! The plan document: what a change needs, and why.
//!
//! Serialized as JSON (`schema_version` `dpone.ci.plan.v1`, documented in
//! docs/ci.md) and rendered as Markdown for a pull-request comment. The
//! document is deterministic: files sorted by path, checks in catalog order.

use crate::catalog::{self, CheckDef, Group, SuiteProof};
use crate::classify::{Aspect, FileClass, FileRecord};
use crate::{CLASSIFIER_VERSION, PLAN_SCHEMA_VERSION};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Classification {
    NoChanges,
    ScheduleOnly,
    RouteScoped,
    Broad,
}

impl Classification {
    pub fn as_str(self) -> &'static str {
        match self {
            Classification::NoChanges => "no_changes",
            Classification::ScheduleOnly => "schedule_only",
            Classification::RouteScoped => "route_scoped",
            Classification::Broad => "broad",
        }
    }
}

/// Status of a check in a plan: always `UNVERIFIED` (only `verify` can say more).
pub const UNVERIFIED: &str = "UNVERIFIED";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequiredCheck {
    pub id: String,
    pub group: Group,
    pub title: String,
    pub reason: String,
    pub command: String,
    /// The JUnit suites (and case prefixes) whose results prove the check.
    pub junit: Vec<SuiteProof>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub infrastructure: Vec<String>,
    pub status: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OptInJob {
    pub id: String,
    pub title: String,
    pub command: String,
    pub required: bool,
    /// True when the change touches a route this job measures.
    pub suggested: bool,
}

/// What a plan classified and how: carried unchanged into the receipt
/// that verifies it (in both documents these are top-level fields).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanBasis {
    pub classifier_version: String,
    pub base_sha: String,
    pub head_sha: String,
    pub classification: Classification,
    pub preserve_existing_required_checks: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub schema_version: String,
    #[serde(flatten)]
    pub basis: PlanBasis,
    /// Routes whose smoke the plan requires.
    pub routes: Vec<String>,
    pub files: Vec<FileRecord>,
    pub required_checks: Vec<RequiredCheck>,
    pub opt_in_jobs: Vec<OptInJob>,
}

/// The overall class of a set of file records.
pub fn classification(files: &[FileRecord]) -> Classification {
    match files.iter().map(|f| f.class).max() {
        None => Classification::NoChanges,
        Some(FileClass::ScheduleOnly) => Classification::ScheduleOnly,
        Some(FileClass::RouteScoped) => Classification::RouteScoped,
        Some(FileClass::Broad) => Classification::Broad,
    }
}

fn required(def: &CheckDef, reason: String) -> RequiredCheck {
    RequiredCheck {
        id: def.id.into(),
        group: def.group,
        title: def.title.into(),
        reason,
        command: def.command.into(),
        junit: def.proofs(),
        infrastructure: def.infrastructure.iter().map(|s| s.to_string()).collect(),
        status: UNVERIFIED.into(),
    }
}

/// `a`, `a and b`, `a, b, c and 2 more`.
fn list(items: &[&str]) -> String {
    const SHOWN: usize = 3;
    let quoted: Vec<String> = items.iter().take(SHOWN).map(|s| format!("`{s}`")).collect();
    match items.len() {
        0 => String::new(),
        1 => quoted[0].clone(),
        n if n <= SHOWN => format!("{} and {}", quoted[..n - 1].join(", "), quoted[n - 1]),
        n => format!("{} and {} more", quoted.join(", "), n - SHOWN),
    }
}

/// Builds the plan from the classified files.
pub fn build(base_sha: &str, head_sha: &str, mut files: Vec<FileRecord>) -> Plan {
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let class = classification(&files);
    let paths_of = |c: FileClass| files.iter().filter(|f| f.class == c).map(|f| f.path.as_str()).collect::<Vec<_>>();
    let mut checks: Vec<RequiredCheck> = catalog::GATES
        .iter()
        .map(|g| required(g, "existing mandatory gate: kept for every change (preserve_existing_required_checks)".into()))
        .collect();
    let cause = match class {
        Classification::NoChanges => String::new(),
        Classification::ScheduleOnly => format!("the schedule changed in {}", list(&paths_of(FileClass::ScheduleOnly))),
        Classification::RouteScoped => format!("route settings changed in {}", list(&paths_of(FileClass::RouteScoped))),
        Classification::Broad => format!("broad change: {}", list(&paths_of(FileClass::Broad))),
    };
    if class != Classification::NoChanges {
        for c in catalog::CONTRACTS {
            checks.push(required(c, format!("{cause}; the {} must hold", c.title.split(':').next().unwrap_or(c.title))));
        }
    }
    // route -> (aspects, files)
    let mut routes: BTreeMap<String, (Vec<Aspect>, Vec<&str>)> = BTreeMap::new();
    for f in files.iter().filter(|f| f.class == FileClass::RouteScoped) {
        for r in &f.routes {
            let e = routes.entry(r.clone()).or_default();
            e.0.extend(f.aspects.iter().copied());
            e.1.push(&f.path);
        }
    }
    let mut smoked = Vec::new();
    match class {
        Classification::RouteScoped => {
            for (route, (mut aspects, paths)) in routes {
                aspects.sort();
                aspects.dedup();
                let what = aspects.iter().map(|a| format!("{a:?}").to_lowercase()).collect::<Vec<_>>().join(", ");
                for c in catalog::route_checks(&route) {
                    let needed = c.group == Group::RouteSmoke || aspects.contains(&Aspect::Recovery);
                    if needed {
                        checks.push(required(c, format!("{what} settings of the route {route} changed in {}", list(&paths))));
                    }
                }
                smoked.push(route);
            }
        }
        Classification::Broad => {
            for c in catalog::ROUTES {
                checks.push(required(c, format!("{cause}; every route is exercised")));
                if let Some(r) = c.route
                    && !smoked.iter().any(|s| s == r)
                {
                    smoked.push(r.to_string());
                }
            }
            checks.push(required(&catalog::BROAD, format!("{cause}; the whole test suite is required")));
        }
        Classification::NoChanges | Classification::ScheduleOnly => {}
    }
    let opt_in_jobs = catalog::OPT_IN_JOBS
        .iter()
        .map(|j| OptInJob {
            id: j.id.into(),
            title: j.title.into(),
            command: j.command.into(),
            required: false,
            suggested: class == Classification::Broad || j.routes.iter().any(|r| smoked.iter().any(|s| s == r)),
        })
        .collect();
    Plan {
        schema_version: PLAN_SCHEMA_VERSION.into(),
        basis: PlanBasis {
            classifier_version: CLASSIFIER_VERSION.into(),
            base_sha: base_sha.into(),
            head_sha: head_sha.into(),
            classification: class,
            preserve_existing_required_checks: true,
        },
        routes: smoked,
        files,
        required_checks: checks,
        opt_in_jobs,
    }
}

/// Escapes text for a Markdown table cell.
pub fn cell(s: &str) -> String {
    s.replace('\\', "\\\\").replace('|', "\\|").replace('\n', " ")
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

/// The plan as Markdown (for a pull-request comment or job summary).
pub fn markdown(plan: &Plan) -> String {
    let mut s = String::new();
    s.push_str(&format!("# dpone ci plan: `{}`\n\n", plan.basis.classification.as_str()));
    s.push_str(&format!(
        "Base `{}` -> head `{}`, classifier `{}`, plan `{}`.\n\n",
        short(&plan.basis.base_sha),
        short(&plan.basis.head_sha),
        plan.basis.classifier_version,
        plan.schema_version
    ));
    if plan.files.is_empty() {
        s.push_str("No file changed between the two commits.\n\n");
    } else {
        s.push_str("## Changed files\n\n| file | change | kind | class | reason |\n|---|---|---|---|---|\n");
        for f in &plan.files {
            let path = match &f.previous_path {
                Some(p) => format!("`{}` (from `{}`)", cell(&f.path), cell(p)),
                None => format!("`{}`", cell(&f.path)),
            };
            s.push_str(&format!(
                "| {path} | {} | {} | `{}` | {} (`{}`) |\n",
                enum_str(&f.change),
                enum_str(&f.file_kind),
                enum_str(&f.class),
                cell(&f.reason),
                cell(&f.reason_code)
            ));
        }
        s.push('\n');
    }
    s.push_str("## Required checks\n\n| check | reason | command | status |\n|---|---|---|---|\n");
    for c in &plan.required_checks {
        s.push_str(&format!("| `{}` | {} | `{}` | {} |\n", c.id, cell(&c.reason), cell(&c.command), c.status));
    }
    s.push_str("\nExisting required checks are preserved (`preserve_existing_required_checks: true`): this plan adds checks, it never removes one.\n");
    if !plan.opt_in_jobs.is_empty() {
        s.push_str("\n## Opt-in jobs (never required)\n\n| job | what | command | suggested |\n|---|---|---|---|\n");
        for j in &plan.opt_in_jobs {
            s.push_str(&format!(
                "| `{}` | {} | `{}` | {} |\n",
                j.id,
                cell(&j.title),
                cell(&j.command),
                if j.suggested { "yes" } else { "no" }
            ));
        }
    }
    s
}

/// The serde name of a unit enum variant.
pub fn enum_str<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::classify::{ChangeKind, FileKind};

    /// A modified manifest's record (also the verifier tests' fixture).
    pub(crate) fn record(path: &str, class: FileClass, routes: &[&str], aspects: &[Aspect]) -> FileRecord {
        FileRecord {
            path: path.into(),
            previous_path: None,
            change: ChangeKind::Modified,
            old_mode: "100644".into(),
            new_mode: "100644".into(),
            file_kind: FileKind::Manifest,
            class,
            reason_code: "x".into(),
            reason: "a | b".into(),
            changed_fields: vec![],
            routes: routes.iter().map(|s| s.to_string()).collect(),
            aspects: aspects.to_vec(),
        }
    }

    fn ids(p: &Plan) -> Vec<&str> {
        p.required_checks.iter().map(|c| c.id.as_str()).collect()
    }

    const GATES: [&str; 3] = ["gate.fmt", "gate.clippy", "gate.unit"];
    const CONTRACTS: [&str; 4] = ["contract.parser", "contract.serialization", "contract.interval", "contract.scheduling"];

    #[test]
    fn no_changes_keeps_only_the_gates() {
        let p = build("a", "b", vec![]);
        assert_eq!(p.basis.classification, Classification::NoChanges);
        assert_eq!(ids(&p), GATES);
        assert!(p.basis.preserve_existing_required_checks);
        assert!(p.required_checks.iter().all(|c| c.status == "UNVERIFIED"));
    }

    #[test]
    fn schedule_only_adds_the_contracts_and_no_transfer() {
        let p = build("a", "b", vec![record("m.yaml", FileClass::ScheduleOnly, &[], &[])]);
        assert_eq!(p.basis.classification, Classification::ScheduleOnly);
        assert_eq!(ids(&p), [&GATES[..], &CONTRACTS[..]].concat());
        assert!(p.routes.is_empty());
        assert!(p.opt_in_jobs.iter().all(|j| !j.required && !j.suggested));
        assert!(p.required_checks[3].reason.contains("the schedule changed in `m.yaml`"), "{}", p.required_checks[3].reason);
    }

    #[test]
    fn route_scoped_adds_the_route_smoke_and_recovery_only_when_needed() {
        let p = build(
            "a",
            "b",
            vec![
                record("b.yaml", FileClass::RouteScoped, &["postgres->clickhouse"], &[Aspect::Transport]),
                record("a.yaml", FileClass::ScheduleOnly, &[], &[]),
            ],
        );
        assert_eq!(p.basis.classification, Classification::RouteScoped);
        assert_eq!(ids(&p), [&GATES[..], &CONTRACTS[..], &["smoke.postgres-clickhouse"]].concat());
        assert_eq!(p.files[0].path, "a.yaml", "files are sorted");
        assert_eq!(p.routes, vec!["postgres->clickhouse"]);
        assert!(p.opt_in_jobs[0].suggested);
        let p = build("a", "b", vec![record("b.yaml", FileClass::RouteScoped, &["sqlite->sqlite"], &[Aspect::Recovery])]);
        assert_eq!(ids(&p)[7..], ["smoke.sqlite-sqlite", "recovery.sqlite-sqlite"]);
        assert!(!p.opt_in_jobs[0].suggested);
    }

    #[test]
    fn broad_requires_everything() {
        let p = build("a", "b", vec![record("x.rs", FileClass::Broad, &[], &[]), record("m.yaml", FileClass::ScheduleOnly, &[], &[])]);
        assert_eq!(p.basis.classification, Classification::Broad);
        assert_eq!(ids(&p).len(), 3 + 4 + catalog::ROUTES.len() + 1);
        assert_eq!(*ids(&p).last().unwrap(), "broad.workspace");
        assert!(p.required_checks.last().unwrap().infrastructure.contains(&"postgresql".to_string()));
    }

    #[test]
    fn json_round_trips_and_markdown_escapes() {
        let p = build(&"a".repeat(40), &"b".repeat(40), vec![record("x|y.yaml", FileClass::Broad, &[], &[])]);
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["classification"], "broad");
        assert_eq!(json["files"][0]["class"], "broad");
        assert_eq!(json["required_checks"][0]["group"], "existing_gate");
        assert!(json["files"][0].get("previous_path").is_none());
        let back: Plan = serde_json::from_value(json).unwrap();
        assert_eq!(back, p);
        let md = markdown(&p);
        assert!(md.starts_with("# dpone ci plan: `broad`"));
        assert!(md.contains("`x\\|y.yaml`") && md.contains("a \\| b"), "{md}");
        assert!(md.contains("| `gate.fmt` |"));
        assert_eq!(list(&["a", "b", "c", "d", "e"]), "`a`, `b`, `c` and 2 more");
        assert_eq!(list(&["a", "b"]), "`a` and `b`");
    }
}
