//! Fault injection for crash tests.
//!
//! `DPONE_FAILPOINT=<name>[:<n>]` makes the process abort (no destructors,
//! no cleanup: the closest a test gets to `kill -9`) the `n`-th time (default
//! first) execution reaches the failpoint `name`. Unset, a failpoint is one
//! relaxed atomic load. The names are listed in [`POINTS`] and documented in
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

/// Aborts the process if `name` is armed and this is its chosen hit.
pub fn hit(name: &str) {
    debug_assert!(POINTS.contains(&name), "unknown failpoint {name}");
    if let Some(a) = armed()
        && a.name == name
        && a.hits.fetch_add(1, Ordering::SeqCst) + 1 == a.at
    {
        eprintln!("dpone: failpoint {name} reached: aborting the process");
        std::process::abort();
    }
}
