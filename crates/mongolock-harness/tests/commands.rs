//! The harness's faults on single requests pick out the library's commands by what they are
//! (`commands`): run through a fault proxy, each matcher cuts the command it names
//! and lets the others through. If the library changed how it sends one of them, a fault
//! built on it would hit nothing; this fails first.

use std::time::Duration;

use mongolock::{AcquireRequest, Filter, LockClient, LockDetails};
use mongolock_harness::commands;
use mongolock_harness::workload::{COLLECTION, DB};
use mongolock_testkit::TestServer;
use mongolock_testkit::faults::proxy::{FaultProxy, RequestFault, Requests};

const TTL: Duration = Duration::from_secs(5);

/// Whether `resource` has a live lock, read directly.
async fn held(direct: &LockClient, resource: &str) -> bool {
    let filter = Filter::default().resource(resource);
    let status = direct.status(&filter).await.expect("status");
    status.iter().any(|s| !s.is_expired())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_matcher_cuts_the_library_command_it_names_and_no_other() {
    let server = TestServer::start().await.expect("emulator starts");
    let proxy = FaultProxy::start(server.addr())
        .await
        .expect("proxy starts");
    let direct = LockClient::new(server.client().database(DB).collection(COLLECTION));
    direct.create_indexes().await.expect("indexes");
    let locks = LockClient::new(proxy.client().database(DB).collection(COLLECTION));

    // Releases of one resource: the acquire goes through, the release does not.
    let releases = proxy.fault_requests(
        Requests::matching(|c| commands::is_release(c) && commands::resource(c) == Some("m")),
        RequestFault::Cut,
    );
    let guard = locks
        .mutex("m")
        .ttl(TTL)
        .acquire()
        .await
        .expect("an acquire is not cut");
    let other = locks.mutex("o").ttl(TTL).acquire().await.expect("acquired");
    other
        .release()
        .await
        .expect("a release of another resource is not cut");
    assert!(guard.release().await.is_err(), "the release is cut");
    assert!(releases.applied() >= 1);
    assert!(held(&direct, "m").await, "the cut release never ran");
    proxy.heal();

    // Acquire attempts.
    let attempts =
        proxy.fault_requests(Requests::matching(commands::is_attempt), RequestFault::Cut);
    assert!(
        locks.mutex("n").ttl(TTL).try_acquire().await.is_err(),
        "the attempt is cut"
    );
    assert!(attempts.applied() >= 1);
    assert!(!held(&direct, "n").await, "the cut attempt never ran");
    proxy.heal();

    // Withdrawals of an attempt.
    let request = AcquireRequest::exclusive("w", "w-1", LockDetails::default().ttl(TTL));
    locks
        .acquire(&request)
        .await
        .expect("an attempt goes through");
    let withdrawals = proxy.fault_requests(
        Requests::matching(commands::is_withdrawal),
        RequestFault::Cut,
    );
    assert!(
        locks.release_attempt(&request).await.is_err(),
        "the withdrawal is cut"
    );
    assert!(withdrawals.applied() >= 1);
    assert!(held(&direct, "w").await, "the cut withdrawal never ran");
    // Neither a release nor an attempt is a withdrawal.
    let again = locks
        .mutex("p")
        .ttl(TTL)
        .acquire()
        .await
        .expect("not a withdrawal");
    again.release().await.expect("not a withdrawal");
    proxy.heal();
    // The cut withdrawal stayed owed: the client sends it again in the background, or this
    // call does; either way the attempt is withdrawn.
    locks.release_attempt(&request).await.expect("withdrawn");
    assert!(!held(&direct, "w").await, "the attempt was never withdrawn");

    // A let-go of one resource, whatever the library sends for it: a grant whose attempt's
    // outcome was once unknown (its first reply replaced by a time-limit error after it ran)
    // may be released by retiring that attempt (a withdrawal) rather than by a release.
    let unknown = proxy.fault_requests(
        Requests::matching(commands::is_attempt).times(1),
        RequestFault::ReplaceReply {
            code: commands::EXCEEDED_TIME_LIMIT,
        },
    );
    let guard = locks
        .mutex("q")
        .ttl(TTL)
        .acquire()
        .await
        .expect("granted on a repeat");
    assert_eq!(unknown.applied(), 1);
    let let_go = proxy.fault_requests(
        Requests::matching(|c| commands::is_let_go_of(c, "q")),
        RequestFault::Refuse {
            code: commands::HOST_UNREACHABLE,
        },
    );
    assert!(guard.release().await.is_err(), "the let-go is refused");
    assert!(let_go.applied() >= 1);
    assert!(held(&direct, "q").await, "the refused let-go never ran");
    proxy.heal();

    // Every lock write: a renewal (an `update`) too.
    let _grant = locks
        .xlock("u", "u-1", LockDetails::default().ttl(TTL))
        .await
        .expect("granted");
    let writes = proxy.fault_requests(
        Requests::matching(commands::is_lock_write),
        RequestFault::Cut,
    );
    assert!(locks.renew("u-1", TTL).await.is_err(), "the renewal is cut");
    assert!(writes.applied() >= 1);
    proxy.heal();
    assert_eq!(locks.renew("u-1", TTL).await.expect("renewed"), 1);

    // Unlocks: neither a renewal nor an attempt is one.
    let unlocks = proxy.fault_requests(Requests::matching(commands::is_unlock), RequestFault::Cut);
    assert_eq!(locks.renew("u-1", TTL).await.expect("not an unlock"), 1);
    let _other = locks
        .xlock("v", "u-1", LockDetails::default().ttl(TTL))
        .await
        .expect("not an unlock");
    assert!(locks.unlock("u-1").await.is_err(), "the unlock is cut");
    assert!(unlocks.applied() >= 1);
    assert!(held(&direct, "u").await, "the cut unlock never ran");
    proxy.heal();
    locks.shutdown().await;
}
