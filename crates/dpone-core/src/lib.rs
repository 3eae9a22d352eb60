//! dpone core: everything that decides, nothing that does I/O.
//!
//! - [`manifest`]: YAML manifest -> validated [`manifest::Manifest`].
//! - [`types`], [`value`], [`rowbinary`]: the type model and the canonical
//!   row encoding.
//! - [`time`], [`window`]: fixed durations and rolling-window chunking.
//! - [`digest`]: the order-independent multiset digest of rows.
//! - [`plan`]: the pure plan a run executes, [`publication`]: how its rows
//!   become visible; [`evidence`]: what a run proves.
//! - [`adapter`]: what each adapter is (descriptors) and the registry the
//!   plan combines them from.
//! - [`audit`]: the content check of a window by both servers' digests.
//! - [`ports`]: the traits adapters implement; [`frames`]: the one frame
//!   assembly every source uses.
//!
//! Architecture invariant: this crate depends on no driver, runtime or file
//! system API. Adapters own vendor I/O; the CLI composes them.

pub mod adapter;
pub mod audit;
pub mod budget;
pub mod cron;
pub mod delivery;
pub mod digest;
pub mod error;
pub mod evidence;
pub mod failpoint;
pub mod frames;
pub mod identity;
pub mod incremental;
pub mod limits;
pub mod manifest;
pub mod partition;
pub mod plan;
pub mod ports;
pub mod publication;
pub mod rowbinary;
pub mod state;
pub mod time;
pub mod types;
pub mod url;
pub mod value;
pub mod window;
pub mod yaml;

pub use error::{Diagnostic, DiagnosticKind, Diagnostics};
