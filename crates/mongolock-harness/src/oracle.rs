//! The server-side oracle: what the server committed, read from a change stream, checked in
//! the server's own time.
//!
//! The other checks ([`crate::check`]) read what clients believed. This one reads what the
//! server did: every write to the lock collection, in commit order, with the document as it
//! was right after the write (a change stream with `fullDocument: "required"`, so the
//! collection records post-images). Replaying that log gives every grant (an entry whose
//! nonce and token were not in the document before: an attempt repeated after its first
//! grant expired unseen is granted anew, with a new token), every renewal and every end,
//! with the server's `$$NOW` of each (`createdAt`, `renewedAt`), and checks:
//!
//! - **server exclusion** (Jepsen's C4): an exclusive grant is committed only when every
//!   other entry on the resource has expired by the grant's own server time, and a shared
//!   grant only when no exclusive entry is live; an entry with a lock-delay (`delayMs`) is
//!   in force until its `expiresAt`, the end of the delay, so this is also the server's side
//!   of (9) for delays the entry still carries;
//! - **server fencing**: every grant's token is above every token committed before on the
//!   resource, across releases, expiry, purges, force-releases and deleted documents;
//! - **server caps**: never more live shared entries than the resource's permits;
//! - **no revival**: a renewal never extends an entry whose lease had ended by the
//!   renewal's server time (its `expiresAt` less its lock-delay);
//! - **believed grants were committed**: every token a holder believed it held is one the
//!   server granted on that resource;
//! - **unbelieved grants end**: a grant no holder ever believed in (its reply was lost, or
//!   its client died while acquiring) ends, by withdrawal or by its TTL, within the acquire
//!   timeout plus the workload's TTL (or its own TTL, if longer) plus [`ORPHAN_SLACK`] of
//!   being granted (in server time), and has a TTL at all;
//! - **no orphan outlives its holders**: once the last holder that believed in a grant
//!   (matched by resource, lock id and token) stopped believing — it released or dropped the
//!   guard, noticed the loss, died, or passed its local deadline while paused — the server
//!   keeps the entry no longer than its TTL plus the renewal period (a third of the TTL)
//!   plus [`OUTLIVE_SLACK`]: nobody may renew what nobody believes in. A renewal sent just
//!   before the belief ended may commit after it (the renewal period bounds how long a
//!   keeper's renewal may take, the slack covers the proxy's latency); a grant whose last
//!   holder's client had a `blockConnection` fail point in the TTL before (plus a second) is
//!   excused, since a blocked renewal runs on the server whenever the block ends (counted).
//!   A grant nobody believed in, made by a handle's acquire call the history knows (by its
//!   lock id), is judged from the end of that call: it may end as (S6) allows, but nothing
//!   may renew it later than the renewal period plus the slack after the call returned or
//!   was dropped (a repeated attempt never renews; only a keeper does);
//! - **a release says whether the server held the grant**: a release that returned `Ok` was
//!   not for a grant the server had already removed (force-released, purged, taken over
//!   after expiring) before the release began;
//! - **no attempt granted again after it was let go**: once a holder believed in the grant
//!   of an attempt (its nonce) and let go of it, and the grant's entry was removed while its
//!   lease lived (its release landed), no later grant goes to that attempt: a copy of it
//!   that reaches the server late (after its client timed out, sent it again, was granted
//!   and released) must be refused, or it grants an entry nobody holds, which locks everyone
//!   out for its TTL. Groups on the low-level API are not judged (`xlock` and `unlock` leave
//!   late copies to their caller);
//! - **a let-go lock is usable again in time**: from a holder's let-go (its release call or
//!   the drop of its guard, in server time) until its grant's entry ends, together with any
//!   later grant of the same attempt (a late copy), at most the grant's TTL plus the clients'
//!   command time limit ([`COMMAND_TIMEOUT`]): a release that never lands leaves the entry
//!   to its TTL (a renewal in flight moves it by less than the time limit), nothing more.
//!   How long each let-go lock stayed unusable is reported (median, maximum), so a release
//!   that is slow to land shows long before it breaks the bound.
//! - **no grant inside a minimum hold**: for every exclusive lease whose holder asked for a
//!   minimum hold H (`LockDetails::min_hold`, as the history says: [`MinHolds`]) and let go
//!   of it itself (a release, a dropped guard, `release_attempt`, `unlock`; not killed, not
//!   told of a loss first, its release not refused as lost), and whose let-go the server
//!   committed while the lease lived (the entry marked `letGoAt`, or removed, no earlier than
//!   the let-go call and before the lease's end) with no operator's force-release of the
//!   resource from the grant until then (for a let-go mark, none begun before the let-go
//!   call: one after the mark must leave the hold as it is, also when the server's clock
//!   stepped back past the grant before it): the next grant of the resource (the next greater
//!   token, to any lock id, its own included) was created at or after the lease's
//!   `createdAt` + H, by the server's clock, or after a write committed with a server time
//!   past it, or after the harness's own readings of the server's clock read past it from
//!   the let-go call on (the hold ran out by the server's clock; a step back since reads
//!   earlier times again; a write decides by its `$$NOW`, taken as it starts, and its
//!   change event is stamped as it commits, after a step back in between). Those are
//!   counted apart. Each judged lease is counted, and those let go
//!   of within their hold (the let-go committed before `createdAt` + H) apart: a workload with
//!   minimum holds that judged none of those proves nothing, and the run says so.
//! - **no loss reported while the server keeps the lease** (in a run whose server clock
//!   stepped back): mongod's `$$NOW` follows the system clock, which can step back, while
//!   `operationTime` never goes back; a library that took a step back for a loss, or reset
//!   its bounds on it and then counted a false step forward, would tell a holder its lease
//!   is lost while the server still keeps it. A holder's first report of a loss (its loss
//!   signal or `is_lost()`, a renewal refused as revoked, a release refused as lost) is
//!   judged against its grant's entry (by resource, lock id and token) in the log: it is
//!   false if the entry was surely still there when the report came (removed, if ever, at a
//!   server time the clock first read after the report: nobody took it, no operator removed
//!   it) and surely not expired by the server's clock (the lease's end after the entry's
//!   last write surely made before the report is above the highest the clock read from the
//!   attempt's send to the report by at least [`FALSE_LOSS_MARGIN_MS`], or for a report by
//!   the local deadline by the renewal period, a third of the TTL: a keeper starved past its
//!   deadline on a loaded machine is told with only its margin left). Not judged: a holder
//!   whose client a fault hit (a cut-off may expire the lease), that was paused, whose lease
//!   another incarnation resumed, that a forward step or jump of the clock may have cut
//!   short, or a member of a set (a multi-lock or a low-level group, which is lost with its
//!   weakest member). Each judged report is counted.
//!
//! (S7), (S8), (S10), (S11), (S12) and (S13) compare our instants with the server's clock through the
//! readings of it in the history ([`History::server_ms`]). On a replica set the times they
//! compare may be stamped by two primaries whose clocks are apart: (S7), (S11), (S12) and
//! (S13) count them on one clock by the offsets the history keeps
//! ([`History::server_offsets`], see `crate::replset`, "Server times of two primaries");
//! on one server there are none and nothing changes.
//!
//! (S6) and (S7) judge a lease's end, not its lock-delay: an entry with `delayMs` ends its
//! lease that long before its `expiresAt`.
//!
//! The tap reads the stream itself with `aggregate` and `getMore` on an unfaulted
//! connection, so no driver-side resume can skip events; an error ends the tap, and the run
//! reports the oracle as incomplete instead of passing on a partial log. A marker document
//! written at the end proves the tap has read everything committed before it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bson::{Bson, Document, doc};
use mongodb::Database;
use tokio::task::JoinHandle;

use crate::history::FaultKind;
use crate::history::{
    AcquireCall, History, HolderLog, LetGo, LossKind, Mode, OpEvent, OpKind, ReleaseResult,
};

/// Added to the bound of unbelieved grants, for the time a withdrawal takes to reach the
/// server.
pub const ORPHAN_SLACK: Duration = Duration::from_secs(1);

/// Added to the bound of (S7) (TTL + renewal period): the transit of a renewal sent just
/// before the last holder stopped believing — up to 400 ms of injected proxy latency — plus
/// scheduling delays of a client thread on a loaded two-core machine, and the mapping of our
/// instants to the server's clock (a few ms).
pub const OUTLIVE_SLACK: Duration = Duration::from_secs(1);

/// How much earlier than a release began the server must have removed its grant for a
/// release's `Ok` to be false: the error of the mapping of our instants to the server's
/// clock (a millisecond of rounding each way, and drift), with room to spare.
pub const RELEASE_SLACK: Duration = Duration::from_millis(50);

/// The clients' command time limit: the library's default, which every client of the
/// harness keeps. A release that fails is retried in the background until the TTL and this
/// have passed, and a renewal in flight moves an entry by less than this.
pub const COMMAND_TIMEOUT: Duration = mongolock::DEFAULT_COMMAND_TIMEOUT;

/// The minimum hold each holder asked for, by holder id ([`HolderLog::id`]): what
/// [`crate::history::Recorder::min_hold`] recorded.
pub type MinHolds = HashMap<u64, Duration>;

/// How long after a waiting call begins its first attempt has surely reached the server and
/// taken its place in line, if nothing hit its client: (S9) judges a waiter that stood
/// outside the line only against lock ids that joined it later than this.
pub const JOIN_ALLOWANCE: Duration = Duration::from_secs(1);

/// How much of its lease a holder told of a loss (revoked, or refused as lost) must
/// surely have had left by the server's clock for (S13) to call the report false: the
/// error of the mapping of our instants to the server's clock, with room to spare.
pub const FALSE_LOSS_MARGIN_MS: i64 = 100;

/// The `_id` of the marker document the tap writes last (not a resource of any workload).
const MARKER: &str = "mongolock-harness/oracle-marker";

/// How long one `getMore` waits for events.
const POLL: Duration = Duration::from_millis(200);

/// How long [`Tap::finish`] waits for the marker to come through the stream.
const MARKER_WAIT: Duration = Duration::from_secs(30);

/// One committed write to the lock collection.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerEvent {
    /// The resource (the document's `_id`).
    pub resource: String,
    /// The server clock at the commit (the event's `wallTime`), in ms since the epoch.
    pub at_ms: i64,
    /// The document after the write; `None` when it was deleted.
    pub doc: Option<Document>,
}

/// Reads the lock collection's change stream while a run goes on.
#[derive(Debug)]
pub struct Tap {
    db: Database,
    collection: String,
    stop: Arc<AtomicBool>,
    task: JoinHandle<Result<Vec<ServerEvent>, String>>,
}

impl Tap {
    /// Records post-images on `collection` (`collMod`) and opens its change stream; every
    /// write committed after this returns is seen.
    ///
    /// # Errors
    /// The collection does not exist, or the server refused the stream.
    ///
    /// # Cancel safety
    /// Dropping the future may leave post-images switched on, which changes nothing for
    /// the lock commands; no task is left running.
    pub async fn start(db: &Database, collection: &str) -> mongodb::error::Result<Tap> {
        db.run_command(doc! {
            "collMod": collection,
            "changeStreamPreAndPostImages": {"enabled": true},
        })
        .await?;
        let reply = db
            .run_command(doc! {
                "aggregate": collection,
                "pipeline": [{"$changeStream": {"fullDocument": "required"}}],
                "cursor": {},
            })
            .await?;
        let (id, first) = batch(&reply, "firstBatch").map_err(mongodb::error::Error::custom)?;
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(read(
            db.clone(),
            collection.to_string(),
            id,
            first,
            stop.clone(),
        ));
        Ok(Tap {
            db: db.clone(),
            collection: collection.to_string(),
            stop,
            task,
        })
    }

    /// Writes the marker, reads up to it, and returns every event before it, in commit
    /// order.
    ///
    /// # Errors
    /// The stream failed during the run (the log would be partial), or the marker could
    /// not be written or was not seen within 30 s.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the reading task to end by itself once it sees the
    /// marker (or fails); the marker may be left in the collection.
    pub async fn finish(mut self) -> Result<Vec<ServerEvent>, String> {
        let marked = self
            .db
            .collection::<Document>(&self.collection)
            .insert_one(doc! {"_id": MARKER})
            .await;
        self.stop.store(true, Ordering::SeqCst);
        if let Err(e) = marked {
            self.task.abort();
            return Err(format!("the end marker could not be written: {e}"));
        }
        match tokio::time::timeout(MARKER_WAIT, &mut self.task).await {
            Ok(joined) => joined.map_err(|e| format!("the change-stream reader failed: {e}"))?,
            Err(_) => {
                self.task.abort();
                Err(format!(
                    "the end marker was not seen on the change stream within {MARKER_WAIT:?}"
                ))
            }
        }
    }
}

/// A cursor id and the named batch of a cursor reply.
fn batch(reply: &Document, name: &str) -> Result<(i64, Vec<Document>), String> {
    let cursor = reply
        .get_document("cursor")
        .map_err(|_| format!("no cursor in {reply}"))?;
    let id = cursor.get_i64("id").unwrap_or(0);
    let docs = cursor
        .get_array(name)
        .map_err(|_| format!("no {name} in {reply}"))?
        .iter()
        .filter_map(|b| b.as_document().cloned())
        .collect();
    Ok((id, docs))
}

/// The reading task: events until the marker, once asked to stop.
async fn read(
    db: Database,
    collection: String,
    id: i64,
    first: Vec<Document>,
    stop: Arc<AtomicBool>,
) -> Result<Vec<ServerEvent>, String> {
    let mut events = Vec::new();
    let mut pending = first;
    loop {
        for raw in pending.drain(..) {
            match event(&raw)? {
                Some(e) if e.resource == MARKER => {
                    let _ = db
                        .run_command(doc! {"killCursors": &collection, "cursors": [id]})
                        .await;
                    return Ok(events);
                }
                Some(e) => events.push(e),
                None => {}
            }
        }
        if id == 0 {
            return Err("the change stream's cursor closed".into());
        }
        let reply = db
            .run_command(doc! {
                "getMore": id,
                "collection": &collection,
                "maxTimeMS": POLL.as_millis() as i64,
            })
            .await
            .map_err(|e| {
                format!(
                    "the change stream failed after {} events{}: {e}",
                    events.len(),
                    if stop.load(Ordering::SeqCst) {
                        " (while finishing)"
                    } else {
                        ""
                    }
                )
            })?;
        pending = batch(&reply, "nextBatch")?.1;
    }
}

/// One change event as a [`ServerEvent`]; `None` for events that change no document. The
/// lock collection going away (dropped, renamed, invalidated) is an error: the log would
/// be incomplete.
fn event(raw: &Document) -> Result<Option<ServerEvent>, String> {
    match raw.get_str("operationType").unwrap_or("") {
        "invalidate" | "drop" | "dropDatabase" | "rename" => {
            Err(format!("the lock collection went away: {raw}"))
        }
        _ => document_event(raw),
    }
}

/// One change event as a [`ServerEvent`], at its `wallTime`: an insert, update or replace
/// (its post-image) or a delete; `None` for any other event.
pub(crate) fn document_event(raw: &Document) -> Result<Option<ServerEvent>, String> {
    let op = raw.get_str("operationType").unwrap_or("");
    let at_ms = match raw.get("wallTime") {
        Some(Bson::DateTime(t)) => t.timestamp_millis(),
        _ => return Err(format!("change event without wallTime: {raw}")),
    };
    let key = |doc: &Document| match doc.get("_id") {
        Some(Bson::String(s)) => Ok(s.clone()),
        other => Err(format!("a lock document's _id is not a string: {other:?}")),
    };
    Ok(match op {
        "insert" | "update" | "replace" => {
            let doc = raw
                .get_document("fullDocument")
                .map_err(|_| format!("{op} event without its post-image: {raw}"))?;
            Some(ServerEvent {
                resource: key(doc)?,
                at_ms,
                doc: Some(doc.clone()),
            })
        }
        "delete" => {
            let id = raw
                .get_document("documentKey")
                .map_err(|_| format!("delete event without documentKey: {raw}"))?;
            Some(ServerEvent {
                resource: key(id)?,
                at_ms,
                doc: None,
            })
        }
        _ => None,
    })
}

/// The server-side checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ServerCheck {
    /// A grant committed while another entry was live on the resource.
    Exclusion,
    /// A token not above every earlier one on the resource.
    Fencing,
    /// More live shared entries than permits.
    Caps,
    /// An expired entry renewed.
    Revival,
    /// A holder believed a token the server never granted on its resource.
    Uncommitted,
    /// A grant nobody believed in outlived its bound, or had no TTL.
    Unbelieved,
    /// An entry outlived the last holder that believed in it by more than its TTL plus the
    /// renewal period (plus [`OUTLIVE_SLACK`]): something kept renewing an orphan.
    Orphans,
    /// A release returned `Ok` for a grant the server had removed before it began.
    ReleaseOk,
    /// A grant went to a lock id while a waiter that had joined the resource's line before
    /// it still had its place (a live one, by the server's clock at the grant).
    Order,
    /// An attempt was granted again after a holder let go of its grant and the grant's
    /// entry was removed: a late copy of the attempt granted an entry nobody holds.
    LateCopy,
    /// A let-go lock stayed unusable (its entry, or a later grant of the same attempt) past
    /// the let-go plus the TTL plus the command time limit.
    LetGo,
    /// A grant was created inside the minimum hold of a lease its holder let go of within
    /// it (or a run with minimum holds judged no such lease).
    MinHold,
    /// In a run whose server clock stepped back, a holder was told its lease was lost while
    /// the server still kept the grant's entry in force and nobody had taken it.
    FalseLoss,
    /// The log is not complete (the stream failed).
    Incomplete,
}

impl ServerCheck {
    /// Every check, in report order.
    pub const ALL: [ServerCheck; 14] = [
        ServerCheck::Exclusion,
        ServerCheck::Fencing,
        ServerCheck::Caps,
        ServerCheck::Revival,
        ServerCheck::Uncommitted,
        ServerCheck::Unbelieved,
        ServerCheck::Orphans,
        ServerCheck::ReleaseOk,
        ServerCheck::Order,
        ServerCheck::LateCopy,
        ServerCheck::LetGo,
        ServerCheck::MinHold,
        ServerCheck::FalseLoss,
        ServerCheck::Incomplete,
    ];
}

impl fmt::Display for ServerCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ServerCheck::Exclusion => "(S1) server exclusion",
            ServerCheck::Fencing => "(S2) server fencing",
            ServerCheck::Caps => "(S3) server caps",
            ServerCheck::Revival => "(S4) no renewal after expiry",
            ServerCheck::Uncommitted => "(S5) believed grants were committed",
            ServerCheck::Unbelieved => "(S6) unbelieved grants end",
            ServerCheck::Orphans => "(S7) no orphan outlives its holders",
            ServerCheck::ReleaseOk => "(S8) release Ok only if held",
            ServerCheck::Order => "(S9) waiters served in line order",
            ServerCheck::LateCopy => "(S10) no attempt granted again after its let-go",
            ServerCheck::LetGo => "(S11) a let-go lock is usable in time",
            ServerCheck::MinHold => "(S12) no grant inside a minimum hold",
            ServerCheck::FalseLoss => "(S13) no loss reported while the server keeps the lease",
            ServerCheck::Incomplete => "(S0) change stream complete",
        })
    }
}

/// What the oracle found in one run.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Committed writes read.
    pub events: usize,
    /// Grants committed.
    pub grants: usize,
    /// Renewals committed.
    pub renewals: usize,
    /// Grants no holder believed in (lost replies, deaths while acquiring, the observer's
    /// own probes).
    pub orphans: usize,
    /// The longest life of an orphan, in server ms.
    pub longest_orphan_ms: i64,
    /// Believed grants judged by (S7).
    pub outlived_checked: usize,
    /// Judgments of (S7), (S11), (S12) and (S13) whose server times were counted on one
    /// clock across primaries whose clocks were apart ([`History::server_offsets`]).
    pub across_clocks: usize,
    /// Grants nobody believed in, judged by (S7) from the end of their acquire call.
    pub unbelieved_checked: usize,
    /// Of those, grants committed after their call had ended (by [`RELEASE_SLACK`]): a late
    /// copy of an attempt, granted though its call was over (counted: a withdrawal that
    /// could not be delivered cannot refuse it).
    pub late_grants: usize,
    /// Of those, grants excused from (S7) (a blocked renewal of their last holder's client).
    pub outlived_excused: usize,
    /// The longest time an entry outlived the last holder that believed in it, in server ms.
    pub longest_outlived_ms: i64,
    /// Releases that returned `Ok`, judged by (S8).
    pub releases_checked: usize,
    /// Of those, releases whose grant was removed at a server time below the server's time
    /// at the release's start (by more than [`RELEASE_SLACK`]) but after a step back of the
    /// clock that came later: what (S8) took for a removal before the release when it read
    /// the server's time at the release's start alone.
    pub releases_after_step_back: usize,
    /// Grants that went to an attempt granted before (same resource, lock id and nonce):
    /// an attempt repeated after its first grant expired unseen, or a late copy. (S10)
    /// judges those after a let-go.
    pub regrants: usize,
    /// Lets-go judged by (S11).
    pub let_go_checked: usize,
    /// For each of them, how long its lock stayed unusable after the let-go (server ms;
    /// 0 when the entry was gone by then).
    pub let_go_unusable_ms: Vec<f64>,
    /// Lets-go whose lock outlived the let-go + TTL + [`COMMAND_TIMEOUT`] (each is also an
    /// (S11) violation).
    pub let_go_over_bound: usize,
    /// Leases with a minimum hold judged by (S12).
    pub min_hold_judged: usize,
    /// Of those, the leases let go of within their hold (the let-go committed before the
    /// hold's end): the ones the hold kept from the next grant. Zero in a run with minimum
    /// holds means (S12) judged nothing that matters.
    pub min_hold_within: usize,
    /// For each of those followed by another grant, how long after the hold's end that grant
    /// came (server ms; negative: inside the hold, an (S12) violation).
    pub min_hold_margins_ms: Vec<f64>,
    /// Of those, the next grants that read inside the hold by the server's clock only
    /// because it stepped back after reading past the hold's end (a write committed in
    /// between, or the harness's own readings, show it past the end): not violations.
    pub min_hold_ran_out: usize,
    /// Places in line taken by a lock id whose own entry was in force on the resource then
    /// (let go of within its minimum hold, or in its lock-delay), and of those, the ones
    /// served from their place (the lock id's next grant on the resource came while it
    /// stood there). (S9) judges every grant past them.
    pub own_entry_places: (usize, usize),
    /// Places in line taken out by a write that granted their lock id nothing (not a grant,
    /// not an adoption) while they were live, and of those, the ones whose lock id's call
    /// still waited (each an (S9) violation, unless a fault or a forward step of the
    /// server's clock excused it).
    pub places_taken: (usize, usize),
    /// Reports of a loss judged by (S13) (in runs whose server clock stepped back), and of
    /// those, the ones for a lease the server surely kept (each also an (S13) violation).
    pub losses_judged: (usize, usize),
    /// Every violation, with what the log shows.
    pub violations: Vec<(ServerCheck, String)>,
}

impl Outcome {
    /// An oracle that could not read the whole log.
    pub fn incomplete(why: String) -> Self {
        Outcome {
            violations: vec![(ServerCheck::Incomplete, why)],
            ..Outcome::default()
        }
    }

    /// Violations by check.
    pub fn by_check(&self) -> BTreeMap<ServerCheck, usize> {
        let mut counts = BTreeMap::new();
        for (check, _) in &self.violations {
            *counts.entry(*check).or_default() += 1;
        }
        counts
    }
}

/// One entry of a lock document, as the oracle needs it.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    nonce: String,
    lock_id: String,
    token: i64,
    /// The entry's own TTL (`ttlMs`), if it has one.
    ttl_ms: Option<i64>,
    created_ms: i64,
    renewed_ms: i64,
    /// `None`: no TTL. With a lock-delay, the end of the delay: the entry keeps the
    /// resource from others until then.
    expires_ms: Option<i64>,
    /// The entry's lock-delay (`delayMs`): its lease ends that long before `expires_ms`.
    delay_ms: i64,
    /// When its holder let go of it within its minimum hold (`letGoAt`), if it did.
    let_go_ms: Option<i64>,
    exclusive: bool,
}

impl Entry {
    /// What identifies one grant: the attempt's nonce and the grant's token.
    fn key(&self) -> String {
        format!("{}/{}", self.nonce, self.token)
    }

    /// True if the entry is in force at `ms` (its lease, or its lock-delay after it).
    fn live_at(&self, ms: i64) -> bool {
        self.expires_ms.is_none_or(|e| e > ms)
    }

    /// True if the entry's lease (not its lock-delay) lives at `ms`.
    fn leased_at(&self, ms: i64) -> bool {
        self.expires_ms.is_none_or(|e| e - self.delay_ms > ms)
    }
}

fn millis(entry: &Document, field: &str) -> Result<Option<i64>, String> {
    match entry.get(field) {
        Some(Bson::DateTime(t)) => Ok(Some(t.timestamp_millis())),
        None | Some(Bson::Null) => Ok(None),
        Some(other) => Err(format!("{field} is {other:?}")),
    }
}

fn entry(value: &Document, exclusive: bool) -> Result<Entry, String> {
    let nonce = match value.get("nonce") {
        Some(Bson::ObjectId(id)) => id.to_hex(),
        Some(other) => other.to_string(),
        None => return Err(format!("entry without nonce: {value}")),
    };
    let token = match value.get("token") {
        Some(Bson::Int64(t)) => *t,
        Some(Bson::Int32(t)) => i64::from(*t),
        other => return Err(format!("entry token is {other:?}")),
    };
    let created_ms = millis(value, "createdAt")?.ok_or("entry without createdAt")?;
    // An entry gets `renewedAt` with its first renewal: until then it is its creation.
    let renewed_ms = millis(value, "renewedAt")?.unwrap_or(created_ms);
    let lock_id = match value.get("lockId") {
        Some(Bson::String(id)) => id.clone(),
        other => return Err(format!("entry lockId is {other:?}")),
    };
    let ttl_ms = match value.get("ttlMs") {
        Some(Bson::Int64(t)) => Some(*t),
        Some(Bson::Int32(t)) => Some(i64::from(*t)),
        _ => None,
    };
    let delay_ms = match value.get("delayMs") {
        Some(Bson::Int64(d)) => *d,
        Some(Bson::Int32(d)) => i64::from(*d),
        _ => 0,
    };
    Ok(Entry {
        nonce,
        lock_id,
        token,
        ttl_ms,
        created_ms,
        renewed_ms,
        expires_ms: millis(value, "expiresAt")?,
        delay_ms,
        let_go_ms: millis(value, "letGoAt")?,
        exclusive,
    })
}

/// One place in a resource's line: a waiter's lock id, whether it waits for a shared lock,
/// and until when (server time) the place lasts.
#[derive(Debug, Clone, PartialEq)]
struct Place {
    lock_id: String,
    shared: bool,
    until_ms: i64,
}

/// The line of a lock document, in order (a document without one has an empty line).
fn line(doc: &Document) -> Result<Vec<Place>, String> {
    let Some(Bson::Array(queue)) = doc.get("queue") else {
        return Ok(Vec::new());
    };
    queue
        .iter()
        .map(|value| {
            let Bson::Document(place) = value else {
                return Err(format!("a place in line is {value:?}"));
            };
            let lock_id = match place.get("lockId") {
                Some(Bson::String(id)) => id.clone(),
                other => return Err(format!("a place's lockId is {other:?}")),
            };
            let until_ms = millis(place, "until")?.ok_or("a place without until")?;
            Ok(Place {
                lock_id,
                shared: place.get_str("kind") == Ok("shared"),
                until_ms,
            })
        })
        .collect()
}

/// (S9): the grant of `new`, decided at `at` on a document whose line was `before` and whose
/// entries were `held`, went past nobody who had joined the line before it: for an exclusive
/// grant, no live place stood before its own (or at all, without one); for a shared one, no
/// live exclusive place did, and under a cap, the live shared entries and the shared places
/// before it left a permit.
fn order(
    out: &mut Outcome,
    resource: &str,
    new: &Entry,
    before: &[Place],
    held: &HashMap<String, Entry>,
    cap: Option<u32>,
) {
    let at = new.created_ms;
    let own = before.iter().position(|p| p.lock_id == new.lock_id);
    let ahead: Vec<&Place> = before[..own.unwrap_or(before.len())]
        .iter()
        .filter(|p| p.lock_id != new.lock_id && p.until_ms > at)
        .collect();
    let jumped = if new.exclusive {
        ahead.first().copied()
    } else {
        ahead.iter().copied().find(|p| !p.shared).or_else(|| {
            let live = held
                .values()
                .filter(|e| !e.exclusive && e.live_at(at))
                .count();
            match cap {
                Some(cap) if live + ahead.len() >= cap as usize => ahead.first().copied(),
                _ => None,
            }
        })
    };
    if let Some(place) = jumped {
        out.violations.push((
            ServerCheck::Order,
            format!(
                "{resource}: {} token {} granted to {} at {at} while {} waited before it in \
                 line (place until {})",
                kind(new),
                new.token,
                new.lock_id,
                place.lock_id,
                place.until_ms
            ),
        ));
    }
}

/// (S9), for the waiters that stood outside the line: the exclusive grant of `new` on
/// `resource` at its `created_ms`, whose lock id joined the line at `joined_ms` (its grant
/// time, without a place), went past no waiting call (one given a timeout) that began more
/// than [`JOIN_ALLOWANCE`] before that, was still waiting, had no place in `before` (the
/// line before the grant), and whose own lock id had an entry in force on the resource when
/// it began (let go of within its minimum hold, or in its lock-delay): that waiter must
/// stand in line like anybody (issue 39, item 5). A call whose client a fault hit while it
/// waited is not judged (its attempts may not have reached the server).
fn outside_line(
    out: &mut Outcome,
    history: &History,
    grants: &[Granted],
    (resource, before, joined_ms): (&str, &[Place], i64),
    new: &Entry,
) {
    let at = new.created_ms;
    for call in &history.acquire_calls {
        if call.timeout.is_none()
            || call.resource != resource
            || call.lock_id == new.lock_id
            || before.iter().any(|p| p.lock_id == call.lock_id)
        {
            continue;
        }
        // Judged in our instants, not in server times, which a step back of the server's
        // clock makes read the same twice: the call must have begun well before the lock
        // id it waited for could join (the first instant the server's clock read
        // `joined_ms`), and ended after the grant surely came (the last instant it read
        // `at`).
        let (Some(began), Some(joined), Some(granted)) = (
            history.server_ms(call.invoked_at),
            history.first_instant_at_server_ms(joined_ms),
            history.last_instant_at_server_ms(at),
        ) else {
            continue;
        };
        if call.invoked_at + JOIN_ALLOWANCE >= joined || call.ended_at <= granted {
            continue;
        }
        let own_in_force = grants.iter().any(|g| {
            g.resource == resource
                && g.lock_id == call.lock_id
                && g.at_ms <= began
                && g.removed_ms.is_none_or(|r| r > began)
        });
        if !own_in_force {
            continue;
        }
        let hit = history.faults.iter().any(|f| {
            f.client == Some(call.client) && f.start <= call.ended_at && f.end >= call.invoked_at
        });
        if hit || clock_moved_on(history, call.invoked_at, granted) {
            continue;
        }
        out.violations.push((
            ServerCheck::Order,
            format!(
                "{resource}: {} token {} granted to {} at {at} (in line from {joined_ms}) while \
                 {}, whose own entry was in force, had waited since {began} outside the line",
                kind(new),
                new.token,
                new.lock_id,
                call.lock_id
            ),
        ));
    }
}

/// The lock ids whose place a write took out of the line while it was live (its `until`
/// after the write) without granting them anything: no entry of the lock id is new or
/// changed by the write (a grant takes every place of its lock id, an adoption its lock
/// id's). A deleted document (a purge, the TTL index) takes nothing.
fn taken_places(
    (line_before, line_after): (&[Place], &[Place]),
    (before, after): (Option<&HashMap<String, Entry>>, &HashMap<String, Entry>),
    event: &ServerEvent,
) -> Vec<String> {
    if event.doc.is_none() {
        return Vec::new();
    }
    let granted = |lock_id: &str| {
        after.iter().any(|(key, entry)| {
            entry.lock_id == lock_id && before.and_then(|b| b.get(key)) != Some(entry)
        })
    };
    line_before
        .iter()
        .filter(|p| p.until_ms > event.at_ms)
        .filter(|p| !line_after.iter().any(|a| a.lock_id == p.lock_id))
        .filter(|p| !granted(&p.lock_id))
        .map(|p| p.lock_id.clone())
        .collect()
}

/// (S9), a place taken from a call that still waits (issue 40): a write at `at_ms` took
/// `lock_id`'s place on `resource` out of the line, granting it nothing
/// ([`taken_places`]), while a waiting call of that lock id (one given a timeout) that
/// began before the write went on waiting more than [`JOIN_ALLOWANCE`] after it: the call
/// lost its turn (it joins again at the end). Only a removal of the call's own can take
/// its place: its `leave_line` or withdrawal once it stopped waiting, or its attempt
/// answered out of the line, which ends the call at once. A late `leave_line` or
/// withdrawal of the lock id's earlier call must leave it (a place names its call). Not
/// judged: a call whose client a fault hit while it waited, or one during which the
/// server's clock jumped or stepped forward ([`clock_moved_on`]). Returns whether such a
/// call waited (and a violation was recorded).
fn still_waited(
    out: &mut Outcome,
    history: &History,
    resource: &str,
    lock_id: &str,
    at_ms: i64,
) -> bool {
    let (Some(first), Some(last)) = (
        history.first_instant_at_server_ms(at_ms),
        history.last_instant_at_server_ms(at_ms),
    ) else {
        return false;
    };
    let waiting = history.acquire_calls.iter().find(|call| {
        call.timeout.is_some()
            && call.resource == resource
            && call.lock_id == lock_id
            && call.invoked_at < first
            && call.ended_at > last + JOIN_ALLOWANCE
            && !history.faults.iter().any(|f| {
                f.client.is_none_or(|c| c == call.client)
                    && f.start <= call.ended_at
                    && f.end >= call.invoked_at
            })
            && !clock_moved_on(history, call.invoked_at, call.ended_at)
    });
    let Some(call) = waiting else {
        return false;
    };
    out.violations.push((
        ServerCheck::Order,
        format!(
            "{resource}: the place of {lock_id} was taken out of the line at {at_ms}, granting \
             it nothing, while its call (begun {:?} before) still waited",
            first.saturating_duration_since(call.invoked_at)
        ),
    ));
    true
}

/// Whether the server's clock jumped or stepped forward between `from` and `to` (our
/// instants): a place in line lasts until a time by the server's clock, so such a step may
/// have made every place lapse at once (a jump longer than a place's life, twice the TTL,
/// surely did), and the waiters join again in the order they next ask. (S9) cannot say
/// whether a waiter that stood outside the line at a grant after it lost its place that way
/// (`--long --seed 29979245`, run 29979245: a 4.3 s jump while `q0`'s two waiters stood in
/// line; the one whose call began first asked next after the other).
fn clock_moved_on(history: &History, from: std::time::Instant, to: std::time::Instant) -> bool {
    history.ops.iter().any(|op| {
        let forward = match op.kind {
            OpKind::ClockJump(_) => true,
            OpKind::ClockStep { by_ms, .. } => by_ms > 0,
            OpKind::ForceRelease(_) | OpKind::Purge => false,
        };
        forward && op.start <= to && op.end >= from
    })
}

/// The entries of a lock document, by [`Entry::key`].
fn entries(doc: &Document) -> Result<HashMap<String, Entry>, String> {
    let mut out = HashMap::new();
    if let Some(Bson::Document(e)) = doc.get("exclusive") {
        let e = entry(e, true)?;
        out.insert(e.key(), e);
    }
    if let Some(Bson::Array(shared)) = doc.get("shared") {
        for value in shared {
            let Bson::Document(e) = value else {
                return Err(format!("a shared entry is {value:?}"));
            };
            let e = entry(e, false)?;
            out.insert(e.key(), e);
        }
    }
    Ok(out)
}

/// A grant, from its commit to its end.
#[derive(Debug, Clone)]
struct Granted {
    resource: String,
    lock_id: String,
    token: i64,
    /// The attempt it went to.
    nonce: String,
    at_ms: i64,
    /// The index of the event that committed it.
    event: usize,
    /// The index of the event that removed it.
    removed_event: Option<usize>,
    /// Its TTL: `ttlMs`, or else the span from its grant to its first expiry.
    ttl_ms: Option<i64>,
    /// When it was removed; `None` while still in the document at the end of the log.
    removed_ms: Option<i64>,
    /// Its last expiry (with a lock-delay, the delay's end).
    expires_ms: Option<i64>,
    /// Its lock-delay, in ms (0: none).
    delay_ms: i64,
    /// When it was renewed.
    renewals: Vec<i64>,
    /// Every write that left it in the document (its grant, renewals, a let-go mark), in
    /// commit order: the server's time of the write and the end of the lease after it (its
    /// expiry less its lock-delay; `None`: no TTL).
    writes: Vec<(i64, Option<i64>)>,
    /// When the server marked it let go of within its minimum hold (`letGoAt`), with the end
    /// of its lease (its expiry less its lock-delay) just before.
    let_go: Option<(i64, Option<i64>)>,
}

impl Granted {
    /// When its lease ended in server time (`None`: never, it has no TTL and was not
    /// removed); a lock-delay after it keeps the entry, not the lease.
    fn end_ms(&self) -> Option<i64> {
        let lease_end = self.expires_ms.map(|e| e - self.delay_ms);
        match (self.removed_ms, lease_end) {
            (Some(r), Some(e)) => Some(r.min(e)),
            (Some(r), None) => Some(r),
            (None, e) => e,
        }
    }
}

/// Replays the log and checks it against the history.
///
/// `permits` gives the cap of each shared resource; `orphan_bound` is how long a grant
/// nobody believed in may last (the acquire timeout plus the TTL, or the grant's own TTL if
/// longer; [`ORPHAN_SLACK`] is added); `holds`, the minimum hold each holder asked for (by holder id), for (S12).
pub fn check(
    events: &[ServerEvent],
    history: &History,
    permits: &HashMap<String, u32>,
    orphan_bound: Duration,
    holds: &MinHolds,
) -> Outcome {
    let mut out = Outcome {
        events: events.len(),
        ..Outcome::default()
    };
    let mut current: HashMap<&str, HashMap<String, Entry>> = HashMap::new();
    let mut lines: HashMap<&str, Vec<Place>> = HashMap::new();
    let mut max_token: HashMap<&str, i64> = HashMap::new();
    let mut grants: Vec<Granted> = Vec::new();
    // Index into `grants` of each live entry, by resource and key.
    let mut open: HashMap<(&str, String), usize> = HashMap::new();
    // When each lock id took its place in a resource's line (server ms), while it stands
    // there; and the places taken while the lock id's own entry was in force, until served.
    let mut joined: HashMap<(&str, String), i64> = HashMap::new();
    let mut own_in_line: HashSet<(&str, String)> = HashSet::new();
    for (index, event) in events.iter().enumerate() {
        let resource = event.resource.as_str();
        let after = match &event.doc {
            None => HashMap::new(),
            Some(doc) => match entries(doc) {
                Ok(e) => e,
                Err(why) => {
                    // Not a lock document (the library leaves those alone): nothing to check.
                    unreadable(&mut out, resource, &why);
                    continue;
                }
            },
        };
        let line_after = match event.doc.as_ref().map(line) {
            None => Vec::new(),
            Some(Ok(places)) => places,
            Some(Err(why)) => {
                unreadable(&mut out, resource, &why);
                continue;
            }
        };
        for place in &line_after {
            let key = (resource, place.lock_id.clone());
            if joined.contains_key(&key) {
                continue;
            }
            joined.insert(key.clone(), event.at_ms);
            if after.values().any(|e| e.lock_id == place.lock_id) {
                out.own_entry_places.0 += 1;
                own_in_line.insert(key);
            }
        }
        joined.retain(|(r, id), _| *r != resource || line_after.iter().any(|p| p.lock_id == *id));
        let taken = taken_places(
            (
                lines.get(resource).map_or(&[][..], Vec::as_slice),
                &line_after,
            ),
            (current.get(resource), &after),
            event,
        );
        for lock_id in taken {
            out.places_taken.0 += 1;
            if still_waited(&mut out, history, resource, &lock_id, event.at_ms) {
                out.places_taken.1 += 1;
            }
        }
        let line_before = lines.insert(resource, line_after).unwrap_or_default();
        let before = current.remove(resource).unwrap_or_default();
        for (key, old) in &before {
            let Some(new) = after.get(key) else {
                if let Some(i) = open.remove(&(resource, key.clone())) {
                    grants[i].removed_ms = Some(event.at_ms);
                    grants[i].removed_event = Some(index);
                }
                continue;
            };
            if new.created_ms != old.created_ms {
                out.violations.push((
                    ServerCheck::Fencing,
                    format!(
                        "{resource}: grant {key} changed its grant time ({} -> {})",
                        old.created_ms, new.created_ms
                    ),
                ));
            }
            if new.renewed_ms != old.renewed_ms {
                out.renewals += 1;
                if !old.leased_at(new.renewed_ms) {
                    out.violations.push((
                        ServerCheck::Revival,
                        format!(
                            "{resource}: token {} renewed at {} after it expired at {:?}",
                            old.token, new.renewed_ms, old.expires_ms
                        ),
                    ));
                }
            }
            if let Some(&i) = open.get(&(resource, key.clone())) {
                if let (Some(at), None) = (new.let_go_ms, old.let_go_ms)
                    && grants[i].let_go.is_none()
                {
                    let lease_end = old.expires_ms.map(|e| e - old.delay_ms);
                    grants[i].let_go = Some((at, lease_end));
                }
                grants[i].expires_ms = new.expires_ms;
                if new != old {
                    let lease_end = new.expires_ms.map(|e| e - new.delay_ms);
                    grants[i].writes.push((event.at_ms, lease_end));
                }
                if new.renewed_ms != old.renewed_ms {
                    grants[i].renewals.push(new.renewed_ms);
                }
            }
        }
        let mut fresh: Vec<&Entry> = after
            .values()
            .filter(|e| !before.contains_key(&e.key()))
            .collect();
        fresh.sort_by_key(|e| e.token);
        for new in fresh {
            out.grants += 1;
            let at = new.created_ms;
            let highest = max_token.entry(resource).or_insert(i64::MIN);
            if new.token <= *highest {
                out.violations.push((
                    ServerCheck::Fencing,
                    format!(
                        "{resource}: token {} granted at {at} after token {highest}",
                        new.token
                    ),
                ));
            }
            *highest = (*highest).max(new.token);
            order(
                &mut out,
                resource,
                new,
                &line_before,
                &before,
                permits.get(resource).copied(),
            );
            if own_in_line.remove(&(resource, new.lock_id.clone())) {
                out.own_entry_places.1 += 1;
            }
            if new.exclusive {
                let joined_ms = joined.get(&(resource, new.lock_id.clone())).copied();
                let line = (resource, &line_before[..], joined_ms.unwrap_or(at));
                outside_line(&mut out, history, &grants, line, new);
            }
            for other in before.values().filter(|o| o.live_at(at)) {
                if new.exclusive || other.exclusive {
                    out.violations.push((
                        ServerCheck::Exclusion,
                        format!(
                            "{resource}: {} token {} granted at {at} while {} token {} was \
                             live until {:?}",
                            kind(new),
                            new.token,
                            kind(other),
                            other.token,
                            other.expires_ms
                        ),
                    ));
                }
            }
            if !new.exclusive
                && let Some(&cap) = permits.get(resource)
            {
                let live = after
                    .values()
                    .filter(|e| !e.exclusive && e.live_at(at))
                    .count();
                if live > cap as usize {
                    out.violations.push((
                        ServerCheck::Caps,
                        format!("{resource}: {live} live shared entries at {at}, cap {cap}"),
                    ));
                }
            }
            open.insert((resource, new.key()), grants.len());
            grants.push(Granted {
                resource: resource.to_string(),
                lock_id: new.lock_id.clone(),
                token: new.token,
                nonce: new.nonce.clone(),
                at_ms: at,
                event: index,
                removed_event: None,
                ttl_ms: new
                    .ttl_ms
                    .or_else(|| new.expires_ms.map(|e| e - new.created_ms)),
                removed_ms: None,
                expires_ms: new.expires_ms,
                delay_ms: new.delay_ms,
                renewals: Vec::new(),
                writes: vec![(event.at_ms, new.expires_ms.map(|e| e - new.delay_ms))],
                let_go: new.let_go_ms.map(|at| (at, None)),
            });
        }
        current.insert(resource, after);
    }

    let committed: HashSet<(&str, i64)> = grants
        .iter()
        .map(|g| (g.resource.as_str(), g.token))
        .collect();
    let believed: HashSet<(&str, i64)> = history
        .holders
        .iter()
        .filter(|h| !h.fake)
        .map(|h| (h.resource.as_str(), h.token))
        .collect();
    for (resource, token) in &believed {
        if !committed.contains(&(*resource, *token)) {
            out.violations.push((
                ServerCheck::Uncommitted,
                format!("{resource}: a holder believed token {token}, never granted"),
            ));
        }
    }
    let orphan_bound_ms = orphan_bound.as_millis() as i64;
    let slack_ms = ORPHAN_SLACK.as_millis() as i64;
    for g in grants
        .iter()
        .filter(|g| !believed.contains(&(g.resource.as_str(), g.token)))
    {
        out.orphans += 1;
        match g.end_ms() {
            Some(end) => {
                let life = end - g.at_ms;
                out.longest_orphan_ms = out.longest_orphan_ms.max(life);
                // A grant with a TTL longer than the workload's (the clock-step workload's
                // 6 s, seed 41210) may live its own TTL: nobody renews it.
                let bound_ms = orphan_bound_ms.max(g.ttl_ms.unwrap_or(0)) + slack_ms;
                if life > bound_ms {
                    out.violations.push((
                        ServerCheck::Unbelieved,
                        format!(
                            "{}: token {} granted to nobody lasted {life} ms (bound {bound_ms})",
                            g.resource, g.token
                        ),
                    ));
                }
            }
            None => out.violations.push((
                ServerCheck::Unbelieved,
                format!(
                    "{}: token {} granted to nobody has no TTL and was never removed",
                    g.resource, g.token
                ),
            )),
        }
    }
    outlived(&mut out, &grants, history);
    releases(&mut out, &grants, history);
    let last = last_believers(history);
    late_copies(&mut out, &grants, history, &last);
    let_gos(&mut out, &grants, history, &last);
    min_holds(&mut out, &grants, events, history, holds);
    false_losses(&mut out, &grants, history);
    out
}

/// (S13): in a run whose server clock stepped back, no holder is told its lease is lost
/// while the server surely keeps its grant's entry in force (see the module's
/// documentation for what is judged).
fn false_losses(out: &mut Outcome, grants: &[Granted], history: &History) {
    let stepped_back = (history.ops.iter())
        .any(|op| matches!(op.kind, OpKind::ClockStep { by_ms, .. } if by_ms < 0));
    if !stepped_back {
        return;
    }
    let slack = RELEASE_SLACK.as_millis() as i64;
    let keyed = by_key(grants);
    for l in &history.holders {
        let Some((reported, how)) = loss_reported(l) else {
            continue;
        };
        let Some(ttl) = l.ttl else {
            continue;
        };
        if !loss_judged(l, reported, history) {
            continue;
        }
        let Some(g) = keyed.get(&(l.resource.as_str(), l.lock_id.as_str(), l.token)) else {
            continue;
        };
        // Removed (taken over, released, force-released) at a server time the clock may have
        // read by the report: not kept.
        let removed_before = g.removed_ms.is_none_or(|r| {
            history
                .first_instant_at_server_ms(r - slack)
                .is_none_or(|t| t <= reported)
        });
        if g.removed_ms.is_some() && removed_before {
            continue;
        }
        // The lease's end after the last write surely made before the report (renewals only
        // move it later).
        let Some(&(_, lease_end)) = g.writes.iter().rev().find(|(at, _)| {
            history
                .last_instant_at_server_ms(at + slack)
                .is_some_and(|t| t < reported)
        }) else {
            continue;
        };
        let Some(highest) = history.highest_server_ms(l.attempt_sent_at, reported) else {
            continue;
        };
        out.losses_judged.0 += 1;
        let needed = if how == "local deadline" {
            (ttl / 3).as_millis() as i64
        } else {
            FALSE_LOSS_MARGIN_MS
        };
        // On a set the entry's end and the readings may be two primaries' clocks apart.
        let (slowest, fastest) = history.offset_range(l.attempt_sent_at, reported);
        if fastest > slowest {
            out.across_clocks += 1;
        }
        let left = lease_end.map_or(i64::MAX, |end| end - highest - (fastest - slowest));
        if left >= needed {
            out.losses_judged.1 += 1;
            let left = lease_end.map_or("no TTL".to_owned(), |_| format!("{left} ms"));
            // What the guard believed: its deadline's latest reading, from its attempt's send
            // and from its grant (a deadline cut at the grant and one cut later differ).
            let ms = |from: std::time::Instant, to: std::time::Instant| {
                to.saturating_duration_since(from).as_millis()
            };
            let believed = l
                .max_deadline
                .map_or("never sampled".to_owned(), |deadline| {
                    format!(
                        "its deadline {} ms after its attempt's send, {} ms after its grant, which \
                     came {} ms after the send",
                        ms(l.attempt_sent_at, deadline),
                        ms(l.granted_at, deadline),
                        ms(l.attempt_sent_at, l.granted_at)
                    )
                });
            out.violations.push((
                ServerCheck::FalseLoss,
                format!(
                    "{}: holder {} (client {}, lock id {}, token {}) was told its lease was lost                      ({how}) while the server kept its entry, with {left} of its lease left                      by the highest the server's clock read by then (removed at {:?}); {believed}",
                    l.resource, l.id, l.client, l.lock_id, l.token, g.removed_ms
                ),
            ));
        }
    }
}

/// When and how `l` was first told its lease was lost, if it was before it let go: its
/// loss notice, or its release refused as lost, which told it when the release returned:
/// at the latest when its log was handed over ([`HolderLog::logged_at`]), which is taken
/// (the library decides at the reply: a forward step of the server's clock while the
/// release was on its way, shown by the reply, can end the lease before it; dated at the
/// release's start, such a report was judged against the clock before the step, `a0`'s
/// restarted holder in `--long --seed 19260821`).
fn loss_reported(l: &HolderLog) -> Option<(std::time::Instant, &'static str)> {
    if let Some((at, kind)) = l.notified
        && l.released_at.is_none_or(|r| at <= r)
    {
        let how = match kind {
            LossKind::Deadline => "local deadline",
            LossKind::Revoked => "revoked",
            LossKind::Other => "other",
        };
        return Some((at, how));
    }
    match l.release {
        Some(ReleaseResult::Lost(kind)) => {
            let how = match kind {
                LossKind::Deadline => "local deadline",
                _ => "release refused as lost",
            };
            Some((l.logged_at.or(l.released_at)?, how))
        }
        _ => None,
    }
}

/// True if (S13) judges `l`'s report of a loss at `reported`: nothing the history knows of
/// may have ended or resumed its lease, or cut its client off, from its attempt's send to
/// the report.
fn loss_judged(l: &HolderLog, reported: std::time::Instant, history: &History) -> bool {
    let from = l.attempt_sent_at;
    let set = matches!(l.mode, Mode::Group | Mode::Multi);
    let killed = l.killed_at.is_some_and(|k| k <= reported);
    let hit = (history.faults.iter()).any(|f| {
        f.client.is_none_or(|c| c == l.client)
            && f.start <= reported
            && f.end + crate::check::FAULT_SLACK >= from
    });
    let nemesis =
        (history.nemeses.iter()).any(|n| n.client == l.client && n.at >= from && n.at <= reported);
    let ended = (history.ops.iter()).any(|op| {
        let may_end = match &op.kind {
            OpKind::ForceRelease(r) => *r == l.resource,
            OpKind::ClockJump(_) => true,
            OpKind::ClockStep { by_ms, .. } => *by_ms > 0,
            OpKind::Purge => false,
        };
        may_end && op.start <= reported && op.end >= from
    });
    let resumed =
        (history.holders.iter()).any(|h| l.continued_by(h) && h.attempt_sent_at <= reported);
    !(set || killed || !l.pauses.is_empty() || hit || nemesis || ended || resumed)
}

/// True if an operator's force-release of `resource` may have run between two things the
/// server did at its times `from_ms` and `to_ms` (with [`RELEASE_SLACK`]): it may have ended
/// a lease held then at once. Compared in our instants ([`ran_between`]), not in server
/// time, which a step back of the server's clock puts out of order.
fn force_released_between(history: &History, resource: &str, from_ms: i64, to_ms: i64) -> bool {
    history.ops.iter().any(|op| {
        matches!(&op.kind, OpKind::ForceRelease(r) if r == resource)
            && ran_between(history, op, from_ms, to_ms)
    })
}

/// True if an operator's force-release of `h`'s resource began no later than `h`'s let-go
/// call and may have run between its grant at `from_ms` and its let-go committed at `to_ms`
/// ([`ran_between`]). One begun after the let-go call either landed after the let-go (which
/// it must leave as it is) or before it, and then the let-go finds no lease to mark.
fn force_released_before_let_go(
    history: &History,
    h: &HolderLog,
    from_ms: i64,
    to_ms: i64,
) -> bool {
    let Some(let_go) = h.released_at else {
        return force_released_between(history, &h.resource, from_ms, to_ms);
    };
    history.ops.iter().any(|op| {
        matches!(&op.kind, OpKind::ForceRelease(r) if *r == h.resource)
            && op.start <= let_go
            && ran_between(history, op, from_ms, to_ms)
    })
}

/// True if the operator's call `op` may have overlapped the stretch between two things the
/// server did at its times `from_ms` and `to_ms` (with [`RELEASE_SLACK`]): the first was done
/// no earlier than the first of our instants at which the server's clock read `from_ms`, the
/// second no later than the last at which it read `to_ms`
/// ([`History::first_instant_at_server_ms`], [`History::last_instant_at_server_ms`]). After
/// a step back the clock reads again times it read before, so the server's times of the
/// call's start and end, compared with `from_ms` and `to_ms`, can put a call made between
/// the two before both (a false (S12): a force release it ran after a grant and before its
/// let-go, read 600 ms below the grant). True without readings.
fn ran_between(history: &History, op: &OpEvent, from_ms: i64, to_ms: i64) -> bool {
    let slack = RELEASE_SLACK.as_millis() as i64;
    let (Some(first), Some(last)) = (
        history.first_instant_at_server_ms(from_ms - slack),
        history.last_instant_at_server_ms(to_ms + slack),
    ) else {
        return true;
    };
    op.start <= last && op.end >= first
}

/// (S12): no grant inside the minimum hold of a lease its holder let go of (see the module's
/// documentation for which leases are judged).
fn min_holds(
    out: &mut Outcome,
    grants: &[Granted],
    events: &[ServerEvent],
    history: &History,
    holds: &MinHolds,
) {
    if holds.is_empty() {
        return;
    }
    let slack = RELEASE_SLACK.as_millis() as i64;
    let mut by_resource: HashMap<&str, Vec<&Granted>> = HashMap::new();
    for g in grants {
        by_resource.entry(g.resource.as_str()).or_default().push(g);
    }
    for list in by_resource.values_mut() {
        list.sort_by_key(|g| g.token);
    }
    let keyed = by_key(grants);
    for h in history.holders.iter().filter(|h| !h.fake) {
        let Some(hold) = holds.get(&h.id) else {
            continue;
        };
        if h.access != crate::history::Access::Exclusive {
            continue; // a reader's or a permit's hold keeps its share only
        }
        let Some(g) = keyed.get(&(h.resource.as_str(), h.lock_id.as_str(), h.token)) else {
            continue; // a token never granted is (S5)'s
        };
        let Some(let_ms) = let_go_ms(h, history) else {
            continue; // killed, or never let go of
        };
        let cut_off = h
            .notified
            .is_some_and(|(t, _)| h.released_at.is_none_or(|r| t <= r))
            || matches!(h.release, Some(ReleaseResult::Lost(_)));
        if cut_off {
            continue;
        }
        // The let-go as the server committed it: marked within the hold, or removed.
        let (commit_ms, lease_end, marked) = match (g.let_go, g.removed_ms) {
            (Some((at, lease_end)), _) => (at, lease_end, true),
            (None, Some(removed)) => (removed, g.expires_ms.map(|e| e - g.delay_ms), false),
            (None, None) => continue, // it ran out: no let-go reached the server
        };
        // A removal may be an operator's force release rather than the holder's let-go; a
        // let-go mark is the holder's, and a force release after it must leave the hold as
        // it is (`LockDetails::min_hold`), so only one begun before the let-go call excuses
        // it (after a step back, the server's times alone cannot say which came first).
        let forced = if marked {
            force_released_before_let_go(history, h, g.at_ms, commit_ms)
        } else {
            force_released_between(history, &g.resource, g.at_ms, commit_ms)
        };
        if commit_ms < let_ms - slack || lease_end.is_some_and(|end| end <= commit_ms) || forced {
            continue; // not its holder's let-go of a live lease
        }
        out.min_hold_judged += 1;
        let hold_end = g.at_ms + hold.as_millis() as i64;
        if commit_ms >= hold_end {
            continue; // let go of after the hold: a release frees it at once
        }
        out.min_hold_within += 1;
        let next = by_resource[g.resource.as_str()]
            .iter()
            .find(|n| n.token > g.token);
        let Some(next) = next else {
            continue;
        };
        // The hold ran out by the server's clock before the next grant if a write committed
        // between the two read past its end: the next grant reads earlier only because the
        // clock stepped back since (`--long --seed 13131313`: a grant 834 ms "inside" a
        // hold, its token the fence + 1, after a step back of the server's clock).
        let ran_out = events
            .get(g.event + 1..next.event)
            .is_some_and(|between| between.iter().any(|e| e.at_ms >= hold_end));
        // On a set, the next grant may be stamped by a primary whose clock is behind the
        // one that stamped the hold's start: counted on the fastest clock that served from
        // the grant to it (any primary serving then decides by its own clock).
        let next_at = next_grant_window(history, next);
        let moved = next_at.map_or(0, |(from, to)| {
            let (stamped, _) = history.offset_range(from, to);
            let (_, fastest) = history.offset_range(h.attempt_sent_at.min(from), to);
            (fastest - stamped).max(0)
        });
        if moved > 0 {
            out.across_clocks += 1;
        }
        let next_ms = next.at_ms + moved;
        if next_ms >= hold_end {
            out.min_hold_margins_ms.push((next_ms - hold_end) as f64);
            continue;
        }
        if next.at_ms < hold_end && (ran_out || read_past_end(history, h, next, hold_end)) {
            out.min_hold_ran_out += 1;
            continue;
        }
        out.min_hold_margins_ms.push((next.at_ms - hold_end) as f64);
        if next.at_ms < hold_end {
            out.violations.push((
                ServerCheck::MinHold,
                format!(
                    "{}: lock id {} token {} (holder {}, client {}, {:?}) was granted at {} with \
                     a minimum hold of {} ms and let go of at server time {commit_ms}; token {} \
                     (lock id {}) was granted at {}, {} ms before the hold's end; its entry \
                     was {} (the resource's writes from its grant to the next: {})",
                    g.resource,
                    g.lock_id,
                    g.token,
                    h.id,
                    h.client,
                    h.let_go,
                    g.at_ms,
                    hold.as_millis(),
                    next.token,
                    next.lock_id,
                    next.at_ms,
                    hold_end - next.at_ms,
                    match (marked, g.removed_ms) {
                        (true, Some(r)) => format!("marked let go of, then removed at {r}"),
                        (true, None) => "marked let go of".to_owned(),
                        (false, _) => "removed".to_owned(),
                    },
                    trail(&events[g.event..=next.event], &g.resource),
                ),
            ));
        }
    }
}

/// True if the server's clock read `hold_end` or later at one of our instants from `h`'s
/// let-go call to the next grant `next` (the latest instant it can have run: its holder's
/// reading of the reply, and the last instant the clock read its time), by the harness's
/// readings of the clock ([`History::highest_server_ms`]): the hold then ran out by the
/// server's clock before the next grant, which reads inside it only because the clock
/// stepped back since. A write stamps its change event with the clock as it commits, but
/// decides by its `$$NOW`, taken as it starts: a let-go (or a purge) that began as the clock
/// read past the hold's end removes the entry, and if the clock steps back before it
/// commits, no event shows the clock past the end (the shape of `--long --seed 16769023`'s
/// report on `jobl0`: a let-go 41 ms after the grant by its event, the next grant 434 ms
/// "inside" the hold, no write between reading past it).
fn read_past_end(history: &History, h: &HolderLog, next: &Granted, hold_end: i64) -> bool {
    let Some(from) = h.released_at else {
        return false;
    };
    let next_holder = history.holders.iter().find(|n| {
        !n.fake && n.resource == next.resource && n.lock_id == next.lock_id && n.token == next.token
    });
    let to = [
        next_holder.map(|n| n.granted_at),
        history.last_instant_at_server_ms(next.at_ms),
    ]
    .into_iter()
    .flatten()
    .min();
    to.is_some_and(|to| {
        to >= from
            && history
                .highest_server_ms(from, to)
                .is_some_and(|ms| ms >= hold_end)
    })
}

/// How far the fastest clock that served as primary at any of our instants from `from` to
/// `to` read ahead of the one serving at `at` ([`History::offset_range`],
/// [`History::offset_at`]), in ms, 0 if none was: what a server time stamped in the window
/// may read above the same moment on the clock read at `at`. Always 0 on one server.
fn faster_since(
    history: &History,
    from: std::time::Instant,
    to: std::time::Instant,
    at: std::time::Instant,
) -> i64 {
    let (_, fastest) = history.offset_range(from.min(at), to.max(at));
    (fastest - history.offset_at(at)).max(0)
}

/// The window of our instants in which the grant `next` was made: its holder's attempt's
/// send to the grant's arrival, if a holder received it.
fn next_grant_window(
    history: &History,
    next: &Granted,
) -> Option<(std::time::Instant, std::time::Instant)> {
    history
        .holders
        .iter()
        .find(|n| {
            !n.fake
                && n.resource == next.resource
                && n.lock_id == next.lock_id
                && n.token == next.token
        })
        .map(|n| (n.attempt_sent_at, n.granted_at))
}

/// The writes to `resource` among `events`, each as the server's time of its commit and the
/// exclusive entry after it (lock id, token, `expiresAt`, `delayMs`, `letGoAt`; `-`: none;
/// `deleted`: the document went), for a report to show what happened to an entry.
fn trail(events: &[ServerEvent], resource: &str) -> String {
    let field = |e: &Document, name: &str| match e.get(name) {
        Some(Bson::DateTime(t)) => t.timestamp_millis().to_string(),
        Some(Bson::String(s)) => s.clone(),
        Some(Bson::Int64(n)) => n.to_string(),
        Some(Bson::Int32(n)) => n.to_string(),
        Some(other) => other.to_string(),
        None => "-".to_owned(),
    };
    let writes: Vec<String> = events
        .iter()
        .filter(|e| e.resource == resource)
        .map(|e| match &e.doc {
            None => format!("{} deleted", e.at_ms),
            Some(doc) => match doc.get("exclusive") {
                Some(Bson::Document(x)) => format!(
                    "{} {} {} exp {} delay {} letGo {}",
                    e.at_ms,
                    field(x, "lockId"),
                    field(x, "token"),
                    field(x, "expiresAt"),
                    field(x, "delayMs"),
                    field(x, "letGoAt"),
                ),
                _ => format!("{} -", e.at_ms),
            },
        })
        .collect();
    writes.join("; ")
}

/// (S12) judged nothing that matters in a run whose workload asked for minimum holds: a
/// violation, so that a run cannot pass on a check that never ran.
pub fn min_hold_vacuous(out: &mut Outcome) {
    if out.min_hold_within == 0 {
        out.violations.push((
            ServerCheck::MinHold,
            format!(
                "vacuous: the workload asks for minimum holds, yet no lease let go of within \
                 its hold was judged ({} judged in all)",
                out.min_hold_judged
            ),
        ));
    }
}

/// The holder whose belief in each grant (by resource, lock id and token) ended last: the
/// one whose let-go ends the grant (a resumed lease's earlier incarnations do not).
fn last_believers(history: &History) -> HashMap<(&str, &str, i64), &HolderLog> {
    let mut last: HashMap<(&str, &str, i64), &HolderLog> = HashMap::new();
    for h in history.holders.iter().filter(|h| !h.fake) {
        let key = (h.resource.as_str(), h.lock_id.as_str(), h.token);
        let later = last
            .get(&key)
            .is_none_or(|l| l.belief_end(history.end) < h.belief_end(history.end));
        if later {
            last.insert(key, h);
        }
    }
    last
}

/// When `h` let go of its lease by a release or a drop (in server time), if it did.
fn let_go_ms(h: &HolderLog, history: &History) -> Option<i64> {
    let sends = matches!(
        h.let_go,
        Some(
            LetGo::Released
                | LetGo::ReleaseCancelled
                | LetGo::Dropped
                | LetGo::DroppedWithoutRuntime
                | LetGo::DroppedOnEndingRuntime
                | LetGo::Unlocked
        )
    );
    if !sends
        || h.killed_at
            .is_some_and(|k| h.released_at.is_none_or(|r| k <= r))
    {
        return None;
    }
    history.server_ms(h.released_at?)
}

/// The grants of each attempt (resource, lock id, nonce), in commit order.
fn by_attempt(grants: &[Granted]) -> HashMap<(&str, &str, &str), Vec<&Granted>> {
    let mut attempts: HashMap<(&str, &str, &str), Vec<&Granted>> = HashMap::new();
    for g in grants {
        let key = (g.resource.as_str(), g.lock_id.as_str(), g.nonce.as_str());
        attempts.entry(key).or_default().push(g);
    }
    attempts
}

/// True if an operator's force-release of `resource`, or a purge, may have run between two
/// things the server did at its times `from_ms` and `to_ms` (with [`RELEASE_SLACK`],
/// compared in our instants: [`ran_between`]): it, not the holder's release, may have
/// removed an entry then.
fn operator_between(history: &History, resource: &str, from_ms: i64, to_ms: i64) -> bool {
    history.ops.iter().any(|op| {
        let about = match &op.kind {
            OpKind::ForceRelease(r) => r == resource,
            OpKind::Purge => true,
            OpKind::ClockJump(_) | OpKind::ClockStep { .. } => false,
        };
        about && ran_between(history, op, from_ms, to_ms)
    })
}

/// (S10): no attempt is granted again once a holder let go of its grant and the grant's
/// entry was removed while its lease lived (by the release, not by an operator or an
/// expiry).
fn late_copies(
    out: &mut Outcome,
    grants: &[Granted],
    history: &History,
    last: &HashMap<(&str, &str, i64), &HolderLog>,
) {
    let slack = RELEASE_SLACK.as_millis() as i64;
    for (_, attempt) in by_attempt(grants) {
        out.regrants += attempt.len() - 1;
        for (i, first) in attempt.iter().enumerate() {
            let key = (first.resource.as_str(), first.lock_id.as_str(), first.token);
            let Some(holder) = last.get(&key).filter(|h| h.mode != Mode::Group) else {
                continue;
            };
            let (Some(let_ms), Some(removed_ms), Some(removed_event)) = (
                let_go_ms(holder, history),
                first.removed_ms,
                first.removed_event,
            ) else {
                continue;
            };
            let leased = first
                .expires_ms
                .is_none_or(|e| removed_ms < e - first.delay_ms);
            if !leased
                || removed_ms < let_ms - slack
                || operator_between(history, &first.resource, let_ms, removed_ms)
            {
                continue;
            }
            for again in attempt[i + 1..].iter().filter(|g| g.event > removed_event) {
                out.violations.push((
                    ServerCheck::LateCopy,
                    format!(
                        "{}: lock id {}: the attempt granted token {} (holder {}, client {}, let go \
                         of at server time {let_ms}, its entry removed at {removed_ms}) was \
                         granted again at {}: token {}, an entry nobody holds",
                        first.resource,
                        first.lock_id,
                        first.token,
                        holder.id,
                        holder.client,
                        again.at_ms,
                        again.token
                    ),
                ));
            }
        }
    }
}

/// (S11) and its figures: how long each let-go lock stayed unusable (its entry, and later
/// grants of the same attempt), against the TTL plus [`COMMAND_TIMEOUT`].
fn let_gos(
    out: &mut Outcome,
    grants: &[Granted],
    history: &History,
    last: &HashMap<(&str, &str, i64), &HolderLog>,
) {
    let slack = RELEASE_SLACK.as_millis() as i64;
    let attempts = by_attempt(grants);
    let timeout_ms = COMMAND_TIMEOUT.as_millis() as i64;
    for g in grants {
        let Some(holder) = last.get(&(g.resource.as_str(), g.lock_id.as_str(), g.token)) else {
            continue;
        };
        let Some(let_ms) = let_go_ms(holder, history) else {
            continue;
        };
        let attempt = &attempts[&(g.resource.as_str(), g.lock_id.as_str(), g.nonce.as_str())];
        let later = attempt
            .iter()
            .filter(|again| again.token != g.token && again.at_ms >= let_ms - slack);
        let ends: Vec<Option<i64>> = std::iter::once(g.end_ms())
            .chain(later.map(|again| again.end_ms()))
            .collect();
        out.let_go_checked += 1;
        let until = ends
            .iter()
            .copied()
            .try_fold(i64::MIN, |m, e| e.map(|e| m.max(e)));
        let bound = g.ttl_ms.map(|ttl| ttl + timeout_ms);
        // The entry's end was stamped by the primary that wrote it last, before the bound
        // ran out: counted on the clock the let-go was read on.
        let faster = match (holder.released_at, bound) {
            (Some(let_at), Some(bound)) => faster_since(
                history,
                holder.attempt_sent_at,
                let_at + Duration::from_millis(bound.max(0) as u64),
                let_at,
            ),
            _ => 0,
        };
        if faster > 0 {
            out.across_clocks += 1;
        }
        let unusable = until.map(|until| (until - faster - let_ms).max(0));
        if let Some(unusable) = unusable {
            out.let_go_unusable_ms.push(unusable as f64);
        }
        let over = match (unusable, bound) {
            (Some(unusable), Some(bound)) => unusable > bound,
            // No TTL: nothing bounds it.
            (Some(_), None) => false,
            (None, _) => true,
        };
        if over {
            out.let_go_over_bound += 1;
            out.violations.push((
                ServerCheck::LetGo,
                format!(
                    "{}: lock id {} token {}: holder {} (client {}, {:?}) let go of it at server \
                     time {let_ms}; its lock stayed unusable {} (bound {})",
                    g.resource,
                    g.lock_id,
                    g.token,
                    holder.id,
                    holder.client,
                    holder.let_go,
                    unusable.map_or_else(|| "for good".to_owned(), |u| format!("{u} ms")),
                    bound.map_or_else(|| "-".to_owned(), |b| format!("{b} ms")),
                ),
            ));
        }
    }
}

/// The grants by (resource, lock id, token).
fn by_key(grants: &[Granted]) -> HashMap<(&str, &str, i64), &Granted> {
    grants
        .iter()
        .map(|g| ((g.resource.as_str(), g.lock_id.as_str(), g.token), g))
        .collect()
}

/// (S7): no entry outlives the last holder that believed in it by more than its TTL plus
/// the renewal period plus [`OUTLIVE_SLACK`].
fn outlived(out: &mut Outcome, grants: &[Granted], history: &History) {
    // The holder whose belief in each grant ended last, and the first send of an attempt
    // by any of its holders: the grant and every renewal came after it, each stamped by the
    // primary of its moment.
    let mut last: HashMap<(&str, &str, i64), &HolderLog> = HashMap::new();
    let mut first_sent: HashMap<(&str, &str, i64), std::time::Instant> = HashMap::new();
    for h in &history.holders {
        let key = (h.resource.as_str(), h.lock_id.as_str(), h.token);
        let sent = first_sent.entry(key).or_insert(h.attempt_sent_at);
        *sent = (*sent).min(h.attempt_sent_at);
        let later = last
            .get(&key)
            .is_none_or(|l| l.belief_end(history.end) < h.belief_end(history.end));
        if later {
            last.insert(key, h);
        }
    }
    let calls: HashMap<&str, &AcquireCall> = history
        .acquire_calls
        .iter()
        .map(|c| (c.lock_id.as_str(), c))
        .collect();
    let slack_ms = OUTLIVE_SLACK.as_millis() as i64;
    for (key, g) in by_key(grants) {
        let Some(holder) = last.get(&key) else {
            // Believed by nobody: (S6) bounds its life; its call, if known, its renewals.
            if let Some(call) = calls.get(g.lock_id.as_str()) {
                renewed_after_call(out, g, call, history);
            }
            continue;
        };
        let stopped = holder.belief_end(history.end);
        let Some(stopped_ms) = history.server_ms(stopped) else {
            continue; // no readings of the server's clock: nothing to compare with
        };
        out.outlived_checked += 1;
        let end = g.end_ms();
        if let Some(end) = end {
            out.longest_outlived_ms = out.longest_outlived_ms.max(end - stopped_ms);
        }
        let bound = g.ttl_ms.map(|ttl| {
            let renewed_by = stopped + Duration::from_millis((ttl / 3 + slack_ms).max(0) as u64);
            // From the first holder's send, not the last's: a holder that resumed the grant
            // after a failover asked after a primary whose clock was ahead had stamped its
            // expiry (`--replset --long --seed 41090`, replayed: 4.4 s ahead).
            let since = first_sent
                .get(&key)
                .copied()
                .unwrap_or(holder.attempt_sent_at);
            let faster = faster_since(history, since, renewed_by, stopped);
            if faster > 0 {
                out.across_clocks += 1;
            }
            stopped_ms + ttl + ttl / 3 + slack_ms + faster
        });
        let within = match (end, bound) {
            (Some(end), Some(bound)) => end <= bound,
            // No TTL: only a removal ends it, and nothing bounds when.
            (Some(_), None) => true,
            (None, _) => false,
        };
        if within {
            continue;
        }
        let ttl = Duration::from_millis(g.ttl_ms.unwrap_or(0).max(0) as u64);
        if blocked(history, holder.client, stopped, ttl) {
            out.outlived_excused += 1;
            continue;
        }
        let renewed_after = g
            .renewals
            .iter()
            .filter(|&&r| r > stopped_ms + slack_ms)
            .count();
        out.violations.push((
            ServerCheck::Orphans,
            format!(
                "{}: lock id {} token {}: its last holder {} (client {}, {:?}) stopped believing at \
                 server time {stopped_ms}, yet the entry {} (bound {}); renewed {renewed_after} \
                 time(s) after",
                g.resource,
                g.lock_id,
                g.token,
                holder.id,
                holder.client,
                holder.let_go,
                match end {
                    Some(end) => format!("lasted until {end}, {} ms later", end - stopped_ms),
                    None => "never ended (no TTL)".to_owned(),
                },
                bound.map_or_else(|| "-".to_owned(), |b| b.to_string()),
            ),
        ));
    }
}

/// True if `client` had a `blockConnection` fail point from `ttl` + 1 s before `at` until
/// `at`: a command it sent then may run on the server whenever the block ends.
fn blocked(history: &History, client: usize, at: std::time::Instant, ttl: Duration) -> bool {
    history.faults.iter().any(|f| {
        f.kind == FaultKind::BlockConnection
            && f.client == Some(client)
            && f.start <= at
            && f.end + ttl + Duration::from_secs(1) >= at
    })
}

/// (S7) for a grant nobody believed in, made by the acquire call `call`: no renewal later
/// than a renewal period plus [`OUTLIVE_SLACK`] after the call ended.
fn renewed_after_call(out: &mut Outcome, g: &Granted, call: &AcquireCall, history: &History) {
    let Some(ended_ms) = history.server_ms(call.ended_at) else {
        return;
    };
    out.unbelieved_checked += 1;
    if g.at_ms > ended_ms + RELEASE_SLACK.as_millis() as i64 {
        out.late_grants += 1;
    }
    let ttl_ms = g.ttl_ms.unwrap_or(0).max(0);
    let period_ms = ttl_ms / 3 + OUTLIVE_SLACK.as_millis() as i64;
    let renewed_by = call.ended_at + Duration::from_millis(period_ms as u64);
    let faster = faster_since(history, call.invoked_at, renewed_by, call.ended_at);
    if faster > 0 {
        out.across_clocks += 1;
    }
    let after = ended_ms + period_ms + faster;
    let late: Vec<i64> = g.renewals.iter().copied().filter(|&r| r > after).collect();
    let Some(last) = late.last() else {
        return;
    };
    let ttl = Duration::from_millis(ttl_ms as u64);
    if blocked(history, call.client, call.ended_at, ttl) {
        out.outlived_excused += 1;
        return;
    }
    out.violations.push((
        ServerCheck::Orphans,
        format!(
            "{}: lock id {} token {}: granted to nobody (its acquire call, of client {}, ended at \
             server time {ended_ms}{}), yet renewed {} time(s) after {after}, the last at {last}",
            g.resource,
            g.lock_id,
            g.token,
            call.client,
            if call.granted {
                " with another grant"
            } else {
                " without a guard"
            },
            late.len(),
        ),
    ));
}

/// The lowest reading of the server's clock at our instant `from` or after: the server's
/// time at `from` ([`History::server_ms`]), or lower if the clock stepped back later (the
/// harness reads it right after every step). A server time below this was read before
/// `from`; one at or above it may have been read after `from`, even if it is below the
/// server's time at `from`: after a step back the server's clock reads again times it read
/// before. `None` without readings.
///
/// Comparing a server time of the log with `server_ms(from)` alone takes a removal made
/// after `from` and after a step back (so at a lower server time) for one made before
/// `from`: (S8) fired so on a release that began just before a step back of 0.5–1 s and
/// whose grant was removed just after it (--long --seed 131071, run 131071, rerun alone).
fn earliest_server_ms_from(history: &History, from: std::time::Instant) -> Option<i64> {
    let at_from = history.server_ms(from)?;
    let later = (history.server_clock.iter())
        .filter(|(at, _)| *at > from)
        .map(|(_, ms)| *ms);
    Some(later.fold(at_from, i64::min))
}

/// (S8): a handle holder's release that returned `Ok` was not for a grant the server had
/// removed (by [`RELEASE_SLACK`]) before the release began: removed at a server time below
/// every reading of the server's clock from the release's start on
/// ([`earliest_server_ms_from`], so that a step back of the clock after the release began
/// does not make a removal after it look earlier). (The converse is not judged: a
/// release that says `LeaseLost` may have raced an operator, or an acquire that cleared the
/// entry once it expired, and the log does not say who removed an entry.)
fn releases(out: &mut Outcome, grants: &[Granted], history: &History) {
    let grants = by_key(grants);
    let slack_ms = RELEASE_SLACK.as_millis() as i64;
    for h in &history.holders {
        if h.mode == Mode::Group || h.release != Some(ReleaseResult::Ok) {
            continue;
        }
        let (Some(began), Some(g)) = (
            h.released_at,
            grants.get(&(h.resource.as_str(), h.lock_id.as_str(), h.token)),
        ) else {
            continue; // a token never granted is (S5)'s
        };
        let Some(began_ms) = earliest_server_ms_from(history, began) else {
            continue;
        };
        out.releases_checked += 1;
        let at_start = history.server_ms(began).unwrap_or(began_ms);
        if g.removed_ms
            .is_some_and(|r| r < at_start - slack_ms && r >= began_ms - slack_ms)
        {
            out.releases_after_step_back += 1;
        }
        if let Some(removed) = g.removed_ms
            && removed < began_ms - slack_ms
        {
            out.violations.push((
                ServerCheck::ReleaseOk,
                format!(
                    "{}: holder {} (client {}, token {}) got Ok from release() begun at server time \
                     {began_ms}, but the server had removed the grant at {removed}, {} ms before",
                    h.resource,
                    h.id,
                    h.client,
                    h.token,
                    began_ms - removed
                ),
            ));
        }
    }
}

fn kind(entry: &Entry) -> &'static str {
    if entry.exclusive {
        "exclusive"
    } else {
        "shared"
    }
}

/// A document the oracle cannot read as a lock document. The workloads write none, so it is
/// reported (as an incomplete log) rather than skipped in silence.
fn unreadable(out: &mut Outcome, resource: &str, why: &str) {
    out.violations.push((
        ServerCheck::Incomplete,
        format!("{resource}: a committed document the oracle cannot read ({why})"),
    ));
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use bson::oid::ObjectId;
    use bson::{Bson, DateTime};
    use mongolock::LockClient;
    use mongolock_testkit::TestServer;

    use super::*;
    use crate::history::{AcquireCall, GuardLog, LetGo, LossKind, Recorder};

    fn history(holders: Vec<HolderLog>) -> History {
        let mut history = Recorder::new().finish(HashMap::new());
        history.holders = holders;
        history
    }

    /// An entry granted at `created` (ms), renewed at `renewed`, expiring at `expires`.
    fn entry(nonce: &ObjectId, token: i64, created: i64, renewed: i64, expires: i64) -> Bson {
        Bson::Document(doc! {
            "lockId": format!("id-{token}"),
            "nonce": *nonce,
            "token": token,
            "createdAt": DateTime::from_millis(created),
            "renewedAt": DateTime::from_millis(renewed),
            "expiresAt": DateTime::from_millis(expires),
        })
    }

    #[test]
    fn an_entry_not_yet_renewed_reads_as_renewed_at_its_creation() {
        let nonce = ObjectId::new();
        let Bson::Document(mut stored) = entry(&nonce, 7, 1_000, 2_000, 31_000) else {
            unreachable!()
        };
        stored.remove("renewedAt");
        let read = super::entry(&stored, true).expect("readable without renewedAt");
        assert_eq!((read.created_ms, read.renewed_ms), (1_000, 1_000));
        stored.insert("renewedAt", "soon");
        assert!(
            super::entry(&stored, true).is_err(),
            "a renewedAt of another type"
        );
    }

    fn event(at_ms: i64, exclusive: Option<Bson>, shared: Vec<Bson>) -> ServerEvent {
        ServerEvent {
            resource: "r".into(),
            at_ms,
            doc: Some(doc! {
                "_id": "r",
                "exclusive": exclusive.unwrap_or(Bson::Null),
                "shared": shared,
            }),
        }
    }

    fn run(events: &[ServerEvent]) -> BTreeMap<ServerCheck, usize> {
        let permits = HashMap::from([("r".to_string(), 2)]);
        check(
            events,
            &history(Vec::new()),
            &permits,
            Duration::from_secs(10),
            &MinHolds::new(),
        )
        .by_check()
    }

    /// A place in line for `token`'s lock id (see [`entry`]), until `until` (ms).
    fn place(token: i64, kind: &str, until: i64) -> Bson {
        Bson::Document(doc! {
            "lockId": format!("id-{token}"),
            "kind": kind,
            "until": DateTime::from_millis(until),
        })
    }

    /// [`event`], with a line.
    fn queued(
        at_ms: i64,
        exclusive: Option<Bson>,
        shared: Vec<Bson>,
        line: Vec<Bson>,
    ) -> ServerEvent {
        let mut event = event(at_ms, exclusive, shared);
        if let Some(doc) = event.doc.as_mut() {
            doc.insert("queue", line);
        }
        event
    }

    #[test]
    fn a_grant_past_a_live_place_in_line_is_caught_and_one_in_order_passes() {
        let (a, b, c) = (ObjectId::new(), ObjectId::new(), ObjectId::new());
        // A holds; B (token 11's lock id) then C (12) join the line.
        let waiting = queued(
            1_000,
            Some(entry(&a, 10, 1_000, 1_000, 5_000)),
            vec![],
            vec![place(11, "exclusive", 9_000), place(12, "exclusive", 9_000)],
        );
        // A released; B, the head, is granted: in order.
        let released = queued(
            2_000,
            None,
            vec![],
            vec![place(11, "exclusive", 9_000), place(12, "exclusive", 9_000)],
        );
        let to_b = queued(
            2_100,
            Some(entry(&b, 11, 2_100, 2_100, 5_000)),
            vec![],
            vec![place(12, "exclusive", 9_000)],
        );
        assert!(run(&[waiting.clone(), released.clone(), to_b]).is_empty());
        // C granted while B still waits before it: caught.
        let to_c = queued(
            2_100,
            Some(entry(&c, 12, 2_100, 2_100, 5_000)),
            vec![],
            vec![place(11, "exclusive", 9_000)],
        );
        assert_eq!(
            run(&[waiting.clone(), released.clone(), to_c]),
            BTreeMap::from([(ServerCheck::Order, 1)])
        );
        // Unless B's place had lapsed.
        let lapsed = queued(
            2_000,
            None,
            vec![],
            vec![place(11, "exclusive", 2_050), place(12, "exclusive", 9_000)],
        );
        let to_c = queued(
            2_100,
            Some(entry(&c, 12, 2_100, 2_100, 5_000)),
            vec![],
            vec![],
        );
        assert!(run(&[waiting, lapsed, to_c]).is_empty());
    }

    #[test]
    fn readers_share_past_readers_but_not_past_a_writer_or_the_cap() {
        let (r1, r2, r3) = (ObjectId::new(), ObjectId::new(), ObjectId::new());
        // Free, with a reader (11) in line before another (12): 12 may go first.
        let line = vec![place(11, "shared", 9_000), place(12, "shared", 9_000)];
        let free = queued(1_000, None, vec![], line.clone());
        let to_12 = queued(
            1_100,
            None,
            vec![entry(&r2, 12, 1_100, 1_100, 5_000)],
            vec![place(11, "shared", 9_000)],
        );
        assert!(run(&[free.clone(), to_12.clone()]).is_empty());
        // But not past a writer.
        let writer_first = queued(
            1_000,
            None,
            vec![],
            vec![place(11, "exclusive", 9_000), place(12, "shared", 9_000)],
        );
        assert_eq!(
            run(&[writer_first, to_12]),
            BTreeMap::from([(ServerCheck::Order, 1)])
        );
        // Under the cap of 2 (see `run`), with one permit held, the one left is the head's.
        let one_held = queued(1_000, None, vec![entry(&r1, 10, 900, 900, 5_000)], line);
        let to_12 = queued(
            1_100,
            None,
            vec![
                entry(&r1, 10, 900, 900, 5_000),
                entry(&r2, 12, 1_100, 1_100, 5_000),
            ],
            vec![place(11, "shared", 9_000)],
        );
        assert_eq!(
            run(&[one_held.clone(), to_12]),
            BTreeMap::from([(ServerCheck::Order, 1)])
        );
        let to_11 = queued(
            1_100,
            None,
            vec![
                entry(&r1, 10, 900, 900, 5_000),
                entry(&r3, 11, 1_100, 1_100, 5_000),
            ],
            vec![place(12, "shared", 9_000)],
        );
        assert!(run(&[one_held, to_11]).is_empty());
    }

    #[test]
    fn a_handoff_after_expiry_passes_and_one_before_it_is_caught() {
        let (a, b) = (ObjectId::new(), ObjectId::new());
        let granted_a = event(1_000, Some(entry(&a, 10, 1_000, 1_000, 2_000)), vec![]);
        // B granted at 2,000: A expired at 2,000 (an entry is live while expiresAt > now).
        let on_time = event(2_000, Some(entry(&b, 11, 2_000, 2_000, 3_000)), vec![]);
        assert!(run(&[granted_a.clone(), on_time]).is_empty());
        let early = event(1_999, Some(entry(&b, 11, 1_999, 1_999, 3_000)), vec![]);
        assert_eq!(
            run(&[granted_a, early]),
            BTreeMap::from([(ServerCheck::Exclusion, 1)])
        );
    }

    #[test]
    fn a_release_before_the_next_grant_is_no_overlap() {
        let (a, b) = (ObjectId::new(), ObjectId::new());
        let events = [
            event(1_000, Some(entry(&a, 10, 1_000, 1_000, 9_000)), vec![]),
            ServerEvent {
                resource: "r".into(),
                at_ms: 1_500,
                doc: None,
            },
            event(1_600, Some(entry(&b, 11, 1_600, 1_600, 9_000)), vec![]),
        ];
        assert!(run(&events).is_empty());
    }

    #[test]
    fn tokens_must_grow_across_deleted_documents() {
        let (a, b) = (ObjectId::new(), ObjectId::new());
        let deleted = ServerEvent {
            resource: "r".into(),
            at_ms: 1_500,
            doc: None,
        };
        let first = event(1_000, Some(entry(&a, 10, 1_000, 1_000, 1_200)), vec![]);
        let reset = event(2_000, Some(entry(&b, 1, 2_000, 2_000, 3_000)), vec![]);
        assert_eq!(
            run(&[first.clone(), deleted.clone(), reset]),
            BTreeMap::from([(ServerCheck::Fencing, 1)])
        );
        let grown = event(2_000, Some(entry(&b, 11, 2_000, 2_000, 3_000)), vec![]);
        assert!(run(&[first, deleted, grown]).is_empty());
    }

    #[test]
    fn shared_entries_respect_the_cap_and_the_exclusive_holder() {
        let [a, b, c, x] = [(); 4].map(|_| ObjectId::new());
        let two = event(
            1_000,
            None,
            vec![
                entry(&a, 10, 1_000, 1_000, 5_000),
                entry(&b, 11, 1_000, 1_000, 5_000),
            ],
        );
        assert!(run(std::slice::from_ref(&two)).is_empty());
        let three = event(
            1_100,
            None,
            vec![
                entry(&a, 10, 1_000, 1_000, 5_000),
                entry(&b, 11, 1_000, 1_000, 5_000),
                entry(&c, 12, 1_100, 1_100, 5_000),
            ],
        );
        assert_eq!(
            run(&[two.clone(), three]),
            BTreeMap::from([(ServerCheck::Caps, 1)])
        );
        let writer = event(
            1_100,
            Some(entry(&x, 12, 1_100, 1_100, 5_000)),
            vec![
                entry(&a, 10, 1_000, 1_000, 5_000),
                entry(&b, 11, 1_000, 1_000, 5_000),
            ],
        );
        assert_eq!(
            run(&[two, writer]),
            BTreeMap::from([(ServerCheck::Exclusion, 2)])
        );
    }

    #[test]
    fn an_attempt_granted_again_after_its_first_grant_expired_is_a_new_grant() {
        let a = ObjectId::new();
        let first = event(1_000, Some(entry(&a, 10, 1_000, 1_000, 2_000)), vec![]);
        let again = event(3_000, Some(entry(&a, 11, 3_000, 3_000, 4_000)), vec![]);
        let permits = HashMap::new();
        let outcome = check(
            &[first, again],
            &history(Vec::new()),
            &permits,
            Duration::ZERO,
            &MinHolds::new(),
        );
        assert_eq!(outcome.grants, 2);
        assert_eq!(outcome.renewals, 0);
        // Both are orphans here; the first ended at its expiry, not when it was dropped.
        assert_eq!(outcome.longest_orphan_ms, 1_000);
        assert!(outcome.violations.is_empty(), "{:?}", outcome.violations);
    }

    #[test]
    fn renewing_an_expired_entry_is_a_revival() {
        let a = ObjectId::new();
        let granted = event(1_000, Some(entry(&a, 10, 1_000, 1_000, 2_000)), vec![]);
        let in_time = event(1_900, Some(entry(&a, 10, 1_000, 1_900, 2_900)), vec![]);
        assert!(run(&[granted.clone(), in_time]).is_empty());
        let late = event(2_100, Some(entry(&a, 10, 1_000, 2_100, 3_100)), vec![]);
        assert_eq!(
            run(&[granted, late]),
            BTreeMap::from([(ServerCheck::Revival, 1)])
        );
    }

    #[test]
    fn a_grant_nobody_believed_must_end_within_the_bound() {
        let a = ObjectId::new();
        let granted = event(1_000, Some(entry(&a, 10, 1_000, 1_000, 2_000)), vec![]);
        let renewed = |at: i64| event(at, Some(entry(&a, 10, 1_000, at, at + 1_000)), vec![]);
        // Bound: 10 s + ORPHAN_SLACK; renewed every 900 ms, each renewal in time.
        let renewals = |until: i64| {
            let mut events = vec![granted.clone()];
            events.extend(
                (1..)
                    .map(|i| 1_000 + 900 * i)
                    .take_while(|&at| at <= until)
                    .map(renewed),
            );
            events
        };
        assert!(run(&renewals(9_000)).is_empty());
        let stranded = renewals(12_000);
        assert_eq!(
            run(&stranded),
            BTreeMap::from([(ServerCheck::Unbelieved, 1)])
        );
    }

    #[test]
    fn a_grant_nobody_believed_may_live_its_own_longer_ttl() {
        let a = ObjectId::new();
        // Its TTL, 15 s, is longer than the bound's 10 s (the clock-step workload's 6 s
        // beside the workload's 1.5 s): it may live it, nobody renewing it.
        let long = event(1_000, Some(entry(&a, 10, 1_000, 1_000, 16_000)), vec![]);
        assert!(run(std::slice::from_ref(&long)).is_empty());
        // Renewed past its own TTL, though nobody believed in it: past the bound.
        let renewed = event(15_000, Some(entry(&a, 10, 1_000, 15_000, 30_000)), vec![]);
        assert_eq!(
            run(&[long, renewed]),
            BTreeMap::from([(ServerCheck::Unbelieved, 1)])
        );
    }

    /// A history in which the server's clock read 0 ms at `t0`, with `holders`.
    fn timed(t0: Instant, holders: Vec<HolderLog>) -> History {
        let mut h = history(holders);
        h.server_clock = vec![(t0, 0)];
        h
    }

    /// The holder of token 10 on "r" (lock id "id-10", granted at 1,000 ms), which stopped
    /// believing at `stopped` ms, as `let_go` says.
    fn believer(t0: Instant, stopped: u64, let_go: LetGo) -> HolderLog {
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut h = HolderLog::granted(1, 0, Mode::Exclusive, "r", 10);
        h.lock_id = "id-10".into();
        h.granted_at = at(1_000);
        h.released_at = Some(at(stopped));
        h.let_go = Some(let_go);
        h
    }

    /// Token 10 granted at 1,000 ms (TTL 1 s), renewed every 300 ms until `until`.
    fn renewed_until(until: i64) -> Vec<ServerEvent> {
        let a = ObjectId::new();
        let mut events = vec![event(
            1_000,
            Some(entry(&a, 10, 1_000, 1_000, 2_000)),
            vec![],
        )];
        events.extend(
            (1..)
                .map(|i| 1_000 + 300 * i)
                .take_while(|&at| at <= until)
                .map(|at| event(at, Some(entry(&a, 10, 1_000, at, at + 1_000)), vec![])),
        );
        events
    }

    fn judge(events: &[ServerEvent], history: &History) -> Outcome {
        check(
            events,
            history,
            &HashMap::new(),
            Duration::from_secs(10),
            &MinHolds::new(),
        )
    }

    #[test]
    fn an_entry_may_outlive_its_last_holder_by_the_ttl_and_a_renewal_period_and_no_more() {
        let t0 = Instant::now();
        // The holder dropped its guard at 2,000 ms (nothing released it). Bound: 2,000 + TTL
        // 1,000 + renewal period 333 + slack 1,000 = 4,333 ms.
        let history = timed(t0, vec![believer(t0, 2_000, LetGo::DroppedWithoutRuntime)]);
        // The last renewal, in flight at the drop, commits at 2,200: the entry ends at 3,200.
        let ended = judge(&renewed_until(2_200), &history);
        assert!(ended.violations.is_empty(), "{:?}", ended.violations);
        assert_eq!(ended.outlived_checked, 1);
        assert_eq!(ended.longest_outlived_ms, 1_200);
        // Renewed on until 5,800: it lasts until 6,800, an orphan kept alive.
        let kept = judge(&renewed_until(5_800), &history);
        assert_eq!(
            kept.by_check(),
            BTreeMap::from([(ServerCheck::Orphans, 1)]),
            "{:?}",
            kept.violations
        );
        // Not if its last holder believed until 5,000 (a second holder of the same grant
        // cannot exist, but the latest belief is what counts).
        let mut later = history.clone();
        later.holders.push(believer(t0, 5_000, LetGo::Released));
        assert!(judge(&renewed_until(5_800), &later).violations.is_empty());
        // ... and excused if a blocked command of its client may have renewed it late.
        let mut blocked = history;
        blocked.faults.push(crate::history::FaultEvent {
            kind: FaultKind::BlockConnection,
            client: Some(0),
            start: t0 + Duration::from_millis(1_500),
            end: t0 + Duration::from_millis(1_600),
        });
        let excused = judge(&renewed_until(5_800), &blocked);
        assert!(excused.violations.is_empty(), "{:?}", excused.violations);
        assert_eq!(excused.outlived_excused, 1);
    }

    /// Token 10 granted at 1,000 with a TTL of 5 s, renewed at 2,667 on a primary whose
    /// clock is the shared one, then at each of `later`, written by a primary 3,600 ms
    /// ahead (each before the entry's expiry by that primary's clock, as it renews).
    fn renewed_across_a_failover(later: &[i64]) -> Vec<ServerEvent> {
        let a = ObjectId::new();
        let mut events = vec![event(
            1_000,
            Some(entry(&a, 10, 1_000, 1_000, 6_000)),
            vec![],
        )];
        events.extend(
            std::iter::once(2_667)
                .chain(later.iter().copied())
                .map(|at| event(at, Some(entry(&a, 10, 1_000, at, at + 5_000)), vec![])),
        );
        events
    }

    #[test]
    fn an_entry_renewed_on_a_primary_whose_clock_is_ahead_has_not_outlived_its_holder() {
        // The false (S7) of `--replset --quick --seed 41002`: the holder dropped its guard at
        // 3,000 ms, read at server time 3,000 (bound 3,000 + TTL 5,000 + renewal period 1,666
        // + slack 1,000 = 10,666); at 3,100 ms the primary's clock reads 3,600 ms ahead (a
        // failover to a member ahead), and the last renewal, in flight at the drop, commits
        // there at 3,200 ms: at its time 6,800, the entry ending at 11,800, past the bound by
        // the two clocks' numbers, 8,000 ms after the drop on one clock.
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut history = timed(t0, vec![believer(t0, 3_000, LetGo::DroppedWithoutRuntime)]);
        history.server_clock.push((at(3_100), 6_700));
        history.server_offsets = vec![(at(3_100), 3_600)];
        let ended = judge(&renewed_across_a_failover(&[6_800]), &history);
        assert!(ended.violations.is_empty(), "{:?}", ended.violations);
        assert_eq!(ended.outlived_checked, 1);
        // Renewed on by the new primary until its time 16,802 (13,202 ms after t0 on the
        // shared clock): an orphan kept alive across the failover is still caught.
        let kept = judge(
            &renewed_across_a_failover(&[6_800, 8_467, 10_134, 11_801, 13_468, 15_135, 16_802]),
            &history,
        );
        // (Unusable that long after the let-go, it is (S11)'s too.)
        assert_eq!(
            kept.by_check().get(&ServerCheck::Orphans),
            Some(&1),
            "{:?}",
            kept.violations
        );
    }

    #[test]
    fn an_entry_stamped_by_a_primary_ahead_before_its_last_holder_asked_has_not_outlived_it() {
        // The (S7) of `--replset --long --seed 41090`, replayed: token 10 (TTL 1.5 s) granted
        // at 1,000 ms by a primary whose clock read 3,600 ms ahead (created 4,600, expiring
        // 6,100 by that clock); at 1,500 ms a failover to a primary on the shared clock; the
        // holder's process dies, and its restart, asking at 2,000 ms, resumes the grant and
        // releases it at 3,000 ms (server time 3,000), its release lost; the entry ends at
        // its expiry, 6,100, past 3,000 + 1,500 + 500 + 1,000 on one clock, but stamped by the
        // clock 3,600 ms ahead: 2,500 ms after the release by the clock that stamped it.
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut first = believer(t0, 1_500, LetGo::Abandoned);
        first.attempt_sent_at = at(900);
        let mut resumed = believer(t0, 3_000, LetGo::Released);
        resumed.id = 2;
        (resumed.invoked_at, resumed.attempt_sent_at) = (at(2_000), at(2_000));
        resumed.granted_at = at(2_050);
        let mut history = timed(t0, vec![first, resumed]);
        history.server_offsets = vec![(at(0), 3_600), (at(1_500), 0)];
        let a = ObjectId::new();
        let granted = event(4_600, Some(entry(&a, 10, 4_600, 4_600, 6_100)), vec![]);
        let expired = ServerEvent {
            resource: "r".into(),
            at_ms: 6_200,
            doc: Some(doc! { "_id": "r", "exclusive": Bson::Null, "shared": [] }),
        };
        let ended = judge(&[granted.clone(), expired.clone()], &history);
        assert_eq!(
            ended.by_check().get(&ServerCheck::Orphans),
            None,
            "{:?}",
            ended.violations
        );
        // Renewed on by the second primary (its own clock) long after the release: caught.
        let renewed = event(5_000, Some(entry(&a, 10, 4_600, 5_000, 11_000)), vec![]);
        let kept = ServerEvent {
            at_ms: 11_100,
            ..expired
        };
        let caught = judge(&[granted, renewed, kept], &history);
        assert_eq!(
            caught.by_check().get(&ServerCheck::Orphans),
            Some(&1),
            "{:?}",
            caught.violations
        );
    }

    #[test]
    fn a_grant_nobody_believed_is_not_renewed_after_its_acquire_call_ended() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // The call that made token 10 (lock id "id-10") was dropped at 1,100 ms, its grant
        // on the way back. Renewals are allowed until 1,100 + 333 + 1,000 = 2,433 ms.
        let mut history = timed(t0, Vec::new());
        history.acquire_calls.push(AcquireCall {
            client: 3,
            resource: "r".into(),
            lock_id: "id-10".into(),
            invoked_at: at(900),
            ended_at: at(1_100),
            granted: false,
            timeout: None,
        });
        let expired = judge(&renewed_until(1_300), &history);
        assert!(expired.violations.is_empty(), "{:?}", expired.violations);
        assert_eq!(expired.unbelieved_checked, 1);
        assert_eq!(
            expired.late_grants, 0,
            "granted at 1,000, before the call ended"
        );
        let kept = judge(&renewed_until(3_000), &history);
        assert_eq!(
            kept.by_check(),
            BTreeMap::from([(ServerCheck::Orphans, 1)]),
            "{:?}",
            kept.violations
        );
        // A grant of a call the history does not know (the observer's, a group's) is left
        // to (S6).
        history.acquire_calls[0].lock_id = "another".into();
        assert!(judge(&renewed_until(3_000), &history).violations.is_empty());
    }

    #[test]
    fn a_release_returning_ok_for_a_grant_the_server_had_removed_is_caught() {
        let t0 = Instant::now();
        let a = ObjectId::new();
        let granted = event(1_000, Some(entry(&a, 10, 1_000, 1_000, 9_000)), vec![]);
        let removed = |at: i64| ServerEvent {
            resource: "r".into(),
            at_ms: at,
            doc: None,
        };
        let mut holder = believer(t0, 2_000, LetGo::Released);
        holder.release = Some(ReleaseResult::Ok);
        let history = timed(t0, vec![holder]);
        // Its own release removed it, at 2,010 ms.
        let own = judge(&[granted.clone(), removed(2_010)], &history);
        assert!(own.violations.is_empty(), "{:?}", own.violations);
        assert_eq!(own.releases_checked, 1);
        // An operator had removed it at 1,500 ms, before the release began.
        let revoked = judge(&[granted.clone(), removed(1_500)], &history);
        assert_eq!(
            revoked.by_check(),
            BTreeMap::from([(ServerCheck::ReleaseOk, 1)])
        );
        // A release that reported the loss told the truth.
        let mut honest = history;
        honest.holders[0].release = Some(ReleaseResult::Lost(LossKind::Revoked));
        let told = judge(&[granted, removed(1_500)], &honest);
        assert!(told.violations.is_empty(), "{:?}", told.violations);
        assert_eq!(told.releases_checked, 0);
    }

    #[test]
    fn a_removal_after_a_step_back_is_not_taken_for_one_before_the_release() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let a = ObjectId::new();
        let granted = event(1_000, Some(entry(&a, 10, 1_000, 1_000, 9_000)), vec![]);
        let removed = |at: i64| ServerEvent {
            resource: "r".into(),
            at_ms: at,
            doc: None,
        };
        let mut holder = believer(t0, 2_000, LetGo::Released);
        holder.release = Some(ReleaseResult::Ok);
        let mut history = timed(t0, vec![holder]);
        // The server's clock steps back 800 ms at 2,100 ms (read just before and after); the
        // release, begun at 2,000 ms, removes the grant at 2,200 ms, server time 1,400.
        history
            .server_clock
            .extend([(at(2_100), 2_100), (at(2_101), 1_301)]);
        let own = judge(&[granted.clone(), removed(1_400)], &history);
        assert!(own.violations.is_empty(), "{:?}", own.violations);
        assert_eq!((own.releases_checked, own.releases_after_step_back), (1, 1));
        // The old comparison, with the server's time at the release's start alone: (S8).
        assert!(1_400 < history.server_ms(at(2_000)).unwrap() - 50);
        // A removal before the release began is still caught: at 1,250 the server's clock
        // never read that again from 2,000 ms on.
        let revoked = judge(&[granted, removed(1_250)], &history);
        assert_eq!(
            revoked.by_check(),
            BTreeMap::from([(ServerCheck::ReleaseOk, 1)])
        );
    }

    /// An entry of lock id "id-10" for `nonce` with `token`, granted at `created` (ms) and
    /// expiring at `expires`.
    fn attempt_entry(nonce: &ObjectId, token: i64, created: i64, expires: i64) -> Bson {
        Bson::Document(doc! {
            "lockId": "id-10",
            "nonce": *nonce,
            "token": token,
            "createdAt": DateTime::from_millis(created),
            "renewedAt": DateTime::from_millis(created),
            "expiresAt": DateTime::from_millis(expires),
            "ttlMs": 1_000_i64,
        })
    }

    fn removed(at_ms: i64) -> ServerEvent {
        ServerEvent {
            resource: "r".into(),
            at_ms,
            doc: None,
        }
    }

    #[test]
    fn an_attempt_granted_again_after_its_release_landed_is_a_late_copy() {
        let t0 = Instant::now();
        let a = ObjectId::new();
        // Token 10 granted at 1,000 ms, let go of at 2,000, its entry removed at 2,010; the
        // attempt is granted token 11 at 3,000.
        let granted = event(1_000, Some(attempt_entry(&a, 10, 1_000, 2_400)), vec![]);
        let again = event(3_000, Some(attempt_entry(&a, 11, 3_000, 4_000)), vec![]);
        let history = timed(t0, vec![believer(t0, 2_000, LetGo::Released)]);
        let late = judge(&[granted.clone(), removed(2_010), again.clone()], &history);
        assert_eq!(
            late.by_check(),
            BTreeMap::from([(ServerCheck::LateCopy, 1)]),
            "{:?}",
            late.violations
        );
        assert_eq!(late.regrants, 1);
        // Not if the first grant expired unseen and the repeat took its place (no let-go
        // removed it: the same write replaced it).
        let replaced = judge(&[granted.clone(), again.clone()], &timed(t0, Vec::new()));
        assert!(replaced.violations.is_empty(), "{:?}", replaced.violations);
        // Nor if its holder died rather than let go of it.
        let mut killed = believer(t0, 2_000, LetGo::Released);
        killed.released_at = None;
        killed.let_go = None;
        killed.killed_at = Some(t0 + Duration::from_millis(2_000));
        let died = judge(
            &[granted.clone(), removed(2_010), again.clone()],
            &timed(t0, vec![killed]),
        );
        assert!(died.violations.is_empty(), "{:?}", died.violations);
        // Nor if the entry was removed after it expired (by whoever cleared it), or by an
        // operator's force-release.
        let expired = judge(&[granted.clone(), removed(2_500), again.clone()], &history);
        assert!(expired.violations.is_empty(), "{:?}", expired.violations);
        let mut forced = history.clone();
        forced.ops.push(crate::history::OpEvent {
            kind: OpKind::ForceRelease("r".into()),
            start: t0 + Duration::from_millis(2_005),
            end: t0 + Duration::from_millis(2_008),
        });
        let operator = judge(&[granted, removed(2_010), again], &forced);
        assert!(operator.violations.is_empty(), "{:?}", operator.violations);
    }

    #[test]
    fn a_let_go_lock_must_be_usable_within_the_ttl_and_the_command_timeout() {
        let t0 = Instant::now();
        let a = ObjectId::new();
        let ttl_timeout = 1_000 + COMMAND_TIMEOUT.as_millis() as i64;
        // Let go of at 2,000 ms; renewed every 300 ms (TTL 1 s) until `until`.
        let renewed = |until: i64| {
            let mut events = vec![event(
                1_000,
                Some(attempt_entry(&a, 10, 1_000, 2_000)),
                vec![],
            )];
            events.extend(
                (1..)
                    .map(|i| 1_000 + 300 * i)
                    .take_while(|&at| at <= until)
                    .map(|at| {
                        let mut e = attempt_entry(&a, 10, 1_000, at + 1_000);
                        if let Bson::Document(d) = &mut e {
                            d.insert("renewedAt", DateTime::from_millis(at));
                        }
                        event(at, Some(e), vec![])
                    }),
            );
            events
        };
        let history = timed(t0, vec![believer(t0, 2_000, LetGo::DroppedWithoutRuntime)]);
        let ended = judge(&renewed(2_200), &history);
        assert_eq!(ended.let_go_checked, 1);
        assert_eq!(ended.let_go_unusable_ms, vec![1_200.0]);
        assert!(!ended.by_check().contains_key(&ServerCheck::LetGo));
        // Renewed on for long after: the lock stays unusable past the bound.
        let kept = judge(&renewed(2_000 + ttl_timeout), &history);
        assert_eq!(kept.by_check().get(&ServerCheck::LetGo), Some(&1));
        assert_eq!(kept.let_go_over_bound, 1);
        // A late copy of the attempt counts with it: granted at 2,500 ms, it lasts 1 s.
        let late = [
            event(1_000, Some(attempt_entry(&a, 10, 1_000, 2_000)), vec![]),
            removed(2_000),
            event(2_500, Some(attempt_entry(&a, 11, 2_500, 3_500)), vec![]),
        ];
        let stranded = judge(&late, &history);
        assert_eq!(stranded.let_go_unusable_ms, vec![1_500.0]);
    }

    /// Another lock id's entry with `token`, granted at `created` (ms), expiring a second
    /// later.
    fn next_entry(token: i64, created: i64) -> Bson {
        Bson::Document(doc! {
            "lockId": "next",
            "nonce": ObjectId::new(),
            "token": token,
            "createdAt": DateTime::from_millis(created),
            "renewedAt": DateTime::from_millis(created),
            "expiresAt": DateTime::from_millis(created + 1_000),
            "ttlMs": 1_000_i64,
        })
    }

    #[test]
    fn a_grant_inside_the_minimum_hold_of_a_lease_let_go_of_early_is_caught() {
        let t0 = Instant::now();
        let a = ObjectId::new();
        // Token 10 (holder 1) granted at 1,000 ms with a hold of 2 s, released at 1,200 ms.
        let holds = MinHolds::from([(1, Duration::from_secs(2))]);
        let granted = event(1_000, Some(attempt_entry(&a, 10, 1_000, 2_000)), vec![]);
        // The server keeps it until 3,000 ms, marked let go of.
        let mut kept = attempt_entry(&a, 10, 1_000, 3_000);
        if let Bson::Document(d) = &mut kept {
            d.insert("delayMs", 2_000_i64);
            d.insert("letGoAt", DateTime::from_millis(1_210));
        }
        let marked = event(1_210, Some(kept), vec![]);
        let history = timed(t0, vec![believer(t0, 1_200, LetGo::Released)]);
        let judge = |events: &[ServerEvent], history: &History| {
            check(
                events,
                history,
                &HashMap::new(),
                Duration::from_secs(10),
                &holds,
            )
        };
        let after = [
            granted.clone(),
            marked.clone(),
            event(3_000, Some(next_entry(11, 3_000)), vec![]),
        ];
        let kept = judge(&after, &history);
        assert!(kept.violations.is_empty(), "{:?}", kept.violations);
        assert_eq!((kept.min_hold_judged, kept.min_hold_within), (1, 1));
        assert_eq!(kept.min_hold_margins_ms, vec![0.0]);
        // The old behaviour: the release removes the entry, and the next is granted at once.
        let dropped = [
            granted.clone(),
            removed(1_210),
            event(1_300, Some(next_entry(11, 1_300)), vec![]),
        ];
        let caught = judge(&dropped, &history);
        assert_eq!(
            caught.by_check(),
            BTreeMap::from([(ServerCheck::MinHold, 1)]),
            "{:?}",
            caught.violations
        );
        // The report says what became of the entry, and the resource's writes in between.
        let report = &caught.violations[0].1;
        assert!(
            report.contains("its entry was removed")
                && report.contains("1000 id-10 10 exp 2000 delay - letGo -; 1210 deleted; 1300"),
            "{report}"
        );
        let marked_then_removed = [
            granted.clone(),
            marked.clone(),
            removed(1_250),
            event(1_300, Some(next_entry(11, 1_300)), vec![]),
        ];
        let report = &judge(&marked_then_removed, &history).violations[0].1;
        assert!(
            report.contains("marked let go of, then removed at 1250")
                && report.contains("1210 id-10 10 exp 3000 delay 2000 letGo 1210; 1250 deleted"),
            "{report}"
        );
        // Its own lock id is held off too: a grant to "id-10" counts as much.
        let own = [
            granted.clone(),
            removed(1_210),
            event(
                1_300,
                Some(attempt_entry(&ObjectId::new(), 11, 1_300, 2_300)),
                vec![],
            ),
        ];
        assert_eq!(
            judge(&own, &history).by_check().get(&ServerCheck::MinHold),
            Some(&1)
        );
        // Not judged: a holder that was killed, one told of its loss first, a lease an
        // operator force-released before the let-go, a lease without a hold.
        let mut killed = believer(t0, 1_200, LetGo::Released);
        killed.killed_at = Some(t0 + Duration::from_millis(1_100));
        let mut told = believer(t0, 1_200, LetGo::Released);
        told.notified = Some((t0 + Duration::from_millis(1_150), LossKind::Revoked));
        let mut forced = history.clone();
        forced.ops.push(crate::history::OpEvent {
            kind: OpKind::ForceRelease("r".into()),
            start: t0 + Duration::from_millis(1_100),
            end: t0 + Duration::from_millis(1_105),
        });
        for excused in [timed(t0, vec![killed]), timed(t0, vec![told]), forced] {
            let outcome = judge(&dropped, &excused);
            assert!(outcome.violations.is_empty(), "{:?}", outcome.violations);
            assert_eq!(outcome.min_hold_judged, 0);
        }
        let without = check(
            &dropped,
            &history,
            &HashMap::new(),
            Duration::from_secs(10),
            &MinHolds::new(),
        );
        assert!(without.violations.is_empty(), "{:?}", without.violations);
        // A run with holds that judged none is vacuous.
        let mut none = judge(&[granted], &history);
        assert_eq!(none.min_hold_within, 0);
        min_hold_vacuous(&mut none);
        assert_eq!(none.by_check(), BTreeMap::from([(ServerCheck::MinHold, 1)]));
    }

    /// Token 10 (hold 2 s) granted at server time 1,000 ms and let go of (marked) at 1,210.
    /// The server's clock reads past the hold's end (3,000) at a write of another resource
    /// (3,100), an acquire clears the ended entry (3,150), then the clock steps back 1,500 ms
    /// and token 11 is granted at server time 1,700: after the hold ran out by the server's
    /// clock, which (S12) must not read as inside it (the shape of `--long --seed 13131313`'s
    /// report on `jobm0`). Without the writes past the hold's end, the same grant is inside it.
    #[test]
    fn a_grant_after_a_step_back_that_follows_the_hold_s_end_is_not_inside_it() {
        let t0 = Instant::now();
        let a = ObjectId::new();
        let holds = MinHolds::from([(1, Duration::from_secs(2))]);
        let granted = event(1_000, Some(attempt_entry(&a, 10, 1_000, 2_000)), vec![]);
        let mut kept = attempt_entry(&a, 10, 1_000, 3_000);
        if let Bson::Document(d) = &mut kept {
            d.insert("delayMs", 2_000_i64);
            d.insert("letGoAt", DateTime::from_millis(1_210));
        }
        let marked = event(1_210, Some(kept), vec![]);
        let elsewhere = ServerEvent {
            resource: "elsewhere".into(),
            at_ms: 3_100,
            doc: None,
        };
        let history = timed(t0, vec![believer(t0, 1_200, LetGo::Released)]);
        let judge = |events: &[ServerEvent]| {
            check(
                events,
                &history,
                &HashMap::new(),
                Duration::from_secs(10),
                &holds,
            )
        };
        let after_the_end = [
            granted.clone(),
            marked.clone(),
            elsewhere,
            removed(3_150),
            event(1_700, Some(next_entry(11, 1_700)), vec![]),
        ];
        let outcome = judge(&after_the_end);
        assert!(outcome.violations.is_empty(), "{:?}", outcome.violations);
        assert_eq!(outcome.min_hold_within, 1);
        let inside = [
            granted,
            marked,
            removed(1_650),
            event(1_700, Some(next_entry(11, 1_700)), vec![]),
        ];
        assert_eq!(
            judge(&inside).by_check().get(&ServerCheck::MinHold),
            Some(&1)
        );
    }

    /// Token 10 (hold 2 s) granted at 1,000 ms; its holder lets go at 1,200 ms, and its
    /// release, held on the way, runs at 3,100 ms, as the server's clock reads past the hold's
    /// end (3,000): it removes the entry. The clock steps back 1,900 ms before the release
    /// commits, so its change event reads 1,210, and token 11 is granted at server time
    /// 1,700 (3,600 ms): no event reads past the hold's end, but the harness's readings of
    /// the clock do, and (S12) must not count it (the shape of `--long --seed 16769023`'s
    /// report on `jobl0`). The same writes without the clock past the end in between (it
    /// read 3,100 only before the holder let go) are inside the hold.
    #[test]
    fn a_let_go_begun_past_the_hold_s_end_and_committed_after_a_step_back_is_not_inside_it() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let a = ObjectId::new();
        let holds = MinHolds::from([(1, Duration::from_secs(2))]);
        let events = [
            event(1_000, Some(attempt_entry(&a, 10, 1_000, 2_000)), vec![]),
            removed(1_210),
            event(1_700, Some(next_entry(11, 1_700)), vec![]),
        ];
        let mut next = HolderLog::granted(2, 1, Mode::Exclusive, "r", 11);
        next.lock_id = "next".into();
        next.granted_at = at(3_650);
        let history = |readings: Vec<(Instant, i64)>| {
            let mut history = timed(t0, vec![believer(t0, 1_200, LetGo::Released), next.clone()]);
            history.server_clock.extend(readings);
            history
        };
        let judge = |history: &History| {
            check(
                &events,
                history,
                &HashMap::new(),
                Duration::from_secs(10),
                &holds,
            )
        };
        let stepped_after = judge(&history(vec![(at(3_099), 3_099), (at(3_100), 1_200)]));
        // (The next holder's entry outlives it in these events: (S7) is not this test's.)
        assert_eq!(
            stepped_after.by_check().get(&ServerCheck::MinHold),
            None,
            "{:?}",
            stepped_after.violations
        );
        assert_eq!(
            (
                stepped_after.min_hold_within,
                stepped_after.min_hold_ran_out
            ),
            (1, 1)
        );
        let stepped_before = judge(&history(vec![
            (at(1_099), 1_099),
            (at(1_100), 3_100),
            (at(1_150), 1_150),
        ]));
        assert_eq!(
            stepped_before.by_check().get(&ServerCheck::MinHold),
            Some(&1),
            "{:?}",
            stepped_before.violations
        );
        let no_step = judge(&history(Vec::new()));
        assert_eq!(no_step.by_check().get(&ServerCheck::MinHold), Some(&1));
    }

    /// Token 10 (hold 2 s) granted at server time 1,000 ms, let go of (marked) at 1,210; the
    /// server's clock steps back 1,500 ms at 1,300 ms (to -200), and an operator
    /// force-releases the resource at 1,400 ms (server time -100, before the grant). The old
    /// force release counted the hold from its `$$NOW`: the entry ended at 1,900 by the
    /// server's clock, and the next grant, at 2,000 (3,500 ms), is inside the hold. (S12)
    /// catches it: a force release after the let-go call does not excuse a let-go mark
    /// (before, the clock read 1,210 again after the step, so the force release counted as
    /// one between the grant and the let-go and the lease was not judged). A force release
    /// begun before the let-go call still excuses it.
    #[test]
    fn a_force_release_after_a_let_go_and_a_step_back_past_the_grant_leaves_the_hold_judged() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let a = ObjectId::new();
        let holds = MinHolds::from([(1, Duration::from_secs(2))]);
        let mut kept = attempt_entry(&a, 10, 1_000, 3_000);
        if let Bson::Document(d) = &mut kept {
            d.insert("delayMs", 2_000_i64);
            d.insert("letGoAt", DateTime::from_millis(1_210));
        }
        let mut forced_old = kept.clone();
        if let Bson::Document(d) = &mut forced_old {
            d.insert("expiresAt", DateTime::from_millis(1_900));
        }
        let events = [
            event(1_000, Some(attempt_entry(&a, 10, 1_000, 2_000)), vec![]),
            event(1_210, Some(kept), vec![]),
            event(-100, Some(forced_old), vec![]),
            event(2_000, Some(next_entry(11, 2_000)), vec![]),
        ];
        let mut history = timed(t0, vec![believer(t0, 1_200, LetGo::Released)]);
        history
            .server_clock
            .extend([(at(1_299), 1_299), (at(1_300), -200)]);
        let op = |start: u64| OpEvent {
            kind: OpKind::ForceRelease("r".into()),
            start: at(start),
            end: at(start + 5),
        };
        history.ops = vec![op(1_400)];
        let judge = |history: &History| {
            check(
                &events,
                history,
                &HashMap::new(),
                Duration::from_secs(10),
                &holds,
            )
        };
        let caught = judge(&history);
        assert_eq!(
            caught.by_check(),
            BTreeMap::from([(ServerCheck::MinHold, 1)]),
            "{:?}",
            caught.violations
        );
        assert_eq!((caught.min_hold_judged, caught.min_hold_within), (1, 1));
        // The same force release in server time, begun before the let-go call: excused.
        history.ops = vec![op(1_100)];
        let excused = judge(&history);
        assert!(excused.violations.is_empty(), "{:?}", excused.violations);
        assert_eq!(excused.min_hold_judged, 0);
    }

    /// The shape of the two (9) reports of `--long --seed 10000019` (run 10000021) on `d0`,
    /// scaled: the lease of A (token 1,000,000, lock-delay 700 ms, TTL 1.5 s) is granted at
    /// server time 1,000 and its client killed; its delay ends at 3,200. C is granted at
    /// 3,205 (token 3,205,000: the server's `$$NOW` × 1000), after the delay, and releases;
    /// the server's clock steps back 100 ms; B is granted at server time 3,190 with token
    /// 3,205,001 (the fence + 1: the earlier grant's, above B's own time × 1000). B came
    /// after a grant that proves the delay had ended by the server's clock; its grant time
    /// reads below the delay's end only by the step back. (9) (the testkit's checker,
    /// `Checker::lock_delay`) judges B against A anyway and reports it, as it reported
    /// holders 254 (token …634121001, granted at …634106, "10 ms before" …634116) and 849
    /// (token …688077001, granted at …688033, "35 ms before" …688068): both tokens are the
    /// fence + 1 of a grant at …634121 and …688077, past the delay's end. The checker now
    /// judges a lease's delay by the first conflicting grant after it alone.
    #[test]
    fn a_grant_after_a_step_back_that_follows_a_grant_past_the_delay_is_not_inside_it() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let holder = |id: u64, client: usize, token: i64, granted: u64, server: i64| {
            let mut h = HolderLog::granted(id, client, Mode::Exclusive, "r", token);
            h.lock_id = format!("id-{id}");
            h.attempt_sent_at = at(granted - 5);
            h.invoked_at = at(granted - 5);
            h.granted_at = at(granted);
            h.ttl = Some(Duration::from_millis(1_500));
            h.max_deadline = Some(at(granted - 5 + 1_350));
            h.server_granted_ms = Some(server);
            h.server_expires_ms = Some(server + 1_500);
            h
        };
        let mut a = holder(1, 0, 1_000_000, 1_000, 1_000);
        a.lock_delay = Some(Duration::from_millis(700));
        a.killed_at = Some(at(1_300));
        let mut c = holder(2, 1, 3_205_000, 3_206, 3_205);
        c.released_at = Some(at(3_220));
        c.let_go = Some(LetGo::Released);
        c.release = Some(ReleaseResult::Ok);
        let mut b = holder(3, 2, 3_205_001, 3_291, 3_190);
        b.released_at = Some(at(3_400));
        b.let_go = Some(LetGo::Released);
        b.release = Some(ReleaseResult::Ok);
        let modes = HashMap::from([("r".to_owned(), Mode::Exclusive)]);
        let mut history = Recorder::new().finish(modes);
        history.holders = vec![a, c, b];
        history.server_clock = vec![(t0, 0), (at(3_239), 3_239), (at(3_240), 3_140)];
        let outcome = crate::check::check(&history);
        let delay: Vec<_> = (outcome.violations.iter())
            .filter(|v| v.check == crate::check::Check::LockDelay)
            .collect();
        assert!(delay.is_empty(), "{delay:#?}");
    }

    /// Through the real path: a release delayed on the wire (300 ms of proxy latency) while
    /// the server's clock steps back 800 ms lands after the step, so the server removes the
    /// grant at a server time below the one the release began at; the release's `Ok` is
    /// true, and (S8) must not call it false (the old comparison, with the server's time at
    /// the release's start alone, did).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_release_that_lands_after_a_step_back_is_not_judged_false() {
        use mongolock_testkit::FaultProxy;
        let server = TestServer::start().await.unwrap();
        let db = server.new_client().database("oracle_test");
        LockClient::new(db.collection("locks"))
            .create_indexes()
            .await
            .unwrap();
        let tap = Tap::start(&db, "locks").await.unwrap();
        let proxy = FaultProxy::start(server.addr()).await.unwrap();
        let locks = LockClient::new(proxy.client().database("oracle_test").collection("locks"));
        let recorder = Recorder::new();
        let read = |recorder: &Recorder| {
            recorder.server_clock(Instant::now(), server.clock().now().timestamp_millis())
        };
        read(&recorder);
        let invoked = Instant::now();
        let guard = locks
            .mutex("m")
            .ttl(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap();
        let mut log = HolderLog::new(1, 0, Mode::Exclusive, invoked, &guard);
        proxy.add_latency(Duration::from_millis(300));
        log.lets_go(LetGo::Released);
        let release = tokio::spawn(async move { guard.release().await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        read(&recorder);
        server.clock().step_back(Duration::from_millis(800));
        read(&recorder);
        let released = release.await.unwrap();
        log.release = Some(crate::history::FromLibrary::of(&released));
        assert_eq!(log.release, Some(ReleaseResult::Ok), "{released:?}");
        recorder.holder(log);
        read(&recorder);
        let events = tap.finish().await.unwrap();
        let history = recorder.finish(HashMap::new());
        let bound = Duration::from_secs(10);
        let outcome = check(&events, &history, &HashMap::new(), bound, &MinHolds::new());
        assert_eq!(outcome.releases_checked, 1);
        assert!(outcome.violations.is_empty(), "{:?}", outcome.violations);
        assert_eq!(
            outcome.releases_after_step_back, 1,
            "the removal came after the step, below the release's start in server time"
        );
        proxy.shutdown().await;
        server.shutdown().await;
    }

    /// Through the real path: the tap reads a run of handle grants from the emulator's
    /// change stream; then a grant forged over a live lease is caught, and so is a holder
    /// whose token the server never granted.
    #[test]
    fn an_operator_between_two_server_times_is_found_across_a_step_back() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut history = timed(t0, vec![]);
        // The server's clock steps back 800 ms at 10,100 ms (read just before and after).
        history
            .server_clock
            .extend([(at(10_099), 10_099), (at(10_100), 9_300)]);
        // A force release runs from 10,200 to 10,220 ms (server time 9,400 to 9,420), after a
        // grant at server time 10,000 (10,000 ms) and before a let-go committed at 9,600
        // (10,400 ms): in server time it reads before the grant.
        history.ops = vec![OpEvent {
            kind: OpKind::ForceRelease("r".into()),
            start: at(10_200),
            end: at(10_220),
        }];
        assert!(force_released_between(&history, "r", 10_000, 9_600));
        assert!(operator_between(&history, "r", 10_000, 9_600));
        // Not between a grant and a let-go both well before it (or on another resource).
        assert!(!force_released_between(&history, "r", 5_000, 6_000));
        assert!(!operator_between(&history, "r", 5_000, 6_000));
        assert!(!force_released_between(&history, "s", 10_000, 9_600));
        // Nor between two times the clock first read after it (9,700, read before the step
        // and again after it, may be either side).
        assert!(!force_released_between(&history, "r", 10_200, 10_400));
        assert!(!operator_between(&history, "r", 10_200, 10_400));
        assert!(force_released_between(&history, "r", 9_700, 9_900));
    }

    #[test]
    fn a_waiter_that_ended_before_a_step_back_is_not_passed_by_a_later_grant() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut history = timed(t0, vec![]);
        // The server's clock steps back 1,000 ms at 1,900 ms (read just before and after).
        history
            .server_clock
            .extend([(at(1_899), 1_899), (at(1_900), 900)]);
        // A waiter whose own entry was in force began at 0 and gave up at 1,800 ms (server
        // time 1,800); "other" is granted at 2,500 ms (server time 1,500), after it ended,
        // though its server time reads before the waiter's end.
        let waiter = |ended: u64| AcquireCall {
            client: 1,
            resource: "q0".into(),
            lock_id: "waiter".into(),
            invoked_at: t0,
            ended_at: at(ended),
            granted: false,
            timeout: Some(Duration::from_secs(3)),
        };
        let own = Granted {
            resource: "q0".into(),
            lock_id: "waiter".into(),
            token: 1,
            nonce: "n1".into(),
            at_ms: -100,
            event: 0,
            removed_event: None,
            ttl_ms: None,
            removed_ms: None,
            expires_ms: None,
            delay_ms: 0,
            renewals: Vec::new(),
            writes: Vec::new(),
            let_go: None,
        };
        let new = Entry {
            nonce: "n2".into(),
            lock_id: "other".into(),
            token: 2,
            ttl_ms: None,
            created_ms: 1_500,
            renewed_ms: 1_500,
            expires_ms: None,
            delay_ms: 0,
            let_go_ms: None,
            exclusive: true,
        };
        let judged = |history: &History| {
            let mut out = Outcome::default();
            outside_line(
                &mut out,
                history,
                std::slice::from_ref(&own),
                ("q0", &[], 1_500),
                &new,
            );
            out.violations.len()
        };
        history.acquire_calls = vec![waiter(1_800)];
        assert_eq!(judged(&history), 0, "the waiter had ended before the grant");
        // Still waiting at the grant (it gave up at 2,700 ms): passed outside the line.
        history.acquire_calls = vec![waiter(2_700)];
        assert_eq!(judged(&history), 1);
        // The server's clock jumped forward while it waited: every place may have lapsed
        // (`--long --seed 29979245`'s run 29979245); a step back in the wait, or a jump
        // after the grant, excuses nothing.
        let op = |kind: OpKind, ms: u64| OpEvent {
            kind,
            start: at(ms),
            end: at(ms),
        };
        let forward = |by_ms: i64| OpKind::ClockStep {
            by_ms,
            judged: None,
        };
        history.ops = vec![op(OpKind::ClockJump(Duration::from_millis(4_300)), 1_000)];
        assert_eq!(judged(&history), 0, "a jump in the wait");
        history.ops = vec![op(forward(2_600), 1_000)];
        assert_eq!(judged(&history), 0, "a step forward in the wait");
        history.ops = vec![op(forward(-500), 1_000)];
        assert_eq!(judged(&history), 1, "a step back makes places last longer");
        history.ops = vec![op(OpKind::ClockJump(Duration::from_millis(4_300)), 2_600)];
        assert_eq!(judged(&history), 1, "a jump after the grant");
    }

    #[tokio::test]
    async fn the_tap_reads_real_grants_and_catches_a_forged_one() {
        let server = TestServer::start().await.unwrap();
        let client = server.new_client();
        let db = client.database("oracle_test");
        let locks = LockClient::new(db.collection("locks"));
        locks.create_indexes().await.unwrap();
        let tap = Tap::start(&db, "locks").await.unwrap();

        let mutex = locks.mutex("m").ttl(Duration::from_secs(5));
        let mut holders = Vec::new();
        for id in 0..3 {
            let invoked = Instant::now();
            let guard = mutex.acquire().await.unwrap();
            holders.push(HolderLog::new(id, 0, Mode::Exclusive, invoked, &guard));
            guard.release().await.unwrap();
        }
        let guard = mutex.acquire().await.unwrap();
        holders.push(HolderLog::new(
            9,
            0,
            Mode::Exclusive,
            Instant::now(),
            &guard,
        ));
        // An operator's bug: a new exclusive entry written over the live one.
        let now = DateTime::now();
        db.collection::<Document>("locks")
            .update_one(
                doc! {"_id": "m"},
                doc! {"$set": {"exclusive": {
                    "lockId": "forged", "nonce": ObjectId::new(), "token": i64::MAX,
                    "createdAt": now, "renewedAt": now,
                    "expiresAt": DateTime::from_millis(now.timestamp_millis() + 5_000),
                }}},
            )
            .await
            .unwrap();
        let events = tap.finish().await.unwrap();
        let bound = Duration::from_secs(10);
        let outcome = check(
            &events,
            &history(holders.clone()),
            &HashMap::new(),
            bound,
            &MinHolds::new(),
        );
        assert_eq!(outcome.grants, 5, "{events:?}");
        assert_eq!(
            outcome.by_check(),
            BTreeMap::from([(ServerCheck::Exclusion, 1)]),
            "{:?}",
            outcome.violations
        );
        // Without the forgery's event, the real grants pass; a holder with a token the
        // server never granted does not.
        let honest = &events[..events.len() - 1];
        assert!(
            check(
                honest,
                &history(holders.clone()),
                &HashMap::new(),
                bound,
                &MinHolds::new(),
            )
            .violations
            .is_empty()
        );
        holders[0].token += 1;
        assert_eq!(
            check(
                honest,
                &history(holders),
                &HashMap::new(),
                bound,
                &MinHolds::new()
            )
            .by_check(),
            BTreeMap::from([(ServerCheck::Uncommitted, 1)])
        );
        drop(guard);
        server.shutdown().await;
    }

    /// Token 10 on "r" (lock id "id-10", TTL 3 s) granted at 1,000 ms and renewed every
    /// second; the server's clock steps back 800 ms at 3,500 ms, renewals go on at server
    /// times 2,800 and 3,800, and the holder's release removes the entry at server time
    /// 4,000 (our 4,800 ms). The holder is told at our 3,600 ms that its lease is lost.
    fn kept_through_a_step_back(t0: Instant, how: LossKind) -> (Vec<ServerEvent>, History) {
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let a = ObjectId::new();
        let renewed = |ms: i64| {
            let mut e = entry(&a, 10, 1_000, ms, ms + 3_000);
            if let Bson::Document(d) = &mut e {
                d.insert("ttlMs", 3_000_i64);
            }
            event(ms, Some(e), vec![])
        };
        let mut events: Vec<ServerEvent> = [1_000, 2_000, 3_000, 2_800, 3_800]
            .into_iter()
            .map(renewed)
            .collect();
        events.push(event(4_000, None, vec![]));
        let mut l = HolderLog::granted(1, 0, Mode::Exclusive, "r", 10);
        l.lock_id = "id-10".into();
        l.ttl = Some(Duration::from_secs(3));
        (l.invoked_at, l.attempt_sent_at, l.granted_at) = (at(990), at(990), at(1_002));
        l.notice(at(3_600), how);
        l.released_at = Some(at(4_790));
        l.let_go = Some(LetGo::Released);
        let mut history = history(vec![l]);
        history.server_clock = vec![(t0, 0), (at(3_499), 3_499), (at(3_501), 2_701)];
        history.ops.push(OpEvent {
            kind: OpKind::ClockStep {
                by_ms: -800,
                judged: None,
            },
            start: at(3_500),
            end: at(3_500),
        });
        (events, history)
    }

    /// Token 10 on "r" (TTL 3 s) granted at 1,000 ms; the server's clock stepped back 300 ms
    /// at 200 ms (before the lease). Its holder lets go at 1,300 ms; the server's clock steps
    /// 2,600 ms forward at 1,500 ms, which ends the lease by the server's clock; the release's
    /// reply shows the step and the library reports the lease lost by its deadline when the
    /// release returns (1,950 ms); the entry goes at 1,700 ms. Judged at the release's start,
    /// the report came with 2.7 s of the lease left (the shape of `a0` in `--long --seed
    /// 19260821`); judged when it was made, the step excuses it.
    #[test]
    fn a_release_refused_as_lost_is_judged_when_it_returned() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let a = ObjectId::new();
        let mut granted = entry(&a, 10, 1_000, 1_000, 4_000);
        if let Bson::Document(d) = &mut granted {
            d.insert("ttlMs", 3_000_i64);
        }
        let events = [
            event(1_000, Some(granted), vec![]),
            event(4_300, None, vec![]),
        ];
        let mut l = HolderLog::granted(1, 0, Mode::Exclusive, "r", 10);
        l.lock_id = "id-10".into();
        l.ttl = Some(Duration::from_secs(3));
        (l.invoked_at, l.attempt_sent_at, l.granted_at) = (at(990), at(990), at(1_002));
        l.released_at = Some(at(1_300));
        l.let_go = Some(LetGo::Released);
        l.release = Some(ReleaseResult::Lost(LossKind::Deadline));
        let mut history = history(vec![l.clone()]);
        history.server_clock = vec![
            (t0, 300),
            (at(201), 201),
            (at(1_499), 1_499),
            (at(1_501), 4_101),
        ];
        let step = |by_ms: i64, ms: u64| OpEvent {
            kind: OpKind::ClockStep {
                by_ms,
                judged: None,
            },
            start: at(ms),
            end: at(ms),
        };
        history.ops = vec![step(-300, 200), step(2_600, 1_500)];
        let at_start = judge(&events, &history);
        assert_eq!(
            at_start.by_check().get(&ServerCheck::FalseLoss),
            Some(&1),
            "{:?}",
            at_start.violations
        );
        history.holders[0].logged_at = Some(at(1_950));
        let when_made = judge(&events, &history);
        assert_eq!(
            when_made.losses_judged,
            (0, 0),
            "{:?}",
            when_made.violations
        );
    }

    #[test]
    fn a_loss_reported_while_the_server_keeps_the_entry_after_a_step_back_is_caught() {
        let t0 = Instant::now();
        for how in [LossKind::Deadline, LossKind::Revoked] {
            let (events, history) = kept_through_a_step_back(t0, how);
            let out = judge(&events, &history);
            assert_eq!(out.losses_judged, (1, 1), "{how:?}: {:?}", out.violations);
            assert_eq!(
                out.by_check().get(&ServerCheck::FalseLoss),
                Some(&1),
                "{:?}",
                out.violations
            );
        }
        // The same report after the entry was taken (removed at server time 2,500, before the
        // step): the server did not keep it.
        let (mut events, history) = kept_through_a_step_back(t0, LossKind::Revoked);
        events.truncate(2);
        events.push(event(2_500, None, vec![]));
        let out = judge(&events, &history);
        assert_eq!(out.losses_judged, (0, 0), "{:?}", out.violations);
        // A cut-off of the holder's client excuses the report, and so does a run whose
        // clock never stepped back.
        let (events, mut history) = kept_through_a_step_back(t0, LossKind::Deadline);
        history.faults.push(crate::history::FaultEvent {
            kind: FaultKind::Partition,
            client: Some(0),
            start: t0 + Duration::from_millis(2_000),
            end: t0 + Duration::from_millis(3_000),
        });
        assert_eq!(judge(&events, &history).losses_judged, (0, 0));
        let (events, mut history) = kept_through_a_step_back(t0, LossKind::Deadline);
        history.ops.clear();
        assert_eq!(judge(&events, &history).losses_judged, (0, 0));
    }
}
