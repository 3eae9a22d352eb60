//! Seeded synthetic databases for the quick start.
//!
//! Deterministic (a fixed-seed generator, no clock, no randomness source):
//! the same files every time. The source covers 2026-08-26 .. 2026-09-12
//! with rows exactly on day boundaries, duplicate rows, NULL timestamps,
//! NULL versus empty strings and multi-byte text; the target holds older
//! rows (kept), stale rows inside the window (replaced) and NULL-timestamp
//! rows (kept).

use dpone_core::time::{MICROS_PER_DAY, Timestamp};
use rusqlite::{Connection, params};
use std::path::Path;

pub const DEMO_DDL: &str = "CREATE TABLE events (\
    id INTEGER NOT NULL, \
    event_ts TIMESTAMP, \
    user_id INTEGER NOT NULL, \
    amount DECIMAL(12, 2), \
    country TEXT, \
    note TEXT)";

/// xorshift64*: a tiny deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const COUNTRIES: [&str; 6] = ["DE", "FR", "JP", "BR", "US", "ÜÖ"];

fn insert(conn: &Connection, id: i64, ts: Option<Timestamp>, rng: &mut Rng) -> rusqlite::Result<()> {
    let amount = match rng.below(10) {
        0 => None,
        _ => Some(format!("{}.{:02}", rng.below(100_000), rng.below(100))),
    };
    let country = match rng.below(12) {
        0 => None,
        1 => Some(String::new()),
        k => Some(COUNTRIES[(k % 6) as usize].to_string()),
    };
    let note = match rng.below(5) {
        0 => None,
        1 => Some("naïve café ✓".to_string()),
        _ => Some(format!("note {}", rng.below(1000))),
    };
    conn.execute(
        "INSERT INTO events VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![id, ts.map(|t| t.to_canonical()), rng.below(500) as i64, amount, country, note],
    )?;
    Ok(())
}

/// Creates `source` and `target` when absent; returns which were created.
pub fn seed_quickstart(source: &Path, target: &Path) -> rusqlite::Result<(bool, bool)> {
    let day0 = Timestamp::parse_rfc3339("2026-08-26T00:00:00Z").expect("valid").0;
    let mut created = (false, false);
    if !source.exists() {
        let mut conn = Connection::open(source)?;
        let tx = conn.transaction()?;
        tx.execute_batch(DEMO_DDL)?;
        let mut rng = Rng(0x5eed_0001);
        for id in 0..12_000i64 {
            let ts = match rng.below(50) {
                0 => None,
                1 => Some(Timestamp(day0 + rng.below(18) as i64 * MICROS_PER_DAY)),
                _ => Some(Timestamp(day0 + rng.below(18 * MICROS_PER_DAY as u64) as i64)),
            };
            insert(&tx, id, ts, &mut rng)?;
            if id % 997 == 0 {
                // An exact duplicate row: multiplicity must survive.
                tx.execute("INSERT INTO events SELECT * FROM events WHERE id = ?1", [id])?;
            }
        }
        tx.commit()?;
        created.0 = true;
    }
    if !target.exists() {
        let mut conn = Connection::open(target)?;
        let tx = conn.transaction()?;
        tx.execute_batch(DEMO_DDL)?;
        let mut rng = Rng(0x5eed_0002);
        let old = Timestamp::parse_rfc3339("2026-08-01T00:00:00Z").expect("valid").0;
        for id in 0..3_000i64 {
            let ts = match rng.below(30) {
                0 => None,
                _ => Some(Timestamp(old + rng.below(40 * MICROS_PER_DAY as u64) as i64)),
            };
            insert(&tx, 1_000_000 + id, ts, &mut rng)?;
        }
        tx.commit()?;
        created.1 = true;
    }
    Ok(created)
}
