//! PostgreSQL catalog introspection and the PostgreSQL -> canonical type map.

use dpone_core::types::DType;

/// Type oids dpone moves exactly.
pub mod oid {
    pub const BOOL: u32 = 16;
    pub const BYTEA: u32 = 17;
    pub const INT8: u32 = 20;
    pub const INT2: u32 = 21;
    pub const INT4: u32 = 23;
    pub const TEXT: u32 = 25;
    pub const FLOAT4: u32 = 700;
    pub const FLOAT8: u32 = 701;
    pub const BPCHAR: u32 = 1042;
    pub const VARCHAR: u32 = 1043;
    pub const DATE: u32 = 1082;
    pub const TIMESTAMP: u32 = 1114;
    pub const TIMESTAMPTZ: u32 = 1184;
    pub const NUMERIC: u32 = 1700;
    pub const UUID: u32 = 2950;
}

/// Columns of a relation: name, type oid, typmod, formatted type, NOT NULL.
pub const DESCRIBE_SQL: &str = "SELECT a.attname::text, a.atttypid::int8, a.atttypmod, format_type(a.atttypid, a.atttypmod), a.attnotnull \
     FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum";

/// How a relation (`$1`, a quoted name) selects ranges of its column `$2`
/// (the window column): the name of a valid, non-partial btree index whose
/// first column it is (NULL when none), and whether the relation is range
/// partitioned with it as the first partition key. No row: no such column.
pub const ACCESS_PATH_SQL: &str = "SELECT \
       (SELECT min(i.indexrelid::regclass::text) FROM pg_index i \
          JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam \
         WHERE i.indrelid = a.attrelid AND am.amname = 'btree' AND i.indkey[0] = a.attnum \
           AND i.indisvalid AND i.indpred IS NULL), \
       EXISTS (SELECT 1 FROM pg_partitioned_table p \
                WHERE p.partrelid = a.attrelid AND p.partstrat = 'r' AND p.partattrs[0] = a.attnum) \
     FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND a.attnum > 0 AND NOT a.attisdropped";

/// One row of [`DESCRIBE_SQL`].
#[derive(Debug, Clone)]
pub struct CatalogColumn {
    pub name: String,
    pub oid: u32,
    pub typmod: i32,
    /// `format_type(oid, typmod)`: the type as PostgreSQL spells it.
    pub formatted: String,
    pub not_null: bool,
}

impl CatalogColumn {
    pub fn from_row(r: &tokio_postgres::Row) -> Self {
        CatalogColumn { name: r.get(0), oid: r.get::<_, i64>(1) as u32, typmod: r.get(2), formatted: r.get(3), not_null: r.get(4) }
    }
}

/// Maps a column of a PostgreSQL *target* to the canonical type dpone
/// writes into it: like [`map_type`], but `date` takes the wider Date32 and
/// `bytea` takes raw bytes.
pub fn map_target_type(type_oid: u32, typmod: i32, formatted: &str) -> Result<DType, String> {
    match type_oid {
        oid::DATE => Ok(DType::Date32),
        oid::BYTEA => Ok(DType::Binary),
        _ => map_type(type_oid, typmod, formatted),
    }
}

/// Maps a PostgreSQL type (oid + typmod) to its canonical type (SPEC §3).
pub fn map_type(type_oid: u32, typmod: i32, formatted: &str) -> Result<DType, String> {
    Ok(match type_oid {
        oid::INT2 => DType::Int16,
        oid::INT4 => DType::Int32,
        oid::INT8 => DType::Int64,
        oid::FLOAT4 => DType::Float32,
        oid::FLOAT8 => DType::Float64,
        oid::BOOL => DType::Bool,
        oid::TEXT | oid::VARCHAR | oid::BPCHAR => DType::String,
        oid::UUID => DType::Uuid,
        oid::DATE => DType::Date,
        oid::TIMESTAMP => DType::DateTime64 { precision: 6, tz: None },
        oid::TIMESTAMPTZ => DType::DateTime64 { precision: 6, tz: Some("UTC".into()) },
        oid::NUMERIC => {
            if typmod < 4 {
                return Err("numeric without (precision, scale) can hold any number of digits; declare numeric(p,s)".into());
            }
            let precision = ((typmod - 4) >> 16) & 0xffff;
            // PostgreSQL 15 stores the scale as an 11-bit signed field.
            let scale = (((typmod - 4) & 0x7ff) ^ 1024) - 1024;
            if !(1..=76).contains(&precision) {
                return Err(format!("{formatted}: Decimal holds at most 76 digits"));
            }
            if scale < 0 || scale > precision {
                return Err(format!("{formatted}: a negative scale or a scale above the precision has no Decimal equivalent"));
            }
            DType::Decimal { precision: precision as u8, scale: scale as u8 }
        }
        _ => {
            let hint = match formatted {
                "json" | "jsonb" | "bytea" => "it needs an explicit contract, which this runtime does not offer yet",
                f if f.ends_with("[]") => "arrays are not supported",
                _ => "no exact mapping exists; cast it in a view",
            };
            return Err(format!("type {formatted} is not supported: {hint}"));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typmod(p: i32, s: i32) -> i32 {
        ((p << 16) | (s & 0x7ff)) + 4
    }

    #[test]
    fn numeric_typmods() {
        assert_eq!(map_type(oid::NUMERIC, typmod(18, 4), "numeric(18,4)").unwrap(), DType::Decimal { precision: 18, scale: 4 });
        assert_eq!(map_type(oid::NUMERIC, typmod(76, 76), "numeric(76,76)").unwrap(), DType::Decimal { precision: 76, scale: 76 });
        assert!(map_type(oid::NUMERIC, -1, "numeric").is_err());
        assert!(map_type(oid::NUMERIC, typmod(77, 0), "numeric(77,0)").is_err());
        assert!(map_type(oid::NUMERIC, typmod(10, -2), "numeric(10,-2)").is_err());
        assert!(map_type(114, -1, "json").unwrap_err().contains("explicit contract"));
    }
}
