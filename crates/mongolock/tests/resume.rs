//! Resuming after a restart: a process that asks again, with the lock id it held a lease
//! under, gets that lease back with the same fencing token instead of waiting for its TTL;
//! a keeper that renewed it before then finds it gone and reports it lost.

mod common;

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use common::{env, invalid_argument, secs};
use mongolock::{Filter, LockClient, LossReason};

/// The child process of [`a_killed_process_started_again_resumes_its_lease`]: holds a
/// lease under the lock id `svc-1`, says its token, and waits to be killed.
#[tokio::test]
#[ignore = "the child process of a_killed_process_started_again_resumes_its_lease"]
async fn child_holds_a_lease_until_killed() {
    let (Ok(uri), Ok(db)) = (
        std::env::var("MONGOLOCK_CHILD_URI"),
        std::env::var("MONGOLOCK_CHILD_DB"),
    ) else {
        return;
    };
    let client = mongodb::Client::with_uri_str(&uri).await.unwrap();
    let locks = LockClient::new(client.database(&db).collection("locks"));
    let guard = (locks.mutex("job").lock_id("svc-1").ttl(secs(30)))
        .acquire()
        .await
        .unwrap();
    println!("TOKEN {}", guard.fencing_token());
    std::future::pending::<()>().await;
}

#[tokio::test]
async fn a_killed_process_started_again_resumes_its_lease() {
    let env = env("resume_killed").await;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_holds_a_lease_until_killed",
            "--ignored",
            "--nocapture",
        ])
        .env("MONGOLOCK_CHILD_URI", env.uri())
        .env("MONGOLOCK_CHILD_DB", env.db.name())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Read without blocking the runtime: the emulator runs on it.
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let token: i64 = tokio::time::timeout(secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(token) = line.strip_prefix("TOKEN ") {
                return token.parse().unwrap();
            }
        }
        panic!("the child ended without saying its token");
    })
    .await
    .expect("the child says its token");
    // Killed (SIGKILL): no release, no renewal from here on.
    child.kill().await.unwrap();

    // Another lock id is refused: the dead process's lease lives for its TTL.
    common::assert_xlock_refused(&env.locks, "job", "other").await;
    // Started again, with the same lock id: its lease is back at once, with its token.
    let mutex = env.locks.mutex("job").lock_id("svc-1").ttl(secs(30));
    let guard = mutex.try_acquire().await.unwrap().expect("resumed at once");
    assert_eq!(guard.fencing_token(), token);
    assert!(!guard.is_lost());
    // Its entry names this client's keeper now.
    let held = env.locks.status(&Filter::default()).await.unwrap();
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].fencing_token(), token);
    guard.release().await.unwrap();
    let next = env.locks.mutex("job").try_acquire().await.unwrap().unwrap();
    assert!(next.fencing_token() > token);
}

/// A first incarnation that dies holding a lease: on its own runtime (on a blocking thread,
/// as the emulator runs on the test's runtime, which goes on), `take` takes the lease
/// through its lock client; the guard is forgotten and the runtime dropped with everything
/// in it, so nothing is released or renewed again. The lease's token.
async fn dead_incarnation<F, Fut>(env: &common::Env, take: F) -> i64
where
    F: FnOnce(LockClient) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = mongolock::LockGuard>,
{
    let (uri, db) = (env.uri(), env.db.name().to_owned());
    tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let client = mongodb::Client::with_uri_str(&uri).await.unwrap();
            let guard = take(LockClient::new(client.database(&db).collection("locks"))).await;
            let token = guard.fencing_token();
            std::mem::forget(guard);
            token
        })
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn a_resumed_lease_is_kept_alive_by_its_new_client() {
    let env = env("resume_kept").await;
    let ttl = Duration::from_millis(1_500);
    let token = dead_incarnation(&env, move |locks| async move {
        (locks.rwlock("r").lock_id("svc").ttl(ttl))
            .read()
            .await
            .unwrap()
    })
    .await;
    let lock = env.locks.rwlock("r").lock_id("svc").ttl(ttl);
    let guard = lock.try_read().await.unwrap().expect("resumed");
    assert_eq!(guard.fencing_token(), token);
    // Twice its TTL later it is still held: the new client renews it.
    tokio::time::sleep(ttl * 2).await;
    assert!(!guard.is_lost(), "{:?}", guard.state());
    assert!(
        (env.locks.mutex("r").try_acquire().await.unwrap()).is_none(),
        "still held"
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn the_client_that_held_it_before_learns_it_lost_it_and_its_release_removes_nothing() {
    let env = env("resume_old_release").await;
    let ttl = secs(10);
    let every = Duration::from_millis(100);
    let first = env
        .locks
        .mutex("r")
        .lock_id("svc")
        .ttl(ttl)
        .extend_every(every);
    let old = first.acquire().await.unwrap();
    let other = env.other_client().await;
    let second = other.mutex("r").lock_id("svc").ttl(ttl).extend_every(every);
    let new = second.try_acquire().await.unwrap().expect("resumed");
    assert_eq!(new.fencing_token(), old.fencing_token());
    let reason = tokio::time::timeout(secs(10), old.lost())
        .await
        .expect("the old guard learns that it lost its lease");
    assert_eq!(reason, LossReason::Revoked);
    // The old incarnation releases (same lock id, same token): it removes nothing, and says
    // it had lost the lease.
    let error = old.release().await.unwrap_err();
    assert!(
        matches!(
            error.kind(),
            mongolock::ErrorKind::LeaseLost {
                reason: LossReason::Revoked,
                ..
            }
        ),
        "{error}"
    );
    // So nobody else is granted the lock the resumed lease holds, and that lease stays.
    let third = env.other_client().await;
    assert!(third.mutex("r").try_acquire().await.unwrap().is_none());
    tokio::time::sleep(every * 5).await;
    assert!(!new.is_lost(), "{:?}", new.state());
    new.release().await.unwrap();
    assert!(third.mutex("r").try_acquire().await.unwrap().is_some());
    other.shutdown().await;
    third.shutdown().await;
}

#[tokio::test]
async fn a_second_guard_in_one_client_or_another_ttl_is_refused() {
    let env = env("resume_refused").await;
    let mutex = env.locks.mutex("r").lock_id("svc").ttl(secs(30));
    let guard = mutex.acquire().await.unwrap();
    let error = mutex.try_acquire().await.unwrap_err();
    assert_eq!(invalid_argument(&error), "lock_id");
    // Another client, with another TTL: its keepalive would renew it by the granted one.
    let other = env.other_client().await;
    let error = (other.mutex("r").lock_id("svc").ttl(secs(60)))
        .try_acquire()
        .await
        .unwrap_err();
    assert_eq!(invalid_argument(&error), "ttl");
    assert!(!guard.is_lost());
    guard.release().await.unwrap();
}

/// The next `update` of the client named `app_name` loses its connection, and so does the
/// driver's retry of it.
async fn cut_next_two_updates(env: &common::Env, app_name: &str) {
    env.db
        .client()
        .database("admin")
        .run_command(bson::doc! {
            "configureFailPoint": "failCommand", "mode": { "times": 2 },
            "data": { "failCommands": ["update"], "appName": app_name, "closeConnection": true },
        })
        .await
        .expect("configureFailPoint");
}

#[tokio::test]
async fn an_adoption_that_fails_on_the_way_is_tried_again_while_the_caller_waits() {
    let env = env("resume_retry").await;
    let old = env.other_client().await;
    let lost = (old.mutex("job").lock_id("svc").ttl(secs(30)))
        .acquire()
        .await
        .unwrap();
    let token = lost.fencing_token();
    // The old incarnation is gone without a release.
    std::mem::forget(lost);
    drop(old);
    let mut options = mongodb::options::ClientOptions::parse(env.uri())
        .await
        .unwrap();
    options.app_name = Some("resume_retry".to_owned());
    let client = mongodb::Client::with_options(options).unwrap();
    let locks = LockClient::new(client.database(env.db.name()).collection("locks"));
    // The new incarnation's adoption is its first `update`.
    cut_next_two_updates(&env, "resume_retry").await;
    let mutex = locks.mutex("job").lock_id("svc").ttl(secs(30));
    let guard = (mutex.acquire_timeout(secs(20)).await)
        .expect("the failed adoption is tried again, not returned")
        .expect("resumed before the timeout");
    assert_eq!(guard.fencing_token(), token);
    assert!(!guard.is_lost());
    guard.release().await.unwrap();
    // Under `try_acquire` (one attempt) the error is the caller's to see.
    let old = env.other_client().await;
    std::mem::forget(
        (old.mutex("job").lock_id("svc2").ttl(secs(30)))
            .acquire()
            .await
            .unwrap(),
    );
    cut_next_two_updates(&env, "resume_retry").await;
    let once = locks.mutex("job").lock_id("svc2").ttl(secs(30));
    let error = (once.try_acquire().await.map(|guard| guard.is_some()))
        .expect_err("one attempt, and it failed");
    assert!(error.is_retryable(), "{error:?}");
}

/// A TTL that is not a whole number of milliseconds is stored rounded up: resuming with the
/// TTL the lease was granted with is taken, as any other.
#[tokio::test]
async fn a_lease_granted_with_a_fractional_millisecond_ttl_is_resumed_with_it() {
    let env = env("resume_fractional").await;
    let ttl = Duration::from_micros(30_000_500);
    let old = env.other_client().await;
    let lost = (old.mutex("job").lock_id("svc").ttl(ttl))
        .acquire()
        .await
        .unwrap();
    let token = lost.fencing_token();
    std::mem::forget(lost);
    drop(old);
    let mutex = env.locks.mutex("job").lock_id("svc").ttl(ttl);
    let guard = (mutex.try_acquire().await)
        .expect("the TTL it was granted with")
        .expect("resumed");
    assert_eq!(guard.fencing_token(), token);
    guard.release().await.unwrap();
}

/// The write that takes a lease back also stores the owner and host of the process that
/// resumes it: status shows who holds it now, not who held it before the restart.
#[tokio::test]
async fn a_resumed_lease_shows_its_new_owner_and_host() {
    let env = env("resume_owner").await;
    let old = env.other_client().await;
    let lost = (old.mutex("job").lock_id("svc").ttl(secs(30)))
        .owner("old-owner")
        .host("old-host")
        .acquire()
        .await
        .unwrap();
    std::mem::forget(lost);
    drop(old);
    let mutex = (env.locks.mutex("job").lock_id("svc").ttl(secs(30)))
        .owner("new-owner")
        .host("new-host");
    let guard = mutex.try_acquire().await.unwrap().expect("resumed");
    assert_eq!(guard.grant().holder().owner(), Some("new-owner"));
    let held = env.locks.status(&Filter::default()).await.unwrap();
    assert_eq!(held[0].holder().owner(), Some("new-owner"));
    assert_eq!(held[0].holder().host(), Some("new-host"));
    guard.release().await.unwrap();
}

/// A retiring release by an earlier incarnation also removes a re-grant of its attempt (the
/// same nonce under another token, which only a late copy makes and nobody holds), but not
/// one that a client adopted since: its adopter holds it.
///
/// Set up by hand where the network and a clock step would: A resumes process 0's lease
/// (so A's release retires process 0's attempt); the entry is then replaced by a re-grant of
/// that attempt (same nonce, next token, process 0's keeper), as a late copy of it lands
/// after the first grant ran out; B resumes that re-grant; A releases.
#[tokio::test]
async fn a_retiring_release_leaves_a_re_grant_another_client_resumed() {
    let env = env("resume_re_grant").await;
    let ttl = secs(6);
    let zero = env.other_client().await;
    let a = env.other_client().await;
    let b = env.other_client().await;
    let handle = |locks: &LockClient| locks.mutex("job").ttl(ttl).lock_id("worker-1");
    let first = handle(&zero).acquire().await.unwrap();
    let token = first.fencing_token();
    // Process 0 is gone without a word: its keeper stops.
    std::mem::forget(first);
    zero.shutdown().await;
    let resumed_by_a = handle(&a).acquire().await.unwrap();
    assert_eq!(resumed_by_a.fencing_token(), token);
    // The re-grant of process 0's attempt, by a late copy of it.
    let collection = env.collection();
    let mut doc = collection
        .find_one(bson::doc! { "_id": "job" })
        .await
        .unwrap()
        .unwrap();
    let mut entry = doc.get_document("exclusive").unwrap().clone();
    entry.insert("token", token + 1);
    entry.insert("keeper", "process-0");
    entry.remove("adopted");
    doc.insert("exclusive", entry);
    doc.insert("fence", token + 1);
    collection
        .replace_one(bson::doc! { "_id": "job" }, doc)
        .await
        .unwrap();
    let resumed_by_b = handle(&b).acquire().await.unwrap();
    assert_eq!(resumed_by_b.fencing_token(), token + 1);
    // A lets go: its grant is gone; the re-grant B holds stays.
    let _ = resumed_by_a.release().await;
    let held = env.locks.status(&Filter::default()).await.unwrap();
    assert!(
        held.iter().any(|lock| lock.fencing_token() == token + 1),
        "A's release removed the lease B resumed: {held:?}"
    );
    assert!(!resumed_by_b.is_lost());
    resumed_by_b.release().await.unwrap();
    for locks in [a, b] {
        locks.shutdown().await;
    }
}

/// A restarted process whose lease has less than its safety margin left when its waiting call
/// is answered "already held" does not adopt it: the adoption would take the call's place out
/// of the line while the call goes on waiting (the lease is too short to return), and a
/// waiter that joined meanwhile would pass it (the harness's (S9), seed 71000023). The call
/// keeps its place, waits for the lease to run out, and is granted before the waiter behind
/// it. The fail point holds the call's later attempts on the server (each 600 ms) while the
/// other waiter joins, so the order is decided by the line alone; the test checks that it
/// fired.
#[tokio::test]
async fn emulator_only_a_resume_with_too_little_left_keeps_the_calls_place_in_line() {
    let Some(env) = common::emulator_env("resume_keeps_place").await else {
        return;
    };
    let ttl = secs(3);
    let token = dead_incarnation(&env, move |locks| async move {
        (locks.mutex("r").lock_id("svc").ttl(ttl))
            .acquire()
            .await
            .unwrap()
    })
    .await;
    // Half the TTL later, less than the margin (2 s) is left.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let mut options = mongodb::options::ClientOptions::parse(env.uri())
        .await
        .unwrap();
    options.app_name = Some("svc-restarted".into());
    let restarted = mongodb::Client::with_options(options).unwrap();
    let admin = env.db.client().database("admin");
    admin
        .run_command(bson::doc! {
            "configureFailPoint": "failCommand", "mode": { "skip": 1 },
            "data": {
                "failCommands": ["findAndModify"], "appName": "svc-restarted",
                "blockConnection": true, "blockTimeMS": 600,
            },
        })
        .await
        .unwrap();
    let locks = LockClient::new(restarted.database(env.db.name()).collection("locks"));
    let mutex = (locks.mutex("r").lock_id("svc").ttl(ttl))
        .safety_margin(secs(2))
        .extend_every(Duration::from_millis(500));
    let started = tokio::time::Instant::now();
    let svc = tokio::spawn(async move {
        let guard = mutex
            .acquire_timeout(secs(20))
            .await
            .unwrap()
            .expect("granted");
        let at = tokio::time::Instant::now();
        tokio::time::sleep(Duration::from_millis(200)).await;
        guard.release().await.unwrap();
        at
    });
    // The other waiter joins while the call's second attempt is held on the server.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let other = env.other_client().await;
    let other_guard = (other.mutex("r").lock_id("other").ttl(ttl))
        .acquire_timeout(secs(20))
        .await
        .unwrap()
        .expect("granted");
    let other_at = tokio::time::Instant::now();
    let other_token = other_guard.fencing_token();
    tokio::time::sleep(Duration::from_millis(200)).await;
    other_guard.release().await.unwrap();
    let svc_at = svc.await.unwrap();
    let fired = admin
        .run_command(bson::doc! { "configureFailPoint": "failCommand", "mode": "off" })
        .await
        .unwrap();
    assert!(
        fired.get_i64("count").unwrap_or(0) >= 1,
        "the fail point held the call's later attempts: {fired}"
    );
    assert!(
        svc_at < other_at,
        "the restarted call kept its place and was granted first: svc after {:?}, other after {:?}",
        svc_at - started,
        other_at - started
    );
    assert!(other_token > token);
}
