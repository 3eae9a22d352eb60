//! Every eligibility refusal of the PostgreSQL -> ClickHouse route, through
//! the real `dpone` binary against real servers.
//!
//! For each refusal, `run --format json` must exit 2 with the refusal's code
//! in its JSON and a message naming what is wrong, `plan --format json` must
//! list it in `refusals` and exit 2, and the target must be exactly as before:
//! the same multiset of typed rows (read back as RowBinary) and the same
//! tables in its database, so no `_dpone_` table was created.
//!
//! Not covered: row policies (`target_row_policies`). The ClickHouse test
//! server (chdb) has no writable access storage, so `CREATE ROW POLICY` is
//! denied (ACCESS_DENIED) and a row policy cannot be set up.

mod harness;
mod pg_clickhouse_common;

use harness::codes;
use pg_clickhouse_common::{Col, Fixture, ManifestOptions, Row, Setup, TABLE, basic_cols, col, micros, rendered, sample_value};

/// `base_cols` with column `name` changed by `f` on the ClickHouse side.
fn target_with(name: &str, f: impl Fn(&mut Col)) -> Vec<Col> {
    let mut cols = basic_cols();
    f(cols.iter_mut().find(|c| c.name == name).unwrap_or_else(|| panic!("no column {name}")));
    cols
}

/// Window values of the target's test rows (whole seconds, so that any
/// temporal type holds them); None = NULL.
const TARGET_TS: [Option<&str>; 4] = [Some("2026-09-07T10:00:00Z"), Some("2026-09-01T00:00:00Z"), None, Some("2026-09-08T23:59:59Z")];

/// One refusal scenario.
struct Case {
    case: String,
    setup: Setup,
    /// Statements run after the target's rows are inserted; `{db}` is the target's database.
    after: Vec<String>,
    manifest: ManifestOptions,
    code: &'static str,
    /// Text the refusal's message must contain; `{db}` is the target's database.
    mention: String,
}

impl Case {
    fn new(case: impl Into<String>, setup: Setup, code: &'static str, mention: impl Into<String>) -> Case {
        Case { case: case.into(), setup, after: Vec::new(), manifest: ManifestOptions::default(), code, mention: mention.into() }
    }

    /// Same columns on both sides, an Atomic database and a MergeTree target.
    fn standard(case: impl Into<String>, code: &'static str, mention: impl Into<String>) -> Case {
        Case::new(case, Setup::new("pgch_refuse", basic_cols()), code, mention)
    }

    fn target(mut self, cols: Vec<Col>) -> Case {
        self.setup.target = cols;
        self
    }

    fn source(mut self, cols: Vec<Col>) -> Case {
        self.setup.source = cols;
        self
    }

    fn engine(mut self, engine: &str) -> Case {
        self.setup.table_engine = Some(engine.into());
        self
    }

    fn after(mut self, sql: &str) -> Case {
        self.after.push(sql.into());
        self
    }
}

/// Source rows: only `id` and `ts` (the rest NULL), so they fit every source variant.
fn fill_source(fx: &Fixture) {
    fx.pg_exec(&format!(
        "INSERT INTO {}.{TABLE} (id, ts) VALUES (1, '2026-09-07 10:00:00+00'), (2, '2026-09-06 00:00:00+00'), \
         (3, '2026-09-01 00:00:00+00'), (4, NULL)",
        fx.schema
    ));
}

/// Target rows with a plausible value in every stored column; returns them.
fn fill_target(fx: &Fixture) -> Vec<Row> {
    let types = fx.target_types();
    let cols = fx.stored_target_columns();
    let rows: Vec<Row> = TARGET_TS
        .iter()
        .enumerate()
        .filter(|(_, ts)| ts.is_some() || cols.iter().zip(&types).all(|(c, t)| c.name != "ts" || t.nullable))
        .map(|(i, ts)| {
            let ts = ts.map(micros);
            cols.iter().zip(&types).map(|(c, t)| sample_value(t, 10 + i as i64, ts, c.name == "ts")).collect()
        })
        .collect();
    fx.insert_target(&rows);
    rows
}

/// The target's rows (rendered, sorted) if it exists.
fn target_state(fx: &Fixture) -> Option<Vec<String>> {
    fx.tables().contains(&TABLE.to_string()).then(|| rendered(&fx.target_rows()))
}

/// Runs `run` and `plan`; returns what differs from a clean refusal.
fn refusal_problems(fx: &Fixture, c: &Case) -> Vec<String> {
    let mut p = Vec::new();
    let rows_before = target_state(fx);
    let tables_before = fx.tables();
    let check_unchanged = |p: &mut Vec<String>, after: &str| {
        let rows_after = target_state(fx);
        if rows_after != rows_before {
            p.push(format!("expected the target's rows unchanged after `{after}`: before {rows_before:?}, after {rows_after:?}"));
        }
        let tables_after = fx.tables();
        if tables_after != tables_before {
            p.push(format!(
                "expected the database's tables unchanged after `{after}` (no `_dpone_` table): {tables_before:?} -> {tables_after:?}"
            ));
        }
    };

    let mention = c.mention.replace("{db}", &fx.db);
    let run = fx.run();
    run.assert_no_panic();
    let doc = run.json();
    if run.code != Some(2) {
        p.push(format!("expected `run` to exit 2, got {:?}", run.code));
    }
    if doc["status"] != "refused" {
        p.push(format!("expected `status: refused`, got {}", doc["status"]));
    }
    let run_codes = codes(&doc["errors"]);
    let messages: Vec<String> = doc["errors"]
        .as_array()
        .map(|a| a.iter().filter(|d| d["code"] == c.code).filter_map(|d| d["message"].as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    if !run_codes.iter().any(|x| x == c.code) {
        p.push(format!("expected `{}` among the run's errors, got {run_codes:?}", c.code));
    } else if !messages.iter().any(|m| m.contains(&mention)) {
        p.push(format!("expected the `{}` message to mention {mention}, got {messages:?}", c.code));
    }
    check_unchanged(&mut p, "run");
    if fx.work_dir().join("runs").exists() {
        p.push("expected no evidence for a refused run".into());
    }

    let plan = fx.plan();
    plan.assert_no_panic();
    if plan.code != Some(2) {
        p.push(format!("expected `plan` to exit 2, got {:?}", plan.code));
    }
    let plan_codes = codes(&plan.json()["refusals"]);
    if !plan_codes.iter().any(|x| x == c.code) {
        p.push(format!("expected `{}` among the plan's refusals, got {plan_codes:?}", c.code));
    }
    check_unchanged(&mut p, "plan");
    if !p.is_empty() {
        p.push(format!("{}\n{}", run.describe(), plan.describe()));
    }
    p
}

/// Sets up and checks every case; the servers' objects of a passing case are dropped.
fn expect_refusals(cases: Vec<Case>) {
    let mut failures = Vec::new();
    for c in cases {
        let fx = Fixture::create(c.setup.clone());
        fill_source(&fx);
        let target = if c.setup.table_engine.is_some() { fill_target(&fx) } else { Vec::new() };
        for sql in &c.after {
            fx.ch_exec(&sql.replace("{db}", &fx.db));
        }
        fx.write_manifest(&c.manifest);
        if c.setup.table_engine.is_some() {
            assert_eq!(fx.target_rows().len(), target.len(), "{}: expected the target to hold the {} test rows", c.case, target.len());
        }
        let problems = refusal_problems(&fx, &c);
        if problems.is_empty() {
            fx.finish();
        } else {
            failures.push(format!("{} (expected `{}`):\n  {}", c.case, c.code, problems.join("\n  ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

// ---------------------------------------------------------------------------
// The target's database and table
// ---------------------------------------------------------------------------

#[test]
fn a_database_that_is_not_atomic_is_refused() {
    let mut ordinary = Case::standard("Ordinary database", "target_database_not_atomic", "Ordinary");
    ordinary.setup.database_engine = Some("Ordinary".into());
    ordinary.setup.database_settings = vec![("allow_deprecated_database_ordinary", "1")];
    let mut memory = Case::standard("Memory database", "target_database_not_atomic", "Memory");
    memory.setup.database_engine = Some("Memory".into());
    expect_refusals(vec![ordinary, memory]);
}

#[test]
fn target_engines_other_than_plain_merge_tree_are_refused() {
    let cases =
        ["ReplacingMergeTree ORDER BY id", "SummingMergeTree ORDER BY id", "AggregatingMergeTree ORDER BY id", "Log", "TinyLog", "Memory"]
            .into_iter()
            .map(|engine| {
                let name = engine.split(' ').next().expect("an engine name");
                Case::standard(format!("{name} target"), "target_engine_unsupported", name).engine(engine)
            })
            .collect();
    expect_refusals(cases);
}

#[test]
fn a_target_with_a_ttl_is_refused() {
    let ttl = "TTL toDateTime(ifNull(ts, toDateTime64('2050-01-01 00:00:00', 6, 'UTC'))) + INTERVAL 50 YEAR";
    expect_refusals(vec![
        Case::standard("table TTL", "target_has_ttl", "TTL").engine(&format!("MergeTree ORDER BY id {ttl}")),
        Case::standard("column TTL", "target_has_ttl", "TTL").target(target_with("name", |c| c.ch_suffix = ttl.into())),
    ]);
}

#[test]
fn a_target_with_a_projection_is_refused() {
    let mut c = Case::standard("projection", "target_has_projections", "projection");
    c.setup.table_extra = "PROJECTION by_name (SELECT id, name ORDER BY name)".into();
    expect_refusals(vec![c]);
}

#[test]
fn views_reading_the_target_are_refused() {
    expect_refusals(vec![
        Case::standard("materialized view with an inner table", "target_has_dependent_views", "{db}.mv")
            .after("CREATE MATERIALIZED VIEW {db}.mv ENGINE = MergeTree ORDER BY id AS SELECT id, name FROM {db}.t"),
        Case::standard("materialized view TO a table", "target_has_dependent_views", "{db}.mv_to")
            .after("CREATE TABLE {db}.sink (id Int64) ENGINE = MergeTree ORDER BY id")
            .after("CREATE MATERIALIZED VIEW {db}.mv_to TO {db}.sink AS SELECT id FROM {db}.t"),
        Case::standard("plain view", "target_has_dependent_views", "{db}.v").after("CREATE VIEW {db}.v AS SELECT * FROM {db}.t"),
        Case::standard("materialized view writing into the target", "target_has_dependent_views", "{db}.feeder")
            .after("CREATE TABLE {db}.src (id Int64, ts Nullable(DateTime64(6, 'UTC')), amount Nullable(Decimal(18, 4)), name Nullable(String)) ENGINE = MergeTree ORDER BY id")
            .after("CREATE MATERIALIZED VIEW {db}.feeder TO {db}.t AS SELECT id, ts, amount, name FROM {db}.src"),
    ]);
}

#[test]
fn default_materialized_alias_and_ephemeral_columns_are_refused() {
    let cases = ["DEFAULT 'x'", "MATERIALIZED toString(id)", "ALIAS toString(id)", "EPHEMERAL"]
        .into_iter()
        .map(|suffix| {
            let kind = suffix.split(' ').next().expect("a kind");
            Case::standard(format!("{kind} column"), "target_computed_columns", format!("`name` is {kind}"))
                .target(target_with("name", |c| c.ch_suffix = suffix.into()))
        })
        .collect();
    expect_refusals(cases);
}

#[test]
fn an_unfinished_mutation_of_the_target_is_refused() {
    // With merges stopped, the mutation stays unfinished (is_done = 0).
    let c = Case::standard("mutation pending", "target_mutations_pending", "mutation")
        .after("SYSTEM STOP MERGES {db}.t")
        .after("ALTER TABLE {db}.t DELETE WHERE id < 0 SETTINGS mutations_sync = 0");
    expect_refusals(vec![c]);
}

#[test]
fn a_pending_generation_table_of_another_run_is_refused() {
    let c = Case::standard("pending _dpone_gen_ table", "pending_run_marker", "_dpone_gen_0123456789ab")
        .after("CREATE TABLE {db}._dpone_gen_0123456789ab (id Int64) ENGINE = MergeTree ORDER BY id");
    expect_refusals(vec![c]);
}

#[test]
fn a_missing_target_database_or_table_is_refused() {
    let mut no_db = Case::standard("database missing", "target_missing", "does not exist");
    no_db.setup.create_database = false;
    no_db.setup.table_engine = None;
    let mut no_table = Case::standard("table missing", "target_missing", "does not exist");
    no_table.setup.table_engine = None;
    expect_refusals(vec![no_db, no_table]);
}

#[test]
fn a_missing_staging_database_is_refused() {
    let mut c = Case::standard("staging database missing", "staging_database_missing", "pgch_no_such_staging_db");
    c.manifest.staging_schema = Some("pgch_no_such_staging_db".into());
    expect_refusals(vec![c]);
}

// ---------------------------------------------------------------------------
// The window column and the schemas
// ---------------------------------------------------------------------------

#[test]
fn a_target_window_column_that_is_not_a_utc_datetime64_is_refused() {
    let cases = [
        "Nullable(DateTime64(6))",
        "Nullable(DateTime64(6, 'Europe/Berlin'))",
        "Nullable(DateTime64(9, 'UTC'))",
        "Nullable(DateTime('UTC'))",
        "Nullable(Date)",
        "Nullable(Date32)",
        "Nullable(String)",
        "DateTime64(6)",
    ]
    .into_iter()
    .map(|ty| Case::standard(format!("target ts {ty}"), "window_column_type", "`ts`").target(target_with("ts", |c| c.ch = ty.into())))
    .collect();
    expect_refusals(cases);
}

#[test]
fn a_source_window_column_that_is_not_timestamptz_is_refused() {
    let cases = ["timestamp", "date", "timestamp(3)"]
        .into_iter()
        .map(|ty| {
            let mut source = basic_cols();
            source[1].pg = ty.into();
            Case::standard(format!("source ts {ty}"), "window_column_type", "`ts`").source(source)
        })
        .collect();
    expect_refusals(cases);
}

#[test]
fn schemas_that_do_not_match_exactly_are_refused() {
    let mut missing = basic_cols();
    missing.retain(|c| c.name != "name");
    let mut extra = basic_cols();
    extra.push(col("extra", "", "Nullable(Int64)"));
    let cases = vec![
        Case::standard("different type", "schema_mismatch", "`name`").target(target_with("name", |c| c.ch = "Nullable(Int64)".into())),
        Case::standard("different decimal scale", "schema_mismatch", "`amount`")
            .target(target_with("amount", |c| c.ch = "Nullable(Decimal(18, 2))".into())),
        Case::standard("narrower integer", "schema_mismatch", "`id`").target(target_with("id", |c| c.ch = "Int32".into())),
        Case::standard("window column in milliseconds", "schema_mismatch", "`ts`")
            .target(target_with("ts", |c| c.ch = "Nullable(DateTime64(3, 'UTC'))".into())),
        Case::standard("column missing in the target", "schema_mismatch", "`name`").target(missing),
        Case::standard("extra column in the target", "schema_mismatch", "`extra`").target(extra),
        // A nullable source column into a non-nullable target is admitted
        // with a per-row check (hostile_servers.rs), refused only with
        // `nullable_into_not_null: refuse`.
    ];
    expect_refusals(cases);
}

#[test]
fn source_columns_without_an_exact_mapping_are_refused_by_name() {
    let cases = [
        "json",
        "jsonb",
        "numeric",
        "numeric(77,2)",
        "numeric(10,-2)",
        "integer[]",
        "text[]",
        "bytea",
        "interval",
        "time",
        "money",
        "inet",
    ]
    .into_iter()
    .map(|ty| {
        let mut source = basic_cols();
        source.push(col("payload", ty, ""));
        let mut target = basic_cols();
        target.push(col("payload", "", "Nullable(String)"));
        Case::standard(format!("source {ty}"), "unsupported_type", "`payload`").source(source).target(target)
    })
    .collect();
    expect_refusals(cases);
}

// ---------------------------------------------------------------------------
// An old server
// ---------------------------------------------------------------------------

/// A target on the old server (18.16: no DateTime64, no Atomic database,
/// no EXCHANGE TABLES), in its default database.
fn old_server_setup(prefix: &'static str) -> Setup {
    let cols = vec![
        col("id", "bigint NOT NULL", "Int64"),
        col("ts", "timestamptz", "Nullable(DateTime)"),
        col("amount", "numeric(18,4)", "Nullable(Decimal(18, 4))"),
        col("name", "text", "Nullable(String)"),
    ];
    let mut setup = Setup::new(prefix, cols);
    setup.clickhouse_url = dpone_testkit::clickhouse_old_url();
    setup.database_engine = None;
    setup.table_engine = Some("MergeTree() ORDER BY id".into());
    setup.drop_sync = false;
    setup
}

#[test]
fn clickhouse_18_16_is_refused_before_anything_is_created() {
    expect_refusals(vec![Case::new("ClickHouse 18.16", old_server_setup("pgch_old"), "target_server_unsupported", "18.16")]);
}

/// A server without `xxh3_128` cannot compute the digest a manifest asks
/// for: refused before anything is created, next to the other reasons.
#[test]
fn a_digest_the_target_server_cannot_compute_is_refused_before_anything_is_created() {
    let mut case = Case::new("ClickHouse 18.16, xxh3_128", old_server_setup("pgch_olddig"), "digest_unsupported", "`xxh3_128`");
    case.manifest.digest = Some("xxh3_128".into());
    expect_refusals(vec![case]);
}
