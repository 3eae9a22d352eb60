//! The abort failpoints of `dpone_core::failpoint` and what a crash at each
//! leaves behind; declared at the crate root of the crash matrix
//! (`crash_matrix.rs`) and of `ch_postgres_recovery.rs`.
#![allow(dead_code)]

/// `point` as the `'static` name `dpone_core::failpoint::POINTS` declares.
fn declared(point: &str) -> &'static str {
    dpone_core::failpoint::POINTS.iter().find(|p| **p == point).expect("a declared point")
}

/// What a crash at an abort point leaves behind: the journal state that
/// `dpone status` reports, and whether the new data is already visible.
#[derive(Debug, Clone, Copy)]
pub struct CrashPoint {
    pub point: &'static str,
    pub state: &'static str,
    /// The publication (EXCHANGE / commit) happened before the abort.
    pub published: bool,
}

/// The journal state each abort point leaves, and whether the window was published.
pub fn crash_point(point: &str) -> CrashPoint {
    let (state, published) = match point {
        "plan.after_persist" => ("planned", false),
        "staging.before_write" | "staging.mid_stream" | "staging.after_ack" | "chunk.after_verify" | "checkpoint.after_write" => {
            ("staging", false)
        }
        // Every chunk verified: stage complete.
        "generation.after_build" | "publish.before_intent" => ("verified", false),
        "publish.before_exchange" => ("publishing", false),
        "publish.after_exchange" => ("publishing", true),
        "evidence.before_write" | "evidence.after_write" => ("published", true),
        "state.after_succeeded" => ("succeeded", true),
        other => panic!("`{other}` is not an abort failpoint"),
    };
    CrashPoint { point: declared(point), state, published }
}

/// [`crash_point`] of a direct publication (`postgres.publication:
/// direct`), whose chunks are loaded inside the publishing transaction:
/// nothing is journaled before the intent (a crash leaves `staging`), and
/// the points of staging tables and generations are never reached (None).
pub fn crash_point_direct(point: &str) -> Option<CrashPoint> {
    let state = match point {
        "staging.after_ack" | "checkpoint.after_write" | "generation.after_build" => return None,
        "publish.before_intent" => "staging",
        _ => return Some(crash_point(point)),
    };
    Some(CrashPoint { point: declared(point), state, published: false })
}

/// Simulated faults (no abort): a stopped lease renewal, a shortened wait.
pub fn is_simulated(point: &str) -> bool {
    dpone_core::failpoint::is_fault(point)
}

/// The abort failpoints `dpone_core::failpoint::POINTS` declares, in run order.
pub fn declared_abort_points() -> Vec<&'static str> {
    dpone_core::failpoint::POINTS.iter().copied().filter(|p| !is_simulated(p)).collect()
}
