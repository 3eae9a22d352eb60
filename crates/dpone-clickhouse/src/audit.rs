//! `dpone audit` on ClickHouse (docs/audit.md): the canonical row hash of
//! `dpone_core::audit::canon` as SQL over the table's own column types,
//! shared by the source and the target.
//!
//! ClickHouse has no function computing PostgreSQL's lookup3, so each
//! field's hash is computed by `program::Program` as 32-bit arithmetic.
//! A string's 12-byte blocks are unrolled when the longest string of the
//! rows read has at most [`UNROLL_BLOCKS`] of them (every block of every
//! row computed, then selected by the row's length: vectorized, about
//! three times cheaper than a loop, measured), else looped with
//! `arrayFold`. The longest length is read first (from the column's size
//! subcolumn: cheap) and checked again by the digest query itself; a
//! longer string met meanwhile makes the query run again with the loop.
//! `run.rs` executes the SQL.

mod program;
mod run;

pub(crate) use run::Auditor;

use crate::client::quote_ident;
use dpone_core::audit::canon::{self, FieldClass, KEY_SEEDS, ROW_SEEDS};
use dpone_core::audit::{KeyScope, stride, type_refusal};
use dpone_core::ports::{AdapterError, Result};
use dpone_core::time::Timestamp;
use dpone_core::types::{Column, ColumnType, DType};
use program::{Program, State, U};

/// Strings of at most this many 12-byte blocks are hashed unrolled.
pub const UNROLL_BLOCKS: u32 = 8;

/// How many 12-byte blocks a hashed byte string has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocks {
    /// Exactly this many bytes (FixedString).
    Exact(u32),
    /// At most this many full blocks: unrolled, selected by length.
    AtMost(u32),
    /// Any length: a loop.
    Loop,
}

/// A column of the ClickHouse table as `system.columns` describes it.
#[derive(Debug, Clone)]
pub struct Native {
    pub name: String,
    pub ty: ColumnType,
    pub native_type: String,
}

impl Native {
    fn refuse(&self, side: &str, why: &str) -> AdapterError {
        type_refusal(side, &Column { name: self.name.clone(), ty: self.ty.clone(), native_type: self.native_type.clone() }, why)
    }
}

/// The longest decimal text of an integer type (sign included); a
/// Decimal(P, S)'s is P + 3 (`-0.` before P fraction digits).
fn int_text_len(dtype: &DType) -> Option<u32> {
    Some(match dtype {
        DType::Int8 | DType::UInt8 | DType::Int16 | DType::UInt16 | DType::Int32 | DType::UInt32 => 11,
        DType::Int64 | DType::UInt64 => 20,
        DType::Int128 | DType::UInt128 => 40,
        DType::Int256 | DType::UInt256 => 78,
        _ => return None,
    })
}

/// A source item and its name: the value of the column `v`.
fn src(p: &mut Program, expr: String) -> U {
    U::N(p.source(expr))
}

/// [`canon::array_field`] of the big-endian 8 bytes of the UInt64 `x`.
fn be8(p: &mut Program, x: &str, seed: u64) -> String {
    let (a, b, c) = canon::initial_state(8, seed);
    let hi = src(p, format!("byteSwap(toUInt32(bitShiftRight({x}, 32)))"));
    let lo = src(p, format!("byteSwap(toUInt32(bitAnd({x}, 4294967295)))"));
    let a = p.add(&U::C(a), &hi);
    let b = p.add(&U::C(b), &lo);
    let h = p.final_([a, b, U::C(c)]);
    plus31(p, &h)
}

/// `h + 31` (mod 2^64): what PostgreSQL's `hash_array_extended` adds.
fn plus31(p: &mut Program, h: &str) -> String {
    p.let_(format!("{h} + 31"), &[h])
}

/// The three little-endian words of a 12-byte block read as UInt128.
fn words(p: &mut Program, block: &str) -> [U; 3] {
    [
        src(p, format!("toUInt32(bitAnd({block}, 4294967295))")),
        src(p, format!("toUInt32(bitAnd(bitShiftRight({block}, 32), 4294967295))")),
        src(p, format!("toUInt32(bitShiftRight({block}, 64))")),
    ]
}

fn plus(p: &mut Program, s: State, w: [U; 3]) -> State {
    let [a, b, c] = s;
    [p.add(&a, &w[0]), p.add(&b, &w[1]), p.add(&c, &w[2])]
}

/// `hash_bytes_extended` of the string expression `v` (no NULL).
fn bytes_hash(p: &mut Program, v: &str, seed: u64, blocks: Blocks, tag: usize) -> String {
    let block = |j: String| format!("reinterpretAsUInt128(substring({v}, {j} + 1, 12))");
    let (mut s, tail_at) = match blocks {
        Blocks::Exact(len) => {
            let (a, b, c) = canon::initial_state(len, seed);
            let mut s: State = [U::C(a), U::C(b), U::C(c)];
            for j in 0..len / 12 {
                let w = words(p, &block((12 * j).to_string()));
                s = plus(p, s, w);
                s = p.mix(s);
            }
            (s, (12 * (len / 12)).to_string())
        }
        Blocks::AtMost(_) | Blocks::Loop => {
            let k = src(p, format!("toUInt32({} + length({v}))", canon::LOOKUP3_INIT));
            let (a, b) = (p.add(&k, &U::C((seed >> 32) as u32)), p.add(&k, &U::C(seed as u32)));
            let mut s = p.mix([a, b, k]);
            if let Blocks::AtMost(n) = blocks {
                for j in 0..n {
                    let w = words(p, &block((12 * j).to_string()));
                    let added = plus(p, s.clone(), w);
                    let mixed = p.mix(added);
                    let more = p.source(format!("length({v}) >= {}", 12 * (j + 1)));
                    s = [0, 1, 2].map(|i| p.pick(&more, &mixed[i], &s[i]));
                }
            } else {
                let v_col = p.source(v.to_string());
                let range = format!("range(intDiv(length({v_col}), 12))");
                s = p.fold_mix(&v_col, &range, &[], s, tag);
            }
            (s, format!("12 * intDiv(length({v}), 12)"))
        }
    };
    let t = block(tail_at);
    let tail = [
        src(p, format!("toUInt32(bitAnd({t}, 4294967295))")),
        src(p, format!("toUInt32(bitAnd(bitShiftRight({t}, 32), 4294967295))")),
        src(p, format!("toUInt32(bitShiftLeft(bitAnd(bitShiftRight({t}, 64), 16777215), 8))")),
    ];
    s = plus(p, s, tail);
    p.final_(s)
}

/// The field (a UInt64 column, NULL already replaced) of the column `n` at
/// position `index`, of class `class`. `blocks`: a String column's blocks
/// (None: the loop).
pub fn field(p: &mut Program, n: &Native, class: FieldClass, index: usize, blocks: Option<Blocks>, side: &str) -> Result<String> {
    let q = quote_ident(&n.name);
    let v = if n.ty.nullable { format!("assumeNotNull({q})") } else { q.clone() };
    let (s1, s2) = (canon::seed(index, 1), canon::seed(index, 2));
    let d = &n.ty.dtype;
    let f = match class {
        FieldClass::Int if d.integer().is_some() && *d != DType::UInt64 => {
            let hi = src(p, format!("toUInt32(bitShiftRight(reinterpretAsUInt64(toInt64({v})), 32))"));
            let lo = src(p, format!("toUInt32(bitAnd(reinterpretAsUInt64(toInt64({v})), 4294967295))"));
            let (h, l) = (p.hash_u32(&hi, s1), p.hash_u32(&lo, s2));
            p.let_(format!("bitXor({h}, {l})"), &[&h, &l])
        }
        FieldClass::DecimalText { scale } => {
            let (text, len) = match d {
                DType::Decimal { precision, scale: s } if *s == scale => {
                    (format!("toDecimalString({v}, {scale})"), u32::from(*precision) + 3)
                }
                _ if scale == 0 && int_text_len(d).is_some() => (format!("toString({v})"), int_text_len(d).unwrap_or(78)),
                _ => return Err(n.refuse(side, &format!("the canonical type needs Decimal(P, {scale}) (or an integer for scale 0)"))),
            };
            bytes_hash(p, &text, s1, Blocks::AtMost(len / 12), index)
        }
        FieldClass::Bool if *d == DType::Bool => {
            let k = src(p, format!("toUInt32({v})"));
            p.hash_u32(&k, s1)
        }
        FieldClass::Bytes => match d {
            DType::FixedString(len) => bytes_hash(p, &v, s1, Blocks::Exact(*len), index),
            DType::String => bytes_hash(p, &v, s1, blocks.unwrap_or(Blocks::Loop), index),
            _ => return Err(n.refuse(side, "a string or bytes column needs String or FixedString")),
        },
        FieldClass::Float32 if *d == DType::Float32 => {
            let k = src(p, format!("byteSwap(reinterpretAsUInt32({v}))"));
            let h = p.hash_u32(&k, s1);
            plus31(p, &h)
        }
        FieldClass::Float64 if *d == DType::Float64 => {
            let bits = p.source(format!("reinterpretAsUInt64({v})"));
            be8(p, &bits, s1)
        }
        FieldClass::Date if matches!(d, DType::Date | DType::Date32) => {
            let k = src(p, format!("toUInt32(toInt32({v}))"));
            p.hash_u32(&k, s1)
        }
        FieldClass::Timestamp => {
            let micros = match d {
                DType::DateTime { .. } => format!("toInt64(toUnixTimestamp({v})) * 1000000"),
                DType::DateTime64 { precision, .. } if *precision <= 6 => format!("toUnixTimestamp64Micro({v})"),
                _ => return Err(n.refuse(side, "a timestamp needs DateTime or DateTime64 of at most microseconds")),
            };
            let x = p.source(format!("reinterpretAsUInt64({micros} - {})", canon::POSTGRES_EPOCH_MICROS));
            be8(p, &x, s1)
        }
        FieldClass::Uuid if *d == DType::Uuid => {
            let u = format!("reinterpretAsUInt128(UUIDToNum({v}))");
            let w: Vec<U> = (0..4).map(|k| src(p, format!("toUInt32(bitAnd(bitShiftRight({u}, {}), 4294967295))", 32 * k))).collect();
            let (a, b, c) = canon::initial_state(16, s1);
            let s = plus(p, [U::C(a), U::C(b), U::C(c)], [w[0].clone(), w[1].clone(), w[2].clone()]);
            let [a, b, c] = p.mix(s);
            let a = p.add(&a, &w[3]);
            p.final_([a, b, c])
        }
        other => return Err(n.refuse(side, &format!("its type does not hold the canonical {other:?} values exactly"))),
    };
    if !n.ty.nullable {
        return Ok(f);
    }
    let null = p.source(format!("isNull({q})"));
    Ok(p.let_(format!("if({null}, toUInt64({}), {f})", canon::null_field(index)), &[&null, &f]))
}

/// `toDateTime64` of an instant, as the sink's filters write it.
fn instant(t: Timestamp) -> String {
    format!("toDateTime64({}, 6, 'UTC')", crate::client::quote_str(&t.to_canonical()))
}

/// One call's SQL: the table, its columns by audited position (with their
/// classes and string blocks), the window column and the key.
pub struct Query<'a> {
    pub table_sql: &'a str,
    pub columns: &'a [(Native, FieldClass)],
    pub blocks: &'a [Option<Blocks>],
    pub window: &'a Native,
    pub key: &'a [usize],
    pub scope: KeyScope,
    pub side: &'a str,
}

impl Query<'_> {
    /// The program's row hash `r` (Int64 bits as UInt64), the key hash `kh`
    /// when the scope needs it, and the window value in microseconds `wus`.
    fn program(&self) -> Result<(Program, String, Option<String>, String)> {
        let mut p = Program::default();
        let w = quote_ident(&self.window.name);
        let wus = p.source(format!("toUnixTimestamp64Micro(toDateTime64(assumeNotNull({w}), 6, 'UTC'))"));
        let mut fields = Vec::with_capacity(self.columns.len());
        for (i, (n, class)) in self.columns.iter().enumerate() {
            fields.push(field(&mut p, n, *class, i, self.blocks.get(i).copied().flatten(), self.side)?);
        }
        let xor = |p: &mut Program, fs: &[&String]| {
            let expr = fs.iter().skip(1).fold(fs[0].to_string(), |acc, f| format!("bitXor({acc}, {f})"));
            let deps: Vec<&str> = fs.iter().map(|f| f.as_str()).collect();
            p.let_(expr, &deps)
        };
        let all: Vec<&String> = fields.iter().collect();
        let x = xor(&mut p, &all);
        let r = p.mix64(&x, ROW_SEEDS);
        let kh = if self.keyed() {
            let key: Vec<&String> = self.key.iter().map(|&i| &fields[i]).collect();
            let k = xor(&mut p, &key);
            Some(p.mix64(&k, KEY_SEEDS))
        } else {
            None
        };
        Ok((p, r, kh, wus))
    }

    fn keyed(&self) -> bool {
        !self.key.is_empty() && self.scope != KeyScope::ALL
    }

    /// The scope's prefix filter and bucket over the key hash `kh`.
    fn key_sql(&self, kh: &str) -> (String, Option<String>) {
        let s = self.scope;
        let used = u32::from(s.prefix_bits) + u32::from(s.split_bits);
        let filter = if s.prefix_bits == 0 {
            String::new()
        } else {
            format!(" WHERE bitShiftRight({kh}, {}) = {}", 64 - u32::from(s.prefix_bits), s.prefix)
        };
        let bucket = (s.split_bits > 0).then(|| format!("bitAnd(bitShiftRight({kh}, {}), {})", 64 - used, (1u64 << s.split_bits) - 1));
        (filter, bucket)
    }

    fn from(&self, lo: Timestamp, hi: Timestamp) -> String {
        let w = quote_ident(&self.window.name);
        format!("{} WHERE {w} >= {} AND {w} < {}", self.table_sql, instant(lo), instant(hi))
    }

    /// The digests of the segments of `bounds`: rows `seg`, `n`, `d` (the
    /// sum as text) and, per `String` column hashed unrolled, `l<i>`: its
    /// longest length, which must fit the unrolled blocks.
    pub fn digests_sql(&self, bounds: &[Timestamp]) -> Result<String> {
        dpone_core::audit::check_bounds(bounds)?;
        let (mut p, r, kh, wus) = self.program()?;
        let (lo, hi) = (bounds[0], bounds[bounds.len() - 1]);
        let seg = match stride(bounds) {
            Some(stride) => format!("intDiv({wus} - toInt64({}), {stride})", lo.0),
            None => format!(
                "arrayCount(b -> b <= {wus}, [{}])",
                bounds[1..bounds.len() - 1].iter().map(|b| b.0.to_string()).collect::<Vec<_>>().join(", ")
            ),
        };
        let seg = p.let_(seg, &[&wus]);
        let mut outputs = vec![seg.clone(), r.clone()];
        outputs.extend(kh.clone());
        let mut longest = Vec::new();
        for (i, (n, class)) in self.columns.iter().enumerate() {
            if *class == FieldClass::Bytes && n.ty.dtype == DType::String && matches!(self.blocks.get(i), Some(Some(Blocks::AtMost(_)))) {
                let v = if n.ty.nullable { format!("assumeNotNull({})", quote_ident(&n.name)) } else { quote_ident(&n.name) };
                let l = p.source(format!("length({v})"));
                longest.push(format!("max({l}) AS l{i}"));
                outputs.push(l);
            }
        }
        let outputs: Vec<&str> = outputs.iter().map(String::as_str).collect();
        let inner = p.layers(&self.from(lo, hi), &outputs);
        let (filter, bucket) = match &kh {
            Some(kh) => self.key_sql(kh),
            None => (String::new(), None),
        };
        let seg_out = match bucket {
            Some(b) => format!("{seg} * {} + {b}", self.scope.buckets()),
            None => seg,
        };
        let extra: String = longest.iter().map(|l| format!(", {l}")).collect();
        Ok(format!(
            "SELECT {seg_out} AS seg, count() AS n, toString(sum(toInt128(reinterpretAsInt64({r})))) AS d{extra} FROM ({inner}){filter} GROUP BY seg"
        ))
    }

    /// At most `limit` rows of `[lo, hi)`: `r` (the hash as text), `w` (the
    /// window value in microseconds) and `v<i>` (each column as text).
    pub fn rows_sql(&self, lo: Timestamp, hi: Timestamp, limit: u64) -> Result<String> {
        let (mut p, r, kh, wus) = self.program()?;
        let texts: Vec<String> = self.columns.iter().map(|(n, _)| p.source(format!("toString({})", quote_ident(&n.name)))).collect();
        let mut outputs: Vec<&str> = vec![&r, &wus];
        outputs.extend(kh.as_deref());
        outputs.extend(texts.iter().map(String::as_str));
        let inner = p.layers(&self.from(lo, hi), &outputs);
        let filter = kh.map(|kh| self.key_sql(&kh).0).unwrap_or_default();
        let values: String = texts.iter().enumerate().map(|(i, t)| format!(", {t} AS v{i}")).collect();
        Ok(format!("SELECT toString(reinterpretAsInt64({r})) AS r, toString({wus}) AS w{values} FROM ({inner}){filter} LIMIT {limit}"))
    }
}

#[cfg(test)]
mod tests;
