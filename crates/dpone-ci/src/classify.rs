//! One conservative record per changed file.
//!
//! A file is `schedule_only` only when all of these hold:
//!
//! 1. it is modified in place: not added, deleted, renamed, copied, and its
//!    mode and type are unchanged;
//! 2. it is a YAML file (`.yaml`/`.yml`) within the size limit, valid UTF-8,
//!    and both versions parse with the manifest parser (depth limit, no
//!    anchors, aliases, merge keys or custom tags, no duplicate keys);
//! 3. both versions are the same kind of dpone document (`dpone.batch.v1`
//!    manifest or `dpone.schedules.v1` schedules file) and both validate;
//! 4. the normalized content without the schedule is equal (key order,
//!    quoting and comments do not matter), and
//! 5. the schedule really changed: the normalized cron expressions differ.
//!
//! A manifest whose non-schedule changes all lie in transport, type, staging
//! or recovery settings is `route_scoped` to its `source -> sink` route, when
//! the catalog has a smoke test for that route. Everything else is `broad`.
//! Labels, branch names and commit messages are never read.

use crate::catalog;
use crate::git::RawChange;
use crate::normalize::{self, DocKind, Normalized, Rejected, ScheduleEntry};
use dpone_core::Diagnostic;
use dpone_core::manifest::convention::preset_references;
use dpone_core::manifest::{PresetFile, Presets};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Largest file the classifier reads (the manifest parser's limit).
pub const MAX_FILE_BYTES: u64 = dpone_core::yaml::MAX_DOCUMENT_BYTES as u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileClass {
    ScheduleOnly,
    RouteScoped,
    Broad,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Modified,
    Added,
    Deleted,
    Renamed,
    Copied,
    ModeChanged,
    TypeChanged,
    Unmerged,
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    Manifest,
    Schedules,
    /// A YAML file that is not (or was not read as) a dpone document.
    Yaml,
    Other,
}

/// What part of a route a route-scoped change touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Aspect {
    Transport,
    Types,
    Staging,
    Recovery,
}

/// The classification of one changed file, with its reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_path: Option<String>,
    pub change: ChangeKind,
    pub old_mode: String,
    pub new_mode: String,
    pub file_kind: FileKind,
    pub class: FileClass,
    /// Stable machine-readable reason (see docs/ci.md).
    pub reason_code: String,
    pub reason: String,
    /// Field paths that differ (schedule fields included), when compared.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed_fields: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aspects: Vec<Aspect>,
}

/// A blob as the classifier sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    Text(String),
    TooLarge(u64),
    NotUtf8,
}

impl Content {
    pub fn from_blob(size: u64, bytes: Option<Vec<u8>>) -> Content {
        match bytes {
            None => Content::TooLarge(size),
            Some(b) if b.len() as u64 > MAX_FILE_BYTES => Content::TooLarge(b.len() as u64),
            Some(b) => String::from_utf8(b).map(Content::Text).unwrap_or(Content::NotUtf8),
        }
    }
}

/// The verdict on a file's content change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub file_kind: FileKind,
    pub class: FileClass,
    pub reason_code: String,
    pub reason: String,
    pub changed_fields: Vec<String>,
    pub routes: Vec<String>,
    pub aspects: Vec<Aspect>,
}

impl Verdict {
    fn broad(file_kind: FileKind, code: &str, reason: String) -> Verdict {
        Verdict {
            file_kind,
            class: FileClass::Broad,
            reason_code: code.into(),
            reason,
            changed_fields: vec![],
            routes: vec![],
            aspects: vec![],
        }
    }
}

pub fn is_yaml(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    lower.ends_with(".yaml") || lower.ends_with(".yml")
}

/// What a path that is not a dpone document is, for the reason text.
pub fn describe_path(path: &str) -> (&'static str, &'static str) {
    let name = path.rsplit('/').next().unwrap_or(path);
    let lower = path.to_ascii_lowercase();
    if lower.ends_with(".rs") {
        ("source_code", "Rust source code")
    } else if ["Cargo.toml", "Cargo.lock", "rust-toolchain", "rust-toolchain.toml", "build.rs", "clippy.toml", "rustfmt.toml"]
        .contains(&name)
        || lower.starts_with(".cargo/")
    {
        ("build_configuration", "build configuration")
    } else if lower.starts_with(".ci/") || lower.starts_with(".github/") || lower.starts_with("scripts/") || lower.ends_with(".sh") {
        ("ci_or_script", "a CI file or script")
    } else if lower.ends_with(".md") || lower.starts_with("docs/") {
        ("documentation", "documentation")
    } else {
        ("unknown_path", "a file the classifier does not know")
    }
}

fn change_kind(c: &RawChange) -> ChangeKind {
    match c.status {
        'M' if c.old_mode != c.new_mode => ChangeKind::ModeChanged,
        'M' => ChangeKind::Modified,
        'A' => ChangeKind::Added,
        'D' => ChangeKind::Deleted,
        'R' => ChangeKind::Renamed,
        'C' => ChangeKind::Copied,
        'T' => ChangeKind::TypeChanged,
        'U' => ChangeKind::Unmerged,
        _ => ChangeKind::Unknown,
    }
}

const REGULAR_FILE_MODES: [&str; 2] = ["100644", "100755"];

/// Classifies one entry of the tree diff; `read` returns a blob's content.
pub fn classify_change(c: &RawChange, read: impl FnMut(&str) -> Result<Content, Diagnostic>) -> Result<FileRecord, Diagnostic> {
    classify_change_with(c, read, |_, _| Ok(None))
}

/// Which version of a change a file is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Base,
    Head,
}

/// [`classify_change`], where `file_at` reads a file of the repository at
/// the base or head version by its path (None: no regular file there), so
/// that a manifest's convention preset files are read from the same
/// version as the manifest.
pub fn classify_change_with(
    c: &RawChange,
    mut read: impl FnMut(&str) -> Result<Content, Diagnostic>,
    mut file_at: impl FnMut(Side, &str) -> Result<Option<Content>, Diagnostic>,
) -> Result<FileRecord, Diagnostic> {
    let change = change_kind(c);
    let yaml = is_yaml(&c.path);
    let default_kind = if yaml { FileKind::Yaml } else { FileKind::Other };
    let verdict = match change {
        ChangeKind::Modified if !REGULAR_FILE_MODES.contains(&c.new_mode.as_str()) => Verdict::broad(
            default_kind,
            "not_a_regular_file",
            format!("`{}` is not a regular file (mode {}): a symlink or submodule is not a schedule", c.path, c.new_mode),
        ),
        ChangeKind::Modified if yaml => {
            let (base, head) = (read(&c.old_blob)?, read(&c.new_blob)?);
            let base_presets = presets_of(&c.path, &base, |p| file_at(Side::Base, p))?;
            let head_presets = presets_of(&c.path, &head, |p| file_at(Side::Head, p))?;
            classify_texts(&base, &head, &base_presets, &head_presets).unwrap_or_else(|v| v)
        }
        ChangeKind::Modified => {
            let (code, what) = describe_path(&c.path);
            Verdict::broad(
                FileKind::Other,
                code,
                format!("`{}` is {what}; only manifests and schedules files (.yaml/.yml) can narrow the checks", c.path),
            )
        }
        ChangeKind::Added => Verdict::broad(
            default_kind,
            "added",
            format!("`{}` was added; a new file has no base version to compare, so it is not schedule-only", c.path),
        ),
        ChangeKind::Deleted => {
            Verdict::broad(default_kind, "deleted", format!("`{}` was deleted; removing a file is never schedule-only", c.path))
        }
        ChangeKind::Renamed | ChangeKind::Copied => Verdict::broad(
            default_kind,
            if change == ChangeKind::Renamed { "renamed" } else { "copied" },
            format!(
                "`{}` was {} from `{}`; a moved file changes what refers to it, so it is not schedule-only",
                c.path,
                if change == ChangeKind::Renamed { "renamed" } else { "copied" },
                c.old_path.as_deref().unwrap_or("?")
            ),
        ),
        ChangeKind::ModeChanged => Verdict::broad(
            default_kind,
            "mode_changed",
            format!("the mode of `{}` changed from {} to {}; a mode change is not a schedule change", c.path, c.old_mode, c.new_mode),
        ),
        ChangeKind::TypeChanged => Verdict::broad(
            default_kind,
            "type_changed",
            format!("`{}` changed type (mode {} -> {}), e.g. to or from a symlink", c.path, c.old_mode, c.new_mode),
        ),
        ChangeKind::Unmerged | ChangeKind::Unknown => Verdict::broad(
            default_kind,
            "unknown_change",
            format!("git reports `{}` with status `{}`, which the classifier does not know", c.path, c.status),
        ),
    };
    Ok(FileRecord {
        path: c.path.clone(),
        previous_path: c.old_path.clone(),
        change,
        old_mode: c.old_mode.clone(),
        new_mode: c.new_mode.clone(),
        file_kind: verdict.file_kind,
        class: verdict.class,
        reason_code: verdict.reason_code,
        reason: verdict.reason,
        changed_fields: verdict.changed_fields,
        routes: verdict.routes,
        aspects: verdict.aspects,
    })
}

fn side_text<'a>(side: &str, c: &'a Content) -> Result<&'a str, Verdict> {
    match c {
        Content::Text(t) => Ok(t),
        Content::TooLarge(n) => Err(Verdict::broad(
            FileKind::Yaml,
            "too_large",
            format!("the {side} version is {n} bytes; files over {MAX_FILE_BYTES} bytes are not read, so the change cannot be narrowed"),
        )),
        Content::NotUtf8 => Err(Verdict::broad(FileKind::Yaml, "not_utf8", format!("the {side} version is not UTF-8 text"))),
    }
}

/// `name` (a preset a manifest at `manifest_path` names) as a path from the
/// repository's root; None when it is absolute or leaves the repository.
fn repo_path(manifest_path: &str, name: &str) -> Option<String> {
    if name.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = manifest_path.split('/').collect();
    parts.pop();
    for part in name.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

/// The preset files the manifest `content` (at `manifest_path`) names, as
/// `read` finds them in the same version. A name with no file there is left
/// out: normalizing reports it as `unknown_convention` (a broad change).
fn presets_of(
    manifest_path: &str,
    content: &Content,
    mut read: impl FnMut(&str) -> Result<Option<Content>, Diagnostic>,
) -> Result<Presets, Diagnostic> {
    let Content::Text(text) = content else { return Ok(Presets::new()) };
    let mut presets = Presets::new();
    for name in preset_references(text) {
        let Some(path) = repo_path(manifest_path, &name) else { continue };
        let file = match read(&path)? {
            None => continue,
            Some(Content::Text(text)) => PresetFile::Text { path, text },
            Some(Content::TooLarge(n)) => {
                PresetFile::Unreadable { path, reason: format!("it is {n} bytes; files over {MAX_FILE_BYTES} bytes are not read") }
            }
            Some(Content::NotUtf8) => PresetFile::Unreadable { path, reason: "it is not UTF-8 text".into() },
        };
        presets.insert(name, file);
    }
    Ok(presets)
}

fn normalized(side: &str, text: &str, presets: &Presets) -> Result<Normalized, Verdict> {
    normalize::normalize_with(text, presets).map_err(|r| match r {
        Rejected::Parse(d) => Verdict::broad(
            FileKind::Yaml,
            &format!("parse_error:{}", d.first_code()),
            format!("the {side} version cannot be read: {}", d.0.first().map(ToString::to_string).unwrap_or_default()),
        ),
        Rejected::NotDpone(why) => {
            Verdict::broad(FileKind::Yaml, "not_a_dpone_file", format!("the {side} version is YAML but not a dpone document: {why}"))
        }
        Rejected::Invalid(kind, d) => Verdict::broad(
            file_kind(kind),
            &format!("invalid:{}", d.first_code()),
            format!("the {side} version does not validate: {}", d.0.first().map(ToString::to_string).unwrap_or_default()),
        ),
    })
}

fn file_kind(k: DocKind) -> FileKind {
    match k {
        DocKind::Manifest => FileKind::Manifest,
        DocKind::Schedules => FileKind::Schedules,
        DocKind::Other => FileKind::Yaml,
    }
}

/// Classifies a YAML file modified in place from its two versions.
pub fn classify_modified(base: &Content, head: &Content) -> Verdict {
    match classify_texts(base, head, &Presets::new(), &Presets::new()) {
        Ok(v) | Err(v) => v,
    }
}

fn classify_texts(base: &Content, head: &Content, base_presets: &Presets, head_presets: &Presets) -> Result<Verdict, Verdict> {
    let (base_text, head_text) = (side_text("base", base)?, side_text("head", head)?);
    let (b, h) = (normalized("base", base_text, base_presets)?, normalized("head", head_text, head_presets)?);
    let kind = file_kind(h.kind);
    if b.kind != h.kind {
        return Err(Verdict::broad(kind, "kind_changed", "the document's kind changed".into()));
    }
    let schedule_fields: Vec<String> = schedule_changes(&b, &h, |s| &s.raw).into_iter().map(|(at, _, _)| at).collect();
    let really_changed = schedule_changes(&b, &h, |s| &s.normalized);
    let paths = normalize::diff_paths(&b.content, &h.content);
    if paths.is_empty() {
        let mut v = if !really_changed.is_empty() {
            Verdict {
                file_kind: kind,
                class: FileClass::ScheduleOnly,
                reason_code: "schedule_changed".into(),
                reason: format!(
                    "only the schedule changed ({}); every other field equals the base",
                    really_changed
                        .iter()
                        .map(|(at, from, to)| format!("{at}: {} -> {}", from.as_deref().unwrap_or("none"), to.as_deref().unwrap_or("none")))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
                changed_fields: vec![],
                routes: vec![],
                aspects: vec![],
            }
        } else if !schedule_fields.is_empty() {
            Verdict::broad(
                kind,
                "equivalent_schedule",
                "the schedule was rewritten to an equivalent one (the normalized cron expressions are equal): no schedule really changed, \
                 and a formatting-only change is not a schedule change"
                    .into(),
            )
        } else {
            Verdict::broad(
                kind,
                "formatting_only",
                "only comments, key order, quoting or layout changed: the parsed content equals the base, and a comment or formatting only \
                 change is not a schedule change"
                    .into(),
            )
        };
        v.changed_fields = schedule_fields;
        return Ok(v);
    }
    let mut changed_fields: Vec<String> = paths.iter().map(|p| p.join(".")).collect();
    changed_fields.extend(schedule_fields);
    if h.kind == DocKind::Schedules {
        let mut v = Verdict::broad(
            kind,
            "non_schedule_change",
            format!(
                "fields other than a schedule changed ({}); workloads, manifests or dependencies changed",
                paths.iter().map(|p| p.join(".")).collect::<Vec<_>>().join(", ")
            ),
        );
        v.changed_fields = changed_fields;
        return Err(v);
    }
    let mut aspects = Vec::new();
    let mut outside = Vec::new();
    for p in &paths {
        match aspect_of(p) {
            Ok(a) => aspects.push(a),
            Err(why) => outside.push(format!("{} ({why})", p.join("."))),
        }
    }
    aspects.sort();
    aspects.dedup();
    let route = h.route.clone().unwrap_or_default();
    let mut v = if !outside.is_empty() {
        Verdict::broad(kind, "non_schedule_change", format!("fields outside the route-scoped settings changed: {}", outside.join(", ")))
    } else if b.route != h.route || !catalog::has_route(&route) {
        Verdict::broad(
            kind,
            "no_route_smoke",
            format!("route settings changed, but the catalog has no smoke test for the route {route}; the broad set is selected"),
        )
    } else {
        Verdict {
            file_kind: kind,
            class: FileClass::RouteScoped,
            reason_code: "route_settings_changed".into(),
            reason: format!(
                "{} settings of the route {route} changed ({})",
                aspects.iter().map(|a| format!("{a:?}").to_lowercase()).collect::<Vec<_>>().join(", "),
                paths.iter().map(|p| p.join(".")).collect::<Vec<_>>().join(", ")
            ),
            changed_fields: vec![],
            routes: vec![route],
            aspects: aspects.clone(),
        }
    };
    v.changed_fields = changed_fields;
    Ok(v)
}

/// The schedule entries whose `field` differs: `(where, base, head)`.
fn schedule_changes(
    b: &Normalized,
    h: &Normalized,
    field: impl Fn(&ScheduleEntry) -> &String,
) -> Vec<(String, Option<String>, Option<String>)> {
    let at = |n: &Normalized| n.schedule.iter().map(|s| (s.at.clone(), field(s).clone())).collect::<BTreeMap<_, _>>();
    let (ba, ha) = (at(b), at(h));
    let keys: BTreeSet<&String> = ba.keys().chain(ha.keys()).collect();
    keys.into_iter().filter(|k| ba.get(*k) != ha.get(*k)).map(|k| (k.clone(), ba.get(k).cloned(), ha.get(k).cloned())).collect()
}

/// Which route aspect a changed manifest field belongs to, or why it makes
/// the change broad. Settings are listed one by one: a field added to the
/// manifest later is broad until it is classified here.
pub fn aspect_of(path: &[String]) -> Result<Aspect, &'static str> {
    let p: Vec<&str> = path.iter().map(String::as_str).collect();
    match p.as_slice() {
        ["source", "options", "native_transfer", "execution", "chunking", "checkpointing"] => Ok(Aspect::Recovery),
        ["runtime", "storage", "work_dir"] => Ok(Aspect::Recovery),
        ["source", "options", "native_transfer", "wire", _]
        | ["source", "options", "native_transfer", "execution", "transport" | "chunking" | "native_chunks", _]
        | ["source", "options", "batch_size"]
        | ["sink", "options", "clickhouse_bulk", _] => Ok(Aspect::Transport),
        // How a PostgreSQL target publishes (delete_insert / partition_swap / direct):
        // covered by that route's smoke and recovery suites.
        ["sink", "options", "postgres", "publication"] => Ok(Aspect::Recovery),
        ["source", "options", "columns"] => Ok(Aspect::Types),
        ["sink", "staging", "schema"] => Ok(Aspect::Staging),
        ["vars", ..] => Err("vars are substituted anywhere in the manifest"),
        ["source" | "sink", "connection", ..] => Err("a connection change is not reachable by a synthetic test"),
        ["sink", "strategy", ..] | ["source", "options", "incremental_column"] => {
            Err("strategy and window settings change interval derivation and publication")
        }
        ["source" | "sink", "table", ..] => Err("a table change selects other data"),
        ["source" | "sink", "type"] => Err("the route itself changed"),
        _ => Err("not a route-scoped setting"),
    }
}

#[cfg(test)]
mod tests;
