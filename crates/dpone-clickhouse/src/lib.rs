//! ClickHouse adapter.
//!
//! - `config`: connection settings (credentials kept out of URLs and logs);
//!   how the adapters build themselves from a manifest;
//! - `descriptor`: [`SOURCE`] and [`TARGET`], what they are for the plan and
//!   the command line's registry, the URL of component variables, and the
//!   `sink.options.clickhouse_bulk` / `clickhouse` subtrees;
//! - `audit`: `dpone audit`'s canonical row hash as SQL (PostgreSQL's
//!   lookup3 in 32-bit arithmetic), source and target;
//! - `client`: a small HTTP client with classified errors;
//! - `error`: server error codes -> transient / permanent / indeterminate;
//! - `sink`: [`ClickhouseTarget`], staging, verification, EXCHANGE publication.

mod audit;
pub mod client;
pub mod config;
pub mod delivery;
mod descriptor;
pub mod error;
pub mod sink;
pub mod source;
pub mod transcode;

pub use client::{ChClient, Idempotence, WriteSummary, quote_ident, quote_str};
pub use config::ClickhouseConfig;
pub use descriptor::{SOURCE, SYSTEM, TARGET};
pub use sink::ClickhouseTarget;
pub use source::ClickhouseSource;

/// A refusal when the server cannot compute `digest`'s row hash
/// (`xxh3_128` is missing from old servers): found before any write, named
/// at the manifest path that chose the digest. `side` is "the source" or
/// "the target"; `version` the server's.
pub(crate) async fn digest_refusal(
    client: &ChClient,
    digest: dpone_core::digest::DigestAlgorithm,
    side: &str,
    version: &str,
) -> dpone_core::ports::Result<Option<dpone_core::Diagnostic>> {
    if digest == dpone_core::digest::DigestAlgorithm::Sha256 {
        return Ok(None);
    }
    let function = digest.clickhouse_function();
    let n = client.scalar(&format!("SELECT count() FROM system.functions WHERE name = {}", quote_str(function))).await?;
    if n.trim() != "0" {
        return Ok(None);
    }
    Ok(Some(
        dpone_core::Diagnostic::new(
            "digest_unsupported",
            "source.options.native_transfer.execution.verification.digest",
            format!(
                "{side} is ClickHouse {version}, which has no function `{function}`: it cannot compute the {} digest of the rows it holds",
                digest.name()
            ),
        )
        .hint("use `digest: sha256` (the default), or a ClickHouse server that has xxh3_128"),
    ))
}
