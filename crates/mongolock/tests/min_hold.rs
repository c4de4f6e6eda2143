//! A minimum hold ([`LockDetails::min_hold`]): a holder that lets go early keeps the lock
//! from everybody until its grant's time plus the hold, by the server's clock, so that a job
//! runs at most once per period across hosts whose timers differ.
//!
//! Time here is real time with wide margins (hundreds of milliseconds); nothing asserts how
//! fast something happens.

mod common;

use std::time::Duration;

use common::env;
use mongolock::{Filter, LockClient, LockDetails};
use tokio::time::{Instant, sleep, sleep_until};

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

#[tokio::test]
async fn a_release_within_the_minimum_hold_keeps_the_lock_until_then() {
    let env = env("min_hold_release").await;
    let other = env.other_client().await;
    let job = env.locks.mutex("report").ttl(ms(5_000)).min_hold(ms(1_500));
    let guard = job.acquire().await.unwrap();
    let token = guard.fencing_token();
    guard.release().await.unwrap();
    // Released at once: the lock stays taken for the rest of the hold, for everybody (this
    // lock client too), and status shows what is left of it as a lock-delay.
    assert!(other.mutex("report").try_acquire().await.unwrap().is_none());
    assert!(job.try_acquire().await.unwrap().is_none());
    let status = env.locks.status(&Filter::default()).await.unwrap();
    assert_eq!(status.len(), 1, "{status:?}");
    assert_eq!(status[0].fencing_token(), token);
    assert!(status[0].lock_delay_remaining().is_some(), "{status:?}");
    sleep(ms(1_700)).await;
    let next = other.mutex("report").try_acquire().await.unwrap();
    assert!(next.expect("free once the hold is over").fencing_token() > token);
    other.shutdown().await;
}

#[tokio::test]
async fn a_release_after_the_minimum_hold_frees_the_lock_at_once() {
    let env = env("min_hold_late").await;
    let other = env.other_client().await;
    let guard = (env.locks.mutex("report").ttl(ms(5_000)))
        .min_hold(ms(300))
        .acquire()
        .await
        .unwrap();
    sleep(ms(500)).await;
    guard.release().await.unwrap();
    assert!(other.mutex("report").try_acquire().await.unwrap().is_some());
    other.shutdown().await;
}

/// The low-level calls keep the hold too: `release` of a grant, and `unlock`.
#[tokio::test]
async fn release_and_unlock_keep_the_minimum_hold() {
    let env = env("min_hold_low_level").await;
    let details = LockDetails::default().min_hold(ms(1_500));
    let grant = env
        .locks
        .xlock("a", "batch", details.clone())
        .await
        .unwrap();
    assert!(env.locks.release(&grant).await.unwrap());
    let _held = env.locks.xlock("b", "batch", details).await.unwrap();
    assert_eq!(env.locks.unlock("batch").await.unwrap(), 1);
    for resource in ["a", "b"] {
        let refused = env
            .locks
            .xlock(resource, "next", LockDetails::default())
            .await;
        assert!(refused.unwrap_err().is_already_locked(), "{resource}");
    }
    sleep(ms(1_700)).await;
    for resource in ["a", "b"] {
        let _ = (env
            .locks
            .xlock(resource, "next", LockDetails::default())
            .await)
            .expect("free once the hold is over");
    }
}

/// Three hosts whose timers fire at the start of each period, one on time and two late by
/// 250 ms and 600 ms; the job takes 50 ms. Runs of the job in each period, with `min_hold`.
async fn runs_per_period(name: &str, min_hold: Option<Duration>) -> Vec<usize> {
    const PERIOD: Duration = Duration::from_millis(2_000);
    const PERIODS: usize = 3;
    let env = env(name).await;
    let mut hosts: Vec<LockClient> = Vec::new();
    for _ in 0..3 {
        hosts.push(env.other_client().await);
    }
    let start = Instant::now() + ms(200);
    let mut tasks = Vec::new();
    for (host, late) in hosts.iter().zip([0, 250, 600]) {
        let mut job = host.mutex("hourly-report").ttl(ms(5_000));
        if let Some(hold) = min_hold {
            job = job.min_hold(hold);
        }
        tasks.push(tokio::spawn(async move {
            let mut ran = vec![0; PERIODS];
            for (period, ran) in ran.iter_mut().enumerate() {
                sleep_until(start + PERIOD * period as u32 + ms(late)).await;
                if let Some(guard) = job.try_acquire().await.unwrap() {
                    *ran += 1;
                    sleep(ms(50)).await;
                    guard.release().await.unwrap();
                }
            }
            ran
        }));
    }
    let mut runs = vec![0; PERIODS];
    for task in tasks {
        for (period, ran) in task.await.unwrap().into_iter().enumerate() {
            runs[period] += ran;
        }
    }
    for host in hosts {
        host.shutdown().await;
    }
    runs
}

#[tokio::test]
async fn three_hosts_with_skewed_timers_run_the_job_once_per_period() {
    let hold = Some(ms(1_500));
    assert_eq!(runs_per_period("min_hold_hosts", hold).await, [1, 1, 1]);
}

/// The control: without a minimum hold the same schedule runs the job more than once in a
/// period (each host finds it free after the one before finished), so the test above can
/// fail.
#[tokio::test]
async fn without_a_minimum_hold_the_late_hosts_run_it_again() {
    let runs = runs_per_period("min_hold_control", None).await;
    assert!(runs.iter().all(|&n| n > 1), "{runs:?}");
}
