//! Manifest loading: YAML text -> positioned tree -> `vars` substitution ->
//! structural check against the declared shape -> typed [`Manifest`].
//!
//! Every problem is reported at once, each with a stable code, the manifest
//! path, the line and column, and a hint. Loading performs no I/O: the
//! caller reads the file, and connections are only resolved later.

pub mod model;
pub mod schema;

pub use model::{
    ConnectionSpec, Manifest, NativeChunks, SinkSpec, SourceSpec, StateConnection, StateSpec, Strategy, System, TableRef, TransportMode,
    WindowSpec, Wire,
};

use crate::error::{Diagnostic, Diagnostics};
use crate::yaml::{self, Node, Value};
use sha2::{Digest, Sha256};

const NATIVE_CHUNKS_PATH: &str = "source.options.native_transfer.execution.native_chunks";

/// Parses and validates a manifest.
pub fn load(text: &str) -> Result<Manifest, Diagnostics> {
    let mut root = yaml::parse(text)?;
    let mut diags = Vec::new();
    if !matches!(root.value, Value::Map(_)) {
        return Err(Diagnostic::new("invalid_type", "", format!("a manifest is a mapping, found {}", root.value.kind()))
            .hint("start with `kind: dpone.batch.v1`")
            .at(root.line, root.column)
            .into());
    }
    substitute_vars(&mut root, &mut diags);
    schema::check(&root, schema::manifest_shape(), "", &mut diags);
    // Limits report under their own code family (SPEC §1: `invalid_limit:<field>`).
    for d in &mut diags {
        if let Some(field) = d.path.strip_prefix(NATIVE_CHUNKS_PATH).and_then(|rest| rest.strip_prefix('.')) {
            d.code = format!("invalid_limit:{field}");
        }
    }
    if !diags.is_empty() {
        return Err(sorted(diags));
    }
    let fingerprint = fingerprint(&root);
    let manifest = model::build(&root, &mut diags, fingerprint);
    match manifest {
        Some(mut m) if diags.is_empty() => {
            collect_positions(&root, "", &mut m.positions);
            if let Err(mut errors) = crate::limits::resolve(&m) {
                errors.iter_mut().for_each(|d| m.locate(d));
                return Err(sorted(errors));
            }
            Ok(m)
        }
        _ => Err(sorted(diags)),
    }
}

fn collect_positions(node: &Node, path: &str, out: &mut std::collections::BTreeMap<String, (u64, u64)>) {
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

/// Diagnostics in file order (line, then column; positionless last), without duplicates.
pub fn sorted(mut diags: Vec<Diagnostic>) -> Diagnostics {
    diags.sort_by_key(|d| (d.line.unwrap_or(u64::MAX), d.column.unwrap_or(0)));
    diags.dedup();
    Diagnostics(diags)
}

/// Replaces `${name}` in every string outside `vars` with the value of
/// `vars.name`; `$${` writes a literal `${`.
fn substitute_vars(root: &mut Node, diags: &mut Vec<Diagnostic>) {
    let mut vars = std::collections::BTreeMap::new();
    if let Some(v) = root.get("vars")
        && let Value::Map(entries) = &v.value
    {
        for (k, n) in entries {
            let text = match &n.value {
                Value::Str(s) => s.clone(),
                Value::Int(i) => i.to_string(),
                Value::Bool(b) => b.to_string(),
                Value::Float(f) => f.to_string(),
                _ => continue,
            };
            vars.insert(k.name.clone(), text);
        }
    }
    if let Value::Map(entries) = &mut root.value {
        for (k, n) in entries.iter_mut() {
            if k.name != "vars" {
                walk(n, &k.name, &vars, diags);
            }
        }
    }
}

fn walk(node: &mut Node, path: &str, vars: &std::collections::BTreeMap<String, String>, diags: &mut Vec<Diagnostic>) {
    match &mut node.value {
        Value::Str(s) if s.contains('$') => match interpolate(s, vars) {
            Ok(new) => *s = new,
            Err(name) => diags.push(
                Diagnostic::new("unknown_var", path, format!("`${{{name}}}` refers to an undefined var"))
                    .hint(format!("define `{name}` under `vars`, or write `$${{` for a literal `${{`"))
                    .at(node.line, node.column),
            ),
        },
        Value::Seq(items) => {
            for (i, it) in items.iter_mut().enumerate() {
                walk(it, &format!("{path}[{i}]"), vars, diags);
            }
        }
        Value::Map(entries) => {
            for (k, n) in entries.iter_mut() {
                walk(n, &schema::join(path, &k.name), vars, diags);
            }
        }
        _ => {}
    }
}

fn interpolate(s: &str, vars: &std::collections::BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let tail = &rest[pos..];
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${") {
            let end = after.find('}').ok_or_else(|| after.to_string())?;
            let name = &after[..end];
            out.push_str(vars.get(name).ok_or_else(|| name.to_string())?);
            rest = &after[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Identity of what the manifest asks for: the normalized document without
/// `vars` (already substituted), connection blocks (credentials),
/// `schedule` (when, not what) and `state` (where the journal lives).
fn fingerprint(root: &Node) -> String {
    let mut json = root.to_json();
    if let Some(obj) = json.as_object_mut() {
        obj.remove("vars");
        obj.remove("schedule");
        obj.remove("state");
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
