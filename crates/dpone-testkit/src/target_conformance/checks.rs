//! The checks of the target conformance suite, one function each.
//!
//! Every check takes a fresh fixture, acts through the [`Target`] port,
//! looks at the result through the fixture (the vendor's own view) and
//! cleans up. A failure panics with the check's name.

use super::{
    ALIAS_LIKE_NAMES, DAY0, FOREIGN_RUN_ID, RUN_ID, STANDARD_NAMES, TargetFixture, TargetHarness, WINDOW_COLUMN, filtered, new_window_rows,
    row, standard_columns, target_rows, window,
};
use crate::rows::{Row, digest_of, frame, multiset, types_of};
use dpone_core::digest::RowDigest;
use dpone_core::identity::{backup_table, generation_table, staging_table};
use dpone_core::ports::{
    EligibilityRequest, ErrorClass, GenerationBuild, PublicationOutcome, Result, RowFilter, TableRole, Target, frame_channel,
};
use dpone_core::time::{MICROS_PER_DAY, Timestamp};
use dpone_core::types::ColumnType;
use std::collections::BTreeMap;

pub(crate) fn ok<T>(check: &str, what: &str, r: Result<T>) -> T {
    r.unwrap_or_else(|e| panic!("[{check}] {what} failed: {} ({}, {:?})", e.message, e.code, e.class))
}

/// Describes the target (every adapter needs it first); its column types.
pub(super) async fn described<F: TargetFixture>(check: &str, f: &F) -> Vec<ColumnType> {
    let cols = ok(check, "describe", f.target().describe().await).unwrap_or_else(|| panic!("[{check}] describe found no target table"));
    types_of(&cols)
}

/// Loads `batches` into `table`, one frame each; returns `load`'s result.
async fn load<T: Target>(target: &T, table: &str, types: &[ColumnType], batches: &[Vec<Row>]) -> Result<u64> {
    let (tx, rx) = frame_channel(batches.len() + 1);
    for b in batches {
        tx.send(frame(types, b)).await.expect("the channel has room for every frame");
    }
    drop(tx);
    target.load(table, rx).await
}

/// A staging table loaded with `rows` in one frame and verified (inspected),
/// as the engine verifies every staging table before a generation uses it.
pub(super) async fn staged<F: TargetFixture>(check: &str, f: &F, types: &[ColumnType], name: &str, rows: Vec<Row>) {
    ok(check, "create_staging", f.target().create_staging(name).await);
    let n = ok(check, "load", load(f.target(), name, types, std::slice::from_ref(&rows)).await);
    assert_eq!(n, rows.len() as u64, "[{check}] load reports the rows written");
    let c = ok(check, "inspect", f.target().inspect(TableRole::Owned(name), None).await);
    assert_eq!(c.rows, rows.len() as u64, "[{check}] inspect counts the staged rows");
}

fn stg(i: u32) -> String {
    staging_table(RUN_ID, i, 1)
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

pub(crate) fn union(a: &[Row], b: &[Row]) -> Vec<Row> {
    multiset(a.iter().chain(b).cloned())
}

pub async fn describe_reports_the_standard_schema<H: TargetHarness>(h: &H) {
    const C: &str = "describe_reports_the_standard_schema";
    let f = h.fresh(STANDARD_NAMES).await;
    let cols = ok(C, "describe", f.target().describe().await).unwrap_or_else(|| panic!("[{C}] describe found no target table"));
    let got: Vec<(String, String)> = cols.iter().map(|c| (c.name.clone(), c.ty.to_string())).collect();
    let want: Vec<(String, String)> = standard_columns().iter().map(|c| (c.name.clone(), c.ty.to_string())).collect();
    assert_eq!(got, want, "[{C}] the fixture's target has the standard columns and canonical types");
    f.cleanup().await;
}

pub async fn a_standard_target_is_eligible<H: TargetHarness>(h: &H) {
    const C: &str = "a_standard_target_is_eligible";
    let f = h.fresh(STANDARD_NAMES).await;
    described(C, &f).await;
    let w = window(true);
    let request = EligibilityRequest {
        source_columns: standard_columns(),
        window_column: Some(WINDOW_COLUMN.into()),
        window: Some((w.start, w.end)),
        owned_prefix: dpone_core::identity::OWNED_PREFIX.into(),
    };
    let refusals = ok(C, "eligibility", f.target().eligibility(&request).await);
    assert!(refusals.is_empty(), "[{C}] a standard target has no refusals, got {refusals:?}");
    f.cleanup().await;
}

pub async fn create_staging_makes_an_empty_table_once<H: TargetHarness>(h: &H) {
    const C: &str = "create_staging_makes_an_empty_table_once";
    let f = h.fresh(STANDARD_NAMES).await;
    described(C, &f).await;
    ok(C, "create_staging", f.target().create_staging(&stg(0)).await);
    assert!(f.table_exists(&stg(0)).await, "[{C}] the staging table exists");
    assert!(f.rows(TableRole::Owned(&stg(0))).await.is_empty(), "[{C}] a new staging table is empty");
    assert_eq!(ok(C, "count", f.target().count(TableRole::Owned(&stg(0)), None).await), 0);
    let err = f.target().create_staging(&stg(0)).await.expect_err("creating an existing staging table is an error");
    assert_eq!(err.class, ErrorClass::Permanent, "[{C}] an existing staging table is a permanent error: {}", err.message);
    let types = described(C, &f).await;
    assert_eq!(ok(C, "load", load(f.target(), &stg(0), &types, &[]).await), 0, "[{C}] a load without frames writes nothing");
    f.cleanup().await;
}

pub async fn staging_is_isolated<H: TargetHarness>(h: &H) {
    const C: &str = "staging_is_isolated";
    let f = h.fresh(STANDARD_NAMES).await;
    let types = described(C, &f).await;
    f.insert_target_rows(&target_rows()).await;
    ok(C, "create_staging", f.target().create_staging(&stg(0)).await);
    ok(C, "create_staging", f.target().create_staging(&stg(1)).await);
    ok(C, "load", load(f.target(), &stg(0), &types, &[new_window_rows()]).await);
    assert_eq!(f.rows(TableRole::Target).await, multiset(target_rows()), "[{C}] loading a staging table leaves the target unchanged");
    assert!(f.rows(TableRole::Owned(&stg(1))).await.is_empty(), "[{C}] loading one staging table leaves another empty");
    assert_eq!(f.rows(TableRole::Owned(&stg(0))).await, multiset(new_window_rows()), "[{C}] the staging table holds the loaded rows");
    f.cleanup().await;
}

pub async fn inspect_equals_the_frames_sent<H: TargetHarness>(h: &H) {
    const C: &str = "inspect_equals_the_frames_sent";
    let f = h.fresh(STANDARD_NAMES).await;
    let types = described(C, &f).await;
    ok(C, "create_staging", f.target().create_staging(&stg(0)).await);
    let all = union(&target_rows(), &new_window_rows());
    let batches: Vec<Vec<Row>> = all.chunks(3).map(<[Row]>::to_vec).collect();
    let mut sent = RowDigest::new(types.len());
    for b in &batches {
        sent.merge(&frame(&types, b).digest);
    }
    let written = ok(C, "load", load(f.target(), &stg(0), &types, &batches).await);
    assert_eq!(written, all.len() as u64, "[{C}] load reports every row of every frame");
    let c = ok(C, "inspect", f.target().inspect(TableRole::Owned(&stg(0)), None).await);
    assert_eq!(c.rows, all.len() as u64, "[{C}] inspect counts the rows sent");
    assert_eq!(c.digest, sent, "[{C}] inspect's digest (sum and NULL counts) equals the frames' digest");
    assert_eq!(c.digest, digest_of(&types, &all), "[{C}] the frames' digest is the digest of the rows");
    assert_eq!(ok(C, "count", f.target().count(TableRole::Owned(&stg(0)), None).await), all.len() as u64);
    assert_eq!(f.rows(TableRole::Owned(&stg(0))).await, all, "[{C}] the stored rows are the rows sent");
    f.cleanup().await;
}

pub async fn a_tampered_staged_row_changes_the_digest<H: TargetHarness>(h: &H) {
    const C: &str = "a_tampered_staged_row_changes_the_digest";
    let f = h.fresh(STANDARD_NAMES).await;
    let types = described(C, &f).await;
    staged(C, &f, &types, &stg(0), new_window_rows()).await;
    let before = ok(C, "inspect", f.target().inspect(TableRole::Owned(&stg(0)), None).await);
    f.tamper(TableRole::Owned(&stg(0)), 101).await;
    let after = ok(C, "inspect", f.target().inspect(TableRole::Owned(&stg(0)), None).await);
    assert_eq!(after.rows, before.rows, "[{C}] tampering changes a row in place");
    assert_ne!(after.digest, before.digest, "[{C}] inspect sees a staged row changed in place");
    f.cleanup().await;
}

pub async fn filters_split_inside_and_outside<H: TargetHarness>(h: &H) {
    const C: &str = "filters_split_inside_and_outside";
    let f = h.fresh(STANDARD_NAMES).await;
    let types = described(C, &f).await;
    f.insert_target_rows(&target_rows()).await;
    staged(C, &f, &types, &stg(0), target_rows()).await;
    let (inside, outside) = (window(true), window(false));
    for (role, label) in [(TableRole::Target, "the target"), (TableRole::Owned(&stg(0)), "a staging table")] {
        for filter in [&inside, &outside] {
            let want = filtered(&target_rows(), filter);
            let side = if filter.inside { "inside" } else { "outside" };
            let n = ok(C, "count", f.target().count(role, Some(filter)).await);
            assert_eq!(n, want.len() as u64, "[{C}] count of {label}'s rows {side} the window (NULL window values are outside)");
            let c = ok(C, "inspect", f.target().inspect(role, Some(filter)).await);
            assert_eq!(c.rows, want.len() as u64, "[{C}] inspect counts {label}'s rows {side} the window");
            assert_eq!(c.digest, digest_of(&types, &want), "[{C}] inspect digests exactly {label}'s rows {side} the window");
        }
        let all = ok(C, "count", f.target().count(role, None).await);
        assert_eq!(all, target_rows().len() as u64, "[{C}] an unfiltered count of {label}");
        // Several ranges in one call (a changed-window run's carried
        // chunks): each as its own inspect, an empty range included.
        let day = |d: i64| Timestamp(DAY0.0 + d * MICROS_PER_DAY);
        let ranges = [(day(0), day(1)), (day(1), day(2)), (day(5), day(6))];
        let each = ok(C, "inspect_ranges", f.target().inspect_ranges(role, WINDOW_COLUMN, &ranges).await);
        assert_eq!(each.len(), ranges.len(), "[{C}] inspect_ranges answers every range of {label}");
        for ((start, end), got) in ranges.iter().zip(each) {
            let want = filtered(&target_rows(), &RowFilter::new(WINDOW_COLUMN, *start, *end, true));
            assert_eq!(got.rows, want.len() as u64, "[{C}] inspect_ranges counts {label}'s rows of [{start}, {end})");
            assert_eq!(got.digest, digest_of(&types, &want), "[{C}] inspect_ranges digests {label}'s rows of [{start}, {end})");
        }
    }
    assert_eq!(filtered(&target_rows(), &outside).len(), 4, "the standard rows have 4 rows outside, 2 with NULL");
    f.cleanup().await;
}

pub async fn compare_kept_sees_a_changed_kept_row<H: TargetHarness>(h: &H) {
    const C: &str = "compare_kept_sees_a_changed_kept_row";
    let f = h.fresh(STANDARD_NAMES).await;
    let types = described(C, &f).await;
    f.insert_target_rows(&target_rows()).await;
    staged(C, &f, &types, &stg(0), new_window_rows()).await;
    let generation = generation_table("0123456789ab", RUN_ID, 1);
    let keep = window(false);
    ok(C, "build_generation", f.target().build_generation(&generation, Some(&keep), &[stg(0)]).await);
    assert_eq!(ok(C, "compare_kept", f.target().compare_kept(&generation, &keep).await), 0, "[{C}] nothing changed: 0 groups differ");
    let reconciles = f.target().reconciles_concurrent_writes();
    if reconciles {
        // A row another writer only added outside the window is no change
        // to the kept rows: the reconciliation after the publication carries it.
        f.insert_target_rows(&[row(900, Some(DAY0.0 - 2 * MICROS_PER_DAY), Some("added"), 1)]).await;
        assert_eq!(
            ok(C, "compare_kept", f.target().compare_kept(&generation, &keep).await),
            0,
            "[{C}] a target that reconciles concurrent writes: a row only added outside the window is no change"
        );
    }
    // Row 1 lies before the window: a kept row, changed by another writer.
    f.tamper(TableRole::Target, 1).await;
    let differing = ok(C, "compare_kept", f.target().compare_kept(&generation, &keep).await);
    if h.caps().compare_kept_detects_changes && reconciles {
        assert_eq!(differing, 1, "[{C}] a kept row changed after the build: the generation holds its old version more often");
    } else if h.caps().compare_kept_detects_changes {
        assert_eq!(differing, 2, "[{C}] a kept row changed after the build: its old and new versions differ in multiplicity");
    } else {
        assert_eq!(differing, 0, "[{C}] compare_kept reports 0 here; if it now detects changes, set Caps::compare_kept_detects_changes");
        // Such a target keeps its rows in place and compares them in its
        // publishing transaction, under its lock: that refuses.
        assert!(f.target().keeps_rows_in_place(), "[{C}] a target whose compare_kept detects nothing must compare its kept rows in place");
        let backup = backup_table(RUN_ID, 1);
        let refused =
            f.target().publish(&generation, Some(&keep), &backup).await.expect_err("a changed kept row refused by the publication");
        assert_eq!(refused.code, "kept_rows_changed", "[{C}] the publishing transaction refuses a changed kept row: {refused:?}");
        assert_eq!(ok(C, "count", f.target().count(TableRole::Target, None).await), target_rows().len() as u64, "[{C}] nothing published");
    }
    f.cleanup().await;
}

/// Checks what a build produced: the generation's rows and the count the
/// engine verifies for each kind of build.
async fn check_generation<F: TargetFixture>(check: &str, f: &F, build: &GenerationBuild, generation: &str, kept: &[Row], new: &[Row]) {
    let rows = f.rows(TableRole::Owned(generation)).await;
    let n = ok(check, "count", f.target().count(TableRole::Owned(generation), None).await);
    match build {
        GenerationBuild::Copied | GenerationBuild::Linked | GenerationBuild::PartitionsLinked(_) => {
            assert_eq!(rows, union(kept, new), "[{check}] a {build:?} generation holds the kept rows and the new rows");
            assert_eq!(n, (kept.len() + new.len()) as u64, "[{check}] count of a {build:?} generation");
        }
        GenerationBuild::WindowOnly | GenerationBuild::WindowOnlyView => {
            assert_eq!(rows, multiset(new.to_vec()), "[{check}] a {build:?} generation holds only the new rows");
            assert_eq!(n, new.len() as u64, "[{check}] count of a {build:?} generation");
        }
    }
}

pub async fn a_rebuilt_generation_replaces_the_previous_one<H: TargetHarness>(h: &H) {
    const C: &str = "a_rebuilt_generation_replaces_the_previous_one";
    let f = h.fresh(STANDARD_NAMES).await;
    let types = described(C, &f).await;
    f.insert_target_rows(&target_rows()).await;
    let new = new_window_rows();
    staged(C, &f, &types, &stg(0), new[..2].to_vec()).await;
    staged(C, &f, &types, &stg(1), new[2..].to_vec()).await;
    let generation = generation_table("0123456789ab", RUN_ID, 1);
    let keep = window(false);
    ok(C, "build_generation", f.target().build_generation(&generation, Some(&keep), &[stg(0)]).await);
    // A crash after the build; the resumed run builds again, from both chunks.
    let build = ok(C, "build_generation", f.target().build_generation(&generation, Some(&keep), &[stg(0), stg(1)]).await);
    check_generation(C, &f, &build, &generation, &filtered(&target_rows(), &keep), &new).await;
    if matches!(build, GenerationBuild::Linked | GenerationBuild::PartitionsLinked(_)) {
        let copied = ok(C, "inspect", f.target().inspect(TableRole::Owned(&generation), Some(&keep)).await);
        let kept = ok(C, "inspect", f.target().inspect(TableRole::Target, Some(&keep)).await);
        assert_eq!(copied, kept, "[{C}] the kept rows copied into a linked generation digest like the target's");
    }
    f.cleanup().await;
}

pub async fn publish_replaces_the_window<H: TargetHarness>(h: &H) {
    const C: &str = "publish_replaces_the_window";
    let f = h.fresh(STANDARD_NAMES).await;
    let types = described(C, &f).await;
    f.insert_target_rows(&target_rows()).await;
    staged(C, &f, &types, &stg(0), new_window_rows()).await;
    let (generation, backup) = (generation_table("0123456789ab", RUN_ID, 1), backup_table(RUN_ID, 1));
    let keep = window(false);
    let build = ok(C, "build_generation", f.target().build_generation(&generation, Some(&keep), &[stg(0)]).await);
    let kept = filtered(&target_rows(), &keep);
    check_generation(C, &f, &build, &generation, &kept, &new_window_rows()).await;
    let before = ok(C, "identity", f.target().identity(TableRole::Target).await);
    let gen_identity = ok(C, "identity", f.target().identity(TableRole::Owned(&generation)).await);
    assert!(gen_identity.is_some(), "[{C}] a built generation has an identity");
    assert_ne!(before, gen_identity, "[{C}] before publication the target's identity differs from the generation's");
    let outcome = ok(C, "publish", f.target().publish(&generation, Some(&keep), &backup).await);
    assert_eq!(outcome, PublicationOutcome::Published, "[{C}] publish reports the publication");
    assert_eq!(f.rows(TableRole::Target).await, union(&kept, &new_window_rows()), "[{C}] the target holds the kept rows and the new rows");
    let after = ok(C, "identity", f.target().identity(TableRole::Target).await);
    assert_eq!(after, gen_identity, "[{C}] the published target's identity is the generation's, recorded before publishing");
    f.cleanup().await;
}

pub async fn a_full_refresh_replaces_everything<H: TargetHarness>(h: &H) {
    const C: &str = "a_full_refresh_replaces_everything";
    let f = h.fresh(STANDARD_NAMES).await;
    let types = described(C, &f).await;
    f.insert_target_rows(&target_rows()).await;
    let new = new_window_rows();
    staged(C, &f, &types, &stg(0), new[..1].to_vec()).await;
    staged(C, &f, &types, &stg(1), new[1..].to_vec()).await;
    let (generation, backup) = (generation_table("0123456789ab", RUN_ID, 1), backup_table(RUN_ID, 1));
    let build = ok(C, "build_generation", f.target().build_generation(&generation, None, &[stg(0), stg(1)]).await);
    check_generation(C, &f, &build, &generation, &[], &new).await;
    let gen_identity = ok(C, "identity", f.target().identity(TableRole::Owned(&generation)).await);
    let outcome = ok(C, "publish", f.target().publish(&generation, None, &backup).await);
    assert_eq!(outcome, PublicationOutcome::Published);
    assert_eq!(f.rows(TableRole::Target).await, multiset(new), "[{C}] without kept rows the target holds exactly the new rows");
    assert_eq!(ok(C, "identity", f.target().identity(TableRole::Target).await), gen_identity, "[{C}] identity after a full refresh");
    f.cleanup().await;
}

pub async fn identities_tell_published_from_absent<H: TargetHarness>(h: &H) {
    const C: &str = "identities_tell_published_from_absent";
    let f = h.fresh(STANDARD_NAMES).await;
    let types = described(C, &f).await;
    f.insert_target_rows(&target_rows()).await;
    let missing = generation_table("0123456789ab", FOREIGN_RUN_ID, 9);
    assert_eq!(ok(C, "identity", f.target().identity(TableRole::Owned(&missing)).await), None, "[{C}] a missing table has no identity");
    staged(C, &f, &types, &stg(0), new_window_rows()).await;
    let (generation, backup) = (generation_table("0123456789ab", RUN_ID, 1), backup_table(RUN_ID, 1));
    let keep = window(false);
    let t0 = ok(C, "identity", f.target().identity(TableRole::Target).await);
    ok(C, "build_generation", f.target().build_generation(&generation, Some(&keep), &[stg(0)]).await);
    let g = ok(C, "identity", f.target().identity(TableRole::Owned(&generation)).await);
    assert!(g.is_some() && g != t0, "[{C}] the generation's identity ({g:?}) differs from the target's ({t0:?})");
    // Not published: exactly what the engine judges as "absent".
    assert_eq!(ok(C, "identity", f.target().identity(TableRole::Target).await), t0, "[{C}] building leaves the target's identity");
    assert_eq!(ok(C, "identity", f.target().identity(TableRole::Owned(&generation)).await), g, "[{C}] an identity is stable");
    ok(C, "publish", f.target().publish(&generation, Some(&keep), &backup).await);
    let t1 = ok(C, "identity", f.target().identity(TableRole::Target).await);
    assert!(t1 == g && t1 != t0, "[{C}] published: the target's identity ({t1:?}) is the generation's ({g:?}), not the old one ({t0:?})");
    f.cleanup().await;
}

pub async fn after_publication_keeps_the_target_and_one_backup<H: TargetHarness>(h: &H) {
    const C: &str = "after_publication_keeps_the_target_and_one_backup";
    let f = h.fresh(STANDARD_NAMES).await;
    let types = described(C, &f).await;
    f.insert_target_rows(&target_rows()).await;
    let keep = window(false);
    let mut expected = Vec::new();
    for execution in 1..=2u32 {
        let (s, generation, backup) =
            (staging_table(RUN_ID, 0, execution), generation_table("0123456789ab", RUN_ID, execution), backup_table(RUN_ID, execution));
        let mut new = new_window_rows();
        new.truncate(execution as usize + 1);
        staged(C, &f, &types, &s, new.clone()).await;
        ok(C, "build_generation", f.target().build_generation(&generation, Some(&keep), std::slice::from_ref(&s)).await);
        ok(C, "publish", f.target().publish(&generation, Some(&keep), &backup).await);
        let identity = ok(C, "identity", f.target().identity(TableRole::Target).await);
        ok(C, "after_publication", f.target().after_publication(&generation, &backup).await);
        ok(C, "after_publication (again)", f.target().after_publication(&generation, &backup).await);
        expected = union(&filtered(&target_rows(), &keep), &new);
        assert_eq!(f.rows(TableRole::Target).await, expected, "[{C}] housekeeping never changes the visible target");
        assert_eq!(ok(C, "identity", f.target().identity(TableRole::Target).await), identity, "[{C}] nor its identity");
        ok(C, "drop_tables", f.target().drop_tables(&[s, generation]).await);
    }
    let owned = ok(C, "owned_tables", f.target().owned_tables().await);
    let backups: Vec<&String> = owned.iter().filter(|t| t.starts_with("_dpone_bak_")).collect();
    assert!(backups.len() <= 1, "[{C}] at most the newest backup of a target is kept, found {backups:?}");
    assert!(!backups.iter().any(|b| **b == backup_table(RUN_ID, 1)), "[{C}] the older backup was dropped");
    assert_eq!(f.rows(TableRole::Target).await, expected);
    f.cleanup().await;
}

pub async fn drop_tables_drops_only_the_named_tables<H: TargetHarness>(h: &H) {
    const C: &str = "drop_tables_drops_only_the_named_tables";
    let f = h.fresh(STANDARD_NAMES).await;
    let types = described(C, &f).await;
    f.insert_target_rows(&target_rows()).await;
    staged(C, &f, &types, &stg(0), new_window_rows()).await;
    staged(C, &f, &types, &stg(1), new_window_rows()).await;
    let foreign = staging_table(FOREIGN_RUN_ID, 0, 1);
    f.create_foreign_owned_table(&foreign).await;
    f.create_unowned_table("user_table").await;
    let names = vec![stg(0), staging_table(RUN_ID, 7, 3)];
    ok(C, "drop_tables", f.target().drop_tables(&names).await);
    assert!(!f.table_exists(&stg(0)).await, "[{C}] a named table is dropped");
    assert_eq!(ok(C, "identity", f.target().identity(TableRole::Owned(&stg(0))).await), None, "[{C}] a dropped table has no identity");
    assert!(f.table_exists(&stg(1)).await, "[{C}] an unnamed table of the same run survives");
    assert!(f.table_exists(&foreign).await, "[{C}] another run's `_dpone_` table survives");
    assert!(f.table_exists("user_table").await, "[{C}] a table dpone does not own survives");
    assert_eq!(f.rows(TableRole::Target).await, multiset(target_rows()), "[{C}] the target survives unchanged");
    ok(C, "drop_tables (again)", f.target().drop_tables(&names).await);
    ok(C, "drop_tables (none)", f.target().drop_tables(&[]).await);
    f.cleanup().await;
}

pub async fn owned_tables_lists_only_dpone_tables<H: TargetHarness>(h: &H) {
    const C: &str = "owned_tables_lists_only_dpone_tables";
    let f = h.fresh(STANDARD_NAMES).await;
    described(C, &f).await;
    assert!(ok(C, "owned_tables", f.target().owned_tables().await).is_empty(), "[{C}] a fresh target has no owned tables");
    ok(C, "create_staging", f.target().create_staging(&stg(0)).await);
    let foreign = generation_table("0123456789ab", FOREIGN_RUN_ID, 1);
    f.create_foreign_owned_table(&foreign).await;
    f.create_unowned_table("user_table").await;
    let owned = sorted(ok(C, "owned_tables", f.target().owned_tables().await));
    assert_eq!(owned, sorted(vec![stg(0), foreign]), "[{C}] every `_dpone_` table, this run's or another's, and nothing else");
    f.cleanup().await;
}

pub async fn window_stats_count_the_window<H: TargetHarness>(h: &H) {
    const C: &str = "window_stats_count_the_window";
    let f = h.fresh(STANDARD_NAMES).await;
    described(C, &f).await;
    f.insert_target_rows(&target_rows()).await;
    let s = ok(C, "window_stats", f.target().window_stats(&window(true)).await);
    let day = |d: i64| Timestamp(super::DAY0.0 + d * MICROS_PER_DAY).to_canonical()[..10].to_string();
    let per_day: BTreeMap<String, u64> = [(day(0), 3), (day(1), 1)].into_iter().collect();
    let got = (s.total_rows, s.window_rows, s.outside_rows, s.null_window_rows);
    assert_eq!(got, (8, 4, 4, 2), "[{C}] (total, window, outside, NULL window) rows");
    assert_eq!(s.rows_per_utc_day, per_day, "[{C}] rows per UTC day of the window");
    assert_eq!(s.min, Some(super::DAY0), "[{C}] the window's smallest value (its start is inclusive)");
    assert_eq!(s.max, Some(Timestamp(super::DAY0.0 + MICROS_PER_DAY + 1_800_000_000)), "[{C}] the window's largest value");
    let empty = RowFilter { start: Timestamp(0), end: Timestamp(1), ..window(true) };
    let e = ok(C, "window_stats", f.target().window_stats(&empty).await);
    assert_eq!((e.total_rows, e.window_rows, e.outside_rows, e.null_window_rows), (8, 0, 8, 2), "[{C}] an empty window");
    assert!(e.rows_per_utc_day.is_empty() && e.min.is_none() && e.max.is_none(), "[{C}] an empty window has no days, min or max");
    f.cleanup().await;
}

pub async fn kept_rows_compare_whatever_the_column_names<H: TargetHarness>(h: &H) {
    const C: &str = "kept_rows_compare_whatever_the_column_names";
    let caps = h.caps();
    let f = h.fresh(ALIAS_LIKE_NAMES).await;
    let types = described(C, &f).await;
    // Row 0 lies outside the window; its id column is named `w`, and 0 is
    // what a sum of ids would add for it.
    let zero = super::row(0, None, None, 0);
    f.insert_target_rows(&target_rows()).await;
    f.insert_target_rows(std::slice::from_ref(&zero)).await;
    staged(C, &f, &types, &stg(0), new_window_rows()).await;
    let generation = generation_table("0123456789ab", RUN_ID, 1);
    let keep = window(false);
    ok(C, "build_generation", f.target().build_generation(&generation, Some(&keep), &[stg(0)]).await);
    let unchanged = ok(C, "compare_kept", f.target().compare_kept(&generation, &keep).await);
    assert_eq!(unchanged, 0, "[{C}] nothing changed: 0 groups differ, whatever the columns are called");
    // Another writer duplicates the kept row 0.
    f.insert_target_rows(&[zero]).await;
    let changed = ok(C, "compare_kept", f.target().compare_kept(&generation, &keep).await);
    if f.target().reconciles_concurrent_writes() {
        // An added row is carried after the publication, no change; the
        // kept row 0 changed is (its old version, held by the generation).
        assert_eq!(changed, 0, "[{C}] a kept row only duplicated is no change where concurrent writes are reconciled");
        f.tamper(TableRole::Target, 0).await;
        let changed = ok(C, "compare_kept", f.target().compare_kept(&generation, &keep).await);
        let want = if caps.compare_kept_detects_changes { 1 } else { 0 };
        assert_eq!(
            changed, want,
            "[{C}] a changed kept row is one group the generation holds more often (0 where compare_kept is a known gap)"
        );
    } else {
        let want = if caps.compare_kept_detects_changes { 1 } else { 0 };
        assert_eq!(changed, want, "[{C}] a duplicated kept row is one group of another multiplicity (0 where compare_kept is a known gap)");
    }
    f.cleanup().await;
}

pub async fn missing_tables_are_permanent_errors<H: TargetHarness>(h: &H) {
    const C: &str = "missing_tables_are_permanent_errors";
    let f = h.fresh(STANDARD_NAMES).await;
    let types = described(C, &f).await;
    f.insert_target_rows(&target_rows()).await;
    let missing = stg(9);
    let permanent = |what: &str, r: Result<()>| {
        let e = r.expect_err(what);
        assert_eq!(e.class, ErrorClass::Permanent, "[{C}] {what}: a missing table is a permanent error ({})", e.message);
    };
    permanent("inspect", f.target().inspect(TableRole::Owned(&missing), None).await.map(|_| ()));
    permanent("count", f.target().count(TableRole::Owned(&missing), None).await.map(|_| ()));
    permanent("load", load(f.target(), &missing, &types, &[new_window_rows()]).await.map(|_| ()));
    let t0 = ok(C, "identity", f.target().identity(TableRole::Target).await);
    assert!(t0.is_some(), "[{C}] an existing target has an identity");
    let generation = generation_table("0123456789ab", RUN_ID, 1);
    let before = f.rows(TableRole::Target).await;
    let r = f.target().publish(&generation, Some(&window(false)), &backup_table(RUN_ID, 1)).await;
    let e = r.expect_err("publishing a generation that does not exist is an error");
    assert_eq!(e.class, ErrorClass::Permanent, "[{C}] publishing a missing generation is a permanent error ({})", e.message);
    assert_eq!(f.rows(TableRole::Target).await, before, "[{C}] a failed publication leaves the target's rows");
    assert_eq!(ok(C, "identity", f.target().identity(TableRole::Target).await), t0, "[{C}] and its identity");
    f.cleanup().await;
}
