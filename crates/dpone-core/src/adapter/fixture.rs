//! The routes of the runtime, as descriptors of this crate's tests: the
//! adapter crates' own descriptors are registered by the command line, which
//! this crate cannot see. Only systems, routes and method names matter here.

use super::{PublicationText, Registry, SourceDescriptor, TRANSACTIONAL_APPEND, TRANSACTIONAL_MERGE, TargetDescriptor};
use crate::manifest::System::{Clickhouse, Postgres, Sqlite};

static SQLITE_SOURCE: SourceDescriptor = SourceDescriptor::new(Sqlite, "sqlite rows");
static POSTGRES_SOURCE: SourceDescriptor = SourceDescriptor::new(Postgres, "postgres copy");
static CLICKHOUSE_SOURCE: SourceDescriptor = SourceDescriptor::new(Clickhouse, "clickhouse rowbinary");

const fn target(system: crate::manifest::System, accepts: &'static [crate::manifest::System], method: &'static str) -> TargetDescriptor {
    TargetDescriptor {
        append: Some(TRANSACTIONAL_APPEND),
        merge: Some(TRANSACTIONAL_MERGE),
        ..TargetDescriptor::new(system, accepts, "staging", PublicationText { method, description: "" })
    }
}

static SQLITE_TARGET: TargetDescriptor = target(Sqlite, &[Sqlite], "sqlite_transaction");
static POSTGRES_TARGET: TargetDescriptor = target(Postgres, &[Clickhouse], "serializable_transaction");
static CLICKHOUSE_TARGET: TargetDescriptor =
    TargetDescriptor { exchanges_tables: true, ..target(Clickhouse, &[Postgres], "exchange_tables") };

pub static REGISTRY: Registry = Registry {
    sources: &[&SQLITE_SOURCE, &POSTGRES_SOURCE, &CLICKHOUSE_SOURCE],
    targets: &[&SQLITE_TARGET, &POSTGRES_TARGET, &CLICKHOUSE_TARGET],
};
