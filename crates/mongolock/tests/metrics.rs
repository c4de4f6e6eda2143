//! The metrics the library records through the `metrics` facade (see the table in
//! `observe.rs`): with a recorder installed, the gauges of leases held and calls waiting
//! follow the leases and the waiters, and each keepalive command's time is recorded.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{emulator_env, secs};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// What the recorder has seen: its snapshots reset every gauge and histogram they read, so
/// the gauges are summed over every snapshot taken, and the histograms gathered.
#[derive(Default)]
struct Seen {
    gauges: HashMap<String, f64>,
    histograms: HashMap<String, Vec<f64>>,
}

impl Seen {
    fn read(&mut self, snapshotter: &Snapshotter) {
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let name = key.key().name().to_owned();
            match value {
                DebugValue::Gauge(v) => *self.gauges.entry(name).or_default() += v.into_inner(),
                DebugValue::Histogram(v) => (self.histograms.entry(name).or_default())
                    .extend(v.into_iter().map(|x| x.into_inner())),
                DebugValue::Counter(_) => {}
            }
        }
    }

    /// The gauge `name` now (0 if never set).
    fn gauge(&mut self, snapshotter: &Snapshotter, name: &str) -> f64 {
        self.read(snapshotter);
        self.gauges.get(name).copied().unwrap_or(0.0)
    }

    /// Every value recorded in the histogram `name` so far.
    fn histogram(&mut self, snapshotter: &Snapshotter, name: &str) -> Vec<f64> {
        self.read(snapshotter);
        self.histograms.get(name).cloned().unwrap_or_default()
    }
}

#[tokio::test]
async fn the_gauges_follow_the_leases_and_the_waiters_and_renewals_are_timed() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");
    let mut seen = Seen::default();
    let Some(env) = emulator_env("metrics").await else {
        return;
    };
    let mutex = env
        .locks
        .mutex("job")
        .ttl(secs(3))
        .extend_every(Duration::from_millis(200));
    assert_eq!(seen.gauge(&snapshotter, "mongolock_leases_held"), 0.0);
    let held = mutex.acquire().await.unwrap();
    assert_eq!(seen.gauge(&snapshotter, "mongolock_leases_held"), 1.0);
    // A second call waits while the first holds.
    let waiter = tokio::spawn({
        let mutex = mutex.clone();
        async move { mutex.acquire_timeout(secs(10)).await }
    });
    let mut waiting = 0.0;
    for _ in 0..100 {
        waiting = seen.gauge(&snapshotter, "mongolock_waiters");
        if waiting == 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(waiting, 1.0, "one call waits");
    // A few renewals of the held lease, each timed.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let renewals = seen.histogram(&snapshotter, "mongolock_renewal_seconds");
    assert!(
        !renewals.is_empty() && renewals.iter().all(|s| (0.0..3.0).contains(s)),
        "{renewals:?}"
    );
    held.release().await.unwrap();
    let next = waiter
        .await
        .unwrap()
        .unwrap()
        .expect("granted after the release");
    assert_eq!(
        seen.gauge(&snapshotter, "mongolock_waiters"),
        0.0,
        "nobody waits"
    );
    assert_eq!(seen.gauge(&snapshotter, "mongolock_leases_held"), 1.0);
    next.release().await.unwrap();
    assert_eq!(seen.gauge(&snapshotter, "mongolock_leases_held"), 0.0);
    env.locks.shutdown().await;
}
