//! `MemTarget` passes the target conformance suite in each publication
//! model, and the suite bites: a target that breaks a check fails it.

use dpone_testkit::mem_target::Publication;
use dpone_testkit::target_conformance::{self, MemDirectHarness, MemHarness};

#[tokio::test]
async fn mem_target_exchange_conforms() {
    target_conformance::run_all(&MemHarness { model: Publication::Exchange }).await;
}

#[tokio::test]
async fn mem_target_in_place_receipt_conforms() {
    target_conformance::run_all(&MemHarness { model: Publication::InPlaceReceipt }).await;
}

#[tokio::test]
async fn mem_target_in_place_digest_conforms() {
    target_conformance::run_all(&MemHarness { model: Publication::InPlaceDigest }).await;
}

#[tokio::test]
async fn mem_target_direct_publication_conforms() {
    target_conformance::run_direct(&MemDirectHarness).await;
}

/// A direct publication whose read-back differs from what was sent (a
/// trigger of the target adds a row) fails the suite.
#[tokio::test]
#[should_panic(expected = "[a_direct_publication_replaces_the_window] the read-back counts the window's rows")]
async fn the_direct_checks_bite() {
    struct AddsARow;
    impl target_conformance::TargetHarness for AddsARow {
        type Fixture = target_conformance::MemFixture;
        fn caps(&self) -> target_conformance::Caps {
            target_conformance::Caps::FULL
        }
        async fn fresh(&self, names: target_conformance::ColumnNames) -> Self::Fixture {
            let f = MemDirectHarness.fresh(names).await;
            f.target.set_direct_tamper(true);
            f
        }
    }
    target_conformance::run_direct(&AddsARow).await;
}

/// A harness claiming a guard its target lacks.
struct Overclaiming(MemHarness);

impl target_conformance::TargetHarness for Overclaiming {
    type Fixture = target_conformance::MemFixture;

    fn caps(&self) -> target_conformance::Caps {
        target_conformance::Caps::FULL
    }

    async fn fresh(&self, names: target_conformance::ColumnNames) -> Self::Fixture {
        let f = self.0.fresh(names).await;
        // The guard broken: compare_kept reports 0 whatever changed.
        f.target.set_compare_kept_gap(true);
        f
    }
}

#[tokio::test]
#[should_panic(expected = "[compare_kept_sees_a_changed_kept_row] a kept row changed after the build")]
async fn the_suite_fails_a_target_whose_compare_kept_misses_a_change() {
    use target_conformance::TargetHarness;
    let h = Overclaiming(MemHarness { model: Publication::InPlaceReceipt });
    assert!(h.caps().compare_kept_detects_changes);
    target_conformance::compare_kept_sees_a_changed_kept_row(&h).await;
}

/// A harness declaring a compare_kept gap for a target without it (a fixed adapter).
struct Fixed(MemHarness);

impl target_conformance::TargetHarness for Fixed {
    type Fixture = target_conformance::MemFixture;

    fn caps(&self) -> target_conformance::Caps {
        target_conformance::Caps { compare_kept_detects_changes: false }
    }

    async fn fresh(&self, names: target_conformance::ColumnNames) -> Self::Fixture {
        let f = self.0.fresh(names).await;
        f.target.set_compare_kept_gap(false);
        f
    }
}

#[tokio::test]
#[should_panic(expected = "documented gap")]
async fn the_suite_fails_a_gap_flag_once_the_gap_is_fixed() {
    target_conformance::compare_kept_sees_a_changed_kept_row(&Fixed(MemHarness { model: Publication::InPlaceReceipt })).await;
}
