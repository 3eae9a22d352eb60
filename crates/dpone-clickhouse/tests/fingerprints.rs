//! The `parts` authority of changed-window delivery on ClickHouse 26.x: a
//! chunk's fingerprint stays equal while its parts and the table's
//! metadata do, and moves on every insert, update and delete of its rows,
//! on a lightweight update's patch part, on a pending mutation and on a
//! change of what a read computes (a DEFAULT, a dictionary it calls); a
//! table of another engine has none (docs/changed-delivery.md). Where an
//! edit leaves the ordinary parts alone, the same edit is shown to leave
//! the fingerprint of `with_legacy_authority(true)` (v2's) unchanged: the
//! new ingredients are what detects it.
//!
//! Not tested here: a row policy. The test server's user may not create
//! one (no `access_management`, and the embedded server has no writable
//! access storage). Checked by hand on another 26.9 server with policies
//! in `users.xml`: `system.row_policies` lists them to a user without
//! `SHOW ROW POLICIES`, and a policy of the reading user changed from
//! `id % 2 = 0` to `id % 2 = 1` (the same count per part) moved every
//! chunk of v3 and none of v2; the unit tests show the ingredient.

use dpone_clickhouse::{ChClient, ClickhouseConfig, ClickhouseSource, Idempotence, quote_ident};
use dpone_core::delivery::Fingerprint;
use dpone_core::ports::{ErrorClass, Source};
use dpone_testkit::delivery::{changed, days};

struct Fixture {
    client: ChClient,
    database: String,
    source: ClickhouseSource,
    /// The same table with v2's fingerprint (`with_legacy_authority`).
    legacy: ClickhouseSource,
}

impl Fixture {
    /// Five days of hourly rows, one insert (and one partition) per day, and
    /// a day on each side of the window; merges stopped so that parts stay.
    /// The block number and offset columns allow lightweight updates.
    async fn new() -> Fixture {
        let client = ChClient::new(ClickhouseConfig::from_url(&dpone_testkit::clickhouse_url()).unwrap()).unwrap();
        let database = dpone_testkit::unique_name("dpone_fp");
        let source = |legacy| ClickhouseSource::new(client.clone(), database.clone(), "events".into()).with_legacy_authority(legacy);
        let f = Fixture { source: source(false), legacy: source(true), client: client.clone(), database: database.clone() };
        f.exec(&format!("CREATE DATABASE {}", quote_ident(&f.database))).await;
        f.exec(
            "CREATE TABLE {t} (id Int64, ts Nullable(DateTime64(6, 'UTC')), v String) ENGINE = MergeTree PARTITION BY toDate(ts) ORDER BY id \
             SETTINGS allow_nullable_key = 1, enable_block_number_column = 1, enable_block_offset_column = 1",
        )
        .await;
        f.exec("SYSTEM STOP MERGES {t}").await;
        for day in -1..6 {
            f.exec(&format!(
                "INSERT INTO {{t}} SELECT 1000 * ({day} + 1) + number, toDateTime64('2026-09-01 00:00:00', 6, 'UTC') + toIntervalHour({day} * 24 + number), concat('v', toString(number)) FROM numbers(24)"
            ))
            .await;
        }
        f.exec("INSERT INTO {t} VALUES (99999, NULL, 'no window value')").await;
        f
    }

    /// `sql` with `{t}` for the table, `{db}` for the database and
    /// `{name}` for the database's name as a string.
    fn sql(&self, sql: &str) -> String {
        sql.replace("{t}", &format!("{}.events", quote_ident(&self.database)))
            .replace("{db}", &quote_ident(&self.database))
            .replace("{name}", &format!("'{}'", self.database))
    }

    async fn exec(&self, sql: &str) {
        let sql = self.sql(sql);
        self.client.execute(&sql, Idempotence::Safe).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    async fn scalar(&self, sql: &str) -> String {
        let sql = self.sql(sql);
        self.client.scalar(&sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    async fn fingerprints(&self) -> Vec<Fingerprint> {
        let f = self.source.chunk_fingerprints("ts", &days(5), None).await.unwrap().expect("ClickHouse has an authority");
        assert_eq!(f.authority, "clickhouse.parts.v3");
        f.chunks
    }

    /// The v3 and the legacy (v2) fingerprints.
    async fn both(&self) -> (Vec<Fingerprint>, Vec<Fingerprint>) {
        let legacy = self.legacy.chunk_fingerprints("ts", &days(5), None).await.unwrap().expect("ClickHouse has an authority");
        assert_eq!(legacy.authority, "clickhouse.parts.v3", "the test switch keeps the authority's name");
        (self.fingerprints().await, legacy.chunks)
    }

    /// After `edit`, the chunks `moved` have another v3 fingerprint and
    /// the others the same, while v2's fingerprint of every chunk stays.
    async fn only_v3_sees(&self, edit: &str, moved: &[usize]) {
        let (v3, v2) = self.both().await;
        self.exec(edit).await;
        let (v3_after, v2_after) = self.both().await;
        assert_eq!(changed(&v3, &v3_after), moved, "v3 after {edit}");
        assert_eq!(changed(&v2, &v2_after), Vec::<usize>::new(), "v2 after {edit}");
    }

    /// The active patch parts and the ordinary parts' names and hashes.
    async fn parts(&self) -> (String, String) {
        let list = |filter: &str| {
            format!(
                "SELECT arrayStringConcat(groupArray(concat(name, ' ', hash_of_all_files)), ',') FROM \
                 (SELECT name, hash_of_all_files FROM system.parts WHERE database = '{}' AND table = 'events' AND active AND {filter} ORDER BY name)",
                self.database
            )
        };
        (self.scalar(&list("startsWith(name, 'patch-')")).await, self.scalar(&list("NOT startsWith(name, 'patch-')")).await)
    }

    async fn cleanup(self) {
        self.exec(&format!("DROP DATABASE {} SYNC", quote_ident(&self.database))).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_fingerprint_moves_when_its_parts_change() {
    let f = Fixture::new().await;
    let first = f.fingerprints().await;
    assert!(first.iter().all(|c| c.rows == 24), "{first:?}");
    assert_eq!(f.fingerprints().await, first, "a replay");
    // Rows outside the window, or with no window value, change no chunk.
    f.exec("INSERT INTO {t} VALUES (50000, '2026-09-06 01:00:00', 'after'), (50001, NULL, 'null')").await;
    assert_eq!(f.fingerprints().await, first);

    // A late row in day 4 moves day 4 only.
    f.exec("INSERT INTO {t} VALUES (60000, '2026-09-05 12:30:00', 'late')").await;
    let second = f.fingerprints().await;
    assert_eq!(changed(&first, &second), vec![4]);

    // A correction in day 1 and a delete in day 3 move exactly those days:
    // a mutation renames every part, but the files of the parts it did not
    // touch stay the same. Mutations run in the merge pool.
    f.exec("SYSTEM START MERGES {t}").await;
    f.exec("ALTER TABLE {t} UPDATE v = 'corrected' WHERE id = 2005 SETTINGS mutations_sync = 2").await;
    let third = f.fingerprints().await;
    assert_eq!(changed(&second, &third), vec![1]);
    f.exec("DELETE FROM {t} WHERE id = 4007 SETTINGS mutations_sync = 2").await;
    let fourth = f.fingerprints().await;
    assert_eq!(changed(&third, &fourth), vec![3]);
    assert_eq!(fourth[3].rows, 23);
    f.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_reads_as_a_change_and_a_new_table_moves_every_chunk() {
    let f = Fixture::new().await;
    let first = f.fingerprints().await;
    // Two parts of day 2 merged into one: the rows are the same, the parts not.
    f.exec("INSERT INTO {t} VALUES (70000, '2026-09-03 05:00:00', 'x')").await;
    let before_merge = f.fingerprints().await;
    f.exec("SYSTEM START MERGES {t}").await;
    f.exec("OPTIMIZE TABLE {t} PARTITION '2026-09-03' FINAL").await;
    assert_eq!(changed(&before_merge, &f.fingerprints().await), vec![2]);
    // The same rows in a new table (another UUID) are another incarnation.
    f.exec("CREATE TABLE {t}_copy AS {t}").await;
    f.exec("INSERT INTO {t}_copy SELECT * FROM {t}").await;
    f.exec("EXCHANGE TABLES {t} AND {t}_copy").await;
    let after = f.fingerprints().await;
    assert_eq!(changed(&first, &after), vec![0, 1, 2, 3, 4]);
    f.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lightweight_update_moves_the_chunks_of_its_partition_through_its_patch_part() {
    let f = Fixture::new().await;
    let (patches, ordinary) = f.parts().await;
    assert_eq!(patches, "");
    f.only_v3_sees("UPDATE {t} SET v = 'patched' WHERE id = 2005", &[1]).await;
    // The original part kept its files; a patch part holds the new value.
    let (patches, after) = f.parts().await;
    assert!(patches.starts_with("patch-"), "{patches}");
    assert_eq!(after, ordinary);
    assert_eq!(f.scalar("SELECT v FROM {t} WHERE id = 2005").await, "patched");
    // A lightweight delete written as a patch part: the chunk counts the
    // rows it hides no more.
    f.exec("DELETE FROM {t} WHERE id = 3007 SETTINGS lightweight_delete_mode = 'lightweight_update'").await;
    assert_eq!(f.fingerprints().await[2].rows, 23);
    f.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_the_parts_lack_or_a_table_setting_moves_every_chunk() {
    let f = Fixture::new().await;
    let sum = "SELECT sum(w) FROM {t} WHERE ts >= '2026-09-01' AND ts < '2026-09-06'";
    f.only_v3_sees("ALTER TABLE {t} ADD COLUMN w Int64 DEFAULT 7", &[0, 1, 2, 3, 4]).await;
    assert_eq!(f.scalar(sum).await, "840");
    // The parts do not hold `w`: every value read changes, no file does.
    f.only_v3_sees("ALTER TABLE {t} MODIFY COLUMN w Int64 DEFAULT 8", &[0, 1, 2, 3, 4]).await;
    assert_eq!(f.scalar(sum).await, "960");
    f.only_v3_sees("ALTER TABLE {t} MODIFY SETTING apply_patches_on_merge = 0", &[0, 1, 2, 3, 4]).await;
    f.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_mutation_moves_every_chunk_until_it_is_done() {
    let f = Fixture::new().await;
    let first = f.fingerprints().await;
    // Merges are stopped, and with them mutations (26.9): it stays pending.
    f.only_v3_sees("ALTER TABLE {t} UPDATE v = 'later' WHERE id = 3003 SETTINGS mutations_sync = 0", &[0, 1, 2, 3, 4]).await;
    let pending = "SELECT count() FROM system.mutations WHERE database = {name} AND table = 'events' AND NOT is_done";
    assert_eq!(f.scalar(pending).await, "1");
    // Done, it leaves the parts it did not touch with their files: only
    // day 2 differs from before the mutation.
    f.exec("SYSTEM START MERGES {t}").await;
    for _ in 0..300 {
        if f.scalar(pending).await == "0" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(f.scalar("SELECT v FROM {t} WHERE id = 3003").await, "later");
    assert_eq!(changed(&first, &f.fingerprints().await), vec![2]);
    f.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_of_a_dictionary_the_table_calls_moves_every_chunk() {
    let f = Fixture::new().await;
    f.exec("CREATE TABLE {db}.labels (id UInt64, label String) ENGINE = MergeTree ORDER BY id").await;
    f.exec("INSERT INTO {db}.labels VALUES (2005, 'one')").await;
    let dictionary = |name: &str, layout: &str| {
        format!(
            "CREATE DICTIONARY {{db}}.{name} (id UInt64, label String) PRIMARY KEY id \
             SOURCE(CLICKHOUSE(DB {{name}} TABLE 'labels')) LAYOUT({layout})"
        )
    };
    f.exec(&dictionary("label_dict", "HASHED()) LIFETIME(0")).await;
    let dict = format!("{}.label_dict", f.database);
    f.exec(&format!("ALTER TABLE {{t}} ADD COLUMN label String ALIAS dictGetOrDefault('{dict}', 'label', toUInt64(id), '')")).await;
    assert_eq!(f.scalar("SELECT label FROM {t} WHERE id = 2005").await, "one");
    f.exec("TRUNCATE TABLE {db}.labels").await;
    f.exec("INSERT INTO {db}.labels VALUES (2005, 'two')").await;
    f.only_v3_sees(&format!("SYSTEM RELOAD DICTIONARY {dict}"), &[0, 1, 2, 3, 4]).await;
    assert_eq!(f.scalar("SELECT label FROM {t} WHERE id = 2005").await, "two");
    // A direct layout reads its source at each call: no fingerprint.
    f.exec(&dictionary("direct_dict", "DIRECT()")).await;
    let direct = format!("{}.direct_dict", f.database);
    f.exec(&format!("ALTER TABLE {{t}} ADD COLUMN direct String ALIAS dictGetOrDefault('{direct}', 'label', toUInt64(id), '')")).await;
    let err = f.source.chunk_fingerprints("ts", &days(5), None).await.expect_err("a direct dictionary");
    assert_eq!(err.code, "fingerprint_unsupported", "{err:?}");
    assert!(err.message.contains("direct_dict") && err.message.contains("Direct"), "{}", err.message);
    f.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_detached_and_attached_again_read_as_before_and_a_replacement_table_moves_every_chunk() {
    let f = Fixture::new().await;
    let first = f.fingerprints().await;
    f.exec("ALTER TABLE {t} DETACH PARTITION '2026-09-02'").await;
    assert_eq!(changed(&first, &f.fingerprints().await), vec![1]);
    // The same files under a new name: the same rows, the same fingerprint.
    f.exec("ALTER TABLE {t} ATTACH PARTITION '2026-09-02'").await;
    assert_eq!(f.fingerprints().await, first);
    // Another table renamed into its place: another UUID.
    f.exec("CREATE TABLE {t}_copy AS {t}").await;
    f.exec("INSERT INTO {t}_copy SELECT * FROM {t}").await;
    f.exec("RENAME TABLE {t} TO {t}_old, {t}_copy TO {t}").await;
    assert_eq!(changed(&first, &f.fingerprints().await), vec![0, 1, 2, 3, 4]);
    f.exec("TRUNCATE TABLE {t}").await;
    assert!(f.fingerprints().await.iter().all(|c| c.rows == 0));
    f.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_without_parts_has_no_fingerprint() {
    let f = Fixture::new().await;
    f.exec("CREATE TABLE {db}.mem (id Int64, ts DateTime64(6, 'UTC'), v String) ENGINE = Memory").await;
    f.exec("CREATE VIEW {db}.view AS SELECT * FROM {t}").await;
    f.exec("CREATE TABLE {db}.merged AS {t} ENGINE = Merge({name}, '^events$')").await;
    for (table, engine) in [("mem", "Memory"), ("view", "View"), ("merged", "Merge")] {
        let source = ClickhouseSource::new(f.client.clone(), f.database.clone(), table.into());
        let err = source.chunk_fingerprints("ts", &days(5), None).await.expect_err(table);
        assert_eq!(err.code, "fingerprint_unsupported", "{table}: {err:?}");
        assert_eq!(err.class, ErrorClass::Permanent, "{table}");
        assert!(err.message.contains(&format!("a {engine} table")) && err.message.contains(table), "{table}: {}", err.message);
        assert!(err.hint.is_none(), "{table}: {:?}", err.hint);
    }
    f.cleanup().await;
}
