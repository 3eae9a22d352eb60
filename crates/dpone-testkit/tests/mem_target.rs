//! What each `MemTarget` model does beyond the shared suite: the behaviour
//! it copies from its real adapter where the three differ.

use dpone_core::identity::{backup_table, generation_table, staging_table};
use dpone_core::ports::{ErrorClass, FrameRx, GenerationBuild, Target, frame_channel};
use dpone_core::types::ColumnType;
use dpone_core::value::Value;
use dpone_testkit::faulty::TargetOp;
use dpone_testkit::mem_target::{MemTarget, Publication, RECEIPTS_TABLE};
use dpone_testkit::rows::{Row, frame, multiset, types_of};
use dpone_testkit::target_conformance::{RUN_ID, new_window_rows, standard_columns, target_rows, window};

async fn described(model: Publication) -> (MemTarget, Vec<ColumnType>) {
    let t = MemTarget::new(model, "events", standard_columns());
    t.insert_rows("events", &target_rows());
    t.describe().await.unwrap();
    (t, types_of(&standard_columns()))
}

/// A closed channel holding one frame per batch.
async fn frames(types: &[ColumnType], batches: &[Vec<Row>]) -> FrameRx {
    let (tx, rx) = frame_channel(batches.len() + 1);
    for b in batches {
        tx.send(frame(types, b)).await.unwrap();
    }
    rx
}

async fn stage(t: &MemTarget, types: &[ColumnType], name: &str, rows: Vec<Row>) {
    t.create_staging(name).await.unwrap();
    t.load(name, frames(types, &[rows]).await).await.unwrap();
    // The engine verifies every staging table before a generation uses it.
    t.inspect(dpone_core::ports::TableRole::Owned(name), None).await.unwrap();
}

#[tokio::test]
async fn exchange_swaps_object_ids_and_keeps_one_backup() {
    let (t, types) = described(Publication::Exchange).await;
    let (stg, generation, backup) = (staging_table(RUN_ID, 0, 1), generation_table("0123456789ab", RUN_ID, 1), backup_table(RUN_ID, 1));
    stage(&t, &types, &stg, new_window_rows()).await;
    let build = t.build_generation(&generation, Some(&window(false)), std::slice::from_ref(&stg)).await.unwrap();
    assert_eq!(build, GenerationBuild::Linked);
    let (target_id, gen_id) = (t.table_id("events").unwrap(), t.table_id(&generation).unwrap());
    t.publish(&generation, Some(&window(false)), &backup).await.unwrap();
    assert_eq!((t.table_id("events"), t.table_id(&generation)), (Some(gen_id), Some(target_id)), "EXCHANGE swaps the tables");
    assert_eq!(t.rows(&generation), multiset(target_rows()), "the generation's name now holds the previous target");
    t.after_publication(&generation, &backup).await.unwrap();
    assert!(!t.has_table(&generation));
    assert_eq!(t.table_id(&backup), Some(target_id), "the previous target is kept as the backup");
    assert_eq!(t.comment(&backup).as_deref(), Some("dpone backup of events"));
    assert!(t.owned_tables().await.unwrap().contains(&backup));
}

#[tokio::test]
async fn exchange_does_not_recheck_kept_rows_at_publication() {
    let (t, types) = described(Publication::Exchange).await;
    let (stg, generation) = (staging_table(RUN_ID, 0, 1), generation_table("0123456789ab", RUN_ID, 1));
    stage(&t, &types, &stg, new_window_rows()).await;
    t.build_generation(&generation, Some(&window(false)), std::slice::from_ref(&stg)).await.unwrap();
    t.delete_rows("events", |r| r[0] == Value::int(1));
    assert_eq!(t.compare_kept(&generation, &window(false)).await.unwrap(), 1, "compare_kept sees the deleted kept row");
    // ClickHouse's publish ignores `keep`: the engine's compare_kept is the guard.
    t.publish(&generation, Some(&window(false)), "bak").await.unwrap();
    assert!(t.target_rows().iter().any(|r| r[0] == Value::int(1)), "the generation's copy of the row was published");
}

#[tokio::test]
async fn receipt_generation_is_a_live_view_that_pins_its_stagings() {
    let (t, types) = described(Publication::InPlaceReceipt).await;
    assert!(t.keeps_rows_in_place());
    let (s0, s1, generation) = (staging_table(RUN_ID, 0, 1), staging_table(RUN_ID, 1, 1), generation_table("0123456789ab", RUN_ID, 1));
    let new = new_window_rows();
    stage(&t, &types, &s0, new[..2].to_vec()).await;
    stage(&t, &types, &s1, new[2..].to_vec()).await;
    let build = t.build_generation(&generation, Some(&window(false)), &[s0.clone(), s1.clone()]).await.unwrap();
    assert_eq!(build, GenerationBuild::WindowOnlyView);
    assert!(t.is_view(&generation));
    t.insert_rows(&s0, &new[..1]);
    assert_eq!(t.rows(&generation).len(), 5, "the view reads the stagings as they are now");
    let before = t.contents();
    let err = t.drop_tables(std::slice::from_ref(&s0)).await.unwrap_err();
    assert_eq!((err.class, err.code.as_str()), (ErrorClass::Permanent, "mem_dependent_objects"));
    assert_eq!(t.contents(), before, "a refused DROP drops nothing");
    t.drop_tables(&[s0.clone(), s1.clone(), generation.clone()]).await.unwrap();
    assert!(!t.has_table(&generation) && !t.has_table(&s0));
    let err = t.build_generation(&generation, None, &[s0]).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Permanent, "a view over a missing staging table cannot be created");
}

#[tokio::test]
async fn receipt_publication_deletes_the_window_and_writes_a_receipt() {
    let (t, types) = described(Publication::InPlaceReceipt).await;
    let (stg, generation) = (staging_table(RUN_ID, 0, 1), generation_table("0123456789ab", RUN_ID, 1));
    assert_eq!(t.identity(dpone_core::ports::TableRole::Target).await.unwrap().as_deref(), Some("receipt:none"));
    stage(&t, &types, &stg, new_window_rows()).await;
    t.build_generation(&generation, Some(&window(false)), std::slice::from_ref(&stg)).await.unwrap();
    // A kept row changed by another writer: seen by compare_kept, refused
    // by the publication, which changes nothing.
    t.update_rows("events", |r| {
        if r[0] == Value::int(6) {
            r[2] = Value::str("changed");
        }
    });
    assert_eq!(t.compare_kept(&generation, &window(false)).await.unwrap(), 2, "the changed kept row: its old and new groups");
    let before = t.contents();
    let err = t.publish(&generation, Some(&window(false)), "bak").await.unwrap_err();
    assert_eq!((err.kind, err.code.as_str()), (dpone_core::ports::ErrorKind::Verification, "kept_rows_changed"));
    assert_eq!(t.contents(), before, "a refused publication changes nothing");
    // Changed back: the publication goes through and leaves the kept rows in place.
    t.update_rows("events", |r| {
        if r[0] == Value::int(6) {
            r[2] = Value::str("null window");
        }
    });
    t.publish(&generation, Some(&window(false)), "bak").await.unwrap();
    assert!(t.target_rows().iter().any(|r| r[0] == Value::int(6)), "rows outside the window stay in place");
    assert_eq!(t.receipts().len(), 1);
    assert_eq!((t.receipts()[0].generation.as_str(), t.receipts()[0].rows), (generation.as_str(), 4));
    assert!(t.has_table(RECEIPTS_TABLE) && !t.owned_tables().await.unwrap().contains(&RECEIPTS_TABLE.to_string()));
    assert_eq!(t.identity(dpone_core::ports::TableRole::Target).await.unwrap(), Some(format!("receipt:{generation}")));
}

#[tokio::test]
async fn digest_publication_refuses_changed_kept_rows_and_changes_nothing() {
    let (t, types) = described(Publication::InPlaceDigest).await;
    let (stg, generation) = (staging_table(RUN_ID, 0, 1), generation_table("0123456789ab", RUN_ID, 1));
    stage(&t, &types, &stg, new_window_rows()).await;
    assert_eq!(t.build_generation(&generation, Some(&window(false)), std::slice::from_ref(&stg)).await.unwrap(), GenerationBuild::Copied);
    t.delete_rows("events", |r| r[0] == Value::int(7));
    let before = t.contents();
    let err = t.publish(&generation, Some(&window(false)), "bak").await.unwrap_err();
    assert_eq!((err.class, err.code.as_str()), (ErrorClass::Permanent, "kept_rows_changed"));
    assert_eq!(t.contents(), before, "the refused publication rolled back");
}

#[tokio::test]
async fn a_bad_frame_leaves_a_digest_staging_empty_and_others_partly_loaded() {
    for (model, kept) in [(Publication::InPlaceDigest, 0), (Publication::Exchange, 4), (Publication::InPlaceReceipt, 4)] {
        let (t, types) = described(model).await;
        let stg = staging_table(RUN_ID, 0, 1);
        t.create_staging(&stg).await.unwrap();
        let mut bad = frame(&types, &new_window_rows()[..1]);
        bad.bytes.bytes.push(0);
        let (tx, rx) = frame_channel(4);
        tx.send(frame(&types, &new_window_rows())).await.unwrap();
        tx.send(bad).await.unwrap();
        drop(tx);
        let err = t.load(&stg, rx).await.unwrap_err();
        assert_eq!(err.code, "invalid_frame", "{model:?}");
        assert_eq!(t.rows(&stg).len(), kept, "{model:?}: SQLite loads in one transaction, the servers frame by frame");
    }
}

#[tokio::test]
async fn a_new_handle_must_describe_first_and_the_log_shows_every_call() {
    let (t, types) = described(Publication::Exchange).await;
    let fresh = t.handle();
    let err = fresh.inspect(dpone_core::ports::TableRole::Target, None).await.unwrap_err();
    assert_eq!(err.code, "internal_error", "like every real adapter, a new process describes first");
    t.clear_calls();
    let stg = staging_table(RUN_ID, 0, 1);
    stage(&t, &types, &stg, new_window_rows()).await;
    t.count(dpone_core::ports::TableRole::Owned(&stg), None).await.unwrap();
    let ops: Vec<TargetOp> = t.calls().iter().map(|c| c.op).collect();
    assert_eq!(ops, vec![TargetOp::CreateStaging, TargetOp::Load, TargetOp::Inspect, TargetOp::Count]);
    assert_eq!(t.writes().len(), 2);
    assert_eq!(t.calls()[1].tables, vec![stg]);
}

#[tokio::test]
async fn a_missing_target_is_described_as_none_and_refused() {
    let t = MemTarget::without_table(Publication::InPlaceDigest, "events");
    assert_eq!(t.describe().await.unwrap(), None);
    let request = dpone_core::ports::EligibilityRequest {
        source_columns: standard_columns(),
        window_column: None,
        window: None,
        owned_prefix: "_dpone_".into(),
    };
    let refusals = t.eligibility(&request).await.unwrap();
    assert_eq!(refusals.iter().map(|d| d.code.as_str()).collect::<Vec<_>>(), vec!["target_missing"]);
}
