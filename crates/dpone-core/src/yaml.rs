//! A YAML document as a tree of positioned nodes.
//!
//! The manifest is parsed by `serde-saphyr` into this untyped tree, where
//! every node and every mapping key keeps its line and column. Validation
//! then walks the tree with the manifest path in hand, so every diagnostic
//! can name both the path and the file position. Duplicate keys are errors,
//! anchors/aliases and merge keys are refused (a manifest spells every value
//! out), and the parser runs under a size budget.

use crate::error::{Diagnostic, Diagnostics};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;
use std::fmt;

/// Largest manifest accepted, in bytes.
pub const MAX_DOCUMENT_BYTES: usize = 1 << 20;
/// Deepest nesting accepted.
pub const MAX_DEPTH: usize = 32;

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: Value,
    pub line: u64,
    pub column: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(Key, Node)>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    pub name: String,
    pub line: u64,
    pub column: u64,
}

impl Value {
    /// The YAML kind, as used in "expected X, found Y" messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Int(_) => "integer",
            Value::Float(_) => "number",
            Value::Str(_) => "string",
            Value::Seq(_) => "list",
            Value::Map(_) => "mapping",
        }
    }
}

impl Node {
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.value {
            Value::Map(entries) => entries.iter().find(|(k, _)| k.name == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut Node> {
        match &mut self.value {
            Value::Map(entries) => entries.iter_mut().find(|(k, _)| k.name == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn depth(&self) -> usize {
        match &self.value {
            Value::Seq(items) => 1 + items.iter().map(Node::depth).max().unwrap_or(0),
            Value::Map(entries) => 1 + entries.iter().map(|(_, v)| v.depth()).max().unwrap_or(0),
            _ => 0,
        }
    }

    /// Converts to JSON (for hashing a normalized document and for tests).
    pub fn to_json(&self) -> serde_json::Value {
        match &self.value {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Int(i) => match i64::try_from(*i) {
                Ok(v) => serde_json::Value::from(v),
                Err(_) => serde_json::Value::String(i.to_string()),
            },
            Value::Float(f) => serde_json::Number::from_f64(*f).map(serde_json::Value::Number).unwrap_or(serde_json::Value::Null),
            Value::Str(s) => serde_json::Value::String(s.clone()),
            Value::Seq(items) => serde_json::Value::Array(items.iter().map(Node::to_json).collect()),
            Value::Map(entries) => {
                let mut m = serde_json::Map::new();
                for (k, v) in entries {
                    m.insert(k.name.clone(), v.to_json());
                }
                serde_json::Value::Object(m)
            }
        }
    }
}

/// Parses one YAML document into a positioned tree.
pub fn parse(text: &str) -> Result<Node, Diagnostics> {
    if text.len() > MAX_DOCUMENT_BYTES {
        return Err(Diagnostic::new(
            "manifest_too_large",
            "",
            format!("the manifest is {} bytes; the limit is {MAX_DOCUMENT_BYTES}", text.len()),
        )
        .hint("split the manifest; dpone manifests describe one transfer each")
        .into());
    }
    if let Some(r) = find_refused_features(text) {
        let d = match r.feature {
            Feature::Tag => Diagnostic::new(
                "yaml_tag_unsupported",
                "",
                "YAML tags other than the core ones (!!str, !!int, ...) are not accepted in a manifest",
            )
            .hint("remove the tag"),
            Feature::Alias(what) => Diagnostic::new(
                "yaml_alias_unsupported",
                "",
                format!("{what} was found; YAML anchors, aliases and merge keys are not accepted in a manifest"),
            )
            .hint("write each value out explicitly; use `vars` for repeated values"),
        };
        return Err(d.at(r.line, r.column).into());
    }
    let mut options = serde_saphyr::Options::default();
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::Error;
    options.with_snippet = false;
    let spanned: Spanned<Value> = serde_saphyr::from_str_with_options(text, options).map_err(|e| {
        let message = clean_message(&e.to_string());
        let (line, column) = error_position(&e);
        let d = if let Some(key) = message.strip_prefix("duplicate mapping key: ") {
            Diagnostic::new("duplicate_key", "", format!("key `{key}` appears twice in the same mapping")).hint("keep one of them")
        } else if message.contains("multiple YAML documents") {
            Diagnostic::new("manifest_parse_error", "", "the file holds more than one YAML document")
                .hint("keep one document per manifest (remove `---`)")
        } else {
            Diagnostic::new("manifest_parse_error", "", format!("the manifest is not valid YAML: {message}"))
                .hint("fix the YAML syntax at the position shown")
        };
        Diagnostics::one(d.at(line, column))
    })?;
    let node = Node { value: spanned.value, line: spanned.referenced.line(), column: spanned.referenced.column() };
    if node.depth() > MAX_DEPTH {
        return Err(Diagnostic::new("manifest_too_deep", "", format!("the manifest nests deeper than {MAX_DEPTH} levels"))
            .hint("flatten the document")
            .into());
    }
    Ok(node)
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").trim().to_string()
}

fn error_position(e: &serde_saphyr::Error) -> (u64, u64) {
    e.location().map(|l| (l.line(), l.column())).unwrap_or((0, 0))
}

/// A YAML feature a manifest does not accept, with its position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub feature: Feature,
    pub line: u64,
    pub column: u64,
}

/// The kind of YAML feature a manifest does not accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// An anchor, an alias or a merge key (`yaml_alias_unsupported`), named.
    Alias(&'static str),
    /// A tag other than YAML's core ones (`yaml_tag_unsupported`).
    Tag,
}

/// Scans the parser's events for anchors, aliases, merge keys and tags
/// other than YAML's core ones. Syntax errors are left to the deserializer,
/// which reports them with positions.
pub fn find_refused_features(text: &str) -> Option<Refused> {
    use serde_saphyr::granit_parser::{Event, Parser};
    for item in Parser::new_from_str(text) {
        let Ok((event, span)) = item else { return None };
        let (line, column) = (span.start.line() as u64, span.start.col() as u64 + 1);
        let refused = |feature| Some(Refused { feature, line, column });
        let tag_ok = |tag: &Option<std::borrow::Cow<'_, serde_saphyr::granit_parser::Tag>>| {
            tag.as_ref().is_none_or(|t| {
                t.handle() == "tag:yaml.org,2002:" && ["str", "int", "bool", "float", "null", "map", "seq"].contains(&t.suffix())
            })
        };
        match &event {
            Event::Alias(_) => return refused(Feature::Alias("an alias")),
            Event::Scalar(_, _, anchor, _) | Event::SequenceStart(_, anchor, _) | Event::MappingStart(_, anchor, _) if *anchor != 0 => {
                return refused(Feature::Alias("an anchor"));
            }
            Event::Scalar(v, serde_saphyr::granit_parser::ScalarStyle::Plain, _, _) if v == "<<" => {
                return refused(Feature::Alias("a merge key"));
            }
            Event::Scalar(_, _, _, tag) | Event::SequenceStart(_, _, tag) | Event::MappingStart(_, _, tag) if !tag_ok(tag) => {
                return refused(Feature::Tag);
            }
            _ => {}
        }
    }
    None
}

/// The deserializer's message without its API advice and duplicated position.
fn clean_message(raw: &str) -> String {
    let mut m = first_line(raw);
    for cut in [", set DuplicateKeyPolicy", "; use from_str_multiple", " at line "] {
        if let Some(i) = m.find(cut) {
            m.truncate(i);
        }
    }
    m
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ValueVisitor)
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = Spanned::<Value>::deserialize(deserializer)?;
        Ok(Node { value: s.value, line: s.referenced.line(), column: s.referenced.column() })
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v.into()))
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        Ok(Value::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Int(v.into()))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        i128::try_from(v).map(Value::Int).map_err(|_| E::custom("integer too large"))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Value::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries: Vec<(Key, Node)> = Vec::new();
        while let Some(key) = map.next_key::<Spanned<KeyName>>()? {
            let value = map.next_value::<Node>()?;
            entries.push((Key { name: key.value.0, line: key.referenced.line(), column: key.referenced.column() }, value));
        }
        Ok(Value::Map(entries))
    }
}

/// A mapping key: any scalar, kept as its text.
struct KeyName(String);

impl<'de> Deserialize<'de> for KeyName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = KeyName;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a scalar mapping key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<KeyName, E> {
                Ok(KeyName(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<KeyName, E> {
                Ok(KeyName(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<KeyName, E> {
                Ok(KeyName(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<KeyName, E> {
                Ok(KeyName(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<KeyName, E> {
                Ok(KeyName(v.to_string()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<KeyName, E> {
                Ok(KeyName("null".to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_with_positions() {
        let n = parse("a: 1\nb:\n  c: P7D\n  d: [x, 2]\n").unwrap();
        let b = n.get("b").unwrap();
        let c = b.get("c").unwrap();
        assert_eq!(c.as_str(), Some("P7D"));
        assert_eq!((c.line, c.column), (3, 6));
        assert_eq!(n.get("a").unwrap().value, Value::Int(1));
        match &b.value {
            Value::Map(entries) => assert_eq!((entries[1].0.line, entries[1].0.column), (4, 3)),
            _ => panic!(),
        }
    }

    #[test]
    fn refuses_duplicates_aliases_and_bad_syntax() {
        assert_eq!(parse("a: 1\na: 2\n").unwrap_err().first_code(), "duplicate_key");
        assert_eq!(parse("a: !custom 1\n").unwrap_err().first_code(), "yaml_tag_unsupported");
        assert!(parse("a: !!str 1\n").is_ok());
        assert_eq!(parse("a: &x 1\nb: *x\n").unwrap_err().first_code(), "yaml_alias_unsupported");
        assert_eq!(parse("a: {b: 1\n").unwrap_err().first_code(), "manifest_parse_error");
        assert_eq!(parse("base: 1\n<<: {a: 1}\n").unwrap_err().first_code(), "yaml_alias_unsupported");
    }

    #[test]
    fn ampersand_inside_strings_is_fine() {
        let n = parse("a: 'x & *y'\nb: \"&z\"\nc: a&b # &comment\nd: fish &chips *more\n").unwrap();
        assert_eq!(n.get("c").unwrap().as_str(), Some("a&b"));
        assert_eq!(n.get("d").unwrap().as_str(), Some("fish &chips *more"));
    }
}
