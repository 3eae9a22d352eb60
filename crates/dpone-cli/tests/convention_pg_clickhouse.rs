//! A batch manifest with `convention: landing_raw_v1` runs for real on the
//! PostgreSQL -> ClickHouse route and lands in the convention's names.
//!
//! The manifest is the original's example (tests/data/conventions,
//! `incremental_merge`), with its source schema, table and `src_system`
//! made unique: the convention names the ClickHouse database
//! `landing__<src_system>__demo_source`, the table `<schema>__t` and the
//! process `<schema>_t__incremental_merge`. dpone creates neither target
//! databases nor target tables (its ClickHouse sink refuses a missing one
//! with `target_missing`, checked first here): the test creates the
//! convention's database and table, as an operator would, before the run.
//! Connections are the original's environment variables.

mod harness;
mod pg_clickhouse_common;

use pg_clickhouse_common::{Fixture, Setup, TABLE, col};
use serde_json::Value;

const LANDING: &str = include_str!("data/conventions/landing_postgres_to_clickhouse.batch.yaml");

/// The source rows, as the test compares them on both sides: id, status,
/// amount in cents, updated_at in epoch seconds, ordered by id.
const PG_ROWS: &str = "SELECT id || E'\\t' || status || E'\\t' || (amount * 100)::bigint || E'\\t' || extract(epoch FROM updated_at)::bigint FROM {t} ORDER BY id";
const CH_ROWS: &str = "SELECT concat(toString(id), '\\t', status, '\\t', toString(toInt64(amount * 100)), '\\t', toString(toUnixTimestamp(updated_at))) FROM {t} ORDER BY id";

struct Landing {
    fx: Fixture,
    manifest: String,
    /// `landing__<src_system>__demo_source`: the convention's database.
    db: String,
    staging: String,
    /// `<schema>__t`: the convention's table.
    table: String,
    env: Vec<(&'static str, String)>,
}

impl Landing {
    fn new() -> Landing {
        // Only the PostgreSQL schema and source table come from the common
        // fixture; the ClickHouse side follows the convention's names.
        let cols = vec![
            col("id", "bigint NOT NULL", "Int64"),
            col("status", "text NOT NULL", "String"),
            col("amount", "numeric(12,2) NOT NULL", "Decimal(12, 2)"),
            col("updated_at", "timestamptz NOT NULL", "DateTime64(6, 'UTC')"),
        ];
        let fx = Fixture::create(Setup { create_database: false, table_engine: None, ..Setup::new("conv_landing", cols) });
        let name = fx.schema.clone();
        let text = LANDING
            .replace("  src_system: demo_postgres\n", &format!("  src_system: {name}\n"))
            .replace("    staging: {schema: stg}\n", &format!("    staging: {{schema: {name}_stg}}\n"))
            .replace("  public:\n    tables:\n      - orders\n", &format!("  {name}:\n    tables:\n      - {TABLE}\n"));
        assert_eq!(text.matches(&name).count(), 3, "the example names src_system, staging and schema `public` with `orders`");
        let manifest = fx.dir().join("landing_postgres_to_clickhouse.batch.yaml");
        std::fs::write(&manifest, text).unwrap();
        let pg = reqwest::Url::parse(&fx.postgres_url).unwrap();
        let env = vec![("DPONE_CONN_POSTGRES_DEMO", pg.to_string()), ("DPONE_CONN_CLICKHOUSE_DEMO_ANALYTICS", fx.clickhouse_url.clone())];
        Landing {
            manifest: manifest.display().to_string(),
            db: format!("landing__{name}__demo_source"),
            staging: format!("{name}_stg"),
            table: format!("{name}__{TABLE}"),
            fx,
            env,
        }
    }

    fn dpone(&self, args: &[&str]) -> harness::Run {
        let env: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        harness::run(self.fx.dir(), args, &env)
    }

    fn source_rows(&self) -> Vec<String> {
        let sql = PG_ROWS.replace("{t}", &format!("{}.{TABLE}", self.fx.schema));
        self.fx.pg_scalar(&format!("SELECT string_agg(line, E'\\n') FROM ({sql}) AS r(line)")).lines().map(str::to_string).collect()
    }

    fn target_rows(&self) -> Vec<String> {
        self.fx.ch_strings(&CH_ROWS.replace("{t}", &format!("{}.{}", self.db, self.table)))
    }

    fn finish(self) {
        for db in [&self.db, &self.staging] {
            self.fx.ch_exec(&format!("DROP DATABASE IF EXISTS {db} SYNC"));
        }
        self.fx.finish();
    }
}

fn documents(run: &harness::Run) -> Vec<Value> {
    serde_json::Deserializer::from_str(&run.stdout)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{e}:\n{}", run.describe()))
}

#[test]
fn a_landing_raw_v1_batch_lands_in_the_conventions_names() {
    let l = Landing::new();
    let t = format!("{}.{TABLE}", l.fx.schema);
    l.fx.pg_exec(&format!(
        "INSERT INTO {t} SELECT i, 'st' || (i % 3), (i % 97) + 0.25, timestamptz '2026-09-01 00:00:00+00' + i * interval '1 hour' FROM generate_series(1, 60) i"
    ));
    let process = format!("{}_{TABLE}__incremental_merge", l.fx.schema);
    let target = format!("{}.{}", l.db, l.table);

    // manifest list and render show the convention's names.
    let list = l.dpone(&["manifest", "list", &l.manifest, "--format", "json"]);
    let p = &list.json()["processes"][0];
    assert_eq!((p["process"].as_str(), p["target"].as_str()), (Some(process.as_str()), Some(target.as_str())), "{}", list.describe());

    // dpone does not create the convention's database: refused before any write, placed in the convention.
    let plan = l.dpone(&["plan", &l.manifest, "--format", "json"]);
    assert_ne!(plan.code, Some(0), "{}", plan.describe());
    let refusal = &documents(&plan)[0]["refusals"][0];
    assert_eq!(refusal["code"], "target_missing", "{}", plan.describe());
    assert!(refusal["message"].as_str().unwrap().contains(&l.db), "{refusal}");
    assert_eq!(refusal["path"], "convention(landing_raw_v1).naming.sink_dataset", "{refusal}");

    // The operator creates them, as for any ClickHouse target.
    for db in [&l.db, &l.staging] {
        l.fx.ch_exec(&format!("CREATE DATABASE {db} ENGINE = Atomic"));
    }
    l.fx.ch_exec(&format!(
        "CREATE TABLE {target} (id Int64, status String, amount Decimal(12, 2), updated_at DateTime64(6, 'UTC')) ENGINE = MergeTree ORDER BY id"
    ));
    let plan = l.dpone(&["plan", &l.manifest, "--format", "json"]);
    assert_eq!(plan.code, Some(0), "{}", plan.describe());
    assert_eq!(documents(&plan)[0]["route"]["target_table"], target.as_str());

    let run = l.dpone(&["run", &l.manifest, "--format", "json"]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let doc = &documents(&run)[0];
    assert_eq!((doc["status"].as_str(), doc["process"].as_str()), (Some("succeeded"), Some(process.as_str())), "{doc}");
    assert_eq!(l.target_rows(), l.source_rows(), "the landing table holds the source's rows");
    assert_eq!(l.target_rows().len(), 60);

    // A second run merges an update and a new row into the same table.
    l.fx.pg_exec(&format!(
        "UPDATE {t} SET status = 'changed', updated_at = timestamptz '2026-09-05 00:00:00+00' WHERE id = 7; \
         INSERT INTO {t} VALUES (61, 'new', 1.50, timestamptz '2026-09-05 01:00:00+00')"
    ));
    let run = l.dpone(&["run", &l.manifest, "--format", "json"]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(l.target_rows(), l.source_rows(), "the merge kept one row per id");
    assert_eq!(l.target_rows().len(), 61);
    // The landing database holds the convention's table and dpone's own
    // (`_dpone_marks`, backups), no staging or generation left over.
    let tables = l.fx.ch_strings(&format!("SELECT name FROM system.tables WHERE database = '{}' ORDER BY name", l.db));
    assert!(tables.iter().all(|n| n == &l.table || n == "_dpone_marks" || n.starts_with("_dpone_bak_")), "{tables:?}");
    assert!(tables.contains(&l.table), "{tables:?}");
    l.finish();
}
