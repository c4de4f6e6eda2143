//! mongolock on the emulator's two rules for logging pipeline updates (`--server-modes`).
//!
//! MongoDB 5.0 and later log a pipeline-style update as a delta (an `update` change event,
//! with the fields it set) when the delta is smaller than the new document, else whole (a
//! `replace` event, with `fullDocument`); 4.4 logs every one whole. mongolock's wake-up
//! stream passes an `update` whose delta sets `wake` to its client's keeper, and a
//! `replace` whose whole document names that keeper in `wake` (whether this change set it
//! or an earlier one did): so on 4.4 a client can receive events that wake nobody. This
//! measures, for mongolock only, on one emulator of each mode:
//!
//! - **handoffs** with 16 and 64 waiters (each its own client, as in [`crate::measure`]):
//!   per handoff, the commands of all participants by name, and the change events their
//!   streams received, in total and per client;
//! - **own renewals**: one client holds K leases and waits for nothing, one of them taken
//!   through a wake-up (so that its document's `wake` names that client while it renews
//!   it), while another client waits for one of them with its stream open; for a window,
//!   the keeper's commands (its renewals) and the events each client's stream received.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use mongodb::bson::{Document, doc};
use mongolock::LockClient;

use crate::emulator::{Emulator, ServerMode, Topology};
use crate::keepalive;
use crate::measure::{self, HandoffByClient, ModeSettings, Outcome, Settings};
use crate::monitor::{Counts, EVENTS, Monitor, per_op};
use crate::peers::{Lib, Result, monitored_client};

/// The commands named in their own column; the others are added up under "other".
const NAMED: [&str; 3] = ["findAndModify", "update", "getMore"];

/// The target of issue 32 at 16 waiters on the 5.0+ rule, per handoff: commands other
/// than `getMore`, and `getMore`s.
const TARGET: (usize, f64, f64) = (16, 3.0, 4.0);

/// One handoff run in one mode.
pub(crate) struct ModeHandoff {
    pub(crate) waiters: usize,
    pub(crate) run: HandoffByClient,
}

/// The keeper's own renewals in one mode.
pub(crate) struct OwnRenewals {
    pub(crate) leases: usize,
    /// Whether the woken lease's document named a keeper in `wake` when the window opened.
    pub(crate) woken_named: bool,
    /// The keeper's commands (and events received) in the window.
    pub(crate) keeper: Counts,
    /// The keeper's events, by the document they were about (the woken lease's `_id` is
    /// [`WOKEN`]).
    pub(crate) keeper_events: BTreeMap<String, u64>,
    /// The waiting client's commands (and events received) in the window.
    pub(crate) other: Counts,
    /// Leases lost by the end of the window (must be 0).
    pub(crate) lost: usize,
}

/// Everything measured in one mode.
pub(crate) struct ModeResults {
    pub(crate) mode: ServerMode,
    pub(crate) handoffs: Vec<(usize, Outcome<ModeHandoff>)>,
    pub(crate) renewals: Outcome<OwnRenewals>,
}

/// The resource the keeper takes through a wake-up.
const WOKEN: &str = "own-woken";

/// Runs the scenario on a fresh replica-set emulator of each mode: one mode after the
/// other, or both at once when [`ModeSettings::concurrent`] (the counts do not depend on
/// it; the latencies do).
pub(crate) async fn run(latency: Duration, s: &Settings) -> Vec<ModeResults> {
    let [a, b] = ServerMode::ALL;
    if s.modes.concurrent {
        let (a, b) = tokio::join!(one(a, latency, s), one(b, latency, s));
        vec![a, b]
    } else {
        vec![one(a, latency, s).await, one(b, latency, s).await]
    }
}

/// The scenario on a fresh replica-set emulator of `mode`.
async fn one(mode: ServerMode, latency: Duration, s: &Settings) -> ModeResults {
    let label = mode.label();
    eprintln!("== server mode: {label}");
    let emulator = match Emulator::start_as(latency, Topology::ReplicaSet, mode).await {
        Ok(e) => e,
        Err(e) => {
            let e = format!("cannot start the emulator: {e}");
            return ModeResults {
                mode,
                handoffs: s
                    .modes
                    .handoffs
                    .iter()
                    .map(|(w, _)| (*w, Err(e.clone())))
                    .collect(),
                renewals: Err(e),
            };
        }
    };
    let uri = emulator.uri().to_string();
    let settings = Settings {
        hold: s.modes.hold.clone(),
        ..s.clone()
    };
    let mut handoffs = Vec::new();
    for &(waiters, count) in &s.modes.handoffs {
        let r = handoff(&uri, waiters, count, &settings).await;
        eprintln!(
            "   {label}, handoff, {waiters} waiters: {}",
            match &r {
                Ok(h) => format!("{} per handoff", h.run.handoff.commands.breakdown,),
                Err(e) => format!("ERROR {e}"),
            }
        );
        handoffs.push((waiters, r));
    }
    let renewals = match tokio::time::timeout(s.limit, own_renewals(&uri, &s.modes)).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!("did not finish within {:?}", s.limit)),
    };
    eprintln!(
        "   {label}, own renewals: {}",
        match &renewals {
            Ok(r) => format!(
                "keeper {:?}, other {:?}, lost {}",
                r.keeper.0, r.other.0, r.lost
            ),
            Err(e) => format!("ERROR {e}"),
        }
    );
    emulator.stop().await;
    ModeResults {
        mode,
        handoffs,
        renewals,
    }
}

/// One handoff run of mongolock with per-client counts.
async fn handoff(uri: &str, waiters: usize, count: usize, s: &Settings) -> Outcome<ModeHandoff> {
    let run = tokio::time::timeout(
        s.handoff_limit,
        measure::handoffs_by_client(Lib::Mongolock, uri, waiters, count, s),
    )
    .await
    .map_err(|_| format!("did not finish within {:?}", s.handoff_limit))?
    .map_err(|e| e.to_string())?;
    if run.handoff.latency.n < count {
        return Err(format!(
            "only {} of {count} handoffs measured",
            run.handoff.latency.n
        ));
    }
    Ok(ModeHandoff { waiters, run })
}

/// The keeper (one client) holds `leases` leases, the first through a wake-up: another
/// client holds [`WOKEN`] while the keeper waits for it, then releases it (which names the
/// keeper in `wake`, and the grant keeps that). The rest are taken with single attempts.
/// The other client then waits for one of them (its stream open). After one renewal period,
/// both clients' commands and events are counted for the window.
async fn own_renewals(uri: &str, m: &ModeSettings) -> Result<OwnRenewals> {
    let lib = Lib::Mongolock;
    let (keeper_monitor, other_monitor) = (Monitor::new(lib.db()), Monitor::new(lib.db()));
    let keeper_client = monitored_client(lib, uri, &keeper_monitor).await?;
    let other_client = monitored_client(lib, uri, &other_monitor).await?;
    let collection = keeper_client
        .database(lib.db())
        .collection::<Document>("locks");
    let keeper = LockClient::new(collection.clone());
    let other = LockClient::new(other_client.database(lib.db()).collection("locks"));
    keeper.create_indexes().await?;

    // The woken lease (this also opens the keeper's stream).
    let theirs = other
        .mutex(WOKEN)
        .ttl(m.ttl)
        .try_acquire()
        .await?
        .ok_or("refused although nobody holds the lock")?;
    let waiting = {
        let (keeper, ttl) = (keeper.clone(), m.ttl);
        tokio::spawn(async move { keeper.mutex(WOKEN).ttl(ttl).acquire().await })
    };
    wait_in_line(&collection, WOKEN).await?;
    theirs.release().await?;
    let mut guards = vec![waiting.await??];
    guards.extend(keepalive::take(&keeper, "own", m.leases.saturating_sub(1), m.ttl).await?);

    // The other client waits for one of the keeper's plain leases, its stream open.
    let watched = if m.leases > 1 { "own-0" } else { WOKEN };
    let waiter = {
        let (other, ttl) = (other.clone(), m.ttl);
        tokio::spawn(async move { other.mutex(watched).ttl(ttl).acquire().await })
    };
    wait_in_line(&collection, watched).await?;

    // One renewal period with no acquire in flight, so the window sees steady ticks only.
    tokio::time::sleep(m.ttl / 3).await;
    let woken_named = collection
        .find_one(doc! { "_id": WOKEN })
        .await?
        .and_then(|d| d.get_str("wake").ok().map(|w| !w.is_empty()))
        .unwrap_or(false);
    let (k0, o0, e0) = (
        keeper_monitor.snapshot(),
        other_monitor.snapshot(),
        keeper_monitor.events_by_document(),
    );
    tokio::time::sleep(m.window).await;
    let (k1, o1, e1) = (
        keeper_monitor.snapshot(),
        other_monitor.snapshot(),
        keeper_monitor.events_by_document(),
    );
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    let keeper_events = e1
        .into_iter()
        .filter_map(|(id, n)| {
            let d = n - e0.get(&id).copied().unwrap_or(0);
            (d > 0).then_some((id, d))
        })
        .collect();

    // Dropping the waiting acquire withdraws it (in the background; shutdown waits).
    waiter.abort();
    let _ = waiter.await;
    keepalive::release(guards)
        .await
        .or_else(|e| if lost > 0 { Ok(()) } else { Err(e) })?;
    other.shutdown().await;
    keeper.shutdown().await;
    other_client.shutdown().immediate(true).await;
    keeper_client.shutdown().immediate(true).await;
    Ok(OwnRenewals {
        leases: m.leases,
        woken_named,
        keeper: k1.since(&k0),
        keeper_events,
        other: o1.since(&o0),
        lost,
    })
}

/// Waits until `resource`'s document has somebody in its line (read directly), so that a
/// release names the head in `wake`.
async fn wait_in_line(collection: &mongodb::Collection<Document>, resource: &str) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let doc = collection.find_one(doc! { "_id": resource }).await?;
        // The line is the document's `queue` (see mongolock's `schema`).
        if doc.is_some_and(|d| d.get_array("queue").is_ok_and(|q| !q.is_empty())) {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("nobody joined the line of {resource} within 30 s").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Per handoff: `n / handoffs`.
fn per(n: u64, handoffs: u64) -> String {
    per_op(n, handoffs)
}

/// The Markdown tables of the scenario, and how many of its measurements failed.
pub(crate) fn render(s: &Settings, results: &[ModeResults]) -> (String, usize) {
    let mut out = String::new();
    let mut errors = Vec::new();
    let m = &s.modes;
    let _ = writeln!(
        out,
        "## mongolock on each server mode (5.0+ rule, 4.4 mode)\n\n\
         One replica-set emulator per mode. Handoffs: {} (each holder keeping the lock \
         {}–{} ms, uniformly at random), each participant with its own client and its own \
         monitor. Own renewals: one client holds {} leases ({} s TTL, one taken through a \
         wake-up) and waits for nothing, another client waits for one of them; counted for \
         {:.0} s after one renewal period.\n",
        m.handoffs
            .iter()
            .map(|(w, n)| format!("{n} with {w} waiters"))
            .collect::<Vec<_>>()
            .join(", "),
        m.hold.start.as_millis(),
        m.hold.end.as_millis(),
        m.leases,
        m.ttl.as_secs(),
        m.window.as_secs_f64(),
    );
    let _ = writeln!(
        out,
        "### Handoffs: commands and change events per handoff\n"
    );
    let _ = writeln!(
        out,
        "| server mode | waiters | handoffs | p50 | p99 | commands (no getMore) | \
         findAndModify | update | getMore | other | events received | clients that \
         received any | most to one client |"
    );
    let _ = writeln!(out, "|{}", "---|".repeat(13));
    let mut target = Vec::new();
    for r in results {
        for (w, h) in &r.handoffs {
            let h = match h {
                Ok(h) => h,
                Err(e) => {
                    errors.push(format!("{}, {w} waiters: {e}", r.mode.label()));
                    let _ = writeln!(
                        out,
                        "| {} | {w} | error [{}] |{}",
                        r.mode.label(),
                        errors.len(),
                        " - |".repeat(10)
                    );
                    continue;
                }
            };
            let n = h.run.handoff.latency.n as u64;
            let t = &h.run.total;
            let getmores = t.get("getMore");
            let commands = t.total() - getmores;
            let other: BTreeMap<&str, u64> =
                t.0.iter()
                    .filter(|(k, _)| !NAMED.contains(&k.as_str()) && k.as_str() != EVENTS)
                    .map(|(k, v)| (k.as_str(), *v))
                    .collect();
            let other_text = if other.is_empty() {
                "0".to_string()
            } else {
                other
                    .iter()
                    .map(|(k, v)| format!("{} {k}", per(*v, n)))
                    .collect::<Vec<_>>()
                    .join(" + ")
            };
            let receiving = h.run.clients.iter().filter(|c| c.get(EVENTS) > 0).count();
            let most = h
                .run
                .clients
                .iter()
                .map(|c| c.get(EVENTS))
                .max()
                .unwrap_or(0);
            let _ = writeln!(
                out,
                "| {} | {} | {n} | {:.2} ms | {:.2} ms | {} | {} | {} | {} | {} | {} | {} of {} | {} |",
                r.mode.label(),
                h.waiters,
                h.run.handoff.latency.p50.as_secs_f64() * 1e3,
                h.run.handoff.latency.p99.as_secs_f64() * 1e3,
                per(commands, n),
                per(t.get("findAndModify"), n),
                per(t.get("update"), n),
                per(getmores, n),
                other_text,
                per(t.get(EVENTS), n),
                receiving,
                h.run.clients.len(),
                per(most, n),
            );
            if r.mode == ServerMode::Deltas && h.waiters == TARGET.0 {
                let (c, g) = (commands as f64 / n as f64, getmores as f64 / n as f64);
                target.push(format!(
                    "Target at {} waiters on the 5.0+ rule (at most {} commands and {} getMores \
                     per handoff): {:.2} commands, {:.2} getMores: {}.",
                    TARGET.0,
                    TARGET.1,
                    TARGET.2,
                    c,
                    g,
                    if c <= TARGET.1 && g <= TARGET.2 {
                        "met"
                    } else {
                        "NOT met"
                    }
                ));
            }
        }
    }
    out.push('\n');
    for r in results {
        for (w, h) in &r.handoffs {
            if let Ok(h) = h {
                let _ = writeln!(
                    out,
                    "- {}, {w} waiters, {} handoffs, all participants: {}",
                    r.mode.label(),
                    h.run.handoff.latency.n,
                    h.run.total.describe(1)
                );
            }
        }
    }
    out.push('\n');
    for t in target {
        let _ = writeln!(out, "{t}\n");
    }
    let _ = writeln!(
        out,
        "Commands per handoff: every participant's, in steady state, divided by the handoffs \
         (polling during the hold counts). Events received: change events in the replies to \
         the participants' getMores, per handoff; one per handoff is the wake-up of the next \
         holder. \"Most to one client\": the largest number one client received, per \
         handoff.\n"
    );
    let _ = writeln!(
        out,
        "### Own renewals: a client holding leases and waiting for nothing\n"
    );
    let _ = writeln!(
        out,
        "| server mode | leases | keeper: commands | which | keeper: events received | about | \
         woken lease names a keeper | other client: commands | other client: events | lost |"
    );
    let _ = writeln!(out, "|{}", "---|".repeat(10));
    let secs = m.window.as_secs_f64();
    for r in results {
        match &r.renewals {
            Ok(o) => {
                let about = if o.keeper_events.is_empty() {
                    "-".to_string()
                } else {
                    o.keeper_events
                        .iter()
                        .map(|(id, n)| {
                            let kind = if id == WOKEN {
                                " (the woken lease)"
                            } else {
                                ""
                            };
                            format!("{n} on {id}{kind}")
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let other_events = o.other.get(EVENTS);
                let mut other = o.other.clone();
                other.0.remove(EVENTS);
                let mut keeper = o.keeper.clone();
                keeper.0.remove(EVENTS);
                let _ = writeln!(
                    out,
                    "| {} | {} | {} in {secs:.0} s | {} | {} | {about} | {} | {} in {secs:.0} s ({}) | {} | {} |",
                    r.mode.label(),
                    o.leases,
                    keeper.total(),
                    keeper.describe(1),
                    o.keeper.get(EVENTS),
                    if o.woken_named { "yes" } else { "no" },
                    other.total(),
                    other.describe(1),
                    other_events,
                    o.lost,
                );
                if o.lost > 0 {
                    errors.push(format!(
                        "{}: {} lease(s) lost during the window",
                        r.mode.label(),
                        o.lost
                    ));
                }
            }
            Err(e) => {
                errors.push(format!("{}, own renewals: {e}", r.mode.label()));
                let _ = writeln!(
                    out,
                    "| {} | error [{}] |{}",
                    r.mode.label(),
                    errors.len(),
                    " - |".repeat(8)
                );
            }
        }
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "Events received by the keeper are those in the replies to its own stream's getMores; \
         its client drops a replacement whose `wake` it has already seen, so an event here \
         wakes nobody but still costs a reply.\n"
    );
    if !errors.is_empty() {
        let _ = writeln!(out, "### Errors (server modes)\n");
        for (i, e) in errors.iter().enumerate() {
            let _ = writeln!(out, "{}. {e}", i + 1);
        }
        out.push('\n');
    }
    (out, errors.len())
}
