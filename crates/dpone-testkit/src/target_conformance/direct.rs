//! The direct-publication checks of the conformance suite
//! ([`Target::publish_direct`], the protocol of
//! [`dpone_core::ports::DirectStep`]), for harnesses whose targets publish
//! directly: the engine's part is played by hand, one step at a time, and
//! the result is read through the fixture (the vendor's own view).

use super::checks::{described, ok, union};
use super::{RUN_ID, STANDARD_NAMES, TargetFixture, TargetHarness, filtered, new_window_rows, target_rows, window};
use crate::rows::{Row, digest_of, frame};
use dpone_core::identity::generation_table;
use dpone_core::ports::{DirectDriver, FrameRx, PublicationOutcome, TableRole, Target, direct_channel, frame_channel};
use dpone_core::types::ColumnType;
use futures_util::future::join;

/// Runs every direct check against fresh fixtures of `harness`.
pub async fn run_direct<H: TargetHarness>(harness: &H) {
    a_direct_publication_replaces_the_window(harness).await;
    an_undone_direct_chunk_leaves_nothing_of_it(harness).await;
    a_direct_publication_dropped_before_its_commit_changes_nothing(harness).await;
}

/// `rows` as one frame.
async fn frames(types: &[ColumnType], rows: &[Row]) -> FrameRx {
    let (tx, rx) = frame_channel(2);
    tx.send(frame(types, rows)).await.expect("the channel has room for the frame");
    rx
}

/// Loads `rows` as chunk `index` of the window and checks what the target
/// read back: as many rows as were sent, the digest of the rows.
async fn load_window(
    check: &str,
    driver: &DirectDriver,
    types: &[ColumnType],
    index: u32,
    rows: &[Row],
) -> dpone_core::ports::PendingChunk {
    let (loaded, pending) = ok(check, "load", driver.load(index, Some(window(true)), frames(types, rows).await).await);
    assert_eq!(loaded.written, rows.len() as u64, "[{check}] the load reports every row written");
    assert_eq!(loaded.contents.rows, rows.len() as u64, "[{check}] the read-back counts the window's rows");
    assert_eq!(loaded.contents.digest, digest_of(types, rows), "[{check}] the read-back's digest is the digest of the rows sent");
    pending
}

/// A fixture holding [`target_rows`], described, whose target publishes directly.
async fn direct_fixture<H: TargetHarness>(check: &str, h: &H) -> (H::Fixture, Vec<ColumnType>) {
    let f = h.fresh(STANDARD_NAMES).await;
    let types = described(check, &f).await;
    assert!(f.target().publishes_direct(), "[{check}] the harness's target publishes directly");
    f.insert_target_rows(&target_rows()).await;
    (f, types)
}

/// Publishes [`new_window_rows`] over [`target_rows`] as the window's one
/// chunk, after `undone` attempts of it that the engine judged wrong and
/// undid; checks the outcome and the target's rows. Returns the fixture,
/// the target's identity before and the generation's name.
async fn publish_window<H: TargetHarness>(check: &str, h: &H, undone: usize) -> (H::Fixture, Option<String>, String) {
    let (f, types) = direct_fixture(check, h).await;
    let before = ok(check, "identity", f.target().identity(TableRole::Target).await);
    let (generation, keep) = (generation_table("0123456789ab", RUN_ID, 1), window(false));
    let (mut driver, feed) = direct_channel();
    let engine = async {
        ok(check, "ready", driver.ready().await);
        for _ in 0..undone {
            load_window(check, &driver, &types, 0, &new_window_rows()).await.undo();
        }
        load_window(check, &driver, &types, 0, &new_window_rows()).await.keep();
        let _outside = ok(check, "commit", driver.commit(new_window_rows().len() as u64).await);
    };
    let (outcome, ()) = join(f.target().publish_direct(&generation, Some(&keep), feed), engine).await;
    assert_eq!(ok(check, "publish_direct", outcome), PublicationOutcome::Published, "[{check}] the publication reports itself");
    let kept = filtered(&target_rows(), &keep);
    assert_eq!(
        f.rows(TableRole::Target).await,
        union(&kept, &new_window_rows()),
        "[{check}] the target holds the kept rows and the new rows, once ({undone} attempt(s) undone)"
    );
    (f, before, generation)
}

pub async fn a_direct_publication_replaces_the_window<H: TargetHarness>(h: &H) {
    const C: &str = "a_direct_publication_replaces_the_window";
    let (f, before, generation) = publish_window(C, h, 0).await;
    let after = ok(C, "identity", f.target().identity(TableRole::Target).await);
    assert_eq!(after, Some(f.target().direct_identity(&generation)), "[{C}] the target's identity names the publication");
    assert_ne!(after, before, "[{C}] the identity changed with the publication");
    f.cleanup().await;
}

pub async fn an_undone_direct_chunk_leaves_nothing_of_it<H: TargetHarness>(h: &H) {
    let (f, _, _) = publish_window("an_undone_direct_chunk_leaves_nothing_of_it", h, 1).await;
    f.cleanup().await;
}

pub async fn a_direct_publication_dropped_before_its_commit_changes_nothing<H: TargetHarness>(h: &H) {
    const C: &str = "a_direct_publication_dropped_before_its_commit_changes_nothing";
    let (f, types) = direct_fixture(C, h).await;
    let before = ok(C, "identity", f.target().identity(TableRole::Target).await);
    let generation = generation_table("0123456789ab", RUN_ID, 1);
    let (mut driver, feed) = direct_channel();
    let engine = async move {
        ok(C, "ready", driver.ready().await);
        load_window(C, &driver, &types, 0, &new_window_rows()).await.keep();
        // The run stops here: its end of the feed goes away, no Commit.
        drop(driver);
    };
    let (outcome, ()) = join(f.target().publish_direct(&generation, Some(&window(false)), feed), engine).await;
    assert!(outcome.is_err(), "[{C}] a publication whose feed ended before its commit reports an error: {outcome:?}");
    assert_eq!(f.rows(TableRole::Target).await, crate::rows::multiset(target_rows()), "[{C}] the target's rows are as before");
    assert_eq!(ok(C, "identity", f.target().identity(TableRole::Target).await), before, "[{C}] the identity is as before");
    f.cleanup().await;
}
