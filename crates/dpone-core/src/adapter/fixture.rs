//! The routes of the runtime, as descriptors of this crate's tests: the
//! adapter crates' own descriptors are registered by the command line, which
//! this crate cannot see. Only systems, routes and method names matter here.

use super::{PublicationText, Registry, SourceDescriptor, TRANSACTIONAL_APPEND, TRANSACTIONAL_MERGE, TargetDescriptor};
use crate::manifest::System;

const SQLITE: System = System::new("sqlite", "SQLite");
const POSTGRES: System = System::new("postgres", "PostgreSQL");
const CLICKHOUSE: System = System::new("clickhouse", "ClickHouse");

static SQLITE_SOURCE: SourceDescriptor = SourceDescriptor::new(SQLITE, "sqlite rows");
static POSTGRES_SOURCE: SourceDescriptor = SourceDescriptor::new(POSTGRES, "postgres copy");
static CLICKHOUSE_SOURCE: SourceDescriptor = SourceDescriptor::new(CLICKHOUSE, "clickhouse rowbinary");

const fn target(system: System, accepts: &'static [System], method: &'static str) -> TargetDescriptor {
    TargetDescriptor {
        append: Some(TRANSACTIONAL_APPEND),
        merge: Some(TRANSACTIONAL_MERGE),
        ..TargetDescriptor::new(system, accepts, "staging", PublicationText { method, description: "" })
    }
}

static SQLITE_TARGET: TargetDescriptor = target(SQLITE, &[SQLITE], "sqlite_transaction");
static POSTGRES_TARGET: TargetDescriptor = target(POSTGRES, &[CLICKHOUSE], "serializable_transaction");
static CLICKHOUSE_TARGET: TargetDescriptor = TargetDescriptor {
    exchanges_tables: true,
    merge_policies: &["auto", "lightweight_delete_insert", "shadow_swap"],
    ..target(CLICKHOUSE, &[POSTGRES], "exchange_tables")
};

pub static REGISTRY: Registry = Registry {
    sources: &[&SQLITE_SOURCE, &POSTGRES_SOURCE, &CLICKHOUSE_SOURCE],
    targets: &[&SQLITE_TARGET, &POSTGRES_TARGET, &CLICKHOUSE_TARGET],
};
