//! Adapter descriptors: what each adapter is, as data the plan combines.
//!
//! Each adapter crate exports a [`SourceDescriptor`] and/or a
//! [`TargetDescriptor`] (the system it reads or writes, its half of the
//! route's transport, the publications it makes, the sources it accepts,
//! a checker of its own `sink.options.<vendor>` subtree, how its
//! connection URL is assembled from component variables) and builds itself
//! from a manifest ([`SourceAdapter`], [`TargetAdapter`]). The command line
//! lists them in one [`Registry`]; [`crate::plan::Plan::build`] combines
//! the source's descriptor with the target's, and a route exists when the
//! target accepts the source. Nothing here performs I/O: a descriptor's
//! functions that look at files (`same_table`) live in its adapter crate.

use crate::error::Diagnostic;
use crate::manifest::schema::Field;
use crate::manifest::{Manifest, SinkSpec, System};
use crate::ports::{Source, Target, Wiring};
use crate::types::TypeMatrix;
use std::sync::OnceLock;

/// A connection URL assembled from the original's component variables:
/// `part("HOST")` is `DPONE_CONN_<ID>_HOST`, and so on (None: no URL).
pub type ComponentUrl = fn(part: &dyn Fn(&str) -> Option<String>) -> Option<String>;

/// Refusals of a target's own `sink.options.<vendor>` subtree (`chosen`:
/// this target is the manifest's sink; otherwise the subtree was given to
/// another target). It may choose the publication (e.g. PostgreSQL's
/// `publication: direct`).
pub type OptionCheck = fn(sink: &SinkSpec, chosen: bool, refusals: &mut Vec<Diagnostic>) -> Option<PublicationText>;

/// The fields of `sink.options` a target owns (e.g. `postgres`: an object
/// of its keys), declared with [`crate::manifest::schema`]'s builders.
pub type OptionFields = fn() -> Vec<Field>;

/// `source_is_target` by what the adapter knows of its files (e.g. two
/// SQLite paths naming one file); reads metadata only.
pub type SameTable = fn(manifest: &Manifest, wiring: &Wiring) -> Option<Diagnostic>;

/// A publication method and what it does, as `dpone plan` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicationText {
    pub method: &'static str,
    pub description: &'static str,
}

/// How a target that publishes in one transaction appends a batch.
pub const TRANSACTIONAL_APPEND: &str = "one transaction inserts the verified batch and moves the high-water mark (stored beside the target, in _dpone_marks) from the recorded old mark to the new one";
/// How a target that publishes in one transaction merges a batch.
pub const TRANSACTIONAL_MERGE: &str = "one transaction deletes the target rows whose unique_key is in the verified batch, inserts the batch's version of each key (the greatest cursor), checks that every batch key appears exactly once, and moves the high-water mark (in _dpone_marks) from the recorded old mark to the new one";

/// The merge policies of a target that merges in one transaction: the
/// original's `delete_insert` (and `auto`).
pub const TRANSACTIONAL_MERGE_POLICIES: &[&str] = &["auto", "delete_insert"];

/// What a source adapter is.
#[derive(Debug)]
pub struct SourceDescriptor {
    pub system: System,
    /// How rows leave it: the first half of the route's transport text.
    pub transport: &'static str,
    /// It reads incremental batches (a cursor range).
    pub reads_cursor: bool,
    /// `wire.source_native_format` applies to it.
    pub native_format: bool,
    pub component_url: ComponentUrl,
    /// The authority of its chunk fingerprints (`Source::chunk_fingerprints`),
    /// if it has one: `delivery: changed` is refused without.
    pub delivery_authority: Option<&'static str>,
}

/// What a target adapter is.
#[derive(Debug)]
pub struct TargetDescriptor {
    pub system: System,
    /// The source systems it is fed from (a route is a source it accepts).
    pub accepts: &'static [System],
    /// How rows arrive into staging: the second half of the transport text.
    pub transport: &'static str,
    /// How rows arrive when it publishes directly (no staging), if it can.
    pub direct_transport: Option<&'static str>,
    /// How it publishes a full refresh or a window.
    pub publication: PublicationText,
    /// How it publishes an incremental append (method `<publication>_append`), if it can.
    pub append: Option<&'static str>,
    /// How it publishes an incremental merge (method `<publication>_merge`), if it can.
    pub merge: Option<&'static str>,
    /// `overwrite_type: exchange` is honoured (it exchanges tables).
    pub exchanges_tables: bool,
    /// The original's `sink.strategy.merge_policy` names whose outcome is
    /// this target's merge (the others are refused at load, naming these).
    pub merge_policies: &'static [&'static str],
    /// The type mapping of the routes into it, for `dpone schema type-matrix`.
    pub type_matrix: Option<TypeMatrix>,
    /// The shape of its own `sink.options.<vendor>` subtrees, for the
    /// manifest's structural check and JSON Schema.
    pub options: OptionFields,
    pub check_options: OptionCheck,
    pub component_url: ComponentUrl,
    pub same_table: Option<SameTable>,
}

/// No `sink.options.<vendor>` subtree.
pub fn no_option_fields() -> Vec<Field> {
    Vec::new()
}

/// No vendor options of its own.
pub fn no_options(_: &SinkSpec, _: bool, _: &mut Vec<Diagnostic>) -> Option<PublicationText> {
    None
}

/// No URL from component variables.
pub fn no_component_url(_: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    None
}

impl SourceDescriptor {
    /// A source of `system` reading cursors, with no native format and no
    /// component URL; adapters override fields with `..`.
    pub const fn new(system: System, transport: &'static str) -> Self {
        SourceDescriptor {
            system,
            transport,
            reads_cursor: true,
            native_format: false,
            component_url: no_component_url,
            delivery_authority: None,
        }
    }
}

impl TargetDescriptor {
    /// A staging target of `system` fed by `accepts`, publishing as
    /// `publication`, with no incremental publication, no vendor options
    /// and no component URL; adapters override fields with `..`.
    pub const fn new(system: System, accepts: &'static [System], transport: &'static str, publication: PublicationText) -> Self {
        TargetDescriptor {
            system,
            accepts,
            transport,
            direct_transport: None,
            publication,
            append: None,
            merge: None,
            exchanges_tables: false,
            merge_policies: TRANSACTIONAL_MERGE_POLICIES,
            type_matrix: None,
            options: no_option_fields,
            check_options: no_options,
            component_url: no_component_url,
            same_table: None,
        }
    }
}

/// A source adapter that builds itself from `manifest.source` (no I/O:
/// connections open on use).
pub trait SourceAdapter: Source + Sized {
    const DESCRIPTOR: &'static SourceDescriptor;
    fn build(manifest: &Manifest, wiring: &Wiring) -> Result<Self, Diagnostic>;
}

/// A target adapter that builds itself from `manifest.sink`.
pub trait TargetAdapter: Target + Sized {
    const DESCRIPTOR: &'static TargetDescriptor;
    fn build(manifest: &Manifest, wiring: &Wiring) -> Result<Self, Diagnostic>;
}

/// The adapters a runtime has: the command line's one line per adapter.
#[derive(Debug)]
pub struct Registry {
    pub sources: &'static [&'static SourceDescriptor],
    pub targets: &'static [&'static TargetDescriptor],
}

impl Registry {
    pub fn source(&self, system: System) -> Option<&'static SourceDescriptor> {
        self.sources.iter().copied().find(|d| d.system == system)
    }

    pub fn target(&self, system: System) -> Option<&'static TargetDescriptor> {
        self.targets.iter().copied().find(|d| d.system == system)
    }

    /// The systems of its adapters (sources first), with repeats.
    pub fn systems(&self) -> impl Iterator<Item = System> + '_ {
        self.sources.iter().map(|s| s.system).chain(self.targets.iter().map(|t| t.system))
    }

    /// The source of `source` can feed the target of `sink`.
    pub fn feeds(&self, source: System, sink: System) -> bool {
        self.source(source).is_some() && self.target(sink).is_some_and(|t| t.accepts.contains(&source))
    }

    /// Every route, in the order of the sources.
    pub fn routes(&self) -> Vec<(System, System)> {
        let pairs = self.sources.iter().flat_map(|s| self.targets.iter().map(move |t| (s.system, t.system)));
        pairs.filter(|&(s, t)| self.feeds(s, t)).collect()
    }

    /// The routes publishing an incremental append (`merge`: merge), in
    /// the order of the targets.
    pub fn incremental_routes(&self, merge: bool) -> Vec<(System, System)> {
        let pairs = self.targets.iter().flat_map(|t| self.sources.iter().map(move |s| (s, t)));
        pairs
            .filter(|(s, t)| self.feeds(s.system, t.system) && s.reads_cursor && if merge { t.merge.is_some() } else { t.append.is_some() })
            .map(|(s, t)| (s.system, t.system))
            .collect()
    }

    /// What to tell a user whose route is not supported.
    pub fn supported_routes_hint(&self) -> String {
        let routes: Vec<String> = self.routes().iter().map(|(s, t)| format!("{s}->{t}")).collect();
        format!("supported routes: {}", routes.join(", "))
    }

    /// The system of a route that has no adapter at all (source side first).
    fn missing(&self, source: System, sink: System) -> Option<System> {
        let has = |s: System| self.source(s).is_some() || self.target(s).is_some();
        [source, sink].into_iter().find(|&s| !has(s))
    }

    /// `unsupported_route` (at `sink.type`) when no source of `source`
    /// feeds a target of `sink`. The manifest loader reports it before any
    /// other problem of the manifest: nothing else matters for a route that
    /// does not exist.
    pub fn route_refusal(&self, source: System, sink: System) -> Option<Diagnostic> {
        if self.feeds(source, sink) {
            return None;
        }
        let hint = match self.missing(source, sink) {
            Some(s) => format!("{} is not implemented in this runtime yet; {}", s.display_name(), self.supported_routes_hint()),
            None => self.supported_routes_hint(),
        };
        Some(
            Diagnostic::unsupported_route("sink.type", format!("the route {source} -> {sink} is not available in this runtime")).hint(hint),
        )
    }

    /// `unsupported_route` at `path` for a side whose system has no adapter.
    pub fn not_implemented(&self, path: &str, system: System) -> Diagnostic {
        let hint = if self.missing(system, system).is_some() {
            format!("{} is not implemented in this runtime yet", system.display_name())
        } else {
            self.supported_routes_hint()
        };
        Diagnostic::unsupported_route(path, format!("{system} is not supported here")).hint(hint)
    }

    /// `source_is_target` by file identity, when the target knows how.
    pub fn same_table(&self, manifest: &Manifest, wiring: &Wiring) -> Option<Diagnostic> {
        self.target(manifest.sink.system)?.same_table?(manifest, wiring)
    }
}

static INSTALLED: OnceLock<&'static Registry> = OnceLock::new();

/// Makes `registry` the one the manifest loader checks routes with (the
/// composition root calls it before loading; the first call wins).
pub fn install(registry: &'static Registry) {
    let _ = INSTALLED.set(registry);
}

/// The installed registry; without one the manifest loader admits every
/// route and [`crate::plan::Plan::build`] (given its registry) refuses.
pub fn installed() -> Option<&'static Registry> {
    // This crate's tests load manifests with the runtime's routes.
    #[cfg(test)]
    install(&fixture::REGISTRY);
    INSTALLED.get().copied()
}

#[cfg(test)]
pub(crate) mod fixture;
