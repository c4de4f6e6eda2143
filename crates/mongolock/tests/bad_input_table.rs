//! Bad input, as one table over every public entry point: malformed arguments, and documents
//! of other shapes in the lock collection.
//!
//! Each case calls one entry point with one bad (or legal but odd) input and names the outcome
//! it must have: a specific [`ErrorKind`] (with the argument's name for
//! [`ErrorKind::InvalidArgument`]), or, for a legal input, the documented value. Every case
//! runs in a task of its own, so a panic is reported as that case failing, with its name, and
//! the table goes on. Each case has a collection of its own; the collection's documents (all
//! of them, as BSON bytes, sorted) and index names are snapshotted before the call (after the
//! case's own setup, if it has any) and after it, once background work has finished, and must
//! be byte-for-byte the same. Every failure is collected and printed, then the test fails if
//! there is any.
//!
//! Runs on the emulator, or on the server named by `MONGODB_URI` (nothing here moves the
//! server's clock).

mod common;

use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, SystemTime};

use bson::{Bson, DateTime, Document, doc};
use futures_util::TryStreamExt;
use futures_util::future::BoxFuture;
use mongodb::Collection;
use mongolock::{
    AcquireRequest, Attempt, ErrorKind, Filter, LockClient, LockDetails, LockGuard, LockKind,
    MAX_ID_LEN, MAX_LABEL_LEN, MAX_TTL, Nonce, Result,
};

/// How long one case may take before it counts as hung (a guard against a hang, not a
/// measurement: every case here takes milliseconds).
const HANG_GUARD: Duration = Duration::from_secs(60);

/// What a case must come back with.
#[derive(Debug, Clone, PartialEq)]
enum Expect {
    /// `ErrorKind::InvalidArgument` naming this argument.
    Invalid(&'static str),
    /// `ErrorKind::UnexpectedDocument` for the document whose `_id` prints as this.
    Unexpected(&'static str),
    /// `ErrorKind::AlreadyLocked`.
    AlreadyLocked,
    /// `ErrorKind::HeldWithOtherKind`.
    HeldWithOtherKind,
    /// `ErrorKind::CapMismatch`.
    CapMismatch,
    /// `ErrorKind::LeaseLost`.
    LeaseLost,
    /// `ErrorKind::Database` with this server error code.
    Database(Option<i32>),
    /// Success, with the value rendered as this text (see the `show_*` helpers).
    Value(&'static str),
}

/// What a case is given: the lock client on the case's own collection, and a way to mark the
/// point after its setup from which nothing may change.
#[derive(Clone)]
struct Probe {
    locks: LockClient,
    collection: Collection<Document>,
    db: mongodb::Database,
    before: Arc<StdMutex<Option<Snapshot>>>,
}

impl Probe {
    /// Takes the "before" snapshot now (after the case's own setup).
    async fn mark(&self) {
        let snapshot = snapshot(&self.collection).await;
        *self.before.lock().unwrap() = Some(snapshot);
    }
}

/// A named way to build a bad value, and the argument its error must name.
type Variant<T> = (&'static str, fn() -> T, &'static str);

type Run = Box<dyn FnOnce(Probe) -> BoxFuture<'static, Result<String>> + Send>;

/// One row of a table.
struct Case {
    name: String,
    expect: Expect,
    run: Run,
}

/// Adds a case: `case!(cases, "name", Expect::..., |p| async-body returning Result<String>)`.
macro_rules! case {
    ($cases:expr, $name:expr, $expect:expr, |$p:ident| $body:block) => {
        $cases.push(Case {
            name: ($name).to_string(),
            expect: $expect,
            run: Box::new(move |$p: Probe| Box::pin(async move $body)),
        })
    };
}

/// The collection as it is: every document as BSON bytes, sorted, then the index names.
#[derive(Debug, Clone, PartialEq)]
struct Snapshot {
    documents: Vec<Vec<u8>>,
    indexes: Vec<String>,
}

async fn snapshot(collection: &Collection<Document>) -> Snapshot {
    let documents: Vec<Document> = collection
        .find(doc! {})
        .await
        .expect("find")
        .try_collect()
        .await
        .expect("read every document");
    let mut documents: Vec<Vec<u8>> = documents
        .iter()
        .map(|d| bson::to_vec(d).expect("a document serialises"))
        .collect();
    documents.sort();
    // A collection that does not exist has no indexes (a real server says NamespaceNotFound);
    // `_id_` comes with the collection, which a server may create for a write that changes
    // nothing.
    let mut indexes: Vec<String> = collection
        .list_index_names()
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|name| name != "_id_")
        .collect();
    indexes.sort();
    Snapshot { documents, indexes }
}

fn describe_snapshot(snapshot: &Snapshot) -> String {
    let documents: Vec<String> = snapshot
        .documents
        .iter()
        .map(|bytes| {
            let document = bson::from_slice::<Document>(bytes).expect("stored bytes are BSON");
            let text = Bson::Document(document).into_relaxed_extjson().to_string();
            text.chars().take(1200).collect()
        })
        .collect();
    format!("documents {documents:?}, indexes {:?}", snapshot.indexes)
}

/// Whether `outcome` is what `expect` says; the reason if not.
fn check(expect: &Expect, outcome: &Result<String>) -> std::result::Result<(), String> {
    let ok = match (expect, outcome) {
        (Expect::Value(want), Ok(got)) => want == got,
        (Expect::Invalid(want), Err(e)) => {
            matches!(e.kind(), ErrorKind::InvalidArgument { argument, .. } if argument == want)
        }
        (Expect::Unexpected(want), Err(e)) => {
            matches!(e.kind(), ErrorKind::UnexpectedDocument { id, .. } if id == want)
        }
        (Expect::AlreadyLocked, Err(e)) => matches!(e.kind(), ErrorKind::AlreadyLocked { .. }),
        (Expect::HeldWithOtherKind, Err(e)) => {
            matches!(e.kind(), ErrorKind::HeldWithOtherKind { .. })
        }
        (Expect::CapMismatch, Err(e)) => matches!(e.kind(), ErrorKind::CapMismatch { .. }),
        (Expect::LeaseLost, Err(e)) => matches!(e.kind(), ErrorKind::LeaseLost { .. }),
        (Expect::Database(want), Err(e)) => {
            matches!(e.kind(), ErrorKind::Database { code, .. } if code == want)
        }
        _ => false,
    };
    if ok {
        return Ok(());
    }
    // The kind, and the message an operator would see.
    Err(match outcome {
        Ok(got) => format!("expected {expect:?}, got Ok({got})"),
        Err(e) => format!("expected {expect:?}, got {:?} (\"{e}\")", e.kind()),
    })
}

/// The outcome of a whole table.
struct Tally {
    ran: usize,
    failures: Vec<String>,
}

/// Runs every case of `cases` in its own task, on its own collection of `db`.
async fn run_table(db: &mongodb::Database, prefix: &str, cases: Vec<Case>) -> Tally {
    let mut tally = Tally {
        ran: 0,
        failures: Vec::new(),
    };
    for (i, case) in cases.into_iter().enumerate() {
        let collection = db.collection::<Document>(&format!("{prefix}_{i:03}"));
        let probe = Probe {
            locks: LockClient::new(collection.clone()),
            collection: collection.clone(),
            db: db.clone(),
            before: Arc::new(StdMutex::new(None)),
        };
        probe.mark().await;
        let task = tokio::spawn((case.run)(probe.clone()));
        let outcome = tokio::time::timeout(HANG_GUARD, task).await;
        // Whatever the case left to the background (a dropped guard's release) happens
        // before the comparison.
        let _ = tokio::time::timeout(HANG_GUARD, probe.locks.shutdown()).await;
        tally.ran += 1;
        let name = &case.name;
        match outcome {
            Err(_) => tally
                .failures
                .push(format!("{name}: no outcome within {HANG_GUARD:?}")),
            Ok(Err(join)) if join.is_panic() => {
                let payload = join.into_panic();
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                tally.failures.push(format!("{name}: PANICKED: {message}"));
            }
            Ok(Err(join)) => tally.failures.push(format!("{name}: task failed: {join}")),
            Ok(Ok(outcome)) => {
                if let Err(reason) = check(&case.expect, &outcome) {
                    tally.failures.push(format!("{name}: {reason}"));
                }
            }
        }
        let before = probe.before.lock().unwrap().clone().expect("marked");
        let after = snapshot(&collection).await;
        if before != after {
            tally.failures.push(format!(
                "{name}: the collection changed\n  before: {}\n  after:  {}",
                describe_snapshot(&before),
                describe_snapshot(&after)
            ));
        }
    }
    tally
}

fn report(table: &str, expected: usize, tally: &Tally) {
    println!(
        "{table}: {} cases run, {} failed",
        tally.ran,
        tally.failures.len()
    );
    for failure in &tally.failures {
        println!("  FAILED {failure}");
    }
    assert_eq!(tally.ran, expected, "{table}: every case runs");
    assert!(
        tally.failures.is_empty(),
        "{table}: {} of {} cases failed:\n{}",
        tally.failures.len(),
        tally.ran,
        tally.failures.join("\n")
    );
}

// ---------------------------------------------------------------------------------------
// Rendering successful outcomes.

fn show_count(n: Result<u64>) -> Result<String> {
    n.map(|n| n.to_string())
}

fn show_bool(b: Result<bool>) -> Result<String> {
    b.map(|b| b.to_string())
}

fn show_rows(rows: Result<Vec<mongolock::LockStatus>>) -> Result<String> {
    rows.map(|rows| format!("{} rows", rows.len()))
}

fn show_purged(purged: Result<mongolock::Purged>) -> Result<String> {
    purged.map(|p| format!("{} {:?}", p.resources(), p.lock_ids()))
}

fn show_unit(unit: Result<()>) -> Result<String> {
    unit.map(|()| "()".to_owned())
}

fn show_grant(grant: Result<mongolock::Grant>) -> Result<String> {
    grant.map(|g| format!("grant on {}", g.resource()))
}

fn show_attempt(attempt: Result<Attempt>) -> Result<String> {
    attempt.map(|a| match a {
        Attempt::Granted(_) => "Granted".to_owned(),
        Attempt::AlreadyHeld(_) => "AlreadyHeld".to_owned(),
        Attempt::HeldWithOtherKind(_) => "HeldWithOtherKind".to_owned(),
        Attempt::Contended(_) => "Contended".to_owned(),
        Attempt::Withdrawn => "Withdrawn".to_owned(),
        Attempt::CapMismatch { .. } => "CapMismatch".to_owned(),
        other => format!("{other:?}"),
    })
}

/// A guard is released before the outcome is compared (a grant would change the collection,
/// which the snapshot reports).
async fn show_guard(guard: Result<LockGuard>) -> Result<String> {
    let guard = guard?;
    let resource = guard.resource().to_owned();
    drop(guard);
    Ok(format!("guard on {resource}"))
}

async fn show_maybe_guard(guard: Result<Option<LockGuard>>) -> Result<String> {
    match guard? {
        None => Ok("None".to_owned()),
        Some(guard) => show_guard(Ok(guard)).await,
    }
}

// ---------------------------------------------------------------------------------------
// Inputs.

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn long_id() -> String {
    "x".repeat(MAX_ID_LEN + 1)
}

fn long_label() -> String {
    "o".repeat(MAX_LABEL_LEN + 1)
}

/// One bad setting of a handle (mutex, reader-writer lock, semaphore), and the argument its
/// error must name.
#[derive(Debug, Clone, Copy)]
enum BadSetting {
    TtlZero,
    TtlBelowTenMillis,
    TtlAboveMax,
    TtlMax,
    EveryZero,
    EveryBelowFloor,
    EveryEqualsTtl,
    EveryMax,
    MarginEqualsTtl,
    MarginMax,
    MarginLeavesLessThanEvery,
    LockIdEmpty,
    LockIdTooLong,
    OwnerTooLong,
    ResourceEmpty,
    ResourceTooLong,
}

const BAD_SETTINGS: [BadSetting; 16] = [
    BadSetting::TtlZero,
    BadSetting::TtlBelowTenMillis,
    BadSetting::TtlAboveMax,
    BadSetting::TtlMax,
    BadSetting::EveryZero,
    BadSetting::EveryBelowFloor,
    BadSetting::EveryEqualsTtl,
    BadSetting::EveryMax,
    BadSetting::MarginEqualsTtl,
    BadSetting::MarginMax,
    BadSetting::MarginLeavesLessThanEvery,
    BadSetting::LockIdEmpty,
    BadSetting::LockIdTooLong,
    BadSetting::OwnerTooLong,
    BadSetting::ResourceEmpty,
    BadSetting::ResourceTooLong,
];

impl BadSetting {
    fn argument(self) -> &'static str {
        use BadSetting::*;
        match self {
            TtlZero | TtlBelowTenMillis | TtlAboveMax | TtlMax => "ttl",
            EveryZero | EveryBelowFloor | EveryEqualsTtl | EveryMax | MarginLeavesLessThanEvery => {
                "extend_every"
            }
            MarginEqualsTtl | MarginMax => "safety_margin",
            LockIdEmpty | LockIdTooLong => "lock_id",
            OwnerTooLong => "owner",
            ResourceEmpty | ResourceTooLong => "resource",
        }
    }

    fn resource(self) -> String {
        match self {
            BadSetting::ResourceEmpty => String::new(),
            BadSetting::ResourceTooLong => long_id(),
            _ => "handle".to_owned(),
        }
    }
}

/// Applies a [`BadSetting`] to a handle of any kind (their builders share names).
macro_rules! apply {
    ($handle:expr, $bad:expr) => {{
        let h = $handle;
        match $bad {
            BadSetting::TtlZero => h.ttl(Duration::ZERO),
            BadSetting::TtlBelowTenMillis => h.ttl(ms(9)),
            BadSetting::TtlAboveMax => h.ttl(MAX_TTL + ms(1)),
            BadSetting::TtlMax => h.ttl(Duration::MAX),
            BadSetting::EveryZero => h.extend_every(Duration::ZERO),
            BadSetting::EveryBelowFloor => h.extend_every(Duration::from_nanos(1)),
            BadSetting::EveryEqualsTtl => h.ttl(secs(30)).extend_every(secs(30)),
            BadSetting::EveryMax => h.extend_every(Duration::MAX),
            BadSetting::MarginEqualsTtl => h.ttl(secs(30)).safety_margin(secs(30)),
            BadSetting::MarginMax => h.safety_margin(Duration::MAX),
            // Default renewal every 10 s, but the margin leaves only 1 s of the 30 s TTL.
            BadSetting::MarginLeavesLessThanEvery => h.ttl(secs(30)).safety_margin(secs(29)),
            BadSetting::LockIdEmpty => h.lock_id(""),
            BadSetting::LockIdTooLong => h.lock_id(long_id()),
            BadSetting::OwnerTooLong => h.owner(long_label()),
            BadSetting::ResourceEmpty | BadSetting::ResourceTooLong => h,
        }
    }};
}

/// Every acquiring method of the three handles.
const HANDLE_METHODS: [&str; 24] = [
    "mutex.acquire",
    "mutex.try_acquire",
    "mutex.acquire_timeout",
    "mutex.run",
    "mutex.try_run",
    "mutex.run_timeout",
    "rwlock.read",
    "rwlock.try_read",
    "rwlock.read_timeout",
    "rwlock.run_read",
    "rwlock.try_run_read",
    "rwlock.run_read_timeout",
    "rwlock.write",
    "rwlock.try_write",
    "rwlock.write_timeout",
    "rwlock.run_write",
    "rwlock.try_run_write",
    "rwlock.run_write_timeout",
    "semaphore.acquire",
    "semaphore.try_acquire",
    "semaphore.acquire_timeout",
    "semaphore.run",
    "semaphore.try_run",
    "semaphore.run_timeout",
];

/// Calls `method` on a handle (of the resource `bad` names) with the bad setting `bad` applied.
async fn call_handle(
    locks: &LockClient,
    method: &str,
    bad: BadSetting,
    permits: u32,
) -> Result<String> {
    let resource = bad.resource();
    let work = async |_guard: &LockGuard| Ok::<_, mongolock::Error>(7);
    match method {
        "mutex.acquire" => show_guard(apply!(locks.mutex(resource), bad).acquire().await).await,
        "mutex.try_acquire" => {
            show_maybe_guard(apply!(locks.mutex(resource), bad).try_acquire().await).await
        }
        "mutex.acquire_timeout" => {
            let handle = apply!(locks.mutex(resource), bad);
            show_maybe_guard(handle.acquire_timeout(secs(1)).await).await
        }
        "mutex.run" => apply!(locks.mutex(resource), bad)
            .run(work)
            .await
            .map(|n| n.to_string()),
        "mutex.try_run" => apply!(locks.mutex(resource), bad)
            .try_run(work)
            .await
            .map(|n| format!("{n:?}")),
        "mutex.run_timeout" => apply!(locks.mutex(resource), bad)
            .run_timeout(secs(1), work)
            .await
            .map(|n| format!("{n:?}")),
        "rwlock.read" => show_guard(apply!(locks.rwlock(resource), bad).read().await).await,
        "rwlock.try_read" => {
            show_maybe_guard(apply!(locks.rwlock(resource), bad).try_read().await).await
        }
        "rwlock.read_timeout" => {
            let handle = apply!(locks.rwlock(resource), bad);
            show_maybe_guard(handle.read_timeout(secs(1)).await).await
        }
        "rwlock.run_read" => apply!(locks.rwlock(resource), bad)
            .run_read(work)
            .await
            .map(|n| n.to_string()),
        "rwlock.try_run_read" => apply!(locks.rwlock(resource), bad)
            .try_run_read(work)
            .await
            .map(|n| format!("{n:?}")),
        "rwlock.run_read_timeout" => apply!(locks.rwlock(resource), bad)
            .run_read_timeout(secs(1), work)
            .await
            .map(|n| format!("{n:?}")),
        "rwlock.write" => show_guard(apply!(locks.rwlock(resource), bad).write().await).await,
        "rwlock.try_write" => {
            show_maybe_guard(apply!(locks.rwlock(resource), bad).try_write().await).await
        }
        "rwlock.write_timeout" => {
            let handle = apply!(locks.rwlock(resource), bad);
            show_maybe_guard(handle.write_timeout(secs(1)).await).await
        }
        "rwlock.run_write" => apply!(locks.rwlock(resource), bad)
            .run_write(work)
            .await
            .map(|n| n.to_string()),
        "rwlock.try_run_write" => apply!(locks.rwlock(resource), bad)
            .try_run_write(work)
            .await
            .map(|n| format!("{n:?}")),
        "rwlock.run_write_timeout" => apply!(locks.rwlock(resource), bad)
            .run_write_timeout(secs(1), work)
            .await
            .map(|n| format!("{n:?}")),
        "semaphore.acquire" => {
            show_guard(
                apply!(locks.semaphore(resource, permits), bad)
                    .acquire()
                    .await,
            )
            .await
        }
        "semaphore.try_acquire" => {
            let handle = apply!(locks.semaphore(resource, permits), bad);
            show_maybe_guard(handle.try_acquire().await).await
        }
        "semaphore.acquire_timeout" => {
            let handle = apply!(locks.semaphore(resource, permits), bad);
            show_maybe_guard(handle.acquire_timeout(secs(1)).await).await
        }
        "semaphore.run" => apply!(locks.semaphore(resource, permits), bad)
            .run(work)
            .await
            .map(|n| n.to_string()),
        "semaphore.try_run" => apply!(locks.semaphore(resource, permits), bad)
            .try_run(work)
            .await
            .map(|n| format!("{n:?}")),
        "semaphore.run_timeout" => apply!(locks.semaphore(resource, permits), bad)
            .run_timeout(secs(1), work)
            .await
            .map(|n| format!("{n:?}")),
        other => unreachable!("no handle method {other}"),
    }
}

async fn call_client(locks: &LockClient, call: &str) -> Result<String> {
    let d = LockDetails::default;
    let request = AcquireRequest::exclusive("r", "id", d());
    match call {
        "create_indexes" => show_unit(locks.create_indexes().await),
        "xlock" => show_grant(locks.xlock("r", "id", d()).await),
        "slock" => show_grant(locks.slock("r", "id", d(), Some(2)).await),
        "acquire" => show_attempt(locks.acquire(&request).await),
        "release_attempt" => show_bool(locks.release_attempt(&request).await),
        "unlock" => show_count(locks.unlock("id").await),
        "renew" => show_count(locks.renew("id", secs(5)).await),
        "status" => show_rows(locks.status(&Filter::default()).await),
        "force_release" => show_count(locks.force_release("r").await),
        "purge" => show_purged(locks.purge().await),
        "purge_abandoned_groups" => show_purged(locks.purge_abandoned_groups().await),
        "mutex.try_acquire" => show_maybe_guard(locks.mutex("r").try_acquire().await).await,
        "semaphore.acquire" => show_guard(locks.semaphore("r", 2).acquire().await).await,
        other => unreachable!("no client call {other}"),
    }
}

// ---------------------------------------------------------------------------------------
// The table of malformed arguments.

fn argument_cases() -> Vec<Case> {
    let mut cases: Vec<Case> = Vec::new();
    let d = LockDetails::default;

    // xlock, slock: ids, TTLs, labels, caps.
    let ids: [(&str, String, String, &str); 4] = [
        ("empty resource", String::new(), "id".into(), "resource"),
        ("over-long resource", long_id(), "id".into(), "resource"),
        ("empty lock id", "r".into(), String::new(), "lock_id"),
        ("over-long lock id", "r".into(), long_id(), "lock_id"),
    ];
    for (what, resource, lock_id, argument) in ids {
        let (r, l) = (resource.clone(), lock_id.clone());
        case!(
            cases,
            format!("xlock: {what}"),
            Expect::Invalid(argument),
            |p| { show_grant(p.locks.xlock(&r, &l, d()).await) }
        );
        let (r, l) = (resource.clone(), lock_id.clone());
        case!(
            cases,
            format!("slock: {what}"),
            Expect::Invalid(argument),
            |p| { show_grant(p.locks.slock(&r, &l, d(), Some(3)).await) }
        );
        let (r, l) = (resource.clone(), lock_id.clone());
        case!(
            cases,
            format!("acquire(exclusive): {what}"),
            Expect::Invalid(argument),
            |p| { show_attempt(p.locks.acquire(&AcquireRequest::exclusive(r, l, d())).await) }
        );
        let (r, l) = (resource.clone(), lock_id.clone());
        case!(
            cases,
            format!("acquire(shared): {what}"),
            Expect::Invalid(argument),
            |p| {
                show_attempt(
                    p.locks
                        .acquire(&AcquireRequest::shared(r, l, d(), None))
                        .await,
                )
            }
        );
        let (r, l) = (resource, lock_id);
        case!(
            cases,
            format!("release_attempt: {what}"),
            Expect::Invalid(argument),
            |p| {
                show_bool(
                    p.locks
                        .release_attempt(&AcquireRequest::exclusive(r, l, d()))
                        .await,
                )
            }
        );
    }
    let details: [Variant<LockDetails>; 6] = [
        (
            "zero ttl",
            || LockDetails::default().ttl(Duration::ZERO),
            "ttl",
        ),
        (
            "ttl just above MAX_TTL",
            || LockDetails::default().ttl(MAX_TTL + ms(1)),
            "ttl",
        ),
        (
            "ttl Duration::MAX",
            || LockDetails::default().ttl(Duration::MAX),
            "ttl",
        ),
        (
            "over-long owner",
            || LockDetails::default().owner(long_label()),
            "owner",
        ),
        (
            "over-long host",
            || LockDetails::default().host(long_label()),
            "host",
        ),
        (
            "over-long owner with a NUL",
            || LockDetails::default().owner(format!("a\0{}", long_label())),
            "owner",
        ),
    ];
    for (what, make, argument) in details {
        case!(
            cases,
            format!("LockDetails::validate: {what}"),
            Expect::Invalid(argument),
            |_p| { make().validate().map(|()| "valid".to_owned()) }
        );
        case!(
            cases,
            format!("xlock: {what}"),
            Expect::Invalid(argument),
            |p| { show_grant(p.locks.xlock("r", "id", make()).await) }
        );
        case!(
            cases,
            format!("slock: {what}"),
            Expect::Invalid(argument),
            |p| { show_grant(p.locks.slock("r", "id", make(), None).await) }
        );
        case!(
            cases,
            format!("acquire(shared): {what}"),
            Expect::Invalid(argument),
            |p| {
                let request =
                    AcquireRequest::shared("r", "id", make(), Some(2)).nonce(Nonce::new());
                show_attempt(p.locks.acquire(&request).await)
            }
        );
        case!(
            cases,
            format!("release_attempt: {what}"),
            Expect::Invalid(argument),
            |p| {
                show_bool(
                    p.locks
                        .release_attempt(&AcquireRequest::exclusive("r", "id", make()))
                        .await,
                )
            }
        );
    }
    case!(cases, "slock: cap of zero", Expect::Invalid("max"), |p| {
        show_grant(p.locks.slock("r", "id", d(), Some(0)).await)
    });
    case!(
        cases,
        "acquire(shared): cap of zero",
        Expect::Invalid("max"),
        |p| {
            show_attempt(
                p.locks
                    .acquire(&AcquireRequest::shared("r", "id", d(), Some(0)))
                    .await,
            )
        }
    );
    case!(
        cases,
        "release_attempt: cap of zero",
        Expect::Invalid("max"),
        |p| {
            let request = AcquireRequest::shared("r", "id", d(), Some(0));
            show_bool(p.locks.release_attempt(&request).await)
        }
    );

    // unlock, renew, force_release, status: ids and durations.
    case!(
        cases,
        "unlock: empty lock id",
        Expect::Invalid("lock_id"),
        |p| { show_count(p.locks.unlock("").await) }
    );
    case!(
        cases,
        "unlock: over-long lock id",
        Expect::Invalid("lock_id"),
        |p| { show_count(p.locks.unlock(&long_id()).await) }
    );
    case!(
        cases,
        "renew: empty lock id",
        Expect::Invalid("lock_id"),
        |p| { show_count(p.locks.renew("", secs(5)).await) }
    );
    case!(
        cases,
        "renew: over-long lock id",
        Expect::Invalid("lock_id"),
        |p| { show_count(p.locks.renew(&long_id(), secs(5)).await) }
    );
    for (what, ttl) in [
        ("zero ttl", Duration::ZERO),
        ("ttl just above MAX_TTL", MAX_TTL + ms(1)),
        ("ttl Duration::MAX", Duration::MAX),
    ] {
        case!(
            cases,
            format!("renew: {what}"),
            Expect::Invalid("ttl"),
            |p| { show_count(p.locks.renew("id", ttl).await) }
        );
    }
    case!(
        cases,
        "force_release: empty resource",
        Expect::Invalid("resource"),
        |p| { show_count(p.locks.force_release("").await) }
    );
    case!(
        cases,
        "force_release: over-long resource",
        Expect::Invalid("resource"),
        |p| { show_count(p.locks.force_release(&long_id()).await) }
    );
    let filters: [Variant<Filter>; 7] = [
        (
            "empty resource",
            || Filter::default().resource(""),
            "resource",
        ),
        (
            "over-long resource",
            || Filter::default().resource(long_id()),
            "resource",
        ),
        ("empty lock id", || Filter::default().lock_id(""), "lock_id"),
        (
            "over-long lock id",
            || Filter::default().lock_id(long_id()),
            "lock_id",
        ),
        (
            "ttl_below Duration::MAX",
            || Filter::default().ttl_below(Duration::MAX),
            "filter",
        ),
        (
            "ttl_at_least beyond i64 milliseconds",
            || Filter::default().ttl_at_least(Duration::from_secs(u64::MAX / 1000 + 1)),
            "filter",
        ),
        (
            "a good owner, then an empty resource",
            || {
                Filter::default()
                    .owner("me")
                    .kind(LockKind::Shared)
                    .resource("")
            },
            "resource",
        ),
    ];
    for (what, make, argument) in filters {
        case!(
            cases,
            format!("status: {what}"),
            Expect::Invalid(argument),
            |p| { show_rows(p.locks.status(&make()).await) }
        );
    }

    // Client settings, checked when the client is built.
    for (what, retention) in [
        ("zero", Duration::ZERO),
        ("999 ms", ms(999)),
        ("past i32::MAX seconds", secs(i32::MAX as u64 + 1)),
        ("Duration::MAX", Duration::MAX),
    ] {
        case!(
            cases,
            format!("build: retention {what}"),
            Expect::Invalid("retention"),
            |p| {
                show_unit(
                    LockClient::builder(p.locks.collection().clone())
                        .retention(retention)
                        .build()
                        .map(drop),
                )
            }
        );
    }
    for (what, limit) in [("zero", Duration::ZERO), ("Duration::MAX", Duration::MAX)] {
        case!(
            cases,
            format!("build: command timeout {what}"),
            Expect::Invalid("command_timeout"),
            |p| {
                show_unit(
                    LockClient::builder(p.locks.collection().clone())
                        .command_timeout(limit)
                        .build()
                        .map(drop),
                )
            }
        );
    }
    case!(
        cases,
        "build: clock uncertainty Duration::MAX",
        Expect::Invalid("clock_uncertainty"),
        |p| {
            show_unit(
                LockClient::builder(p.locks.collection().clone())
                    .clock_uncertainty(Duration::MAX)
                    .build()
                    .map(drop),
            )
        }
    );

    // The handles: every acquiring method with every bad setting, and zero permits.
    for method in HANDLE_METHODS {
        for bad in BAD_SETTINGS {
            case!(
                cases,
                format!("{method}: {bad:?}"),
                Expect::Invalid(bad.argument()),
                |p| { call_handle(&p.locks, method, bad, 2).await }
            );
        }
        if method.starts_with("semaphore") {
            case!(
                cases,
                format!("{method}: zero permits"),
                Expect::Invalid("permits"),
                |p| {
                    let locks = &p.locks;
                    let semaphore = locks.semaphore("handle", 0);
                    assert_eq!(semaphore.permits(), 0);
                    match method {
                        "semaphore.acquire" => show_guard(semaphore.acquire().await).await,
                        "semaphore.try_acquire" => {
                            show_maybe_guard(semaphore.try_acquire().await).await
                        }
                        "semaphore.acquire_timeout" => {
                            show_maybe_guard(semaphore.acquire_timeout(secs(1)).await).await
                        }
                        "semaphore.run" => semaphore
                            .run(async |_| Ok::<_, mongolock::Error>(7))
                            .await
                            .map(|n| n.to_string()),
                        "semaphore.try_run" => semaphore
                            .try_run(async |_| Ok::<_, mongolock::Error>(7))
                            .await
                            .map(|n| format!("{n:?}")),
                        _ => semaphore
                            .run_timeout(secs(1), async |_| Ok::<_, mongolock::Error>(7))
                            .await
                            .map(|n| format!("{n:?}")),
                    }
                }
            );
        }
    }
    // A timeout too large for the clock: an error for the bad TTL, not an overflow.
    case!(
        cases,
        "mutex.acquire_timeout: Duration::MAX with a zero ttl",
        Expect::Invalid("ttl"),
        |p| {
            show_maybe_guard(
                p.locks
                    .mutex("r")
                    .ttl(Duration::ZERO)
                    .acquire_timeout(Duration::MAX)
                    .await,
            )
            .await
        }
    );
    case!(
        cases,
        "rwlock.read_timeout: Duration::MAX with an empty resource",
        Expect::Invalid("resource"),
        |p| { show_maybe_guard(p.locks.rwlock("").read_timeout(Duration::MAX).await).await }
    );
    case!(
        cases,
        "rwlock.write_timeout: Duration::MAX with an empty lock id",
        Expect::Invalid("lock_id"),
        |p| {
            show_maybe_guard(
                p.locks
                    .rwlock("r")
                    .lock_id("")
                    .write_timeout(Duration::MAX)
                    .await,
            )
            .await
        }
    );
    case!(
        cases,
        "semaphore.acquire_timeout: Duration::MAX with zero permits",
        Expect::Invalid("permits"),
        |p| {
            show_maybe_guard(
                p.locks
                    .semaphore("r", 0)
                    .acquire_timeout(Duration::MAX)
                    .await,
            )
            .await
        }
    );

    // Legal but odd: the calls work and change nothing.
    state_cases(&mut cases);
    cases
}

/// Cases that need a lock held first (set up before the snapshot): contention, a lock id
/// used twice, caps that differ, withdrawn attempts, released grants, lost leases, and ids
/// that look like operators, paths or contain NUL.
fn state_cases(cases: &mut Vec<Case>) {
    let d = LockDetails::default;
    case!(
        cases,
        "xlock: held by another lock id",
        Expect::AlreadyLocked,
        |p| {
            let _held = p.locks.xlock("r", "holder", d()).await?;
            p.mark().await;
            show_grant(p.locks.xlock("r", "other", d()).await)
        }
    );
    case!(
        cases,
        "slock: held exclusively by another",
        Expect::AlreadyLocked,
        |p| {
            let _held = p.locks.xlock("r", "holder", d()).await?;
            p.mark().await;
            show_grant(p.locks.slock("r", "other", d(), None).await)
        }
    );
    case!(
        cases,
        "xlock: the lock id holds it shared",
        Expect::HeldWithOtherKind,
        |p| {
            let _held = p.locks.slock("r", "holder", d(), None).await?;
            p.mark().await;
            show_grant(p.locks.xlock("r", "holder", d()).await)
        }
    );
    case!(
        cases,
        "slock: the lock id holds it exclusively",
        Expect::HeldWithOtherKind,
        |p| {
            let _held = p.locks.xlock("r", "holder", d()).await?;
            p.mark().await;
            show_grant(p.locks.slock("r", "holder", d(), Some(4)).await)
        }
    );
    case!(
        cases,
        "slock: another cap than the stored one",
        Expect::CapMismatch,
        |p| {
            let _held = p.locks.slock("r", "holder", d(), Some(2)).await?;
            p.mark().await;
            show_grant(p.locks.slock("r", "other", d(), Some(3)).await)
        }
    );
    case!(
        cases,
        "slock: no cap where one is stored",
        Expect::CapMismatch,
        |p| {
            let _held = p.locks.slock("r", "holder", d(), Some(2)).await?;
            p.mark().await;
            show_grant(p.locks.slock("r", "other", d(), None).await)
        }
    );
    case!(
        cases,
        "semaphore.try_acquire: other permits than stored",
        Expect::CapMismatch,
        |p| {
            let _held = p.locks.slock("r", "holder", d(), Some(2)).await?;
            p.mark().await;
            show_maybe_guard(p.locks.semaphore("r", 5).try_acquire().await).await
        }
    );
    case!(
        cases,
        "semaphore.acquire: other permits than stored",
        Expect::CapMismatch,
        |p| {
            let _held = p.locks.slock("r", "holder", d(), Some(2)).await?;
            p.mark().await;
            show_guard(p.locks.semaphore("r", 1).acquire().await).await
        }
    );
    case!(
        cases,
        "rwlock.try_read: a semaphore's cap is stored",
        Expect::CapMismatch,
        |p| {
            let _held = p.locks.slock("r", "holder", d(), Some(2)).await?;
            p.mark().await;
            show_maybe_guard(p.locks.rwlock("r").try_read().await).await
        }
    );
    case!(
        cases,
        "mutex.try_acquire: a lock id that holds it already, without TTL: not resumable",
        Expect::Invalid("ttl"),
        |p| {
            let _held = p.locks.xlock("r", "holder", d()).await?;
            p.mark().await;
            show_maybe_guard(p.locks.mutex("r").lock_id("holder").try_acquire().await).await
        }
    );
    case!(
        cases,
        "mutex.acquire_timeout: Duration::MAX, a lock id that holds it already, without TTL: not resumable",
        Expect::Invalid("ttl"),
        |p| {
            let _held = p.locks.xlock("r", "holder", d()).await?;
            p.mark().await;
            let mutex = p.locks.mutex("r").lock_id("holder");
            show_maybe_guard(mutex.acquire_timeout(Duration::MAX).await).await
        }
    );
    case!(
        cases,
        "rwlock.write_timeout: ttl MAX_TTL (legal), a lock id that holds it already, without TTL: not resumable",
        Expect::Invalid("ttl"),
        |p| {
            let _held = p.locks.xlock("r", "holder", d()).await?;
            p.mark().await;
            let rwlock = p.locks.rwlock("r").ttl(MAX_TTL).lock_id("holder");
            show_maybe_guard(rwlock.write_timeout(secs(1)).await).await
        }
    );
    case!(
        cases,
        "rwlock.write_timeout: a lock id that holds it already (announces nothing), without TTL: not resumable",
        Expect::Invalid("ttl"),
        |p| {
            let _held = p.locks.xlock("r", "holder", d()).await?;
            p.mark().await;
            let rwlock = p.locks.rwlock("r").lock_id("holder");
            show_maybe_guard(rwlock.write_timeout(secs(1)).await).await
        }
    );
    case!(
        cases,
        "rwlock.write: a lock id that holds it shared (announces nothing)",
        Expect::HeldWithOtherKind,
        |p| {
            let _held = p.locks.slock("r", "holder", d(), None).await?;
            p.mark().await;
            show_guard(p.locks.rwlock("r").lock_id("holder").write().await).await
        }
    );
    case!(
        cases,
        "rwlock.read: a lock id that holds it exclusively",
        Expect::HeldWithOtherKind,
        |p| {
            let _held = p.locks.xlock("r", "holder", d()).await?;
            p.mark().await;
            show_guard(p.locks.rwlock("r").lock_id("holder").read().await).await
        }
    );
    case!(
        cases,
        "mutex.acquire_timeout: zero timeout, held",
        Expect::Value("None"),
        |p| {
            let _held = p.locks.xlock("r", "holder", d()).await?;
            p.mark().await;
            show_maybe_guard(p.locks.mutex("r").acquire_timeout(Duration::ZERO).await).await
        }
    );
    case!(
        cases,
        "semaphore.try_acquire: every permit taken",
        Expect::Value("None"),
        |p| {
            let _held = p.locks.slock("r", "holder", d(), Some(1)).await?;
            p.mark().await;
            show_maybe_guard(p.locks.semaphore("r", 1).try_acquire().await).await
        }
    );
    case!(
        cases,
        "acquire: a withdrawn attempt sent again",
        Expect::Value("Withdrawn"),
        |p| {
            let request = AcquireRequest::exclusive("r", "id", d());
            p.locks.release_attempt(&request).await?;
            p.mark().await;
            show_attempt(p.locks.acquire(&request).await)
        }
    );
    case!(
        cases,
        "release: a grant released twice",
        Expect::Value("false"),
        |p| {
            let grant = p.locks.xlock("r", "id", d()).await?;
            p.locks.release(&grant).await?;
            p.mark().await;
            show_bool(p.locks.release(&grant).await)
        }
    );
    case!(
        cases,
        "release: a guard's grant after the guard released it",
        Expect::Value("false"),
        |p| {
            let guard = p.locks.mutex("r").acquire().await?;
            let grant = guard.grant().clone();
            guard.release().await?;
            p.mark().await;
            show_bool(p.locks.release(&grant).await)
        }
    );
    case!(
        cases,
        "release: a grant made in another collection",
        Expect::Value("false"),
        |p| {
            let other =
                LockClient::new(p.db.collection(&format!("{}_elsewhere", p.collection.name())));
            let grant = other.xlock("r", "id", d()).await?;
            let _held = p.locks.xlock("r", "id", d()).await?;
            p.mark().await;
            show_bool(p.locks.release(&grant).await)
        }
    );
    case!(
        cases,
        "LockGuard::release: after the lease was force-released",
        Expect::LeaseLost,
        |p| {
            let guard = p
                .locks
                .mutex("r")
                .ttl(secs(5))
                .extend_every(ms(50))
                .acquire()
                .await?;
            assert_eq!(p.locks.force_release("r").await?, 1);
            let _reason = guard.lost().await;
            assert!(guard.is_lost());
            assert_eq!(guard.time_left(), Duration::ZERO);
            p.mark().await;
            guard.release().await.map(|()| "released".to_owned())
        }
    );
    case!(
        cases,
        "unlock: a lock id that holds nothing",
        Expect::Value("0"),
        |p| {
            let _held = p.locks.xlock("r", "holder", d()).await?;
            p.mark().await;
            show_count(p.locks.unlock("nobody").await)
        }
    );
    case!(
        cases,
        "renew: a lock id that holds nothing",
        Expect::Value("0"),
        |p| {
            let _held = p.locks.xlock("r", "holder", d()).await?;
            p.mark().await;
            show_count(p.locks.renew("nobody", secs(30)).await)
        }
    );
    case!(
        cases,
        "force_release: a resource that does not exist",
        Expect::Value("0"),
        |p| { show_count(p.locks.force_release("missing").await) }
    );
    case!(
        cases,
        "purge: nothing expired",
        Expect::Value("0 []"),
        |p| {
            let _held = p.locks.xlock("r", "holder", d().ttl(secs(3600))).await?;
            p.mark().await;
            show_purged(p.locks.purge().await)
        }
    );
    case!(
        cases,
        "purge_abandoned_groups: nothing expired",
        Expect::Value("0 []"),
        |p| {
            let _held = p.locks.xlock("r", "holder", d().ttl(secs(3600))).await?;
            p.mark().await;
            show_purged(p.locks.purge_abandoned_groups().await)
        }
    );
    case!(
        cases,
        "status: created_after later than created_before",
        Expect::Value("0 rows"),
        |p| {
            let _held = p.locks.xlock("r", "holder", d()).await?;
            p.mark().await;
            let filter = Filter::default()
                .created_after(DateTime::now())
                .created_before(SystemTime::UNIX_EPOCH);
            show_rows(p.locks.status(&filter).await)
        }
    );
    case!(
        cases,
        "status: times out of the usual range",
        Expect::Value("0 rows"),
        |p| {
            let _held = p.locks.xlock("r", "holder", d()).await?;
            p.mark().await;
            let filter = Filter::default()
                .created_before(SystemTime::UNIX_EPOCH - secs(1 << 40))
                .created_after(DateTime::MAX);
            show_rows(p.locks.status(&filter).await)
        }
    );
    case!(
        cases,
        "status: an empty owner",
        Expect::Value("0 rows"),
        |p| {
            let _held = p.locks.xlock("r", "holder", d().owner("me")).await?;
            p.mark().await;
            show_rows(p.locks.status(&Filter::default().owner("")).await)
        }
    );
    case!(
        cases,
        "status: zero TTL bounds",
        Expect::Value("1 rows"),
        |p| {
            let _held = p.locks.xlock("r", "holder", d().ttl(secs(3600))).await?;
            p.mark().await;
            let below = p
                .locks
                .status(&Filter::default().ttl_below(Duration::ZERO))
                .await?;
            assert!(below.is_empty(), "nothing has less than zero left");
            show_rows(
                p.locks
                    .status(&Filter::default().ttl_at_least(Duration::ZERO))
                    .await,
            )
        }
    );
    case!(
        cases,
        "status: an owner longer than any stored one",
        Expect::Invalid("owner"),
        |p| {
            let _held = p.locks.xlock("r", "holder", d().owner("me")).await?;
            p.mark().await;
            show_rows(
                p.locks
                    .status(&Filter::default().owner("o".repeat(20 << 20)))
                    .await,
            )
        }
    );
    case!(
        cases,
        "status: created_before far past the BSON date range",
        Expect::Value("1 rows"),
        |p| {
            let _held = p.locks.xlock("r", "holder", d()).await?;
            p.mark().await;
            let far = SystemTime::UNIX_EPOCH + secs(1 << 60);
            show_rows(p.locks.status(&Filter::default().created_before(far)).await)
        }
    );
    for call in ["xlock", "status", "unlock", "create_indexes"] {
        case!(
            cases,
            format!("{call}: a collection with an empty name"),
            Expect::Database(Some(73)),
            |p| {
                let nameless = LockClient::new(p.db.collection(""));
                call_client(&nameless, call).await
            }
        );
    }
    case!(
        cases,
        "xlock: unacknowledged writes (w: 0), held",
        Expect::AlreadyLocked,
        |p| {
            let _held = p.locks.xlock("r", "holder", d()).await?;
            p.mark().await;
            let w0 = mongodb::options::WriteConcern::nodes(0);
            let unsafe_locks = LockClient::builder(p.locks.collection().clone())
                .unsafe_write_concern(w0)
                .build()?;
            show_grant(unsafe_locks.xlock("r", "other", d()).await)
        }
    );
    case!(
        cases,
        "xlock: a write concern tag no server has, held",
        Expect::Database(Some(79)),
        |p| {
            let _held = p.locks.xlock("r", "holder", d()).await?;
            p.mark().await;
            let tag = mongodb::options::Acknowledgment::Custom("no-such-tag".into());
            let wc = mongodb::options::WriteConcern::builder().w(tag).build();
            let unsafe_locks = LockClient::builder(p.locks.collection().clone())
                .unsafe_write_concern(wc)
                .build()?;
            show_grant(unsafe_locks.xlock("r", "other", d()).await)
        }
    );
    case!(
        cases,
        "shutdown and leases: nothing pending",
        Expect::Value("0"),
        |p| {
            p.locks.shutdown().await;
            Ok(p.locks.leases().to_string())
        }
    );

    // Ids that look like operators, field paths, or hold NUL: plain data.
    for (what, resource, lock_id) in [
        ("operator-like ids", "$$NOW", "$exclusive"),
        ("dotted ids", "a.b.c", "exclusive.lockId"),
        ("ids with NUL", "a\0b", "\0"),
        ("ids that look like documents", "{\"$gt\": \"\"}", "{}"),
    ] {
        let (r, l) = (resource.to_owned(), lock_id.to_owned());
        case!(
            cases,
            format!("xlock: {what}, held by another"),
            Expect::AlreadyLocked,
            |p| {
                let _held = p.locks.xlock(&r, &l, d()).await?;
                p.mark().await;
                show_grant(p.locks.xlock(&r, "other", d()).await)
            }
        );
        let (r, l) = (resource.to_owned(), lock_id.to_owned());
        case!(
            cases,
            format!("xlock: {what}, held by the same lock id"),
            Expect::Value("grant on held"),
            |p| {
                let _held = p.locks.xlock(&r, &l, d()).await?;
                p.mark().await;
                let again = p.locks.xlock(&r, &l, d()).await?;
                assert!(!again.is_new(), "the existing grant");
                Ok("grant on held".to_owned())
            }
        );
        let (r, l) = (resource.to_owned(), lock_id.to_owned());
        case!(
            cases,
            format!("status: {what}"),
            Expect::Value("1 rows"),
            |p| {
                let _held = p.locks.xlock(&r, &l, d()).await?;
                let _other = p.locks.xlock("plain", "plain", d()).await?;
                p.mark().await;
                show_rows(
                    p.locks
                        .status(&Filter::default().resource(&r).lock_id(&l))
                        .await,
                )
            }
        );
        let (r, l) = (resource.to_owned(), lock_id.to_owned());
        case!(
            cases,
            format!("unlock, renew, force_release: {what}, unknown"),
            Expect::Value("0 0 0"),
            |p| {
                let _held = p.locks.xlock("plain", "plain", d()).await?;
                p.mark().await;
                let unlocked = p.locks.unlock(&l).await?;
                let renewed = p.locks.renew(&l, secs(5)).await?;
                let released = p.locks.force_release(&r).await?;
                Ok(format!("{unlocked} {renewed} {released}"))
            }
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_entry_point_refuses_malformed_arguments_without_a_write_or_a_panic() {
    let env = common::env("bad_table_args").await;
    let cases = argument_cases();
    let count = cases.len();
    let tally = run_table(&env.db, "args", cases).await;
    report("malformed arguments", count, &tally);
}

// ---------------------------------------------------------------------------------------
// Documents of other shapes in the lock collection.

/// A document that is not (quite) a lock document, stored before a case runs.
struct Foreign {
    name: &'static str,
    /// The document's `_id` as errors print it.
    id: &'static str,
    document: Document,
    /// Whether the document is a lock document of this crate after all (odd but valid):
    /// then the calls that would change a lock are left out, since changing it is their job.
    lock_shaped: bool,
    /// Whether `status` by lock id `a` looks at it (an entry of it has that `lockId`).
    found_by_lock_id: bool,
}

/// A valid entry held by lock id `a` without TTL.
fn entry() -> Document {
    let now = DateTime::now();
    doc! {
        "lockId": "a", "nonce": bson::oid::ObjectId::new(), "owner": "o", "host": "h",
        "keeper": Bson::Null, "token": 7_i64, "createdAt": now, "renewedAt": now,
        "expiresAt": Bson::Null, "ttlMs": Bson::Null,
    }
}

/// `entry()` with `field` set to `value`.
fn entry_with(field: &str, value: impl Into<Bson>) -> Document {
    let mut e = entry();
    e.insert(field, value.into());
    e
}

/// `entry()` without `field`.
fn entry_without(fields: &[&str]) -> Document {
    let mut e = entry();
    for field in fields {
        e.remove(*field);
    }
    e
}

fn foreign_documents() -> Vec<Foreign> {
    let past = DateTime::from_millis(DateTime::now().timestamp_millis() - 60_000);
    vec![
        Foreign {
            id: "\"f\"",
            name: "another library's shape (square/mongo-lock)",
            document: doc! {
                "_id": "f", "resource": "f",
                "exclusive": { "lockId": "a", "acquired": true },
                "shared": { "count": 0, "locks": [] },
            },
            lock_shaped: false,
            found_by_lock_id: true,
        },
        Foreign {
            id: "\"f\"",
            name: "exclusive is a string",
            document: doc! { "_id": "f", "fence": 1_i64, "exclusive": "a", "shared": [] },
            lock_shaped: false,
            found_by_lock_id: false,
        },
        Foreign {
            id: "\"f\"",
            name: "shared is an object",
            document: doc! { "_id": "f", "fence": 1_i64, "exclusive": Bson::Null, "shared": entry() },
            lock_shaped: false,
            found_by_lock_id: true,
        },
        Foreign {
            id: "\"f\"",
            name: "expiresAt is a string",
            document: doc! { "_id": "f", "fence": 7_i64, "exclusive": entry_with("expiresAt", "tomorrow"), "shared": [] },
            lock_shaped: false,
            found_by_lock_id: true,
        },
        Foreign {
            id: "\"f\"",
            name: "token is a double",
            document: doc! { "_id": "f", "fence": 7_i64, "exclusive": entry_with("token", 1.5), "shared": [] },
            lock_shaped: false,
            found_by_lock_id: true,
        },
        Foreign {
            id: "\"f\"",
            name: "token is NaN",
            document: doc! { "_id": "f", "fence": 7_i64, "shared": [entry_with("token", f64::NAN)] },
            lock_shaped: false,
            found_by_lock_id: true,
        },
        Foreign {
            id: "\"f\"",
            name: "token is a string",
            document: doc! { "_id": "f", "exclusive": entry_with("token", "7") },
            lock_shaped: false,
            found_by_lock_id: true,
        },
        Foreign {
            id: "\"f\"",
            name: "lockId is a number",
            document: doc! { "_id": "f", "fence": 7_i64, "exclusive": entry_with("lockId", 5_i32), "shared": [] },
            lock_shaped: false,
            found_by_lock_id: false,
        },
        Foreign {
            id: "\"f\"",
            name: "an entry without its dates and token",
            document: doc! { "_id": "f", "exclusive": entry_without(&["createdAt", "renewedAt", "token"]) },
            lock_shaped: false,
            found_by_lock_id: true,
        },
        Foreign {
            id: "\"f\"",
            name: "host is a number",
            document: doc! { "_id": "f", "shared": [entry(), entry_with("host", 3_i32)] },
            lock_shaped: false,
            found_by_lock_id: true,
        },
        Foreign {
            id: "\"f\"",
            name: "exclusive is an empty document",
            document: doc! { "_id": "f", "exclusive": {} },
            lock_shaped: false,
            found_by_lock_id: false,
        },
        Foreign {
            id: "\"f\"",
            name: "fence is a string",
            document: doc! { "_id": "f", "fence": "seven", "exclusive": entry(), "shared": [] },
            lock_shaped: false,
            found_by_lock_id: true,
        },
        Foreign {
            id: "\"f\"",
            name: "cap is a string",
            document: doc! { "_id": "f", "fence": 7_i64, "shared": [entry()], "cap": "3" },
            lock_shaped: false,
            found_by_lock_id: true,
        },
        Foreign {
            id: "\"f\"",
            name: "a waiter without until",
            document: doc! { "_id": "f", "fence": 7_i64, "exclusive": entry(), "queue": [{ "lockId": "w" }] },
            lock_shaped: false,
            found_by_lock_id: true,
        },
        Foreign {
            id: "\"f\"",
            name: "idleSince is a string",
            document: doc! { "_id": "f", "fence": 7_i64, "exclusive": entry(), "idleSince": "never" },
            lock_shaped: false,
            found_by_lock_id: true,
        },
        Foreign {
            id: "\"f\"",
            name: "shared entries that are not documents",
            document: doc! { "_id": "f", "fence": 7_i64, "shared": [1_i32, "a", Bson::Null] },
            lock_shaped: false,
            found_by_lock_id: false,
        },
        Foreign {
            id: "\"f\"",
            name: "a huge shared array of numbers",
            document: doc! { "_id": "f", "fence": 7_i64, "shared": (0..10_000).map(Bson::Int32).collect::<Vec<_>>() },
            lock_shaped: false,
            found_by_lock_id: false,
        },
        Foreign {
            id: "\"f\"",
            name: "a huge array of tombstones that are strings",
            document: doc! { "_id": "f", "fence": 7_i64, "exclusive": entry(), "released": (0..10_000).map(|i| Bson::String(i.to_string())).collect::<Vec<_>>() },
            lock_shaped: false,
            found_by_lock_id: true,
        },
        Foreign {
            id: "\"f\"",
            name: "an expired entry whose token is a double",
            document: doc! { "_id": "f", "fence": 7_i64, "exclusive": { "lockId": "a", "token": 2.5, "createdAt": past, "renewedAt": past, "expiresAt": past } },
            lock_shaped: false,
            found_by_lock_id: true,
        },
        Foreign {
            id: "\"f\"",
            name: "a lock document with extra fields (valid)",
            document: doc! { "_id": "f", "mongolock": 1, "fence": 7_i64, "exclusive": entry_with("note", vec![1_i32, 2_i32]), "shared": [], "released": [], "cap": Bson::Null, "queue": [], "idleSince": Bson::Null, "note": { "by": "hand" } },
            lock_shaped: true,
            found_by_lock_id: true,
        },
        Foreign {
            id: "\"f\"",
            name: "a lock document with a negative token (valid)",
            document: doc! { "_id": "f", "mongolock": 1, "fence": -5_i64, "exclusive": entry_with("token", -5_i64), "shared": [], "released": [], "cap": Bson::Null, "queue": [], "idleSince": Bson::Null },
            lock_shaped: true,
            found_by_lock_id: true,
        },
        Foreign {
            id: "\"f\"",
            name: "a lock document without the mark (another application's)",
            document: doc! { "_id": "f", "fence": 7_i64, "exclusive": entry(), "shared": [], "released": [], "cap": Bson::Null, "queue": [], "idleSince": Bson::Null },
            lock_shaped: false,
            found_by_lock_id: true,
        },
        Foreign {
            id: "\"f\"",
            // Written by someone else (an acquire seeds `{_id, mongolock: 1}`): not ours.
            name: "a document with nothing but an _id",
            document: doc! { "_id": "f" },
            lock_shaped: false,
            found_by_lock_id: false,
        },
        Foreign {
            id: "\"f\"",
            name: "the mark of another version",
            document: doc! { "_id": "f", "mongolock": 2, "fence": 7_i64, "exclusive": entry(), "shared": [], "released": [], "cap": Bson::Null, "queue": [], "idleSince": Bson::Null },
            lock_shaped: false,
            found_by_lock_id: true,
        },
        Foreign {
            id: "42",
            name: "an _id that is a number",
            document: doc! { "_id": 42_i32, "resource": "f", "exclusive": entry(), "shared": [] },
            lock_shaped: false,
            found_by_lock_id: true,
        },
        Foreign {
            id: "{\"name\":\"f\"}",
            name: "an _id that is a document, with an expired lock",
            document: doc! { "_id": { "name": "f" }, "exclusive": { "lockId": "a", "token": 1_i64, "createdAt": past, "renewedAt": past, "expiresAt": past } },
            lock_shaped: false,
            found_by_lock_id: true,
        },
    ]
}

/// The calls a foreign document is put through: name, whether it works on the resource `f`
/// (left out for documents stored under another `_id`, where it would simply take the lock),
/// and whether it would change a valid lock (left out for lock-shaped documents).
const FOREIGN_CALLS: [(&str, bool, bool); 24] = [
    ("xlock", true, false),
    ("slock", true, false),
    ("slock with a cap", true, false),
    ("acquire", true, false),
    ("release_attempt", true, true),
    ("force_release", true, true),
    ("unlock", false, true),
    ("renew", false, true),
    ("status", false, false),
    ("status by resource", false, false),
    ("status by lock id", false, false),
    ("purge", false, false),
    ("purge_abandoned_groups", false, false),
    ("mutex.try_acquire", true, false),
    // A waiting acquire joins the line, and leaves it when its time is up.
    ("mutex.acquire_timeout", true, true),
    ("mutex.acquire", true, true),
    ("rwlock.try_read", true, false),
    ("rwlock.try_write", true, false),
    ("rwlock.write", true, true),
    ("semaphore.try_acquire", true, false),
    ("semaphore.acquire", true, true),
    ("create_indexes", false, false),
    ("release of a grant made before", true, true),
    (
        "LockGuard::release, the document replaced while held",
        true,
        true,
    ),
];

async fn call_on_foreign(p: &Probe, call: &str) -> Result<String> {
    let (locks, d) = (&p.locks, LockDetails::default);
    match call {
        "xlock" => show_grant(locks.xlock("f", "z", d()).await),
        "slock" => show_grant(locks.slock("f", "z", d(), None).await),
        "slock with a cap" => show_grant(locks.slock("f", "z", d(), Some(3)).await),
        "acquire" => show_attempt(
            locks
                .acquire(&AcquireRequest::exclusive("f", "z", d()))
                .await,
        ),
        "release_attempt" => show_bool(
            locks
                .release_attempt(&AcquireRequest::exclusive("f", "z", d()))
                .await,
        ),
        "force_release" => show_count(locks.force_release("f").await),
        "unlock" => show_count(locks.unlock("a").await),
        "renew" => show_count(locks.renew("a", secs(5)).await),
        "status" => show_rows(locks.status(&Filter::default()).await),
        "status by resource" => show_rows(locks.status(&Filter::default().resource("f")).await),
        "status by lock id" => show_rows(locks.status(&Filter::default().lock_id("a")).await),
        "purge" => show_purged(locks.purge().await),
        "purge_abandoned_groups" => show_purged(locks.purge_abandoned_groups().await),
        "mutex.try_acquire" => show_maybe_guard(locks.mutex("f").try_acquire().await).await,
        "mutex.acquire_timeout" => {
            show_maybe_guard(locks.mutex("f").acquire_timeout(ms(100)).await).await
        }
        "mutex.acquire" => show_guard(locks.mutex("f").acquire().await).await,
        "rwlock.try_read" => show_maybe_guard(locks.rwlock("f").try_read().await).await,
        "rwlock.try_write" => show_maybe_guard(locks.rwlock("f").try_write().await).await,
        "rwlock.write" => show_guard(locks.rwlock("f").write().await).await,
        "semaphore.try_acquire" => {
            show_maybe_guard(locks.semaphore("f", 3).try_acquire().await).await
        }
        "semaphore.acquire" => show_guard(locks.semaphore("f", 3).acquire().await).await,
        "release of a grant made before" => {
            // A grant of `f` made in another collection: same resource, lock id and kind.
            let other =
                LockClient::new(p.db.collection(&format!("{}_elsewhere", p.collection.name())));
            let grant = other.xlock("f", "a", d()).await?;
            show_bool(locks.release(&grant).await)
        }
        "LockGuard::release, the document replaced while held" => {
            // Take the foreign document out, hold a lease on `f`, put the foreign document
            // back in its place: the lease is lost, and nothing touches the document.
            let filter = doc! { "_id": "f" };
            let foreign = p.collection.find_one(filter.clone()).await.expect("find");
            let foreign = foreign.expect("the foreign document");
            p.collection
                .delete_one(filter.clone())
                .await
                .expect("delete");
            let mutex = locks.mutex("f").ttl(secs(5)).extend_every(ms(50));
            let guard = mutex.acquire().await?;
            p.collection
                .replace_one(filter, foreign)
                .await
                .expect("replace");
            let _reason = guard.lost().await;
            p.mark().await;
            guard.release().await.map(|()| "released".to_owned())
        }
        "create_indexes" => {
            // Idempotent: the indexes exist before the mark, so the call changes nothing.
            locks.create_indexes().await?;
            p.mark().await;
            show_unit(locks.create_indexes().await)
        }
        other => unreachable!("no call {other}"),
    }
}

/// What a call on a foreign document must come back with.
fn foreign_expect(foreign: &Foreign, call: &str) -> Expect {
    let unexpected = Expect::Unexpected("\"f\"");
    let acquiring = |lock_shaped: bool, refused: Expect| {
        if lock_shaped {
            refused
        } else {
            unexpected.clone()
        }
    };
    match call {
        // A lock document is listed; any other document the query looks at fails the call.
        _ if call.starts_with("status") && foreign.lock_shaped => Expect::Value("1 rows"),
        "status" => Expect::Unexpected(foreign.id),
        "status by resource" if foreign.id != "\"f\"" => Expect::Value("0 rows"),
        "status by resource" => unexpected,
        "status by lock id" if !foreign.found_by_lock_id => Expect::Value("0 rows"),
        "status by lock id" => Expect::Unexpected(foreign.id),
        "unlock" | "renew" => Expect::Value("0"),
        "purge" | "purge_abandoned_groups" => Expect::Value("0 []"),
        "create_indexes" => Expect::Value("()"),
        "acquire" => {
            if foreign.lock_shaped {
                Expect::Value("Contended")
            } else {
                unexpected
            }
        }
        "xlock" | "slock" | "slock with a cap" => {
            acquiring(foreign.lock_shaped, Expect::AlreadyLocked)
        }
        "mutex.try_acquire"
        | "mutex.acquire_timeout"
        | "rwlock.try_read"
        | "rwlock.try_write"
        | "semaphore.try_acquire" => acquiring(foreign.lock_shaped, Expect::Value("None")),
        // Withdrawing an attempt or releasing a grant on a document of another shape
        // leaves it alone and reports that nothing was removed.
        "release_attempt" | "release of a grant made before" => Expect::Value("false"),
        // The keeper no longer finds the lease: lost, and the release says so.
        "LockGuard::release, the document replaced while held" => Expect::LeaseLost,
        _ => unexpected,
    }
}

fn foreign_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for foreign in foreign_documents() {
        let at_resource = foreign.document.get("_id") == Some(&Bson::String("f".into()));
        for (call, on_resource, changes_a_lock) in FOREIGN_CALLS {
            if (on_resource && !at_resource) || (changes_a_lock && foreign.lock_shaped) {
                continue;
            }
            let expect = foreign_expect(&foreign, call);
            let document = foreign.document.clone();
            case!(cases, format!("{} / {call}", foreign.name), expect, |p| {
                p.collection.insert_one(document).await.expect("insert");
                p.mark().await;
                call_on_foreign(&p, call).await
            });
        }
    }
    cases
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_of_other_shapes_are_typed_errors_and_stay_byte_for_byte() {
    let env = common::env("bad_table_foreign").await;
    let cases = foreign_cases();
    let count = cases.len();
    let tally = run_table(&env.db, "foreign", cases).await;
    report("foreign documents", count, &tally);
}
