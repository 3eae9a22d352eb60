//! One process's tree made concrete: vars resolved (with cycles and
//! reserved names refused), every `{{ }}` / `${}` rendered, and the
//! original's flat `connection_type` / `connection_id` folded into the
//! nested `connection:` block the typed model reads.
//!
//! Diagnostics carry the process path (`sink.table.name`) and the position
//! of the node in the user's file; `expand.rs` translates the path to the
//! place it was written (`defaults.sink.table.name`) through [`Origins`].
//! Vars are checked where they are defined, so their problems carry that
//! file path directly.

use super::schema::join;
use super::template::{self, Scope, TemplateCode, TemplateError};
use crate::error::{Diagnostic, DiagnosticKind};
use crate::yaml::{Key, Node, Value};
use std::collections::BTreeMap;

/// Process path -> the file path it was written at (longest prefix wins).
pub type Origins = BTreeMap<String, String>;

/// The file path of process path `path`: the origin of its longest
/// recorded prefix, plus the rest. Unchanged when nothing is recorded.
pub fn translate(origins: &Origins, path: &str) -> String {
    let mut prefix = path;
    loop {
        if let Some(file) = origins.get(prefix) {
            let rest = &path[prefix.len()..];
            let rest = rest.strip_prefix('.').unwrap_or(rest);
            return if rest.is_empty() {
                file.clone()
            } else if rest.starts_with('[') {
                format!("{file}{rest}")
            } else {
                join(file, rest)
            };
        }
        if prefix.is_empty() {
            return path.to_string();
        }
        prefix = match prefix.rfind(['.', '[']) {
            Some(i) => &prefix[..i],
            None => "",
        };
    }
}

/// Vars the original defines itself; a manifest may not redefine them.
pub const RESERVED_VARS: &[&str] =
    &["env_code", "manifest_path", "manifest_dir", "manifest_name", "manifest_stem", "src_schema", "src_table"];

/// A var as written: its value and the file path of its definition.
#[derive(Debug, Clone)]
pub struct VarDef {
    pub node: Node,
    pub file: String,
}

/// The vars of one process, rendered lazily with cycle detection.
pub struct ProcessScope<'a> {
    vars: BTreeMap<String, VarDef>,
    /// The process tree as merged (values not yet rendered), for
    /// `{{ sink.strategy.mode }}`; None while a var renders (vars see vars only).
    config: Option<&'a Node>,
    rendered: BTreeMap<String, Option<Node>>,
    stack: Vec<String>,
    pub diags: Vec<Diagnostic>,
}

impl<'a> ProcessScope<'a> {
    pub fn new(vars: BTreeMap<String, VarDef>) -> Self {
        ProcessScope { vars, config: None, rendered: BTreeMap::new(), stack: Vec::new(), diags: Vec::new() }
    }

    /// Renders every var, reporting problems at their definitions.
    pub fn check_vars(&mut self) {
        let names: Vec<String> = self.vars.iter().filter(|(_, d)| !d.file.is_empty()).map(|(k, _)| k.clone()).collect();
        for name in names {
            let _ = self.var(&name);
        }
    }

    fn var(&mut self, name: &str) -> Result<Option<Node>, TemplateError> {
        if let Some(done) = self.rendered.get(name) {
            return done.clone().map(Some).ok_or_else(TemplateError::reported);
        }
        let Some(def) = self.vars.get(name).cloned() else { return Ok(None) };
        if let Some(at) = self.stack.iter().position(|n| n == name) {
            let mut cycle: Vec<String> = self.stack[at..].to_vec();
            let first = (0..cycle.len()).min_by_key(|i| &cycle[*i]).unwrap_or(0);
            cycle.rotate_left(first);
            cycle.push(cycle[0].clone());
            let chain = cycle.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(" -> ");
            return Err(TemplateError::new(
                TemplateCode::VarCycle,
                format!("vars {chain} refer to each other"),
                "break the cycle: one of these vars must be written out",
            ));
        }
        self.stack.push(name.to_string());
        let config = self.config.take();
        let mut node = def.node.clone();
        let ok = render_tree(&mut node, &def.file, self, &mut |scope: &mut ProcessScope, d: Diagnostic| scope.diags.push(d));
        self.config = config;
        self.stack.pop();
        let result = ok.then_some(node);
        self.rendered.insert(name.to_string(), result.clone());
        result.map(Some).ok_or_else(TemplateError::reported)
    }

    /// Renders the strings of a process tree (not `vars`, not `kind`);
    /// problems are reported with process paths.
    pub fn render_process(&mut self, tree: &mut Node) -> Vec<Diagnostic> {
        let config = tree.clone();
        // Safety of the borrow: the scope reads the unrendered copy only.
        let mut out = Vec::new();
        {
            let mut scoped = ProcessScope {
                vars: std::mem::take(&mut self.vars),
                config: Some(&config),
                rendered: std::mem::take(&mut self.rendered),
                stack: Vec::new(),
                diags: Vec::new(),
            };
            if let Value::Map(entries) = &mut tree.value {
                for (k, v) in entries.iter_mut().filter(|(k, _)| k.name != "vars" && k.name != "kind") {
                    let path = k.name.clone();
                    render_tree(v, &path, &mut scoped, &mut |_: &mut ProcessScope, d: Diagnostic| out.push(d));
                }
            }
            self.vars = std::mem::take(&mut scoped.vars);
            self.rendered = std::mem::take(&mut scoped.rendered);
            self.diags.append(&mut scoped.diags);
        }
        out
    }
}

impl Scope for ProcessScope<'_> {
    fn lookup(&mut self, path: &[String]) -> Result<Option<Node>, TemplateError> {
        let head = &path[0];
        let found = if self.vars.contains_key(head) {
            self.var(head)?
        } else if let Some(config) = self.config {
            let key = format!("config:{}", path.join("."));
            if self.stack.contains(&key) {
                return Err(TemplateError::new(
                    TemplateCode::VarCycle,
                    format!("`{{{{ {} }}}}` refers to itself", path.join(".")),
                    "write the value out",
                ));
            }
            let Some(node) = walk(config, path) else { return Ok(None) };
            self.stack.push(key);
            let mut node = node.clone();
            let mut failed = None;
            let ok = render_tree(&mut node, "", self, &mut |_: &mut ProcessScope, d: Diagnostic| failed = Some(d));
            self.stack.pop();
            if !ok {
                let Some(d) = failed else { return Err(TemplateError::reported()) };
                let code = match d.kind {
                    DiagnosticKind::Template(code) => code,
                    _ => TemplateCode::UnknownVar,
                };
                return Err(TemplateError::new(code, d.message, d.hint.unwrap_or_default()));
            }
            return Ok(Some(node));
        } else {
            None
        };
        Ok(found.and_then(|n| walk(&n, &path[1..]).cloned()))
    }

    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.vars.keys().cloned().collect();
        if let Some(Value::Map(entries)) = self.config.map(|c| &c.value) {
            names.extend(entries.iter().map(|(k, _)| k.name.clone()));
        }
        names
    }
}

/// The node at `path` below `node` (mapping keys, list indexes).
fn walk<'n>(node: &'n Node, path: &[String]) -> Option<&'n Node> {
    let mut n = node;
    for seg in path {
        n = match &n.value {
            Value::Map(_) => n.get(seg)?,
            Value::Seq(items) => items.get(seg.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(n)
}

/// Renders every string below `node` in place; false if any failed
/// (each failure is handed to `report` with its path and position).
fn render_tree<F: FnMut(&mut ProcessScope, Diagnostic)>(node: &mut Node, path: &str, scope: &mut ProcessScope, report: &mut F) -> bool {
    match &mut node.value {
        Value::Str(_) => match template::render(node, scope) {
            Ok(Some(new)) => {
                *node = new;
                true
            }
            Ok(None) => true,
            Err(e) if e.reported => false,
            Err(e) => {
                let d = Diagnostic::new(e.code.as_str(), path, e.message)
                    .hint(e.hint)
                    .kind(DiagnosticKind::Template(e.code))
                    .at(node.line, node.column);
                report(scope, d);
                false
            }
        },
        Value::Seq(items) => {
            let mut ok = true;
            for (i, it) in items.iter_mut().enumerate() {
                ok &= render_tree(it, &format!("{path}[{i}]"), scope, report);
            }
            ok
        }
        Value::Map(entries) => {
            let mut ok = true;
            for (k, v) in entries.iter_mut() {
                ok &= render_tree(v, &join(path, &k.name), scope, report);
            }
            ok
        }
        _ => true,
    }
}

/// Built-in vars of the original: the environment code and the manifest's
/// path, name and stem (what the caller passes in; nothing is read here).
pub fn builtins(manifest_path: &str, env_code: &str) -> BTreeMap<String, VarDef> {
    let p = std::path::Path::new(manifest_path);
    let text = |s: &str| VarDef { node: Node { value: Value::Str(s.to_string()), line: 0, column: 0 }, file: String::new() };
    let dir = p.parent().map(|d| d.display().to_string()).filter(|d| !d.is_empty()).unwrap_or_else(|| ".".into());
    [
        ("env_code", env_code.to_string()),
        ("manifest_path", manifest_path.to_string()),
        ("manifest_dir", dir),
        ("manifest_name", p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()),
        ("manifest_stem", p.file_stem().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), text(&v)))
    .collect()
}

/// Adds the vars of one layer (`vars:` at `file`), later layers winning;
/// a reserved name is refused where it is written.
pub fn add_vars(into: &mut BTreeMap<String, VarDef>, layer: Option<&Node>, file: &str, diags: &mut Vec<Diagnostic>) {
    let Some(Value::Map(entries)) = layer.map(|n| &n.value) else { return };
    for (k, v) in entries {
        if RESERVED_VARS.contains(&k.name.as_str()) {
            diags.push(
                Diagnostic::new("reserved_var", join(file, &k.name), format!("`{}` is a built-in var and cannot be redefined", k.name))
                    .hint("choose another name; built-ins: env_code, manifest_path, manifest_dir, manifest_name, manifest_stem, src_schema, src_table")
                    .at(k.line, k.column),
            );
            continue;
        }
        into.insert(k.name.clone(), VarDef { node: v.clone(), file: join(file, &k.name) });
    }
}

fn entry<'n>(entries: &'n [(Key, Node)], name: &str) -> Option<&'n (Key, Node)> {
    entries.iter().find(|(k, _)| k.name == name)
}

/// Folds the flat `connection_type` / `connection_id` of `source`, `sink`
/// and `state` into `connection:` (recording where they came from); with
/// `params`, `connection_id` is the original's JSON object of parameters.
/// A `state` block with a flat `connection_type` and no `connection_id`
/// uses the sink's connection, as the original does: `reuse: sink`.
pub fn fold_connections(tree: &mut Node, origins: &mut Origins, diags: &mut Vec<Diagnostic>) {
    let Value::Map(sides) = &mut tree.value else { return };
    for (side_key, side) in sides.iter_mut().filter(|(k, _)| matches!(k.name.as_str(), "source" | "sink" | "state")) {
        let side_name = side_key.name.clone();
        let state = side_name == "state";
        let (line, column) = (side.line, side.column);
        let Value::Map(entries) = &mut side.value else { continue };
        let flat: Vec<(Key, Node)> =
            entries.iter().filter(|(k, _)| k.name == "connection_type" || k.name == "connection_id").cloned().collect();
        let nested = entry(entries, "connection").or(if state { entry(entries, "reuse") } else { None });
        if flat.is_empty() {
            if nested.is_none() && !state {
                diags.push(
                    Diagnostic::new(
                        "missing_key",
                        format!("{side_name}.connection_id"),
                        format!("`{side_name}` needs `connection_id` (or a `connection` block)"),
                    )
                    .hint("add `connection_id: MY_DB` and export DPONE_CONN_MY_DB=<url> (or DPONE_CONN_MY_DB_HOST, _PORT, _DATABASE, _USERNAME, _PASSWORD)")
                    .at(line, column),
                );
            }
            continue;
        }
        if let Some((nk, _)) = nested {
            let (k, _) = &flat[0];
            diags.push(
                Diagnostic::new(
                    "connection_conflict",
                    format!("{side_name}.{}", k.name),
                    format!("`{side_name}` has both `{}` and a `{}` block", k.name, nk.name),
                )
                .hint(format!("keep one: the flat connection_type / connection_id, or the `{}:` block", nk.name))
                .at(k.line, k.column),
            );
            continue;
        }
        entries.retain(|(k, _)| k.name != "connection_type" && k.name != "connection_id");
        let first = flat[0].0.clone();
        if state && !flat.iter().any(|(k, _)| k.name == "connection_id") {
            origins.insert("state.reuse".into(), translate(origins, "state.connection_type"));
            entries.push((
                Key { name: "reuse".into(), line: first.line, column: first.column },
                Node { value: Value::Str("sink".into()), line: first.line, column: first.column },
            ));
            continue;
        }
        let conn = nest_connection(&side_name, &flat, origins, diags);
        origins.insert(format!("{side_name}.connection"), translate(origins, &side_name));
        entries.push((
            Key { name: "connection".into(), line: first.line, column: first.column },
            Node { value: Value::Map(conn), line: first.line, column: first.column },
        ));
    }
}

/// The nested `connection:` entries of the flat `connection_type` /
/// `connection_id` of `side_name` (env by default).
fn nest_connection(side_name: &str, flat: &[(Key, Node)], origins: &mut Origins, diags: &mut Vec<Diagnostic>) -> Vec<(Key, Node)> {
    let flat_file = |origins: &Origins, name: &str| translate(origins, &format!("{side_name}.{name}"));
    let mut conn: Vec<(Key, Node)> = Vec::new();
    let kind = flat.iter().find(|(k, _)| k.name == "connection_type");
    let first = &flat[0].0;
    match kind {
        Some((k, v)) => {
            let file = flat_file(origins, "connection_type");
            origins.insert(format!("{side_name}.connection.connection_type"), file);
            conn.push((k.clone(), v.clone()));
        }
        None => conn.push((
            Key { name: "connection_type".into(), line: first.line, column: first.column },
            Node { value: Value::Str("env".into()), line: first.line, column: first.column },
        )),
    }
    if let Some((k, v)) = flat.iter().find(|(k, _)| k.name == "connection_id") {
        let id_file = flat_file(origins, "connection_id");
        if kind.and_then(|(_, v)| v.as_str()) == Some("params") {
            origins.insert(format!("{side_name}.connection.params"), id_file);
            match params_of(v) {
                Ok(params) => conn.push((Key { name: "params".into(), line: k.line, column: k.column }, params)),
                Err(message) => diags.push(
                    Diagnostic::new("invalid_connection", format!("{side_name}.connection_id"), message)
                        .hint(r#"with connection_type params, write connection_id as a JSON object, e.g. '{"host": "db", "port": 5432, "username": "u", "password": "p", "database": "d"}'"#)
                        .at(v.line, v.column),
                ),
            }
        } else {
            origins.insert(format!("{side_name}.connection.connection_id"), id_file);
            conn.push((k.clone(), v.clone()));
        }
    }
    conn
}

/// The original's scalar `sink.strategy.unique_key` (`order_id`, or
/// columns separated by commas, `tenant_id, id`) written as the list the
/// typed model reads; a list stays as written.
pub fn normalize_unique_key(tree: &mut Node) {
    let Some(node) = tree.get_mut("sink").and_then(|s| s.get_mut("strategy")).and_then(|s| s.get_mut("unique_key")) else { return };
    let Value::Str(text) = &node.value else { return };
    let (line, column) = (node.line, node.column);
    let items =
        text.split(',').map(str::trim).filter(|c| !c.is_empty()).map(|c| Node { value: Value::Str(c.to_string()), line, column }).collect();
    node.value = Value::Seq(items);
}

/// The original's `params` connection: connection_id is a JSON object
/// (`username` is this runtime's `user`).
fn params_of(id: &Node) -> Result<Node, String> {
    let text = id.as_str().ok_or("connection_id is not a string")?;
    let json: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("connection_id is not a JSON object of connection parameters ({e})"))?;
    let serde_json::Value::Object(map) = json else { return Err("connection_id is not a JSON object of connection parameters".into()) };
    let at = |value: Value| Node { value, line: id.line, column: id.column };
    let entries = map
        .into_iter()
        .map(|(k, v)| {
            let name = if k == "username" { "user".to_string() } else { k };
            let value = match v {
                serde_json::Value::String(s) => Value::Str(s),
                serde_json::Value::Bool(b) => Value::Bool(b),
                serde_json::Value::Number(n) => n.as_i64().map(|i| Value::Int(i.into())).unwrap_or(Value::Str(n.to_string())),
                serde_json::Value::Null => Value::Null,
                other => Value::Str(other.to_string()),
            };
            (Key { name, line: id.line, column: id.column }, at(value))
        })
        .collect();
    Ok(at(Value::Map(entries)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translate_uses_the_longest_recorded_prefix() {
        let mut o = Origins::new();
        o.insert("".into(), "schemas.public.tables[0]".into());
        o.insert("sink".into(), "defaults.sink".into());
        o.insert("sink.strategy".into(), "schemas.public.tables[0].overrides.sink.strategy".into());
        assert_eq!(translate(&o, "sink.table.name"), "defaults.sink.table.name");
        assert_eq!(translate(&o, "sink.strategy.window.lookback"), "schemas.public.tables[0].overrides.sink.strategy.window.lookback");
        assert_eq!(translate(&o, "source"), "schemas.public.tables[0].source");
        assert_eq!(translate(&o, ""), "schemas.public.tables[0]");
        assert_eq!(translate(&Origins::new(), "sink.table"), "sink.table");
    }
}
