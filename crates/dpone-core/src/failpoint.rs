//! Fault injection for crash tests.
//!
//! `DPONE_FAILPOINT=<name>[:<n>]` arms the failpoint `name` for its `n`-th
//! hit (default first). At an abort point ([`hit`]) the process aborts (no
//! destructors, no cleanup: the closest a test gets to `kill -9`); at a
//! simulated fault ([`fires`]) the caller injects the fault itself (a lost
//! acknowledgement, a stopped lease renewal). `DPONE_FAILPOINT_SLEEP=
//! <name>:<ms>` pauses at a point instead, to widen a race window.
//!
//! The environment is read once; unset, a failpoint costs one atomic load.
//! This is the only place `dpone-core` reads process state, and only for
//! tests. The names are listed in [`POINTS`] and documented in
//! docs/recovery.md.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Every failpoint, in run order.
pub const POINTS: &[&str] = &[
    "plan.after_persist",
    "staging.before_write",
    "staging.mid_stream",
    "staging.after_ack",
    "chunk.after_verify",
    "checkpoint.after_write",
    "generation.after_build",
    "publish.before_intent",
    "publish.before_exchange",
    "publish.after_exchange",
    "evidence.before_write",
    "evidence.after_write",
    "state.after_succeeded",
    // Simulated faults (the caller injects them).
    "clickhouse.exchange_ack_lost",
    "clickhouse.insert_ack_lost",
    "postgres.commit_ack_lost",
    "lease.stop_renewal",
];

struct Armed {
    name: String,
    at: u64,
    hits: AtomicU64,
}

fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let spec = std::env::var("DPONE_FAILPOINT").ok()?;
            let (name, at) = match spec.split_once(':') {
                Some((n, k)) => (n.to_string(), k.parse().unwrap_or(1)),
                None => (spec, 1),
            };
            Some(Armed { name, at, hits: AtomicU64::new(0) })
        })
        .as_ref()
}

/// Whether `name` is armed and this is its chosen hit.
pub fn fires(name: &str) -> bool {
    debug_assert!(POINTS.contains(&name), "unknown failpoint {name}");
    let fired = armed().is_some_and(|a| a.name == name && a.hits.fetch_add(1, Ordering::SeqCst) + 1 == a.at);
    if fired {
        eprintln!("dpone: failpoint {name} fired");
    }
    fired
}

/// How long to pause at `name` (`DPONE_FAILPOINT_SLEEP=<name>:<ms>`).
pub fn pause(name: &str) -> Option<std::time::Duration> {
    static SLEEP: OnceLock<Option<(String, u64)>> = OnceLock::new();
    let spec = SLEEP.get_or_init(|| {
        let v = std::env::var("DPONE_FAILPOINT_SLEEP").ok()?;
        let (n, ms) = v.split_once(':')?;
        Some((n.to_string(), ms.parse().ok()?))
    });
    spec.as_ref().filter(|(n, _)| n == name).map(|(_, ms)| std::time::Duration::from_millis(*ms))
}

/// Aborts the process if `name` is armed and this is its chosen hit.
pub fn hit(name: &str) {
    if fires(name) {
        eprintln!("dpone: aborting the process at {name}");
        std::process::abort();
    }
}
