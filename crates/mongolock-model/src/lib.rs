//! A model-checked model of mongolock's lock protocol, checked with
//! [stateright](https://docs.rs/stateright).
//!
//! The model is small and exact about what decides safety:
//!
//! - **the server** ([`server`]): one lock document per resource (the exclusive entry
//!   `{lockId, nonce, token, keeper, expiresAt, afterUnlocks, adopted}`, the fence, the
//!   tombstones) and the atomic step each command takes on it, by the server's clock,
//!   which expires entries;
//! - **the clients** ([`model`]): guards with local deadlines, the keeper's renewals (by
//!   lock id, token and keeper, only while live), releases and withdrawals left to the
//!   background as owed chores, the rule that an attempt of a lock id first settles what
//!   its client owes for it on that resource, resume by lock id (adopting the entry), and
//!   the low-level `xlock`/`unlock`;
//! - **the faults**: requests delayed past their client's timeout and executed late,
//!   duplicated by a repeat, reordered, replies lost, clients killed and restarted (with
//!   guards under the same lock id, which they resume by; a low-level process under a new
//!   lock id of its own, as the library's contract asks: a lock id belongs to one holder),
//!   a paused client being one that takes no step while time passes, the server's clock
//!   stepping forward or back (`$$NOW` follows the system clock; a step back excuses no
//!   holder: the library reports no lease lost for it), an operator's force release, `purge`
//!   and `purge_abandoned_groups`, and the TTL index's deletion of an idle document.
//!
//! The lock-delay and the minimum hold are modelled in the scenarios that set them (an
//! entry in force after its lease for its delay; one let go of within its hold in force
//! until `createdAt + minHoldMs`, marked `letGoAt`, held by nobody whatever the server's
//! clock reads: a step back before its grant does not give it back to its lock id, control
//! (z)). A force release after the let-go leaves a hold under way as it is, also after a
//! step back of the clock past the grant (the library's promise since 224dfb8; control (ae)
//! puts back the cut to `$$NOW + minHoldMs`), and force releases are in the steps back
//! ([`scenarios::STEP_BACK_FORCE`]). An entry a force release keeps in force for its
//! lock-delay is marked as a let-go entry is (`letGoAt`): held by nobody, so a step back of
//! the clock by more than the delay does not give the lease back to its revoked holder
//! (control (ag) leaves it unmarked, [`scenarios::forced_back`]). `purge` (only entries out of force go),
//! `purge_abandoned_groups` (the live leases of an abandoned group go too; a let-go entry
//! makes no group abandoned) and the TTL index (a document whose `idleSince` is the
//! retention past: every entry out of force, no tombstone; the retention taken as 0, the
//! worst case; the fence kept, as the clock's floor on tokens keeps it) are operators' steps,
//! judged by "a purge ends no live lease and no hold" ([`scenarios::purges`]). The limit of
//! doubted unlocks an attempt carries (16 per lock id in the library, 1 in
//! [`scenarios::unlock_limit`]): an attempt past it is refused before it is sent (control
//! (af) sends it with the first ones only). The tombstone cap (1,000 in the library, 1 in
//! [`scenarios::sealing`]): a withdrawal past it seals the resource, and every attempt is
//! then refused, late copies included (control (ak) lets an acquire past the seal). Shared entries are modelled (the server's step for readers, writers and
//! semaphore permits, their caps; clients with guards of each kind in the scenarios "a
//! reader and a writer" and "a semaphore of one / two permits, two holders", and the same
//! with a lock-delay and a minimum hold, [`scenarios::shared_holds`]). The line is modelled in its own
//! scenarios ([`scenarios::line`], [`scenarios::guards_line_restart`]: `Config::line`): a
//! guard's acquire is a waiting one, its place taken, kept and left as the library's
//! pipelines do (see [`server`]), a call that stops with every attempt refused leaves the
//! line (`leave_line`), and a resume whose adoption is refused goes on waiting in its place;
//! the property "waiters are served in arrival order" ([`model::ORDER`], the harness's (S9))
//! judges every grant against the server's line and against the checker's own record of it,
//! and controls (ah) (a waiting attempt answered "already held" out of the line, as before
//! 4b66416), (ai) (a line jumper), (aj) (removals that take every place of their lock
//! id, as before places named their call) and (al) (an adoption that takes every place of
//! its lock id, before it named its call) are caught. Resume's adoption matches the entry
//! naming the keeper its attempt's "already held" reply showed, or its own; control (am)
//! (an adoption whatever keeper the entry names) is caught by "a released lock becomes
//! free". Elsewhere the line is left out (it only adds
//! terms to a grant's condition, so there the model grants whatever the library grants, and
//! more). Not modelled, besides what [`server`] leaves out of the document: a place's
//! refresh (a place lapses its life after it was taken), a line of permits judged against
//! each other (the record holds waiting readers and permits, since 2026-12-07, and a
//! shared grant is judged against the writers ahead of it only: a permit passing a waiting
//! permit is not judged, which would need the cap), the wake,
//! a seal's end (the model's tombstones never lapse), a lock group's holder that keeps its
//! own deadline from `renew(lock_id)` (a client with guards calls `renew(lock_id)` in
//! [`scenarios::renew_by_id`], and control (an) puts back a renewal that shortens a kept
//! lease), clock-step detection (a forward step excuses the holders it may have
//! cut short, a step back excuses nobody; `docs/reliability.md` says why, and what carries
//! its proof), the clock's floor on tokens (`$$NOW` in
//! microseconds: a TTL deletion keeps the fence instead).
//!
//! Its properties are the promises of `docs/reliability.md` ([`model::PROPERTIES`]). Each
//! bug found in the library so far can be put back ([`server::Bugs`], [`controls`]), and
//! the checker must then find a counterexample, printed as a trace ([`trace`]). Each control's
//! bound, run without its bug, is also a check of the whole protocol (every property, not
//! only the control's): that puts bounds deeper than the small ones in some dimension into
//! `cargo test` at no extra cost (two attempts with a kill, a repeat and a clock step, where
//! the retiring release of control (p) was first found only at `--deep`). A control whose
//! bound is too heavy for that ([`controls::Control::clean_run_deep`]: (al)'s, 7.7 million
//! states) has its run without the bug among the deep ones ([`scenarios::deep`]) instead.
//!
//! ```text
//! cargo test -p mongolock-model                         # the small bound, and every control
//! cargo run --release -p mongolock-model -- --deep      # the deeper bound, with counts
//! cargo test --release -p mongolock-model -- --ignored  # the deeper bound, as a test
//! ```

pub mod model;
pub mod server;

use std::time::{Duration, Instant};

use stateright::{Checker, HasDiscoveries, Model, Path};

pub use model::{Action, Bounds, Config, LockModel, Mode, State};
pub use server::{Bugs, Kind};

/// The shapes the model is checked in: each a small system in which some of the protocol's
/// paths meet.
pub mod scenarios {
    use super::{Bounds, Bugs, Config, Kind, Mode};

    /// A bound given as (time, attempts, retries, timeouts, in flight, kills, force
    /// releases, clock steps).
    pub const fn bounds(b: [u8; 8]) -> Bounds {
        Bounds {
            max_time: b[0],
            attempts: b[1],
            retries: b[2],
            timeouts: b[3],
            in_flight: b[4],
            kills: b[5],
            force_releases: b[6],
            jumps: b[7],
            backs: 0,
        }
    }

    /// The small bounds, for `cargo test`: two attempts per client with a timeout and a
    /// repeat, then one attempt each with every fault once.
    pub const SMALL: [Bounds; 2] = [
        bounds([1, 2, 1, 1, 2, 0, 0, 0]),
        bounds([1, 1, 1, 1, 2, 1, 1, 1]),
    ];

    /// The small bound where time passes, for `cargo test`: three ticks, a TTL, so that a
    /// lease runs out and a local deadline passes by time alone, with no step of the server's
    /// clock to excuse either; one attempt per client, a timeout.
    pub const TIME: Bounds = bounds([3, 1, 0, 1, 2, 0, 0, 0]);

    /// The small bound of the faults that meet a lock-delay, for `cargo test`: a force
    /// release and a step of the server's clock, one attempt per client, a timeout.
    pub const HOLD_FAULTS: Bounds = bounds([1, 1, 0, 1, 2, 0, 1, 1]);

    /// The small bound of a backward step of the server's clock, for `cargo test`: one step
    /// back (by a TTL), a tick of real time, two attempts per client, a timeout. Force
    /// releases are left out of it (see [`steps_back`]).
    pub const STEP_BACK: Bounds = Bounds {
        backs: 1,
        ..bounds([1, 2, 0, 1, 2, 0, 0, 0])
    };

    /// The scenarios checked with a backward step of the server's clock, for `cargo test`:
    /// those with a minimum hold at [`STEP_BACK`] (an entry let go of within its hold, read
    /// at a clock stepped back before its grant), two guards with a hold at
    /// [`STEP_BACK_FORCE`] (a force release and a forward step besides), two guards whose
    /// leases run out by time at [`TIME`] with a step back (every lease lasts longer by the
    /// server's reckoning; nobody is excused), and [`forced_back`] (a force-released lease
    /// with a lock-delay, then a step back by more than the delay: its entry is marked and
    /// holds nothing, so its keeper does not renew it; control (ag) leaves it unmarked). A
    /// force release after a step back cuts the hold of a let-go entry to `$$NOW + minHoldMs`
    /// (earlier, by the server's clock, than `createdAt + minHoldMs`) with bug (ae) only: the
    /// library's counts the delay from the grant then, and the hold stays whole.
    pub fn steps_back() -> Vec<Config> {
        vec![
            min_hold(STEP_BACK),
            guards_min_hold(STEP_BACK),
            guards_min_hold(STEP_BACK_FORCE),
            handles(Bounds { backs: 1, ..TIME }),
            forced_back(FORCED_BACK_BOUND),
        ]
    }

    /// The bound of a force release after a step back of the server's clock, for `cargo
    /// test`: a step back, a force release, a forward step, one attempt per client, a
    /// timeout. Control (ae) is caught here in 9 steps (a let-go entry read after a step back
    /// past its grant, force-released, its hold cut to `$$NOW + minHoldMs`, then a forward
    /// step and a grant before `createdAt + minHoldMs`).
    pub const STEP_BACK_FORCE: Bounds = Bounds {
        backs: 1,
        ..bounds([1, 1, 0, 1, 2, 0, 1, 1])
    };

    /// One client with guards, alone, every attempt with a lock-delay of a tick, an operator's
    /// force release and a step back of the server's clock: where the finding [`FORCED_BACK`]
    /// was made (see [`findings`](crate::findings); fixed, control (ag) puts it back).
    pub fn forced_back(bounds: Bounds) -> Config {
        Config {
            name: FORCED_BACK,
            clients: vec![Mode::Handle],
            kinds: vec![Kind::Exclusive],
            delay: 1,
            ..handles(bounds)
        }
    }

    /// [`forced_back`]'s name.
    pub const FORCED_BACK: &str =
        "a guard with a lock-delay, force-released, the clock stepping back";

    /// The bound [`forced_back`] runs at in `cargo test`: three ticks, a timeout, a force
    /// release, a step back. Control (ag) is caught here in 9 steps (granted with a delay of
    /// a tick, force-released, the clock stepped back by more than the delay, the entry left
    /// unmarked renewed by the revoked guard's keeper, past a TTL from the revocation).
    pub const FORCED_BACK_BOUND: Bounds = Bounds {
        backs: 1,
        ..bounds([3, 1, 0, 1, 2, 0, 1, 0])
    };

    /// The purges at the small bounds, for `cargo test`: [`guards_purges`] at [`TIME`] with one
    /// operator's call (a purge, the TTL index's deletion, or a force release), and at
    /// [`HOLD_FAULTS`].
    pub fn purges() -> Vec<Config> {
        vec![
            guards_purges(Bounds {
                force_releases: 1,
                ..TIME
            }),
            guards_purges(HOLD_FAULTS),
        ]
    }

    /// The deeper runs, for `--deep` (minutes, in a release build): each scenario at the
    /// largest bounds that fit in a few GiB of memory.
    pub fn deep() -> Vec<Config> {
        let clock = bounds([2, 2, 1, 1, 2, 0, 1, 1]);
        let faults = bounds([1, 2, 1, 1, 2, 1, 1, 1]);
        let holds = bounds([2, 2, 0, 1, 2, 0, 1, 1]);
        let time = bounds([4, 1, 0, 1, 2, 0, 1, 1]);
        let back = Bounds {
            backs: 1,
            ..bounds([2, 2, 0, 1, 2, 0, 0, 1])
        };
        let time_no_force = bounds([4, 1, 0, 1, 2, 0, 0, 1]);
        vec![
            min_hold(holds),
            guards_min_hold(holds),
            min_hold(time),
            guards_min_hold(time),
            handles(time),
            renew_by_id(time),
            purge_groups(bounds([3, 2, 0, 1, 2, 0, 1, 1])),
            handles(clock),
            handles(faults),
            low_level(clock),
            low_level(faults),
            keeper_alone(clock),
            keeper_alone(faults),
            two_resources(bounds([1, 2, 1, 1, 2, 0, 0, 0])),
            two_resources(bounds([0, 2, 0, 1, 2, 0, 1, 0])),
            min_hold(back),
            guards_min_hold(back),
            handles(Bounds {
                backs: 1,
                ..time_no_force
            }),
            readers_writer(clock),
            readers_writer(faults),
            two_permits(clock),
            readers_writer_holds(holds),
            semaphore_holds(2, holds),
            guards_min_hold_restart(bounds([1, 2, 1, 1, 2, 1, 0, 0])),
            guards_min_hold(Bounds {
                attempts: 2,
                ..STEP_BACK_FORCE
            }),
            guards_purges(bounds([3, 2, 0, 1, 2, 0, 1, 1])),
            low_level_purges(bounds([3, 1, 0, 1, 2, 0, 1, 1])),
            forced_back(Bounds {
                backs: 1,
                ..bounds([4, 2, 1, 1, 2, 1, 1, 1])
            }),
            unlock_limit(bounds([1, 4, 1, 3, 2, 1, 0, 0])),
            // Checked once at `faults` too: 30,267,264 states, 7.8 GB, clean.
            handles_line(clock),
            // Checked once at 2,2,1,1,2,1,0,1 too: 48,328,238 states, 10 GB, clean.
            guards_line_restart(bounds([2, 2, 1, 0, 2, 1, 0, 0])),
            // Where a dead process's late adoption took the lease over from its live
            // successor (fixed in fa930a1, control (am)): 4,064,870 states, clean.
            handles_line(bounds([0, 3, 0, 0, 2, 2, 0, 1])),
        ]
        .into_iter()
        // The controls' bounds too heavy to run without their bug in `cargo test` (see
        // `Control::clean_run_deep`): 7,727,688 states for (al)'s.
        .chain(crate::controls::clean_runs_deep())
        .collect()
    }

    /// The scenario named `name` (a [`Config::name`]) at `bounds`, with no bug: for the
    /// binary's `--scenario` and `--bound`, which check one scenario at one bound.
    pub fn named(name: &str, bounds: Bounds) -> Option<Config> {
        let scenarios: [fn(Bounds) -> Config; 21] = [
            handles,
            two_resources,
            keeper_alone,
            low_level,
            min_hold,
            purge_groups,
            guards_purges,
            low_level_purges,
            guards_min_hold,
            guards_min_hold_restart,
            readers_writer,
            one_permit,
            two_permits,
            readers_writer_holds,
            handles_line,
            guards_line_restart,
            readers_writer_line,
            sealing,
            unlock_limit,
            forced_back,
            renew_by_id,
        ];
        (scenarios.into_iter())
            .map(|scenario| scenario(bounds))
            .find(|config| config.name == name)
    }

    fn config(name: &'static str, resources: u8, clients: Vec<Mode>, bounds: Bounds) -> Config {
        Config {
            name,
            resources,
            kinds: vec![Kind::Exclusive; clients.len()],
            clients,
            ttl: 3,
            margin: 1,
            delay: 0,
            min_hold: 0,
            purge_groups: false,
            purges: false,
            unlock_limit: None,
            tombstone_cap: None,
            line: false,
            renew_by_id: false,
            bounds,
            bugs: Bugs::default(),
        }
    }

    /// A low-level client (`xlock` without TTL; `unlock` or `release_attempt`) and a client
    /// with guards, on one resource, every attempt with a lock-delay of a tick and a minimum
    /// hold of two (the TTL is three).
    pub fn min_hold(bounds: Bounds) -> Config {
        Config {
            delay: 1,
            min_hold: 2,
            ..config(
                "a minimum hold and a lock-delay",
                1,
                vec![Mode::LowLevel, Mode::Handle],
                bounds,
            )
        }
    }

    /// One client with guards on two resources under one lock id, alone, every attempt with a
    /// lock-delay of a tick and a minimum hold of two, and an operator who may call
    /// `purge_abandoned_groups`.
    pub fn purge_groups(bounds: Bounds) -> Config {
        Config {
            delay: 1,
            min_hold: 2,
            purge_groups: true,
            ..config(
                "one keeper, two resources, a minimum hold and purge",
                2,
                vec![Mode::Handle],
                bounds,
            )
        }
    }

    /// [`guards_min_hold`], with an operator who may call `purge` and the TTL index, which
    /// may delete the document once nothing in it is in force (the retention 0).
    pub fn guards_purges(bounds: Bounds) -> Config {
        Config {
            name: "two guards with a minimum hold, purges and the TTL index",
            purges: true,
            ..guards_min_hold(bounds)
        }
    }

    /// [`min_hold`] (a low-level client, `xlock` without TTL, and a guard), with an operator
    /// who may call `purge` and the TTL index.
    pub fn low_level_purges(bounds: Bounds) -> Config {
        Config {
            name: "a minimum hold, low-level calls, purges and the TTL index",
            purges: true,
            ..min_hold(bounds)
        }
    }

    /// Two clients with guards on one resource, every attempt with a lock-delay of a tick and
    /// a minimum hold of two.
    pub fn guards_min_hold(bounds: Bounds) -> Config {
        Config {
            delay: 1,
            min_hold: 2,
            ..config(
                "two guards with a minimum hold and a lock-delay",
                1,
                vec![Mode::Handle; 2],
                bounds,
            )
        }
    }

    /// Two clients with guards on one resource, every attempt with a lock-delay of a tick and
    /// a minimum hold of two, one of which may die and restart (resuming its lock id's lease
    /// by adoption) while a copy of its predecessor's release is late.
    pub fn guards_min_hold_restart(bounds: Bounds) -> Config {
        Config {
            name: RESUMED_IN_HOLD,
            ..guards_min_hold(bounds)
        }
    }

    /// [`guards_min_hold_restart`]'s name.
    pub const RESUMED_IN_HOLD: &str = "two guards with a minimum hold, one restarting";

    /// The bound that found [`guards_min_hold_restart`]'s finding (control (aa)): a kill, a
    /// timeout, two attempts per client, no time passing.
    pub const RESTART: Bounds = bounds([0, 2, 0, 1, 2, 1, 0, 0]);

    /// A reader and a writer (clients with guards, the reader's shares without cap, the
    /// writer's lock exclusive) on one resource.
    pub fn readers_writer(bounds: Bounds) -> Config {
        Config {
            kinds: vec![Kind::Shared { cap: None }, Kind::Exclusive],
            ..config("a reader and a writer", 1, vec![Mode::Handle; 2], bounds)
        }
    }

    /// Two clients with guards taking permits of one semaphore of `permits` permits: with
    /// one, the cap is what keeps them apart; with two, both hold shares at once (and their
    /// releases, renewals and expiries meet).
    pub fn semaphore(permits: u8, bounds: Bounds) -> Config {
        Config {
            kinds: vec![Kind::Shared { cap: Some(permits) }; 2],
            ..config(
                if permits == 1 {
                    "a semaphore of one permit, two holders"
                } else {
                    "a semaphore of two permits, two holders"
                },
                1,
                vec![Mode::Handle; 2],
                bounds,
            )
        }
    }

    /// [`semaphore`] of one permit.
    pub fn one_permit(bounds: Bounds) -> Config {
        semaphore(1, bounds)
    }

    /// [`semaphore`] of two permits.
    pub fn two_permits(bounds: Bounds) -> Config {
        semaphore(2, bounds)
    }

    /// [`readers_writer`], every attempt with a lock-delay of a tick and a minimum hold of
    /// two: a reader's share let go of within its hold keeps the writer out, and counts
    /// against no other reader.
    pub fn readers_writer_holds(bounds: Bounds) -> Config {
        Config {
            name: "a reader and a writer, a minimum hold and a lock-delay",
            delay: 1,
            min_hold: 2,
            ..readers_writer(bounds)
        }
    }

    /// [`semaphore`] of `permits`, every attempt with a lock-delay of a tick and a minimum
    /// hold of two: a permit let go of within its hold stays taken until the hold ends.
    pub fn semaphore_holds(permits: u8, bounds: Bounds) -> Config {
        Config {
            name: if permits == 1 {
                "a semaphore of one permit, a minimum hold and a lock-delay"
            } else {
                "a semaphore of two permits, a minimum hold and a lock-delay"
            },
            delay: 1,
            min_hold: 2,
            ..semaphore(permits, bounds)
        }
    }

    /// The shared scenarios with a minimum hold and a lock-delay, at the small bounds, for
    /// `cargo test`: the reader and the writer at the first of [`SMALL`], at [`TIME`] and at
    /// [`STEP_BACK`]; two permits at the first of [`SMALL`] (no repeat) and at [`TIME`]; one
    /// permit at [`HOLD_FAULTS`]. ("No grant inside a minimum hold" judges a share's hold and
    /// lock-delay against writers: no exclusive grant while a share is in force; control
    /// (r').)
    pub fn shared_holds() -> Vec<Config> {
        vec![
            readers_writer_holds(SMALL[0]),
            readers_writer_holds(TIME),
            readers_writer_holds(STEP_BACK),
            semaphore_holds(
                2,
                Bounds {
                    retries: 0,
                    ..SMALL[0]
                },
            ),
            semaphore_holds(2, TIME),
            semaphore_holds(1, HOLD_FAULTS),
        ]
    }

    /// The shared scenarios (readers and a writer, semaphores of one and two permits) at
    /// `bounds`.
    pub fn shared(bounds: Bounds) -> Vec<Config> {
        vec![
            readers_writer(bounds),
            one_permit(bounds),
            two_permits(bounds),
        ]
    }

    /// [`handles`] with the line: every acquire waits in line (a place lasting twice the
    /// TTL).
    pub fn handles_line(bounds: Bounds) -> Config {
        Config {
            name: "two guards in line",
            line: true,
            ..handles(bounds)
        }
    }

    /// [`guards_min_hold_restart`] with the line: a restarted guard answered "already held"
    /// keeps its place while it resumes, and goes on waiting there if the adoption is refused
    /// (its lease let go of within its hold meanwhile, by its predecessor's late release).
    pub fn guards_line_restart(bounds: Bounds) -> Config {
        Config {
            name: "two guards in line, a minimum hold, one restarting",
            line: true,
            ..guards_min_hold(bounds)
        }
    }

    /// The line at the small bounds, for `cargo test`: two guards in line, and a reader
    /// and a writer in line, at both of [`SMALL`] and at [`TIME`]. ([`guards_line_restart`]
    /// runs at control (ah)'s bound, without the bug, as every control's scenario does.)
    pub fn line() -> Vec<Config> {
        vec![
            handles_line(SMALL[0]),
            handles_line(SMALL[1]),
            handles_line(TIME),
            readers_writer_line(SMALL[0]),
            readers_writer_line(SMALL[1]),
            readers_writer_line(TIME),
        ]
    }

    /// [`readers_writer`] with the line: the reader's and the writer's acquires wait in
    /// line, and the checker's record of the line holds the waiting reader too.
    pub fn readers_writer_line(bounds: Bounds) -> Config {
        Config {
            name: "a reader and a writer in line",
            line: true,
            ..readers_writer(bounds)
        }
    }

    /// Two clients with guards on one resource.
    pub fn handles(bounds: Bounds) -> Config {
        config("two guards, one resource", 1, vec![Mode::Handle; 2], bounds)
    }

    /// One client with guards on two resources under one lock id (a multi-lock), and one
    /// on the first resource.
    pub fn two_resources(bounds: Bounds) -> Config {
        config(
            "one lock id on two resources",
            2,
            vec![Mode::Handle; 2],
            bounds,
        )
    }

    /// One client with guards on two resources under one lock id, alone: what its keeper
    /// renews, and what it tells its guards.
    pub fn keeper_alone(bounds: Bounds) -> Config {
        config("one keeper, two resources", 2, vec![Mode::Handle], bounds)
    }

    /// The limits at the small bounds, for `cargo test`: [`unlock_limit`] with three
    /// attempts, two timeouts, the library's repeat of an unlock and a tick; [`sealing`]
    /// with two attempts and two timeouts.
    pub fn limits() -> Vec<Config> {
        vec![
            unlock_limit(bounds([1, 3, 1, 2, 2, 0, 0, 0])),
            sealing(bounds([1, 2, 1, 2, 2, 0, 0, 0])),
        ]
    }

    /// A low-level client alone (`xlock` without TTL, each of unknown outcome withdrawn)
    /// under a tombstone cap of one (the library's `MAX_TOMBSTONES`, 1,000, scaled down):
    /// its second withdrawal on the resource seals it, and the late copies of the attempt
    /// that withdrawal stands for must be refused.
    pub fn sealing(bounds: Bounds) -> Config {
        Config {
            name: "a low-level client at the tombstone cap",
            clients: vec![Mode::LowLevel],
            kinds: vec![Kind::Exclusive],
            tombstone_cap: Some(1),
            ..low_level(bounds)
        }
    }

    /// A low-level client alone (`xlock` without TTL, `unlock`) under an unlock limit of
    /// one (the library's 16 doubted unlocks per lock id, scaled down): with two unlocks of
    /// unknown outcome it makes no attempt until one is answered.
    pub fn unlock_limit(bounds: Bounds) -> Config {
        Config {
            name: "a low-level client under the unlock limit",
            clients: vec![Mode::LowLevel],
            kinds: vec![Kind::Exclusive],
            unlock_limit: Some(1),
            ..low_level(bounds)
        }
    }

    /// Two clients with guards on one resource, each of which may call the low-level
    /// `renew(lock_id)` of its own lock id once while a guard holds, with a TTL of a tick,
    /// shorter than its guards' ([`Config::renew_by_id`]).
    pub fn renew_by_id(bounds: Bounds) -> Config {
        Config {
            renew_by_id: true,
            ..config(
                "renew(lock_id) beside a guard",
                1,
                vec![Mode::Handle, Mode::Handle],
                bounds,
            )
        }
    }

    /// A low-level client (`xlock` without TTL, `unlock`) and a client with guards.
    pub fn low_level(bounds: Bounds) -> Config {
        config(
            "low-level calls beside a guard",
            1,
            vec![Mode::LowLevel, Mode::Handle],
            bounds,
        )
    }

    /// The shared scenarios at the small bounds, for `cargo test`: the reader and the
    /// writer at both of [`SMALL`] and at [`TIME`], the semaphores at the first of [`SMALL`]
    /// and at [`TIME`] (a semaphore of one permit is the reader and writer's state space
    /// again, its cap in the writer's place; the faults of the second bound meet a share as
    /// they meet the reader's).
    pub fn shared_small() -> Vec<Config> {
        vec![
            readers_writer(SMALL[0]),
            readers_writer(SMALL[1]),
            readers_writer(TIME),
            one_permit(SMALL[0]),
            one_permit(TIME),
            two_permits(SMALL[0]),
            two_permits(TIME),
        ]
    }

    /// The scenarios checked at [`TIME`]: those whose leases have a TTL.
    pub fn timed() -> Vec<Config> {
        vec![
            handles(TIME),
            keeper_alone(Bounds {
                attempts: 2,
                ..TIME
            }),
            low_level(TIME),
            min_hold(TIME),
            guards_min_hold(TIME),
            renew_by_id(TIME),
        ]
    }

    /// Every scenario at `bounds`.
    pub fn all(bounds: Bounds) -> Vec<Config> {
        vec![
            handles(bounds),
            two_resources(bounds),
            keeper_alone(bounds),
            low_level(bounds),
        ]
    }

    /// The scenarios with a minimum hold and a lock-delay, at the small bounds: the first of
    /// [`SMALL`], and [`HOLD_FAULTS`] (their [`TIME`] runs are in [`timed`]).
    pub fn holds() -> Vec<Config> {
        vec![
            min_hold(Bounds {
                retries: 0,
                ..SMALL[0]
            }),
            guards_min_hold(SMALL[0]),
            min_hold(HOLD_FAULTS),
            guards_min_hold(HOLD_FAULTS),
            purge_groups(bounds([2, 2, 0, 1, 2, 0, 1, 0])),
            guards_min_hold_restart(RESTART),
        ]
    }
}

/// The controls: each a bug found in the library before, put back, with the scenario that
/// shows it and the property it breaks.
pub mod controls {
    use super::{Bounds, Bugs, Config, model, scenarios};

    /// A control: a bug put back.
    #[derive(Clone, Debug)]
    pub struct Control {
        /// Its letter and name.
        pub name: &'static str,
        /// The model with the bug.
        pub config: Config,
        /// The property that must fail.
        pub breaks: &'static str,
        /// Whether its bound, run without the bug (a check of the whole protocol there), is
        /// too heavy for `cargo test`'s controls' test: it runs with the deep bounds
        /// ([`scenarios::deep`], `--deep` and the ignored deep test) instead.
        pub clean_run_deep: bool,
    }

    /// The bounds of the controls whose run without the bug is left to the deep runs (see
    /// [`Control::clean_run_deep`]), with no bug.
    pub fn clean_runs_deep() -> Vec<Config> {
        (all().into_iter())
            .filter(|control| control.clean_run_deep)
            .map(|control| Config {
                bugs: Bugs::default(),
                ..control.config
            })
            .collect()
    }

    fn control(
        name: &'static str,
        scenario: fn(Bounds) -> Config,
        bounds: [u8; 8],
        bug: fn(&mut Bugs),
        breaks: &'static str,
    ) -> Control {
        let mut config = scenario(scenarios::bounds(bounds));
        bug(&mut config.bugs);
        Control {
            name,
            config,
            breaks,
            clean_run_deep: false,
        }
    }

    /// `control`, whose run without the bug is left to the deep runs.
    fn clean_run_deep(mut control: Control) -> Control {
        control.clean_run_deep = true;
        control
    }

    /// `control` with one backward step of the server's clock allowed.
    fn stepping_back(mut control: Control) -> Control {
        control.config.bounds.backs = 1;
        control
    }

    /// Every control, each with the smallest bound that shows it.
    pub fn all() -> Vec<Control> {
        let mut all = listed();
        all.push(control(
            "(ae) a force release after a step back cuts a hold under way ($$NOW + hold)",
            scenarios::guards_min_hold,
            [1, 1, 0, 1, 2, 0, 1, 1],
            |b| b.force_cuts_hold = true,
            model::NO_GRANT_IN_HOLD,
        ));
        if let Some(last) = all.last_mut() {
            last.config.bounds.backs = 1;
        }
        all
    }

    fn listed() -> Vec<Control> {
        use scenarios::{
            forced_back, guards_line_restart, guards_min_hold, guards_min_hold_restart,
            guards_purges, handles, handles_line, keeper_alone, low_level, min_hold, one_permit,
            purge_groups, readers_writer, readers_writer_holds, renew_by_id, two_permits,
            unlock_limit,
        };
        vec![
            control(
                "(ao) a grant acknowledged with w: 1, rolled back by a failover",
                handles,
                [0, 1, 0, 0, 1, 0, 0, 0],
                |b| b.w1_rollback = true,
                model::EXCLUSION,
            ),
            control(
                "(ah) a waiting attempt answered \"already held\" out of the line (before 4b66416)",
                guards_line_restart,
                [0, 2, 0, 0, 2, 1, 0, 1],
                |b| b.held_answer_leaves_line = true,
                model::ORDER,
            ),
            control(
                "(ai) a line jumper: a waiting attempt granted past the places ahead of it",
                handles_line,
                [0, 2, 0, 0, 2, 0, 0, 0],
                |b| b.line_jumper = true,
                model::ORDER,
            ),
            control(
                "(aj) a late leave_line or withdrawal takes its lock id's next call's place",
                guards_line_restart,
                [0, 2, 0, 0, 2, 1, 0, 1],
                |b| b.line_removal_by_lock_id = true,
                model::ORDER,
            ),
            // Its bound without the bug is 7,727,688 states (about 150 s in a debug build):
            // that run is a deep one.
            clean_run_deep(control(
                "(al) a late adoption takes its lock id's next call's place",
                handles_line,
                [0, 3, 0, 1, 2, 1, 0, 1],
                |b| b.adoption_by_lock_id = true,
                model::ORDER,
            )),
            control(
                "(am) an adoption whatever keeper the entry names: a dead process's late adoption takes the lease over from its live successor",
                keeper_alone,
                [0, 3, 0, 0, 2, 2, 0, 0],
                |b| b.adoption_ignores_keeper = true,
                model::RELEASED_IS_FREE,
            ),
            control(
                "(an) a renew(lock_id) with a shorter TTL ends a guard's lease before its local deadline",
                renew_by_id,
                [1, 1, 0, 0, 2, 0, 0, 0],
                |b| b.renew_by_id_shortens = true,
                model::EXCLUSION,
            ),
            control(
                "(a) a queued release lands after its lock id resumed (no settle)",
                handles,
                [0, 2, 0, 1, 2, 0, 0, 0],
                |b| b.no_settle_releases = true,
                model::LOSS_BEFORE_GRANT,
            ),
            control(
                "(b) an owed withdrawal removes the re-adopted member (no settle)",
                handles,
                [0, 2, 0, 1, 2, 0, 0, 0],
                |b| b.no_settle_withdrawals = true,
                model::LOSS_BEFORE_GRANT,
            ),
            control(
                "(c) an uncertain grant released without a tombstone",
                handles,
                [0, 1, 1, 1, 2, 0, 0, 0],
                |b| b.no_retire_on_release = true,
                model::RELEASED_IS_FREE,
            ),
            control(
                "(l) a retiring release leaves a re-grant of its attempt (by token only)",
                handles,
                [1, 1, 1, 1, 2, 0, 1, 0],
                |b| b.release_by_token_only = true,
                model::RELEASED_IS_FREE,
            ),
            control(
                "(d) xlock: unknown outcome, repeated, unlocked, no withdrawal",
                low_level,
                [0, 2, 0, 1, 2, 0, 0, 0],
                |b| b.xlock_no_withdraw = true,
                model::RELEASED_IS_FREE,
            ),
            control(
                "(e) a keeper that renews by lock id alone",
                keeper_alone,
                [1, 2, 0, 1, 2, 0, 0, 0],
                |b| b.keeper_by_lock_id = true,
                model::NO_ORPHAN_OUTLIVES,
            ),
            control(
                "(f) a keeper that trusts its renewal count",
                keeper_alone,
                [2, 2, 0, 1, 2, 0, 1, 0],
                |b| {
                    b.keeper_by_lock_id = true;
                    b.keeper_trusts_count = true;
                },
                model::REVOCATION_NOTICED,
            ),
            control(
                "(g) a refusal taken as settling an uncertain attempt",
                handles,
                [0, 1, 1, 1, 2, 0, 0, 0],
                |b| b.refusal_settles = true,
                model::RELEASED_IS_FREE,
            ),
            control(
                "(h) a release that ignores the keeper removes a resumed lease",
                handles,
                [0, 2, 0, 1, 2, 1, 0, 0],
                |b| b.no_keeper_match = true,
                model::LOSS_BEFORE_GRANT,
            ),
            control(
                "(i) a fence that restarts when the entry goes",
                handles,
                [0, 1, 0, 0, 1, 0, 0, 0],
                |b| b.counter_reset = true,
                model::TOKENS_INCREASE,
            ),
            control(
                "(j) a local deadline past the server's expiry",
                handles,
                [3, 1, 0, 0, 1, 0, 0, 0],
                |b| b.long_deadline = true,
                model::EXCLUSION,
            ),
            control(
                "(k) a release that says Ok when it removed nothing",
                handles,
                [0, 1, 0, 0, 1, 0, 1, 0],
                |b| b.release_ok_when_gone = true,
                model::RELEASE_OK,
            ),
            control(
                "(m) a late unlock removes a later grant (no afterUnlocks)",
                low_level,
                [0, 2, 0, 1, 2, 0, 0, 0],
                |b| b.unlock_spares_nothing = true,
                model::UNLOCK_LEAVES_LATER,
            ),
            control(
                "(n) an unlock whose repeat was answered is no longer doubted",
                low_level,
                [0, 2, 1, 1, 2, 0, 0, 0],
                |b| b.unlock_repeat_settles = true,
                model::UNLOCK_LEAVES_LATER,
            ),
            control(
                "(o) an xlock answered from its lock id's entry leaves it unmarked",
                low_level,
                [0, 2, 1, 1, 2, 0, 0, 0],
                |b| b.held_answer_unmarked = true,
                model::EXCLUSION,
            ),
            control(
                "(p) a dead incarnation's retiring release removes a resumed re-grant",
                handles,
                [0, 2, 1, 1, 2, 1, 0, 1],
                |b| b.release_ignores_adopted = true,
                model::EXCLUSION,
            ),
            control(
                "(q) release_attempt removes a granted entry, dropping its minimum hold",
                min_hold,
                [0, 1, 0, 0, 1, 0, 0, 0],
                |b| b.withdraw_drops_hold = true,
                model::NO_GRANT_IN_HOLD,
            ),
            control(
                "(r) an acquire that takes an entry within its lock-delay for gone",
                guards_min_hold,
                [0, 1, 0, 0, 1, 0, 1, 0],
                |b| b.delay_ignored = true,
                model::NO_GRANT_IN_HOLD,
            ),
            control(
                "(s) a local deadline past the server's expiry (the lease itself)",
                handles,
                [3, 1, 0, 0, 1, 0, 0, 0],
                |b| b.long_deadline = true,
                model::DEADLINE_BEFORE_EXPIRY,
            ),
            control(
                "(t) purge_abandoned_groups takes a lock let go of within its hold for abandoned",
                purge_groups,
                [2, 2, 0, 0, 1, 0, 1, 0],
                |b| b.purge_takes_let_go = true,
                model::DEADLINE_BEFORE_EXPIRY,
            ),
            control(
                "(t') purge_abandoned_groups takes a let-go entry for abandoned: a live lease ended",
                purge_groups,
                [2, 2, 0, 0, 1, 0, 1, 0],
                |b| b.purge_takes_let_go = true,
                model::PURGE_ENDS_NOTHING_IN_FORCE,
            ),
            control(
                "(ac) a purge that reads an entry as expired at its lease's end (its hold purged)",
                guards_purges,
                [0, 1, 0, 0, 1, 0, 1, 0],
                |b| b.purge_by_lease_end = true,
                model::NO_GRANT_IN_HOLD,
            ),
            control(
                "(ac') a purge that reads an entry as expired at its lease's end",
                guards_purges,
                [0, 1, 0, 0, 1, 0, 1, 0],
                |b| b.purge_by_lease_end = true,
                model::PURGE_ENDS_NOTHING_IN_FORCE,
            ),
            control(
                "(ad) the TTL index's deletion restarts the fence (no clock floor on tokens)",
                guards_purges,
                [3, 2, 0, 0, 1, 0, 1, 0],
                |b| b.ttl_resets_fence = true,
                model::TOKENS_INCREASE,
            ),
            control(
                "(af) an attempt past the unlock limit carries the first doubted unlocks only",
                unlock_limit,
                [0, 3, 0, 2, 2, 0, 0, 0],
                |b| b.unlock_limit_truncates = true,
                model::UNLOCK_LEAVES_LATER,
            ),
            control(
                "(ak) an acquire that ignores the seal: a late copy of an attempt withdrawn into it is granted",
                scenarios::sealing,
                [0, 2, 0, 2, 2, 0, 0, 0],
                |b| b.seal_ignored = true,
                model::RELEASED_IS_FREE,
            ),
            control(
                "(u) a release_attempt of unknown outcome not owed (no settle)",
                min_hold,
                [0, 2, 0, 1, 2, 0, 0, 1],
                |b| b.release_attempt_not_owed = true,
                model::EXCLUSION,
            ),
            control(
                "(v) a shared grant that ignores the cap",
                one_permit,
                [0, 1, 0, 0, 1, 0, 0, 0],
                |b| b.shared_ignores_cap = true,
                model::CAP,
            ),
            control(
                "(w) a reader admitted while a writer holds",
                readers_writer,
                [0, 1, 0, 0, 1, 0, 0, 0],
                |b| b.reader_beside_writer = true,
                model::EXCLUSION,
            ),
            control(
                "(x) a writer admitted while a reader's share is live",
                readers_writer,
                [0, 1, 0, 0, 1, 0, 0, 0],
                |b| b.writer_beside_readers = true,
                model::EXCLUSION,
            ),
            control(
                "(y) a shared release that takes the other holders' shares with it",
                two_permits,
                [0, 1, 0, 0, 1, 0, 0, 0],
                |b| b.shared_release_takes_all = true,
                model::DEADLINE_BEFORE_EXPIRY,
            ),
            control(
                "(r') a writer admitted while a reader's share is within its lock-delay or hold",
                readers_writer_holds,
                [0, 1, 0, 0, 1, 0, 1, 0],
                |b| b.delay_ignored = true,
                model::NO_GRANT_IN_HOLD,
            ),
            control(
                "(aa) a restarted guard adopts the entry its predecessor's late release let go of",
                guards_min_hold_restart,
                [0, 2, 0, 1, 2, 1, 0, 0],
                |b| b.keeper_ignores_let_go = true,
                model::LET_GO_NOT_HELD_AGAIN,
            ),
            stepping_back(control(
                "(z) xlock after a step back: a grant let go of within its hold held again",
                min_hold,
                [0, 2, 0, 0, 1, 0, 0, 0],
                |b| b.let_go_held = true,
                model::LET_GO_NOT_HELD_AGAIN,
            )),
            stepping_back(control(
                "(z') a guard after a step back: its let-go lease resumed within its hold",
                guards_min_hold,
                [0, 2, 0, 0, 1, 0, 0, 0],
                |b| b.let_go_held = true,
                model::LET_GO_NOT_HELD_AGAIN,
            )),
            stepping_back(control(
                "(ag) a force-released lease left unmarked, renewed after a step back",
                forced_back,
                [3, 1, 0, 1, 2, 0, 1, 0],
                |b| b.force_leaves_unmarked = true,
                model::REVOCATION_NOTICED,
            )),
        ]
    }
}

/// Counterexamples the library's protocol has today, in the model: each is a finding
/// reported for the library (`docs/reliability.md`, "The model-checked protocol"), pinned
/// here so that a change to the library's commands that fixes it, carried into the model,
/// shows.
pub mod findings {
    /// (scenario, property) pairs the protocol is known to fail at the bounds checked.
    ///
    /// None today. The findings pinned here before are fixed, in the library and in the
    /// model, each with a control that puts it back: a late copy of `unlock` removing a grant
    /// of its lock id made after it was sent (control (m)); an `xlock` answered "already
    /// held" after a doubted `unlock`, its entry not naming the unlock (control (o), fixed in
    /// 9119560: an attempt not granted marks its lock id's entry with the unlocks it
    /// carries); a dead incarnation's retiring release removing the re-grant its restart
    /// resumed (control (p), fixed in 9119560: an adopted entry is marked, and a retiring
    /// release leaves it). A restarted low-level process that takes its lock id again (its
    /// predecessor's late `unlock`, or withdrawal, then removes its grant) is outside the
    /// library's contract (a lock id belongs to one holder): the model restarts a low-level
    /// client under a new lock id of its own.
    ///
    /// Found with the minimum hold, at the deep bound (`--deep`) of "a minimum hold and a
    /// lock-delay", and fixed by 1943688 (control (u) puts it back): a late
    /// `release_attempt` removed (or let go of) the grant its client was answered "already
    /// held" with since. The low-level client was granted (`xlock`, nonce n1), called
    /// `release_attempt` of it, which timed out (its copy still in the network); it called
    /// `xlock` again (n2), was answered "already held" with n1's entry, which it then
    /// believed it held; the late copy landed and let go of n1's entry; its hold ended and
    /// the guard's client was granted. A `release_attempt` of unknown outcome now stays owed
    /// (`Chore::Withdraw` with the hold kept): it is sent again in the background, and
    /// before the client's next attempt of the lock id on the resource, which is then never
    /// answered with the grant it withdraws (a late copy that lands after is harmless).
    ///
    /// Found when the keeper's statements were modelled as the library sent them
    /// (`keepalive::lease_query`, for the renewal and resume's adoption: live while
    /// `expiresAt > $$NOW + the grant's lock-delay`, `letGoAt` unread, where every other
    /// command asks `expr::holds`), at [`RESTART`](crate::scenarios::RESTART) of
    /// [`guards_min_hold_restart`](crate::scenarios::guards_min_hold_restart), with no clock
    /// step, and fixed in `lease_query` (control (aa) puts it back): a guard with a minimum
    /// hold calls `release` and its process dies, the release's copy still on its way; the
    /// restarted process asks again under the same lock id, is answered "already held" with
    /// the entry (not let go of yet) and sends its adoption; the late release lands first and
    /// lets go of the entry within its hold; the adoption still matched it, and the restarted
    /// guard believed a lease the server holds for nobody ("a grant let go of within its hold
    /// is not held again", "the local deadline comes before the server's expiry"), its local
    /// deadline counted from the lease's old end: where the hold is shorter than the TTL less
    /// the margin, another client could be granted at the hold's end while it believed.
    ///
    /// Found when force releases were put back into the steps back of the server's clock
    /// (issue 40), at [`FORCED_BACK_BOUND`](crate::scenarios::FORCED_BACK_BOUND) of
    /// [`forced_back`](crate::scenarios::forced_back), and fixed in the library's force
    /// release (control (ag) puts it back): **a step back of the server's clock revived a
    /// force-released lease that has a lock-delay**. A force release kept an entry with a
    /// lock-delay in force for the delay, its lease ended (`expiresAt` becomes at most
    /// `$$NOW + delayMs`), and marked nothing; once the server's clock stepped back by more
    /// than the delay, `expiresAt > $$NOW + delayMs` read true again, so the holder's keeper
    /// (`keepalive::lease_query`) renewed the lease it was to lose (and `expr::holds`
    /// answered its lock id's next attempt "already held" with it): the holder was never
    /// told, and went on holding a lock the operator broke ("revocation noticed within a
    /// TTL"). Nobody else was granted meanwhile (the entry is held), so exclusion held. The
    /// same cause as control (z) had for a let-go entry, and the same remedy: the force
    /// release now marks the entry it keeps (`letGoAt`, as a let-go entry is marked), which
    /// `expr::holds`, `lease_query`, status and `purge_abandoned_groups` read as holding
    /// nothing whatever the clock reads. The trace: granted at server time 3 (`expiresAt` 7,
    /// delay 1), force-released at 3 (`expiresAt` 4), the clock steps back to 1, the
    /// keeper's renewal matches (4 > 1 + 1) and sets `expiresAt` 5: the revoked guard's
    /// deadline moves on.
    ///
    /// Found when the line was modelled (issue 40), and fixed the next day (control (aj)
    /// puts it back): **a late `leave_line`, withdrawal or retiring release of a lock id's
    /// earlier call took the place of its later call**. The library's place belonged to the
    /// lock id, and those commands took out every place of it: one that landed after the
    /// lock id's next waiting call (or its restarted process's) joined the line took that
    /// call's place, which joined again at the end, behind waiters that came after it. In
    /// "two guards in line" at `1,2,1,1,2,0,0,0`: a call refused gives up, its `leave_line`
    /// times out and is sent again (answered), the client's next call joins the line, the
    /// other client's call joins behind it, the first copy lands and takes the place, and the
    /// other client is served first. Order only: no safety property was touched. A place
    /// now names its waiting call ([`Place::call`](crate::server::Place::call)), those
    /// commands take out their own call's place only, and the record of the line
    /// ([`State::line`](crate::model::State::line)) is kept per call, so the old removal is a
    /// counterexample to [`ORDER`](crate::model::ORDER).
    ///
    /// The adoption was the last removal by lock id (fixed in 32daed2, control (al) puts
    /// it back): a late copy of an ended call's adoption, landing while the lease was still
    /// live and the lock id's next call stood in line, took that call's place.
    ///
    /// Found at a bound `cargo test` did not run, and fixed in the library (control (am)
    /// puts it back, caught in "one keeper, two resources" at `0,3,0,0,2,2,0,0`, 12 steps):
    /// **a late adoption from a dead process took the lease over from its live
    /// successor**. In "two guards in line" at `0,3,0,0,2,2,0,1` ("a released lock becomes
    /// free", 28 steps): the
    /// lease of client 0's first process outlives it; its second process's call is answered
    /// "already held" and its adoption is delayed, and that process dies too; the third's
    /// call adopts the lease and releases it; the late adoption lands before the release,
    /// matches the live lease (the adoption's query does not ask which keeper the entry
    /// names) and names its dead keeper, so the release finds nothing and the lease is held
    /// by nobody until its TTL runs out (the library's live holder reports it revoked). The
    /// adoption now matches only the entry naming the keeper its attempt's "already held"
    /// reply showed, or its own (a copy of an adoption that landed): `Request::Adopt`'s
    /// `answered`, the library's `keepalive::adopted_keepers`. That bound is clean since (4,064,870 states, release build, `--scenario "two guards in line"
    /// --bound 0,3,0,0,2,2,0,1`).
    pub const KNOWN: [(&str, &str); 0] = [];

    /// Whether `property` failing in `scenario` is a known finding.
    pub fn is_known(scenario: &str, property: &str) -> bool {
        KNOWN.contains(&(scenario, property))
    }
}

/// What a check found.
#[derive(Debug)]
pub struct Outcome {
    /// The scenario.
    pub name: &'static str,
    /// Unique states visited.
    pub unique_states: usize,
    /// States generated, with repeats.
    pub states: usize,
    /// The deepest path.
    pub max_depth: usize,
    /// How long it took.
    pub elapsed: Duration,
    /// The properties that failed, each with its counterexample.
    pub counterexamples: Vec<(&'static str, Path<State, Action>)>,
}

/// Checks `config` exhaustively (breadth first, so each counterexample is a shortest one);
/// with `until`, stops at the first counterexample of that property.
pub fn check(config: &Config, until: Option<&'static str>) -> Outcome {
    let started = Instant::now();
    let model = LockModel::new(config.clone());
    let finish = match until {
        Some(name) => HasDiscoveries::AnyOf([name].into_iter().collect()),
        None => HasDiscoveries::AllFailures,
    };
    let checker = model
        .checker()
        .threads(2)
        .finish_when(finish)
        .spawn_bfs()
        .join();
    let mut counterexamples: Vec<_> = checker.discoveries().into_iter().collect();
    counterexamples.sort_by_key(|(name, _)| *name);
    Outcome {
        name: config.name,
        unique_states: checker.unique_state_count(),
        states: checker.state_count(),
        max_depth: checker.max_depth(),
        elapsed: started.elapsed(),
        counterexamples,
    }
}

/// Readable traces of counterexamples.
pub mod trace {
    use super::{Action, LockModel, State, model::show_doc};
    use stateright::Path;

    fn show_state(model: &LockModel, state: &State) -> String {
        let mut out = format!("    t={} server={}", state.rt, state.now());
        for (r, doc) in state.server.docs.iter().enumerate() {
            out += &format!("  r{r} {}", show_doc(doc));
        }
        for (r, line) in state.line.iter().enumerate() {
            if !line.is_empty() {
                out += &format!(
                    "\n      waiting on r{r}, in the order they joined (client, until, call): {line:?}"
                );
            }
        }
        for (i, c) in state.clients.iter().enumerate() {
            out += &format!(
                "\n      client {i} (lock id L{}, incarnation {}):",
                model.lock_id(i as u8, state),
                c.incarnation
            );
            for l in &c.leases {
                out += &format!(
                    " lease r{} t{} n{} deadline {}{}{};",
                    l.resource,
                    l.token,
                    l.nonce,
                    l.deadline,
                    if l.lost { " LOST" } else { "" },
                    if l.believes(state.rt) {
                        " (believes)"
                    } else {
                        ""
                    },
                );
            }
            for (r, t, _) in &c.held {
                out += &format!(" holds r{r} t{t} (low-level);");
            }
            if let Some(call) = &c.call {
                out += &format!(" call {call:?}{};", if c.waiting { " waiting" } else { "" });
            }
            if !c.chores.is_empty() {
                out += &format!(" owes {:?};", c.chores);
            }
            if !c.doubted.is_empty() {
                out += &format!(" doubts unlocks {:?};", c.doubted);
            }
        }
        for m in &state.network {
            out += &format!(
                "\n      in the network: from client {} (incarnation {}{}): {:?}",
                m.from,
                m.incarnation,
                if m.awaited { ", awaited" } else { "" },
                m.request
            );
        }
        out
    }

    fn show_action(model: &LockModel, state: &State, action: &Action) -> String {
        match *action {
            Action::Deliver(k, reply) => {
                let m = &state.network[k as usize];
                let fate = if !m.awaited {
                    "late or unawaited"
                } else if reply {
                    "reply received"
                } else {
                    "reply lost"
                };
                format!(
                    "server executes {:?} from client {} ({fate})",
                    m.request, m.from
                )
            }
            Action::Drop(k) => format!("network loses {:?}", state.network[k as usize].request),
            Action::Jump => format!("server clock steps forward by {}", model.config.ttl),
            Action::StepBack => format!("server clock steps back by {}", model.config.ttl),
            ref other => format!("{other:?}"),
        }
    }

    /// The counterexample as numbered steps, each with the state it leads to.
    pub fn explain(model: &LockModel, path: &Path<State, Action>) -> String {
        let steps = path.clone().into_vec();
        let mut out = String::new();
        for (n, (state, action)) in steps.iter().enumerate() {
            if n == 0 {
                out += &format!("  start\n{}\n", show_state(model, state));
            }
            if let Some(action) = action {
                let next = &steps[n + 1].0;
                out += &format!(
                    "  {}. {}\n{}\n",
                    n + 1,
                    show_action(model, state, action),
                    show_state(model, next)
                );
            }
        }
        out
    }
}
