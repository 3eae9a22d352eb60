//! Templates in manifest strings: the original's `{{ expr }}` and this
//! runtime's older `${name}`.
//!
//! The Python dpone renders every string of a process with Jinja under
//! `StrictUndefined`; this module implements the part of Jinja manifests
//! use, and refuses the rest by name instead of passing it through:
//!
//! - `{{ name }}`, `{{ a.b.c }}` (a var, or a value of the process such as
//!   `{{ sink.strategy.mode }}`), `{{ 'text' }}` and `{{ 42 }}` literals;
//! - filters `lower`, `upper`, `trim`, `string`, `dpone_snake`,
//!   `dpone_ident` (the original's naming helpers) and `default(value)`,
//!   which replaces an undefined name (Jinja's `default`);
//! - a string that is exactly one `{{ expr }}` keeps the value's type (an
//!   integer stays an integer, a mapping a mapping), as the original does;
//!   inside text every value must be a scalar;
//! - `${name}` substitutes a var's text and `$${` writes a literal `${`.
//!
//! `{% %}` statements, `{# #}` comments and other filters are refused
//! (`unsupported_template`), a name that resolves to nothing is
//! `unknown_var`: a manifest never carries template text to a server.
//! Lookups go through a [`Scope`]; this module does no I/O.

use crate::yaml::{Node, Value};

/// The stable code of a [`TemplateError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateCode {
    /// `unknown_var`: a name that resolves to nothing.
    UnknownVar,
    /// `var_cycle`: vars that refer to each other.
    VarCycle,
    /// `invalid_template`: template syntax that does not parse.
    InvalidTemplate,
    /// `unsupported_template`: Jinja this runtime does not implement.
    UnsupportedTemplate,
}

impl TemplateCode {
    pub fn as_str(self) -> &'static str {
        match self {
            TemplateCode::UnknownVar => "unknown_var",
            TemplateCode::VarCycle => "var_cycle",
            TemplateCode::InvalidTemplate => "invalid_template",
            TemplateCode::UnsupportedTemplate => "unsupported_template",
        }
    }
}

/// Why a string could not be rendered (the caller adds path and position).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    pub code: TemplateCode,
    pub message: String,
    pub hint: String,
    /// Already reported where its cause is (e.g. a var that failed): the
    /// caller records nothing more.
    pub reported: bool,
}

impl TemplateError {
    pub fn new(code: TemplateCode, message: impl Into<String>, hint: impl Into<String>) -> Self {
        TemplateError { code, message: message.into(), hint: hint.into(), reported: false }
    }

    pub fn reported() -> Self {
        TemplateError { code: TemplateCode::UnknownVar, message: String::new(), hint: String::new(), reported: true }
    }
}

/// What names resolve to while a string is rendered.
pub trait Scope {
    /// The rendered value at `path` (`["sink", "strategy", "mode"]`), None
    /// when the name is not defined.
    fn lookup(&mut self, path: &[String]) -> Result<Option<Node>, TemplateError>;
    /// Names a did-you-mean hint may suggest.
    fn names(&self) -> Vec<String>;
}

/// Whether `s` holds template syntax of either form.
pub fn has_template(s: &str) -> bool {
    s.contains("{{") || s.contains("{%") || s.contains("{#") || s.contains("${")
}

#[derive(Debug, Clone, PartialEq)]
enum Primary {
    Path(Vec<String>),
    Text(String),
    Int(i128),
    None,
}

#[derive(Debug, Clone, PartialEq)]
enum Filter {
    Lower,
    Upper,
    Trim,
    Text,
    Snake,
    Ident,
    Default(Primary),
}

#[derive(Debug, Clone, PartialEq)]
struct Expr {
    primary: Primary,
    filters: Vec<Filter>,
    source: String,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Lit(String),
    Expr(Expr),
    Legacy(String),
}

const FILTERS: &[&str] = &["lower", "upper", "trim", "string", "dpone_snake", "dpone_ident", "default"];

fn unsupported(what: &str) -> TemplateError {
    TemplateError::new(
        TemplateCode::UnsupportedTemplate,
        format!("{what} is not supported in manifests of this runtime"),
        "use `{{ name }}` with vars (filters: lower, upper, trim, string, dpone_snake, dpone_ident, default('x')), or write the value out",
    )
}

fn invalid(message: impl Into<String>) -> TemplateError {
    TemplateError::new(TemplateCode::InvalidTemplate, message, "write `{{ name }}`; for a literal `{{` write `{{ '{{' }}`")
}

fn parse(s: &str) -> Result<Vec<Part>, TemplateError> {
    let mut parts = Vec::new();
    let mut lit = String::new();
    let mut rest = s;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("$${") {
            lit.push_str("${");
            rest = after;
        } else if let Some(after) = rest.strip_prefix("${") {
            let end = after.find('}').ok_or_else(|| invalid(format!("`${{{after}` is not closed with `}}`")))?;
            flush(&mut parts, &mut lit);
            parts.push(Part::Legacy(after[..end].to_string()));
            rest = &after[end + 1..];
        } else if rest.starts_with("{%") {
            return Err(unsupported("a Jinja statement `{% ... %}`"));
        } else if rest.starts_with("{#") {
            return Err(unsupported("a Jinja comment `{# ... #}`"));
        } else if let Some(after) = rest.strip_prefix("{{") {
            let end = closing(after).ok_or_else(|| invalid(format!("`{{{{{after}` is not closed with `}}}}`")))?;
            flush(&mut parts, &mut lit);
            parts.push(Part::Expr(expression(&after[..end])?));
            rest = &after[end + 2..];
        } else {
            let c = rest.chars().next().expect("rest is not empty");
            lit.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    flush(&mut parts, &mut lit);
    Ok(parts)
}

fn flush(parts: &mut Vec<Part>, lit: &mut String) {
    if !lit.is_empty() {
        parts.push(Part::Lit(std::mem::take(lit)));
    }
}

/// Byte offset of the `}}` closing an expression (quotes respected).
fn closing(s: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    for (i, c) in s.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if s[i..].starts_with("}}") => return Some(i),
            None => {}
        }
    }
    None
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_') && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Splits on `|` outside quotes.
fn split_pipes(s: &str) -> Vec<&str> {
    let (mut out, mut start, mut quote) = (Vec::new(), 0, None);
    for (i, c) in s.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == '|' => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            None => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn primary(raw: &str, whole: &str) -> Result<Primary, TemplateError> {
    let t = raw.trim();
    let quoted = |q: char| t.len() >= 2 && t.starts_with(q) && t.ends_with(q) && !t[1..t.len() - 1].contains(q);
    if quoted('\'') || quoted('"') {
        return Ok(Primary::Text(t[1..t.len() - 1].to_string()));
    }
    if let Ok(i) = t.parse::<i128>() {
        return Ok(Primary::Int(i));
    }
    if t == "None" || t == "none" {
        return Ok(Primary::None);
    }
    let segments: Vec<String> = t.split('.').map(str::to_string).collect();
    if !segments.is_empty() && segments.iter().all(|s| is_ident(s)) {
        return Ok(Primary::Path(segments));
    }
    if t.is_empty() {
        return Err(invalid(format!("`{{{{{whole}}}}}` names nothing")));
    }
    Err(unsupported(&format!("the expression `{}`", t)))
}

fn expression(inner: &str) -> Result<Expr, TemplateError> {
    let pieces = split_pipes(inner);
    let primary = primary(pieces[0], inner)?;
    let mut filters = Vec::new();
    for raw in &pieces[1..] {
        let f = raw.trim();
        let (name, arg) = match f.split_once('(') {
            Some((n, a)) => {
                let a = a.strip_suffix(')').ok_or_else(|| invalid(format!("the filter `{f}` is not closed with `)`")))?;
                (n.trim(), Some(a))
            }
            None => (f, None),
        };
        let filter = match (name, arg) {
            ("lower", None) => Filter::Lower,
            ("upper", None) => Filter::Upper,
            ("trim", None) => Filter::Trim,
            ("string", None) => Filter::Text,
            ("dpone_snake", None) => Filter::Snake,
            ("dpone_ident", None) => Filter::Ident,
            ("default" | "d", Some(a)) => Filter::Default(primary_arg(a, inner)?),
            (n, _) if FILTERS.contains(&n) => {
                return Err(invalid(format!("the filter `{f}` takes {}", if n == "default" { "one value" } else { "no arguments" })));
            }
            _ => return Err(unsupported(&format!("the filter `{name}`"))),
        };
        filters.push(filter);
    }
    Ok(Expr { primary, filters, source: inner.trim().to_string() })
}

fn primary_arg(a: &str, whole: &str) -> Result<Primary, TemplateError> {
    if a.contains(',') {
        return Err(unsupported("`default` with a second argument"));
    }
    primary(a, whole)
}

/// Renders `node` if it is a string holding a template: None when there is
/// nothing to render. The result keeps `node`'s position.
pub fn render(node: &Node, scope: &mut dyn Scope) -> Result<Option<Node>, TemplateError> {
    let Value::Str(s) = &node.value else { return Ok(None) };
    if !has_template(s) {
        return Ok(None);
    }
    let at = |value: Value| Node { value, line: node.line, column: node.column };
    // A string that is exactly one expression (blanks aside) keeps the value's type.
    let trimmed = s.trim();
    if trimmed.starts_with("{{")
        && trimmed.ends_with("}}")
        && let [Part::Expr(e)] = parse(trimmed)?.as_slice()
    {
        return Ok(Some(at(evaluate(e, scope)?.value)));
    }
    let parts = parse(s)?;
    let mut out = String::new();
    for part in &parts {
        match part {
            Part::Lit(l) => out.push_str(l),
            Part::Expr(e) => {
                let v = evaluate(e, scope)?;
                out.push_str(&text(&v.value, true).ok_or_else(|| not_text(&format!("{{{{ {} }}}}", e.source), &v.value))?);
            }
            Part::Legacy(name) => {
                let v =
                    lookup(&Primary::Path(vec![name.clone()]), scope)?.ok_or_else(|| undefined(&format!("${{{name}}}"), name, scope))?;
                out.push_str(&text(&v.value, false).ok_or_else(|| not_text(&format!("${{{name}}}"), &v.value))?);
            }
        }
    }
    Ok(Some(at(Value::Str(out))))
}

fn not_text(expr: &str, v: &Value) -> TemplateError {
    TemplateError::new(
        TemplateCode::InvalidTemplate,
        format!("`{expr}` is a {} and cannot be part of a text", v.kind()),
        "use it as the whole value (`key: \"{{ name }}\"`) or refer to one of its scalar fields",
    )
}

fn undefined(expr: &str, name: &str, scope: &dyn Scope) -> TemplateError {
    let names = scope.names();
    let first = name.split('.').next().unwrap_or(name);
    let hint = match crate::error::did_you_mean(first, names.iter().map(String::as_str)) {
        Some(close) if close != first => format!("did you mean `{close}`? Define vars under `vars` (file, schema or table)"),
        _ => format!(
            "define `{first}` under `vars` (file, schema or table), or write the value out; for a literal `{{{{` write `{{{{ '{{{{' }}}}`"
        ),
    };
    TemplateError::new(TemplateCode::UnknownVar, format!("`{expr}` refers to `{name}`, which is not defined"), hint)
}

fn lookup(p: &Primary, scope: &mut dyn Scope) -> Result<Option<Node>, TemplateError> {
    let value = match p {
        Primary::Path(path) => return scope.lookup(path),
        Primary::Text(t) => Value::Str(t.clone()),
        Primary::Int(i) => Value::Int(*i),
        Primary::None => Value::Null,
    };
    Ok(Some(Node { value, line: 0, column: 0 }))
}

fn evaluate(e: &Expr, scope: &mut dyn Scope) -> Result<Node, TemplateError> {
    let expr = format!("{{{{ {} }}}}", e.source);
    let mut value = lookup(&e.primary, scope)?;
    for f in &e.filters {
        if let Filter::Default(d) = f {
            if value.is_none() {
                value = lookup(d, scope)?;
            }
            continue;
        }
        let Some(v) = &value else { continue };
        let s = text(&v.value, true).ok_or_else(|| not_text(&expr, &v.value))?;
        let out = match f {
            Filter::Lower => s.to_lowercase(),
            Filter::Upper => s.to_uppercase(),
            Filter::Trim => s.trim().to_string(),
            Filter::Text => s,
            Filter::Snake => snake(&s),
            Filter::Ident => ident(&s),
            Filter::Default(_) => unreachable!("handled above"),
        };
        value = Some(Node { value: Value::Str(out), ..v.clone() });
    }
    value.ok_or_else(|| {
        let name = match &e.primary {
            Primary::Path(p) => p.join("."),
            _ => e.source.clone(),
        };
        undefined(&expr, &name, scope)
    })
}

/// A scalar's text: as Jinja prints it (`True`, `None`) for `{{ }}`, as
/// YAML writes it for `${}`.
fn text(v: &Value, jinja: bool) -> Option<String> {
    Some(match v {
        Value::Str(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Bool(b) if jinja => if *b { "True" } else { "False" }.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null if jinja => "None".to_string(),
        Value::Null => String::new(),
        Value::Seq(_) | Value::Map(_) => return None,
    })
}

fn translit(c: char) -> Option<&'static str> {
    const RU: &[(char, &str)] = &[
        ('а', "a"),
        ('б', "b"),
        ('в', "v"),
        ('г', "g"),
        ('д', "d"),
        ('е', "e"),
        ('ё', "e"),
        ('ж', "zh"),
        ('з', "z"),
        ('и', "i"),
        ('й', "i"),
        ('к', "k"),
        ('л', "l"),
        ('м', "m"),
        ('н', "n"),
        ('о', "o"),
        ('п', "p"),
        ('р', "r"),
        ('с', "s"),
        ('т', "t"),
        ('у', "u"),
        ('ф', "f"),
        ('х', "h"),
        ('ц', "ts"),
        ('ч', "ch"),
        ('ш', "sh"),
        ('щ', "sch"),
        ('ъ', ""),
        ('ы', "y"),
        ('ь', ""),
        ('э', "e"),
        ('ю', "yu"),
        ('я', "ya"),
    ];
    let low = c.to_lowercase().next()?;
    RU.iter().find(|(k, _)| *k == low).map(|(_, v)| *v)
}

/// The original's `dpone_snake` / `dpone_ident` normalization: Russian
/// transliterated, `-` and spaces as `_`, camelCase split, lower case,
/// other characters as `_`, runs of `_` collapsed (to one, or for
/// identifiers to at most two), no `_` at either end.
fn normalize(value: &str, keep_double: bool) -> String {
    let mut s = String::new();
    for c in value.chars() {
        match translit(c) {
            Some(t) => s.push_str(t),
            None if c == '-' || c == ' ' => s.push('_'),
            None => s.push(c),
        }
    }
    // camelCase -> camel_Case (before lower-casing)
    let chars: Vec<char> = s.chars().collect();
    let mut split = String::new();
    for (i, c) in chars.iter().enumerate() {
        if i > 0 && c.is_ascii_uppercase() && (chars[i - 1].is_ascii_lowercase() || chars[i - 1].is_ascii_digit()) {
            split.push('_');
        }
        split.push(*c);
    }
    let lower = split.to_lowercase();
    // other characters: one `_` per run
    let mut out = String::new();
    let mut in_other = false;
    for c in lower.chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' {
            out.push(c);
            in_other = false;
        } else if !in_other {
            out.push('_');
            in_other = true;
        }
    }
    // runs of `_` collapsed to one (identifiers: to at most two)
    let limit = if keep_double { 2 } else { 1 };
    let mut collapsed = String::new();
    let mut run = 0usize;
    for c in out.chars() {
        run = if c == '_' { run + 1 } else { 0 };
        if run <= limit {
            collapsed.push(c);
        }
    }
    collapsed.trim_matches('_').to_string()
}

pub fn snake(value: &str) -> String {
    normalize(value, false)
}

pub fn ident(value: &str) -> String {
    normalize(value, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    struct Vars(BTreeMap<String, Value>);

    impl Scope for Vars {
        fn lookup(&mut self, path: &[String]) -> Result<Option<Node>, TemplateError> {
            let mut v = match self.0.get(&path[0]) {
                Some(v) => Node { value: v.clone(), line: 1, column: 1 },
                None => return Ok(None),
            };
            for seg in &path[1..] {
                match v.get(seg) {
                    Some(n) => v = n.clone(),
                    None => return Ok(None),
                }
            }
            Ok(Some(v))
        }
        fn names(&self) -> Vec<String> {
            self.0.keys().cloned().collect()
        }
    }

    fn vars() -> Vars {
        let mut m = BTreeMap::new();
        m.insert("db".into(), Value::Str("Analytics".into()));
        m.insert("n".into(), Value::Int(7));
        m.insert("flag".into(), Value::Bool(true));
        let sink = crate::yaml::parse("strategy: {mode: replace}").unwrap();
        m.insert("sink".into(), sink.value);
        Vars(m)
    }

    fn r(s: &str) -> Result<Value, TemplateError> {
        let node = Node { value: Value::Str(s.into()), line: 3, column: 5 };
        Ok(render(&node, &mut vars())?.map(|n| n.value).unwrap_or(Value::Str(s.into())))
    }

    #[test]
    fn renders_names_paths_filters_and_keeps_types() {
        assert_eq!(r("{{ db }}_x").unwrap(), Value::Str("Analytics_x".into()));
        assert_eq!(r("{{ n }}").unwrap(), Value::Int(7));
        assert_eq!(r(" {{n}} ").unwrap(), Value::Int(7));
        assert_eq!(r("n={{ n }}").unwrap(), Value::Str("n=7".into()));
        assert_eq!(r("{{ flag }}!").unwrap(), Value::Str("True!".into()));
        assert_eq!(r("{{ sink.strategy.mode }}").unwrap(), Value::Str("replace".into()));
        assert_eq!(r("{{ db | lower }}").unwrap(), Value::Str("analytics".into()));
        assert_eq!(r("{{ missing | default('x') | upper }}").unwrap(), Value::Str("X".into()));
        assert_eq!(r("{{ '{{' }} raw").unwrap(), Value::Str("{{ raw".into()));
        assert_eq!(r("${db}/$${x}").unwrap(), Value::Str("Analytics/${x}".into()));
        assert_eq!(r("plain }} text").unwrap(), Value::Str("plain }} text".into()));
    }

    #[test]
    fn refuses_unknown_names_and_unsupported_jinja() {
        let e = r("{{ dbb }}").unwrap_err();
        assert_eq!(e.code.as_str(), "unknown_var");
        assert!(e.hint.contains("did you mean `db`?"), "{}", e.hint);
        assert_eq!(r("{{ sink.strategy.nope }}").unwrap_err().code.as_str(), "unknown_var");
        assert_eq!(r("${nope}").unwrap_err().code.as_str(), "unknown_var");
        assert_eq!(r("{% if x %}y{% endif %}").unwrap_err().code.as_str(), "unsupported_template");
        assert_eq!(r("{{ db | replace('a', 'b') }}").unwrap_err().code.as_str(), "unsupported_template");
        assert_eq!(r("{{ n + 1 }}").unwrap_err().code.as_str(), "unsupported_template");
        assert_eq!(r("{{ db").unwrap_err().code.as_str(), "invalid_template");
        assert_eq!(r("x {{ sink }}").unwrap_err().code.as_str(), "invalid_template");
    }

    #[test]
    fn naming_helpers_follow_the_original() {
        assert_eq!(snake("CoreCity-Discount commission"), "core_city_discount_commission");
        assert_eq!(snake("Заказы"), "zakazy");
        assert_eq!(snake("__a..b__"), "a_b");
        assert_eq!(ident("landing___orders__x"), "landing__orders__x");
        assert_eq!(snake("landing___orders__x"), "landing_orders_x");
    }
}
