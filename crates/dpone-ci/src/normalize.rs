//! Parsed documents, compared field by field with the schedule set apart.
//!
//! A document is parsed with `dpone_core::yaml::parse` (size and depth
//! limits, no anchors, aliases or custom tags) and turned into JSON, so that
//! key order, quoting and comments disappear. The schedule — the manifest's
//! top-level `schedule` block, or each workload's `cron` and `timezone` in a
//! schedules file — is taken out and compared on its own, normalized with
//! `dpone_core::cron::normalize`. Everything else is compared exactly, and
//! the differences are reported as field paths.

use dpone_core::Diagnostics;
use dpone_core::manifest;
use dpone_core::yaml::{self, Node};
use serde_json::{Map, Value as Json};

/// What a YAML file is, from its top-level `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocKind {
    /// `kind: dpone.batch.v1`
    Manifest,
    /// `kind: dpone.schedules.v1`
    Schedules,
    /// Anything else (no `kind`, another kind, not a mapping).
    Other,
}

/// A validated dpone document, normalized.
#[derive(Debug, Clone, PartialEq)]
pub struct Normalized {
    pub kind: DocKind,
    /// The document as JSON without its schedule.
    pub content: Json,
    /// The schedule: `(where, raw text, normalized)` per scheduled entry, in
    /// document order; for a manifest at most one entry (`schedule`).
    pub schedule: Vec<ScheduleEntry>,
    /// `source.type -> sink.type` of a manifest.
    pub route: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleEntry {
    /// `schedule` or `workloads[<name>]`.
    pub at: String,
    /// The raw JSON of the schedule fields, as written (before `vars` are
    /// substituted; `normalized` is taken after).
    pub raw: String,
    /// Normalized cron expression and timezone.
    pub normalized: String,
}

/// Why a document could not be normalized.
#[derive(Debug, Clone, PartialEq)]
pub enum Rejected {
    /// YAML syntax, size, depth, alias or tag problem.
    Parse(Diagnostics),
    /// Parsed, but not a dpone manifest or schedules file.
    NotDpone(String),
    /// A manifest or schedules file that does not validate.
    Invalid(DocKind, Diagnostics),
}

/// The `kind` of a parsed document.
pub fn kind_of(root: &Node) -> DocKind {
    match root.get("kind").and_then(Node::as_str) {
        Some("dpone.batch.v1") => DocKind::Manifest,
        Some(crate::schedules::KIND) => DocKind::Schedules,
        _ => DocKind::Other,
    }
}

/// Parses, validates and normalizes a dpone document.
pub fn normalize(text: &str) -> Result<Normalized, Rejected> {
    normalize_with(text, &manifest::Presets::new())
}

/// [`normalize`], with the convention preset files a manifest names as
/// read from the same revision ([`manifest::convention::preset_references`]).
pub fn normalize_with(text: &str, presets: &manifest::Presets) -> Result<Normalized, Rejected> {
    let root = yaml::parse(text).map_err(Rejected::Parse)?;
    match kind_of(&root) {
        DocKind::Manifest => {
            // A batch manifest is many processes; they share the file's schedule.
            let loaded = manifest::load_processes_with(text, &manifest::ExpandInput::default(), presets)
                .map_err(|d| Rejected::Invalid(DocKind::Manifest, d))?;
            let m = &loaded.processes[0].manifest;
            let mut content = root.to_json();
            let raw = content.as_object_mut().and_then(|o| o.remove("schedule"));
            // `load` validated the cron (after `vars`); normalize that value.
            let schedule = match (&raw, &m.schedule) {
                (Some(raw), Some(s)) => vec![ScheduleEntry {
                    at: "schedule".into(),
                    raw: manifest::canonical_json(raw),
                    normalized: format!("{} UTC", dpone_core::cron::normalize(&s.cron).unwrap_or_else(|_| s.cron.clone())),
                }],
                _ => Vec::new(),
            };
            let mut routes: Vec<String> =
                loaded.processes.iter().map(|p| format!("{}->{}", p.manifest.source.system, p.manifest.sink.system)).collect();
            routes.sort();
            routes.dedup();
            let route = Some(routes.join(","));
            Ok(Normalized { kind: DocKind::Manifest, content, schedule, route })
        }
        DocKind::Schedules => {
            let s = crate::schedules::load_tree(&root).map_err(|d| Rejected::Invalid(DocKind::Schedules, d))?;
            let mut content = root.to_json();
            let mut schedule = Vec::new();
            if let Some(items) = content.get_mut("workloads").and_then(Json::as_array_mut) {
                for (item, w) in items.iter_mut().zip(&s.workloads) {
                    let Some(obj) = item.as_object_mut() else { continue };
                    let mut raw = Map::new();
                    for key in ["cron", "timezone"] {
                        if let Some(v) = obj.remove(key) {
                            raw.insert(key.into(), v);
                        }
                    }
                    schedule.push(ScheduleEntry {
                        at: format!("workloads[{}]", w.name),
                        raw: manifest::canonical_json(&Json::Object(raw)),
                        normalized: format!("{} UTC", w.cron),
                    });
                }
            }
            Ok(Normalized { kind: DocKind::Schedules, content, schedule, route: None })
        }
        DocKind::Other => Err(Rejected::NotDpone(match root.get("kind").and_then(Node::as_str) {
            Some(k) => format!("its kind `{k}` is not a dpone manifest or schedules kind"),
            None => "it has no dpone `kind`".into(),
        })),
    }
}

/// True when the two documents' contents are the same, key order aside.
pub fn same_content(a: &Json, b: &Json) -> bool {
    manifest::canonical_json(a) == manifest::canonical_json(b)
}

/// The field paths (as segment lists) where two JSON trees differ. Objects
/// are compared key by key; a key present on one side only is compared with
/// an empty object when the other side is an object, so that the paths name
/// leaves. Lists and scalars are compared whole.
pub fn diff_paths(a: &Json, b: &Json) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    diff_into(Some(a), Some(b), &mut Vec::new(), &mut out);
    out
}

fn diff_into(a: Option<&Json>, b: Option<&Json>, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let empty = Json::Object(Map::new());
    match (a, b) {
        (Some(Json::Object(x)), Some(Json::Object(y))) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                path.push(k.clone());
                diff_into(x.get(k), y.get(k), path, out);
                path.pop();
            }
        }
        (Some(o @ Json::Object(_)), None) => diff_into(Some(o), Some(&empty), path, out),
        (None, Some(o @ Json::Object(_))) => diff_into(Some(&empty), Some(o), path, out),
        (Some(x), Some(y)) if manifest::canonical_json(x) == manifest::canonical_json(y) => {}
        _ => out.push(path.clone()),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) const MANIFEST: &str = "kind: dpone.batch.v1
source:
  type: sqlite
  connection: {connection_type: params, params: {path: source.db}}
  table: {name: events}
sink:
  type: sqlite
  connection: {connection_type: params, params: {path: target.db}}
  table: {name: events}
  strategy:
    mode: replace
    atomicity: target_atomic
    window: {column: ts, anchor: data_interval_end, lookback: P7D, chunk_interval: P1D}
schedule:
  cron: '0 3 * * MON'
";

    #[test]
    fn manifest_schedule_is_set_apart_and_normalized() {
        let n = normalize(MANIFEST).unwrap();
        assert_eq!(n.kind, DocKind::Manifest);
        assert!(n.content.get("schedule").is_none());
        assert_eq!(n.schedule.len(), 1);
        assert_eq!(n.schedule[0].normalized, "0 3 * * 1 UTC");
        assert_eq!(n.route.as_deref(), Some("sqlite->sqlite"));
        let reordered = normalize(&MANIFEST.replace("table: {name: events}\nsink", "table: {\"name\": \"events\"}\nsink")).unwrap();
        assert!(same_content(&n.content, &reordered.content));
    }

    #[test]
    fn rejections() {
        assert!(matches!(normalize("a: &x 1\nb: *x\n"), Err(Rejected::Parse(d)) if d.first_code() == "yaml_alias_unsupported"));
        assert!(matches!(normalize("a: [1\n"), Err(Rejected::Parse(d)) if d.first_code() == "manifest_parse_error"));
        assert!(matches!(normalize("name: ci\non: push\n"), Err(Rejected::NotDpone(_))));
        assert!(matches!(normalize("kind: other\n"), Err(Rejected::NotDpone(m)) if m.contains("other")));
        assert!(matches!(
            normalize(&MANIFEST.replace("0 3 * * MON", "0 3 * *")),
            Err(Rejected::Invalid(DocKind::Manifest, d)) if d.first_code() == "invalid_cron"
        ));
        assert!(matches!(normalize("kind: dpone.schedules.v1\n"), Err(Rejected::Invalid(DocKind::Schedules, _))));
    }

    #[test]
    fn schedules_file_workload_crons_are_set_apart() {
        let n =
            normalize("kind: dpone.schedules.v1\nworkloads:\n- {name: a, manifest: a.yaml, cron: '*/5 * * * *', timezone: UTC}\n").unwrap();
        assert_eq!(n.content, json!({"kind": "dpone.schedules.v1", "workloads": [{"name": "a", "manifest": "a.yaml"}]}));
        assert_eq!(n.schedule[0].at, "workloads[a]");
        assert_eq!(n.schedule[0].normalized, "*/5 * * * * UTC");
    }

    #[test]
    fn diff_names_leaves() {
        let a = json!({"source": {"type": "sqlite", "options": {"columns": ["a", "b"]}}, "runtime": {"storage": {"work_dir": "w"}}});
        let b = json!({"source": {"type": "sqlite", "options": {"columns": ["b", "a"], "native_transfer": {"wire": {"mode": "auto"}}}}});
        let paths: Vec<String> = diff_paths(&a, &b).into_iter().map(|p| p.join(".")).collect();
        assert_eq!(paths, vec!["runtime.storage.work_dir", "source.options.columns", "source.options.native_transfer.wire.mode"]);
        assert!(diff_paths(&a, &a).is_empty());
        assert_eq!(diff_paths(&json!({"a": 1}), &json!({"a": "1"})), vec![vec!["a".to_string()]]);
    }
}
