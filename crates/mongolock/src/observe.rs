//! Metrics, through the [`metrics`] facade: recorded only if the application installs a
//! recorder (for example a Prometheus exporter), free otherwise. Every name is here.
//!
//! | metric | kind | labels | what |
//! |---|---|---|---|
//! | `mongolock_acquisitions_total` | counter | `kind` | leases acquired |
//! | `mongolock_acquire_wait_seconds` | histogram | `kind` | from the call to the grant |
//! | `mongolock_acquire_timeouts_total` | counter | `kind` | waits that gave up at the caller's deadline |
//! | `mongolock_lease_losses_total` | counter | `reason` | leases lost (`deadline`, `revoked`) |
//! | `mongolock_renewals_total` | counter | `outcome` | keepalive ticks (`ok`, `failed`) |
//! | `mongolock_renewal_seconds` | histogram | | how long each keepalive command took, failed ones included |
//! | `mongolock_leases_held` | gauge | | leases the client's keepers renew now (a lost lease counts until its guard goes) |
//! | `mongolock_waiters` | gauge | | calls waiting to acquire (from the call to its return) |
//! | `mongolock_wakeups_total` | counter | `cause` | waiter wake-ups (`change`, `resync`, `timer`) |
//! | `mongolock_releases_total` | counter | `how` | guard releases (`explicit`, `drop`) |

use std::time::Duration;

use crate::lock::{Grant, LockKind, LossReason};

/// Why a waiter woke up to try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wakeup {
    /// A change stream event on its resource.
    Change,
    /// The change stream reopened without continuity: every waiter looks again.
    Resync,
    /// Its timer: the holder's lease may have run out, or the safety-net re-check.
    Timer,
}

pub(crate) fn acquired(kind: LockKind, waited: Duration) {
    metrics::counter!("mongolock_acquisitions_total", "kind" => kind.to_string()).increment(1);
    metrics::histogram!("mongolock_acquire_wait_seconds", "kind" => kind.to_string())
        .record(waited.as_secs_f64());
}

pub(crate) fn timed_out(kind: LockKind) {
    metrics::counter!("mongolock_acquire_timeouts_total", "kind" => kind.to_string()).increment(1);
}

pub(crate) fn lease_lost(grant: &Grant, reason: LossReason) {
    let reason = match reason {
        LossReason::Deadline => "deadline",
        LossReason::Revoked => "revoked",
        LossReason::Released => "released",
    };
    tracing::warn!(
        resource = grant.resource(),
        lock_id = grant.lock_id(),
        token = grant.fencing_token(),
        reason,
        "lease lost"
    );
    metrics::counter!("mongolock_lease_losses_total", "reason" => reason).increment(1);
}

pub(crate) fn renewal(ok: bool, took: Duration) {
    let outcome = if ok { "ok" } else { "failed" };
    metrics::counter!("mongolock_renewals_total", "outcome" => outcome).increment(1);
    metrics::histogram!("mongolock_renewal_seconds").record(took.as_secs_f64());
}

/// A lease kept alive from now on (`true`), or no longer (`false`).
pub(crate) fn lease_kept(kept: bool) {
    let gauge = metrics::gauge!("mongolock_leases_held");
    if kept {
        gauge.increment(1.0);
    } else {
        gauge.decrement(1.0);
    }
}

/// A call waiting to acquire, counted in `mongolock_waiters` while it lives.
pub(crate) struct Waiting(());

impl Waiting {
    pub(crate) fn start() -> Self {
        metrics::gauge!("mongolock_waiters").increment(1.0);
        Waiting(())
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        metrics::gauge!("mongolock_waiters").decrement(1.0);
    }
}

pub(crate) fn woke(cause: Wakeup) {
    let cause = match cause {
        Wakeup::Change => "change",
        Wakeup::Resync => "resync",
        Wakeup::Timer => "timer",
    };
    metrics::counter!("mongolock_wakeups_total", "cause" => cause).increment(1);
}

pub(crate) fn released(explicit: bool) {
    let how = if explicit { "explicit" } else { "drop" };
    metrics::counter!("mongolock_releases_total", "how" => how).increment(1);
}
