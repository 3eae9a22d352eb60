//! `FaultyTarget` fails the chosen call of the chosen method, once, and
//! performs the call only for a lost acknowledgement.

use dpone_core::identity::{generation_table, staging_table};
use dpone_core::ports::{ErrorClass, TableRole, Target, frame_channel};
use dpone_testkit::faulty::{Fault, FaultKind, FaultyTarget, TargetOp};
use dpone_testkit::mem_target::{MemTarget, Publication};
use dpone_testkit::rows::{frame, types_of};
use dpone_testkit::target_conformance::{self, MemHarness, RUN_ID, new_window_rows, standard_columns, target_rows, window};

async fn published_setup(faults: &str) -> (MemTarget, FaultyTarget<MemTarget>, String) {
    let mem = MemTarget::new(Publication::Exchange, "events", standard_columns());
    mem.insert_rows("events", &target_rows());
    let t = FaultyTarget::new(mem.clone(), Fault::parse_list(faults).unwrap());
    t.describe().await.unwrap();
    let (stg, generation) = (staging_table(RUN_ID, 0, 1), generation_table("0123456789ab", RUN_ID, 1));
    t.create_staging(&stg).await.unwrap();
    let (tx, rx) = frame_channel(2);
    tx.send(frame(&types_of(&standard_columns()), &new_window_rows())).await.unwrap();
    drop(tx);
    t.load(&stg, rx).await.unwrap();
    t.build_generation(&generation, Some(&window(false)), &[stg]).await.unwrap();
    (mem, t, generation)
}

#[tokio::test]
async fn a_lost_ack_performs_the_call_and_a_timeout_does_not() {
    let (mem, t, generation) = published_setup("publish:ack_lost:1").await;
    let gen_id = mem.table_id(&generation);
    let err = t.publish(&generation, Some(&window(false)), "bak").await.unwrap_err();
    assert_eq!((err.class, err.code.as_str()), (ErrorClass::Indeterminate, "injected_ack_lost"));
    assert!(err.message.contains("injected"), "{}", err.message);
    assert_eq!(mem.table_id("events"), gen_id, "the publication happened although its acknowledgement was lost");

    let (mem, t, generation) = published_setup("publish:timeout:1").await;
    let before = mem.contents();
    let err = t.publish(&generation, Some(&window(false)), "bak").await.unwrap_err();
    assert_eq!((err.class, err.code.as_str()), (ErrorClass::Indeterminate, "injected_timeout"));
    assert_eq!(mem.contents(), before, "a timed-out call did nothing");
    assert_eq!(mem.writes().last().map(|c| c.op), Some(TargetOp::BuildGeneration), "publish never reached the target");
}

#[tokio::test]
async fn faults_count_calls_per_method_and_fire_once() {
    let (_mem, t, _) = published_setup("count:transient:2,identity:permanent:1").await;
    assert!(t.count(TableRole::Target, None).await.is_ok());
    let err = t.count(TableRole::Target, None).await.unwrap_err();
    assert_eq!((err.class, err.code.as_str()), (ErrorClass::Transient, "injected_transient"));
    assert!(t.count(TableRole::Target, None).await.is_ok(), "a fault fires once");
    assert_eq!(t.identity(TableRole::Target).await.unwrap_err().class, ErrorClass::Permanent);
    assert!(t.identity(TableRole::Target).await.is_ok());
    assert_eq!(t.calls(TargetOp::Count), 3);
    assert_eq!(t.fired(), Fault::parse_list("count:transient:2,identity:permanent:1").unwrap());
    assert!(t.pending().is_empty());
}

#[tokio::test]
async fn a_load_that_is_not_performed_closes_the_channel() {
    let mem = MemTarget::new(Publication::InPlaceDigest, "events", standard_columns());
    let t = FaultyTarget::new(mem.clone(), vec![Fault::new(TargetOp::Load, FaultKind::Transient, 1)]);
    t.describe().await.unwrap();
    let stg = staging_table(RUN_ID, 0, 1);
    t.create_staging(&stg).await.unwrap();
    let (tx, rx) = frame_channel(1);
    assert_eq!(t.load(&stg, rx).await.unwrap_err().class, ErrorClass::Transient);
    let err = tx.send(frame(&types_of(&standard_columns()), &new_window_rows())).await.unwrap_err();
    assert_eq!(err.code, "cancelled", "the reader learns that the consumer stopped");
    assert!(mem.rows(&stg).is_empty());
}

#[tokio::test]
async fn a_faultless_wrapper_conforms() {
    struct Wrapped(MemHarness);
    impl target_conformance::TargetHarness for Wrapped {
        type Fixture = Fixture;
        fn caps(&self) -> target_conformance::Caps {
            self.0.caps()
        }
        async fn fresh(&self, names: target_conformance::ColumnNames) -> Fixture {
            let inner = self.0.fresh(names).await;
            Fixture { faulty: FaultyTarget::new(inner.target.clone(), Vec::new()), inner }
        }
    }
    struct Fixture {
        inner: target_conformance::MemFixture,
        faulty: FaultyTarget<MemTarget>,
    }
    impl target_conformance::TargetFixture for Fixture {
        type Target = FaultyTarget<MemTarget>;
        fn target(&self) -> &Self::Target {
            &self.faulty
        }
        async fn insert_target_rows(&self, rows: &[dpone_testkit::Row]) {
            self.inner.insert_target_rows(rows).await
        }
        async fn rows(&self, table: TableRole<'_>) -> Vec<dpone_testkit::Row> {
            self.inner.rows(table).await
        }
        async fn tamper(&self, table: TableRole<'_>, id: i64) {
            self.inner.tamper(table, id).await
        }
        async fn create_foreign_owned_table(&self, name: &str) {
            self.inner.create_foreign_owned_table(name).await
        }
        async fn create_unowned_table(&self, name: &str) {
            self.inner.create_unowned_table(name).await
        }
        async fn table_exists(&self, name: &str) -> bool {
            self.inner.table_exists(name).await
        }
        async fn cleanup(self) {}
    }
    for model in Publication::ALL {
        target_conformance::run_all(&Wrapped(MemHarness { model })).await;
    }
}
