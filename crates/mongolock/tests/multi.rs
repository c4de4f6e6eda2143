//! Locks on several resources at once ([`LockClient::multi`]):
//!
//! - **All or nothing.** A set is held whole or not at all: a refused `try_acquire` leaves
//!   nothing of the set held, and a held set has one fencing token per resource, each
//!   greater than the resource's last, under one lock id.
//! - **No lease held while waiting, and its turn kept.** A waiting acquire holds no part of
//!   its set while it waits for a resource that someone else holds; it keeps its turn at the
//!   members it reached (nobody else takes them meanwhile), so steady waiters on its
//!   members never starve it, and it lets go of those turns after a while, so code that
//!   holds one member while it waits for another never waits on it for ever.
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

/// Returns once somebody stands in `resource`'s line (read directly); a hang guard of 20 s.
async fn until_somebody_waits(env: &common::Env, resource: &str) {
    let documents = env.collection();
    let in_line = async {
        loop {
            let doc = documents.find_one(doc! {"_id": resource}).await.unwrap();
            let queued = doc
                .and_then(|d| d.get_array("queue").ok().map(|queue| queue.len()))
                .unwrap_or(0);
            if queued > 0 {
                break;
            }
            tokio::time::sleep(ms(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), in_line)
        .await
        .unwrap_or_else(|_| panic!("nobody joined {resource}'s line"));
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
async fn a_waiting_set_holds_no_lease_and_keeps_its_turn_while_it_waits() {
    let env = env("multi_waiting").await;
    let other = env.other_client().await;
    let third = env.other_client().await;
    let blocker = other.mutex("b").acquire().await.unwrap();
    let set = env.locks.multi(["a", "b"]).lock_id("waiting-set");
    let waiting = tokio::spawn(async move { set.acquire().await });
    // The waiter is in b's line once its first round is over (and a released).
    until_somebody_waits(&env, "b").await;
    for _ in 0..5 {
        assert!(
            held_by(&env.locks, "waiting-set").await.is_empty(),
            "the waiter holds no lease"
        );
        // Its turn at a is kept for it: nobody else takes a meanwhile.
        let a = third.mutex("a").try_acquire().await.unwrap();
        assert!(a.is_none(), "a is kept for the set while it waits for b");
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

/// Two clients per member take turns at it without a pause: each holds it briefly,
/// releases, and queues again at once, so somebody always stands in its line. A set of both
/// members waits its turn in each line and is granted; before, its attempts at the members
/// it had not waited for were single attempts, refused whenever anybody stood in line, and
/// it waited for ever.
#[tokio::test]
async fn a_set_waits_its_turn_among_steady_waiters_and_is_granted() {
    let env = env("multi_steady_waiters").await;
    let stop = Arc::new(AtomicBool::new(false));
    let busy: Arc<HashMap<&str, AtomicBool>> = Arc::new(
        ["a", "b"]
            .iter()
            .map(|n| (*n, AtomicBool::new(false)))
            .collect(),
    );
    let mut cyclers = Vec::new();
    for name in ["a", "a", "b", "b"] {
        let locks = env.other_client().await;
        let (stop, busy) = (stop.clone(), busy.clone());
        cyclers.push(tokio::spawn(async move {
            let mut turns = 0_u32;
            while !stop.load(Ordering::SeqCst) {
                let guard = locks.mutex(name).ttl(ms(5_000)).acquire().await.unwrap();
                assert!(
                    !busy[name].swap(true, Ordering::SeqCst),
                    "{name} held twice"
                );
                tokio::time::sleep(ms(20)).await;
                busy[name].store(false, Ordering::SeqCst);
                guard.release().await.unwrap();
                turns += 1;
            }
            turns
        }));
    }
    // Both lines are busy before the set asks.
    tokio::time::sleep(ms(300)).await;
    let got = env
        .locks
        .multi(["a", "b"])
        .ttl(ms(5_000))
        .acquire_timeout(Duration::from_secs(20))
        .await
        .unwrap();
    let set = got.expect("the set is granted among steady waiters");
    for name in ["a", "b"] {
        assert!(
            !busy[name].swap(true, Ordering::SeqCst),
            "{name} held twice"
        );
    }
    tokio::time::sleep(ms(20)).await;
    for name in ["a", "b"] {
        busy[name].store(false, Ordering::SeqCst);
    }
    set.release().await.unwrap();
    stop.store(true, Ordering::SeqCst);
    for cycler in cyclers {
        let turns = tokio::time::timeout(Duration::from_secs(20), cycler)
            .await
            .expect("the steady waiters stop")
            .unwrap();
        assert!(turns > 0, "every steady waiter had its turns");
    }
}

/// A client holds b and then waits for a, while a set of both waits: the set reached its
/// turn at a first and keeps it while it waits for b, which the client will not release
/// before it has a. The set keeps its turns for a TTL at most, then lets them go and waits
/// again from the end of the lines: the client gets a, releases both, and the set follows.
#[tokio::test]
async fn a_set_lets_go_of_its_turns_for_a_holder_that_waits_for_a_member() {
    let env = env("multi_nested_holder").await;
    let nested = env.other_client().await;
    let b = nested.mutex("b").ttl(ms(5_000)).acquire().await.unwrap();
    let set = env
        .locks
        .multi(["a", "b"])
        .ttl(ms(1_000))
        .lock_id("keeping-set");
    let waiting = tokio::spawn(async move { set.acquire_timeout(Duration::from_secs(30)).await });
    // The set stands in b's line once it has its turn at a.
    until_somebody_waits(&env, "b").await;
    let a = nested
        .mutex("a")
        .ttl(ms(5_000))
        .acquire_timeout(Duration::from_secs(20))
        .await
        .unwrap()
        .expect("the set lets go of its turn at a");
    a.release().await.unwrap();
    b.release().await.unwrap();
    let both = tokio::time::timeout(Duration::from_secs(40), waiting)
        .await
        .expect("the set finishes")
        .unwrap()
        .unwrap()
        .expect("the set is granted once b is free");
    assert_eq!(held_by(&env.locks, "keeping-set").await, ["a", "b"]);
    both.release().await.unwrap();
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

/// A set with a minimum hold keeps no member it never held: the members a refused round
/// took are let go of without a hold (nobody worked under them), so another client gets
/// them at once, and a waiting acquire of the set is granted once its other member is free.
#[tokio::test]
async fn a_refused_round_starts_no_minimum_hold() {
    let env = env("multi_min_hold").await;
    let other = env.other_client().await;
    let set = || (env.locks.multi(["a", "b"]).ttl(ms(5_000))).min_hold(ms(8_000));
    let blocker = other.mutex("b").ttl(ms(5_000)).acquire().await.unwrap();
    assert!(set().try_acquire().await.unwrap().is_none());
    let a = other.mutex("a").try_acquire().await.unwrap();
    a.expect("a, taken and let go of by the refused round, is free")
        .release()
        .await
        .unwrap();

    let waiting = tokio::spawn({
        let set = set();
        async move { set.acquire_timeout(ms(4_000)).await.unwrap() }
    });
    tokio::time::sleep(ms(300)).await;
    blocker.release().await.unwrap();
    let held = waiting.await.unwrap();
    held.expect("granted once b was let go")
        .release()
        .await
        .unwrap();
    other.shutdown().await;
}

/// A held set with a minimum hold, its guard dropped (released in the background), keeps
/// every member from everybody until the hold ends: the same client under another lock id
/// and another client are refused.
#[tokio::test]
async fn a_dropped_set_keeps_its_minimum_hold() {
    let env = env("multi_dropped_hold").await;
    let other = env.other_client().await;
    let set = |id: &str| {
        (env.locks.multi(["a", "b"]).ttl(ms(5_000)))
            .min_hold(ms(3_000))
            .lock_id(id)
    };
    let held = set("job-1").acquire().await.unwrap();
    drop(held);
    tokio::time::sleep(ms(500)).await;
    assert!(
        set("job-6").try_acquire().await.unwrap().is_none(),
        "the same client, another lock id, granted inside the hold"
    );
    assert!(
        other.mutex("a").try_acquire().await.unwrap().is_none(),
        "another client granted a member inside the hold"
    );
    other.shutdown().await;
}

/// The same, the server's clock stepping back past the set's grant after the drop (as in
/// `--long --seed 13131313`, where another lock id of the same client was granted both
/// members of such a set inside its hold, by the server's times): the hold is kept whatever
/// the clock reads.
#[tokio::test]
async fn emulator_only_a_dropped_set_keeps_its_minimum_hold_through_a_step_back() {
    let env = env("multi_dropped_hold_back").await;
    if !env.has_clock() {
        return;
    }
    let other = env.other_client().await;
    let set = |id: &str| {
        (env.locks.multi(["a", "b"]).ttl(ms(5_000)))
            .min_hold(ms(3_000))
            .lock_id(id)
    };
    let held = set("job-1").acquire().await.unwrap();
    tokio::time::sleep(ms(300)).await;
    drop(held);
    tokio::time::sleep(ms(300)).await;
    env.step_back(ms(1_000));
    for _ in 0..5 {
        assert!(
            set("job-6").try_acquire().await.unwrap().is_none(),
            "the same client, another lock id, granted inside the hold"
        );
        assert!(
            other.mutex("a").try_acquire().await.unwrap().is_none(),
            "another client granted a member inside the hold"
        );
        tokio::time::sleep(ms(200)).await;
    }
    other.shutdown().await;
}
