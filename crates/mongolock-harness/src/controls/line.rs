//! The controls of the line. A waiter whose own entry is still in force must stand in line
//! like anybody (issue 39, item 5): before the fix, its attempts met its own entry, and it
//! asked again at the entry's end outside the line, so a waiter that came after it was
//! served first. A place is its waiting call's (issue 40): a late copy of a call's
//! `leave_line` must leave the place of its lock id's next call ([`late_leave`]; its
//! planted variant is not caught by (S9) yet, see its test).

use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bson::Document;
use mongolock::LockClient;

use super::{ControlResult, Expected, RESOURCE, Watched, hold_honestly, locks, write};
use crate::history::{
    AcquireCall, FromLibrary, GuardLog, HolderLog, LetGo, Mode, Recorder, ReleaseResult,
};
use crate::oracle::{JOIN_ALLOWANCE, ServerCheck};

/// The job's lease and minimum hold.
const TTL: Duration = Duration::from_secs(4);
/// See [`TTL`].
const HOLD: Duration = Duration::from_secs(2);
/// How long each waiter may wait.
const WAIT: Duration = Duration::from_secs(6);

/// The lock ids of the places in the control resource's line, read straight from the server.
pub(super) async fn line_now(
    raw: &mongodb::Collection<Document>,
) -> Result<Vec<String>, mongodb::error::Error> {
    let stored = raw.find_one(bson::doc! { "_id": RESOURCE }).await?;
    let queue = (stored.as_ref())
        .and_then(|d| d.get_array("queue").ok())
        .cloned()
        .unwrap_or_default();
    Ok(queue
        .iter()
        .filter_map(|p| p.as_document()?.get_str("lockId").ok().map(str::to_owned))
        .collect())
}

/// Waits (10 s at most) until the control resource's line is `expected`; an error if it
/// never is.
pub(super) async fn line_becomes(
    raw: &mongodb::Collection<Document>,
    expected: &[&str],
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let line = line_now(raw).await?;
        if line == expected {
            return Ok(line);
        }
        if Instant::now() >= give_up {
            return Err(format!("the line stayed {line:?}, not {expected:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `copies` held copies of `late` have their replies on record (their
/// hold and 10 s more at most), and returns the replies.
pub(super) async fn late_replies(
    late: &mongolock_testkit::faults::proxy::RequestRule,
    copies: usize,
    hold: Duration,
) -> Vec<Document> {
    let give_up = Instant::now() + hold + Duration::from_secs(10);
    while late.late_replies().len() < copies && Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    late.late_replies()
}

/// The line without any place of `lock_id`: the removal of before issue 40's fix, which the
/// late-copy controls plant.
pub(super) fn line_without(lock_id: &str) -> Document {
    bson::doc! { "$filter": {
        "input": "$queue",
        "cond": { "$ne": ["$$this.lockId", lock_id] },
    }}
}

/// Records an acquire call of the control resource by `client` under `lock_id`, ended now.
pub(super) fn record_call(
    recorder: &Recorder,
    client: usize,
    lock_id: &str,
    invoked_at: Instant,
    granted: bool,
    timeout: Duration,
) {
    recorder.acquire_call(AcquireCall {
        client,
        resource: RESOURCE.to_owned(),
        lock_id: lock_id.to_owned(),
        invoked_at,
        ended_at: Instant::now(),
        granted,
        timeout: Some(timeout),
    });
}

/// A waiting call of a late-copy control: `lock_id`'s, on `mutex`, recorded as `client`'s.
pub(super) struct Waiter {
    /// The client it is recorded as.
    pub(super) client: usize,
    /// The lock, built with the call's lock id.
    pub(super) mutex: mongolock::Mutex,
    /// Its lock id.
    pub(super) lock_id: &'static str,
    /// How long it may wait.
    pub(super) timeout: Duration,
}

impl Waiter {
    /// Waits; if served, pushes its lock id to `served` and holds 200 ms honestly.
    async fn call(
        self,
        recorder: &Recorder,
        served: &Mutex<Vec<String>>,
    ) -> Result<(), Box<dyn std::error::Error>> {
        let invoked = Instant::now();
        let got = self.mutex.acquire_timeout(self.timeout).await?;
        record_call(
            recorder,
            self.client,
            self.lock_id,
            invoked,
            got.is_some(),
            self.timeout,
        );
        if let Some(guard) = got {
            (served.lock().unwrap_or_else(|e| e.into_inner())).push(self.lock_id.to_owned());
            let hold = Duration::from_millis(200);
            recorder.holder(hold_honestly(recorder, self.client, guard, invoked, hold).await);
        }
        Ok(())
    }
}

/// What [`two_in_line`] saw.
pub(super) struct InLine<T> {
    /// The line once both waiters stood in it, before `landing` ran.
    pub(super) before: Vec<String>,
    /// What `landing` returned.
    pub(super) landed: T,
    /// The line once `landing` had run.
    pub(super) after: Vec<String>,
    /// The lock ids in the order they were served.
    pub(super) served: Vec<String>,
}

/// The middle of both late-copy controls: `first` joins the control resource's line, then
/// `second` behind it; once both stand in it, `landing` runs (the late copies land, and the
/// planted variant's raw write). Both wait to the end of their calls.
pub(super) async fn two_in_line<T, F, Fut>(
    recorder: &Recorder,
    raw: &mongodb::Collection<Document>,
    first: Waiter,
    second: Waiter,
    landing: F,
) -> Result<InLine<T>, Box<dyn std::error::Error>>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<T, Box<dyn std::error::Error>>>,
{
    let served = Mutex::new(Vec::new());
    let order = [first.lock_id, second.lock_id];
    let first_call = first.call(recorder, &served);
    let then = async {
        line_becomes(raw, &order[..1]).await?;
        let second_call = second.call(recorder, &served);
        let lands = async {
            let before = line_becomes(raw, &order).await?;
            let landed = landing().await?;
            let after = line_now(raw).await?;
            Ok::<_, Box<dyn std::error::Error>>((before, landed, after))
        };
        let (second, lands) = tokio::join!(second_call, lands);
        second?;
        lands
    };
    let (first, then) = tokio::join!(first_call, then);
    first?;
    let (before, landed, after) = then?;
    let served = served.into_inner().unwrap_or_else(|e| e.into_inner());
    Ok(InLine {
        before,
        landed,
        after,
        served,
    })
}

/// Host A's job (lock id `host-a`, a 2 s minimum hold) lets go at once and asks again under
/// the same lock id; host B asks a little over a second later. The old behaviour, planted:
/// A does not join the line while its own entry is in force, and asks again and again outside
/// it (`try_acquire`), so B, the only one in line, is served at the hold's end before A.
pub(super) async fn own_entry_outside_line() -> Result<ControlResult, Box<dyn std::error::Error>> {
    own_entry_waits(true).await
}

/// A late `leave_line` of `svc`'s first call lands after its next call joined the line, and
/// the removal of before issue 40's fix (every place of the lock id) takes that call's place:
/// `other`, behind it, is served first (see `late_leave`).
pub(super) async fn late_leave_takes_the_next_calls_place()
-> Result<ControlResult, Box<dyn std::error::Error>> {
    let (result, went) = late_leave::late_leave(true).await?;
    // The fault happened as planned: the copy ran once both waiters stood in line, and the
    // planted removal took `svc`'s place (it may have joined again, behind `other`), so
    // that `other` was served first.
    let planned = went.landed
        && went.line_before == ["svc", "other"]
        && went.line_after.first().is_none_or(|id| id != "svc")
        && went.served == ["other", "svc"];
    if !planned {
        return Err(format!("the late leave did not happen as planned: {went:?}").into());
    }
    Ok(result)
}

/// The scenario of [`own_entry_outside_line`]; `planted`: with the old behaviour put back,
/// else with the library as it is (A waits with `acquire_timeout`).
async fn own_entry_waits(planted: bool) -> Result<ControlResult, Box<dyn std::error::Error>> {
    let stage = Watched::start().await?;
    let (recorder, a_locks) = (&stage.recorder, &stage.locks);
    let b_locks = locks(stage.server.new_client());
    let job = |locks: &LockClient, host: &str| {
        (locks.mutex(RESOURCE).ttl(TTL).min_hold(HOLD)).lock_id(host)
    };
    let invoked = Instant::now();
    let first = job(a_locks, "host-a").acquire().await?;
    let mut log = HolderLog::new(recorder.next_id(), 0, Mode::Exclusive, invoked, &first);
    recorder.min_hold(log.id, HOLD);
    write(recorder, &mut log, first.fencing_token());
    log.lets_go(LetGo::Released);
    log.release = Some(ReleaseResult::of(&first.release().await));
    recorder.holder(log);

    // A asks again under its lock id at once; B a little over the allowance later.
    let a = async {
        let invoked = Instant::now();
        let got = if planted {
            // The bug: asked again outside the line until granted.
            let mut got = None;
            while got.is_none() && invoked.elapsed() < WAIT {
                got = job(a_locks, "host-a").try_acquire().await?;
                if got.is_none() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            got
        } else {
            job(a_locks, "host-a").acquire_timeout(WAIT).await?
        };
        Ok::<_, mongolock::Error>((invoked, Instant::now(), got))
    };
    let b = async {
        tokio::time::sleep(JOIN_ALLOWANCE + Duration::from_millis(200)).await;
        let invoked = Instant::now();
        let got = job(&b_locks, "host-b").acquire_timeout(WAIT).await?;
        Ok::<_, mongolock::Error>((invoked, Instant::now(), got))
    };
    // Each holds 200 ms once granted, then releases, so that the other is served.
    let hold = |client: usize, lock_id: &'static str, got: mongolock::Result<_>| async move {
        let (invoked, ended, guard): (Instant, Instant, Option<mongolock::LockGuard>) = got?;
        recorder.acquire_call(AcquireCall {
            client,
            resource: RESOURCE.to_owned(),
            lock_id: lock_id.to_owned(),
            invoked_at: invoked,
            ended_at: ended,
            granted: guard.is_some(),
            timeout: Some(WAIT),
        });
        if let Some(guard) = guard {
            let log = hold_honestly(recorder, client, guard, invoked, Duration::from_millis(200));
            let log = log.await;
            recorder.min_hold(log.id, HOLD);
            recorder.holder(log);
        }
        Ok::<_, mongolock::Error>(())
    };
    let (a, b) = tokio::join!(async { hold(0, "host-a", a.await).await }, async {
        hold(1, "host-b", b.await).await
    });
    a?;
    b?;
    b_locks.shutdown().await;
    let result = stage
        .finish(
            "own entry outside the line",
            Expected::Server(ServerCheck::Order),
            &[RESOURCE],
        )
        .await?;
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiter_with_its_own_entry_in_force_outside_the_line_is_caught_by_s9_alone() {
        let result = own_entry_outside_line().await.expect("the control runs");
        assert!(result.caught(), "not caught: {:?}", result.found());
        assert_eq!(
            result.found(),
            vec![(ServerCheck::Order.to_string(), 1)],
            "only (S9)"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_library_puts_such_a_waiter_in_line_and_serves_it_first() {
        let result = own_entry_waits(false).await.expect("the scenario runs");
        assert!(!result.caught(), "caught: {:?}", result.found());
        assert_eq!(result.found(), vec![], "nothing at all");
        let oracle = result.oracle.expect("the oracle ran");
        assert_eq!(
            oracle.own_entry_places,
            (1, 1),
            "A stood in line and was served"
        );
    }
}

/// Issue 40: a late copy of a waiting call's `leave_line` and the place of its lock id's
/// next call.
pub(super) mod late_leave {
    use bson::doc;
    use mongolock_testkit::FaultProxy;
    use mongolock_testkit::faults::proxy::{RequestFault, Requests};

    use super::*;
    use crate::workload::{COLLECTION, DB};

    /// The lease of the holder that keeps both waiters of [`late_leave`] in line.
    const LINE_TTL: Duration = Duration::from_secs(6);
    /// How long the holder holds: past the late copy's landing.
    const LINE_HOLD: Duration = Duration::from_millis(3_500);
    /// How long the late copy of `leave_line` is held on the wire.
    const LATE_BY: Duration = Duration::from_millis(2_000);

    /// What [`late_leave`] saw happen.
    #[derive(Debug, Default)]
    pub(super) struct LateLeave {
        /// The line (lock ids, in order) once the lock id's next call and B stood in it, before
        /// the late copy landed.
        pub(super) line_before: Vec<String>,
        /// The late copy of the first call's `leave_line` ran on the server (its reply
        /// recorded by the proxy), after the line above was read.
        pub(super) landed: bool,
        /// The line once it landed (and, planted, once the old removal ran).
        pub(super) line_after: Vec<String>,
        /// The lock ids in the order they were served.
        pub(super) served: Vec<String>,
    }

    /// A holder (lock id `holder`) keeps the job; `svc`'s first waiting call gives up, and its
    /// `leave_line` is held [`LATE_BY`] on the wire by `svc`'s proxy, which cuts the connection:
    /// it is sent again, and answered (the place goes). Then `svc`'s next call joins the line,
    /// and B (`other`) behind it; then the held copy lands. The holder lets go: the library
    /// serves `svc`'s next call first (its place was left where it stood), then B. `planted`:
    /// once the copy has landed, the removal of before issue 40's fix is sent raw (every place
    /// of the lock id: `queue.lockId`), which takes the next call's place; it joins again
    /// behind B, which is served first.
    pub(super) async fn late_leave(
        planted: bool,
    ) -> Result<(ControlResult, LateLeave), Box<dyn std::error::Error>> {
        let stage = Watched::start().await?;
        let recorder = &stage.recorder;
        let proxy = FaultProxy::start(stage.server.addr()).await?;
        let svc_locks = locks(proxy.client());
        let b_locks = locks(stage.server.new_client());
        let raw = (stage.server.new_client().database(DB)).collection::<Document>(COLLECTION);
        let job = |locks: &LockClient, lock_id: &str| {
            locks.mutex(RESOURCE).ttl(LINE_TTL).lock_id(lock_id)
        };
        // The holder.
        let invoked = Instant::now();
        let held = job(&stage.locks, "holder").acquire().await?;
        let holder = hold_honestly(recorder, 2, held, invoked, LINE_HOLD);

        let scenario = async {
            // `leave_line`: the only `update` of one statement on the resource from `svc`'s
            // client (a place's refresh comes a third of the TTL after it joined).
            let late = proxy.fault_requests(
                Requests::matching(|command| {
                    command.get_str("update").is_ok()
                        && (command.get_array("updates").ok())
                            .and_then(|u| u.first()?.as_document()?.get_document("q").ok())
                            .is_some_and(|q| q.get_str("_id") == Ok(RESOURCE))
                })
                .times(1),
                RequestFault::Late {
                    hold: LATE_BY,
                    cut_after: Some(Duration::from_millis(50)),
                },
            );
            let first_wait = Duration::from_millis(400);
            let invoked = Instant::now();
            let first = job(&svc_locks, "svc").acquire_timeout(first_wait).await?;
            record_call(recorder, 0, "svc", invoked, first.is_some(), first_wait);
            if first.is_some() {
                return Err("svc's first call was granted".into());
            }
            // The repeated `leave_line` is answered: the first call's place is gone.
            line_becomes(&raw, &[]).await?;
            let waiter = |client: usize, locks: &LockClient, lock_id: &'static str| Waiter {
                client,
                mutex: job(locks, lock_id),
                lock_id,
                timeout: Duration::from_secs(12),
            };
            // `svc`'s next call joins first, then B behind it; then the late copy lands.
            let svc = waiter(0, &svc_locks, "svc");
            let other = waiter(1, &b_locks, "other");
            let in_line = two_in_line(recorder, &raw, svc, other, || async {
                if late.applied() != 1 || late.delivered() != 0 {
                    return Err(format!(
                        "the late copy was not held until then ({} held, {} delivered)",
                        late.applied(),
                        late.delivered()
                    )
                    .into());
                }
                let replies = late_replies(&late, 1, LATE_BY).await;
                let ran = (replies.first()).is_some_and(|reply| {
                    reply.get_f64("ok") == Ok(1.0) || reply.get_i32("ok") == Ok(1)
                });
                if planted {
                    // The removal of before the fix: every place of the lock id.
                    let old = vec![doc! { "$set": { "queue": line_without("svc") } }];
                    raw.update_one(
                        doc! { "_id": RESOURCE, "mongolock": 1, "queue.lockId": "svc" },
                        old,
                    )
                    .await?;
                }
                Ok(ran)
            })
            .await?;
            Ok::<_, Box<dyn std::error::Error>>(LateLeave {
                line_before: in_line.before,
                landed: in_line.landed,
                line_after: in_line.after,
                served: in_line.served,
            })
        };
        let (holder, went) = tokio::join!(holder, scenario);
        recorder.holder(holder);
        let went = went?;
        svc_locks.shutdown().await;
        b_locks.shutdown().await;
        let result = stage
            .finish(
                "a late leave_line takes the lock id's next call's place",
                Expected::Server(ServerCheck::Order),
                &[RESOURCE],
            )
            .await?;
        Ok((result, went))
    }

    /// The library: the late copy of the first call's `leave_line` lands after the lock
    /// id's next call joined the line (ahead of B), and leaves its place: `svc` is served
    /// first, and nothing is found.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_late_leave_line_leaves_the_next_calls_place() {
        let (result, went) = late_leave(false).await.expect("the scenario runs");
        println!("library: {went:?}; found {:?}", result.found());
        assert_eq!(went.line_before, ["svc", "other"], "{went:?}");
        assert!(went.landed, "the late copy ran: {went:?}");
        assert_eq!(went.line_after, ["svc", "other"], "{went:?}");
        assert_eq!(went.served, ["svc", "other"], "{went:?}");
        assert_eq!(result.found(), vec![], "nothing at all");
    }

    /// Planted: the removal of before the fix, sent raw once the late copy has landed,
    /// takes `svc`'s place, and B is served first. Every grant is in line with the server's
    /// line of its moment (`svc` joined again behind B); (S9) catches the place taken from
    /// a call that still waited (`oracle::still_waited`).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_late_leave_line_that_takes_the_next_calls_place_is_caught_by_s9() {
        let (result, went) = late_leave(true).await.expect("the control runs");
        println!("planted: {went:?}; found {:?}", result.found());
        assert!(went.landed, "the late copy ran: {went:?}");
        assert_eq!(went.served, ["other", "svc"], "{went:?}");
        assert!(result.caught(), "not caught: {:?}", result.found());
    }
}
