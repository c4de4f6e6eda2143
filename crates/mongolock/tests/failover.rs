//! A mutex across a failover: two lock clients contend for one mutex on the testkit's
//! three-member replica set, and the primary steps down (twice) while one of them holds it.
//! There must never be two holders (a grant while another holder's lease is not yet
//! reported lost), and fencing tokens must only go up.
//!
//! The set follows mongod's replica set where it matters here (see
//! `mongolock_testkit::replset`): `replSetStepDown` as `src/mongo/db/repl/repl_set_commands.cpp`
//! parses it, election handoff to the caught-up secondary (`src/mongo/db/repl/README.md`,
//! "Step Up"), writes on the former primary refused with `NotWritablePrimary` and the
//! `RetryableWriteError` label (`src/mongo/db/service_entry_point_common.cpp`,
//! `src/mongo/db/error_labels.cpp`), and `w: "majority"` waiting for a majority of members.
//! This test always runs on the emulator (a real replica set cannot be stepped down from a
//! test safely), whatever `MONGODB_URI` says.

use std::sync::Arc;
use std::time::Duration;

use mongolock::{LockClient, LockGuard};
use mongolock_testkit::ReplicaSet;
use tokio::sync::Mutex;
use tokio::time::{Instant, sleep};

#[derive(Default)]
struct Book {
    /// The client holding the mutex now, as its worker saw its grant, with its guard.
    holder: Option<(usize, Arc<LockGuard>)>,
    /// Every grant in the order the workers saw them: (worker, token, after how many
    /// step-downs).
    grants: Vec<(usize, i64, usize)>,
    /// Failed attempts and releases (allowed during a failover: unknown outcomes or
    /// refusals), as text.
    errors: Vec<String>,
    /// What must never happen.
    violations: Vec<String>,
    step_downs: usize,
    /// Releases that found the lease held throughout (the server still had the grant).
    held_throughout: usize,
}

async fn worker(
    index: usize,
    locks: LockClient,
    book: Arc<Mutex<Book>>,
    until: Instant,
) -> LockClient {
    while Instant::now() < until {
        let attempt = locks
            .mutex("failover")
            .ttl(Duration::from_secs(1))
            .acquire_timeout(Duration::from_secs(3))
            .await;
        let guard = match attempt {
            Ok(Some(guard)) => Arc::new(guard),
            Ok(None) => continue,
            Err(error) => {
                book.lock().await.errors.push(format!("acquire: {error}"));
                sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        {
            let mut book = book.lock().await;
            let token = guard.fencing_token();
            if let Some((other, held)) = &book.holder
                && !held.is_lost()
            {
                let message = format!(
                    "worker {index} granted token {token} while worker {other} holds token {}",
                    held.fencing_token()
                );
                book.violations.push(message);
            }
            if let Some((_, last, _)) = book.grants.last()
                && token <= *last
            {
                let message = format!("token {token} after token {last}");
                book.violations.push(message);
            }
            let step_downs = book.step_downs;
            book.grants.push((index, token, step_downs));
            book.holder = Some((index, guard.clone()));
        }
        // Hold it a while, across renewals (the step-downs come while someone holds it).
        tokio::select! {
            _ = sleep(Duration::from_millis(400)) => {}
            _ = guard.lost() => {}
        }
        {
            let mut book = book.lock().await;
            if book.holder.as_ref().is_some_and(|(i, _)| *i == index) {
                book.holder = None;
            }
        }
        let guard = Arc::try_unwrap(guard).expect("only this worker keeps the guard now");
        match guard.release().await {
            Ok(()) => book.lock().await.held_throughout += 1,
            Err(error) => book.lock().await.errors.push(format!("release: {error}")),
        }
        // Let the other one in now and then.
        sleep(Duration::from_millis(10)).await;
    }
    locks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutex_has_one_holder_and_rising_tokens_across_step_downs() {
    let set = ReplicaSet::builder()
        .members(3)
        .lag(Duration::from_millis(5))
        .start()
        .await
        .expect("the replica set starts");
    let db = "mongolock_failover";
    let first = LockClient::new(set.new_client().database(db).collection("locks"));
    first.create_indexes().await.unwrap();
    let second = LockClient::new(set.new_client().database(db).collection("locks"));
    let book = Arc::new(Mutex::new(Book::default()));
    let until = Instant::now() + Duration::from_secs(4);
    let workers = [
        tokio::spawn(worker(0, first, book.clone(), until)),
        tokio::spawn(worker(1, second, book.clone(), until)),
    ];

    let admin = set.client().database("admin");
    for round in 0..2 {
        sleep(Duration::from_millis(800)).await;
        // Wait until someone holds the mutex, then step the primary down under it.
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            if book.lock().await.holder.is_some() {
                break;
            }
            assert!(Instant::now() < deadline, "nobody got the mutex");
            sleep(Duration::from_millis(5)).await;
        }
        let before = set.primary();
        admin
            .run_command(bson::doc! {"replSetStepDown": 10})
            .await
            .unwrap_or_else(|e| panic!("step-down {round}: {e}"));
        let after = set.primary();
        assert!(
            after.is_some() && after != before,
            "{before:?} -> {after:?}"
        );
        book.lock().await.step_downs += 1;
    }
    assert_eq!(set.term(), 3);

    let mut clients = Vec::new();
    for worker in workers {
        clients.push(worker.await.unwrap());
    }
    for locks in clients {
        locks.shutdown().await;
    }
    let book = book.lock().await;
    eprintln!(
        "{} grants ({} after the first step-down, {} after the second), {} released held \
         throughout, {} errors: {:?}",
        book.grants.len(),
        book.grants.iter().filter(|g| g.2 >= 1).count(),
        book.grants.iter().filter(|g| g.2 >= 2).count(),
        book.held_throughout,
        book.errors.len(),
        book.errors
    );
    assert!(book.violations.is_empty(), "{:?}", book.violations);
    assert!(
        book.grants.iter().any(|g| g.2 == 2),
        "no grant on the last primary: {:?}",
        book.grants
    );
    drop(book);
    set.shutdown().await;
}
