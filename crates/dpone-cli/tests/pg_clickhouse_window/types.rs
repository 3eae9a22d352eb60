//! Types through the window replace (a module of `pg_clickhouse_window.rs`):
//! every value of every supported type moves exactly (checked by exact
//! typed multiset equality and by ClickHouse's own text, see
//! `pg_clickhouse_common/window.rs`), or the run fails naming the column
//! and leaves the target unchanged.

use crate::pg_clickhouse_common::{
    BOUNDS, Fixture, Row, assert_same_rows, at, col, date, dec, id_ts, id_ts_not_null, int, rendered, text, uuid,
};
use crate::window::{replace_and_check, run_and_check};
use dpone_core::value::Value;

// ---------------------------------------------------------------------------
// Types: every value moved exactly, or the run fails naming the column
// ---------------------------------------------------------------------------

/// `int_digits` nines, a point and `frac_digits` nines.
fn nines(int_digits: usize, frac_digits: usize) -> String {
    let int = if int_digits == 0 { "0".to_string() } else { "9".repeat(int_digits) };
    if frac_digits == 0 { int } else { format!("{int}.{}", "9".repeat(frac_digits)) }
}

/// `10^-scale`.
fn unit(scale: usize) -> String {
    if scale == 0 { "1".into() } else { format!("0.{}1", "0".repeat(scale - 1)) }
}

#[test]
fn decimal_extremes_move_exactly() {
    // (name, PostgreSQL type, ClickHouse type, integer digits, scale)
    let decimals = [
        ("d76", "numeric(76,20)", "Nullable(Decimal(76, 20))", 56, 20),
        ("d76i", "numeric(76,0) NOT NULL", "Decimal(76, 0)", 76, 0),
        ("d76f", "numeric(76,76)", "Nullable(Decimal(76, 76))", 0, 76),
        ("d38", "numeric(38,10)", "Nullable(Decimal(38, 10))", 28, 10),
        ("d38i", "numeric(38,0)", "Nullable(Decimal(38, 0))", 38, 0),
        ("d18", "numeric(18,4)", "Nullable(Decimal(18, 4))", 14, 4),
        ("d9", "numeric(9,2)", "Nullable(Decimal(9, 2))", 7, 2),
    ];
    let fx = Fixture::new("pgch_decimal", id_ts_not_null(decimals.iter().map(|(n, pg, ch, _, _)| col(n, pg, ch))));

    let scale = |i: usize| decimals[i].4 as u8;
    let each = |id: i64, ts: Value, f: &dyn Fn(usize) -> String| -> Row {
        let mut r = vec![int(id), ts];
        r.extend((0..decimals.len()).map(|i| dec(&f(i), scale(i))));
        r
    };
    let inside = at("2026-09-07T12:00:00Z", 0);
    let mut source = vec![
        each(1, inside.clone(), &|i| nines(decimals[i].3, decimals[i].4)),
        each(2, inside.clone(), &|i| format!("-{}", nines(decimals[i].3, decimals[i].4))),
        each(3, inside.clone(), &|_| "0".into()),
        each(4, inside.clone(), &|i| unit(decimals[i].4)),
        each(5, inside.clone(), &|i| format!("-{}", unit(decimals[i].4))),
        // Trailing zeros and a digit pattern that spans PostgreSQL's base-10000 groups.
        each(6, inside.clone(), &|i| match decimals[i] {
            (_, _, _, _, 0) => "1500".into(),
            (_, _, _, 0, _) => "0.5".into(),
            _ => "1.5".into(),
        }),
        each(7, at(BOUNDS[3], -1), &|i| {
            let (int_digits, frac) = (decimals[i].3, decimals[i].4);
            let digits = "1234567890".repeat(8);
            let whole = if int_digits == 0 { "0".to_string() } else { digits[..int_digits].to_string() };
            if frac == 0 { whole } else { format!("{whole}.{}", &digits[3..3 + frac]) }
        }),
    ];
    // Around 10^36 and the i128 limits, in the 76-digit integer column.
    for (id, v) in [
        (8, "999999999999999999999999999999999999"),
        (9, "1000000000000000000000000000000000000"),
        (10, "170141183460469231731687303715884105727"),
        (11, "-170141183460469231731687303715884105729"),
    ] {
        let mut r = each(id, inside.clone(), &|_| "0".into());
        r[3] = dec(v, 0);
        source.push(r);
    }
    // Nullable columns NULL (the NOT NULL one zero).
    let mut nulls = each(13, at(BOUNDS[0], 0), &|_| "0".into());
    for (i, d) in decimals.iter().enumerate() {
        if d.2.starts_with("Nullable") {
            nulls[2 + i] = Value::Null;
        }
    }
    source.push(nulls);
    let target = vec![
        each(20, inside.clone(), &|i| unit(decimals[i].4)),
        each(21, at("2026-09-01T00:00:00Z", 0), &|i| format!("-{}", nines(decimals[i].3, decimals[i].4))),
        each(22, at("2026-09-09T00:00:00Z", 0), &|i| nines(decimals[i].3, decimals[i].4)),
    ];
    replace_and_check(&fx, &source, &target);
    fx.finish();
}

#[test]
fn integer_limits_float_extremes_and_booleans_move_exactly() {
    let cols = id_ts_not_null([
        col("i16", "smallint", "Nullable(Int16)"),
        col("i32", "integer", "Nullable(Int32)"),
        col("i64", "bigint", "Nullable(Int64)"),
        col("i16n", "smallint NOT NULL", "Int16"),
        col("f32", "real", "Nullable(Float32)"),
        col("f64", "double precision", "Nullable(Float64)"),
        col("b", "boolean", "Nullable(Bool)"),
        // A NOT NULL source column may feed a nullable target column.
        col("i64_into_nullable", "bigint NOT NULL", "Nullable(Int64)"),
    ]);
    let fx = Fixture::new("pgch_numbers", cols);
    let r = |id: i64, ts: Value, i16v: Value, i32v: Value, i64v: Value, n: i16, f: Value, d: Value, b: Value| {
        vec![int(id), ts, i16v, i32v, i64v, int(n), f, d, b, int(id * 1_000_000_007)]
    };
    let inside = |h: u32| at(&format!("2026-09-0{}T{:02}:00:00Z", 6 + h / 24, h % 24), 0);
    let f32v = Value::Float32;
    let f64v = Value::Float64;
    #[rustfmt::skip]
    let mut source = vec![
        r(1, inside(1), int(i16::MIN), int(i32::MIN), int(i64::MIN), i16::MIN, f32v(f32::MIN), f64v(f64::MIN), Value::Bool(false)),
        r(2, inside(30), int(i16::MAX), int(i32::MAX), int(i64::MAX), i16::MAX, f32v(f32::MAX), f64v(f64::MAX), Value::Bool(true)),
        r(3, inside(50), int(0), int(0), int(0), 0, f32v(f32::MIN_POSITIVE), f64v(f64::MIN_POSITIVE), Value::Bool(true)),
        // Smallest subnormals and negative zero keep their exact bits.
        r(4, inside(60), int(-1), int(-1), int(-1), -1, f32v(f32::from_bits(1)), f64v(f64::from_bits(1)), Value::Bool(false)),
        r(5, inside(70), int(1), int(1), int(1), 1, f32v(-0.0), f64v(-0.0), Value::Null),
        r(6, inside(71), int(-2), int(-2), int(-2), 2, f32v(0.1), f64v(0.1 + 0.2), Value::Bool(true)),
        r(7, inside(2), Value::Null, Value::Null, Value::Null, 7, Value::Null, Value::Null, Value::Null),
        r(8, inside(3), int(i16::MIN + 1), int(i32::MAX - 1), int(i64::MIN + 1), 8, f32v(-f32::MAX), f64v(f64::EPSILON), Value::Bool(false)),
    ];
    // A NaN outside the window is never read, so it cannot fail the run.
    source.push(r(9, at(BOUNDS[0], -1), int(9), int(9), int(9), 9, f32v(f32::NAN), f64v(f64::NAN), Value::Null));
    #[rustfmt::skip]
    let target = vec![
        r(20, inside(1), int(1), int(2), int(3), 4, f32v(1.5), f64v(2.5), Value::Bool(true)),
        r(21, at("2026-08-01T00:00:00Z", 0), int(i16::MAX), int(i32::MIN), int(i64::MAX), i16::MIN, f32v(-0.0), f64v(f64::MAX), Value::Null),
    ];
    replace_and_check(&fx, &source, &target);
    fx.finish();
}

/// dpone refuses to write NaN and infinities, but a target may already hold
/// them outside the window: they are the target's rows and stay as they are.
#[test]
fn non_finite_floats_already_in_the_target_outside_the_window_are_kept() {
    let cols = id_ts([col("f32", "real", "Nullable(Float32)"), col("f64", "double precision NOT NULL", "Float64")]);
    let fx = Fixture::new("pgch_kept_nan", cols);
    let source = vec![vec![int(1), at("2026-09-07T00:00:00Z", 0), Value::Float32(1.5), Value::Float64(2.5)]];
    fx.insert_source(&source);
    fx.ch_exec(&format!(
        "INSERT INTO {}.t VALUES (10, NULL, nan, nan), (11, '2026-09-01 00:00:00', inf, -inf), (12, '2026-09-10 00:00:00', -inf, inf), \
         (13, '2026-09-07 00:00:00', nan, nan)",
        fx.db
    ));
    let kept = vec![
        vec![int(10), Value::Null, Value::Float32(f32::NAN), Value::Float64(f64::NAN)],
        vec![int(11), at("2026-09-01T00:00:00Z", 0), Value::Float32(f32::INFINITY), Value::Float64(f64::NEG_INFINITY)],
        vec![int(12), at("2026-09-10T00:00:00Z", 0), Value::Float32(f32::NEG_INFINITY), Value::Float64(f64::INFINITY)],
    ];
    let mut before = kept.clone();
    before.push(vec![int(13), at("2026-09-07T00:00:00Z", 0), Value::Float32(f32::NAN), Value::Float64(f64::NAN)]);
    assert_same_rows(&before, &fx.target_rows(), "target before the run (as inserted)");
    run_and_check(&fx, &source);
    fx.finish();
}

#[test]
fn uuids_and_strings_move_exactly_and_empty_strings_stay_distinct_from_null() {
    let cols = id_ts([
        col("u", "uuid", "Nullable(UUID)"),
        col("un", "uuid NOT NULL", "UUID"),
        col("txt", "text", "Nullable(String)"),
        col("txt_nn", "text NOT NULL", "String"),
        col("vc", "varchar(40)", "Nullable(String)"),
        col("fixed", "char(5)", "Nullable(String)"),
    ]);
    let fx = Fixture::new("pgch_strings", cols);
    let nil = uuid("00000000-0000-0000-0000-000000000000");
    let max = uuid("ffffffff-ffff-ffff-ffff-ffffffffffff");
    let some = uuid("0b5e7a9c-1f2d-4c3b-8a9e-0123456789ab");
    let inside = at("2026-09-07T08:00:00Z", 0);
    let r = |id: i64, u: Value, un: Value, txt: Value, txt_nn: &str, vc: Value, fixed: Value| {
        vec![int(id), inside.clone(), u, un, txt, text(txt_nn), vc, fixed]
    };
    let long = "ж".repeat(70_000); // 140,000 bytes: a three-byte length prefix
    #[rustfmt::skip]
    let source = vec![
        r(1, nil.clone(), nil.clone(), text(""), "", text(""), text("     ")),
        r(2, max.clone(), max.clone(), Value::Null, "", Value::Null, Value::Null),
        r(3, some.clone(), nil.clone(), text("naïve café ß Ω"), "日本語テキスト", text("🦀🚀"), text("ab   ")),
        r(4, Value::Null, max.clone(), text("👍🏽 👨‍👩‍👧‍👦 🇺🇦"), "\u{10FFFF}", text("é🦀   "), text("é🦀   ")),
        r(5, nil.clone(), some.clone(), text("quote ' double \" backslash \\ tab\t newline\n cr\r"), " leading and trailing ", text("x"), text("x    ")),
        r(6, some.clone(), some.clone(), text(&long), &long, text(&"9".repeat(40)), text("12345")),
    ];
    let target = vec![
        r(20, max.clone(), nil.clone(), text("stale"), "stale", text(""), Value::Null),
        vec![int(21), Value::Null, nil.clone(), max.clone(), text(""), text(""), Value::Null, text("")],
        vec![int(22), at("2026-09-05T00:00:00Z", 0), Value::Null, some.clone(), Value::Null, text("kept ✓"), text("ü"), text("kept")],
    ];
    replace_and_check(&fx, &source, &target);
    let after = fx.target_rows();
    let txt_of = |id: i64| after.iter().filter(|r| r[0] == int(id)).map(|r| r[4].clone()).collect::<Vec<_>>();
    assert_eq!(txt_of(1), vec![text("")], "expected an empty string, not NULL, for id 1");
    assert_eq!(txt_of(2), vec![Value::Null], "expected NULL, not an empty string, for id 2");
    fx.finish();
}

#[test]
fn microsecond_timestamps_and_dates_move_exactly() {
    let cols = id_ts([
        col("at", "timestamptz", "Nullable(DateTime64(6, 'UTC'))"),
        col("local", "timestamp", "Nullable(DateTime64(6))"),
        col("d", "date", "Nullable(Date)"),
        col("d32", "date", "Nullable(Date32)"),
        col("dn", "date NOT NULL", "Date32"),
    ]);
    let fx = Fixture::new("pgch_temporal", cols);
    let r = |id: i64, ts: Value, at_: Value, local: Value, d: Value, d32: Value, dn: &str| vec![int(id), ts, at_, local, d, d32, date(dn)];
    #[rustfmt::skip]
    let source = vec![
        r(1, at("2026-09-06T00:00:00.000001Z", 0), at("1970-01-01T00:00:00.000001Z", 0), at("1969-12-31T23:59:59.999999Z", 0), date("1970-01-01"), date("1900-01-01"), "1900-01-01"),
        r(2, at("2026-09-07T23:59:59.999999Z", 0), at("2299-12-31T23:59:59.999999Z", 0), at("1900-01-01T00:00:00.000001Z", 0), date("2149-06-06"), date("2299-12-31"), "2299-12-31"),
        r(3, at("2026-09-08T12:00:00.5Z", 0), at("2026-09-08T12:00:00.999999Z", 0), at("2026-09-08T12:00:00.000001Z", 0), date("2026-09-08"), date("1969-12-31"), "1969-12-31"),
        r(4, at(BOUNDS[1], 0), Value::Null, Value::Null, Value::Null, Value::Null, "2026-09-07"),
        r(5, at("2026-09-07T00:00:00.000001Z", 0), at("0001-01-01T00:00:00Z", 0), at("9000-12-31T23:59:59.999999Z", 0), date("2000-02-29"), date("2000-02-29"), "2000-02-29"),
    ];
    #[rustfmt::skip]
    let target = vec![
        r(20, at("2026-09-07T00:00:00.000001Z", 0), at("2026-09-07T00:00:00Z", 0), Value::Null, date("2026-09-07"), Value::Null, "2026-09-07"),
        r(21, at("2026-09-05T23:59:59.999999Z", 0), at("1970-01-01T00:00:00Z", 0), at("2026-09-05T23:59:59.999999Z", 0), date("2149-06-06"), date("1900-01-01"), "1970-01-01"),
    ];
    replace_and_check(&fx, &source, &target);
    fx.finish();
}

/// Column names the ClickHouse target's own queries use as aliases
/// (`s`, `w`, `h`, `rows`, `digest`, `n0`, `min`, `max`, `day`, ...) are
/// ordinary names and must move like any other column.
#[test]
fn columns_named_like_the_targets_query_aliases_move_exactly() {
    let names = ["s", "w", "h", "rows", "digest", "n0", "n1", "i0", "o0", "total", "window", "nulls", "min", "max", "day", "in_rows"];
    let fx = Fixture::new("pgch_aliases", id_ts(names.iter().map(|n| col(n, "bigint", "Nullable(Int64)"))));
    let r = |id: i64, ts: Value| {
        let mut r = vec![int(id), ts];
        r.extend((0..names.len() as i64).map(|i| if (id + i) % 4 == 0 { Value::Null } else { int(id * 100 + i) }));
        r
    };
    let source = vec![r(1, at("2026-09-06T01:00:00Z", 0)), r(2, at("2026-09-08T01:00:00Z", 0)), r(3, Value::Null)];
    let target = vec![r(10, at("2026-09-07T01:00:00Z", 0)), r(11, at("2026-09-01T01:00:00Z", 0)), r(12, Value::Null)];
    replace_and_check(&fx, &source, &target);
    fx.finish();
}

// ---------------------------------------------------------------------------
// Values without an exact target value: the run fails, nothing changes
// ---------------------------------------------------------------------------

/// One value that cannot be written exactly: a PostgreSQL column `v` of
/// `pg` type into a ClickHouse column of `ch` type.
struct BadValue {
    case: &'static str,
    pg: &'static str,
    ch: &'static str,
    /// A value that fits, for the other rows.
    good: Value,
    /// The offending value as a PostgreSQL literal.
    bad: &'static str,
    /// Text the error message must contain besides the column name.
    reason: &'static str,
}

/// One row of a [`BadValue`] table.
fn bad(case: &'static str, pg: &'static str, ch: &'static str, good: &Value, bad: &'static str, reason: &'static str) -> BadValue {
    BadValue { case, pg, ch, good: good.clone(), bad, reason }
}

/// Runs each case in its own fixture: every chunk has good rows, the bad
/// row sits in the last chunk. Expects exit 1, `invalid_value` naming
/// column `v`, the target exactly as before and no `_dpone_` table.
fn expect_value_failures(cases: &[BadValue]) {
    let mut problems = Vec::new();
    for c in cases {
        let fx = Fixture::new("pgch_badvalue", id_ts_not_null([col("v", &format!("{} NOT NULL", c.pg), c.ch)]));
        let source: Vec<Row> = (0..6).map(|i| vec![int(i), at(BOUNDS[(i % 3) as usize], i * 1_000_000), c.good.clone()]).collect();
        fx.insert_source(&source);
        fx.pg_exec(&format!("INSERT INTO {}.t VALUES (99, '2026-09-08 20:00:00+00', {})", fx.schema, c.bad));
        let target = vec![
            vec![int(10), at("2026-09-07T00:00:00Z", 0), c.good.clone()],
            vec![int(11), at("2026-09-01T00:00:00Z", 0), c.good.clone()],
        ];
        fx.insert_target(&target);
        let before = fx.target_rows();

        let run = fx.run();
        run.assert_no_panic();
        let doc = run.json();
        let message = doc["errors"][0]["message"].as_str().unwrap_or_default().to_string();
        let mut p = Vec::new();
        if run.code != Some(1) {
            p.push(format!("expected exit 1, got {:?}", run.code));
        }
        if doc["status"] != "failed" || doc["error_code"] != "invalid_value" {
            p.push(format!("expected status `failed` and error_code `invalid_value`, got {} / {}", doc["status"], doc["error_code"]));
        }
        if !message.contains("`v`") || !message.contains(c.reason) {
            p.push(format!("expected the message to name column `v` and say `{}`, got `{message}`", c.reason));
        }
        let after = fx.target_rows();
        if rendered(&after) != rendered(&before) {
            p.push(format!("expected the target unchanged: before {before:?}, after {after:?}"));
        }
        let owned = fx.owned_tables();
        if !owned.is_empty() {
            p.push(format!("expected no `_dpone_` tables, found {owned:?}"));
        }
        if p.is_empty() {
            fx.finish();
        } else {
            problems.push(format!("{}: {}\n{}", c.case, p.join("; "), run.describe()));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

#[test]
#[rustfmt::skip]
fn dates_outside_the_target_date_type_fail_the_run_and_leave_the_target_unchanged() {
    let good = date("2000-01-01");
    expect_value_failures(&[
        bad("before 1970 into Date", "date", "Date", &good, "'1969-12-31'", "1969-12-31"),
        bad("after 2149-06-06 into Date", "date", "Date", &good, "'2149-06-07'", "2149-06-07"),
        bad("2200 into Date", "date", "Date", &good, "'2200-01-01'", "2200-01-01"),
        bad("before 1900 into Date32", "date", "Date32", &good, "'1899-12-31'", "1899-12-31"),
        bad("after 2299 into Date32", "date", "Date32", &good, "'2300-01-01'", "2300-01-01"),
        bad("infinite date into Date32", "date", "Date32", &good, "'infinity'", "Date32"),
    ]);
}

#[test]
#[rustfmt::skip]
fn nan_and_infinite_floats_inside_the_window_fail_the_run_and_leave_the_target_unchanged() {
    expect_value_failures(&[
        bad("NaN double", "double precision", "Float64", &Value::Float64(1.5), "'NaN'", "NaN"),
        bad("infinite double", "double precision", "Float64", &Value::Float64(1.5), "'Infinity'", "not finite"),
        bad("NaN real", "real", "Float32", &Value::Float32(1.5), "'NaN'", "NaN"),
        bad("negative infinite real", "real", "Float32", &Value::Float32(1.5), "'-Infinity'", "not finite"),
    ]);
}

#[test]
#[rustfmt::skip]
fn numeric_nan_and_infinite_timestamps_fail_the_run_and_leave_the_target_unchanged() {
    let good_ts = at("2000-01-01T00:00:00Z", 0);
    expect_value_failures(&[
        bad("numeric NaN", "numeric(10,2)", "Decimal(10, 2)", &dec("1.50", 2), "'NaN'", "NaN"),
        bad("infinite timestamp", "timestamp", "DateTime64(6)", &good_ts, "'infinity'", "infinite"),
        bad("minus infinite timestamptz", "timestamptz", "DateTime64(6, 'UTC')", &good_ts, "'-infinity'", "infinite"),
    ]);
}
