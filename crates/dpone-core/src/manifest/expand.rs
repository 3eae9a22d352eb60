//! Batch expansion: the original's `dpone.batch.v1` with `defaults` and
//! `schemas.<schema>.tables` becomes one process per table, each a tree of
//! today's single form (`source`, `sink`, ...) built from the user's own
//! nodes, so every value keeps the line and column it was written at.
//!
//! The order is the original's (`BatchManifestCompiler`): file `defaults`
//! (with the file's `runtime` replacing `defaults.runtime`), then
//! `schemas.<schema>.defaults`, then the table's `overrides`, deep-merged
//! (mappings merge, anything else is replaced, later wins); then
//! `source.table` gets the entry's schema and table where it has none;
//! then `naming.sink_dataset` / `sink_table` / `process_name` fill a
//! missing `sink.table.schema`, `sink.table.name` and `name`; vars are file
//! vars < schema vars < table vars, plus the built-ins and `src_schema` /
//! `src_table`. The selector of a process is the entry's `id`, else
//! `<schema>.<table>`.
//!
//! Alongside each tree an [`Origins`] map records, for every process path,
//! the file path its value came from, so that a problem found in the
//! merged process is reported where the user wrote the value.

use super::render::{self, Origins, VarDef};
use super::schema::join;
use crate::error::Diagnostic;
use crate::yaml::{Key, Node, Value};
use std::collections::BTreeMap;

/// What the expansion needs from the caller (core reads nothing itself).
#[derive(Debug, Clone, Default)]
pub struct ExpandInput {
    /// The manifest's path as given (built-ins `manifest_path`, `_dir`, `_name`, `_stem`).
    pub manifest_path: String,
    /// The built-in `env_code` (the original reads `ENV_CODE`, default `dev`).
    pub env_code: String,
}

/// One process before it is rendered, checked and built.
pub(crate) struct RawProcess {
    pub selector: Option<String>,
    /// The process name when nothing in the tree names it.
    pub default_name: String,
    pub source_schema: Option<String>,
    pub source_table: Option<String>,
    pub tree: Node,
    pub origins: Origins,
    pub vars: BTreeMap<String, VarDef>,
}

fn map_entries(node: Option<&Node>) -> &[(Key, Node)] {
    match node.map(|n| &n.value) {
        Some(Value::Map(entries)) => entries,
        _ => &[],
    }
}

/// Drops every origin at or below `path`.
fn clear(origins: &mut Origins, path: &str) {
    let dotted = format!("{path}.");
    let indexed = format!("{path}[");
    origins.retain(|k, _| !(k == path || k.starts_with(&dotted) || k.starts_with(&indexed)));
}

/// Records `file` as the origin of `path` and of everything below it.
fn record(node: &Node, path: &str, file: &str, origins: &mut Origins) {
    origins.insert(path.to_string(), file.to_string());
    match &node.value {
        Value::Map(entries) => {
            for (k, v) in entries {
                record(v, &join(path, &k.name), &join(file, &k.name), origins);
            }
        }
        Value::Seq(items) => {
            for (i, it) in items.iter().enumerate() {
                record(it, &format!("{path}[{i}]"), &format!("{file}[{i}]"), origins);
            }
        }
        _ => {}
    }
}

/// The original's `deep_merge`: mapping into mapping recursively, anything
/// else replaced by the later layer. A merged mapping keeps the place of
/// the layer that introduced it (where a missing key is reported); each
/// value keeps the place of the layer it came from.
fn merge(base: &mut Node, over: &Node, path: &str, file: &str, origins: &mut Origins) {
    if let (Value::Map(bm), Value::Map(om)) = (&mut base.value, &over.value) {
        for (k, v) in om {
            let (cp, cf) = (join(path, &k.name), join(file, &k.name));
            match bm.iter_mut().find(|(bk, _)| bk.name == k.name) {
                Some((bk, bv)) => {
                    if !matches!((&bv.value, &v.value), (Value::Map(_), Value::Map(_))) {
                        *bk = k.clone();
                    }
                    merge(bv, v, &cp, &cf, origins);
                }
                None => {
                    clear(origins, &cp);
                    record(v, &cp, &cf, origins);
                    bm.push((k.clone(), v.clone()));
                }
            }
        }
        return;
    }
    *base = over.clone();
    clear(origins, path);
    record(over, path, file, origins);
}

/// Merges the keys of layer `over` (at `file`) into the process root.
fn merge_root(tree: &mut Node, over: Option<&Node>, file: &str, origins: &mut Origins, skip: &[&str]) {
    let Some(over) = over else { return };
    let Value::Map(entries) = &over.value else { return };
    for (k, v) in entries.iter().filter(|(k, _)| !skip.contains(&k.name.as_str())) {
        let Value::Map(root) = &mut tree.value else { return };
        let cf = join(file, &k.name);
        match root.iter_mut().find(|(rk, _)| rk.name == k.name) {
            Some((rk, rv)) => {
                if !matches!((&rv.value, &v.value), (Value::Map(_), Value::Map(_))) {
                    *rk = k.clone();
                }
                merge(rv, v, &k.name, &cf, origins);
            }
            None => {
                clear(origins, &k.name);
                record(v, &k.name, &cf, origins);
                root.push((k.clone(), v.clone()));
            }
        }
    }
}

/// Sets `key` of the mapping at `parent` when it has none (the original's
/// `setdefault`); false when `parent` is not a mapping.
fn set_default(parent: &mut Node, key: &str, value: Node, at: (u64, u64)) -> bool {
    let Value::Map(entries) = &mut parent.value else { return false };
    if !entries.iter().any(|(k, _)| k.name == key) {
        entries.push((Key { name: key.to_string(), line: at.0, column: at.1 }, value));
        return true;
    }
    false
}

fn child_mut<'n>(node: &'n mut Node, key: &str) -> Option<&'n mut Node> {
    match &mut node.value {
        Value::Map(entries) => entries.iter_mut().find(|(k, _)| k.name == key).map(|(_, v)| v),
        _ => None,
    }
}

/// A selector (a table `id`): letters, digits, `_`, `-` and `.`, as the
/// original's connection refs; selectors name state and output lines.
pub fn valid_selector(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The single form: the file is the one process.
pub(crate) fn single(root: &Node, input: &ExpandInput, diags: &mut Vec<Diagnostic>) -> RawProcess {
    let mut vars = render::builtins(&input.manifest_path, &input.env_code);
    render::add_vars(&mut vars, root.get("vars"), "vars", diags);
    let stem = std::path::Path::new(&input.manifest_path).file_stem().map(|s| s.to_string_lossy().into_owned());
    RawProcess {
        selector: None,
        default_name: stem.filter(|s| !s.is_empty()).unwrap_or_else(|| "manifest".into()),
        source_schema: None,
        source_table: None,
        tree: root.clone(),
        origins: Origins::new(),
        vars,
    }
}

/// Keys of the single form that a batch manifest keeps under `defaults`.
pub const MISPLACED_IN_BATCH: &[&str] = &["source", "sink", "state", "name", "description"];

/// The batch form: one process per table entry (the file's shape was checked).
pub(crate) fn batch(root: &Node, input: &ExpandInput, diags: &mut Vec<Diagnostic>) -> Vec<RawProcess> {
    let mut base_vars = render::builtins(&input.manifest_path, &input.env_code);
    render::add_vars(&mut base_vars, root.get("vars"), "vars", diags);
    let kind = map_entries(Some(root)).iter().find(|(k, _)| k.name == "kind").cloned();
    let has_runtime = root.get("runtime").is_some();
    let mut out = Vec::new();
    let mut seen: BTreeMap<String, (String, bool)> = BTreeMap::new();
    let schemas = map_entries(root.get("schemas"));
    if schemas.is_empty() {
        let at = root.get("schemas").unwrap_or(root);
        diags.push(
            Diagnostic::new("invalid_value", "schemas", "`schemas` lists no schema")
                .hint("add `schemas: {<schema>: {tables: [<table>, ...]}}`")
                .at(at.line, at.column),
        );
    }
    // The original renders the file's vars, then each schema's, before any
    // table: their problems are reported once, where they are written.
    check_layer(&base_vars, diags);
    for (schema_key, block) in schemas {
        let schema = schema_key.name.clone();
        let block_path = join("schemas", &schema);
        let mut schema_vars = base_vars.clone();
        render::add_vars(&mut schema_vars, block.get("vars"), &join(&block_path, "vars"), diags);
        check_layer(&schema_vars, diags);
        let tables = match block.get("tables").map(|n| &n.value) {
            Some(Value::Seq(items)) => items.as_slice(),
            _ => &[],
        };
        if tables.is_empty() {
            diags.push(
                Diagnostic::new("invalid_value", join(&block_path, "tables"), format!("schema `{schema}` lists no table"))
                    .hint("list its tables: `tables: [orders, customers]`")
                    .at(schema_key.line, schema_key.column),
            );
        }
        for (i, entry) in tables.iter().enumerate() {
            let entry_path = format!("{block_path}.tables[{i}]");
            let (table_node, table_path) = match &entry.value {
                Value::Str(_) => (entry, entry_path.clone()),
                _ => match entry.get("table") {
                    Some(t) => (t, join(&entry_path, "table")),
                    None => continue,
                },
            };
            let table = table_node.as_str().unwrap_or_default().to_string();
            if table.is_empty() {
                diags.push(
                    Diagnostic::new("invalid_value", &table_path, "the table name is empty")
                        .hint("name the source table")
                        .at(table_node.line, table_node.column),
                );
                continue;
            }
            let id = entry.get("id");
            if let Some(idn) = id
                && !idn.as_str().is_some_and(valid_selector)
            {
                diags.push(
                    Diagnostic::new(
                        "invalid_table_id",
                        join(&entry_path, "id"),
                        format!("table id `{}` is not a valid selector", idn.as_str().unwrap_or_default()),
                    )
                    .hint("use letters, digits, `_`, `-` and `.` (at most 128), starting with a letter, digit or `_`")
                    .at(idn.line, idn.column),
                );
                continue;
            }
            let selector = id.and_then(Node::as_str).map(str::to_string).unwrap_or_else(|| format!("{schema}.{table}"));
            let (at_path, at_node) = match id {
                Some(n) => (join(&entry_path, "id"), n),
                None => (table_path.clone(), table_node),
            };
            if let Some((first, explicit)) = seen.get(&selector) {
                let code = if id.is_some() || *explicit { "duplicate_table_id" } else { "duplicate_table" };
                diags.push(
                    Diagnostic::new(code, &at_path, format!("selector `{selector}` is already used by {first}"))
                        .hint("give one of the entries its own `id` (entries: `- {table: orders, id: orders_eu, overrides: ...}`)")
                        .at(at_node.line, at_node.column),
                );
                continue;
            }
            seen.insert(selector.clone(), (entry_path.clone(), id.is_some()));

            let mut origins = Origins::new();
            origins.insert(String::new(), entry_path.clone());
            let mut tree = Node { value: Value::Map(Vec::new()), line: entry.line, column: entry.column };
            if let (Some((k, v)), Value::Map(m)) = (&kind, &mut tree.value) {
                m.push((k.clone(), v.clone()));
                origins.insert("kind".into(), "kind".into());
            }
            // Our own extension: the file's schedule applies to every process.
            merge_root(
                &mut tree,
                Some(root),
                "",
                &mut origins,
                &["kind", "vars", "defaults", "schemas", "naming", "meta", "runtime", "convention", "conventions"],
            );
            let skip_runtime: &[&str] = if has_runtime { &["runtime"] } else { &[] };
            merge_root(&mut tree, root.get("defaults"), "defaults", &mut origins, skip_runtime);
            if let Some(rt) = root.get("runtime") {
                let wrapper = Node {
                    value: Value::Map(vec![(Key { name: "runtime".into(), line: rt.line, column: rt.column }, rt.clone())]),
                    line: rt.line,
                    column: rt.column,
                };
                if let Value::Map(m) = &mut tree.value {
                    m.retain(|(k, _)| k.name != "runtime");
                }
                clear(&mut origins, "runtime");
                merge_root(&mut tree, Some(&wrapper), "", &mut origins, &[]);
            }
            merge_root(&mut tree, block.get("defaults"), &join(&block_path, "defaults"), &mut origins, &[]);
            merge_root(&mut tree, entry.get("overrides"), &join(&entry_path, "overrides"), &mut origins, &[]);

            // source.table defaults to the entry's schema and table.
            if let Some(source) = child_mut(&mut tree, "source") {
                let at = (source.line, source.column);
                if set_default(source, "table", Node { value: Value::Map(Vec::new()), line: at.0, column: at.1 }, at) {
                    origins.insert("source.table".into(), entry_path.clone());
                }
                if let Some(t) = child_mut(source, "table") {
                    let text = |s: &str, n: &Node| Node { value: Value::Str(s.to_string()), line: n.line, column: n.column };
                    if set_default(
                        t,
                        "schema",
                        text(&schema, &Node { value: Value::Null, line: schema_key.line, column: schema_key.column }),
                        (schema_key.line, schema_key.column),
                    ) {
                        origins.insert("source.table.schema".into(), block_path.clone());
                    }
                    if set_default(t, "name", text(&table, table_node), (table_node.line, table_node.column)) {
                        origins.insert("source.table.name".into(), table_path.clone());
                    }
                }
            }
            apply_naming(&mut tree, &mut origins, [root.get("naming"), block.get("naming"), entry.get("naming")], &block_path, &entry_path);

            let mut vars = schema_vars.clone();
            render::add_vars(&mut vars, entry.get("vars"), &join(&entry_path, "vars"), diags);
            let builtin = |s: &str| VarDef { node: Node { value: Value::Str(s.to_string()), line: 0, column: 0 }, file: String::new() };
            vars.insert("src_schema".into(), builtin(&schema));
            vars.insert("src_table".into(), builtin(&table));
            out.push(RawProcess {
                selector: Some(selector.clone()),
                default_name: selector,
                source_schema: Some(schema.clone()),
                source_table: Some(table),
                tree,
                origins,
                vars,
            });
        }
    }
    out
}

/// Renders a layer's vars (with `src_schema` / `src_table` standing in,
/// as every table defines them) and reports their problems.
fn check_layer(vars: &BTreeMap<String, VarDef>, diags: &mut Vec<Diagnostic>) {
    let mut vars = vars.clone();
    for name in ["src_schema", "src_table"] {
        vars.insert(name.into(), VarDef { node: Node { value: Value::Str(String::new()), line: 0, column: 0 }, file: String::new() });
    }
    let mut scope = render::ProcessScope::new(vars);
    scope.check_vars();
    for d in scope.diags {
        if !diags.contains(&d) {
            diags.push(d);
        }
    }
}

/// The original's naming templates (file < schema < table): they fill a
/// missing `sink.table.schema`, `sink.table.name` and `name`; the
/// templates render with the process like any other string.
fn apply_naming(tree: &mut Node, origins: &mut Origins, layers: [Option<&Node>; 3], block_path: &str, entry_path: &str) {
    let files = ["naming".to_string(), join(block_path, "naming"), join(entry_path, "naming")];
    let mut naming: BTreeMap<&str, (Node, String)> = BTreeMap::new();
    for (layer, file) in layers.iter().zip(&files) {
        for (k, v) in map_entries(*layer) {
            if let Some(key) = ["sink_dataset", "sink_table", "process_name"].into_iter().find(|n| *n == k.name) {
                naming.insert(key, (v.clone(), join(file, key)));
            }
        }
    }
    if let Some((v, file)) = naming.get("process_name")
        && set_default(tree, "name", v.clone(), (v.line, v.column))
    {
        origins.insert("name".into(), file.clone());
    }
    let targets = [("sink_dataset", "schema"), ("sink_table", "name")];
    if !targets.iter().any(|(n, _)| naming.contains_key(n)) {
        return;
    }
    let Some(sink) = child_mut(tree, "sink") else { return };
    let at = (sink.line, sink.column);
    set_default(sink, "table", Node { value: Value::Map(Vec::new()), line: at.0, column: at.1 }, at);
    let Some(table) = child_mut(sink, "table") else { return };
    for (template, key) in targets {
        if let Some((v, file)) = naming.get(template)
            && set_default(table, key, v.clone(), (v.line, v.column))
        {
            origins.insert(format!("sink.table.{key}"), file.clone());
        }
    }
}
