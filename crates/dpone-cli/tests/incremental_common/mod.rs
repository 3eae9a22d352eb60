//! The incremental tests' routes: one [`IncrementalRoute`] per route of
//! `incremental_append` / `incremental_merge`, so that a scenario is
//! written once (`tests/incremental_append.rs`) and run on every route.
//!
//! Like the crash matrix's `RouteFixture` (`tests/crash_matrix.rs`), a
//! route owns its source and target, runs the real `dpone` binary with its
//! connections, and observes the target by itself, never through dpone's
//! code: its rows (an exact multiset, every column), its stored mark (read
//! from `_dpone_marks` directly) and the tables dpone left in it. The
//! crash matrix's fixtures hold one window data set each; these hold the
//! rows a scenario writes, so the scenarios share a route-neutral row
//! ([`Cell`]) that each route writes and renders in its own types.
#![allow(dead_code)]

pub mod chpg;
pub mod merge;
pub mod pgch;
pub mod sqlite;

use crate::harness::{self, Background, DPONE_TIMEOUT, Run};
use std::path::Path;
use std::time::Duration;

/// One value of a route-neutral row.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cell {
    Null,
    Int(i64),
    /// An instant, UTC: `YYYY-MM-DD HH:MM:SS[.ffffff]`.
    At(String),
    /// A day: `YYYY-MM-DD`.
    Date(String),
    Text(String),
}

/// A route-neutral row: the append tables' `(id, ts, name)`.
pub type Row = Vec<Cell>;

/// Row `id` at `hour` o'clock of day `day` of September 2026.
pub fn row(id: i64, day: u32, hour: u32) -> Row {
    vec![Cell::Int(id), Cell::At(format!("2026-09-{day:02} {hour:02}:00:00")), Cell::Text(format!("row {id}"))]
}

/// The same row with another instant.
pub fn at(mut r: Row, instant: &str) -> Row {
    r[1] = Cell::At(instant.to_string());
    r
}

/// A row without a cursor value.
pub fn null_id_row() -> Row {
    vec![Cell::Null, Cell::At("2026-09-01 09:00:00".into()), Cell::Text("no id".into())]
}

pub fn id_of(r: &Row) -> Option<i64> {
    match r[0] {
        Cell::Int(i) => Some(i),
        _ => None,
    }
}

/// Source ids 1..=5 on days 1..=5, target two older rows: a fresh
/// `R::set_up(prefix, partitioned)` holding them, the source rows and the
/// target rows.
pub fn standard<R: IncrementalRoute>(prefix: &'static str, partitioned: bool) -> (R, Vec<Row>, Vec<Row>) {
    let fx = R::set_up(prefix, partitioned);
    let source: Vec<Row> = (1..=5).map(|i| row(i, i as u32, 1)).collect();
    let target = vec![row(-2, 1, 0), row(-1, 2, 0)];
    fx.insert_source(&source);
    fx.insert_target(&target);
    (fx, source, target)
}

/// The rows with `after < id <= upto`.
pub fn between(rows: &[Row], after: i64, upto: i64) -> Vec<Row> {
    rows.iter().filter(|r| id_of(r).is_some_and(|i| i > after && i <= upto)).cloned().collect()
}

pub fn plus(a: &[Row], b: &[Row]) -> Vec<Row> {
    a.iter().chain(b).cloned().collect()
}

/// The instant of a cell as RFC 3339 (`2026-09-01T05:00:00Z`).
pub fn rfc3339(instant: &str) -> String {
    format!("{}Z", instant.replace(' ', "T"))
}

/// A route's endpoints in a manifest.
pub struct Endpoints {
    /// `type`, `connection` and `table` of `source:`, each line indented by two spaces.
    pub source: String,
    /// The same of `sink:`.
    pub sink: String,
    /// `runtime.storage.work_dir`.
    pub work_dir: String,
}

/// What an incremental manifest varies.
#[derive(Clone, Copy)]
pub struct Manifest<'a> {
    /// `incremental_append` or `incremental_merge`.
    pub mode: &'a str,
    /// `source.options.incremental_column`.
    pub column: &'a str,
    /// Lines added to `source.options` (indented by four spaces).
    pub options: &'a str,
    /// Lines added to `sink.strategy` (indented by four spaces).
    pub strategy: &'a str,
}

impl Manifest<'_> {
    /// An append by `id`.
    pub const APPEND: Manifest<'static> = Manifest { mode: "incremental_append", column: "id", options: "", strategy: "" };
    /// A merge of the key `id` by the cursor `ver`.
    pub const MERGE: Manifest<'static> =
        Manifest { mode: "incremental_merge", column: "ver", options: "", strategy: "    unique_key: [id]\n" };

    pub fn yaml(&self, e: &Endpoints) -> String {
        format!(
            "kind: dpone.batch.v1
source:
{source}  options:
    incremental_column: {column}
    native_transfer:
      wire: {{block_rows: 2}}
{options}sink:
{sink}  strategy:
    mode: {mode}
{strategy}runtime:
  storage: {{work_dir: {work}}}
",
            source = e.source,
            sink = e.sink,
            column = self.column,
            options = self.options,
            mode = self.mode,
            strategy = self.strategy,
            work = e.work_dir,
        )
    }
}

/// A JSON string (YAML reads it as a string, never as a number or boolean).
pub fn q(s: &str) -> String {
    serde_json::to_string(s).expect("a JSON string")
}

/// The endpoints of a route between two servers: `type`, the connection
/// `DPONE_CONN_<id>` and the table `t` of `schema` on each side.
pub fn server_endpoints(source: (&str, &str, &str), sink: (&str, &str, &str), work_dir: &Path) -> Endpoints {
    let endpoint = |(kind, id, schema): (&str, &str, &str)| {
        format!(
            "  type: {kind}\n  connection: {{connection_type: env, connection_id: {id}}}\n  table: {{schema: {}, name: t}}\n",
            q(schema)
        )
    };
    Endpoints { source: endpoint(source), sink: endpoint(sink), work_dir: q(&work_dir.display().to_string()) }
}

/// One route's source and target, owned by one test, and how the
/// scenarios observe them.
pub trait IncrementalRoute: Sized {
    /// The route, as run reports name it.
    const ROUTE: &'static str;

    /// A fresh source and target table `t` of `(id, ts, name)` (the
    /// target partitioned by day where the route partitions), with the
    /// manifest of an append by `id`.
    fn set_up(prefix: &'static str, partitioned: bool) -> Self;

    /// A fresh source and target table `t` of `(id, region, ver, ts,
    /// name)` (the target partitioned by day where the route partitions),
    /// with the manifest of a merge by `id` ([`Manifest::MERGE`]).
    fn set_up_merge(prefix: &'static str) -> Self;

    /// Whether the source takes an in-place `UPDATE` (ClickHouse's does
    /// not: there a key's new version is a new row).
    const UPDATES_IN_PLACE: bool;

    /// Whether the run counts the target's rows (`final_rows`): not into
    /// PostgreSQL, which counts only by reading every row.
    const COUNTS_TARGET: bool = true;

    /// Key `id`'s source rows become `to` (of the merge layout), in place.
    fn update_source(&self, _id: i64, _to: &Row) {
        panic!("{} has no in-place update of its source", Self::ROUTE)
    }

    /// The fixture's directory (`dpone` runs in it).
    fn dir(&self) -> &Path;

    /// The manifest's path.
    fn manifest(&self) -> String;

    /// Where the manifest reads and writes.
    fn endpoints(&self) -> Endpoints;

    /// The connections `dpone` gets (`DPONE_CONN_*`).
    fn connections(&self) -> Vec<(&'static str, String)>;

    fn insert_source(&self, rows: &[Row]);

    /// Deletes the source rows `condition` (SQL) selects.
    fn delete_source(&self, condition: &str);

    fn insert_target(&self, rows: &[Row]);

    /// Asserts that the target holds exactly the multiset `rows`.
    fn assert_target(&self, rows: &[Row], what: &str);

    /// The stored mark (its text, None when NULL) and the run that stored
    /// it, from the target itself; None without a mark.
    fn mark(&self) -> Option<(Option<String>, String)>;

    /// Another writer sets the stored mark of cursor `column` to `value`.
    fn move_mark(&self, column: &str, value: &str);

    /// Staging and generation tables of dpone's left in the target.
    fn leftovers(&self) -> Vec<String>;

    /// Every table of dpone's (`_dpone_*`) in the target.
    fn owned_tables(&self) -> Vec<String>;

    /// Drops what `set_up` created (called once the test has passed).
    fn finish(self);

    // -- provided -------------------------------------------------------

    fn write_manifest(&self, m: &Manifest<'_>) {
        std::fs::write(self.manifest(), m.yaml(&self.endpoints())).expect("write the manifest");
    }

    fn mark_value(&self) -> Option<String> {
        self.mark().and_then(|(m, _)| m)
    }

    /// `dpone <args>` with the route's connections plus `env`.
    fn dpone(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let conns = self.connections();
        let mut all: Vec<(&str, &str)> = conns.iter().map(|(k, v)| (*k, v.as_str())).collect();
        all.extend_from_slice(env);
        harness::run_within(self.dir(), args, &all, DPONE_TIMEOUT).of_route(Self::ROUTE)
    }

    /// `dpone <args>` in the background.
    fn spawn(&self, args: &[&str], env: &[(&str, &str)]) -> Background {
        let conns = self.connections();
        let mut all: Vec<(&str, &str)> = conns.iter().map(|(k, v)| (*k, v.as_str())).collect();
        all.extend_from_slice(env);
        harness::spawn(self.dir(), args, &all).of_route(Self::ROUTE)
    }

    fn run_with(&self, env: &[(&str, &str)]) -> Run {
        self.dpone(&["run", &self.manifest(), "--format", "json"], env)
    }

    fn run(&self) -> Run {
        self.run_with(&[])
    }

    /// A run in the background, paused as `DPONE_FAILPOINT_SLEEP` says (`point:ms`).
    fn spawn_paused(&self, pause: &str) -> Background {
        self.spawn(&["run", &self.manifest(), "--format", "json"], &[("DPONE_FAILPOINT_SLEEP", pause)])
    }

    fn status(&self) -> serde_json::Value {
        let s = self.dpone(&["status", &self.manifest(), "--format", "json"], &[]);
        assert_eq!(s.code, Some(0), "dpone status:\n{}", s.describe());
        s.json()
    }

    /// `dpone plan <manifest> <args>`.
    fn plan(&self, args: &[&str]) -> Run {
        let m = self.manifest();
        let mut all = vec!["plan", m.as_str()];
        all.extend_from_slice(args);
        self.dpone(&all, &[])
    }

    /// `dpone state <verb> <manifest> <args>` by the operator `alice`.
    fn state(&self, verb: &str, args: &[&str]) -> Run {
        let m = self.manifest();
        let mut all = vec!["state", verb, m.as_str()];
        all.extend_from_slice(args);
        self.dpone(&all, &[("DPONE_OPERATOR", "alice")])
    }

    /// `dpone state show --format json`, parsed.
    fn show(&self) -> serde_json::Value {
        let s = self.state("show", &["--format", "json"]);
        assert_eq!(s.code, Some(0), "dpone state show:\n{}", s.describe());
        s.json()
    }

    /// Waits until `dpone status` says `state`.
    fn wait_for_state(&self, state: &str, what: &str) {
        harness::wait_until(Duration::from_secs(60), what, || harness::state_of(&self.status()) == state);
    }
}

/// A successful run appended exactly `batch` to `before`; the mark is `want`.
pub fn check_append<R: IncrementalRoute>(fx: &R, run: &Run, before: &[Row], batch: &[Row], want: &str, what: &str) -> serde_json::Value {
    let doc = run.assert_succeeded(what);
    fx.assert_target(&plus(before, batch), &format!("{what}: target = rows before + the batch, once"));
    assert_eq!(fx.mark_value().as_deref(), Some(want), "{what}: expected the stored mark {want}");
    assert_eq!(doc["inserted_rows"], batch.len(), "{what}: inserted_rows");
    check_final_rows::<R>(&doc, before.len() + batch.len(), what);
    let reported = match &doc["incremental"]["new_mark"]["value"] {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if doc["incremental"]["new_mark"]["kind"] == "date" {
        // The JSON carries a date mark as days since 1970-01-01; the batch names it.
        assert!(doc["incremental"]["batch"].as_str().unwrap_or_default().contains(want), "{what}: the report's batch: {doc:#}");
    } else {
        assert_eq!(reported, want, "{what}: the report's new mark: {doc:#}");
    }
    assert_eq!(fx.leftovers(), Vec::<String>::new(), "{what}: expected no staging or generation table after success");
    let backups: Vec<String> = fx.owned_tables().into_iter().filter(|n| n.starts_with("_dpone_bak_")).collect();
    assert!(backups.len() <= 1, "{what}: one backup at most: {backups:?}");
    doc
}

/// A run of `route` crashed at `point`; `tamper` changes one of its tables
/// (it gets the run's status and says what it did): the resumed run is
/// refused with `error_code`, the target stays `target`, no mark is stored.
pub fn assert_tampered_resume_refused<R: IncrementalRoute>(
    route: &R,
    target: &[Row],
    point: &str,
    tamper: impl FnOnce(&serde_json::Value) -> String,
    error_code: &str,
) {
    route.run_with(&[("DPONE_FAILPOINT", point)]).assert_aborted_at(point);
    let what = tamper(&route.status());
    route.run().assert_failed(&what, 1, error_code);
    route.assert_target(target, "target unchanged");
    assert!(route.mark().is_none(), "no mark stored");
}

/// A refused `dpone state reset`: exit 2, naming `code`.
pub fn assert_reset_refused(run: &Run, code: &str, what: &str) {
    assert_eq!(run.code, Some(2), "{what}: expected exit 2:\n{}", run.describe());
    assert!(run.stderr.contains(code) || run.stdout.contains(code), "{what}: expected `{code}`:\n{}", run.describe());
}

/// One test per scenario and route: `on_routes! { [<scenario>, ...] mod
/// <route>: <fixture> => [<scenario of this route only>, ...]; ... }`
/// defines `<route>::<scenario>` running `<scenario>::<fixture>()` for
/// every scenario of the first list and of the route's own.
#[allow(unused_macros)]
macro_rules! on_routes {
    ($scenarios:tt $(mod $route:ident: $fixture:ty => $own:tt;)*) => {
        $( on_routes!(@route $route, $fixture, $scenarios, $own); )*
    };
    (@route $route:ident, $fixture:ty, [$($scenario:ident),* $(,)?], [$($own:ident),* $(,)?]) => {
        mod $route {
            $(
                #[test]
                fn $scenario() {
                    super::$scenario::<$fixture>();
                }
            )*
            $(
                #[test]
                fn $own() {
                    super::$own::<$fixture>();
                }
            )*
        }
    };
}

/// A small deterministic generator (the seed is printed on failure).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Where a randomized test stands after its runs.
#[derive(Default)]
pub struct RandomRuns {
    /// The last run the model applied: `(run_id, execution)`.
    applied: Option<(String, u64)>,
    /// The last run left its run unfinished.
    pub unfinished: bool,
    /// The last run aborted at its failpoint.
    pub crashed: bool,
}

impl RandomRuns {
    /// Runs once, aborting at a random one of `points` half the time;
    /// true when a run completed that the model has not applied yet (the
    /// caller applies its batch and compares).
    pub fn run<R: IncrementalRoute>(&mut self, fx: &R, rng: &mut Lcg, points: &[&str], what: &str) -> bool {
        let point = (rng.next(2) == 1).then(|| points[rng.next(points.len() as u64) as usize]);
        let run = match point {
            Some(p) => fx.run_with(&[("DPONE_FAILPOINT", p)]),
            None => fx.run(),
        };
        run.assert_no_panic();
        if point.is_none() {
            assert_eq!(run.code, Some(0), "{what}: a run without a failpoint succeeds:\n{}", run.describe());
        }
        let status = fx.status();
        self.unfinished = harness::state_of(&status) != "succeeded";
        self.crashed = point.is_some() && run.code != Some(0);
        let this = (status["run_id"].as_str().unwrap_or_default().to_string(), status["execution"].as_u64().unwrap_or(0));
        if self.unfinished || self.applied.as_ref() == Some(&this) {
            return false;
        }
        self.applied = Some(this);
        true
    }
}

/// `final_rows` is the target's rows where the route counts them, else
/// null in the report, the original's `result` and the evidence (the
/// target's rows are checked by the caller).
pub fn check_final_rows<R: IncrementalRoute>(doc: &serde_json::Value, rows: usize, what: &str) {
    let want = if R::COUNTS_TARGET { serde_json::json!(rows) } else { serde_json::Value::Null };
    assert_eq!(doc["final_rows"], want, "{what}: final_rows: {doc:#}");
    assert_eq!(doc["result"]["final_rows"], want, "{what}: result.final_rows: {doc:#}");
    if !R::COUNTS_TARGET {
        assert_eq!(doc["kept_rows"], serde_json::Value::Null, "{what}: kept_rows: {doc:#}");
        let path = doc["evidence_path"].as_str().unwrap_or_else(|| panic!("{what}: no evidence path: {doc:#}"));
        let evidence: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(evidence["target"], serde_json::Value::Null, "{what}: the evidence's target is not counted");
    }
}
