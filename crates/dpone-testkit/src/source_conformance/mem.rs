//! The conformance harness of [`MemSource`], read through a
//! [`FaultySource`] (no fault unless the harness schedules some), so that
//! the wrapper the engine's fault tests use is shown to pass every read on.

use super::{SourceFixture, SourceHarness};
use crate::faulty_source::{FaultySource, SourceFault};
use crate::mem_source::MemSource;
use crate::rows::Row;
use dpone_core::types::{Column, ColumnType, DType};

/// Fresh `MemSource`s behind a `FaultySource` with `faults` scheduled.
#[derive(Debug, Clone, Default)]
pub struct MemSourceHarness {
    pub faults: Vec<SourceFault>,
}

impl SourceHarness for MemSourceHarness {
    type Fixture = MemSourceFixture;

    /// Every canonical type `MemSource` encodes: all of them, nullable or not.
    fn type_matrix(&self) -> Vec<(String, ColumnType)> {
        let utc = || Some("UTC".to_string());
        let dtypes = [
            DType::Int64,
            DType::DateTime64 { precision: 6, tz: utc() },
            DType::String,
            DType::Decimal { precision: 15, scale: 4 },
            DType::Int8,
            DType::Int16,
            DType::Int32,
            DType::UInt8,
            DType::UInt16,
            DType::UInt32,
            DType::UInt64,
            DType::Float32,
            DType::Float64,
            DType::Decimal { precision: 76, scale: 20 },
            DType::Bool,
            DType::FixedString(3),
            DType::Uuid,
            DType::Date,
            DType::Date32,
            DType::DateTime { tz: utc() },
            DType::DateTime64 { precision: 3, tz: None },
        ];
        let mut matrix = Vec::new();
        for (i, dtype) in dtypes.into_iter().enumerate() {
            // The standard schema: `id` and `amount` NOT NULL, the others nullable.
            for nullable in [i != 0 && i != 3, i == 0 || i == 3] {
                let ty = ColumnType::new(dtype.clone(), nullable);
                matrix.push((ty.to_string(), ty));
            }
        }
        matrix
    }

    async fn fresh(&self, columns: &[Column]) -> MemSourceFixture {
        let mem = MemSource::new(columns.to_vec(), Vec::new());
        MemSourceFixture { source: FaultySource::new(mem.clone(), self.faults.clone()), mem }
    }
}

/// One `MemSource` and the wrapper the suite reads through.
#[derive(Debug)]
pub struct MemSourceFixture {
    pub source: FaultySource<MemSource>,
    pub mem: MemSource,
}

impl SourceFixture for MemSourceFixture {
    type Source = FaultySource<MemSource>;

    fn source(&self) -> &FaultySource<MemSource> {
        &self.source
    }

    async fn insert(&self, rows: &[Row]) {
        self.mem.insert_rows(rows.to_vec());
    }

    async fn cleanup(self) {}
}
