//! SQLite adapter: the embedded default source and target.
//!
//! A new user can run a whole pipeline with no server: SQLite file in,
//! SQLite file out, through the same ports and run phases as the server
//! routes (isolated staging per chunk attempt, read-back verification,
//! a replacement generation, one atomic publication in a single
//! transaction).
//!
//! - `config`: connection spec -> database path; how the adapters build
//!   themselves from a manifest.
//! - `descriptor`: [`SOURCE`] and [`TARGET`], what they are for the plan and
//!   the command line's registry (and the same-file check of a route).
//! - `types`: declared column types <-> canonical types, strict value conversion.
//! - `source`: [`SqliteSource`], one read transaction shared by every chunk.
//! - `sink`: [`SqliteTarget`].
//! - `state_store`: [`SqliteStateStore`], leases and fenced records of runs;
//! - `error`: rusqlite errors -> classified adapter errors.

mod config;
pub mod demo;
mod descriptor;
mod error;
mod sink;
mod source;
mod state_store;
mod types;

pub use config::{SqliteConfig, resolve_path};
pub use descriptor::{SOURCE, SYSTEM, TARGET};
pub use sink::{MARKS_TABLE, SqliteTarget};
pub use source::SqliteSource;
pub use state_store::SqliteStateStore;
pub use types::{map_declared_type, quote_ident, to_sql};
