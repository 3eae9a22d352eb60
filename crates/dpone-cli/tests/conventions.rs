//! Naming conventions of batch manifests, offline (no server is reached):
//! the original's `convention: landing_raw_v1` example and a manifest whose
//! names come from a custom preset file, each written in the original's
//! shape (tests/data/conventions), validate, list, render and plan
//! (`plan --offline`) with the names the convention produced; unknown
//! conventions and malformed presets are refused before anything else.
//! The real run is in `batch_pg_clickhouse.rs`.

mod harness;

use harness::Run;
use serde_json::Value;
use std::path::Path;

const LANDING: &str = include_str!("data/conventions/landing_postgres_to_clickhouse.batch.yaml");
const TEAM: &str = include_str!("data/conventions/team_preset.batch.yaml");
const TEAM_PRESET: &str = include_str!("data/conventions/presets/landing_team.yaml");
const END: &str = "2026-09-09T00:00:00Z";

/// Connections as the original's environment variables (never reached offline).
const ENV: &[(&str, &str)] = &[
    ("DPONE_CONN_POSTGRES_DEMO", "postgresql://dpone:secret@127.0.0.1:1/demo"),
    ("DPONE_CONN_CLICKHOUSE_DEMO_ANALYTICS", "http://default:@127.0.0.1:1/"),
    ("DPONE_CONN_POSTGRES_SHOP", "postgresql://dpone:secret@127.0.0.1:1/shop"),
    ("DPONE_CONN_CLICKHOUSE_DWH", "http://default:@127.0.0.1:1/"),
];

/// The test data in a folder of its own (the preset relative to the manifest).
fn folder() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("presets")).unwrap();
    for (name, text) in [
        ("landing_postgres_to_clickhouse.batch.yaml", LANDING),
        ("team_preset.batch.yaml", TEAM),
        ("presets/landing_team.yaml", TEAM_PRESET),
    ] {
        std::fs::write(tmp.path().join(name), text).unwrap();
    }
    tmp
}

/// The test data in a [`folder`], where `manifest validate` accepts `manifest`.
fn validated(manifest: &str) -> tempfile::TempDir {
    let tmp = folder();
    let valid = dpone(tmp.path(), &["manifest", "validate", manifest]);
    assert_eq!(valid.code, Some(0), "{}", valid.describe());
    tmp
}

fn dpone(dir: &Path, args: &[&str]) -> Run {
    harness::run(dir, args, ENV)
}

/// `(selector, process, target)` of every process `manifest list` shows.
fn listed(dir: &Path, manifest: &str) -> Vec<(String, String, String)> {
    let list = dpone(dir, &["manifest", "list", manifest, "--format", "json"]);
    assert_eq!(list.code, Some(0), "{}", list.describe());
    let text = |p: &Value, k: &str| p[k].as_str().unwrap().to_string();
    list.json()["processes"].as_array().unwrap().iter().map(|p| (text(p, "id"), text(p, "process"), text(p, "target"))).collect()
}

/// `(process, target table)` of every plan document `plan --offline` prints.
fn planned(dir: &Path, manifest: &str) -> Vec<(String, String)> {
    let plan = dpone(dir, &["plan", manifest, "--offline", "--interval-end", END, "--format", "json"]);
    assert_eq!(plan.code, Some(0), "{}", plan.describe());
    let docs: Vec<Value> = serde_json::Deserializer::from_str(&plan.stdout).into_iter::<Value>().collect::<Result<_, _>>().unwrap();
    docs.iter()
        .map(|d| {
            assert!(d["refusals"].as_array().is_some_and(Vec::is_empty), "{d}");
            (d["process"].as_str().unwrap_or_default().to_string(), d["route"]["target_table"].as_str().unwrap().to_string())
        })
        .collect()
}

fn s(v: &str) -> String {
    v.to_string()
}

#[test]
fn landing_raw_v1_names_the_originals_example() {
    let m = "landing_postgres_to_clickhouse.batch.yaml";
    let tmp = validated(m);
    let dir = tmp.path();
    let target = "landing__demo_postgres__demo_source.public__orders";
    assert_eq!(listed(dir, m), vec![(s("public.orders"), s("public_orders__incremental_merge"), s(target))]);
    let render = dpone(dir, &["manifest", "render", m, "--selector", "public.orders"]);
    assert_eq!(render.code, Some(0), "{}", render.describe());
    for line in
        ["schema: \"landing__demo_postgres__demo_source\"", "name: \"public__orders\"", "name: \"public_orders__incremental_merge\""]
    {
        assert!(render.stdout.contains(line), "render shows {line}:\n{}", render.stdout);
    }
    let plan = planned(dir, m);
    assert_eq!(plan.len(), 1);
    assert_eq!(plan[0].1, target);
}

#[test]
fn a_custom_preset_file_names_the_processes_and_explicit_names_win() {
    let m = "team_preset.batch.yaml";
    let tmp = validated(m);
    let dir = tmp.path();
    assert_eq!(
        listed(dir, m),
        vec![
            (s("sales.OrderLines"), s("growth__sales_order_lines"), s("raw__growth__shop_main.sales__order_lines")),
            (s("sales.payments"), s("growth__sales_payments"), s("raw__growth__shop_main.payments_explicit")),
        ]
    );
    let targets: Vec<String> = planned(dir, m).into_iter().map(|(_, t)| t).collect();
    assert_eq!(targets, vec![s("raw__growth__shop_main.sales__order_lines"), s("raw__growth__shop_main.payments_explicit")]);
    // Run from another folder: the preset is found next to the manifest.
    let elsewhere = tempfile::tempdir().unwrap();
    let path = dir.join(m).display().to_string();
    let valid = dpone(elsewhere.path(), &["manifest", "validate", &path]);
    assert_eq!(valid.code, Some(0), "{}", valid.describe());
}

/// The refusal of `validate --format json`: its first error.
fn refusal(dir: &Path, manifest: &str) -> Value {
    let run = dpone(dir, &["manifest", "validate", manifest, "--format", "json"]);
    assert_eq!(run.code, Some(2), "{}", run.describe());
    run.json()["errors"][0].clone()
}

#[test]
fn unknown_conventions_and_malformed_presets_are_refused_where_the_manifest_names_them() {
    let tmp = folder();
    let dir = tmp.path();
    std::fs::write(dir.join("unknown.yaml"), LANDING.replace("convention: landing_raw_v1", "convention: landing_raw_v9")).unwrap();
    let e = refusal(dir, "unknown.yaml");
    assert_eq!(
        (e["code"].as_str(), e["path"].as_str(), e["line"].as_u64()),
        (Some("unknown_convention"), Some("convention"), Some(10)),
        "{e}"
    );
    assert!(e["hint"].as_str().unwrap().contains("supported conventions: landing_raw_v1"), "{e}");

    for (preset, what) in [("- a\n- list\n", "not a mapping"), ("naming: {sink_table: [\n", "not valid YAML")] {
        std::fs::write(dir.join("presets/landing_team.yaml"), preset).unwrap();
        let e = refusal(dir, "team_preset.batch.yaml");
        assert_eq!(
            (e["code"].as_str(), e["path"].as_str(), e["line"].as_u64()),
            (Some("invalid_convention_preset"), Some("convention"), Some(5)),
            "{e}"
        );
        assert!(e["message"].as_str().unwrap().contains(what), "{e}");
        assert!(e["message"].as_str().unwrap().contains("presets/landing_team.yaml"), "{e}");
    }
    // A key this runtime refuses, reported in the preset.
    std::fs::write(dir.join("presets/landing_team.yaml"), format!("{TEAM_PRESET}validation:\n  dataset_pattern: x\n")).unwrap();
    let e = refusal(dir, "team_preset.batch.yaml");
    assert_eq!(
        (e["code"].as_str(), e["path"].as_str()),
        (Some("unsupported_feature"), Some("convention(presets/landing_team.yaml).validation")),
        "{e}"
    );
    // A preset that is a folder is read as the manifest would be.
    std::fs::remove_file(dir.join("presets/landing_team.yaml")).unwrap();
    std::fs::create_dir(dir.join("presets/landing_team.yaml")).unwrap();
    let e = refusal(dir, "team_preset.batch.yaml");
    assert_eq!(e["code"].as_str(), Some("invalid_convention_preset"), "{e}");
    // Without its vars, landing_raw_v1 says which it needs.
    std::fs::write(dir.join("novars.yaml"), LANDING.replace("  src_system: demo_postgres\n", "")).unwrap();
    let e = refusal(dir, "novars.yaml");
    assert_eq!(
        (e["code"].as_str(), e["path"].as_str()),
        (Some("unknown_var"), Some("convention(landing_raw_v1).naming.sink_dataset")),
        "{e}"
    );
    assert!(e["hint"].as_str().unwrap().contains("`src_system` and `src_database`"), "{e}");
}
