//! Every check a plan can require, and what proves it.
//!
//! A check is proven by JUnit results: each entry of `junit` names a test
//! suite (a test binary, named as cargo-nextest names it: `dpone-core` for
//! a library's unit tests, `dpone-cli::sqlite_window` for an integration
//! test file) and optionally the test-path prefixes of the cases that count.
//! The catalog is part of the classifier version: `dpone ci verify` proves
//! a plan's checks with the catalog's own proofs, never with proofs edited
//! into the plan file.

use serde::{Deserialize, Serialize};

/// One suite a check needs results from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuiteProof {
    /// Suite (test binary) name.
    pub suite: String,
    /// Test-path prefixes of the cases that count; empty = every case.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cases: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Group {
    /// The team's mandatory gates, required for every change.
    ExistingGate,
    /// Parser, serialization, interval and scheduling contracts.
    Contract,
    /// A narrow synthetic smoke of one source -> sink route.
    RouteSmoke,
    /// Crash, resume and journal behaviour of one route.
    RouteRecovery,
    /// The whole test suite.
    Broad,
}

/// A check of the catalog.
#[derive(Debug, Clone, Copy)]
pub struct CheckDef {
    pub id: &'static str,
    pub group: Group,
    pub title: &'static str,
    pub command: &'static str,
    pub junit: &'static [(&'static str, &'static [&'static str])],
    /// Servers the check needs; without them its results are missing and
    /// the check stays `UNVERIFIED`.
    pub infrastructure: &'static [&'static str],
    /// The route of a route check (`source->sink`).
    pub route: Option<&'static str>,
}

impl CheckDef {
    pub fn proofs(&self) -> Vec<SuiteProof> {
        self.junit
            .iter()
            .map(|(suite, cases)| SuiteProof { suite: suite.to_string(), cases: cases.iter().map(|c| c.to_string()).collect() })
            .collect()
    }
}

const SERVERS: &[&str] = &["postgresql", "clickhouse"];

/// Library test binaries with unit tests.
const UNIT_SUITES: &[(&str, &[&str])] =
    &[("dpone-core", &[]), ("dpone-sqlite", &[]), ("dpone-postgres", &[]), ("dpone-clickhouse", &[]), ("dpone-ci", &[])];

/// The existing mandatory gates (`.ci/run`), kept in every plan.
pub const GATES: &[CheckDef] = &[
    CheckDef {
        id: "gate.fmt",
        group: Group::ExistingGate,
        title: "formatting",
        command: "cargo fmt --all -- --check",
        junit: &[("gate.fmt", &[])],
        infrastructure: &[],
        route: None,
    },
    CheckDef {
        id: "gate.clippy",
        group: Group::ExistingGate,
        title: "lints",
        command: "cargo clippy --workspace --all-targets -- -D warnings",
        junit: &[("gate.clippy", &[])],
        infrastructure: &[],
        route: None,
    },
    CheckDef {
        id: "gate.unit",
        group: Group::ExistingGate,
        title: "unit tests of every library",
        command: "cargo test --workspace --lib",
        junit: UNIT_SUITES,
        infrastructure: &[],
        route: None,
    },
];

/// The contract checks: required for every change that is not empty.
pub const CONTRACTS: &[CheckDef] = &[
    CheckDef {
        id: "contract.parser",
        group: Group::Contract,
        title: "parser contract: YAML parsing, manifest and schedules-file validation",
        command: "cargo test -p dpone-core -p dpone-ci --lib -- yaml:: manifest:: schedules::",
        junit: &[("dpone-core", &["yaml::", "manifest::"]), ("dpone-ci", &["schedules::"])],
        infrastructure: &[],
        route: None,
    },
    CheckDef {
        id: "contract.serialization",
        group: Group::Contract,
        title: "serialization contract: normalized documents, fingerprints, identities, the plan document",
        command: "cargo test -p dpone-core -p dpone-ci --lib -- identity:: manifest::tests::fingerprint normalize:: report::",
        junit: &[("dpone-core", &["identity::", "manifest::tests::fingerprint"]), ("dpone-ci", &["normalize::", "report::"])],
        infrastructure: &[],
        route: None,
    },
    CheckDef {
        id: "contract.interval",
        group: Group::Contract,
        title: "interval contract: durations, timestamps, window chunking, interval resolution",
        command: "cargo test -p dpone-core --lib -- time:: window:: plan::",
        junit: &[("dpone-core", &["time::", "window::", "plan::"])],
        infrastructure: &[],
        route: None,
    },
    CheckDef {
        id: "contract.scheduling",
        group: Group::Contract,
        title: "scheduling contract: cron validation and normalization, schedule classification",
        command: "cargo test -p dpone-core -p dpone-ci --lib -- cron:: classify::",
        junit: &[("dpone-core", &["cron::"]), ("dpone-ci", &["classify::"])],
        infrastructure: &[],
        route: None,
    },
];

/// The crash matrix's checks that every abort point and every route has its
/// crash tests (`dpone-cli::crash_matrix`): part of each route's recovery check.
const MATRIX_COMPLETE: &str = "every_abort_point_has_a_crash_test_on_every_route";
const MATRIX_ROUTES: &str = "every_supported_route_has_a_crash_fixture";

/// Route smokes and route recovery checks.
pub const ROUTES: &[CheckDef] = &[
    CheckDef {
        id: "smoke.sqlite-sqlite",
        group: Group::RouteSmoke,
        title: "synthetic window replace sqlite -> sqlite",
        command: "cargo test -p dpone-cli --test sqlite_window",
        junit: &[("dpone-cli::sqlite_window", &[])],
        infrastructure: &[],
        route: Some("sqlite->sqlite"),
    },
    CheckDef {
        id: "recovery.sqlite-sqlite",
        group: Group::RouteRecovery,
        title: "state store conformance, crash recovery and resume, sqlite -> sqlite",
        command: "cargo test -p dpone-sqlite --test state_store && cargo test -p dpone-cli --test recovery_sqlite \
                  && cargo test -p dpone-cli --test crash_matrix -- sqlite_to_sqlite:: every_",
        junit: &[
            ("dpone-sqlite::state_store", &[]),
            ("dpone-cli::recovery_sqlite", &[]),
            ("dpone-cli::crash_matrix", &["sqlite_to_sqlite::", MATRIX_COMPLETE, MATRIX_ROUTES]),
        ],
        infrastructure: &[],
        route: Some("sqlite->sqlite"),
    },
    CheckDef {
        id: "smoke.postgres-clickhouse",
        group: Group::RouteSmoke,
        title: "synthetic window replace postgres -> clickhouse",
        command: "cargo test -p dpone-cli --test pg_clickhouse_window",
        junit: &[("dpone-cli::pg_clickhouse_window", &[])],
        infrastructure: SERVERS,
        route: Some("postgres->clickhouse"),
    },
    CheckDef {
        id: "recovery.postgres-clickhouse",
        group: Group::RouteRecovery,
        title: "crash, resume and publication recovery postgres -> clickhouse",
        command: "cargo test -p dpone-cli --test recovery_pg_clickhouse \
                  && cargo test -p dpone-cli --test crash_matrix -- postgres_to_clickhouse:: every_",
        junit: &[
            ("dpone-cli::recovery_pg_clickhouse", &[]),
            ("dpone-cli::crash_matrix", &["postgres_to_clickhouse::", MATRIX_COMPLETE, MATRIX_ROUTES]),
        ],
        infrastructure: SERVERS,
        route: Some("postgres->clickhouse"),
    },
    CheckDef {
        id: "smoke.clickhouse-postgres",
        group: Group::RouteSmoke,
        title: "synthetic full refresh, window replace and partition swap clickhouse -> postgres",
        command: "cargo test -p dpone-cli --test ch_postgres_route",
        junit: &[("dpone-cli::ch_postgres_route", &[])],
        infrastructure: SERVERS,
        route: Some("clickhouse->postgres"),
    },
    CheckDef {
        id: "recovery.clickhouse-postgres",
        group: Group::RouteRecovery,
        title: "crash recovery, receipt probe and source-free finish clickhouse -> postgres",
        command: "cargo test -p dpone-cli --test ch_postgres_recovery \
                  && cargo test -p dpone-cli --test ch_postgres_direct \
                  && cargo test -p dpone-cli --test crash_matrix -- clickhouse_to_postgres_ every_",
        junit: &[
            ("dpone-cli::ch_postgres_recovery", &[]),
            ("dpone-cli::ch_postgres_direct", &[]),
            (
                "dpone-cli::crash_matrix",
                &[
                    "clickhouse_to_postgres_delete_insert::",
                    "clickhouse_to_postgres_partition_swap::",
                    "clickhouse_to_postgres_direct::",
                    MATRIX_COMPLETE,
                    MATRIX_ROUTES,
                ],
            ),
        ],
        infrastructure: SERVERS,
        route: Some("clickhouse->postgres"),
    },
];

/// The broad set's whole-suite check.
pub const BROAD: CheckDef = CheckDef {
    id: "broad.workspace",
    group: Group::Broad,
    title: "every test of the workspace against real servers",
    command: "scripts/test.sh",
    junit: &[
        ("dpone-core", &[]),
        ("dpone-sqlite", &[]),
        ("dpone-postgres", &[]),
        ("dpone-clickhouse", &[]),
        ("dpone-ci", &[]),
        ("dpone-sqlite::state_store", &[]),
        ("dpone-clickhouse::smoke", &[]),
        ("dpone-cli::limits", &[]),
        ("dpone-cli::malformed_manifests", &[]),
        ("dpone-cli::quickstart", &[]),
        ("dpone-cli::sqlite_window", &[]),
        ("dpone-cli::pg_clickhouse_window", &[]),
        ("dpone-cli::pg_clickhouse_refusals", &[]),
        ("dpone-cli::recovery_pg_clickhouse", &[]),
        ("dpone-cli::recovery_sqlite", &[]),
        ("dpone-cli::ch_postgres_route", &[]),
        ("dpone-cli::ch_postgres_recovery", &[]),
        ("dpone-cli::crash_matrix", &[]),
        ("dpone-cli::ci_plan", &[]),
        ("dpone-cli::ci_verify", &[]),
    ],
    infrastructure: SERVERS,
    route: None,
};

/// A large job that is never required: listed so that it can be run on demand.
#[derive(Debug, Clone, Copy)]
pub struct JobDef {
    pub id: &'static str,
    pub title: &'static str,
    pub command: &'static str,
    /// Suggested when one of these routes is affected (or the change is broad).
    pub routes: &'static [&'static str],
}

pub const OPT_IN_JOBS: &[JobDef] = &[JobDef {
    id: "perf.postgres-clickhouse",
    title: "performance benchmark: millions of rows postgres -> clickhouse next to raw COPY / INSERT references (long running)",
    command: "scripts/bench/pg_to_clickhouse.sh",
    routes: &["postgres->clickhouse"],
}];

/// Every check of the catalog.
pub fn all() -> impl Iterator<Item = &'static CheckDef> {
    GATES.iter().chain(CONTRACTS).chain(ROUTES).chain(std::iter::once(&BROAD))
}

pub fn by_id(id: &str) -> Option<&'static CheckDef> {
    all().find(|c| c.id == id)
}

/// The route checks of `route`.
pub fn route_checks(route: &str) -> impl Iterator<Item = &'static CheckDef> + '_ {
    ROUTES.iter().filter(move |c| c.route == Some(route))
}

/// True when the catalog has a smoke test for `route`.
pub fn has_route(route: &str) -> bool {
    route_checks(route).any(|c| c.group == Group::RouteSmoke)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn ids_are_unique() {
        let mut ids: Vec<&str> = all().map(|c| c.id).collect();
        let n = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), n);
    }

    /// Every suite the catalog names exists in this workspace, and every case
    /// prefix names at least one test function, so no check waits forever
    /// for results that cannot exist.
    #[test]
    fn every_suite_and_case_prefix_exists_in_the_workspace() {
        let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        for check in all() {
            for (suite, cases) in check.junit {
                if suite.starts_with("gate.") {
                    continue;
                }
                let (krate, file) = match suite.split_once("::") {
                    Some((k, t)) => (k, format!("tests/{t}.rs")),
                    None => (*suite, "src/lib.rs".to_string()),
                };
                let path = crates.join(krate).join(&file);
                assert!(path.is_file(), "{}: suite {suite} has no {}", check.id, path.display());
                for case in *cases {
                    let last = case.trim_end_matches("::").rsplit("::").next().unwrap();
                    let dir = if file.starts_with("tests/") { path.clone() } else { crates.join(krate).join("src") };
                    assert!(mentions(&dir, last), "{}: no test in {} matches `{case}`", check.id, dir.display());
                }
            }
        }
    }

    fn mentions(path: &Path, word: &str) -> bool {
        if path.is_dir() {
            return std::fs::read_dir(path).unwrap().any(|e| mentions(&e.unwrap().path(), word));
        }
        let name = path.file_name().unwrap().to_string_lossy();
        name.trim_end_matches(".rs") == word
            || std::fs::read_to_string(path).is_ok_and(|t| t.contains(&format!("mod {word}")) || t.contains(&format!("fn {word}")))
    }

    #[test]
    fn routes_have_smokes() {
        assert!(has_route("sqlite->sqlite"));
        assert!(has_route("postgres->clickhouse"));
        assert!(has_route("clickhouse->postgres"));
        assert_eq!(route_checks("postgres->clickhouse").count(), 2);
    }
}
