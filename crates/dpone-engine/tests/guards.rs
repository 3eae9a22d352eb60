//! Every guard fires: on each publication model, a run is tampered with at
//! a failpoint (a test injector that changes the fake target's tables
//! when the point is hit, then lets the run go on) and must end `failed`
//! with the guard's code, exit 1, the target's rows and identity unchanged.
//!
//! - after a chunk's load acknowledgement (`staging.after_ack`): a row of
//!   the staging table inserted, deleted or changed -> `staging_verification_failed`;
//! - after the generation build (`generation.after_build`): a row of the
//!   generation (for a view, of the staging table it reads) inserted,
//!   deleted or changed -> `generation_verification_failed`; a kept target
//!   row changed -> `kept_rows_changed`;
//! - right before the publishing call (`publish.before_exchange`, the
//!   intent recorded), on the models whose publishing transaction re-checks
//!   the kept rows: a kept target row changed -> `kept_rows_changed` from
//!   that transaction, a definite rollback (`failed`, tables dropped), even
//!   where the target's identity is its contents; the next run publishes.

mod world;

use dpone_core::failpoint::{Action, Failpoints, Injector};
use dpone_core::ports::{TableRole, Target};
use dpone_core::state::RunState;
use dpone_core::value::Value;
use dpone_engine::RunFailure;
use dpone_testkit::rows::Row;
use dpone_testkit::target_conformance::{DAY0, row};
use dpone_testkit::{MemTarget, Publication};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use world::World;

/// A change a test makes to the fake target's tables.
type Tamper = Box<dyn Fn(&MemTarget) + Send + Sync>;

/// At the first hit of `point`, applies the tamper; never stops the run.
struct TamperAt {
    point: &'static str,
    target: MemTarget,
    tamper: Tamper,
    done: AtomicBool,
}

impl std::fmt::Debug for TamperAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TamperAt({})", self.point)
    }
}

impl Injector for TamperAt {
    fn at(&self, point: &str) -> Option<Action> {
        if point == self.point && !self.done.swap(true, Ordering::SeqCst) {
            (self.tamper)(&self.target);
        }
        None
    }
}

/// The first table whose name starts with `prefix` and holds rows.
fn first_with_rows(t: &MemTarget, prefix: &str) -> String {
    t.tables()
        .into_iter()
        .filter(|n| n.starts_with(prefix) && !t.is_view(n))
        .find(|n| !t.rows(n).is_empty())
        .unwrap_or_else(|| panic!("no {prefix}* table with rows in {:?}", t.tables()))
}

/// The table holding the generation's new rows: the generation itself, or
/// for a view its first staging table.
fn generation_storage(t: &MemTarget) -> String {
    let generation = t.tables().into_iter().find(|n| n.starts_with("_dpone_gen_")).expect("a generation was built");
    if t.is_view(&generation) { first_with_rows(t, "_dpone_stg_") } else { generation }
}

fn extra_row() -> Row {
    row(777, Some(DAY0.0 + 7), Some("tampered in"), 1)
}

fn tampers(on: fn(&MemTarget) -> String) -> Vec<(&'static str, Tamper)> {
    vec![
        ("insert", Box::new(move |t: &MemTarget| t.insert_rows(&on(t), &[extra_row()]))),
        (
            "delete",
            Box::new(move |t: &MemTarget| {
                let table = on(t);
                let victim = t.rows(&table)[0].clone();
                let mut once = false;
                let n = t.delete_rows(&table, |r| {
                    let hit = !once && *r == victim;
                    once |= hit;
                    hit
                });
                assert_eq!(n, 1, "one row deleted from {table}");
            }),
        ),
        (
            "change",
            Box::new(move |t: &MemTarget| {
                let table = on(t);
                let mut once = false;
                let n = t.update_rows(&table, |r| {
                    if !once {
                        r[2] = Value::str("tampered");
                        once = true;
                    }
                });
                assert!(n >= 1, "one row of {table} changed");
            }),
        ),
    ]
}

/// The target's identity, as a new process sees it.
async fn target_identity(w: &World) -> Option<String> {
    let t = w.target.handle();
    t.describe().await.unwrap();
    t.identity(TableRole::Target).await.unwrap()
}

/// Runs `w` with the tamper at `point` and asserts the documented refusal;
/// the target must then hold `expected` (None: what it held before).
async fn assert_refused(w: &World, point: &'static str, what: &str, tamper: Tamper, code: &str) {
    assert_refused_leaving(w, point, what, tamper, code, None).await
}

async fn assert_refused_leaving(w: &World, point: &'static str, what: &str, tamper: Tamper, code: &str, expected: Option<Vec<Row>>) {
    let m = w.model.name();
    let identity = target_identity(w).await;
    let injector = TamperAt { point, target: w.target.clone(), tamper, done: AtomicBool::new(false) };
    let f: RunFailure = match w.run_with(Failpoints::new(Arc::new(injector))).await {
        Err(f) => f,
        Ok(r) => panic!("{m}: {what} at {point}: the run succeeded: {r:?}"),
    };
    assert_eq!(f.code, code, "{m}: {what} at {point}: {f}");
    assert_eq!((f.exit_code(), f.kind.status()), (1, "failed"), "{m}: {what} at {point}: {f}");
    assert_eq!(w.state(), Some(RunState::Failed), "{m}: {what} at {point}: journal");
    // A content identity changes with a tamper of the target itself.
    if expected.is_none() || w.model != Publication::InPlaceDigest {
        assert_eq!(target_identity(w).await, identity, "{m}: {what} at {point}: the target's identity");
    }
    let expected = expected.unwrap_or_else(|| w.target_before());
    assert_eq!(w.target.target_rows(), expected, "{m}: {what} at {point}: the target holds what it held before the publication");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_staging_table_is_refused_on_every_model() {
    for model in Publication::ALL {
        for (what, tamper) in tampers(|t| first_with_rows(t, "_dpone_stg_")) {
            let w = World::new(model);
            assert_refused(&w, "staging.after_ack", &format!("staging row {what}"), tamper, "staging_verification_failed").await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_generation_is_refused_on_every_model() {
    for model in Publication::ALL {
        for (what, tamper) in tampers(generation_storage) {
            let w = World::new(model);
            assert_refused(&w, "generation.after_build", &format!("generation row {what}"), tamper, "generation_verification_failed").await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_row_changed_after_the_build_is_refused_on_every_model() {
    for model in Publication::ALL {
        let w = World::new(model);
        let table = w.target.table().to_string();
        // Row 6 has a NULL window value: a kept row.
        let tamper: Tamper = Box::new(move |t: &MemTarget| {
            let n = t.update_rows(&table, |r| {
                if r[0] == Value::int(6) {
                    r[2] = Value::str("changed by another writer");
                }
            });
            assert_eq!(n, 1);
        });
        let changed = |r: &mut Row| {
            if r[0] == Value::int(6) {
                r[2] = Value::str("changed by another writer");
            }
        };
        let expected = dpone_testkit::rows::multiset(w.target_before().into_iter().map(|mut r| {
            changed(&mut r);
            r
        }));
        assert_refused_leaving(&w, "generation.after_build", "kept row change", tamper, "kept_rows_changed", Some(expected)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_row_changed_before_the_publishing_transaction_ends_the_run_failed() {
    // The exchange model does not re-check kept rows in its publication.
    for model in [Publication::InPlaceReceipt, Publication::InPlaceDigest] {
        let w = World::new(model);
        let m = model.name();
        let table = w.target.table().to_string();
        let change = |r: &mut Row| {
            if r[0] == Value::int(6) {
                r[2] = Value::str("changed by another writer");
            }
        };
        let tamper: Tamper = Box::new(move |t: &MemTarget| assert_eq!(t.update_rows(&table, change), 1));
        let expected = dpone_testkit::rows::multiset(w.target_before().into_iter().map(|mut r| {
            change(&mut r);
            r
        }));
        let what = "kept row change inside the publication";
        assert_refused_leaving(&w, "publish.before_exchange", what, tamper, "kept_rows_changed", Some(expected.clone())).await;
        let j = w.journal().expect("a journal");
        assert_eq!(j.publication, Some(dpone_core::ports::PublicationOutcome::Absent), "{m}: {what}: judged absent");
        assert!(w.owned_tables().iter().all(|t| t.starts_with("_dpone_bak_")), "{m}: {what}: tables dropped: {:?}", w.owned_tables());
        // The next run starts over and publishes the window over the kept
        // rows as the other writer left them.
        let report = w.run().await.unwrap_or_else(|f| panic!("{m}: the next run: {f}"));
        assert_eq!(report.status, "succeeded", "{m}");
        let kept = dpone_testkit::target_conformance::filtered(&expected, &dpone_testkit::target_conformance::window(false));
        let new = dpone_testkit::target_conformance::filtered(&w.source.rows(), &dpone_testkit::target_conformance::window(true));
        assert_eq!(w.target.target_rows(), dpone_testkit::rows::multiset(kept.into_iter().chain(new)), "{m}: the next run published");
    }
}
