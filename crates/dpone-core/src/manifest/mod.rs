//! Manifest loading: YAML text -> positioned tree -> shape check of the
//! file as written -> processes (one for today's single form, one per
//! table for the original's batch form, `expand.rs`) -> per process: vars
//! and templates rendered (`render.rs`), the shape checked again, the
//! typed [`Manifest`] built (`model`).
//!
//! Every problem is reported at once, each with a stable code, the path
//! where the user wrote the value (a value that came from `defaults` is
//! reported at `defaults...`), the line and column, and a hint. Loading
//! performs no I/O: the caller reads the file and passes the manifest's
//! path and `ENV_CODE` in ([`ExpandInput`]); connections are resolved
//! later.

pub mod convention;
mod expand;
pub mod model;
mod render;
pub mod schema;
pub mod select;
mod shapes;
pub mod template;

pub use convention::{PresetFile, Presets};
pub use expand::{ExpandInput, valid_selector};
pub use model::{
    ConnectionSpec, Manifest, NativeChunks, ORIGINAL_SYSTEMS, SinkSpec, SourceSpec, StateConnection, StateSpec, Strategy, System, TableRef,
    TransportMode, WindowSpec, Wire,
};
pub use render::translate;

use crate::error::{Diagnostic, DiagnosticKind, Diagnostics};
use crate::yaml::{self, Node, Value};
use render::Origins;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

const NATIVE_CHUNKS_PATH: &str = "source.options.native_transfer.execution.native_chunks.";

/// One process of a manifest: what `dpone run` executes with its own lease,
/// journal and evidence.
#[derive(Debug, Clone)]
pub struct Process {
    /// `<schema>.<table>` or the entry's `id`; None in the single form.
    pub selector: Option<String>,
    /// `name` of the process (output `process`); default: the selector, or
    /// the manifest file's stem.
    pub name: String,
    pub description: Option<String>,
    /// The batch entry's schema and table (None in the single form).
    pub source_schema: Option<String>,
    pub source_table: Option<String>,
    pub manifest: Manifest,
    /// The expanded process as `dpone manifest render` shows it.
    pub tree: Node,
}

impl Process {
    /// How output and selection name this process.
    pub fn label(&self) -> &str {
        self.selector.as_deref().unwrap_or(&self.name)
    }
}

/// A loaded manifest: its processes, in file order.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// Written in the original's batch form (`defaults`, `schemas`).
    pub batch: bool,
    pub processes: Vec<Process>,
}

impl Loaded {
    /// One identity for the whole file: the process's own for a single
    /// process, else a digest of every process's selector and fingerprint.
    pub fn fingerprint(&self) -> String {
        if let [p] = self.processes.as_slice() {
            return p.manifest.fingerprint.clone();
        }
        let mut h = Sha256::new();
        for p in &self.processes {
            h.update(p.label().as_bytes());
            h.update([0]);
            h.update(p.manifest.fingerprint.as_bytes());
            h.update([0]);
        }
        format!("{:x}", h.finalize())
    }
}

/// Parses and validates a manifest of exactly one process.
pub fn load(text: &str) -> Result<Manifest, Diagnostics> {
    let mut loaded = load_processes(text, &ExpandInput::default())?;
    if loaded.processes.len() == 1 {
        return Ok(loaded.processes.remove(0).manifest);
    }
    let names: Vec<&str> = loaded.processes.iter().map(Process::label).collect();
    Err(Diagnostic::new("selector_required", "--selector", format!("the manifest describes {} processes", names.len()))
        .hint(format!("select one with --selector: {}", names.join(", ")))
        .into())
}

/// Parses and validates a manifest into its processes (a manifest that
/// names preset files needs [`load_processes_with`]).
pub fn load_processes(text: &str, input: &ExpandInput) -> Result<Loaded, Diagnostics> {
    load_processes_with(text, input, &Presets::new())
}

/// Parses and validates a manifest into its processes, with the preset
/// files its conventions name ([`convention::preset_references`]) as the
/// caller read them.
pub fn load_processes_with(text: &str, input: &ExpandInput, presets: &Presets) -> Result<Loaded, Diagnostics> {
    let root = yaml::parse(text)?;
    if !matches!(root.value, Value::Map(_)) {
        return Err(Diagnostic::new("invalid_type", "", format!("a manifest is a mapping, found {}", root.value.kind()))
            .hint("start with `kind: dpone.batch.v1`")
            .at(root.line, root.column)
            .into());
    }
    let mut diags = Vec::new();
    match convention::apply(&root, presets, &input.manifest_path, &mut diags) {
        _ if !diags.is_empty() => Err(sorted(diags)),
        Some(applied) => {
            let mut loaded = load_root(applied.root.clone(), input).map_err(|ds| sorted(applied.relabel(ds).0))?;
            // Problems found later (plan, run) are reported where the value came from too.
            for p in &mut loaded.processes {
                let m = &mut p.manifest;
                let from_conventions: Vec<(String, String)> = m
                    .positions
                    .keys()
                    .filter_map(|path| {
                        let file = render::translate(&m.origins, path);
                        let shown = render::translate(&applied.origins, &file);
                        (shown != file).then(|| (path.clone(), shown))
                    })
                    .collect();
                m.origins.extend(from_conventions);
            }
            Ok(loaded)
        }
        None => load_root(root, input),
    }
}

/// The processes of a manifest (its conventions merged in).
fn load_root(root: Node, input: &ExpandInput) -> Result<Loaded, Diagnostics> {
    let batch = root.get("schemas").is_some() || root.get("defaults").is_some();
    let mut diags = Vec::new();
    if batch {
        if let Value::Map(entries) = &root.value {
            for (k, _) in entries.iter().filter(|(k, _)| expand::MISPLACED_IN_BATCH.contains(&k.name.as_str())) {
                diags.push(
                    Diagnostic::new("misplaced_key", &k.name, format!("`{}` at the top of a batch manifest", k.name))
                        .hint(format!(
                            "a batch manifest (with `defaults` / `schemas`) keeps `{0}` under `defaults:` (or a table's `overrides:`)",
                            k.name
                        ))
                        .at(k.line, k.column),
                );
            }
        }
        let misplaced = diags.len();
        schema::check_deferred(&root, schema::batch_shape(), "", &mut diags);
        if misplaced > 0 {
            diags.retain(|d| {
                !(matches!(d.kind, DiagnosticKind::UnknownKey { .. }) && expand::MISPLACED_IN_BATCH.contains(&d.path.as_str()))
            });
        }
    } else {
        schema::check_deferred(&root, schema::manifest_shape(), "", &mut diags);
        suggest_batch_keys(&mut diags);
    }
    if !diags.is_empty() {
        // A route that does not exist is said first, whatever else is wrong.
        let endpoints = if batch { root.get("defaults") } else { Some(&root) };
        diags.extend(route_refusal(endpoints, if batch { "defaults." } else { "" }));
        return Err(sorted(limit_codes(diags)));
    }
    let raws = if batch { expand::batch(&root, input, &mut diags) } else { vec![expand::single(&root, input, &mut diags)] };
    if !diags.is_empty() {
        return Err(sorted(diags));
    }
    let mut tagged: Vec<(String, Diagnostic)> = Vec::new();
    let mut processes = Vec::new();
    for raw in raws {
        let label = raw.selector.clone().unwrap_or_default();
        match build_process(raw, batch) {
            Ok(p) => processes.push(p),
            Err(ds) => tagged.extend(ds.into_iter().map(|d| (label.clone(), d))),
        }
    }
    if tagged.is_empty() {
        tagged.extend(across_processes(&processes));
    }
    if !tagged.is_empty() {
        return Err(merge_tagged(tagged, batch));
    }
    Ok(Loaded { batch, processes })
}

/// A top-level key of the single form that is unknown there but close to
/// a key of the batch form (`defualts`, `shemas`) is a typo of that key:
/// suggest it rather than listing the single form's keys.
fn suggest_batch_keys(diags: &mut [Diagnostic]) {
    const BATCH_ONLY: &[&str] = &["defaults", "schemas", "naming"];
    for d in diags.iter_mut().filter(|d| d.kind == DiagnosticKind::UnknownKey { suggested: false } && !d.path.contains(['.', '['])) {
        if let Some(key) = crate::error::did_you_mean(&d.path, BATCH_ONLY.iter().copied()) {
            d.hint = Some(format!(
                "did you mean `{key}`? (the batch form: `defaults` holds the settings of every table, `schemas` lists the tables)"
            ));
        }
    }
}

/// Limits report under their own code family (SPEC §1: `invalid_limit:<field>`).
fn limit_codes(mut diags: Vec<Diagnostic>) -> Vec<Diagnostic> {
    for d in &mut diags {
        if let Some(i) = d.path.find(NATIVE_CHUNKS_PATH)
            && (i == 0 || d.path[..i].ends_with('.'))
        {
            d.code = format!("invalid_limit:{}", &d.path[i + NATIVE_CHUNKS_PATH.len()..]);
            d.kind = DiagnosticKind::Other;
        }
    }
    diags
}

/// Gives `d` the position of its process path (or of the nearest enclosing
/// one) and then the file path it was written at.
pub(crate) fn place(d: &mut Diagnostic, positions: &BTreeMap<String, (u64, u64)>, origins: &Origins) {
    if d.line.is_none() {
        let mut path = d.path.as_str();
        loop {
            if let Some((line, column)) = positions.get(path) {
                d.line = Some(*line);
                d.column = Some(*column);
                break;
            }
            match path.rfind(['.', '[']) {
                Some(i) => path = &path[..i],
                None if !path.is_empty() => path = "",
                None => break,
            }
        }
    }
    if !origins.is_empty() && !d.path.starts_with('-') {
        d.path = render::translate(origins, &d.path);
    }
}

fn positions_of(tree: &Node) -> BTreeMap<String, (u64, u64)> {
    let mut positions = BTreeMap::new();
    positions.insert(String::new(), (tree.line, tree.column));
    collect_positions(tree, "", &mut positions);
    positions
}

/// Renders, checks and builds one process; its problems come back with
/// file paths and positions.
fn build_process(raw: expand::RawProcess, batch: bool) -> Result<Process, Vec<Diagnostic>> {
    let expand::RawProcess { selector, default_name, source_schema, source_table, mut tree, mut origins, vars } = raw;
    let mut proc_diags = Vec::new();
    if batch {
        let missing: Vec<Diagnostic> = ["source", "sink"]
            .into_iter()
            .filter(|side| tree.get(side).is_none())
            .map(|side| {
                Diagnostic::new("missing_key", format!("defaults.{side}"), format!("no `{side}` for this table"))
                    .hint(format!("write `{side}` under `defaults` (or the schema's `defaults`, or the table's `overrides`)"))
                    .at(tree.line, tree.column)
            })
            .collect();
        if !missing.is_empty() {
            return Err(missing);
        }
    }
    let mut scope = render::ProcessScope::new(vars);
    scope.check_vars();
    proc_diags.extend(scope.render_process(&mut tree));
    let mut file_diags = std::mem::take(&mut scope.diags);
    let route = route_refusal(Some(&tree), "");
    if proc_diags.is_empty() && file_diags.is_empty() {
        render::fold_connections(&mut tree, &mut origins, &mut proc_diags);
        render::normalize_unique_key(&mut tree);
    }
    if proc_diags.is_empty() && file_diags.is_empty() {
        schema::check(&tree, schema::manifest_shape(), "", &mut proc_diags);
        proc_diags = limit_codes(proc_diags);
    }
    let mut manifest = None;
    if proc_diags.is_empty() && file_diags.is_empty() {
        let fingerprint = fingerprint(&tree);
        if let Some(mut m) = model::build(&tree, &mut proc_diags, fingerprint)
            && proc_diags.is_empty()
        {
            m.positions = positions_of(&tree);
            m.origins = origins.clone();
            match crate::limits::resolve(&m) {
                Ok(_) => manifest = Some(m),
                Err(errors) => proc_diags.extend(errors),
            }
        }
    }
    let positions = positions_of(&tree);
    for mut d in route.into_iter().chain(proc_diags) {
        place(&mut d, &positions, &origins);
        file_diags.push(d);
    }
    match manifest {
        Some(manifest) if file_diags.is_empty() => {
            let text = |key: &str| tree.get(key).and_then(Node::as_str).map(str::to_string);
            Ok(Process {
                name: text("name").filter(|n| !n.is_empty()).unwrap_or(default_name),
                description: text("description"),
                selector,
                source_schema,
                source_table,
                manifest,
                tree,
            })
        }
        _ => Err(file_diags),
    }
}

/// Problems between processes: two with one name, two writing one table.
fn across_processes(processes: &[Process]) -> Vec<(String, Diagnostic)> {
    let mut out = Vec::new();
    for (j, b) in processes.iter().enumerate() {
        let at = |key: &str| {
            let mut d = Diagnostic::new("", key, "");
            b.manifest.locate(&mut d);
            d
        };
        if let Some(a) = processes[..j].iter().find(|a| a.name == b.name) {
            let place = at("name");
            out.push((
                b.label().to_string(),
                Diagnostic {
                    code: "duplicate_process_name".into(),
                    message: format!("process name `{}` is used by `{}` and `{}`", b.name, a.label(), b.label()),
                    hint: Some("give each table its own name: a template such as `name: \"{{ src_schema }}_{{ src_table }}\"` in defaults, or overrides.name".into()),
                    ..place
                },
            ));
        }
        let (x, y) = (&b.manifest.sink, |a: &Process| a.manifest.sink.clone());
        if let Some(a) = processes[..j].iter().find(|a| {
            let s = y(a);
            s.system == x.system && s.connection == x.connection && s.table == x.table
        }) {
            let place = at("sink.table");
            out.push((
                b.label().to_string(),
                Diagnostic {
                    code: "duplicate_target".into(),
                    message: format!("`{}` and `{}` both write {}", a.label(), b.label(), x.table),
                    hint: Some("each process must write its own table: two runs on one table would replace each other's rows".into()),
                    ..place
                },
            ));
        }
    }
    out
}

/// One diagnostic per problem: a problem every affected process shares
/// (a bad value in `defaults`) is reported once, naming the processes.
fn merge_tagged(tagged: Vec<(String, Diagnostic)>, batch: bool) -> Diagnostics {
    let mut groups: Vec<(Diagnostic, Vec<String>)> = Vec::new();
    for (label, d) in tagged {
        match groups.iter_mut().find(|(g, _)| *g == d) {
            Some((_, labels)) if !labels.contains(&label) => labels.push(label),
            Some(_) => {}
            None => groups.push((d, vec![label])),
        }
    }
    let out = groups
        .into_iter()
        .map(|(mut d, labels)| {
            if batch && !labels.iter().all(String::is_empty) {
                let shown: Vec<String> = labels.iter().take(5).map(|l| format!("`{l}`")).collect();
                let more = if labels.len() > 5 { ", ..." } else { "" };
                d.message = match labels.len() {
                    1 => format!("{} (in process {})", d.message, shown[0]),
                    n => format!("{} (in {n} processes: {}{more})", d.message, shown.join(", ")),
                };
            }
            d
        })
        .collect();
    sorted(out)
}

fn collect_positions(node: &Node, path: &str, out: &mut BTreeMap<String, (u64, u64)>) {
    match &node.value {
        Value::Map(entries) => {
            for (k, v) in entries {
                let p = schema::join(path, &k.name);
                out.insert(p.clone(), (k.line, k.column));
                collect_positions(v, &p, out);
            }
        }
        Value::Seq(items) => {
            for (i, it) in items.iter().enumerate() {
                let p = format!("{path}[{i}]");
                out.insert(p.clone(), (it.line, it.column));
                collect_positions(it, &p, out);
            }
        }
        _ => {}
    }
}

/// `unsupported_route` of the `source.type` and `sink.type` written under
/// `endpoints` (known names, no templates), at `<prefix>sink.type`, by the
/// installed adapter registry ([`crate::adapter::install`]).
fn route_refusal(endpoints: Option<&Node>, prefix: &str) -> Option<Diagnostic> {
    let side = |name: &str| endpoints?.get(name)?.get("type");
    let (source, sink) = (side("source")?, side("sink")?);
    let registry = crate::adapter::installed()?;
    let d = registry.route_refusal(System::parse(source.as_str()?)?, System::parse(sink.as_str()?)?)?;
    Some(Diagnostic { path: format!("{prefix}{}", d.path), ..d }.at(sink.line, sink.column))
}

/// Diagnostics in file order (line, then column; positionless last),
/// without duplicates; a route that does not exist comes first.
pub fn sorted(mut diags: Vec<Diagnostic>) -> Diagnostics {
    diags.sort_by_key(|d| (d.kind != DiagnosticKind::UnsupportedRoute, d.line.unwrap_or(u64::MAX), d.column.unwrap_or(0)));
    diags.dedup();
    Diagnostics(diags)
}

/// Identity of what the manifest asks for: the normalized process without
/// `vars` (already substituted), connection blocks (credentials),
/// `schedule` (when, not what) and what only names or describes it.
fn fingerprint(root: &Node) -> String {
    let mut json = root.to_json();
    if let Some(obj) = json.as_object_mut() {
        for key in ["vars", "schedule", "name", "description", "state", "meta"] {
            obj.remove(key);
        }
        for side in ["source", "sink"] {
            if let Some(s) = obj.get_mut(side).and_then(|s| s.as_object_mut()) {
                s.remove("connection");
            }
        }
    }
    let canonical = canonical_json(&json);
    format!("{:x}", Sha256::digest(canonical.as_bytes()))
}

/// JSON text with object keys sorted at every level.
pub fn canonical_json(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> =
                keys.iter().map(|k| format!("{}:{}", serde_json::Value::String((*k).clone()), canonical_json(&m[*k]))).collect();
            format!("{{{}}}", parts.join(","))
        }
        serde_json::Value::Array(items) => format!("[{}]", items.iter().map(canonical_json).collect::<Vec<_>>().join(",")),
        other => other.to_string(),
    }
}

#[cfg(test)]
pub(crate) mod tests;

#[cfg(test)]
mod batch_tests;

#[cfg(test)]
mod original_tests;

#[cfg(test)]
mod convention_tests;
