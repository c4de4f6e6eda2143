//! Negative controls: short scenarios with a deliberately broken holder, each of which the
//! checker must catch. If a control passes unnoticed, the checker is too weak to trust its
//! zero on the real runs.
//!
//! | control | what is broken | caught by |
//! |---|---|---|
//! | release by resource | a holder that lost its lease "releases" with `force_release(resource)`, ending the next holder's lease | (1) exclusion |
//! | counter reset | a holder uses token 0 (a fencing counter that restarted) | (2) fencing |
//! | skewed clock | a holder judges expiry by a clock running late: it believes for `ttl` more after it really lost | (3) local deadline |
//! | late keepalive | a holder whose loss signal fires only after the server's expiry (after the next grant) | (3) loss before next grant |
//! | reader as writer | a "writer" of a reader-writer lock that takes a read lock, and writes while another reader reads | (1) exclusion |
//! | polling writer | a writer that waits by polling `try_write` (which announces nothing), starved by a stream of readers | (5) writer preference |

use std::time::{Duration, Instant};

use mongolock::{LockClient, LockGuard};
use mongolock_testkit::{FaultProxy, TestServer};

use crate::check::{self, Check, Outcome};
use crate::history::{
    Access, History, HolderLog, LetGo, LossKind, Mode, Recorder, ReleaseResult, WriteLog,
    WriterWait,
};
use crate::workload::{COLLECTION, DB};

const RESOURCE: &str = "control";
const TTL: Duration = Duration::from_millis(1_000);

/// One control's result.
#[derive(Debug, Clone)]
pub struct ControlResult {
    /// The control's name.
    pub name: &'static str,
    /// The check that must catch it.
    pub expected: Check,
    /// What the checker found.
    pub outcome: Outcome,
}

impl ControlResult {
    /// True if the expected check found at least one violation.
    pub fn caught(&self) -> bool {
        self.outcome.has(self.expected)
    }
}

/// Runs the six controls, each on a fresh emulator.
///
/// # Errors
/// The emulator or a proxy could not start, or a lock call failed.
pub async fn run_all() -> Result<Vec<ControlResult>, Box<dyn std::error::Error>> {
    Ok(vec![
        release_by_resource().await?,
        counter_reset().await?,
        skewed_clock().await?,
        late_keepalive().await?,
        reader_as_writer().await?,
        polling_writer().await?,
    ])
}

fn finish(name: &'static str, expected: Check, recorder: &Recorder) -> ControlResult {
    finish_as(name, expected, recorder, Mode::Exclusive)
}

fn finish_as(
    name: &'static str,
    expected: Check,
    recorder: &Recorder,
    mode: Mode,
) -> ControlResult {
    let modes = [(RESOURCE.to_owned(), mode)].into_iter().collect();
    let history: History = recorder.finish(modes);
    ControlResult {
        name,
        expected,
        outcome: check::check(&history),
    }
}

fn locks(client: mongodb::Client) -> LockClient {
    LockClient::new(client.database(DB).collection(COLLECTION))
}

/// Writes to the guarded record on behalf of `log`.
fn write(recorder: &Recorder, log: &mut HolderLog, token: i64) {
    let value = log.writes.len() as u64;
    let (at, accepted) = recorder
        .record
        .write(&log.resource, log.mode, log.access, log.id, token);
    log.writes.push(WriteLog {
        at,
        token,
        value,
        accepted,
    });
}

/// An honest mutex holder: writes every 100 ms for `hold` (stopping at the loss), then
/// releases.
async fn hold_honestly(
    recorder: &Recorder,
    client: usize,
    guard: LockGuard,
    invoked_at: Instant,
    hold: Duration,
) -> HolderLog {
    hold_honestly_as(recorder, client, guard, invoked_at, hold, Mode::Exclusive).await
}

/// An honest holder of a resource locked as `mode` (a reader reads where a writer writes).
async fn hold_honestly_as(
    recorder: &Recorder,
    client: usize,
    guard: LockGuard,
    invoked_at: Instant,
    hold: Duration,
    mode: Mode,
) -> HolderLog {
    let mut log = HolderLog::new(recorder.next_id(), client, mode, invoked_at, &guard);
    let until = Instant::now() + hold;
    'work: while Instant::now() < until {
        if log.check_lost(&guard) {
            break;
        }
        write(recorder, &mut log, guard.fencing_token());
        let step_end = (Instant::now() + Duration::from_millis(100)).min(until);
        while Instant::now() < step_end {
            match tokio::time::timeout(Duration::from_millis(10), guard.lost()).await {
                Ok(reason) => {
                    log.notice(Instant::now(), LossKind::from(reason));
                    break 'work;
                }
                Err(_) => log.sample(&guard),
            }
        }
    }
    log.check_lost(&guard);
    log.lets_go(LetGo::Released);
    log.release = Some(ReleaseResult::of(&guard.release().await));
    log
}

/// Waits for the guard's loss, sampling its deadline; records the notice.
async fn wait_for_loss(log: &mut HolderLog, guard: &LockGuard) -> Instant {
    loop {
        match tokio::time::timeout(Duration::from_millis(10), guard.lost()).await {
            Ok(reason) => {
                let now = Instant::now();
                log.notice(now, LossKind::from(reason));
                return now;
            }
            Err(_) => log.sample(guard),
        }
    }
}

/// The stage of a control: an emulator, the fake holder A's client behind a fault proxy, and
/// a direct client for the holder after it.
struct Stage {
    server: TestServer,
    proxy: FaultProxy,
    recorder: Recorder,
    a_locks: LockClient,
    b_locks: LockClient,
}

impl Stage {
    async fn start() -> Result<Stage, Box<dyn std::error::Error>> {
        let server = TestServer::start().await?;
        let proxy = FaultProxy::start(server.addr()).await?;
        let a_locks = locks(proxy.client());
        let b_locks = locks(server.new_client());
        b_locks.create_indexes().await?;
        Ok(Stage {
            server,
            proxy,
            recorder: Recorder::new(),
            a_locks,
            b_locks,
        })
    }

    /// A takes the lock, writes through it, and is cut off from the server.
    async fn a_holds_then_is_cut_off(
        &self,
    ) -> Result<(LockGuard, HolderLog), Box<dyn std::error::Error>> {
        let invoked = Instant::now();
        let a = self.a_locks.mutex(RESOURCE).ttl(TTL).acquire().await?;
        let mut a_log = HolderLog::new(self.recorder.next_id(), 0, Mode::Exclusive, invoked, &a);
        a_log.fake = true;
        write(&self.recorder, &mut a_log, a.fencing_token());
        self.proxy.blackhole();
        Ok((a, a_log))
    }
}

/// A holder that lost its lease releases "by resource" (`force_release`) while another
/// holds: the other's lease ends without its consent, and a third is granted while the
/// second still believes it holds.
async fn release_by_resource() -> Result<ControlResult, Box<dyn std::error::Error>> {
    let stage = Stage::start().await?;
    let Stage {
        server,
        proxy,
        recorder,
        a_locks,
        b_locks,
    } = &stage;
    let c_locks = locks(server.new_client());

    // A holds, is cut off, and learns it lost the lease.
    let (a, mut a_log) = stage.a_holds_then_is_cut_off().await?;
    wait_for_loss(&mut a_log, &a).await;
    std::mem::forget(a);

    // B takes over after the server's expiry, with a longer TTL (renewed every second).
    let invoked = Instant::now();
    let b = b_locks
        .mutex(RESOURCE)
        .ttl(Duration::from_secs(3))
        .acquire_timeout(Duration::from_secs(5))
        .await?
        .ok_or("B was not granted the lock")?;
    let b_recorder = recorder.clone();
    let b_task = tokio::spawn(async move {
        hold_honestly(&b_recorder, 1, b, invoked, Duration::from_secs(3)).await
    });
    tokio::time::sleep(Duration::from_millis(150)).await;

    // The bug: A "releases" by resource, without checking who holds it.
    proxy.heal();
    a_locks.force_release(RESOURCE).await?;
    a_log.released_at = Some(Instant::now());
    recorder.holder(a_log);

    // C is granted at once, while B still believes it holds.
    let invoked = Instant::now();
    if let Some(c) = c_locks
        .mutex(RESOURCE)
        .ttl(TTL)
        .acquire_timeout(Duration::from_secs(3))
        .await?
    {
        let c_log = hold_honestly(recorder, 2, c, invoked, Duration::from_millis(300)).await;
        recorder.holder(c_log);
    }
    recorder.holder(b_task.await?);
    Ok(finish("release by resource", Check::Exclusion, recorder))
}

/// A fencing counter that restarts: the second holder writes with token 0.
async fn counter_reset() -> Result<ControlResult, Box<dyn std::error::Error>> {
    let server = TestServer::start().await?;
    let recorder = Recorder::new();
    let locks = locks(server.new_client());
    locks.create_indexes().await?;

    let invoked = Instant::now();
    let a = locks.mutex(RESOURCE).ttl(TTL).acquire().await?;
    let a_log = hold_honestly(&recorder, 0, a, invoked, Duration::from_millis(200)).await;
    recorder.holder(a_log);

    let invoked = Instant::now();
    let b = locks.mutex(RESOURCE).ttl(TTL).acquire().await?;
    let mut b_log = HolderLog::new(recorder.next_id(), 1, Mode::Exclusive, invoked, &b);
    b_log.fake = true;
    b_log.token = 0; // the counter restarted
    write(&recorder, &mut b_log, 0);
    b_log.released_at = Some(Instant::now());
    b.release().await?;
    recorder.holder(b_log);
    Ok(finish("counter reset", Check::Fencing, &recorder))
}

/// A holder that judges expiry by a skewed clock: it believes (and writes) for `TTL` more
/// after its lease was really lost.
async fn skewed_clock() -> Result<ControlResult, Box<dyn std::error::Error>> {
    let stage = Stage::start().await?;
    let recorder = &stage.recorder;
    let b_locks = stage.b_locks.clone();
    let (a, mut a_log) = stage.a_holds_then_is_cut_off().await?;

    // B waits for the lock meanwhile.
    let b_recorder = recorder.clone();
    let b_task = tokio::spawn(async move {
        let invoked = Instant::now();
        let b = b_locks
            .mutex(RESOURCE)
            .ttl(TTL)
            .acquire_timeout(Duration::from_secs(5))
            .await;
        match b {
            Ok(Some(b)) => {
                Some(hold_honestly(&b_recorder, 1, b, invoked, Duration::from_millis(800)).await)
            }
            _ => None,
        }
    });

    let lost = wait_for_loss(&mut a_log, &a).await;
    let skewed_until = lost + TTL;
    while Instant::now() < skewed_until {
        write(recorder, &mut a_log, a.fencing_token());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    a_log.believed_until = Some(skewed_until);
    recorder.holder(a_log);
    std::mem::forget(a);
    if let Some(b_log) = b_task.await? {
        recorder.holder(b_log);
    }
    Ok(finish(
        "skewed client clock",
        Check::LocalDeadline,
        recorder,
    ))
}

/// A keepalive whose loss signal fires only after the server's expiry: the holder learns
/// after the next holder was granted.
async fn late_keepalive() -> Result<ControlResult, Box<dyn std::error::Error>> {
    let stage = Stage::start().await?;
    let (recorder, b_locks) = (&stage.recorder, &stage.b_locks);
    let (a, mut a_log) = stage.a_holds_then_is_cut_off().await?;
    a_log.max_deadline = None; // its idea of the deadline is as late as its signal

    let invoked = Instant::now();
    let b = b_locks
        .mutex(RESOURCE)
        .ttl(TTL)
        .acquire_timeout(Duration::from_secs(5))
        .await?
        .ok_or("B was not granted the lock")?;
    let b_log = hold_honestly(recorder, 1, b, invoked, Duration::from_millis(300)).await;
    // The late signal: A hears of its loss only now, after B's grant.
    let late = Instant::now();
    a_log.notified = Some((late, LossKind::Deadline));
    a_log.believed_until = Some(late);
    recorder.holder(a_log);
    recorder.holder(b_log);
    std::mem::forget(a);
    Ok(finish(
        "late keepalive signal",
        Check::LossBeforeNextGrant,
        recorder,
    ))
}

/// A "writer" that takes a read lock (the wrong kind) and writes as a writer while an
/// honest reader reads: a writer overlapping a reader.
async fn reader_as_writer() -> Result<ControlResult, Box<dyn std::error::Error>> {
    let server = TestServer::start().await?;
    let recorder = Recorder::new();
    let r_locks = locks(server.new_client());
    let w_locks = locks(server.new_client());
    r_locks.create_indexes().await?;

    // An honest reader reads for 600 ms.
    let invoked = Instant::now();
    let reader = r_locks.rwlock(RESOURCE).ttl(TTL).read().await?;
    let r_recorder = recorder.clone();
    let r_task = tokio::spawn(async move {
        let hold = Duration::from_millis(600);
        hold_honestly_as(&r_recorder, 0, reader, invoked, hold, Mode::ReadWrite).await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;

    // The bug: the writer asks for a read lock, and gets it beside the reader.
    let invoked = Instant::now();
    let wrong = w_locks.rwlock(RESOURCE).ttl(TTL).read().await?;
    let mut w_log = HolderLog::new(recorder.next_id(), 1, Mode::ReadWrite, invoked, &wrong);
    w_log.fake = true;
    w_log.access = Access::Exclusive; // it believes it is the writer
    for _ in 0..3 {
        write(&recorder, &mut w_log, wrong.fencing_token());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    w_log.released_at = Some(Instant::now());
    wrong.release().await?;
    recorder.holder(w_log);
    recorder.holder(r_task.await?);
    Ok(finish_as(
        "reader as writer",
        Check::Exclusion,
        &recorder,
        Mode::ReadWrite,
    ))
}

/// A writer that waits by polling `try_write` (a single attempt announces nothing), while
/// two readers take turns so that one of them always holds: the writer is starved, which
/// the writer-preference check must see.
async fn polling_writer() -> Result<ControlResult, Box<dyn std::error::Error>> {
    let server = TestServer::start().await?;
    let recorder = Recorder::new();
    let w_locks = locks(server.new_client());
    w_locks.create_indexes().await?;
    let stream_until = Instant::now() + Duration::from_millis(3_600);

    // Two readers, each reading for 350 ms at a time, half a turn apart.
    let mut readers = Vec::new();
    for client in 0..2_usize {
        let r_locks = locks(server.new_client());
        let r_recorder = recorder.clone();
        readers.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(175 * client as u64)).await;
            while Instant::now() < stream_until {
                let invoked = Instant::now();
                let rwlock = r_locks.rwlock(RESOURCE).ttl(TTL);
                let Ok(Some(reader)) = rwlock.read_timeout(Duration::from_secs(1)).await else {
                    continue;
                };
                let hold = Duration::from_millis(350);
                let log =
                    hold_honestly_as(&r_recorder, client, reader, invoked, hold, Mode::ReadWrite)
                        .await;
                r_recorder.holder(log);
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;

    // The bug: the writer "waits" by trying again and again, announcing nothing.
    let invoked = Instant::now();
    let patience = Duration::from_secs(3);
    let mut granted = None;
    while invoked.elapsed() < patience {
        if let Some(writer) = w_locks.rwlock(RESOURCE).ttl(TTL).try_write().await? {
            granted = Some(Instant::now());
            writer.release().await?;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    recorder.writer_wait(WriterWait {
        client: 2,
        resource: RESOURCE.to_owned(),
        invoked_at: invoked,
        gives_up_at: invoked + patience,
        granted_at: granted,
        returned_at: Instant::now(),
    });
    for reader in readers {
        reader.await?;
    }
    Ok(finish_as(
        "polling writer",
        Check::WriterPreference,
        &recorder,
        Mode::ReadWrite,
    ))
}
