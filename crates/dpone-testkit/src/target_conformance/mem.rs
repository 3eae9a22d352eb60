//! The conformance harness of [`MemTarget`], one per publication model.

use super::{ColumnNames, TABLE, TargetFixture, TargetHarness, columns};
use crate::mem_target::{MemTarget, Publication};
use crate::rows::Row;
use dpone_core::ports::TableRole;
use dpone_core::value::Value;

/// Fresh `MemTarget`s of one model.
#[derive(Debug, Clone, Copy)]
pub struct MemHarness {
    pub model: Publication,
}

impl TargetHarness for MemHarness {
    type Fixture = MemFixture;

    async fn fresh(&self, names: ColumnNames) -> MemFixture {
        MemFixture { target: MemTarget::new(self.model, TABLE, columns(names)) }
    }
}

/// Fresh receipt-model `MemTarget`s that publish directly
/// ([`MemTarget::set_direct`]), for [`super::run_direct`].
#[derive(Debug, Clone, Copy)]
pub struct MemDirectHarness;

impl TargetHarness for MemDirectHarness {
    type Fixture = MemFixture;

    async fn fresh(&self, names: ColumnNames) -> MemFixture {
        let target = MemTarget::new(Publication::InPlaceReceipt, TABLE, columns(names));
        target.set_direct(true);
        MemFixture { target }
    }
}

/// One `MemTarget`, seen through its test hooks.
#[derive(Debug)]
pub struct MemFixture {
    pub target: MemTarget,
}

impl MemFixture {
    fn name(&self, table: TableRole<'_>) -> String {
        match table {
            TableRole::Target => self.target.table().to_string(),
            TableRole::Owned(n) => n.to_string(),
        }
    }
}

impl TargetFixture for MemFixture {
    type Target = MemTarget;

    fn target(&self) -> &MemTarget {
        &self.target
    }

    async fn insert_target_rows(&self, rows: &[Row]) {
        self.target.insert_rows(self.target.table(), rows);
    }

    async fn rows(&self, table: TableRole<'_>) -> Vec<Row> {
        self.target.rows(&self.name(table))
    }

    async fn tamper(&self, table: TableRole<'_>, id: i64) {
        let changed = self.target.update_rows(&self.name(table), |r| {
            if r[0] == Value::int(id) {
                r[2] = Value::str("tampered");
            }
        });
        assert!(changed > 0, "no row with id {id} to tamper with");
    }

    async fn create_foreign_owned_table(&self, name: &str) {
        self.target.create_foreign_table(name);
    }

    async fn create_unowned_table(&self, name: &str) {
        self.target.create_foreign_table(name);
    }

    async fn table_exists(&self, name: &str) -> bool {
        self.target.has_table(name)
    }

    async fn cleanup(self) {}
}
