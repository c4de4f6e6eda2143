//! Work run under a lock: the closure forms of every handle ([`Mutex::run`], `try_run`,
//! `run_timeout`; the [`RwLock`]'s `run_read` and `run_write` with their kin; the
//! [`Semaphore`]'s; the [`MultiLock`](mongolock::MultiLock)'s; an election's `lead`,
//! `try_lead` and `lead_timeout`).
//!
//! - **Granted**: the work gets the guard the acquire returns (its token is the grant's), its
//!   value is the call's, and the lock is free after.
//! - **Skipped**: `try_` is `Ok(None)` while others hold the lock, and the work never runs.
//! - **Timed out**: the `_timeout` form is `Ok(None)` at its timeout, without running the work,
//!   and runs it once the holder lets go within the timeout.
//! - **Fallible work**: the work's error is the call's, untouched (no `Result` in a `Result`),
//!   and the lock is released.
//! - **A lease lost mid-work** (an operator's force release): the work is dropped at its next
//!   `.await` and the call fails with [`ErrorKind::LeaseLost`] naming the resource lost.
//! - **Work that returns after its lease ran out** (the process stalled past its deadline):
//!   its value does not count, and the call fails with `LeaseLost`.
//! - **A late loss**, found by the release after the work returned while the lease was
//!   believed held: the work's value is the call's all the same.
//! - **Cancellation**: dropping the call's future drops the work and lets go of the lock:
//!   another client gets it.
//!
//! Time bounds are hang guards, never assertions that something is fast.

mod common;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bson::doc;
use common::env;
use mongolock::{ErrorKind, Filter, LockClient, LossReason};
use tokio::sync::Notify;
use tokio::time::{Instant, timeout};

/// A guard against hangs only.
const HANG_GUARD: Duration = Duration::from_secs(20);

/// How long a `_timeout` form waits when it is to give up.
const GIVE_UP: Duration = Duration::from_millis(150);

/// A TTL that a work blocking the runtime outlasts.
const SHORT_TTL: Duration = Duration::from_millis(600);

/// A lease for the works an operator interrupts: renewed often, so a force release is noticed
/// within a fraction of a second, with a deadline far enough for a slow machine never to
/// reach it first.
const TTL: Duration = Duration::from_secs(3);
const RENEW_EVERY: Duration = Duration::from_millis(200);

/// Awaits `future`, failing the test if it hangs.
async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> T {
    timeout(HANG_GUARD, future)
        .await
        .unwrap_or_else(|_| panic!("hung: {what}"))
}

/// The error of the work in these tests: a lock error, or the work's own.
#[derive(Debug, PartialEq)]
enum JobError {
    Lock(Box<ErrorKind>),
    Work(&'static str),
}

impl From<mongolock::Error> for JobError {
    fn from(error: mongolock::Error) -> Self {
        JobError::Lock(Box::new(error.kind().clone()))
    }
}

/// The `LeaseLost` a call returned: its resource and reason (panics on anything else).
fn lease_lost<T: std::fmt::Debug>(result: Result<T, JobError>) -> (String, LossReason) {
    if let Err(JobError::Lock(kind)) = &result
        && let ErrorKind::LeaseLost {
            resource, reason, ..
        } = &**kind
    {
        return (resource.clone(), *reason);
    }
    panic!("expected LeaseLost, got {result:?}")
}

/// Counts the times a work ran.
#[derive(Clone, Default)]
struct Runs(Arc<AtomicUsize>);

impl Runs {
    fn ran(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// Sets a flag when dropped: whether a work was dropped.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Whether nothing is held or in force in the collection any more.
async fn nothing_held(locks: &LockClient) -> bool {
    locks.status(&Filter::default()).await.unwrap().is_empty()
}

// ---------------------------------------------------------------------------------------
// Granted, skipped, timed out.
// ---------------------------------------------------------------------------------------

/// The three closure forms of one kind of lock on `$handle`, against `$block` (a guard on
/// the same resource that keeps the form out): granted with the grant's guard, skipped, timed
/// out, and granted within the timeout once the holder lets go.
macro_rules! three_forms {
    ($env:expr, $handle:expr, $run:ident, $try_run:ident, $run_timeout:ident, $block:expr) => {{
        bounded("the three forms", async {
            let env = $env;
            let handle = $handle;
            let runs = Runs::default();

            // Granted: the work gets the grant's guard, and its value is the call's.
            let (token, resource, held) = handle
                .$run(async |guard| {
                    runs.ran();
                    let holders = handle.holders().await?;
                    let held = holders
                        .iter()
                        .any(|h| h.fencing_token() == guard.fencing_token());
                    assert!(!guard.is_lost() && guard.time_left() > Duration::ZERO);
                    assert_eq!(guard.fence().token(), guard.fencing_token());
                    Ok::<_, JobError>((guard.fencing_token(), guard.resource().to_owned(), held))
                })
                .await
                .unwrap();
            assert!(token > 0 && held, "the work held the grant it was given");
            assert_eq!(runs.count(), 1);
            assert!(handle.holders().await.unwrap().is_empty(), "released after");
            let again = handle
                .$try_run(async |guard| Ok::<_, JobError>(guard.fencing_token()))
                .await
                .unwrap();
            assert!(again > Some(token), "a new grant, with a greater token");
            let again = handle
                .$run_timeout(GIVE_UP, async |guard| {
                    Ok::<_, JobError>(guard.resource().to_owned())
                })
                .await
                .unwrap();
            assert_eq!(again.as_deref(), Some(resource.as_str()));

            // Skipped, and timed out, while another client holds it.
            let blocker = $block;
            let skipped = handle
                .$try_run(async |_guard| {
                    runs.ran();
                    Ok::<_, JobError>(1)
                })
                .await
                .unwrap();
            assert_eq!(skipped, None, "taken: skipped");
            let started = Instant::now();
            let timed_out = handle
                .$run_timeout(GIVE_UP, async |_guard| {
                    runs.ran();
                    Ok::<_, JobError>(1)
                })
                .await
                .unwrap();
            assert_eq!(timed_out, None, "still taken at the timeout");
            assert!(started.elapsed() >= GIVE_UP);
            assert_eq!(runs.count(), 1, "neither work ran");

            // Granted within the timeout when the holder lets go while it waits.
            let letting_go = async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                blocker.release().await.unwrap();
            };
            let (granted, ()) = tokio::join!(
                handle.$run_timeout(HANG_GUARD, async |_guard| {
                    runs.ran();
                    Ok::<_, JobError>(7)
                }),
                letting_go
            );
            assert_eq!(granted.unwrap(), Some(7));
            assert_eq!(runs.count(), 2);
            assert!(nothing_held(&env.locks).await);
        })
        .await
    }};
}

#[tokio::test]
async fn a_mutex_runs_the_work_skips_it_and_times_out() {
    let env = env("mutex_forms").await;
    let other = env.other_client().await;
    let handle = env.locks.mutex("job");
    three_forms!(
        &env,
        &handle,
        run,
        try_run,
        run_timeout,
        other.mutex("job").acquire().await.unwrap()
    );
}

#[tokio::test]
async fn a_read_lock_runs_the_work_skips_it_and_times_out() {
    let env = env("read_forms").await;
    let other = env.other_client().await;
    let handle = env.locks.rwlock("config");
    three_forms!(
        &env,
        &handle,
        run_read,
        try_run_read,
        run_read_timeout,
        other.rwlock("config").write().await.unwrap()
    );
}

#[tokio::test]
async fn the_write_lock_runs_the_work_skips_it_and_times_out() {
    let env = env("write_forms").await;
    let other = env.other_client().await;
    let handle = env.locks.rwlock("config");
    three_forms!(
        &env,
        &handle,
        run_write,
        try_run_write,
        run_write_timeout,
        other.rwlock("config").read().await.unwrap()
    );
}

#[tokio::test]
async fn a_permit_runs_the_work_skips_it_and_times_out() {
    let env = env("permit_forms").await;
    let other = env.other_client().await;
    let handle = env.locks.semaphore("gpu", 1);
    three_forms!(
        &env,
        &handle,
        run,
        try_run,
        run_timeout,
        other.semaphore("gpu", 1).acquire().await.unwrap()
    );
}

#[tokio::test]
async fn a_multi_lock_runs_the_work_skips_it_and_times_out() {
    bounded("the test", async {
        let env = env("multi_forms").await;
        let other = env.other_client().await;
        let set = env.locks.multi(["b", "a"]);
        let runs = Runs::default();

        let (a, b) = set
            .run(async |both| {
                runs.ran();
                assert_eq!(both.resources().collect::<Vec<_>>(), ["a", "b"]);
                assert!(!both.is_lost() && both.time_left() > Duration::ZERO);
                let (a, b) = (both.fencing_token("a"), both.fencing_token("b"));
                Ok::<_, JobError>((a.unwrap(), b.unwrap()))
            })
            .await
            .unwrap();
        assert!(a > 0 && b > 0);
        assert!(nothing_held(&env.locks).await, "released after");

        let blocker = other.mutex("b").acquire().await.unwrap();
        let skipped = set
            .try_run(async |_both| {
                runs.ran();
                Ok::<_, JobError>(1)
            })
            .await
            .unwrap();
        assert_eq!(skipped, None, "b is taken: skipped");
        let timed_out = set
            .run_timeout(GIVE_UP, async |_both| {
                runs.ran();
                Ok::<_, JobError>(1)
            })
            .await
            .unwrap();
        assert_eq!(timed_out, None, "b is still taken at the timeout");
        assert_eq!(runs.count(), 1, "neither work ran");

        let letting_go = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            blocker.release().await.unwrap();
        };
        let (granted, ()) = tokio::join!(
            set.run_timeout(HANG_GUARD, async |both| {
                Ok::<_, JobError>(both.fencing_token("b"))
            }),
            letting_go
        );
        assert!(granted.unwrap().flatten() > Some(b), "b granted anew");
        let again = set
            .try_run(async |_both| Ok::<_, JobError>(2))
            .await
            .unwrap();
        assert_eq!(again, Some(2));
        assert!(nothing_held(&env.locks).await);
    })
    .await;
}

#[tokio::test]
async fn a_leader_leads_skips_and_times_out() {
    bounded("the test", async {
        let env = env("lead_forms").await;
        let other = env.other_client().await;
        let election = env.locks.election("scheduler");
        let runs = Runs::default();

        let (term, seen) = election
            .lead("host-a", async |leading| {
                runs.ran();
                let leader = election.leader().await?.expect("a leader");
                assert_eq!(leading.value(), "host-a");
                Ok::<_, JobError>((leading.term(), leader.term()))
            })
            .await
            .unwrap();
        assert_eq!(term, seen, "the work led in the leader's term");
        assert!(election.leader().await.unwrap().is_none(), "resigned after");

        let leading = other
            .election("scheduler")
            .campaign("host-b")
            .await
            .unwrap();
        let skipped = election
            .try_lead("host-a", async |_leading| {
                runs.ran();
                Ok::<_, JobError>(1)
            })
            .await
            .unwrap();
        assert_eq!(skipped, None, "host-b leads: skipped");
        let timed_out = election
            .lead_timeout("host-a", GIVE_UP, async |_leading| {
                runs.ran();
                Ok::<_, JobError>(1)
            })
            .await
            .unwrap();
        assert_eq!(timed_out, None, "host-b still leads at the timeout");
        assert_eq!(runs.count(), 1, "neither work ran");

        let resigning = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            leading.resign().await.unwrap();
        };
        let (led, ()) = tokio::join!(
            election.lead_timeout("host-a", HANG_GUARD, async |leading| {
                Ok::<_, JobError>(leading.term())
            }),
            resigning
        );
        assert!(led.unwrap() > Some(term), "a new term");
        assert!(election.leader().await.unwrap().is_none());
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// Fallible work.
// ---------------------------------------------------------------------------------------

/// The work's error in these tests.
fn no_rows<T>() -> Result<T, JobError> {
    Err(JobError::Work("no rows"))
}

/// The work's error is the call's, untouched, from every form; the lock is released after.
#[tokio::test]
async fn the_works_error_is_passed_through_untouched() {
    let env = env("work_error").await;
    let (job, config, gpu) = (
        env.locks.mutex("job"),
        env.locks.rwlock("config"),
        env.locks.semaphore("gpu", 1),
    );
    let fails = async |_guard: &mongolock::LockGuard| Err::<u32, _>(JobError::Work("no rows"));
    assert_eq!(job.run(fails).await, no_rows());
    assert_eq!(job.try_run(fails).await, no_rows());
    assert_eq!(job.run_timeout(GIVE_UP, fails).await, no_rows());
    assert_eq!(config.run_read(fails).await, no_rows());
    assert_eq!(config.try_run_write(fails).await, no_rows());
    assert_eq!(gpu.run(fails).await, no_rows());
    let set = env.locks.multi(["a", "b"]);
    let failed = set
        .run(async |_both| Err::<u32, _>(JobError::Work("no rows")))
        .await;
    assert_eq!(failed, no_rows());
    let election = env.locks.election("scheduler");
    let failed = election
        .lead("host-a", async |_leading| {
            Err::<u32, _>(JobError::Work("no rows"))
        })
        .await;
    assert_eq!(failed, no_rows());
    assert!(nothing_held(&env.locks).await, "every lock released");

    // With this crate's error as the work's: a fenced write refused as stale comes back as
    // it was, not as a loss of the lease.
    let accounts = env.db.collection::<bson::Document>("accounts");
    let newer = mongolock::Fence::new(i64::MAX);
    newer
        .update_one(&accounts, doc! {"_id": 1}, doc! {"$set": {"n": 1}})
        .upsert(true)
        .await
        .unwrap();
    let error = job
        .run(async |guard| -> mongolock::Result<()> {
            let update = doc! {"$set": {"n": 2}};
            guard
                .fence()
                .update_one(&accounts, doc! {"_id": 1}, update)
                .await?;
            Ok(())
        })
        .await
        .unwrap_err();
    assert!(
        matches!(
            error.kind(),
            ErrorKind::StaleToken {
                stored: i64::MAX,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(nothing_held(&env.locks).await);
}

// ---------------------------------------------------------------------------------------
// A lease lost while the work runs, or found lost after it.
// ---------------------------------------------------------------------------------------

/// What a work that an operator interrupts did.
#[derive(Clone, Default)]
struct Interrupted {
    started: Arc<Notify>,
    dropped: Arc<AtomicBool>,
    finished: Arc<AtomicBool>,
}

impl Interrupted {
    /// A work that starts, then sleeps far longer than the test.
    async fn work(&self) -> Result<(), JobError> {
        let _dropped = SetOnDrop(self.dropped.clone());
        self.started.notify_one();
        tokio::time::sleep(Duration::from_secs(60)).await;
        self.finished.store(true, Ordering::SeqCst);
        Ok(())
    }

    fn was_stopped(&self) -> bool {
        self.dropped.load(Ordering::SeqCst) && !self.finished.load(Ordering::SeqCst)
    }
}

/// An operator force-releases the mutex while the work sleeps: the keeper's next renewal
/// finds it gone, the work is dropped, and the call says the lease was lost.
#[tokio::test]
async fn a_lease_lost_mid_work_stops_the_work_and_the_call_says_so() {
    let env = env("lost_mid_work").await;
    let operator = env.other_client().await;
    let work = Interrupted::default();
    let job = env.locks.mutex("job").ttl(TTL).extend_every(RENEW_EVERY);
    let running = tokio::spawn({
        let work = work.clone();
        async move { job.run(async |_guard| work.work().await).await }
    });
    bounded("the work starts", work.started.notified()).await;
    assert_eq!(operator.force_release("job").await.unwrap(), 1);
    let result = bounded("the loss", running).await.unwrap();
    assert_eq!(lease_lost(result), ("job".to_owned(), LossReason::Revoked));
    assert!(work.was_stopped(), "the work was dropped, unfinished");
    env.locks.shutdown().await;
    assert_eq!(env.locks.leases(), 0);
}

/// One member of a set is force-released: the set counts as lost, the work is dropped, the
/// error names that member, and the other member is let go of.
#[tokio::test]
async fn a_member_lost_mid_work_stops_the_sets_work() {
    let env = env("member_lost").await;
    let operator = env.other_client().await;
    let work = Interrupted::default();
    let set = env
        .locks
        .multi(["a", "b"])
        .ttl(TTL)
        .extend_every(RENEW_EVERY);
    let running = tokio::spawn({
        let work = work.clone();
        async move { set.run(async |_both| work.work().await).await }
    });
    bounded("the work starts", work.started.notified()).await;
    assert_eq!(operator.force_release("b").await.unwrap(), 1);
    let result = bounded("the loss", running).await.unwrap();
    assert_eq!(lease_lost(result), ("b".to_owned(), LossReason::Revoked));
    assert!(work.was_stopped());
    env.locks.shutdown().await;
    assert_eq!(env.locks.leases(), 0);
    assert!(
        operator.mutex("a").try_acquire().await.unwrap().is_some(),
        "a let go of"
    );
}

/// Leadership revoked while the leader works: the term's work is dropped and the call says
/// leadership was lost.
#[tokio::test]
async fn leadership_lost_mid_term_stops_the_work() {
    let env = env("leadership_lost").await;
    let operator = env.other_client().await;
    let work = Interrupted::default();
    let election = (env.locks.election("scheduler"))
        .ttl(TTL)
        .extend_every(RENEW_EVERY);
    let running = tokio::spawn({
        let work = work.clone();
        async move {
            election
                .lead("host-a", async |_leading| work.work().await)
                .await
        }
    });
    bounded("the term starts", work.started.notified()).await;
    assert_eq!(operator.force_release("scheduler").await.unwrap(), 1);
    let result = bounded("the loss", running).await.unwrap();
    assert_eq!(
        lease_lost(result),
        ("scheduler".to_owned(), LossReason::Revoked)
    );
    assert!(work.was_stopped());
}

/// The process stalls in the work past the lease's deadline (nothing renews it meanwhile:
/// the runtime has one thread, and the work blocks it), and the work then returns a value:
/// the value does not count, the call says the lease was lost.
#[tokio::test]
async fn a_value_returned_after_the_lease_ran_out_does_not_count() {
    let env = env("ran_out").await;
    let job = env.locks.mutex("job").ttl(SHORT_TTL);
    let result = job
        .run(async |_guard| {
            std::thread::sleep(SHORT_TTL + Duration::from_millis(200));
            Ok::<_, JobError>(42)
        })
        .await;
    assert_eq!(lease_lost(result), ("job".to_owned(), LossReason::Deadline));
    env.locks.shutdown().await;
    assert_eq!(env.locks.leases(), 0);
}

/// The lease is revoked by an operator at the very end of the work, too late for the keeper
/// to notice before the work returns (its next renewal is seconds away): the release finds
/// it gone, and the work's value is the call's all the same, for every form.
#[tokio::test]
async fn a_late_loss_found_by_the_release_keeps_the_works_value() {
    let env = env("late_loss").await;
    let operator = env.other_client().await;

    let value = env
        .locks
        .mutex("job")
        .run(async |guard| {
            assert_eq!(operator.force_release(guard.resource()).await?, 1);
            Ok::<_, JobError>(42)
        })
        .await;
    assert_eq!(value, Ok(42));

    let value = env
        .locks
        .rwlock("config")
        .try_run_write(async |guard| {
            assert_eq!(operator.force_release(guard.resource()).await?, 1);
            Ok::<_, JobError>(43)
        })
        .await;
    assert_eq!(value, Ok(Some(43)));

    let value = env
        .locks
        .multi(["a", "b"])
        .run(async |_both| {
            assert_eq!(operator.force_release("a").await?, 1);
            Ok::<_, JobError>(44)
        })
        .await;
    assert_eq!(value, Ok(44));

    let value = env
        .locks
        .election("scheduler")
        .lead("host-a", async |_leading| {
            assert_eq!(operator.force_release("scheduler").await?, 1);
            Ok::<_, JobError>(45)
        })
        .await;
    assert_eq!(value, Ok(45));

    env.locks.shutdown().await;
    assert_eq!(env.locks.leases(), 0);
    assert!(nothing_held(&env.locks).await);
}

// ---------------------------------------------------------------------------------------
// Cancellation.
// ---------------------------------------------------------------------------------------

/// Drops a call while its work runs: the work is dropped, and another client gets the lock
/// (`taken_by_other` waits for it).
async fn dropping_the_call_lets_go<C, T>(call: C, work: Interrupted, taken_by_other: T)
where
    C: Future + Send + 'static,
    C::Output: Send + 'static,
    T: Future<Output = bool>,
{
    let running = tokio::spawn(call);
    bounded("the work starts", work.started.notified()).await;
    running.abort();
    assert!(matches!(running.await, Err(e) if e.is_cancelled()));
    assert!(work.was_stopped(), "the work was dropped with the call");
    assert!(bounded("another client's wait", taken_by_other).await);
}

#[tokio::test]
async fn dropping_the_call_drops_the_work_and_releases_the_lock() {
    let env = env("cancel").await;
    let other = env.other_client().await;

    let work = Interrupted::default();
    let job = env.locks.mutex("job");
    let call = {
        let work = work.clone();
        async move { job.run(async |_guard| work.work().await).await }
    };
    let taken = async {
        other
            .mutex("job")
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .is_ok()
    };
    dropping_the_call_lets_go(call, work, taken).await;

    let work = Interrupted::default();
    let config = env.locks.rwlock("config");
    let call = {
        let work = work.clone();
        async move {
            config
                .run_read_timeout(HANG_GUARD, async |_guard| work.work().await)
                .await
        }
    };
    let taken = async {
        other
            .rwlock("config")
            .write()
            .await
            .unwrap()
            .release()
            .await
            .is_ok()
    };
    dropping_the_call_lets_go(call, work, taken).await;

    let work = Interrupted::default();
    let gpu = env.locks.semaphore("gpu", 1);
    let call = {
        let work = work.clone();
        async move { gpu.try_run(async |_guard| work.work().await).await }
    };
    let taken = async {
        other
            .semaphore("gpu", 1)
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .is_ok()
    };
    dropping_the_call_lets_go(call, work, taken).await;

    let work = Interrupted::default();
    let set = env.locks.multi(["a", "b"]);
    let call = {
        let work = work.clone();
        async move { set.run(async |_both| work.work().await).await }
    };
    let taken = async {
        other
            .multi(["a", "b"])
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .is_ok()
    };
    dropping_the_call_lets_go(call, work, taken).await;

    let work = Interrupted::default();
    let election = env.locks.election("scheduler");
    let call = {
        let work = work.clone();
        async move {
            election
                .lead("host-a", async |_leading| work.work().await)
                .await
        }
    };
    let taken = async {
        let leading = other
            .election("scheduler")
            .campaign("host-b")
            .await
            .unwrap();
        leading.resign().await.is_ok()
    };
    dropping_the_call_lets_go(call, work, taken).await;

    env.locks.shutdown().await;
    assert_eq!(env.locks.leases(), 0);
}
