//! Conventions: the original's `convention:` / `conventions:` of a batch
//! manifest (`dpone/manifest/conventions.py`).
//!
//! A convention is a YAML fragment of a batch manifest (`vars`, `naming`,
//! `defaults`, ...) deep-merged *under* the manifest: the conventions in
//! the order written (`convention`, then each of `conventions`), later
//! winning, then the manifest itself on top, so whatever the manifest
//! writes wins. A name is a built-in convention (`landing_raw_v1`, also
//! spelled `landing` or `landing_raw`, any case) or else the path of a
//! preset YAML file relative to the manifest's folder, which the caller
//! reads (core does no I/O) and hands in as [`Presets`].
//!
//! Values that came from a convention are reported at
//! `convention(<name>).<path>` and at the line and column where the
//! manifest names the convention.

use super::render::{self, Origins};
use super::schema::join;
use super::template::TemplateCode;
use crate::error::{Diagnostic, DiagnosticKind, Diagnostics};
use crate::yaml::{self, Key, Node, Value};
use std::collections::BTreeMap;

/// Built-in conventions, as hints list them.
pub const BUILTIN: &[&str] = &["landing_raw_v1"];

/// The original's `landing_raw_v1`, the part this runtime honours: the
/// sink schema `landing__<src_system>__<src_database>`, the table
/// `<schema>__<table>`, the process `<schema>_<table>__<mode>` (each name
/// through `dpone_snake`). Its labels, table description, task group,
/// technical columns and validation rules are not applied (see
/// docs/manifest.md, "Conventions").
const LANDING_RAW_V1: &str = r#"vars:
  layer: landing
  ingest: dpone
naming:
  sink_dataset: "{{ layer|default('landing')|dpone_snake }}__{{ src_system|dpone_snake }}__{{ src_database|dpone_snake }}"
  sink_table: "{{ src_schema|default('default')|dpone_snake }}__{{ src_table|dpone_snake }}"
  process_name: "{{ src_schema|default('default')|dpone_snake }}_{{ src_table|dpone_snake }}__{{ sink.strategy.mode }}"
"#;

/// A preset file the caller read, keyed in [`Presets`] by the name as the
/// manifest writes it. A name missing from the map names no file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PresetFile {
    /// The file's text; `path` is how messages name it.
    Text { path: String, text: String },
    /// The file exists but could not be read (`reason` says why).
    Unreadable { path: String, reason: String },
}

pub type Presets = BTreeMap<String, PresetFile>;

/// The built-in convention a name selects (the original trims and
/// lower-cases it).
fn builtin(name: &str) -> Option<&'static str> {
    matches!(name.trim().to_lowercase().as_str(), "landing" | "landing_raw" | "landing_raw_v1").then_some(LANDING_RAW_V1)
}

/// One convention the manifest names: its name and where it is written
/// (`convention` or `conventions[i]`).
struct Reference {
    name: String,
    path: String,
    line: u64,
    column: u64,
}

/// `convention` then each of `conventions`: the non-empty strings (other
/// values are left to the shape check).
fn references(root: &Node) -> Vec<Reference> {
    let one = |n: &Node, path: String| {
        n.as_str().map(str::trim).filter(|s| !s.is_empty()).map(|s| Reference { name: s.into(), path, line: n.line, column: n.column })
    };
    let mut out: Vec<Reference> = root.get("convention").and_then(|n| one(n, "convention".into())).into_iter().collect();
    if let Some(Value::Seq(items)) = root.get("conventions").map(|n| &n.value) {
        out.extend(items.iter().enumerate().filter_map(|(i, n)| one(n, format!("conventions[{i}]"))));
    }
    out
}

const PRESET_HINT: &str = "a preset is a YAML mapping of the batch-manifest keys it supplies as defaults (vars, naming, defaults, runtime, ...); the manifest's own values win";

fn invalid_preset(r: &Reference, message: String) -> Diagnostic {
    Diagnostic::new("invalid_convention_preset", &r.path, message).hint(PRESET_HINT).at(r.line, r.column)
}

/// Whether conventions apply: the batch form (`defaults` / `schemas`).
fn is_batch(root: &Node) -> bool {
    root.get("schemas").is_some() || root.get("defaults").is_some()
}

/// The names of a manifest's conventions that are not built in: preset
/// files the caller reads relative to the manifest's folder. Empty when
/// the text is not a batch manifest (or not YAML: loading reports that).
pub fn preset_references(text: &str) -> Vec<String> {
    match yaml::parse(text) {
        Ok(root) if is_batch(&root) => references(&root).into_iter().filter(|r| builtin(&r.name).is_none()).map(|r| r.name).collect(),
        _ => Vec::new(),
    }
}

/// The manifest with its conventions merged under it, and where each
/// value that came from a convention is reported.
pub(crate) struct Applied {
    pub root: Node,
    /// Path in the merged manifest -> `convention(<name>).<path>`.
    pub origins: Origins,
    builtin_paths: Vec<String>,
}

fn layer_text<'p>(r: &Reference, presets: &'p Presets, manifest_path: &str) -> Result<(&'p str, String), Diagnostic> {
    match presets.get(&r.name) {
        None => {
            let dir = std::path::Path::new(manifest_path).parent().map(|p| p.display().to_string()).filter(|d| !d.is_empty());
            let missing = match &dir {
                Some(d) => format!("{d}/{}", r.name),
                None => r.name.clone(),
            };
            Err(Diagnostic::new(
                "unknown_convention",
                &r.path,
                format!("`{}` is neither a built-in convention nor a preset file ({missing} does not exist)", r.name),
            )
            .hint(format!(
                "supported conventions: {} (also spelled landing, landing_raw); or the path of a preset YAML file relative to the manifest's folder",
                BUILTIN.join(", ")
            ))
            .at(r.line, r.column))
        }
        Some(PresetFile::Unreadable { path, reason }) => {
            Err(invalid_preset(r, format!("cannot read the preset of convention `{}` ({path}): {reason}", r.name)))
        }
        Some(PresetFile::Text { path, text }) => Ok((text.as_str(), path.clone())),
    }
}

/// Parses one convention into a mapping placed where the manifest names it.
fn layer(r: &Reference, presets: &Presets, manifest_path: &str) -> Result<Node, Diagnostic> {
    let (text, file) = match builtin(&r.name) {
        Some(t) => (t, format!("built-in {}", r.name)),
        None => layer_text(r, presets, manifest_path)?,
    };
    let invalid = |message: String| invalid_preset(r, message);
    let mut node = yaml::parse(text).map_err(|Diagnostics(ds)| {
        let first = ds.first();
        let place = first.and_then(|d| d.line.map(|l| format!(" (line {l}, column {} of the preset)", d.column.unwrap_or(0))));
        invalid(format!(
            "the preset of convention `{}` ({file}) is not valid YAML: {}{}",
            r.name,
            first.map_or("", |d| d.message.as_str()),
            place.unwrap_or_default()
        ))
    })?;
    let Value::Map(entries) = &node.value else {
        return Err(invalid(format!("the preset of convention `{}` ({file}) is {}, not a mapping", r.name, node.value.kind())));
    };
    if let Some((k, _)) = entries.iter().find(|(k, _)| matches!(k.name.as_str(), "convention" | "conventions")) {
        return Err(invalid(format!("the preset of convention `{}` ({file}) names conventions itself (`{}`)", r.name, k.name)));
    }
    place_at(&mut node, r.line, r.column);
    Ok(node)
}

/// Gives every node and key of a convention the position of its name in the manifest.
fn place_at(node: &mut Node, line: u64, column: u64) {
    node.line = line;
    node.column = column;
    match &mut node.value {
        Value::Map(entries) => {
            for (k, v) in entries {
                (k.line, k.column) = (line, column);
                place_at(v, line, column);
            }
        }
        Value::Seq(items) => items.iter_mut().for_each(|it| place_at(it, line, column)),
        _ => {}
    }
}

/// The original's `deep_merge(lower, upper)`: mappings merge key by key,
/// anything else is `upper`'s. `upper`'s keys keep their order and
/// positions; keys only `lower` has follow.
fn overlay(lower: &Node, upper: &Node) -> Node {
    let (Value::Map(low), Value::Map(up)) = (&lower.value, &upper.value) else { return upper.clone() };
    let mut out: Vec<(Key, Node)> = up
        .iter()
        .map(|(k, v)| match low.iter().find(|(lk, _)| lk.name == k.name) {
            Some((_, lv)) => (k.clone(), overlay(lv, v)),
            None => (k.clone(), v.clone()),
        })
        .collect();
    out.extend(low.iter().filter(|(lk, _)| !up.iter().any(|(k, _)| k.name == lk.name)).cloned());
    Node { value: Value::Map(out), line: upper.line, column: upper.column }
}

/// Records, for each value of `merged` the manifest does not write, the
/// convention (the last one that has it) it came from.
fn record(merged: &Node, user: Option<&Node>, layers: &[(String, Node)], path: &str, out: &mut Origins) {
    let Value::Map(entries) = &merged.value else { return };
    for (k, v) in entries {
        let p = join(path, &k.name);
        match user.and_then(|u| u.get(&k.name)) {
            Some(u) => record(v, Some(u), layers, &p, out),
            None => {
                if let Some((name, _)) = layers.iter().rev().find(|(_, l)| lookup(l, &p).is_some()) {
                    out.insert(p.clone(), format!("convention({name}).{p}"));
                }
            }
        }
    }
}

fn lookup<'n>(node: &'n Node, path: &str) -> Option<&'n Node> {
    path.split('.').try_fold(node, |n, k| n.get(k))
}

/// Merges the conventions of a batch manifest under it; None when it
/// names none (or is not a batch manifest: the shape check refuses
/// `convention` there).
pub(crate) fn apply(root: &Node, presets: &Presets, manifest_path: &str, diags: &mut Vec<Diagnostic>) -> Option<Applied> {
    if !is_batch(root) {
        return None;
    }
    let refs = references(root);
    if refs.is_empty() {
        return None;
    }
    let mut layers: Vec<(String, Node)> = Vec::new();
    for r in &refs {
        match layer(r, presets, manifest_path) {
            Ok(node) => layers.push((r.name.clone(), node)),
            Err(d) => diags.push(d),
        }
    }
    if !diags.is_empty() {
        return None;
    }
    let patch = layers.iter().skip(1).fold(layers[0].1.clone(), |acc, (_, l)| overlay(&acc, l));
    let merged = overlay(&patch, root);
    let mut origins = Origins::new();
    record(&merged, Some(root), &layers, "", &mut origins);
    let builtin_paths = origins
        .iter()
        .filter(|(_, file)| refs.iter().any(|r| builtin(&r.name).is_some() && file.starts_with(&format!("convention({})", r.name))))
        .map(|(_, file)| file.clone())
        .collect();
    Some(Applied { root: merged, origins, builtin_paths })
}

impl Applied {
    /// Reports the problems of values that came from a convention at
    /// `convention(<name>).<path>`; a name the built-in `landing_raw_v1`
    /// needs says which vars it needs.
    pub(crate) fn relabel(&self, Diagnostics(ds): Diagnostics) -> Diagnostics {
        Diagnostics(
            ds.into_iter()
                .map(|mut d| {
                    if d.path.starts_with('-') {
                        return d;
                    }
                    d.path = render::translate(&self.origins, &d.path);
                    if d.kind == DiagnosticKind::Template(TemplateCode::UnknownVar) && self.builtin_paths.iter().any(|p| d.path.starts_with(p.as_str())) {
                        let more = "landing_raw_v1 names the sink schema `landing__<src_system>__<src_database>` and the table `<schema>__<table>`: define `src_system` and `src_database` under `vars`";
                        d.hint = Some(match d.hint.take() {
                            Some(h) => format!("{more}; {h}"),
                            None => more.into(),
                        });
                    }
                    d
                })
                .collect(),
        )
    }
}
