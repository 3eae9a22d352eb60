//! The schedules file: workloads and when they run.
//!
//! ```yaml
//! kind: dpone.schedules.v1
//! workloads:
//!   - name: events_daily
//!     manifest: manifests/events.yaml
//!     cron: "0 3 * * *"
//!     timezone: UTC          # optional, only UTC
//!     depends_on: [dims]     # optional, names of other workloads
//! ```
//!
//! It is read with the same strictness as a manifest: the same YAML parser
//! (size and depth limits, no anchors, aliases or custom tags, no duplicate
//! keys), unknown keys refused with did-you-mean hints, and every problem
//! reported with a stable code, path, position and hint. The JSON Schema
//! printed by `dpone ci schema` is generated from the same declaration.

use dpone_core::manifest::schema::{self, Field, Shape};
use dpone_core::manifest::sorted;
use dpone_core::yaml::{self, Node, Value};
use dpone_core::{Diagnostic, Diagnostics, cron};
use serde_json::{Value as Json, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

/// The `kind` of a schedules file.
pub const KIND: &str = "dpone.schedules.v1";

fn field(name: &'static str, shape: Shape, required: bool, description: &'static str) -> Field {
    Field { name, shape, required, description }
}

/// The declared shape of a schedules file.
pub fn shape() -> &'static Shape {
    static SHAPE: LazyLock<Shape> = LazyLock::new(|| {
        let workload = Shape::Object {
            fields: vec![
                field(
                    "name",
                    Shape::String { format: Some("workload-name") },
                    true,
                    "Unique workload name: lower-case letters, digits, `_`, `-`, `.`",
                ),
                field(
                    "manifest",
                    Shape::String { format: Some("relative-path") },
                    true,
                    "Manifest this workload runs, relative to the repository root",
                ),
                field("cron", Shape::String { format: Some("cron") }, true, "Five-field cron expression (UTC)"),
                field("timezone", Shape::Enum(&["UTC"]), false, "Only UTC"),
                field(
                    "depends_on",
                    Shape::List(Box::new(Shape::String { format: Some("workload-name") })),
                    false,
                    "Workloads that must finish first",
                ),
            ],
            extra: None,
        };
        Shape::Object {
            fields: vec![
                field("kind", Shape::Enum(&[KIND]), true, "Schedules file kind"),
                field("workloads", Shape::List(Box::new(workload)), true, "Scheduled workloads"),
            ],
            extra: None,
        }
    });
    &SHAPE
}

/// One validated workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    pub name: String,
    pub manifest: String,
    /// The cron expression, normalized (`dpone_core::cron::normalize`).
    pub cron: String,
    pub depends_on: Vec<String>,
}

/// A validated schedules file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedules {
    pub workloads: Vec<Workload>,
}

fn valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-' | '.'))
        && s.len() <= 128
}

fn valid_relative_path(s: &str) -> bool {
    !s.is_empty() && !s.starts_with('/') && !s.contains('\\') && s.split('/').all(|seg| !seg.is_empty() && seg != "." && seg != "..")
}

/// Parses and validates a schedules file.
pub fn load(text: &str) -> Result<Schedules, Diagnostics> {
    let root = yaml::parse(text)?;
    load_tree(&root)
}

/// Validates an already parsed schedules file.
pub fn load_tree(root: &Node) -> Result<Schedules, Diagnostics> {
    if !matches!(root.value, Value::Map(_)) {
        return Err(Diagnostic::new("invalid_type", "", format!("a schedules file is a mapping, found {}", root.value.kind()))
            .hint(format!("start with `kind: {KIND}`"))
            .at(root.line, root.column)
            .into());
    }
    let mut diags = Vec::new();
    schema::check(root, shape(), "", &mut diags);
    if !diags.is_empty() {
        return Err(sorted(diags));
    }
    let mut workloads = Vec::new();
    let mut positions: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let items = match root.get("workloads").map(|n| &n.value) {
        Some(Value::Seq(items)) => items.as_slice(),
        _ => &[],
    };
    for (i, item) in items.iter().enumerate() {
        let path = format!("workloads[{i}]");
        let text = |key: &str| item.get(key).and_then(Node::as_str).unwrap_or("").to_string();
        // A diagnostic on `key`, placed at its node (else at the item's).
        let bad = |key: &str, code: &str, message: String, hint: String| {
            let d = Diagnostic::new(code, format!("{path}.{key}"), message).hint(hint);
            match item.get(key) {
                Some(n) => d.at(n.line, n.column),
                None => d.at(item.line, item.column),
            }
        };
        let name = text("name");
        if !valid_name(&name) {
            diags.push(bad(
                "name",
                "invalid_workload_name",
                format!("`{name}` is not a valid workload name"),
                "use lower-case letters, digits, `_`, `-` and `.`, starting with a letter or digit (at most 128 characters)".into(),
            ));
        } else if let Some((line, column)) = positions.insert(name.clone(), (item.line, item.column)) {
            diags.push(bad(
                "name",
                "duplicate_workload",
                format!("workload `{name}` is declared twice"),
                format!("the first declaration is at line {line}, column {column}; keep one"),
            ));
        }
        let manifest = text("manifest");
        if !valid_relative_path(&manifest) {
            diags.push(bad(
                "manifest",
                "invalid_manifest_path",
                format!("`{manifest}` is not a relative path"),
                "write the manifest's path relative to the repository root, with `/` and without `.` or `..`".into(),
            ));
        }
        let cron = match cron::normalize(&text("cron")) {
            Ok(c) => c,
            Err(e) => {
                diags.push(bad("cron", "invalid_cron", e, "write five fields: minute hour day-of-month month day-of-week".into()));
                String::new()
            }
        };
        let depends_on = match item.get("depends_on").map(|n| &n.value) {
            Some(Value::Seq(deps)) => deps.iter().filter_map(|d| d.as_str().map(str::to_string)).collect(),
            _ => Vec::new(),
        };
        workloads.push(Workload { name, manifest, cron, depends_on });
    }
    for (i, w) in workloads.iter().enumerate() {
        for (j, dep) in w.depends_on.iter().enumerate() {
            let path = format!("workloads[{i}].depends_on[{j}]");
            let node = items[i].get("depends_on").and_then(|d| match &d.value {
                Value::Seq(deps) => deps.get(j),
                _ => None,
            });
            let mut d = if dep == &w.name {
                Diagnostic::new("invalid_dependency", path, format!("workload `{dep}` depends on itself")).hint("remove the dependency")
            } else if !positions.contains_key(dep) {
                let hint = match dpone_core::error::did_you_mean(dep, positions.keys().map(String::as_str)) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None => "name a workload declared in this file".to_string(),
                };
                Diagnostic::new("unknown_dependency", path, format!("`{dep}` is not a workload of this file")).hint(hint)
            } else {
                continue;
            };
            if let Some(n) = node {
                d = d.at(n.line, n.column);
            }
            diags.push(d);
        }
    }
    if diags.is_empty()
        && let Some(cycle) = find_cycle(&workloads)
    {
        diags.push(
            Diagnostic::new("dependency_cycle", "workloads", format!("the dependencies form a cycle: {}", cycle.join(" -> ")))
                .hint("remove one of the dependencies of the cycle"),
        );
    }
    if diags.is_empty() { Ok(Schedules { workloads }) } else { Err(sorted(diags)) }
}

fn find_cycle(workloads: &[Workload]) -> Option<Vec<String>> {
    let deps: BTreeMap<&str, &[String]> = workloads.iter().map(|w| (w.name.as_str(), w.depends_on.as_slice())).collect();
    let mut done: BTreeSet<&str> = BTreeSet::new();
    fn visit<'a>(
        n: &'a str,
        deps: &BTreeMap<&'a str, &'a [String]>,
        stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(pos) = stack.iter().position(|s| *s == n) {
            let mut cycle: Vec<String> = stack[pos..].iter().map(|s| s.to_string()).collect();
            cycle.push(n.to_string());
            return Some(cycle);
        }
        if done.contains(n) {
            return None;
        }
        stack.push(n);
        for d in deps.get(n).copied().unwrap_or(&[]) {
            if let Some(c) = visit(d, deps, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(n);
        None
    }
    for w in workloads {
        if let Some(c) = visit(&w.name, &deps, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

/// JSON Schema (draft 2020-12) of the schedules file, from [`shape`].
pub fn json_schema() -> Json {
    let mut root = schema::to_json_schema(shape(), &format!("dpone schedules file (kind {KIND})"));
    if let Json::Object(m) = &mut root {
        m.insert("$schema".into(), json!("https://json-schema.org/draft/2020-12/schema"));
        m.insert("$id".into(), json!("https://dpone.dev/schemas/dpone.schedules.v1.json"));
        m.insert("title".into(), json!(KIND));
    }
    root
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "kind: dpone.schedules.v1
workloads:
  - name: dims
    manifest: manifests/dims.yaml
    cron: '0 2 * * *'
  - name: events_daily
    manifest: manifests/events.yaml
    cron: 0 3 * * MON
    timezone: UTC
    depends_on: [dims]
";

    fn codes(text: &str) -> Vec<(String, String)> {
        load(text).unwrap_err().0.into_iter().map(|d| (d.code, d.path)).collect()
    }

    #[test]
    fn valid_file_loads_with_normalized_cron() {
        let s = load(VALID).unwrap();
        assert_eq!(s.workloads.len(), 2);
        assert_eq!(s.workloads[1].cron, "0 3 * * 1");
        assert_eq!(s.workloads[1].depends_on, vec!["dims".to_string()]);
    }

    #[test]
    fn structural_errors_have_paths_positions_and_hints() {
        let err = load(&VALID.replace("cron: '0 2", "crom: '0 2")).unwrap_err();
        let d = err.0.iter().find(|d| d.code == "unknown_key").unwrap();
        assert_eq!(d.path, "workloads[0].crom");
        assert_eq!(d.hint.as_deref(), Some("did you mean `cron`?"));
        assert_eq!(d.line, Some(5));
        assert!(err.0.iter().any(|d| d.code == "missing_key" && d.path == "workloads[0].cron"));
        assert_eq!(codes(&VALID.replace("dpone.schedules.v1", "dpone.schedules.v2"))[0].0, "invalid_value");
        assert_eq!(codes("- a\n")[0].0, "invalid_type");
        assert_eq!(codes(&VALID.replace("timezone: UTC", "timezone: CET"))[0], ("invalid_value".into(), "workloads[1].timezone".into()));
    }

    #[test]
    fn yaml_restrictions_are_the_manifest_ones() {
        assert_eq!(codes("kind: &k dpone.schedules.v1\nworkloads: []\nx: *k\n")[0].0, "yaml_alias_unsupported");
        assert_eq!(codes("kind: !custom dpone.schedules.v1\nworkloads: []\n")[0].0, "yaml_tag_unsupported");
        assert_eq!(codes("kind: dpone.schedules.v1\nkind: dpone.schedules.v1\nworkloads: []\n")[0].0, "duplicate_key");
        let big = format!("{VALID}#{}\n", "x".repeat(yaml::MAX_DOCUMENT_BYTES));
        assert_eq!(codes(&big)[0].0, "manifest_too_large");
    }

    #[test]
    fn semantic_errors() {
        assert_eq!(codes(&VALID.replace("0 3 * * MON", "0 24 * * MON")), vec![("invalid_cron".into(), "workloads[1].cron".into())]);
        assert_eq!(
            codes(&VALID.replace("name: dims", "name: Dims")),
            vec![
                ("invalid_workload_name".into(), "workloads[0].name".into()),
                ("unknown_dependency".into(), "workloads[1].depends_on[0]".into())
            ]
        );
        assert_eq!(codes(&VALID.replace("name: events_daily", "name: dims"))[0], ("duplicate_workload".into(), "workloads[1].name".into()));
        assert_eq!(codes(&VALID.replace("manifests/dims.yaml", "../dims.yaml"))[0].0, "invalid_manifest_path");
        assert_eq!(codes(&VALID.replace("manifests/dims.yaml", "/abs/dims.yaml"))[0].0, "invalid_manifest_path");
        assert_eq!(codes(&VALID.replace("[dims]", "[events_daily]"))[0].0, "invalid_dependency");
        let d = load(&VALID.replace("[dims]", "[dimz]")).unwrap_err();
        assert_eq!(d.0[0].hint.as_deref(), Some("did you mean `dims`?"));
        let cyclic = VALID.replace("    cron: '0 2 * * *'", "    cron: '0 2 * * *'\n    depends_on: [events_daily]");
        assert_eq!(codes(&cyclic)[0].0, "dependency_cycle");
    }

    #[test]
    fn json_schema_matches_the_declaration() {
        let s = json_schema();
        assert_eq!(s["title"], KIND);
        assert_eq!(s["required"], json!(["kind", "workloads"]));
        let w = &s["properties"]["workloads"]["items"];
        assert_eq!(w["required"], json!(["name", "manifest", "cron"]));
        assert_eq!(w["additionalProperties"], json!(false));
        assert_eq!(w["properties"]["timezone"]["enum"], json!(["UTC"]));
    }
}
