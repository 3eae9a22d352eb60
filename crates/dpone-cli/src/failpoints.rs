//! Test switches of the command line, compiled only into test builds
//! (cargo feature `failpoints`, which `cargo test` enables through this
//! package's dev-dependency on itself). A release build has neither the
//! code nor the environment variables:
//!
//! - `DPONE_FAILPOINT=<name>[:<n>]`: at the `n`-th hit (default 1) of abort
//!   point `name` the process aborts (no destructors, no cleanup: the
//!   closest a test gets to `kill -9`); `lease.stop_renewal` stops the
//!   lease's renewal instead;
//! - `DPONE_TARGET_FAULTS=<op>:<kind>[:<n>],...`: faults of the target's
//!   operations (`publish:ack_lost:1`, `load:timeout:2`, ...), injected by
//!   `dpone_testkit::FaultyTarget` around every target (see `adapters.rs`);
//! - `DPONE_FAILPOINT_SLEEP=<name>:<ms>`: pause at every hit of `name`;
//!   with `DPONE_FAILPOINT_PAUSED=<file>`, the file is written (the point's
//!   name) as each pause begins, so a test knows the run is inside it;
//! - `DPONE_TEST_LEASE_TTL_MS=<ms>`: a short lease, to exercise expiry;
//! - `DPONE_TEST_LEGACY_AUTHORITY=1`: the sources' change authorities
//!   without what they gained in issue 43 (the fingerprints' scope: the
//!   catalog, relations, cluster, patch parts, mutations and metadata),
//!   so that a test proves each new ingredient is what detects an edit,
//!   and that the content audit catches the edit without it.

use dpone_core::failpoint::{Action, Failpoints, Injector};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug)]
struct EnvInjector {
    armed: Option<(String, u64)>,
    hits: AtomicU64,
    sleep: Option<(String, u64)>,
    /// Written as each pause begins.
    paused_marker: Option<std::path::PathBuf>,
}

impl Injector for EnvInjector {
    fn at(&self, point: &str) -> Option<Action> {
        if let Some((name, ms)) = &self.sleep
            && name == point
        {
            if let Some(marker) = &self.paused_marker {
                let _ = std::fs::write(marker, point);
            }
            return Some(Action::Pause(std::time::Duration::from_millis(*ms)));
        }
        let (name, at) = self.armed.as_ref()?;
        if name != point || self.hits.fetch_add(1, Ordering::SeqCst) + 1 != *at {
            return None;
        }
        eprintln!("dpone: failpoint {point} fired");
        if dpone_core::failpoint::is_fault(point) {
            return Some(Action::Fault);
        }
        eprintln!("dpone: aborting the process at {point}");
        std::process::abort();
    }
}

/// The failpoints the environment asks for (none when unset).
pub fn from_env() -> Failpoints {
    let armed = std::env::var("DPONE_FAILPOINT").ok().filter(|v| !v.is_empty()).map(|spec| match spec.split_once(':') {
        Some((n, k)) => (n.to_string(), k.parse().unwrap_or(1)),
        None => (spec, 1),
    });
    let sleep = std::env::var("DPONE_FAILPOINT_SLEEP").ok().and_then(|v| {
        let (n, ms) = v.split_once(':')?;
        Some((n.to_string(), ms.parse().ok()?))
    });
    if armed.is_none() && sleep.is_none() {
        return Failpoints::default();
    }
    let paused_marker = std::env::var_os("DPONE_FAILPOINT_PAUSED").filter(|v| !v.is_empty()).map(std::path::PathBuf::from);
    Failpoints::new(Arc::new(EnvInjector { armed, hits: AtomicU64::new(0), sleep, paused_marker }))
}

/// The lease TTL the environment asks for.
pub fn lease_ttl_ms() -> Option<u64> {
    std::env::var("DPONE_TEST_LEASE_TTL_MS").ok().and_then(|v| v.parse().ok())
}

/// The source, with its change authority as before issue 43 when the
/// environment asks for it (`DPONE_TEST_LEGACY_AUTHORITY=1`).
pub fn legacy_authority(kind: crate::registry::SourceKind) -> crate::registry::SourceKind {
    use crate::registry::SourceKind;
    if std::env::var("DPONE_TEST_LEGACY_AUTHORITY").ok().as_deref() != Some("1") {
        return kind;
    }
    match kind {
        SourceKind::Postgres(s) => SourceKind::Postgres(s.with_legacy_authority(true)),
        SourceKind::Clickhouse(s) => SourceKind::Clickhouse(s.with_legacy_authority(true)),
        other => other,
    }
}
