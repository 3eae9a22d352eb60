//! `MemTarget` passes the target conformance suite in each publication
//! model, and the suite bites: a target that breaks a check fails it.

use dpone_testkit::mem_target::Publication;
use dpone_testkit::target_conformance::{self, MemDirectHarness, MemHarness, TargetHarness};

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
        async fn fresh(&self, names: target_conformance::ColumnNames) -> Self::Fixture {
            let f = MemDirectHarness.fresh(names).await;
            f.target.set_direct_tamper(true);
            f
        }
    }
    target_conformance::run_direct(&AddsARow).await;
}

/// A receipt-model `MemTarget` whose compare_kept has the gap or not
/// (`gap`: it reports 0 whatever changed), under a harness declaring
/// `detects` (`Caps::compare_kept_detects_changes`).
struct CompareKept {
    gap: bool,
    detects: bool,
}

impl target_conformance::TargetHarness for CompareKept {
    type Fixture = target_conformance::MemFixture;

    fn caps(&self) -> target_conformance::Caps {
        target_conformance::Caps { compare_kept_detects_changes: self.detects }
    }

    async fn fresh(&self, names: target_conformance::ColumnNames) -> Self::Fixture {
        let f = MemHarness { model: Publication::InPlaceReceipt }.fresh(names).await;
        f.target.set_compare_kept_gap(self.gap);
        f
    }
}

/// A harness claiming a guard its target lacks.
#[tokio::test]
#[should_panic(expected = "[compare_kept_sees_a_changed_kept_row] a kept row changed after the build")]
async fn the_suite_fails_a_target_whose_compare_kept_misses_a_change() {
    let h = CompareKept { gap: true, detects: true };
    assert_eq!(h.caps(), target_conformance::Caps::FULL);
    target_conformance::compare_kept_sees_a_changed_kept_row(&h).await;
}

/// A harness declaring that compare_kept detects nothing, for a target
/// whose publication does not compare the kept rows either: the suite
/// requires the publication's refusal.
#[tokio::test]
#[should_panic(expected = "a changed kept row refused by the publication")]
async fn the_suite_fails_a_target_that_compares_its_kept_rows_nowhere() {
    target_conformance::compare_kept_sees_a_changed_kept_row(&CompareKept { gap: true, detects: false }).await;
}

/// A harness declaring a compare_kept gap for a target without it (a fixed adapter).
#[tokio::test]
#[should_panic(expected = "if it now detects changes")]
async fn the_suite_fails_a_gap_flag_once_the_gap_is_fixed() {
    target_conformance::compare_kept_sees_a_changed_kept_row(&CompareKept { gap: false, detects: false }).await;
}
