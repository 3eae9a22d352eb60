//! The target's side of `dpone audit`: the shared audit SQL
//! (`crate::audit`) over the target table (or a table this run owns), in a
//! read-only snapshot of its own.

use super::PostgresTarget;
use dpone_core::ports::TableRole;

impl PostgresTarget {
    /// The audit reads of `table`.
    pub(super) fn auditor(&self, table: TableRole<'_>) -> crate::audit::Auditor<'_> {
        crate::audit::Auditor {
            config: &self.config,
            tls: &self.tls,
            table_sql: self.role_sql(table),
            side: "target",
            min_part_blocks: self.part_blocks,
        }
    }
}
