//! PostgreSQL adapter.
//!
//! - `config`: connection spec -> `tokio_postgres::Config` (credentials
//!   never printed); how the adapters build themselves from a manifest;
//! - `descriptor`: [`SOURCE`] and [`TARGET`], what they are for the plan and
//!   the command line's registry, and the `sink.options.postgres` subtree;
//! - `audit`: `dpone audit`'s canonical row hash as SQL, source and target;
//! - `catalog`: column introspection and the PostgreSQL -> canonical type map;
//! - `transcode`: binary COPY -> RowBinary, exact, no allocation per value;
//! - `source`: [`PostgresSource`], snapshot-consistent chunk reads;
//! - `cursor`: an append's cursor maximum and batch predicate;
//! - `state_store`: [`PostgresStateStore`], leases and fenced records of
//!   runs shared by every host that reaches the database;
//! - `tls`: libpq's `sslmode` over rustls (the workspace's one provider);
//! - `error`: SQLSTATE -> transient / permanent.

mod audit;
pub mod catalog;
pub mod config;
mod cursor;
pub mod delivery;
mod descriptor;
pub mod encode;
mod error;
mod estimate;
pub mod sink;
pub mod source;
pub mod state_store;
pub mod tls;
pub mod transcode;

pub use descriptor::{SOURCE, SYSTEM, TARGET};
pub use sink::PostgresTarget;
pub use source::PostgresSource;
pub use state_store::PostgresStateStore;
