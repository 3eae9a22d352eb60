//! The adapters this runtime has: one line per adapter.
//!
//! Each line names a variant and an adapter type implementing
//! `dpone_core::adapter::SourceAdapter` or `TargetAdapter` (its descriptor
//! and how it builds itself from a manifest). [`registry!`] makes of them
//! the [`REGISTRY`] the plan and the manifest loader read routes from,
//! the `SourceKind` / `TargetKind` enums `adapters.rs` wraps, their
//! builders, and their forwarding of every port call to the chosen
//! adapter (`dpone_core::forward_source!` / `forward_target!`). No
//! vendor logic lives here: a new target is its crate plus one line.

macro_rules! registry {
    // The enum of one side's adapters and its builder from the manifest.
    (@side $kind:ident, $adapter:ident, $side:ident, $what:literal, $($v:ident: $t:ty),*) => {
        // Built once per run and shared through an Arc: the variants' sizes do not matter.
        #[allow(clippy::large_enum_variant)]
        pub enum $kind {
            $($v($t)),*
        }

        impl $kind {
            #[doc = concat!("The adapter of `manifest.", stringify!($side), "` (None: no adapter ", $what, " its system).")]
            pub fn build(
                manifest: &dpone_core::manifest::Manifest,
                wiring: &dpone_core::ports::Wiring,
            ) -> Option<Result<Self, dpone_core::Diagnostic>> {
                use dpone_core::adapter::$adapter;
                $(
                    if manifest.$side.system == <$t as $adapter>::DESCRIPTOR.system {
                        return Some(<$t as $adapter>::build(manifest, wiring).map($kind::$v));
                    }
                )*
                None
            }
        }
    };
    (sources { $($sv:ident: $st:ty),* $(,)? } targets { $($tv:ident: $tt:ty),* $(,)? }) => {
        registry!(@side SourceKind, SourceAdapter, source, "reads", $($sv: $st),*);
        registry!(@side TargetKind, TargetAdapter, sink, "writes", $($tv: $tt),*);

        /// The descriptors of the adapters, in the order of the lines.
        pub static REGISTRY: dpone_core::adapter::Registry = dpone_core::adapter::Registry {
            sources: &[$(<$st as dpone_core::adapter::SourceAdapter>::DESCRIPTOR),*],
            targets: &[$(<$tt as dpone_core::adapter::TargetAdapter>::DESCRIPTOR),*],
        };

        // Every port call is forwarded to the chosen variant's adapter.
        dpone_core::forward_source! { enum SourceKind { $($sv),* } }
        dpone_core::forward_target! { enum TargetKind { $($tv),* } }
    };
}

registry! {
    sources {
        Sqlite: dpone_sqlite::SqliteSource,
        Postgres: dpone_postgres::PostgresSource,
        Clickhouse: dpone_clickhouse::ClickhouseSource,
    }
    targets {
        Sqlite: dpone_sqlite::SqliteTarget,
        Postgres: dpone_postgres::PostgresTarget,
        Clickhouse: dpone_clickhouse::ClickhouseTarget,
    }
}

/// Makes [`REGISTRY`] the manifest loader's (before any manifest loads).
pub fn install() {
    dpone_core::adapter::install(&REGISTRY);
}

#[cfg(test)]
mod tests;
