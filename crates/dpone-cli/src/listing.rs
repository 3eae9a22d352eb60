//! `dpone manifest list` (a manifest's processes: selector, name, route,
//! strategy, tables) and `dpone manifest render` (the expanded manifest of
//! one process, as the run reads it, with credentials redacted).

use crate::Format;
use crate::commands::{self, EXIT_CONFIG, EXIT_OK};
use crate::output::{self, safe};
use dpone_core::manifest::model::is_secret_param;
use dpone_core::manifest::{Loaded, Process};
use dpone_core::yaml::{Node, Value};
use serde_json::json;
use std::path::Path;

/// One process, as `list` and `validate --format json` show it.
pub fn summary(p: &Process) -> serde_json::Value {
    let m = &p.manifest;
    json!({
        "id": p.label(),
        "selector": p.selector,
        "process": p.name,
        "route": format!("{}->{}", m.source.system, m.sink.system),
        "strategy": commands::strategy_name(m),
        "source": m.source.table.to_string(),
        "target": m.sink.table.to_string(),
        "description": p.description,
    })
}

/// The processes as an aligned table (two spaces of indent).
pub fn print_table(l: &Loaded) {
    let rows: Vec<[String; 5]> = l
        .processes
        .iter()
        .map(|p| {
            let m = &p.manifest;
            [
                p.label().to_string(),
                p.name.clone(),
                format!("{}->{}", m.source.system, m.sink.system),
                commands::strategy_name(m).to_string(),
                format!("{} -> {}", m.source.table, m.sink.table),
            ]
        })
        .collect();
    let header = ["ID", "PROCESS", "ROUTE", "STRATEGY", "TABLES"].map(str::to_string);
    let mut widths = [0usize; 5];
    for r in std::iter::once(&header).chain(&rows) {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    for r in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = r.iter().zip(widths).map(|(c, w)| format!("{:w$}", safe(c))).collect();
        println!("  {}", cells.join("  ").trim_end());
    }
}

pub fn list(path: &Path, format: Format) -> u8 {
    let loaded = match commands::load(path) {
        Ok(l) => l,
        Err(d) => {
            output::print_diagnostics(path, &d);
            return EXIT_CONFIG;
        }
    };
    match format {
        Format::Json => output::print_json(&json!({
            "manifest": path,
            "batch": loaded.batch,
            "processes": loaded.processes.iter().map(summary).collect::<Vec<_>>(),
        })),
        Format::Text => print_table(&loaded),
    }
    EXIT_OK
}

pub fn render(path: &Path, selector: Option<&str>, format: Format) -> u8 {
    let picked = commands::load(path).and_then(|l| commands::pick(&l, selector).map(|p| (p.tree.clone(), p.label().to_string())));
    let (tree, label) = match picked {
        Ok(v) => v,
        Err(d) => {
            output::print_diagnostics(path, &d);
            return EXIT_CONFIG;
        }
    };
    let tree = redacted(&tree, false);
    match format {
        Format::Json => output::print_json(&tree.to_json()),
        Format::Text => {
            let mut out = format!("# {} (expanded; credentials redacted)\n", label.replace('\n', " "));
            yaml(&tree, 0, &mut out);
            print!("{out}");
        }
    }
    EXIT_OK
}

/// `tree` with every secret connection parameter replaced by `<redacted>`.
fn redacted(node: &Node, in_params: bool) -> Node {
    let value = match &node.value {
        Value::Map(entries) => Value::Map(
            entries
                .iter()
                .map(|(k, v)| {
                    let v = if in_params && is_secret_param(&k.name) {
                        Node { value: Value::Str(crate::redact::REDACTED.into()), ..v.clone() }
                    } else {
                        redacted(v, k.name == "params")
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Seq(items) => Value::Seq(items.iter().map(|i| redacted(i, false)).collect()),
        other => other.clone(),
    };
    Node { value, ..node.clone() }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::Str(s) => serde_json::to_string(s).expect("strings serialize"),
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => serde_json::Number::from_f64(*f).map(|n| n.to_string()).unwrap_or_else(|| ".nan".into()),
        Value::Map(m) if m.is_empty() => "{}".into(),
        Value::Seq(s) if s.is_empty() => "[]".into(),
        _ => unreachable!("only scalars and empty collections are inline"),
    }
}

fn key_text(k: &str) -> String {
    let plain = !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if plain { k.to_string() } else { serde_json::to_string(k).expect("strings serialize") }
}

fn inline(v: &Value) -> bool {
    match v {
        Value::Map(m) => m.is_empty(),
        Value::Seq(s) => s.is_empty(),
        _ => true,
    }
}

/// Block-style YAML (strings double-quoted, so any text is valid YAML).
fn yaml(node: &Node, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match &node.value {
        Value::Map(entries) if !entries.is_empty() => {
            for (k, v) in entries {
                if inline(&v.value) {
                    out.push_str(&format!("{pad}{}: {}\n", key_text(&k.name), scalar(&v.value)));
                } else {
                    out.push_str(&format!("{pad}{}:\n", key_text(&k.name)));
                    yaml(v, indent + 2, out);
                }
            }
        }
        Value::Seq(items) if !items.is_empty() => {
            for it in items {
                if inline(&it.value) {
                    out.push_str(&format!("{pad}- {}\n", scalar(&it.value)));
                } else {
                    out.push_str(&format!("{pad}-\n"));
                    yaml(it, indent + 2, out);
                }
            }
        }
        other => out.push_str(&format!("{pad}{}\n", scalar(other))),
    }
}
