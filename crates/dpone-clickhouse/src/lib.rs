//! ClickHouse adapter.
//!
//! - `config`: connection settings (credentials kept out of URLs and logs);
//! - `client`: a small HTTP client with classified errors;
//! - `error`: server error codes -> transient / permanent / indeterminate;
//! - `sink`: [`ClickhouseTarget`], staging, verification, EXCHANGE publication.

pub mod client;
pub mod config;
pub mod error;
pub mod sink;
pub mod source;
pub mod transcode;

pub use client::{ChClient, Idempotence, WriteSummary, quote_ident, quote_str};
pub use config::ClickhouseConfig;
pub use sink::ClickhouseTarget;
pub use source::ClickhouseSource;
