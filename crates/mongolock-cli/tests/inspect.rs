//! `mongolock status`, `unlock`, `release --force`, `purge` and `indexes` as processes,
//! against the emulator, with locks taken by the library in the test.

mod common;

use std::time::Duration;

use common::{Env, run, text};
use mongolock::{Filter, LockDetails};

/// Locks with an owner, a host and a TTL of a minute.
fn details(owner: &str) -> LockDetails {
    LockDetails::default()
        .owner(owner)
        .host("host-1")
        .ttl(Duration::from_secs(60))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_a_table_of_the_locks() {
    let env = Env::start("status").await;
    let locks = env.locks();
    let a = locks
        .xlock("ledger", "id-alice", details("alice"))
        .await
        .unwrap();
    let b = locks
        .slock("config", "id-bob", details("bob"), Some(3))
        .await
        .unwrap();
    let forever = LockDetails::default().owner("carol").host("host-2");
    let c = locks.xlock("forever", "id-carol", forever).await.unwrap();

    let output = run(env.cmd(&["status"])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "a header and three rows: {stdout}");
    for column in [
        "RESOURCE", "KIND", "LOCK ID", "OWNER", "HOST", "TOKEN", "TTL",
    ] {
        assert!(lines[0].contains(column), "{stdout}");
    }
    let row = |lock_id: &str| -> Vec<&str> {
        let line = lines
            .iter()
            .find(|line| line.contains(lock_id))
            .unwrap_or_else(|| panic!("{lock_id} is listed: {stdout}"));
        line.split_whitespace().collect()
    };
    let alice = row("id-alice");
    assert_eq!(
        &alice[..6],
        [
            "ledger",
            "exclusive",
            "id-alice",
            "alice",
            "host-1",
            &a.fencing_token().to_string()
        ]
    );
    assert!(
        alice[6].ends_with('s') || alice[6].ends_with('m'),
        "a TTL: {alice:?}"
    );
    let bob = row("id-bob");
    assert_eq!(
        &bob[..6],
        [
            "config",
            "shared",
            "id-bob",
            "bob",
            "host-1",
            &b.fencing_token().to_string()
        ]
    );
    let carol = row("id-carol");
    assert_eq!(
        &carol[..6],
        [
            "forever",
            "exclusive",
            "id-carol",
            "carol",
            "host-2",
            &c.fencing_token().to_string()
        ]
    );
    assert_eq!(carol[6..].join(" "), "no TTL");

    let output = run(env.cmd(&["status", "--owner", "bob"])).await;
    let stdout = text(&output.stdout);
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    assert!(stdout.contains("id-bob"));
    let output = run(env.cmd(&["status", "--resource", "ledger"])).await;
    let stdout = text(&output.stdout);
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    assert!(stdout.contains("id-alice"));
    let output = run(env.cmd(&["status", "--lock-id", "nobody"])).await;
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(text(&output.stdout).trim(), "no locks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_json_is_an_array_of_objects() {
    let env = Env::start("statusjson").await;
    let locks = env.locks();
    let a = locks
        .xlock("ledger", "id-alice", details("alice"))
        .await
        .unwrap();
    let _ = locks
        .xlock("forever", "id-carol", LockDetails::default())
        .await
        .unwrap();

    let output = run(env.cmd(&["status", "--json"])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(rows.len(), 2);
    let alice = rows.iter().find(|r| r["lock_id"] == "id-alice").unwrap();
    assert_eq!(alice["resource"], "ledger");
    assert_eq!(alice["kind"], "exclusive");
    assert_eq!(alice["owner"], "alice");
    assert_eq!(alice["host"], "host-1");
    assert_eq!(alice["fencing_token"], a.fencing_token());
    assert_eq!(alice["expired"], false);
    let left = alice["ttl_remaining_ms"].as_u64().expect("a TTL");
    assert!(left > 0 && left <= 60_000, "{left}");
    assert!(alice["expires_at"].is_string());
    let carol = rows.iter().find(|r| r["lock_id"] == "id-carol").unwrap();
    assert!(carol["ttl_remaining_ms"].is_null(), "no TTL");
    assert!(carol["expires_at"].is_null());

    let output = run(env.cmd(&["--json", "status", "--resource", "nothing"])).await;
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
    assert!(rows.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_marks_expired_locks_and_purge_removes_them() {
    let env = Env::start("purge").await;
    let locks = env.locks();
    let short = LockDetails::default().ttl(Duration::from_secs(1));
    let _ = locks.xlock("stale", "id-stale", short).await.unwrap();
    let _ = locks.xlock("live", "id-live", details("me")).await.unwrap();
    env.server.clock().advance(Duration::from_secs(2));

    let output = run(env.cmd(&["status"])).await;
    let stdout = text(&output.stdout);
    let stale = stdout.lines().find(|l| l.contains("id-stale")).unwrap();
    assert!(stale.trim_end().ends_with("expired"), "{stdout}");
    assert!(
        stdout.contains("1 expired lock(s) block nobody"),
        "{stdout}"
    );
    let output = run(env.cmd(&["status", "--json", "--resource", "stale"])).await;
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(rows[0]["expired"], true);

    let output = run(env.cmd(&["purge"])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout).trim(),
        "removed expired locks from 1 resource(s)"
    );
    let left = locks.status(&Filter::default()).await.unwrap();
    assert_eq!(left.len(), 1, "the live lock stays");
    assert_eq!(left[0].lock_id(), "id-live");
    let output = run(env.cmd(&["--json", "purge"])).await;
    let purged: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(purged, serde_json::json!({ "resources": 0 }));
}

/// A lock let go of within its minimum hold is shown as such: its holder released it, and
/// it keeps the resource (for a reader: from writers) until the hold ends. It is neither a
/// lease that "ended without a release" nor in a lock-delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_a_lock_let_go_of_within_its_minimum_hold() {
    let env = Env::start("held").await;
    let locks = env.locks();
    let hold = Duration::from_secs(60);
    let job = locks
        .mutex("nightly")
        .ttl(Duration::from_secs(30))
        .min_hold(hold);
    job.acquire().await.unwrap().release().await.unwrap();
    let reader = (locks.rwlock("shelf").ttl(Duration::from_secs(30))).min_hold(hold);
    reader.read().await.unwrap().release().await.unwrap();

    let output = run(env.cmd(&["status"])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    let row = |resource: &str| {
        (stdout.lines())
            .find(|l| l.starts_with(resource))
            .unwrap_or_else(|| panic!("{resource} is listed: {stdout}"))
    };
    for resource in ["nightly", "shelf"] {
        assert!(row(resource).contains("min hold"), "{stdout}");
    }
    assert!(!stdout.contains("without a release"), "{stdout}");
    assert!(!stdout.contains("lock-delay"), "{stdout}");
    assert!(
        stdout.contains("2 lock(s) let go of within their minimum hold"),
        "{stdout}"
    );

    let output = run(env.cmd(&["status", "--json", "--resource", "nightly"])).await;
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
    assert!(rows[0]["let_go_at"].is_string(), "{rows:?}");
    assert!(rows[0]["lock_delay_remaining_ms"].is_null(), "{rows:?}");
    let left = rows[0]["min_hold_remaining_ms"].as_u64().unwrap();
    assert!(left > 50_000 && left <= 60_000, "{rows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_force_frees_a_lock_without_a_prompt_off_a_terminal() {
    let env = Env::start("release").await;
    let locks = env.locks();
    let dead = locks
        .xlock("migration", "dead-host", LockDetails::default())
        .await
        .unwrap();

    // --force is required.
    let output = run(env.cmd(&["release", "--resource", "migration"])).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("--force"));
    assert_eq!(locks.status(&Filter::default()).await.unwrap().len(), 1);

    // Not on a terminal: --force alone proceeds, nothing is asked.
    let mut cmd = env.cmd(&["release", "--resource", "migration", "--force"]);
    cmd.write_stdin("n\n");
    let output = run(cmd).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout).trim(),
        "released 1 lock(s) on migration"
    );
    assert!(!text(&output.stderr).contains("[y/N]"));
    assert!(locks.status(&Filter::default()).await.unwrap().is_empty());
    let next = locks
        .xlock("migration", "operator", LockDetails::default())
        .await
        .unwrap();
    assert!(next.fencing_token() > dead.fencing_token());

    let output = run(env.cmd(&[
        "--json",
        "release",
        "--resource",
        "migration",
        "--force",
        "--yes",
    ]))
    .await;
    let released: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        released,
        serde_json::json!({ "resource": "migration", "released": 1 })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_releases_every_lock_of_a_lock_id() {
    let env = Env::start("unlock").await;
    let locks = env.locks();
    let _ = locks
        .xlock("a", "batch-9", LockDetails::default())
        .await
        .unwrap();
    let _ = locks
        .slock("b", "batch-9", LockDetails::default(), None)
        .await
        .unwrap();
    let _ = locks
        .xlock("c", "other", LockDetails::default())
        .await
        .unwrap();

    let output = run(env.cmd(&["unlock", "--lock-id", "batch-9"])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout).trim(),
        "released 2 lock(s) of lock id batch-9"
    );
    let left = locks.status(&Filter::default()).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].lock_id(), "other");

    let output = run(env.cmd(&["unlock", "--lock-id", "batch-9", "--json"])).await;
    let released: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(released, serde_json::json!({ "released": 0 }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexes_are_created_and_creating_them_again_is_harmless() {
    let env = Env::start("indexes").await;
    for _ in 0..2 {
        let output = run(env.cmd(&["indexes"])).await;
        assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
        assert_eq!(
            text(&output.stdout).trim(),
            format!("indexes ready on {}.locks", env.db)
        );
    }
    let names = env
        .server
        .client()
        .database(&env.db)
        .collection::<bson::Document>("locks")
        .list_index_names()
        .await
        .unwrap();
    assert!(names.len() > 1, "more than _id: {names:?}");
    let output = run(env.cmd(&["--json", "indexes"])).await;
    let done: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(done["indexes"], "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_server_every_command_says_how_to_give_one() {
    for args in [
        &["status"][..],
        &["unlock", "--lock-id", "x"],
        &["release", "--resource", "r", "--force"],
        &["purge"],
        &["indexes"],
    ] {
        let mut cmd = assert_cmd::Command::cargo_bin("mongolock").unwrap();
        cmd.env_remove("MONGODB_URI").args(args);
        let output = run(cmd).await;
        assert_eq!(output.status.code(), Some(78), "{args:?}");
        let stderr = text(&output.stderr);
        assert!(
            stderr.contains("pass --uri") && stderr.contains("MONGODB_URI"),
            "{stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_with_a_message_never_a_panic() {
    let env = Env::start("inspectbad").await;
    let cases: &[(&[&str], &str)] = &[
        (&["unlock", "--lock-id", ""], "--lock-id"),
        (&["unlock"], "--lock-id"),
        (&["release", "--resource", "", "--force"], "--resource"),
        (&["status", "--bogus"], "--bogus"),
    ];
    for (args, mentions) in cases {
        let output = run(env.cmd(args)).await;
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(mentions), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    // A lock id over the library's limit: bad usage, refused before anything is sent.
    let long = "x".repeat(mongolock::MAX_ID_LEN + 1);
    let output = run(env.cmd(&["unlock", "--lock-id", &long])).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("--lock-id"),
        "{}",
        text(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexes_take_the_retention_the_applications_use() {
    let env = Env::start("indexes_retention").await;
    let output = run(env.cmd(&["indexes", "--retention", "7days"])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let ttl = |indexes: Vec<bson::Document>| {
        indexes
            .into_iter()
            .find(|index| index.get_str("name") == Ok("idleSince_ttl"))
            .and_then(|index| index.get("expireAfterSeconds").cloned())
    };
    let listed: Vec<bson::Document> = env
        .server
        .client()
        .database(&env.db)
        .run_command(bson::doc! { "listIndexes": "locks" })
        .await
        .unwrap()
        .get_document("cursor")
        .unwrap()
        .get_array("firstBatch")
        .unwrap()
        .iter()
        .filter_map(|index| index.as_document().cloned())
        .collect();
    assert_eq!(
        ttl(listed).and_then(|seconds| seconds.as_i32().map(i64::from).or(seconds.as_i64())),
        Some(7 * 24 * 3600)
    );
    // The same again is harmless; another retention is refused by the server, and said so.
    let again = run(env.cmd(&["indexes", "--retention", "7days"])).await;
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    let other = run(env.cmd(&["indexes"])).await;
    assert_eq!(other.status.code(), Some(1));
    // Said in two lines (what is wrong, what to run), not with the driver's raw reply
    // (tests/indexes_retention.rs has the words).
    let said = text(&other.stderr);
    assert!(
        said.contains("IndexOptionsConflict") && said.contains("collMod"),
        "{said}"
    );
    assert!(!said.contains("server response"), "{said}");
    assert_eq!(said.trim_end().lines().count(), 2, "{said}");
    // Out of the library's range: bad usage, refused before anything is sent.
    let zero = run(env.cmd(&["indexes", "--retention", "0s"])).await;
    assert_eq!(zero.status.code(), Some(2), "{}", text(&zero.stderr));
    assert!(
        text(&zero.stderr).contains("retention"),
        "{}",
        text(&zero.stderr)
    );
}
