//! The `connection` block of a manifest side: `connection_type: env`
//! (a URL in `DPONE_CONN_<ID>`) or `params` (a map handed to the adapter,
//! which checks its keys when it builds itself). No I/O.

use super::model::{ConnectionSpec, Reader, child, str_at};
use super::schema::join;
use crate::yaml::{Node, Value};
use std::collections::BTreeMap;

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::Str(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Float(f) => Some(f.to_string()),
        _ => None,
    }
}

pub(super) fn connection(r: &mut Reader, node: Option<&Node>, path: &str) -> ConnectionSpec {
    let kind = str_at(node, "connection_type").unwrap_or("env");
    let id = child(node, "connection_id");
    let params = child(node, "params");
    match kind {
        "params" => {
            if let Some(idn) = id {
                r.error(
                    "connection_conflict",
                    &join(path, "connection_id"),
                    Some(idn),
                    "`connection_id` is only used with `connection_type: env`",
                    "remove `connection_id`, or switch to `connection_type: env`",
                );
            }
            let mut map = BTreeMap::new();
            match params.map(|p| &p.value) {
                Some(Value::Map(entries)) if !entries.is_empty() => {
                    for (k, v) in entries {
                        if let Some(text) = scalar_text(&v.value) {
                            map.insert(k.name.clone(), text);
                        }
                    }
                }
                _ => r.error(
                    "missing_key",
                    &join(path, "params"),
                    node,
                    "`connection_type: params` needs a non-empty `params` block",
                    "add `params:` with e.g. `path` (sqlite) or `host`, `port`, `user`, `database`",
                ),
            }
            ConnectionSpec::Params(map)
        }
        _ => {
            if let Some(p) = params {
                r.error(
                    "connection_conflict",
                    &join(path, "params"),
                    Some(p),
                    "`params` is only used with `connection_type: params`",
                    "remove `params`, or switch to `connection_type: params`",
                );
            }
            match id.and_then(Node::as_str) {
                Some(s) if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
                    ConnectionSpec::Env { id: s.to_string() }
                }
                Some(s) => {
                    r.error(
                        "invalid_value",
                        &join(path, "connection_id"),
                        id,
                        format!("connection id `{s}` may contain only letters, digits and underscores"),
                        "it names the environment variable DPONE_CONN_<CONNECTION_ID>",
                    );
                    ConnectionSpec::Env { id: String::new() }
                }
                None => {
                    r.error(
                        "missing_key",
                        &join(path, "connection_id"),
                        node,
                        "`connection_type: env` needs a `connection_id`",
                        "add `connection_id: MY_DB` and export DPONE_CONN_MY_DB=<url>",
                    );
                    ConnectionSpec::Env { id: String::new() }
                }
            }
        }
    }
}
