//! Leader election ([`LockClient::election`]):
//!
//! - **One leader at a time**, each new term greater than the last; a campaigner waiting
//!   leads as soon as the leader resigns.
//! - **Proclaim** changes the advertised value and keeps the term; a deposed leader's
//!   proclaim is refused and tells it that it lost, and never touches the new leader's
//!   value.
//! - **Loss is told**: a leader whose leadership was revoked learns it from `lost()`.
//! - **Resuming advertises the new value**: a campaign under a stable lock id that takes
//!   back the leadership of its process before a restart leads with the value it was given,
//!   on the server and in `value()`; if that value cannot be set, it does not return a
//!   leadership advertising the old one. The leader it displaced can no longer proclaim.
//! - **Observe** yields the leader now, then every change (a new leader, a new value, nobody
//!   leading), with change streams and, on a standalone server, by polling; a leader whose
//!   lease ran out is seen to go although no write says so.
//!
//! Tests that move the emulator's clock are named `emulator_only_...`; the others also run
//! against the real MongoDB named by `MONGODB_URI`. Time bounds are hang guards, never
//! assertions that something is fast.

mod common;

use std::time::Duration;

use common::{env, invalid_argument, secs};
use futures_util::{Stream, StreamExt};
use mongolock::{ErrorKind, Leader, LockClient, LossReason};
use mongolock_testkit::TestServer;

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// The next item of an observer, within a hang guard.
async fn next_leader(
    changes: &mut (impl Stream<Item = mongolock::Result<Option<Leader>>> + Unpin),
) -> Option<(String, i64)> {
    tokio::time::timeout(Duration::from_secs(20), changes.next())
        .await
        .expect("the observer yields within the hang guard")
        .expect("an observer never ends")
        .expect("no error")
        .map(|leader| (leader.value().to_owned(), leader.term()))
}

#[tokio::test]
async fn one_leader_at_a_time_and_every_term_greater() {
    let env = env("election_one_leader").await;
    let other = env.other_client().await;
    let election = env.locks.election("scheduler");
    let a = election.campaign("host-a").await.unwrap();
    assert_eq!(a.value(), "host-a");
    let rival = other.election("scheduler");
    assert!(rival.try_campaign("host-b").await.unwrap().is_none());
    let leader = election.leader().await.unwrap().expect("a leads");
    assert_eq!((leader.value(), leader.term()), ("host-a", a.term()));
    assert_eq!(leader.lock_id(), a.guard().lock_id());

    let campaign = tokio::spawn(async move { rival.campaign("host-b").await });
    tokio::time::sleep(ms(100)).await;
    assert!(!campaign.is_finished(), "b waits while a leads");
    let first_term = a.term();
    a.resign().await.unwrap();
    let b = tokio::time::timeout(Duration::from_secs(20), campaign)
        .await
        .expect("b leads once a resigned")
        .unwrap()
        .unwrap();
    assert!(b.term() > first_term);
    let leader = election.leader().await.unwrap().expect("b leads");
    assert_eq!((leader.value(), leader.term()), ("host-b", b.term()));
    b.resign().await.unwrap();
    assert_eq!(election.leader().await.unwrap(), None);
}

#[tokio::test]
async fn proclaim_changes_the_value_and_keeps_the_term() {
    let env = env("election_proclaim").await;
    let election = env.locks.election("scheduler");
    let leading = election.campaign("starting").await.unwrap();
    leading.proclaim("serving on :8080").await.unwrap();
    assert_eq!(leading.value(), "serving on :8080");
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(
        (leader.value(), leader.term()),
        ("serving on :8080", leading.term())
    );
    assert!(!leading.is_lost());
    let error = leading
        .proclaim("v".repeat(mongolock::MAX_LABEL_LEN + 1))
        .await
        .unwrap_err();
    assert_eq!(invalid_argument(&error), "value");
    let error = election
        .try_campaign("v".repeat(mongolock::MAX_LABEL_LEN + 1))
        .await
        .unwrap_err();
    assert_eq!(invalid_argument(&error), "value");
    assert_eq!(
        election.leader().await.unwrap().unwrap().value(),
        "serving on :8080"
    );
    leading.resign().await.unwrap();
}

#[tokio::test]
async fn a_deposed_leader_learns_it_and_cannot_proclaim_over_the_next() {
    let env = env("election_deposed").await;
    let other = env.other_client().await;
    let election = env.locks.election("scheduler");
    let old = election.campaign("old").await.unwrap();
    // An operator breaks the leadership; someone else is elected.
    assert_eq!(other.force_release("scheduler").await.unwrap(), 1);
    let new = other
        .election("scheduler")
        .try_campaign("new")
        .await
        .unwrap()
        .expect("free after the force release");
    assert!(new.term() > old.term());
    let error = old.proclaim("stale").await.unwrap_err();
    assert!(
        matches!(
            error.kind(),
            ErrorKind::LeaseLost {
                reason: LossReason::Revoked,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(old.is_lost(), "told at once, not at the next renewal");
    assert_eq!(old.value(), "old");
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!((leader.value(), leader.term()), ("new", new.term()));
    assert!(
        old.resign().await.is_err(),
        "resigning a lost leadership says so"
    );
    new.resign().await.unwrap();
}

#[tokio::test]
async fn a_revoked_leader_is_told_by_lost() {
    let env = env("election_lost").await;
    let leading = env
        .locks
        .election("scheduler")
        .ttl(ms(3_000))
        .extend_every(ms(100))
        .campaign("me")
        .await
        .unwrap();
    let operator = env.other_client().await;
    operator.force_release("scheduler").await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(10), leading.lost())
        .await
        .expect("the keeper's next renewal finds the leadership gone");
    assert_eq!(reason, LossReason::Revoked);
    assert!(leading.is_lost());
}

/// Observes `election` through a leader, a new value, nobody, and another leader.
async fn observe_every_change(locks: &LockClient, other: &LockClient) {
    let election = locks.election("scheduler");
    let mut changes = Box::pin(election.observe());
    assert_eq!(
        next_leader(&mut changes).await,
        None,
        "nobody leads at first"
    );
    let a = election.campaign("a").await.unwrap();
    assert_eq!(
        next_leader(&mut changes).await,
        Some(("a".to_owned(), a.term()))
    );
    a.proclaim("a, draining").await.unwrap();
    assert_eq!(
        next_leader(&mut changes).await,
        Some(("a, draining".to_owned(), a.term()))
    );
    a.resign().await.unwrap();
    assert_eq!(next_leader(&mut changes).await, None);
    let b = other.election("scheduler").campaign("b").await.unwrap();
    assert_eq!(
        next_leader(&mut changes).await,
        Some(("b".to_owned(), b.term()))
    );
    b.resign().await.unwrap();
    assert_eq!(next_leader(&mut changes).await, None);
}

#[tokio::test]
async fn observe_yields_every_change_of_leader() {
    let env = env("election_observe").await;
    let other = env.other_client().await;
    observe_every_change(&env.locks, &other).await;
}

#[tokio::test]
async fn observe_polls_a_standalone_server() {
    let server = TestServer::builder()
        .standalone(true)
        .start()
        .await
        .expect("emulator starts");
    let locks = LockClient::new(server.client().database("observe").collection("locks"));
    let other = LockClient::new(server.new_client().database("observe").collection("locks"));
    observe_every_change(&locks, &other).await;
}

#[tokio::test]
async fn emulator_only_observe_sees_a_dead_leaders_lease_run_out() {
    let Some(common::Proxied {
        server,
        proxy,
        cut_off: leader,
        direct: watcher,
    }) = common::proxied("dead").await
    else {
        return;
    };
    let leading = leader
        .election("scheduler")
        .ttl(ms(1_000))
        .campaign("doomed")
        .await
        .unwrap();
    let mut changes = Box::pin(watcher.election("scheduler").observe());
    assert_eq!(
        next_leader(&mut changes).await,
        Some(("doomed".to_owned(), leading.term()))
    );
    // The leader is cut off: nothing renews it, and no write will say that it is gone.
    proxy.blackhole();
    server.clock().advance(ms(1_500));
    assert_eq!(next_leader(&mut changes).await, None);
    drop(leading);
}

/// A leader that campaigns in `scheduler` under `lock_id`, advertising `value`, and dies
/// without resigning: its runtime ends, and its keeper with it, so its leadership lives on
/// on the server until its TTL. Returns its term.
async fn a_leader_that_dies(env: &common::Env, lock_id: &str, value: &str, ttl: Duration) -> i64 {
    let (uri, db) = (env.uri(), env.db.name().to_owned());
    let (lock_id, value) = (lock_id.to_owned(), value.to_owned());
    // On a blocking thread: the emulator runs on this test's runtime, which goes on.
    tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let client = mongodb::Client::with_uri_str(&uri).await.unwrap();
            let locks = LockClient::new(client.database(&db).collection("locks"));
            let leading = (locks.election("scheduler").ttl(ttl).lock_id(lock_id))
                .campaign(value)
                .await
                .unwrap();
            let term = leading.term();
            std::mem::forget(leading);
            term
        })
    })
    .await
    .unwrap()
}

/// The value and term the server has for the leader of `scheduler`.
async fn stored_leader(locks: &LockClient) -> Option<(String, i64)> {
    let leader = locks.election("scheduler").leader().await.unwrap();
    leader.map(|leader| (leader.value().to_owned(), leader.term()))
}

#[tokio::test]
async fn a_leader_that_resumes_its_lock_id_advertises_its_new_value() {
    let env = env("election_resume_value").await;
    let ttl = secs(30);
    for way in ["campaign", "try_campaign", "campaign_timeout"] {
        let term = a_leader_that_dies(&env, "node-1", "old-address:80", ttl).await;
        // Started again within the TTL, at a new address.
        let election = env.locks.election("scheduler").ttl(ttl).lock_id("node-1");
        let value = "new-address:80";
        let leading = tokio::time::timeout(secs(20), async {
            match way {
                "campaign" => election.campaign(value).await.unwrap(),
                "try_campaign" => election.try_campaign(value).await.unwrap().unwrap(),
                _ => (election.campaign_timeout(value, secs(10)).await.unwrap()).unwrap(),
            }
        })
        .await
        .expect("resumed at once");
        assert_eq!(leading.term(), term, "{way}: the same leadership, resumed");
        assert_eq!(leading.value(), value, "{way}");
        assert_eq!(
            stored_leader(&env.locks).await,
            Some((value.to_owned(), term)),
            "{way}: the server advertises the new value"
        );
        leading.resign().await.unwrap();
        assert_eq!(stored_leader(&env.locks).await, None, "{way}");
    }
}

#[tokio::test]
async fn a_leader_displaced_by_its_lock_id_resumed_elsewhere_cannot_proclaim() {
    let env = env("election_displaced").await;
    let ttl = secs(30);
    let first = env.other_client().await;
    let old = (first.election("scheduler").ttl(ttl).lock_id("node-1"))
        .campaign("old-address:80")
        .await
        .unwrap();
    // The same lock id campaigns in another client (a restarted process, while the first
    // was only paused): it takes the leadership over.
    let new = (env.locks.election("scheduler").ttl(ttl).lock_id("node-1"))
        .try_campaign("new-address:80")
        .await
        .unwrap()
        .expect("resumed at once");
    assert_eq!(new.term(), old.term());
    assert!(!old.is_lost(), "not told before its next renewal");
    let error = old.proclaim("old-address:81").await.unwrap_err();
    assert!(
        matches!(
            error.kind(),
            ErrorKind::LeaseLost {
                reason: LossReason::Revoked,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(old.is_lost(), "told at once by the refused proclaim");
    assert_eq!(old.value(), "old-address:80");
    assert_eq!(
        stored_leader(&env.locks).await,
        Some(("new-address:80".to_owned(), new.term()))
    );
    // The leader that took over proclaims as any leader does.
    new.proclaim("new-address:81").await.unwrap();
    assert_eq!(
        stored_leader(&env.locks).await,
        Some(("new-address:81".to_owned(), new.term()))
    );
    new.resign().await.unwrap();
    first.shutdown().await;
}

/// An observer reads one leader ahead of a slow consumer at most: after the leader it read
/// ahead, the consumer's next item is a fresh reading (the leader now), never a second
/// stale one read meanwhile (here: "nobody leads", between two leaders).
#[tokio::test]
async fn an_observer_reads_one_leader_ahead_of_a_slow_consumer_at_most() {
    let env = env("election_slow_consumer").await;
    let other = env.other_client().await;
    let election = env.locks.election("scheduler").ttl(secs(10));
    let mut changes = Box::pin(election.observe());
    assert_eq!(next_leader(&mut changes).await, None, "nobody leads yet");
    let first = election.campaign("host-a").await.unwrap();
    tokio::time::sleep(ms(500)).await; // read ahead: host-a
    first.resign().await.unwrap();
    tokio::time::sleep(ms(500)).await; // nobody leads, while the consumer does not ask
    let second = other
        .election("scheduler")
        .campaign("host-b")
        .await
        .unwrap();
    tokio::time::sleep(ms(500)).await;
    let (value, _) = next_leader(&mut changes)
        .await
        .expect("the leader read ahead");
    assert_eq!(value, "host-a");
    let now = next_leader(&mut changes).await.map(|(value, _)| value);
    assert_eq!(
        now.as_deref(),
        Some("host-b"),
        "a second reading was held ahead"
    );
    second.resign().await.unwrap();
    other.shutdown().await;
}
