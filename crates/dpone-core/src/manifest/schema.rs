//! Shapes of YAML documents, and their checks.
//!
//! One declaration (the manifest's is in `shapes.rs`) drives both the
//! structural validation of a parsed document (unknown keys with
//! did-you-mean hints, features of the Python dpone refused by name, wrong
//! kinds, bad enum values, missing required keys — each with its path and
//! file position) and the JSON Schema that `dpone manifest schema` prints
//! for editors. Semantic rules (durations, policy combinations) live in
//! `manifest::model`.

use crate::error::{Diagnostic, DiagnosticKind, did_you_mean};
use crate::yaml::{Node, Value};
use serde_json::{Map, Value as Json, json};

#[derive(Debug, Clone)]
pub enum Shape {
    /// A mapping with known keys; `extra` admits other keys with that shape.
    Object {
        fields: Vec<Field>,
        extra: Option<Box<Shape>>,
    },
    String {
        format: Option<&'static str>,
    },
    Enum(&'static [&'static str]),
    Integer {
        min: i128,
        max: i128,
    },
    Bool,
    /// A string, integer or boolean (for `vars` and connection params).
    Scalar,
    List(Box<Shape>),
    /// Any YAML value (the original's `vars`, `meta`, `state`).
    Any,
    /// The first shape when the value is a string, else the second (a
    /// batch table entry: a name or a mapping; the original's scalar
    /// `unique_key`: a name or a list).
    Either(Box<Shape>, Box<Shape>),
    /// An object whose listed keys are features of the Python dpone that
    /// this runtime does not have: each is refused by name, with its hint
    /// (`unsupported_feature`), instead of an unknown key.
    Refusing {
        inner: Box<Shape>,
        refused: &'static [(&'static str, &'static str)],
    },
}

impl Shape {
    /// The same shape with no key required at any depth: `defaults` and
    /// `overrides` hold fragments that only the merged process completes.
    pub fn relaxed(&self) -> Shape {
        match self {
            Shape::Object { fields, extra } => Shape::Object {
                fields: fields.iter().map(|f| Field { required: false, shape: f.shape.relaxed(), ..f.clone() }).collect(),
                extra: extra.as_ref().map(|e| Box::new(e.relaxed())),
            },
            Shape::List(item) => Shape::List(Box::new(item.relaxed())),
            Shape::Either(a, b) => Shape::Either(Box::new(a.relaxed()), Box::new(b.relaxed())),
            Shape::Refusing { inner, refused } => Shape::Refusing { inner: Box::new(inner.relaxed()), refused },
            other => other.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Field {
    pub name: &'static str,
    pub shape: Shape,
    pub required: bool,
    pub description: &'static str,
}

pub fn field(name: &'static str, shape: Shape, description: &'static str) -> Field {
    Field { name, shape, required: false, description }
}

pub fn required(name: &'static str, shape: Shape, description: &'static str) -> Field {
    Field { name, shape, required: true, description }
}

pub fn obj(fields: Vec<Field>) -> Shape {
    Shape::Object { fields, extra: None }
}

pub fn string() -> Shape {
    Shape::String { format: None }
}

pub fn int(min: i128, max: i128) -> Shape {
    Shape::Integer { min, max }
}

pub use super::shapes::*;

/// Structural validation of `node` against `shape` at `path`.
pub fn check(node: &Node, shape: &Shape, path: &str, out: &mut Vec<Diagnostic>) {
    Checker { deferred: false, out }.check(node, shape, path, &[]);
}

/// As [`check`], but a string holding a template (`{{ }}`, `${}`) passes
/// for any shape: its value is only known once the process is rendered,
/// and the rendered process is checked again.
pub fn check_deferred(node: &Node, shape: &Shape, path: &str, out: &mut Vec<Diagnostic>) {
    Checker { deferred: true, out }.check(node, shape, path, &[]);
}

/// The hint of a value of the Python dpone that this runtime refuses by
/// name at `path` (e.g. `source.type: bigquery`).
fn refused_value(path: &str, value: &str) -> Option<&'static str> {
    REFUSED_VALUES
        .iter()
        .find(|(suffix, v, _)| *v == value && (path == *suffix || path.ends_with(&format!(".{suffix}"))))
        .map(|(_, _, h)| *h)
}

struct Checker<'a> {
    deferred: bool,
    out: &'a mut Vec<Diagnostic>,
}

impl Checker<'_> {
    fn check(&mut self, node: &Node, shape: &Shape, path: &str, refused: &[(&'static str, &'static str)]) {
        if self.deferred && matches!(&node.value, Value::Str(s) if super::template::has_template(s)) {
            return;
        }
        let at = |d: Diagnostic| d.at(node.line, node.column);
        let wrong_kind =
            |expected: &str| at(Diagnostic::new("invalid_type", path, format!("expected {expected}, found {}", node.value.kind())));
        match shape {
            Shape::Refusing { inner, refused } => self.check(node, inner, path, refused),
            Shape::Object { fields, extra } => {
                let Value::Map(entries) = &node.value else {
                    self.out.push(wrong_kind("a mapping").hint("write this key as a nested block of `key: value` lines"));
                    return;
                };
                for (key, value) in entries {
                    let child_path = join(path, &key.name);
                    if let Some(f) = fields.iter().find(|f| f.name == key.name) {
                        if matches!(value.value, Value::Null) && !matches!(f.shape, Shape::Scalar | Shape::Any) {
                            self.out.push(
                                Diagnostic::new("invalid_type", &child_path, format!("`{}` is empty", key.name))
                                    .hint("give it a value or remove the key")
                                    .at(key.line, key.column),
                            );
                        } else {
                            self.check(value, &f.shape, &child_path, &[]);
                        }
                    } else if let Some((_, hint)) = refused.iter().find(|(k, _)| *k == key.name) {
                        self.out.push(
                            Diagnostic::new(
                                "unsupported_feature",
                                &child_path,
                                format!("`{}` is a feature of the Python dpone that this runtime does not have", key.name),
                            )
                            .hint(*hint)
                            .at(key.line, key.column),
                        );
                    } else if let Some(extra) = extra {
                        self.check(value, extra, &child_path, &[]);
                    } else {
                        let names = fields.iter().map(|f| f.name);
                        let suggestion = did_you_mean(&key.name, names);
                        let hint = match suggestion {
                            Some(s) => format!("did you mean `{s}`?"),
                            None => format!("known keys here: {}", fields.iter().map(|f| f.name).collect::<Vec<_>>().join(", ")),
                        };
                        self.out.push(
                            Diagnostic::new("unknown_key", &child_path, format!("unknown key `{}`", key.name))
                                .hint(hint)
                                .kind(DiagnosticKind::UnknownKey { suggested: suggestion.is_some() })
                                .at(key.line, key.column),
                        );
                    }
                }
                for f in fields.iter().filter(|f| f.required) {
                    if !entries.iter().any(|(k, _)| k.name == f.name) {
                        self.out.push(at(Diagnostic::new(
                            "missing_key",
                            join(path, f.name),
                            format!("required key `{}` is missing", f.name),
                        )
                        .hint(format!("add `{}`: {}", f.name, f.description))));
                    }
                }
            }
            Shape::String { .. } => {
                if !matches!(node.value, Value::Str(_)) {
                    self.out.push(wrong_kind("a string").hint("quote the value"));
                }
            }
            Shape::Enum(values) => match &node.value {
                Value::Str(s) if values.contains(&s.as_str()) => {}
                Value::Str(s) => {
                    if let Some(hint) = refused_value(path, s) {
                        self.out.push(at(Diagnostic::new(
                            "unsupported_feature",
                            path,
                            format!("`{s}` is a value of the Python dpone that this runtime does not support"),
                        )
                        .hint(hint)));
                        return;
                    }
                    let hint = match did_you_mean(s, values.iter().copied()) {
                        Some(v) => format!("did you mean `{v}`?"),
                        None => format!("use one of: {}", values.join(", ")),
                    };
                    self.out.push(at(Diagnostic::new("invalid_value", path, format!("`{s}` is not a valid value")).hint(hint)));
                }
                _ => self.out.push(wrong_kind("a string").hint(format!("use one of: {}", values.join(", ")))),
            },
            Shape::Integer { min, max } => match &node.value {
                Value::Int(i) if i >= min && i <= max => {}
                Value::Int(i) => self.out.push(at(Diagnostic::new("invalid_value", path, format!("{i} is out of range"))
                    .hint(format!("use an integer from {min} to {max}")))),
                _ => self.out.push(wrong_kind("an integer").hint("write a plain integer without quotes, units or fractions")),
            },
            Shape::Bool => {
                if !matches!(node.value, Value::Bool(_)) {
                    self.out.push(wrong_kind("true or false"));
                }
            }
            Shape::Scalar => {
                if !matches!(node.value, Value::Str(_) | Value::Int(_) | Value::Bool(_) | Value::Float(_) | Value::Null) {
                    self.out.push(wrong_kind("a scalar (string, number or boolean)"));
                }
            }
            Shape::Any => {}
            Shape::Either(text, object) => match &node.value {
                Value::Str(_) => self.check(node, text, path, &[]),
                Value::Map(_) | Value::Seq(_) => self.check(node, object, path, &[]),
                _ if matches!(**object, Shape::List(_)) => self.out.push(wrong_kind("a name or a list")),
                _ => self.out.push(wrong_kind("a name or a mapping")),
            },
            Shape::List(item) => match &node.value {
                Value::Seq(items) => {
                    for (i, it) in items.iter().enumerate() {
                        self.check(it, item, &format!("{path}[{i}]"), &[]);
                    }
                }
                _ => self.out.push(wrong_kind("a list")),
            },
        }
    }
}

pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

/// JSON Schema (draft 2020-12) of the manifest.
pub fn json_schema() -> Json {
    let mut root =
        to_json_schema(file_shape(), "dpone manifest (kind dpone.batch.v1): one transfer (source, sink) or many (defaults, schemas)");
    if let Json::Object(m) = &mut root {
        m.insert("$schema".into(), json!("https://json-schema.org/draft/2020-12/schema"));
        m.insert("$id".into(), json!("https://dpone.dev/schemas/dpone.batch.v1.json"));
        m.insert("title".into(), json!("dpone.batch.v1"));
    }
    root
}

/// JSON Schema of `shape` (used for the manifest and the schedules file).
pub fn to_json_schema(shape: &Shape, description: &str) -> Json {
    let mut m = Map::new();
    if !description.is_empty() {
        m.insert("description".into(), json!(description));
    }
    match shape {
        Shape::Object { fields, extra } => {
            m.insert("type".into(), json!("object"));
            let mut props = Map::new();
            for f in fields {
                props.insert(f.name.into(), to_json_schema(&f.shape, f.description));
            }
            m.insert("properties".into(), Json::Object(props));
            let req: Vec<&str> = fields.iter().filter(|f| f.required).map(|f| f.name).collect();
            if !req.is_empty() {
                m.insert("required".into(), json!(req));
            }
            m.insert(
                "additionalProperties".into(),
                match extra {
                    Some(e) => to_json_schema(e, ""),
                    None => json!(false),
                },
            );
        }
        Shape::String { format } => {
            m.insert("type".into(), json!("string"));
            match *format {
                Some("duration") => {
                    m.insert("pattern".into(), json!(r"^P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d{1,6})?S)?)?$"));
                }
                Some("workload-name") => {
                    m.insert("pattern".into(), json!("^[a-z0-9][a-z0-9_.-]{0,127}$"));
                }
                Some("relative-path") => {
                    m.insert("pattern".into(), json!(r"^(?!/)(?!.*(^|/)\.{1,2}(/|$))(?!.*//)[^\\]+$"));
                }
                Some(f) => {
                    m.insert("x-dpone-format".into(), json!(f));
                }
                None => {}
            }
        }
        Shape::Enum(values) => {
            m.insert("type".into(), json!("string"));
            m.insert("enum".into(), json!(values));
        }
        Shape::Integer { min, max } => {
            m.insert("type".into(), json!("integer"));
            m.insert("minimum".into(), json!(i64::try_from(*min).unwrap_or(i64::MIN)));
            m.insert("maximum".into(), json!(i64::try_from(*max).unwrap_or(i64::MAX)));
        }
        Shape::Bool => {
            m.insert("type".into(), json!("boolean"));
        }
        Shape::Scalar => {
            m.insert("type".into(), json!(["string", "number", "integer", "boolean", "null"]));
        }
        Shape::List(item) => {
            m.insert("type".into(), json!("array"));
            m.insert("items".into(), to_json_schema(item, ""));
        }
        Shape::Any => {}
        Shape::Either(a, b) => {
            m.insert("oneOf".into(), json!([to_json_schema(a, ""), to_json_schema(b, "")]));
        }
        Shape::Refusing { inner, .. } => {
            if let Json::Object(inner) = to_json_schema(inner, description) {
                return Json::Object(inner);
            }
        }
    }
    Json::Object(m)
}
