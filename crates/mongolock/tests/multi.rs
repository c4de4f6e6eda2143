//! Locks on several resources at once ([`LockClient::multi`]):
//!
//! - **All or nothing.** A set is held whole or not at all: a refused `try_acquire` leaves
//!   nothing of the set held, and a held set has one fencing token per resource, each
//!   greater than the resource's last, under one lock id.
//! - **Nothing held while waiting.** A waiting acquire holds no part of its set while it
//!   waits for a resource that someone else holds.
//! - **No deadlock.** Clients that ask for overlapping sets in different orders all get
//!   through, and never two of them hold a resource at once.
//! - **One loss signal.** The set is lost when any member is, with that member's reason.
//! - **A crash mid-acquire leaves nothing past the TTL.**
//!
//! Tests that move the emulator's clock are named `emulator_only_...`; the others also run
//! against the real MongoDB named by `MONGODB_URI`. Time bounds are hang guards, never
//! assertions that something is fast.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bson::doc;
use common::{env, invalid_argument};
use mongolock::{Filter, LockClient, LossReason};

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// The live locks `lock_id` holds, by resource.
async fn held_by(locks: &LockClient, lock_id: &str) -> Vec<String> {
    let mut held: Vec<String> = locks
        .status(&Filter::default().lock_id(lock_id))
        .await
        .unwrap()
        .into_iter()
        .filter(|status| !status.is_expired())
        .map(|status| status.resource().to_owned())
        .collect();
    held.sort();
    held
}

#[tokio::test]
async fn a_set_is_taken_all_or_nothing_with_a_token_per_resource() {
    let env = env("multi_all_or_nothing").await;
    let other = env.other_client().await;
    let before = other.mutex("b").acquire().await.unwrap();
    let set = env.locks.multi(["c", "a", "b", "a"]).lock_id("the-set");
    assert_eq!(set.resources().collect::<Vec<_>>(), ["a", "b", "c"]);
    assert!(set.try_acquire().await.unwrap().is_none(), "b is held");
    assert!(
        held_by(&env.locks, "the-set").await.is_empty(),
        "nothing of a refused set is held"
    );
    let b_token = before.fencing_token();
    before.release().await.unwrap();

    let guard = set.try_acquire().await.unwrap().expect("all free now");
    assert_eq!(guard.lock_id(), "the-set");
    assert_eq!(guard.resources().collect::<Vec<_>>(), ["a", "b", "c"]);
    assert_eq!(held_by(&env.locks, "the-set").await, ["a", "b", "c"]);
    let status = env
        .locks
        .status(&Filter::default().lock_id("the-set"))
        .await
        .unwrap();
    for lock in &status {
        assert_eq!(
            guard.fencing_token(lock.resource()),
            Some(lock.fencing_token()),
            "{}",
            lock.resource()
        );
    }
    assert!(guard.fencing_token("b").unwrap() > b_token);
    assert_eq!(guard.fencing_token("z"), None);
    assert!(other.mutex("c").try_acquire().await.unwrap().is_none());
    guard.release().await.unwrap();
    assert!(held_by(&env.locks, "the-set").await.is_empty());
    assert!(other.mutex("c").try_acquire().await.unwrap().is_some());
}

#[tokio::test]
async fn a_set_without_resources_is_refused() {
    let env = env("multi_empty").await;
    let error = env
        .locks
        .multi(Vec::<String>::new())
        .try_acquire()
        .await
        .unwrap_err();
    assert_eq!(invalid_argument(&error), "resources");
    let error = env.locks.multi(["a", ""]).acquire().await.unwrap_err();
    assert_eq!(invalid_argument(&error), "resource");
    assert!(
        env.locks
            .status(&Filter::default())
            .await
            .unwrap()
            .is_empty(),
        "nothing was written"
    );
}

#[tokio::test]
async fn a_waiting_set_holds_nothing_while_it_waits() {
    let env = env("multi_waiting").await;
    let other = env.other_client().await;
    let third = env.other_client().await;
    let blocker = other.mutex("b").acquire().await.unwrap();
    let set = env.locks.multi(["a", "b"]).lock_id("waiting-set");
    let waiting = tokio::spawn(async move { set.acquire().await });
    // The waiter is in b's line once its first round is over (and a released).
    let documents = env.collection();
    let in_line = async {
        loop {
            let b = documents.find_one(doc! {"_id": "b"}).await.unwrap();
            let queued = b
                .and_then(|b| b.get_array("queue").ok().map(|queue| queue.len()))
                .unwrap_or(0);
            if queued > 0 {
                break;
            }
            tokio::time::sleep(ms(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), in_line)
        .await
        .expect("the waiter joins b's line");
    for _ in 0..5 {
        assert!(
            held_by(&env.locks, "waiting-set").await.is_empty(),
            "the waiter holds nothing"
        );
        let a = third.mutex("a").try_acquire().await.unwrap();
        a.expect("a is free while the set waits for b")
            .release()
            .await
            .unwrap();
        tokio::time::sleep(ms(50)).await;
    }
    blocker.release().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the set is taken once b is free")
        .unwrap()
        .unwrap();
    assert_eq!(held_by(&env.locks, "waiting-set").await, ["a", "b"]);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn overlapping_sets_in_any_order_never_deadlock_nor_overlap() {
    let env = env("multi_no_deadlock").await;
    let names = ["a", "b", "c", "d"];
    let busy: Arc<HashMap<&str, AtomicBool>> =
        Arc::new(names.iter().map(|n| (*n, AtomicBool::new(false))).collect());
    let sets: [&[&str]; 6] = [
        &["a", "b", "c", "d"],
        &["d", "c", "b", "a"],
        &["b", "d"],
        &["c", "a"],
        &["d", "a"],
        &["c", "b", "d"],
    ];
    let mut tasks = Vec::new();
    for (i, set) in sets.into_iter().enumerate() {
        let locks = env.other_client().await;
        let busy = busy.clone();
        tasks.push(tokio::spawn(async move {
            let mut tokens: HashMap<String, i64> = HashMap::new();
            for round in 0..4 {
                let guard = locks
                    .multi(set.iter().copied())
                    .ttl(Duration::from_secs(10))
                    .acquire()
                    .await
                    .unwrap();
                for name in set {
                    assert!(
                        !busy[name].swap(true, Ordering::SeqCst),
                        "task {i} round {round}: {name} held twice"
                    );
                    let token = guard.fencing_token(name).unwrap();
                    let last = tokens.insert((*name).to_owned(), token);
                    assert!(last.is_none_or(|last| token > last), "{name}");
                }
                tokio::time::sleep(ms(5)).await;
                for name in set {
                    busy[name].store(false, Ordering::SeqCst);
                }
                guard.release().await.unwrap();
            }
        }));
    }
    let all = futures_util::future::try_join_all(tasks);
    tokio::time::timeout(Duration::from_secs(120), all)
        .await
        .expect("no deadlock: every set was taken four times")
        .unwrap();
}

#[tokio::test]
async fn the_set_is_lost_when_any_member_is() {
    let env = env("multi_lost").await;
    let guard = env
        .locks
        .multi(["a", "b", "c"])
        .ttl(ms(3_000))
        .extend_every(ms(100))
        .acquire()
        .await
        .unwrap();
    assert!(!guard.is_lost());
    let lock_id = guard.lock_id().to_owned();
    let other = env.other_client().await;
    assert_eq!(other.force_release("b").await.unwrap(), 1);
    let reason = tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("the keeper's next renewal finds b gone");
    assert_eq!(reason, LossReason::Revoked);
    assert!(guard.is_lost());
    let error = guard.release().await.unwrap_err();
    assert!(
        matches!(error.kind(), mongolock::ErrorKind::LeaseLost { resource, .. } if resource == "b"),
        "{error:?}"
    );
    assert!(
        held_by(&env.locks, &lock_id).await.is_empty()
            && other
                .multi(["a", "c"])
                .try_acquire()
                .await
                .unwrap()
                .is_some(),
        "the other members were released all the same"
    );
}

#[tokio::test]
async fn emulator_only_a_crash_mid_acquire_leaves_nothing_past_the_ttl() {
    let Some(common::Proxied {
        server,
        proxy,
        cut_off: crashing,
        direct,
    }) = common::proxied("crash").await
    else {
        return;
    };
    let blocker = direct.mutex("b").acquire().await.unwrap();
    let set = crashing
        .multi(["a", "b"])
        .lock_id("crashing-set")
        .ttl(ms(1_000));
    let acquiring = tokio::spawn(async move { set.acquire().await });
    // Cut it off as soon as it holds a part of the set, then stop it: a crash, since
    // nothing it sends from now on reaches the server.
    let holds_a = async {
        while held_by(&direct, "crashing-set").await.is_empty() {
            tokio::time::sleep(ms(1)).await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), holds_a).await;
    proxy.blackhole();
    acquiring.abort();
    blocker.release().await.unwrap();
    // Past the TTL and the life of a place in line (twice the TTL), by the server's clock.
    server.clock().advance(ms(2_500));
    assert!(held_by(&direct, "crashing-set").await.is_empty());
    let whole = direct
        .multi(["a", "b"])
        .try_acquire()
        .await
        .unwrap()
        .expect("nothing of the crashed acquire is left");
    whole.release().await.unwrap();
}
