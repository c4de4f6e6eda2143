//! The clients, the network and the faults around the [`Server`], as a [`stateright::Model`].
//!
//! Each client has one lock id of its own, used by every attempt it makes (a resumable
//! holder: the case where attempts of one lock id meet), and one keeper id per incarnation;
//! a low-level client takes a new lock id of its own when it restarts (a lock id belongs to
//! one holder), a client with guards keeps its lock id and resumes by it.
//! A client makes one call at a time (its foreground call, a renewal of its keeper or one of
//! its chores); each call sends one request into the network and waits for the reply. The
//! network holds every request until it is delivered (executed by the server, its reply
//! received or lost) or dropped: a request whose client timed out stays in it and may be
//! executed later, after newer ones (late copies, reordering), and a client that sends the
//! same attempt again after a timeout leaves two copies (duplication).
//!
//! Time: `rt` is real time, which the clients' monotonic clocks follow; the server's clock is
//! `rt + skew`, and a clock step moves `skew` forward or back by a TTL (`skew` starts at a TTL
//! per backward step the bounds allow, so that the server's clock never reads below 0). A
//! lease's local deadline is in real time: the send time of the attempt or renewal the server
//! confirmed, plus what the server says the grant had left, minus the margin. A forward step
//! ends leases early by the server's reckoning, and excuses the holders whose attempt or last
//! confirmed renewal was sent before it; a backward step excuses nobody: the library reports
//! no lease lost for it (cluster time never goes back, and the leases last longer by the
//! server's reckoning), so every holder goes on believing until its local deadline.

use stateright::{Model, Property};

use crate::server::{
    Bugs, Doc, Entry, KeeperId, Kind, LockId, Nonce, Place, Reply, Request, Res, Server, Time,
    Token, UnlockOp, Unlocks,
};

/// How a client uses the library.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Handles and guards: waiting acquires, leases kept by the client's keeper, releases,
    /// chores, resume by lock id.
    Handle,
    /// The low-level calls: `xlock` (without TTL) and `unlock`; nothing is renewed.
    LowLevel,
}

/// How far the checker goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bounds {
    /// The last instant of real time.
    pub max_time: Time,
    /// Calls that send a new attempt, per client (all incarnations).
    pub attempts: u8,
    /// Repeats of one attempt after a timeout or a refusal.
    pub retries: u8,
    /// Timeouts (and lost replies), in all.
    pub timeouts: u8,
    /// Requests in the network at once.
    pub in_flight: u8,
    /// Client kills (each restarts the client: under the same lock id with guards, which
    /// resume by it; under a new one of its own for the low-level calls).
    pub kills: u8,
    /// Operators' force releases.
    pub force_releases: u8,
    /// Forward steps of the server's clock.
    pub jumps: u8,
    /// Backward steps of the server's clock (`$$NOW` follows the system clock, which can
    /// step back; each by a TTL).
    pub backs: u8,
}

/// What the checker checks: the clients, the TTL, the bounds and the bugs put back.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    /// The scenario's name, for reports.
    pub name: &'static str,
    /// The number of resources (one document each).
    pub resources: u8,
    /// The clients, by mode; client `i` uses lock id `i` (a low-level client, after `k`
    /// restarts, `i + k * clients`).
    pub clients: Vec<Mode>,
    /// The kind of lock each client's guards take, by client (a writer or a mutex is
    /// exclusive, a reader shared without cap, a semaphore's permit shared with its cap);
    /// a low-level client's `xlock` is exclusive whatever this says.
    pub kinds: Vec<Kind>,
    /// The TTL of a lease, in ticks.
    pub ttl: Time,
    /// The safety margin of a local deadline, in ticks.
    pub margin: Time,
    /// The lock-delay of every attempt, in ticks (0: none).
    pub delay: Time,
    /// The minimum hold of every attempt, in ticks (0: none). With one, a low-level client
    /// may also end its grant with `release_attempt` (`Hold::Kept`) instead of `unlock`.
    pub min_hold: Time,
    /// An operator may call `purge_abandoned_groups` (counted with the force releases; only
    /// with a minimum hold, whose entries keep `createdAt`).
    pub purge_groups: bool,
    /// An operator may call `purge`, and the TTL index may delete a document that has been
    /// idle for the retention (both counted with the force releases; the retention is 0, the
    /// worst case: a document is deleted as soon as nothing in it is in force).
    pub purges: bool,
    /// The most doubted unlocks of its lock id an attempt carries (the library's 16,
    /// `unlocks::MAX_DOUBTED_UNLOCKS`, scaled down): a low-level client that doubts more makes
    /// no attempt (the library refuses it before sending) until some are answered. None: no
    /// limit (a run makes at most [`Unlocks::CAPACITY`] calls, far fewer than 16).
    pub unlock_limit: Option<u8>,
    /// The most live tombstones a resource keeps (the library's `MAX_TOMBSTONES`, 1,000,
    /// scaled down): a withdrawal or retirement past it seals the resource
    /// ([`Server::seal_past`]). None: no cap (a run withdraws far fewer than 1,000).
    pub tombstone_cap: Option<u8>,
    /// The line: every acquire of a client with guards is a waiting one (`announce`, a place
    /// lasting twice the TTL, as `wait::place_life`), which takes a place in the resource's
    /// line when made to wait; a call that stops waiting with every attempt refused leaves
    /// it (`Chore::Leave`), and a resume whose adoption is refused goes on waiting in its
    /// place. Off: single attempts (the line left out, every grant the line allows made, and
    /// more).
    pub line: bool,
    /// A client with guards may call the low-level `renew(lock_id)` once for its own lock id
    /// while a guard holds, with a TTL of one tick, shorter than its guards' (a user's call
    /// beside the keeper's renewals): its guards' keeper does not learn of it, so the server
    /// must not end their leases sooner than they believe.
    pub renew_by_id: bool,
    /// The bounds.
    pub bounds: Bounds,
    /// The bugs put back (none: the library's protocol).
    pub bugs: Bugs,
}

/// A lease a client holds through a guard.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Lease {
    /// The resource.
    pub resource: Res,
    /// The grant's token.
    pub token: Token,
    /// The nonce of the granted attempt.
    pub nonce: Nonce,
    /// The local deadline, in real time.
    pub deadline: Time,
    /// Told lost (revoked).
    pub lost: bool,
    /// The release retires the attempt (its outcome was once unknown, or it was resumed).
    pub retiring: bool,
    /// The server clock's steps counted when its attempt (or last confirmed renewal) was
    /// sent: a later step excuses it.
    pub epoch: u8,
}

impl Lease {
    /// Whether its holder believes it holds the lock at real time `rt`.
    pub fn believes(&self, rt: Time) -> bool {
        !self.lost && rt < self.deadline
    }
}

/// A release or a withdrawal the client owes: queued, retried until done.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Chore {
    /// Release a grant (retiring its nonce if `retire`).
    Release {
        /// The resource.
        resource: Res,
        /// The grant's token.
        token: Token,
        /// Its attempt's nonce.
        nonce: Nonce,
        /// Retire the nonce too.
        retire: bool,
    },
    /// Withdraw an attempt.
    Withdraw {
        /// The resource.
        resource: Res,
        /// The attempt.
        nonce: Nonce,
        /// The minimum hold of a grant it ends is kept (`Hold::Kept`: a low-level
        /// `release_attempt` of unknown outcome, owed); else waived (`Hold::Waived`: a grant
        /// nobody was handed).
        kept: bool,
    },
    /// Leave the resource's line (`leave_line`): a waiting call that stopped with every
    /// attempt refused.
    Leave {
        /// The resource.
        resource: Res,
        /// The call (its first attempt's nonce): its place only goes.
        call: Nonce,
    },
}

impl Chore {
    fn resource(&self) -> Res {
        match *self {
            Chore::Release { resource, .. }
            | Chore::Withdraw { resource, .. }
            | Chore::Leave { resource, .. } => resource,
        }
    }

    fn nonce(&self) -> Option<Nonce> {
        match *self {
            Chore::Release { nonce, .. } | Chore::Withdraw { nonce, .. } => Some(nonce),
            Chore::Leave { .. } => None,
        }
    }
}

/// The call a client is making.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Call {
    /// A waiting acquire (`wait.rs`), with its `Pending` attempt.
    Acquire {
        /// The resource.
        resource: Res,
        /// The attempt.
        nonce: Nonce,
        /// When the last copy was sent.
        sent_at: Time,
        /// The clock steps counted at the first send.
        epoch: u8,
        /// A copy had an unknown outcome.
        uncertain: bool,
        /// Sent and not known to be refused: it may be granted.
        open: bool,
        /// Copies sent after the first.
        retries: u8,
    },
    /// Resume's adoption of the lock id's entry.
    Adopt {
        /// The resource.
        resource: Res,
        /// The entry's token.
        token: Token,
        /// The entry's nonce.
        nonce: Nonce,
        /// The lease's local deadline if adopted.
        deadline: Time,
        /// As the attempt's.
        epoch: u8,
        /// With the line: the waiting call's attempt answered "already held", as (resource,
        /// nonce, uncertain, retries), which goes on waiting in its place if the adoption is
        /// refused (its nonce again if a copy's outcome was unknown, else a new one).
        waiting: Option<(Res, Nonce, bool, u8)>,
    },
    /// A guard's `release()`.
    Release {
        /// The lease released.
        lease: Lease,
    },
    /// The keeper's renewal of the leases named.
    Renew {
        /// When it was sent.
        sent_at: Time,
        /// The clock steps counted then.
        epoch: u8,
        /// The leases named, as (resource, token).
        leases: Vec<(Res, Token)>,
    },
    /// A chore on its way (it stays owed until done).
    Chore(Chore),
    /// A user's `renew(lock_id)` of the client's own lock id ([`Config::renew_by_id`]):
    /// whatever its reply, no guard learns of it.
    RenewById,
    /// A low-level `xlock`.
    Xlock {
        /// The resource.
        resource: Res,
        /// Its attempt.
        nonce: Nonce,
    },
    /// A low-level `release_attempt` of a granted attempt (`Hold::Kept`): its caller worked
    /// under the grant.
    ReleaseAttempt {
        /// The resource.
        resource: Res,
        /// The attempt.
        nonce: Nonce,
    },
    /// A low-level `unlock`: the call `op`, doubted by its client until it ends with every
    /// copy answered.
    Unlock {
        /// The call's operation id.
        op: UnlockOp,
        /// A copy had an unknown outcome: it may still land, whatever the repeat is told.
        uncertain: bool,
        /// The library's one repeat of it was sent.
        repeated: bool,
    },
}

/// One client process (its current incarnation).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Client {
    /// Restarts so far.
    pub incarnation: u8,
    /// Attempts started so far.
    pub attempts: u8,
    /// Leases held through guards.
    pub leases: Vec<Lease>,
    /// Grants held through the low-level calls, as (resource, token, nonce of the attempt
    /// that was granted).
    pub held: Vec<(Res, Token, Nonce)>,
    /// An `xlock` was made since the last `unlock` returned.
    pub dirty: bool,
    /// The call in progress.
    pub call: Option<Call>,
    /// Whether the call waits for a reply (else: an acquire or an unlock between two
    /// copies).
    pub waiting: bool,
    /// Chores owed.
    pub chores: Vec<Chore>,
    /// The `unlock` calls of its lock id whose copies may still land (`crate::unlocks` in the
    /// library: from before a call is sent until it ends with every copy answered; for the
    /// rest of the run once a copy had an unknown outcome). Its attempts and adoptions carry
    /// them. A restarted process starts with none.
    pub doubted: Unlocks,
    /// It called `renew(lock_id)` ([`Config::renew_by_id`]; once a run).
    pub renewed_by_id: bool,
}

/// A request in the network.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Msg {
    /// The sending client.
    pub from: u8,
    /// Its incarnation.
    pub incarnation: u8,
    /// Its sender still waits for the reply.
    pub awaited: bool,
    /// The request.
    pub request: Request,
}

/// Who an attempt belongs to, and whether its client is done with it (for "a released
/// lock becomes free").
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NonceInfo {
    /// The client.
    pub client: u8,
    /// Its incarnation when it sent the attempt.
    pub incarnation: u8,
    /// The client ended the call that sent it, or released its grant.
    pub given_up: bool,
    /// Its client died before it was done with it: a late copy of it cannot be refused.
    pub abandoned: bool,
    /// Its grant was handed to a caller (a guard, a low-level grant): a minimum hold applies
    /// when its holder lets go of it; to a grant nobody was handed it does not.
    pub handed: bool,
    /// The call that sent it, named by the call's first attempt's nonce (its place in line
    /// names it).
    pub call: Nonce,
}

/// The violations recorded at a transition (bits of [`State::flags`]).
pub mod flag {
    /// A grant while another client believed it held the resource.
    pub const GRANT_WHILE_BELIEVED: u16 = 1;
    /// A token not above every earlier token of its resource.
    pub const TOKEN_ORDER: u16 = 2;
    /// A release returned `Ok` for a grant the server did not hold live.
    pub const RELEASE_OK: u16 = 4;
    /// A renewal extended an entry it was not sent for.
    pub const ORPHAN_RENEWED: u16 = 8;
    /// An `unlock` removed an entry its client's process was granted by an attempt sent
    /// after the unlock.
    pub const LATER_GRANT_UNLOCKED: u16 = 16;
    /// A grant while an entry let go of within its minimum hold, or within its lock-delay,
    /// was to keep the resource from everybody (an exclusive grant: from it, shares
    /// included).
    pub const GRANT_IN_HOLD: u16 = 32;
    /// A purge, `purge_abandoned_groups` or the TTL index removed an entry in force (a live
    /// lease, or an entry within its lock-delay or minimum hold) that the call is not
    /// documented to end.
    pub const PURGE_ENDED: u16 = 64;
    /// A grant went past a waiter that stood in line before the grantee (or before it asked,
    /// if it stood in no line).
    pub const OUT_OF_ORDER: u16 = 128;
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Real time.
    pub rt: Time,
    /// The server's clock minus real time.
    pub skew: Time,
    /// Forward clock steps so far.
    pub jumps: u8,
    /// Backward clock steps so far.
    pub backs: u8,
    /// Force releases so far.
    pub forces: u8,
    /// Kills so far.
    pub kills: u8,
    /// Timeouts so far.
    pub timeouts: u8,
    /// The documents.
    pub server: Server,
    /// The clients.
    pub clients: Vec<Client>,
    /// Requests in the network, sorted.
    pub network: Vec<Msg>,
    /// Every attempt made, by nonce.
    pub nonces: Vec<NonceInfo>,
    /// Entries an operator removed, as (resource, token, real time).
    pub revoked: Vec<(Res, Token, Time)>,
    /// Each `unlock` call so far, by operation id (the next call's is their number): its client, that client's incarnation, and the
    /// first nonce of the attempts sent after it.
    pub unlocks: Vec<(u8, u8, Nonce)>,
    /// The highest token granted on each resource.
    pub max_token: Vec<Token>,
    /// Per resource, the server time until which no grant may be made (a record of the
    /// checker's, kept apart from the server's documents): the end of a minimum hold its
    /// holder let go into.
    pub quiet_until: Vec<Time>,
    /// Per resource, the waiting calls of clients with guards in the order they joined the
    /// line, as (client, until, call): a record of the checker's, kept apart from the
    /// server's documents, of where each waiter stands (see [`ORDER`]). A call (named by its
    /// first attempt's nonce) leaves it when it is granted or adopts, is answered out of
    /// the line, or its own leave or withdrawal lands; the client's next call (its restarted
    /// process's) takes over a place its ended call left, its turn kept.
    pub line: Vec<Vec<(u8, Time, Nonce)>>,
    /// Violations recorded at transitions ([`flag`]).
    pub flags: u16,
    /// The documents as they were before the first acknowledged write not rolled back since,
    /// which a failover may restore, undoing every acknowledged write after them (a cut-off
    /// primary's writes no other member applied): kept only with `w: 1`
    /// ([`Bugs::w1_rollback`]), and taken by the rollback.
    pub undo: Option<Server>,
}

impl State {
    /// The server's clock.
    pub fn now(&self) -> Time {
        self.rt + self.skew
    }
}

/// A step of the system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Real time passes a tick.
    Tick,
    /// The server's clock steps forward by a TTL.
    Jump,
    /// The server's clock steps back by a TTL.
    StepBack,
    /// The acknowledged writes since [`State::undo`] are rolled back: their primary was cut
    /// off before another member applied them (with `w: 1` only, [`Bugs::w1_rollback`]).
    RollBack,
    /// An operator force-releases a resource.
    ForceRelease(Res),
    /// An operator calls `purge_abandoned_groups`.
    PurgeGroups,
    /// An operator calls `purge`.
    Purge,
    /// The TTL index deletes a resource's document.
    TtlDelete(Res),
    /// A client dies and restarts (a new keeper): under the same lock id with guards, under
    /// a new lock id of its own for the low-level calls.
    Kill(u8),
    /// A client starts acquiring a resource (settling what it owes for it first).
    Acquire(u8, Res),
    /// The acquire sends its attempt again (same nonce); an `unlock` whose copy had an
    /// unknown outcome is repeated, once, by the library (same operation id).
    Retry(u8),
    /// The acquire gives up (withdrawing an attempt that may be granted); an `unlock` whose
    /// copy had an unknown outcome returns the error (it stays doubted).
    GiveUp(u8),
    /// A guard is released.
    Release(u8, Res),
    /// The keeper renews the leases it tracks.
    Renew(u8),
    /// A client with guards calls `renew(lock_id)` of its own lock id, with a TTL of a tick.
    RenewById(u8),
    /// The chores task sends an owed chore.
    SendChore(u8, u8),
    /// A low-level `xlock`.
    Xlock(u8, Res),
    /// A low-level `unlock`.
    Unlock(u8),
    /// A low-level `release_attempt` of a granted attempt (`Hold::Kept`).
    ReleaseAttempt(u8, Res),
    /// The network delivers a request; `reply`: its reply reaches a waiting sender.
    Deliver(u8, bool),
    /// The network loses a request nobody waits for.
    Drop(u8),
    /// A client stops waiting for its reply: the outcome is unknown to it.
    Timeout(u8),
}

/// The model: a [`Config`] to check.
#[derive(Clone, Debug)]
pub struct LockModel {
    /// What is checked.
    pub config: Config,
}

impl LockModel {
    /// A model of `config`.
    pub fn new(config: Config) -> Self {
        LockModel { config }
    }

    fn bugs(&self) -> &Bugs {
        &self.config.bugs
    }

    fn keeper(&self, client: u8, state: &State) -> KeeperId {
        client * 8 + state.clients[client as usize].incarnation
    }

    /// The lock id `client` uses now: its own, for good, with guards (a restart resumes
    /// by it); a low-level process's own per incarnation (the library's contract: a lock id
    /// belongs to one holder, so a restarted process takes a new one).
    pub fn lock_id(&self, client: u8, state: &State) -> LockId {
        match self.mode(client) {
            Mode::Handle => client,
            Mode::LowLevel => {
                let incarnation = state.clients[client as usize].incarnation;
                client + incarnation * self.config.clients.len() as u8
            }
        }
    }

    fn mode(&self, client: u8) -> Mode {
        self.config.clients[client as usize]
    }

    /// The kind of lock `client` takes.
    pub fn kind(&self, client: u8) -> Kind {
        match self.mode(client) {
            Mode::Handle => {
                (self.config.kinds.get(client as usize).copied()).unwrap_or(Kind::Exclusive)
            }
            Mode::LowLevel => Kind::Exclusive,
        }
    }

    /// Whether `client` owes nothing that keeps an attempt of its lock id on `resource`
    /// from being sent ([`Keeper::settle`](../../mongolock/lease/struct.Keeper.html)).
    fn settled(&self, state: &State, client: u8, resource: Res) -> bool {
        let bugs = self.bugs();
        state.clients[client as usize].chores.iter().all(|chore| {
            chore.resource() != resource
                || match chore {
                    Chore::Release { .. } => bugs.no_settle_releases,
                    Chore::Withdraw { .. } => bugs.no_settle_withdrawals,
                    Chore::Leave { .. } => false,
                }
        })
    }

    fn room(&self, state: &State) -> bool {
        state.network.len() < self.config.bounds.in_flight as usize
    }

    fn send(&self, state: &mut State, client: u8, request: Request) {
        let c = &mut state.clients[client as usize];
        c.waiting = true;
        state.network.push(Msg {
            from: client,
            incarnation: c.incarnation,
            awaited: true,
            request,
        });
        state.network.sort();
    }

    /// The first attempt of a new call (the call is named by it).
    fn new_nonce(state: &mut State, client: u8) -> Nonce {
        let nonce = state.nonces.len() as Nonce;
        state.nonces.push(NonceInfo {
            client,
            incarnation: state.clients[client as usize].incarnation,
            given_up: false,
            abandoned: false,
            handed: false,
            call: nonce,
        });
        nonce
    }

    fn give_up(state: &mut State, nonce: Nonce) {
        state.nonces[nonce as usize].given_up = true;
    }

    /// An attempt, as the library sends it each time (a repeat too): with the `unlock` calls
    /// its client doubts at that moment.
    fn acquire_request(&self, state: &State, client: u8, resource: Res, nonce: Nonce) -> Request {
        let handle = self.mode(client) == Mode::Handle;
        Request::Acquire {
            resource,
            kind: self.kind(client),
            lock_id: self.lock_id(client, state),
            nonce,
            keeper: handle.then(|| self.keeper(client, state)),
            ttl: handle.then_some(self.config.ttl),
            after_unlocks: match self.config.unlock_limit {
                Some(limit) if self.bugs().unlock_limit_truncates => {
                    state.clients[client as usize].doubted.first(limit)
                }
                _ => state.clients[client as usize].doubted,
            },
            delay: self.config.delay,
            min_hold: self.config.min_hold,
            announce: (handle && self.config.line).then_some(self.place_life()),
            call: state.nonces[nonce as usize].call,
        }
    }

    /// How long a place in line lasts: twice the TTL (`wait::place_life`).
    pub fn place_life(&self) -> Time {
        2 * self.config.ttl
    }

    /// Whether `client` may send an attempt under the unlock limit: it doubts no more
    /// unlocks than the limit (unless bug (af), which sends it with the first ones).
    fn within_unlock_limit(&self, state: &State, client: u8) -> bool {
        self.bugs().unlock_limit_truncates
            || (self.config.unlock_limit)
                .is_none_or(|limit| state.clients[client as usize].doubted.len() <= limit)
    }

    fn chore_request(&self, state: &State, client: u8, chore: &Chore) -> Request {
        let keeper = Some(self.keeper(client, state));
        let keeper = keeper.filter(|_| self.mode(client) == Mode::Handle);
        match *chore {
            Chore::Release {
                resource,
                token,
                nonce,
                retire,
            } => Request::Release {
                resource,
                lock_id: self.lock_id(client, state),
                token,
                keeper,
                retire: retire.then_some(nonce),
                hold: self.config.min_hold > 0,
            },
            // The background withdrawal of a grant nobody was handed (`Hold::Waived`), or of
            // an owed `release_attempt` (`Hold::Kept`).
            Chore::Withdraw {
                resource,
                nonce,
                kept,
            } => Request::Withdraw {
                resource,
                lock_id: self.lock_id(client, state),
                nonce,
                keeper,
                hold: kept,
                shared: self.kind(client).is_shared(),
                call: state.nonces[nonce as usize].call,
            },
            Chore::Leave { resource, call } => Request::Leave {
                resource,
                lock_id: self.lock_id(client, state),
                call,
            },
        }
    }

    /// The local deadline of a lease confirmed by a request sent at `sent_at`, for which the
    /// server had `left` ticks.
    fn deadline(&self, sent_at: Time, left: Time) -> Time {
        if self.bugs().long_deadline {
            sent_at + left + 1
        } else {
            (sent_at + left).saturating_sub(self.config.margin)
        }
    }

    /// Whether the holder of `token` on `resource` is excused at this state from being told
    /// before another grant: an operator revoked it less than a TTL ago (or it is a
    /// low-level holder, which nothing tells), or the server's clock stepped since `epoch`.
    fn excused(&self, state: &State, resource: Res, token: Token, epoch: u8, low: bool) -> bool {
        epoch < state.jumps
            || (state.revoked.iter()).any(|&(r, t, at)| {
                r == resource && t == token && (low || state.rt < at + self.config.ttl)
            })
    }

    /// The holders that believe they hold `resource`, not excused: (client, token, the kind
    /// it holds).
    fn believers(&self, state: &State, resource: Res) -> Vec<(u8, Token, Kind)> {
        let mut out = vec![];
        for (i, c) in state.clients.iter().enumerate() {
            let kind = self.kind(i as u8);
            for lease in &c.leases {
                if lease.resource == resource
                    && lease.believes(state.rt)
                    && !self.excused(state, resource, lease.token, lease.epoch, false)
                {
                    out.push((i as u8, lease.token, kind));
                }
            }
            for &(r, token, _) in &c.held {
                if r == resource && !self.excused(state, resource, token, u8::MAX, true) {
                    out.push((i as u8, token, Kind::Exclusive));
                }
            }
        }
        out
    }

    /// Whether the believers of one resource may all hold it together: one client alone, or
    /// shared holders only, no more of them than the cap (the clients that share a resource
    /// agree on its cap).
    fn compatible(believers: &[(u8, Token, Kind)]) -> bool {
        let mut clients: Vec<u8> = believers.iter().map(|b| b.0).collect();
        clients.dedup();
        if clients.len() <= 1 {
            return true;
        }
        let cap = believers.iter().find_map(|b| match b.2 {
            Kind::Shared { cap } => cap,
            Kind::Exclusive => None,
        });
        believers.iter().all(|b| b.2.is_shared())
            && cap.is_none_or(|cap| clients.len() <= cap as usize)
    }

    /// Whether every guard's lease that its holder believes in, not excused, is held by the
    /// server: its entry (lock id, token) is there and its lease has not ended.
    fn leases_held(&self, state: &State) -> bool {
        let now = state.now();
        (state.clients.iter().enumerate()).all(|(i, c)| {
            c.leases.iter().all(|l| {
                !l.believes(state.rt)
                    || self.excused(state, l.resource, l.token, l.epoch, false)
                    || (state.server.docs[l.resource as usize].entries()).any(|e| {
                        e.lock_id == self.lock_id(i as u8, state)
                            && e.token == l.token
                            && e.holds(now)
                    })
            })
        })
    }

    /// Notes that the grant of `nonce` was handed to a caller (kept only where it is read:
    /// with a minimum hold).
    fn hand(&self, state: &mut State, nonce: Nonce) {
        if self.config.min_hold > 0 {
            state.nonces[nonce as usize].handed = true;
        }
    }

    /// Whether a live client still owes something for `nonce`.
    fn owed(state: &State, nonce: Nonce) -> bool {
        state.clients.iter().any(|c| {
            c.chores.iter().any(|chore| chore.nonce() == Some(nonce))
                || matches!(&c.call, Some(Call::Release { lease }) if lease.nonce == nonce)
        })
    }

    /// Executes the request at `index` of the network; `reply`: the reply reaches its
    /// waiting sender.
    fn deliver(&self, state: &mut State, index: usize, reply: bool) {
        let msg = state.network.remove(index);
        let now = state.now();
        // Every entry's (resource, token, expiry), and (resource, nonce), before the step.
        let expiries: Vec<(Res, Token, Option<Time>)> = (state.server.docs.iter().enumerate())
            .flat_map(|(r, d)| d.entries().map(move |e| (r as Res, e.token, e.expires_at)))
            .collect();
        let before = match msg.request {
            Request::Release {
                resource, token, ..
            } => (state.server.docs[resource as usize].entries())
                .find(|e| e.token == token)
                .cloned(),
            _ => None,
        };
        let entries: Vec<(Res, Nonce)> = (state.server.docs.iter().enumerate())
            .flat_map(|(r, d)| d.entries().map(move |e| (r as Res, e.nonce)))
            .collect();
        // The entry a new grant replaces, if any.
        let replaced = match msg.request {
            Request::Acquire { resource, .. } => state.server.docs[resource as usize].entry.clone(),
            _ => None,
        };
        // Whether a share was in force (its lease, its lock-delay or its minimum hold) on the
        // resource an acquire asks for: an exclusive grant may not be made beside it.
        let shares_in_force = match msg.request {
            Request::Acquire { resource, .. } => (state.server.docs[resource as usize].shared)
                .iter()
                .any(|e| e.is_live(now)),
            _ => false,
        };
        // The live line an acquire meets.
        let queue_before: Vec<Place> = match msg.request {
            Request::Acquire { resource, .. } => (state.server.docs[resource as usize].queue)
                .iter()
                .filter(|p| p.until > now)
                .cloned()
                .collect(),
            _ => vec![],
        };
        self.note_let_go(state, &msg.request, now);
        let answer = state.server.execute(&msg.request, now, &self.config.bugs);
        if let Some(cap) = self.config.tombstone_cap
            && let Request::Withdraw {
                resource, nonce, ..
            }
            | Request::Release {
                resource,
                retire: Some(nonce),
                ..
            } = msg.request
        {
            state.server.seal_past(resource, nonce, cap);
        }
        if let Request::Unlock { op, .. } = msg.request {
            // What its client was granted by an attempt sent after it stays.
            let (client, incarnation, first) = state.unlocks[op as usize];
            for &(r, nonce) in &entries {
                if !(state.server.docs[r as usize].entries()).any(|e| e.nonce == nonce)
                    && nonce >= first
                    && state.nonces[nonce as usize].client == client
                    && state.nonces[nonce as usize].incarnation == incarnation
                {
                    state.flags |= flag::LATER_GRANT_UNLOCKED;
                }
            }
        }
        // A new grant: an entry whose token was not there before.
        let granted = match msg.request {
            Request::Acquire { resource, .. } => (state.server.docs[resource as usize].entries())
                .map(|e| e.token)
                .find(|&t| {
                    !expiries
                        .iter()
                        .any(|&(r, old, _)| r == resource && old == t)
                })
                .map(|t| (resource, t)),
            _ => None,
        };
        if let Request::Acquire {
            resource,
            lock_id,
            kind,
            ..
        } = msg.request
        {
            match granted {
                Some((_, token)) => {
                    let exclusive = (state.server.docs[resource as usize].entry.as_ref())
                        .is_some_and(|e| e.token == token);
                    self.judge_order(
                        state,
                        resource,
                        (msg.from, lock_id),
                        exclusive,
                        &queue_before,
                    );
                }
                None => self.note_arrival(state, &msg, &answer, kind),
            }
        }
        // An adoption, a withdrawal or a leave takes its own call's place out of the line (an
        // adopting call holds the resource), and out of the record. One that lands late,
        // while a later call of the lock id (or its restarted process's) waits, leaves that
        // call's place (issue 40): the record keeps it, and a server that takes it is out of
        // order at the next grant past it.
        // (A retiring release takes no place: its call left the line with its grant.)
        if self.mode(msg.from) == Mode::Handle {
            match msg.request {
                Request::Adopt {
                    resource,
                    lock_id,
                    call,
                    ..
                } if answer == Reply::Adopted(true) && lock_id == msg.from => {
                    Self::call_out_of_line(state, msg.from, resource, call);
                }
                Request::Leave {
                    resource,
                    lock_id,
                    call,
                }
                | Request::Withdraw {
                    resource,
                    lock_id,
                    call,
                    ..
                } if lock_id == msg.from => Self::call_out_of_line(state, msg.from, resource, call),
                _ => {}
            }
        }
        if let Some((resource, token)) = granted {
            self.judge_grant(state, resource, token, msg.from);
            // Nothing in force may stand in the way of a grant: no entry within its lock-delay
            // or let go of within its minimum hold, nor one that was to be.
            let exclusive = (state.server.docs[resource as usize].entry.as_ref())
                .is_some_and(|e| e.token == token);
            if replaced.is_some_and(|e| e.is_live(now))
                || (exclusive && shares_in_force)
                || now < state.quiet_until[resource as usize]
            {
                state.flags |= flag::GRANT_IN_HOLD;
            }
        }
        if let Request::Renew { ref leases, .. } = msg.request {
            // Only what the keeper named (leases it believed in when it sent the renewal)
            // may be extended.
            for &(r, token, expiry) in &expiries {
                let now_at = (state.server.docs[r as usize].entries())
                    .find(|e| e.token == token)
                    .map(|e| e.expires_at);
                if now_at.is_some_and(|at| at != expiry) && !leases.contains(&(r, token)) {
                    state.flags |= flag::ORPHAN_RENEWED;
                }
            }
        }
        let c = msg.from as usize;
        if msg.awaited && state.clients[c].incarnation == msg.incarnation {
            if reply {
                self.on_reply(state, msg.from, answer, before);
            } else {
                state.timeouts += 1;
                self.on_timeout(state, msg.from);
            }
        }
    }

    /// Records, before `request` runs at `now`, the minimum holds it lets go into: a release
    /// of a grant, an `unlock` of its lock id's entries it does not spare, and a
    /// `release_attempt` with `Hold::Kept` of a granted attempt each let go of the entry they
    /// match; one with a minimum hold that runs past `now`, whose grant was handed to a
    /// caller, keeps the resource until `createdAt + minHoldMs` (`LockDetails::min_hold`). Judged by the rule, not by the
    /// server's step, so that a step that drops a hold shows.
    fn note_let_go(&self, state: &mut State, request: &Request, now: Time) {
        for (r, doc) in state.server.docs.iter().enumerate() {
            let Some(e) = &doc.entry else {
                continue;
            };
            let lets_go = match *request {
                Request::Release {
                    resource,
                    lock_id,
                    token,
                    keeper,
                    ..
                } => {
                    resource as usize == r
                        && e.lock_id == lock_id
                        && e.token == token
                        && keeper.is_none_or(|k| e.keeper == Some(k))
                }
                Request::Withdraw {
                    resource,
                    lock_id,
                    nonce,
                    keeper,
                    hold: true,
                    ..
                } => {
                    resource as usize == r
                        && e.lock_id == lock_id
                        && e.nonce == nonce
                        && keeper.is_none_or(|k| e.keeper == Some(k))
                }
                Request::Unlock { lock_id, op } => {
                    e.lock_id == lock_id && !e.after_unlocks.contains(op)
                }
                _ => false,
            };
            let until = e.created_at + e.min_hold;
            if lets_go && e.min_hold > 0 && until > now && state.nonces[e.nonce as usize].handed {
                let quiet = &mut state.quiet_until[r];
                *quiet = (*quiet).max(until);
            }
        }
    }

    /// The entries in force at `now` (a live lease, or within its lock-delay or minimum
    /// hold), as (resource, token).
    fn in_force(state: &State, now: Time) -> Vec<(Res, Token)> {
        (state.server.docs.iter().enumerate())
            .flat_map(|(r, d)| {
                (d.entries().filter(|e| e.is_live(now))).map(move |e| (r as Res, e.token))
            })
            .collect()
    }

    /// After a purge, `purge_abandoned_groups` or a deletion by the TTL index: every entry
    /// in force before it (`in_force`) that the call is not documented to end (`documented`:
    /// the live leases of an abandoned group) is still there.
    fn judge_purge(state: &mut State, in_force: &[(Res, Token)], documented: &[(Res, Token)]) {
        for &(r, token) in in_force {
            if !documented.contains(&(r, token))
                && !(state.server.docs[r as usize].entries()).any(|e| e.token == token)
            {
                state.flags |= flag::PURGE_ENDED;
            }
        }
    }

    /// A guard's waiting attempt not granted, in the record of the line: made to wait (for
    /// an exclusive one, refused or answered "already held": it keeps its place while it
    /// resumes; for a shared one, a reader's or a permit's, refused with its call's place in
    /// the line: not out of it for an entry of its lock id in force), its client joins at the
    /// end if it is the current call's and stands there not already, its place lasting as
    /// the server's does (its life from when the lock id joined: the model's clients do not
    /// refresh it); answered otherwise (withdrawn, its own grant again, held with the other
    /// kind, another cap), its call is out of the line.
    fn note_arrival(&self, state: &mut State, msg: &Msg, answer: &Reply, kind: Kind) {
        let Request::Acquire {
            resource,
            lock_id,
            announce: Some(life),
            call,
            ..
        } = msg.request
        else {
            return;
        };
        if self.mode(msg.from) != Mode::Handle {
            return;
        }
        // A shared attempt waits only refused and not out of the line (`o`: an entry of its
        // lock id in force; the cap it asks for agreed, else it is answered with an error):
        // its call's place is in the line after the step. An exclusive one also when
        // answered "already held" (it keeps its place while it resumes).
        let waits = match kind.is_shared() {
            true => {
                *answer == Reply::Refused
                    && (state.server.docs[resource as usize].queue.iter())
                        .any(|p| p.call == Some(call))
            }
            false => matches!(answer, Reply::Refused | Reply::AlreadyHeld { .. }),
        };
        if !waits {
            // Its call's place only: a late copy of an ended call's attempt leaves its
            // client's next call where it stands (issue 40).
            Self::call_out_of_line(state, msg.from, resource, call);
            return;
        }
        let now = state.now();
        let until = (state.server.docs[resource as usize].queue.iter())
            .find(|p| p.lock_id == lock_id)
            .map_or(now + life, |p| p.until);
        let line = &mut state.line[resource as usize];
        line.retain(|&(_, until, _)| until > now);
        match line.iter_mut().find(|(w, _, _)| *w == msg.from) {
            // The client's place, its ended call's (its predecessor's): taken over.
            Some((_, _, named)) => *named = call,
            None => line.push((msg.from, until, call)),
        }
    }

    /// A grant on `resource` to `grantee` (client, lock id), exclusive or not, that met the
    /// live line `queue` ([`ORDER`]): no waiter of another lock id may stand ahead of the
    /// grantee (ahead of its place, or anywhere if it has none), neither in the server's line
    /// nor in the checker's record of who joined when (for a shared grant: no exclusive
    /// waiter); the grantee then stands in no line.
    fn judge_order(
        &self,
        state: &mut State,
        resource: Res,
        (client, lock_id): (u8, LockId),
        exclusive: bool,
        queue: &[Place],
    ) {
        let now = state.now();
        let own = queue.iter().position(|p| p.lock_id == lock_id);
        let server_ahead = queue[..own.unwrap_or(queue.len())]
            .iter()
            .any(|p| p.lock_id != lock_id && (exclusive || !p.shared));
        let line = &state.line[resource as usize];
        let own = line.iter().position(|&(w, _, _)| w == client);
        let recorded_ahead = line[..own.unwrap_or(line.len())]
            .iter()
            .any(|&(w, until, _)| {
                w != client && until > now && (exclusive || !self.kind(w).is_shared())
            });
        if server_ahead || recorded_ahead {
            state.flags |= flag::OUT_OF_ORDER;
        }
        if self.mode(client) == Mode::Handle {
            Self::out_of_line(state, client, resource);
        }
    }

    /// A new grant of `token` on `resource`: nobody else may believe it holds the resource,
    /// and the token must be above every earlier one.
    fn judge_grant(&self, state: &mut State, resource: Res, token: Token, to: u8) {
        // The grant as a belief beside the others: were they all still holding, could it be
        // made? (An exclusive grant: nobody else believes; a shared one: no writer believes,
        // and the cap leaves it a place.)
        let mut believers = self.believers(state, resource);
        believers.retain(|&(c, t, _)| c != to || t != token);
        believers.push((to, token, self.kind(to)));
        believers.sort();
        if !Self::compatible(&believers) {
            state.flags |= flag::GRANT_WHILE_BELIEVED;
        }
        if token <= state.max_token[resource as usize] {
            state.flags |= flag::TOKEN_ORDER;
        }
        let max = &mut state.max_token[resource as usize];
        *max = (*max).max(token);
    }

    /// `client` stands in no line on `resource` any more (it holds it).
    fn out_of_line(state: &mut State, client: u8, resource: Res) {
        if let Some(line) = state.line.get_mut(resource as usize) {
            line.retain(|&(c, _, _)| c != client);
        }
    }

    /// The call `call` of `client` stands in no line on `resource` any more (it stopped
    /// waiting); a place of the client's that another call holds stays.
    fn call_out_of_line(state: &mut State, client: u8, resource: Res, call: Nonce) {
        if let Some(line) = state.line.get_mut(resource as usize) {
            line.retain(|&(c, _, named)| c != client || named != call);
        }
    }

    /// A waiting call's attempt answered "already held" with the line: nothing is held by
    /// the attempt (unless a copy's outcome was unknown), and it keeps its place; the entry
    /// is adopted, and if the adoption is refused the call goes on waiting in its place.
    /// With no room to send the adoption (the bound), the call ends, leaving the line.
    fn resume_in_line(
        &self,
        state: &mut State,
        client: u8,
        (resource, nonce, uncertain, retries): (Res, Nonce, bool, u8),
        (token, entry_nonce, answered, expires_at, now): (
            Token,
            Nonce,
            Option<KeeperId>,
            Option<Time>,
            Time,
        ),
        (sent_at, epoch): (Time, u8),
    ) {
        let c = client as usize;
        let Some(end) = expires_at.filter(|_| self.room(state)) else {
            state.clients[c].chores.push(match uncertain {
                true => Chore::Withdraw {
                    resource,
                    nonce,
                    kept: false,
                },
                false => Chore::Leave {
                    resource,
                    call: state.nonces[nonce as usize].call,
                },
            });
            state.clients[c].chores.sort();
            Self::give_up(state, nonce);
            return;
        };
        let deadline = self.deadline(sent_at, end.saturating_sub(now));
        state.clients[c].call = Some(Call::Adopt {
            resource,
            token,
            nonce: entry_nonce,
            deadline,
            epoch,
            waiting: Some((resource, nonce, uncertain, retries)),
        });
        let keeper = self.keeper(client, state);
        let after_unlocks = state.clients[c].doubted;
        let call = state.nonces[nonce as usize].call;
        self.send(
            state,
            client,
            Request::Adopt {
                resource,
                lock_id: client,
                token,
                keeper,
                answered,
                after_unlocks,
                delay: self.config.delay,
                call,
            },
        );
    }

    /// The adoption of a waiting call's resume answered (`adopted`), refused or of unknown
    /// outcome: adopted, the call's attempt is done with (withdrawn if a copy's outcome was
    /// unknown) and the call stands in no line; else the call goes on waiting, between two
    /// attempts: the same one if a copy's outcome was unknown, else a new one that takes
    /// over its place.
    fn adopted_in_line(
        &self,
        state: &mut State,
        client: u8,
        (resource, nonce, uncertain, retries): (Res, Nonce, bool, u8),
        adopted: bool,
        epoch: u8,
    ) {
        let c = client as usize;
        if adopted {
            if uncertain {
                state.clients[c].chores.push(Chore::Withdraw {
                    resource,
                    nonce,
                    kept: false,
                });
                state.clients[c].chores.sort();
            }
            Self::give_up(state, nonce);
            return;
        }
        let nonce = if uncertain {
            nonce
        } else {
            Self::give_up(state, nonce);
            // A new attempt of the same call: its place in line is the call's.
            let next = Self::new_nonce(state, client);
            state.nonces[next as usize].call = state.nonces[nonce as usize].call;
            next
        };
        state.clients[c].call = Some(Call::Acquire {
            resource,
            nonce,
            sent_at: state.rt,
            epoch,
            uncertain,
            open: uncertain,
            retries,
        });
    }

    fn on_timeout(&self, state: &mut State, client: u8) {
        let c = client as usize;
        state.clients[c].waiting = false;
        let Some(call) = state.clients[c].call.take() else {
            return;
        };
        match call {
            Call::Acquire {
                resource,
                nonce,
                sent_at,
                epoch,
                open,
                retries,
                ..
            } => {
                state.clients[c].call = Some(Call::Acquire {
                    resource,
                    nonce,
                    sent_at,
                    epoch,
                    uncertain: true,
                    open,
                    retries,
                });
            }
            Call::Release { lease } => {
                // Left to the background: owed until done.
                state.clients[c].chores.push(Chore::Release {
                    resource: lease.resource,
                    token: lease.token,
                    nonce: lease.nonce,
                    retire: lease.retiring,
                });
                state.clients[c].chores.sort();
                Self::give_up(state, lease.nonce);
            }
            Call::Xlock { resource, nonce } => {
                if !self.bugs().xlock_no_withdraw {
                    state.clients[c].chores.push(Chore::Withdraw {
                        resource,
                        nonce,
                        kept: false,
                    });
                    state.clients[c].chores.sort();
                }
                Self::give_up(state, nonce);
            }
            Call::Unlock {
                op,
                repeated: false,
                ..
            } => {
                // The library repeats it once (or returns the error): either way it stays
                // doubted.
                state.clients[c].call = Some(Call::Unlock {
                    op,
                    uncertain: true,
                    repeated: false,
                });
            }
            Call::ReleaseAttempt { resource, nonce } => {
                // Its copy may still land, after a later attempt of the lock id was answered
                // "already held" with the grant it withdraws: the withdrawal is owed (sent
                // again in the background, and before that attempt), with the hold kept.
                if !self.bugs().release_attempt_not_owed {
                    state.clients[c].chores.push(Chore::Withdraw {
                        resource,
                        nonce,
                        kept: true,
                    });
                    state.clients[c].chores.sort();
                    Self::give_up(state, nonce);
                }
            }
            Call::Adopt {
                waiting: Some(waiting),
                epoch,
                ..
            } => {
                // Whether it landed is unknown: the call goes on waiting, and its next attempt
                // finds the lease again if it did.
                self.adopted_in_line(state, client, waiting, false, epoch);
            }
            Call::Adopt { .. }
            | Call::Renew { .. }
            | Call::RenewById
            | Call::Chore(_)
            | Call::Unlock { .. } => {}
        }
    }

    fn on_reply(&self, state: &mut State, client: u8, reply: Reply, before: Option<Entry>) {
        let c = client as usize;
        state.clients[c].waiting = false;
        let Some(call) = state.clients[c].call.take() else {
            return;
        };
        let rt = state.rt;
        match call {
            Call::Acquire {
                resource,
                nonce,
                sent_at,
                epoch,
                uncertain,
                open,
                retries,
            } => match reply {
                Reply::Granted {
                    token,
                    expires_at,
                    now,
                } => {
                    let left = expires_at.map_or(self.config.ttl, |end| end.saturating_sub(now));
                    let deadline = self.deadline(sent_at, left);
                    if rt >= deadline {
                        // Came back too late to trust: withdrawn.
                        state.clients[c].chores.push(Chore::Withdraw {
                            resource,
                            nonce,
                            kept: false,
                        });
                        state.clients[c].chores.sort();
                        Self::give_up(state, nonce);
                    } else {
                        let retiring = uncertain && !self.bugs().no_retire_on_release;
                        self.hand(state, nonce);
                        state.clients[c].leases.push(Lease {
                            resource,
                            token,
                            nonce,
                            deadline,
                            lost: false,
                            retiring,
                            epoch,
                        });
                        state.clients[c].leases.sort();
                    }
                }
                Reply::AlreadyHeld {
                    token,
                    nonce: entry_nonce,
                    keeper: answered,
                    expires_at,
                    now,
                } => {
                    // With the line: the attempt stays in line, and goes on waiting there if
                    // the adoption is refused (`Waiter::already_held`).
                    if self.config.line {
                        self.resume_in_line(
                            state,
                            client,
                            (resource, nonce, uncertain, retries),
                            (token, entry_nonce, answered, expires_at, now),
                            (sent_at, epoch),
                        );
                        return;
                    }
                    // Resume: the entry is adopted. This attempt is settled, unless a copy of
                    // it had an unknown outcome: that copy may still land, so it is withdrawn.
                    if uncertain {
                        state.clients[c].chores.push(Chore::Withdraw {
                            resource,
                            nonce,
                            kept: false,
                        });
                        state.clients[c].chores.sort();
                    }
                    Self::give_up(state, nonce);
                    if let Some(end) = expires_at
                        && self.room(state)
                    {
                        let deadline = self.deadline(sent_at, end.saturating_sub(now));
                        state.clients[c].call = Some(Call::Adopt {
                            resource,
                            token,
                            nonce: entry_nonce,
                            deadline,
                            epoch,
                            waiting: None,
                        });
                        let keeper = self.keeper(client, state);
                        let after_unlocks = state.clients[c].doubted;
                        let call = state.nonces[nonce as usize].call;
                        self.send(
                            state,
                            client,
                            Request::Adopt {
                                resource,
                                lock_id: client,
                                token,
                                keeper,
                                answered,
                                after_unlocks,
                                delay: self.config.delay,
                                call,
                            },
                        );
                    }
                }
                Reply::Refused => {
                    let open = open && uncertain && !self.bugs().refusal_settles;
                    state.clients[c].call = Some(Call::Acquire {
                        resource,
                        nonce,
                        sent_at,
                        epoch,
                        uncertain,
                        open,
                        retries,
                    });
                }
                _ => Self::give_up(state, nonce),
            },
            Call::Adopt {
                resource,
                token,
                nonce,
                deadline,
                epoch,
                waiting,
            } => {
                let adopted = reply == Reply::Adopted(true) && rt < deadline;
                if let Some(waiting) = waiting {
                    self.adopted_in_line(state, client, waiting, adopted, epoch);
                }
                if adopted {
                    let info = &mut state.nonces[nonce as usize];
                    *info = NonceInfo {
                        client,
                        incarnation: state.clients[c].incarnation,
                        given_up: false,
                        abandoned: false,
                        handed: self.config.min_hold > 0,
                        call: info.call,
                    };
                    state.clients[c].leases.push(Lease {
                        resource,
                        token,
                        nonce,
                        deadline,
                        lost: false,
                        retiring: !self.bugs().no_retire_on_release,
                        epoch,
                    });
                    state.clients[c].leases.sort();
                }
            }
            Call::Release { lease } => {
                if let Reply::Released { removed, live } = reply {
                    let ok = (removed && live) || (!removed && self.bugs().release_ok_when_gone);
                    let keeper = Some(self.keeper(client, state));
                    let this_grant = (before.as_ref())
                        .is_some_and(|e| e.token == lease.token && e.keeper == keeper);
                    if ok && !(removed && live && this_grant) {
                        state.flags |= flag::RELEASE_OK;
                    }
                }
                Self::give_up(state, lease.nonce);
            }
            Call::Renew {
                sent_at,
                epoch,
                leases,
            } => {
                if let Reply::Renewed { live, count } = reply {
                    let trusted = self.bugs().keeper_trusts_count && count as usize >= leases.len();
                    let confirmed = self.deadline(sent_at, self.config.ttl);
                    for (i, &(resource, token)) in leases.iter().enumerate() {
                        let Some(lease) = (state.clients[c].leases.iter_mut())
                            .find(|l| l.resource == resource && l.token == token)
                        else {
                            continue;
                        };
                        if trusted || live[i] {
                            lease.deadline = lease.deadline.max(confirmed);
                            lease.epoch = lease.epoch.max(epoch);
                        } else {
                            lease.lost = true;
                        }
                    }
                }
            }
            Call::Chore(chore) => {
                state.clients[c].chores.retain(|owed| *owed != chore);
            }
            // The guards' keeper renews by their tokens and does not read this count.
            Call::RenewById => {}
            Call::Xlock { resource, nonce } => match reply {
                Reply::Granted { token, .. } => {
                    self.hand(state, nonce);
                    state.clients[c].held.push((resource, token, nonce));
                    state.clients[c].held.sort();
                }
                Reply::AlreadyHeld {
                    token,
                    nonce: entry_nonce,
                    ..
                } => {
                    self.hand(state, entry_nonce);
                    state.clients[c].held.push((resource, token, entry_nonce));
                    state.clients[c].held.sort();
                }
                _ => Self::give_up(state, nonce),
            },
            Call::ReleaseAttempt { nonce, .. } => Self::give_up(state, nonce),
            Call::Unlock { op, uncertain, .. } => {
                // Every copy answered: none can land later.
                if !uncertain || self.bugs().unlock_repeat_settles {
                    let doubted = &mut state.clients[c].doubted;
                    *doubted = doubted.without(op);
                }
                state.clients[c].dirty = false;
                for info in &mut state.nonces {
                    if info.client == client && !info.abandoned {
                        info.given_up = true;
                    }
                }
            }
        }
    }
}

impl Model for LockModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let clients = self.config.clients.len();
        vec![State {
            rt: 0,
            skew: self.config.bounds.backs * self.config.ttl,
            jumps: 0,
            backs: 0,
            forces: 0,
            kills: 0,
            timeouts: 0,
            server: Server::new(self.config.resources as usize),
            clients: vec![
                Client {
                    incarnation: 0,
                    attempts: 0,
                    leases: vec![],
                    held: vec![],
                    dirty: false,
                    call: None,
                    waiting: false,
                    chores: vec![],
                    doubted: Unlocks::NONE,
                    renewed_by_id: false,
                };
                clients
            ],
            network: vec![],
            nonces: vec![],
            revoked: vec![],
            unlocks: vec![],
            max_token: vec![0; self.config.resources as usize],
            quiet_until: vec![0; self.config.resources as usize],
            line: vec![vec![]; self.config.resources as usize],
            flags: 0,
            undo: None,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let b = &self.config.bounds;
        if state.rt < b.max_time {
            actions.push(Action::Tick);
        }
        if state.jumps < b.jumps {
            actions.push(Action::Jump);
        }
        if state.backs < b.backs {
            actions.push(Action::StepBack);
        }
        if state.undo.is_some() {
            actions.push(Action::RollBack);
        }
        for r in 0..self.config.resources {
            if state.forces < b.force_releases
                && state.server.docs[r as usize].entries().next().is_some()
            {
                actions.push(Action::ForceRelease(r));
            }
        }
        let now = state.now();
        if self.config.purge_groups
            && state.forces < b.force_releases
            && (state.server.docs.iter().flat_map(Doc::entries)).any(|e| !e.is_live(now))
        {
            actions.push(Action::PurgeGroups);
        }
        if self.config.purges && state.forces < b.force_releases {
            // Offered only where it removes something (a purge that removes nothing changes
            // nothing but the count).
            if !state.server.clone().purge(now, self.bugs()).is_empty() {
                actions.push(Action::Purge);
            }
            for r in 0..self.config.resources {
                let mut server = state.server.clone();
                if server.ttl_delete(r, now, 0, self.bugs()).is_some() {
                    actions.push(Action::TtlDelete(r));
                }
            }
        }
        let room = self.room(state);
        for (i, c) in state.clients.iter().enumerate() {
            let i = i as u8;
            let busy = c.call.is_some() || !c.leases.is_empty() || !c.chores.is_empty();
            if state.kills < b.kills && (busy || !c.held.is_empty()) {
                actions.push(Action::Kill(i));
            }
            if c.waiting {
                if state.timeouts < b.timeouts {
                    actions.push(Action::Timeout(i));
                }
                continue;
            }
            match &c.call {
                Some(Call::Acquire {
                    resource, retries, ..
                }) => {
                    if room && *retries < b.retries && self.settled(state, i, *resource) {
                        actions.push(Action::Retry(i));
                    }
                    actions.push(Action::GiveUp(i));
                    continue;
                }
                Some(Call::Unlock {
                    repeated: false, ..
                }) => {
                    if room && b.retries > 0 {
                        actions.push(Action::Retry(i));
                    }
                    actions.push(Action::GiveUp(i));
                    continue;
                }
                Some(_) => continue,
                None => {}
            }
            if !room {
                continue;
            }
            for (k, _) in c.chores.iter().enumerate() {
                actions.push(Action::SendChore(i, k as u8));
            }
            match self.mode(i) {
                Mode::Handle => {
                    for r in 0..self.config.resources {
                        let holds = c.leases.iter().any(|l| l.resource == r);
                        if holds {
                            actions.push(Action::Release(i, r));
                        } else if c.attempts < b.attempts && self.settled(state, i, r) {
                            actions.push(Action::Acquire(i, r));
                        }
                    }
                    let extends = self.deadline(state.rt, self.config.ttl);
                    if (c.leases.iter()).any(|l| l.believes(state.rt) && l.deadline < extends) {
                        actions.push(Action::Renew(i));
                    }
                    let believes = c.leases.iter().any(|l| l.believes(state.rt));
                    if self.config.renew_by_id && !c.renewed_by_id && believes {
                        actions.push(Action::RenewById(i));
                    }
                }
                Mode::LowLevel => {
                    for r in 0..self.config.resources {
                        let holds = c.held.iter().any(|&(h, _, _)| h == r);
                        if !holds
                            && c.attempts < b.attempts
                            && self.settled(state, i, r)
                            && self.within_unlock_limit(state, i)
                        {
                            actions.push(Action::Xlock(i, r));
                        }
                        if holds && self.config.min_hold > 0 {
                            actions.push(Action::ReleaseAttempt(i, r));
                        }
                    }
                    if c.dirty && state.unlocks.len() < Unlocks::CAPACITY as usize {
                        actions.push(Action::Unlock(i));
                    }
                }
            }
        }
        for (k, msg) in state.network.iter().enumerate() {
            let k = k as u8;
            let current = state.clients[msg.from as usize].incarnation == msg.incarnation;
            // A reply lost is a timeout followed by the late delivery; a request lost is
            // one never delivered: neither needs a step of its own.
            actions.push(Action::Deliver(k, msg.awaited && current));
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let s = &mut state;
        match action {
            Action::Tick => s.rt += 1,
            Action::Jump => {
                s.jumps += 1;
                s.skew += self.config.ttl;
            }
            Action::StepBack => {
                // A hold that ended by the server's clock stays ended: the entry may be gone
                // already, and the step back does not bring it back.
                let now = s.now();
                for quiet in &mut s.quiet_until {
                    if *quiet <= now {
                        *quiet = 0;
                    }
                }
                s.backs += 1;
                s.skew -= self.config.ttl;
            }
            Action::ForceRelease(r) => {
                s.forces += 1;
                let now = s.now();
                for e in s.server.docs[r as usize].entries() {
                    s.revoked.push((r, e.token, s.rt));
                }
                // A hold under way stays: a force release leaves it as it is
                // (`LockDetails::min_hold`), and a grant inside it is judged as any.
                s.server
                    .execute(&Request::ForceRelease { resource: r }, now, self.bugs());
            }
            Action::PurgeGroups => {
                s.forces += 1;
                let now = s.now();
                // What the call is documented to end (live leases of an abandoned group,
                // untold) is an operator's revocation; anything else it removes is not.
                let documented = s.server.clone().purge_groups(now, &Bugs::default());
                let in_force = Self::in_force(s, now);
                for &(r, token) in &documented {
                    s.revoked.push((r, token, s.rt));
                }
                s.server.purge_groups(now, self.bugs());
                Self::judge_purge(s, &in_force, &documented);
            }
            Action::Purge => {
                s.forces += 1;
                let now = s.now();
                // Documented to end nothing in force.
                let in_force = Self::in_force(s, now);
                s.server.purge(now, self.bugs());
                Self::judge_purge(s, &in_force, &[]);
            }
            Action::TtlDelete(r) => {
                s.forces += 1;
                let now = s.now();
                let in_force = Self::in_force(s, now);
                if s.server.ttl_delete(r, now, 0, self.bugs()).is_some() {
                    // The line goes with the document (places keep no document from the TTL
                    // index, `crate::schema`): the waiters join again.
                    s.line[r as usize].clear();
                }
                Self::judge_purge(s, &in_force, &[]);
            }
            Action::Kill(i) => {
                s.kills += 1;
                let c = &mut s.clients[i as usize];
                let owed: Vec<Nonce> = c.chores.iter().filter_map(Chore::nonce).collect();
                let calling = match &c.call {
                    Some(Call::Release { lease }) => Some(lease.nonce),
                    _ => None,
                };
                *c = Client {
                    incarnation: c.incarnation + 1,
                    attempts: c.attempts,
                    leases: vec![],
                    held: vec![],
                    dirty: false,
                    call: None,
                    waiting: false,
                    chores: vec![],
                    doubted: Unlocks::NONE,
                    renewed_by_id: c.renewed_by_id,
                };
                for (n, info) in s.nonces.iter_mut().enumerate() {
                    let n = n as Nonce;
                    if info.client == i
                        && (!info.given_up || owed.contains(&n) || calling == Some(n))
                    {
                        info.abandoned = true;
                    }
                }
                for msg in &mut s.network {
                    if msg.from == i {
                        msg.awaited = false;
                    }
                }
                s.network.sort();
            }
            Action::Acquire(i, r) => {
                let nonce = Self::new_nonce(s, i);
                let c = &mut s.clients[i as usize];
                c.attempts += 1;
                c.call = Some(Call::Acquire {
                    resource: r,
                    nonce,
                    sent_at: s.rt,
                    epoch: s.jumps,
                    uncertain: false,
                    open: true,
                    retries: 0,
                });
                let request = self.acquire_request(s, i, r, nonce);
                self.send(s, i, request);
            }
            Action::Retry(i) => {
                if let Some(Call::Unlock {
                    op,
                    uncertain,
                    repeated,
                }) = &mut s.clients[i as usize].call
                {
                    let op = *op;
                    (*uncertain, *repeated) = (true, true);
                    let lock_id = self.lock_id(i, s);
                    self.send(s, i, Request::Unlock { lock_id, op });
                    return Some(state);
                }
                let rt = s.rt;
                let Some(Call::Acquire {
                    resource,
                    nonce,
                    sent_at,
                    retries,
                    open,
                    ..
                }) = &mut s.clients[i as usize].call
                else {
                    return None;
                };
                *sent_at = rt;
                *retries += 1;
                *open = true;
                let (r, n) = (*resource, *nonce);
                let request = self.acquire_request(s, i, r, n);
                self.send(s, i, request);
            }
            Action::GiveUp(i) => {
                let c = &mut s.clients[i as usize];
                if let Some(Call::Unlock { .. }) = c.call {
                    c.call = None;
                    return Some(state);
                }
                let Some(Call::Acquire {
                    resource,
                    nonce,
                    open,
                    ..
                }) = c.call.take()
                else {
                    return None;
                };
                if open {
                    c.chores.push(Chore::Withdraw {
                        resource,
                        nonce,
                        kept: false,
                    });
                    c.chores.sort();
                } else if self.config.line {
                    // Every attempt refused: it only leaves the line.
                    let call = s.nonces[nonce as usize].call;
                    let c = &mut s.clients[i as usize];
                    c.chores.push(Chore::Leave { resource, call });
                    c.chores.sort();
                }
                Self::give_up(s, nonce);
            }
            Action::Release(i, r) => {
                let keeper = Some(self.keeper(i, s));
                let c = &mut s.clients[i as usize];
                let at = c.leases.iter().position(|l| l.resource == r)?;
                let lease = c.leases.remove(at);
                let request = Request::Release {
                    resource: r,
                    lock_id: i,
                    token: lease.token,
                    keeper,
                    retire: lease.retiring.then_some(lease.nonce),
                    hold: self.config.min_hold > 0,
                };
                c.call = Some(Call::Release { lease });
                self.send(s, i, request);
            }
            Action::Renew(i) => {
                let keeper = self.keeper(i, s);
                let c = &mut s.clients[i as usize];
                let leases: Vec<(Res, Token)> = (c.leases.iter())
                    .filter(|l| l.believes(s.rt))
                    .map(|l| (l.resource, l.token))
                    .collect();
                c.call = Some(Call::Renew {
                    sent_at: s.rt,
                    epoch: s.jumps,
                    leases: leases.clone(),
                });
                let request = Request::Renew {
                    lock_id: i,
                    keeper,
                    leases,
                    ttl: self.config.ttl,
                    delay: self.config.delay,
                };
                self.send(s, i, request);
            }
            Action::RenewById(i) => {
                let lock_id = self.lock_id(i, s);
                let c = &mut s.clients[i as usize];
                c.renewed_by_id = true;
                c.call = Some(Call::RenewById);
                self.send(s, i, Request::RenewLockId { lock_id, ttl: 1 });
            }
            Action::SendChore(i, k) => {
                let chore = s.clients[i as usize].chores.get(k as usize)?.clone();
                let request = self.chore_request(s, i, &chore);
                s.clients[i as usize].call = Some(Call::Chore(chore));
                self.send(s, i, request);
            }
            Action::Xlock(i, r) => {
                let nonce = Self::new_nonce(s, i);
                let c = &mut s.clients[i as usize];
                c.attempts += 1;
                c.dirty = true;
                c.call = Some(Call::Xlock { resource: r, nonce });
                let request = self.acquire_request(s, i, r, nonce);
                self.send(s, i, request);
            }
            Action::Unlock(i) => {
                let op = s.unlocks.len() as UnlockOp;
                let incarnation = s.clients[i as usize].incarnation;
                s.unlocks.push((i, incarnation, s.nonces.len() as Nonce));
                let c = &mut s.clients[i as usize];
                // The caller stops using its locks when it calls.
                c.held.clear();
                // Doubted from before it is sent.
                c.doubted = c.doubted.union(Unlocks::of(op));
                c.call = Some(Call::Unlock {
                    op,
                    uncertain: false,
                    repeated: false,
                });
                let lock_id = self.lock_id(i, s);
                self.send(s, i, Request::Unlock { lock_id, op });
            }
            Action::ReleaseAttempt(i, r) => {
                let c = &mut s.clients[i as usize];
                let at = c.held.iter().position(|&(h, _, _)| h == r)?;
                // The caller stops using the lock when it calls.
                let (_, _, nonce) = c.held.remove(at);
                c.call = Some(Call::ReleaseAttempt { resource: r, nonce });
                let request = Request::Withdraw {
                    resource: r,
                    lock_id: self.lock_id(i, s),
                    nonce,
                    keeper: None,
                    hold: true,
                    shared: false,
                    call: s.nonces[nonce as usize].call,
                };
                self.send(s, i, request);
            }
            Action::Deliver(k, reply) => {
                // With `w: 1`, the reply acknowledges a write no other member may have
                // applied yet: the documents before the first such write are what a rollback
                // restores.
                let before = (self.config.bugs.w1_rollback && reply && s.undo.is_none())
                    .then(|| s.server.clone());
                self.deliver(s, k as usize, reply);
                if before.as_ref().is_some_and(|before| *before != s.server) {
                    s.undo = before;
                }
            }
            Action::RollBack => {
                if let Some(before) = s.undo.take() {
                    s.server = before;
                }
            }
            Action::Drop(k) => {
                s.network.remove(k as usize);
            }
            Action::Timeout(i) => {
                s.timeouts += 1;
                for msg in &mut s.network {
                    if msg.from == i {
                        msg.awaited = false;
                    }
                }
                s.network.sort();
                self.on_timeout(s, i);
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(EXCLUSION, |m: &LockModel, s: &State| {
                (0..m.config.resources).all(|r| {
                    let believers = m.believers(s, r);
                    let mut clients: Vec<u8> = believers.iter().map(|b| b.0).collect();
                    clients.dedup();
                    // Several clients may believe only if all hold shares (the cap is its
                    // own property).
                    clients.len() <= 1 || believers.iter().all(|b| b.2.is_shared())
                })
            }),
            Property::always(CAP, |m: &LockModel, s: &State| {
                (0..m.config.resources).all(|r| {
                    let believers = m.believers(s, r);
                    !believers.iter().all(|b| b.2.is_shared()) || LockModel::compatible(&believers)
                })
            }),
            Property::always(LOSS_BEFORE_GRANT, |_: &LockModel, s: &State| {
                s.flags & flag::GRANT_WHILE_BELIEVED == 0
            }),
            Property::always(TOKENS_INCREASE, |_: &LockModel, s: &State| {
                s.flags & flag::TOKEN_ORDER == 0
            }),
            Property::always(RELEASE_OK, |_: &LockModel, s: &State| {
                s.flags & flag::RELEASE_OK == 0
            }),
            Property::always(NO_ORPHAN_OUTLIVES, |_: &LockModel, s: &State| {
                s.flags & flag::ORPHAN_RENEWED == 0
            }),
            Property::always(RELEASED_IS_FREE, |_: &LockModel, s: &State| {
                let now = s.now();
                (s.server.docs.iter().flat_map(Doc::entries)).all(|e| {
                    let info = &s.nonces[e.nonce as usize];
                    !e.holds(now) || !info.given_up || info.abandoned || LockModel::owed(s, e.nonce)
                })
            }),
            Property::always(UNLOCK_LEAVES_LATER, |_: &LockModel, s: &State| {
                s.flags & flag::LATER_GRANT_UNLOCKED == 0
            }),
            Property::always(NO_GRANT_IN_HOLD, |_: &LockModel, s: &State| {
                s.flags & flag::GRANT_IN_HOLD == 0
            }),
            Property::always(DEADLINE_BEFORE_EXPIRY, |m: &LockModel, s: &State| {
                m.leases_held(s)
            }),
            Property::always(LET_GO_NOT_HELD_AGAIN, |m: &LockModel, s: &State| {
                (0..m.config.resources).all(|r| {
                    let doc = &s.server.docs[r as usize];
                    // Most states hold no let-go entry: nothing to ask the believers then.
                    !doc.entries().any(|e| e.let_go)
                        || (m.believers(s, r).iter()).all(|&(_, token, _)| {
                            !doc.entries().any(|e| e.token == token && e.let_go)
                        })
                })
            }),
            Property::always(PURGE_ENDS_NOTHING_IN_FORCE, |_: &LockModel, s: &State| {
                s.flags & flag::PURGE_ENDED == 0
            }),
            Property::always(ORDER, |_: &LockModel, s: &State| {
                s.flags & flag::OUT_OF_ORDER == 0
            }),
            Property::always(REVOCATION_NOTICED, |m: &LockModel, s: &State| {
                s.clients.iter().all(|c| {
                    c.leases.iter().all(|l| {
                        !l.believes(s.rt)
                            || !(s.revoked.iter()).any(|&(r, t, at)| {
                                r == l.resource
                                    && t == l.token
                                    && s.rt + m.config.margin >= at + m.config.ttl
                            })
                    })
                })
            }),
        ]
    }
}

/// Never two holders of a resource that both believe they hold it, unless both hold shares
/// (never a writer together with a believing reader or another writer); none excused.
pub const EXCLUSION: &str = "exclusion: never two believing holders";
/// Never more clients that believe they hold a share of a resource than its cap (a
/// semaphore's permits); excused as exclusion is.
pub const CAP: &str = "never more believing shared holders than the cap";
/// A holder is told its loss before anyone else is granted (except after an operator's
/// revocation, for a TTL, or a step of the server's clock).
pub const LOSS_BEFORE_GRANT: &str = "loss told before another grant";
/// Every grant's token is above every token granted before on its resource.
pub const TOKENS_INCREASE: &str = "tokens strictly increase";
/// A release returns `Ok` only if the server removed that very grant while it was live.
pub const RELEASE_OK: &str = "release Ok means held live until removed";
/// No entry outlives its last believing holder by more than its TTL: a renewal extends
/// only the entries it was sent for, by a keeper whose holder believed in them when it
/// sent it (a late renewal can extend one by the time it spent in the network).
pub const NO_ORPHAN_OUTLIVES: &str = "no orphan outlives its holder by more than a TTL";
/// No live entry of an attempt its client is done with and owes nothing for (a late copy
/// that was not refused); attempts of a killed incarnation are exempt.
pub const RELEASED_IS_FREE: &str = "a released lock becomes free";
/// A holder an operator revoked stops believing within a TTL: by its local deadline, the
/// TTL less the margin after the revocation, at the latest.
pub const REVOCATION_NOTICED: &str = "revocation noticed within a TTL";

/// An `unlock` removes nothing its client's process was granted by an attempt sent after the
/// unlock: a late copy of it leaves later grants (those granted after a restart excepted: a
/// new process knows nothing of its predecessor's unlocks).
pub const UNLOCK_LEAVES_LATER: &str = "an unlock leaves its client's later grants";

/// Nobody is granted a resource while an entry that was let go of within its minimum hold,
/// or whose lease ended within its lock-delay, is to keep it from everybody (by the server's
/// clock): a release, an `unlock` or a `release_attempt` of a granted attempt within the hold
/// keeps the entry in force until `createdAt + minHoldMs`; a lease that ends without a release
/// (by time, or a force release) keeps it for the delay. A force release after the let-go
/// leaves the hold as it is, also after a step back past the grant (`LockDetails::min_hold`;
/// control (ae) cuts it).
pub const NO_GRANT_IN_HOLD: &str = "no grant inside a minimum hold or a lock-delay";
/// A holder's local deadline comes before the server's expiry: while a guard believes it
/// holds a lease, the server holds that very entry's lease (lock id and token), unless the
/// server's clock stepped since its attempt or last confirmed renewal was sent, or an
/// operator revoked it less than a TTL ago.
pub const DEADLINE_BEFORE_EXPIRY: &str = "the local deadline comes before the server's expiry";

/// A grant let go of within its minimum hold is not held again: no holder believes (unless
/// excused, as for exclusion) a grant whose entry the server keeps as let go of (in force
/// until `createdAt + minHoldMs`, held by nobody, its own lock id included), whatever the
/// server's clock reads: neither the lock id's next attempt (answered "already held" with
/// it, and adopting it) nor a renewal takes it back, not even after a step back of the
/// server's clock before its grant (`LockDetails::min_hold`).
pub const LET_GO_NOT_HELD_AGAIN: &str = "a grant let go of within its hold is not held again";

/// A purge never ends a live lease, nor an entry in force for its lock-delay or let go of
/// within its minimum hold: `purge` removes only entries out of force, the TTL index deletes
/// only a document idle for the retention (every entry out of force), and
/// `purge_abandoned_groups` ends besides only the live leases of an abandoned group (a lock
/// id with an entry that expired without being let go of), never one its lock id took after
/// that entry's lease ended, and never an entry let go of within its hold, which makes no
/// group abandoned.
pub const PURGE_ENDS_NOTHING_IN_FORCE: &str =
    "a purge ends no live lease and no hold (but an abandoned group's)";

/// Waiters are served in arrival order (the harness's (S9)): no grant to a lock id while a
/// live place of another lock id stands ahead of its place in the line, or ahead of where it
/// would stand (anywhere, if it has none); for a shared grant, no exclusive place. Judged
/// both against the server's line and against the checker's own record of who stands where
/// ([`State::line`]: the line's rules restated by reply class, apart from the server's
/// step), so that a step that loses a place shows: a guard's lock id joins the record's end
/// when a waiting attempt of it is made to wait (refused; an exclusive one also answered
/// "already held": it keeps its place while it resumes; a shared one, a reader's or a
/// permit's, only if not out of the line), and leaves it when it is granted, adopts its
/// lease, is answered out of the line (withdrawn, its own grant, the other kind), when a
/// withdrawal, a retiring release or a `leave_line` of it lands, when its place lapses, or
/// when the TTL index deletes the document (a line keeps no document, `crate::schema`).
pub const ORDER: &str = "waiters are served in arrival order";

/// Every property's name.
pub const PROPERTIES: [&str; 14] = [
    EXCLUSION,
    CAP,
    LOSS_BEFORE_GRANT,
    TOKENS_INCREASE,
    RELEASE_OK,
    NO_ORPHAN_OUTLIVES,
    RELEASED_IS_FREE,
    REVOCATION_NOTICED,
    UNLOCK_LEAVES_LATER,
    NO_GRANT_IN_HOLD,
    DEADLINE_BEFORE_EXPIRY,
    LET_GO_NOT_HELD_AGAIN,
    PURGE_ENDS_NOTHING_IN_FORCE,
    ORDER,
];

/// A one-line picture of an entry, for traces.
fn show_entry(e: &Entry) -> String {
    format!(
        "L{} n{} t{} k{} exp {}{}{}",
        e.lock_id,
        e.nonce,
        e.token,
        e.keeper.map_or("-".to_owned(), |k| k.to_string()),
        e.expires_at.map_or("never".to_owned(), |t| t.to_string()),
        if e.after_unlocks.is_empty() {
            String::new()
        } else {
            format!(" after unlocks {:?}", e.after_unlocks)
        },
        if e.adopted { " adopted" } else { "" },
    ) + &if e.delay > 0 || e.min_hold > 0 {
        format!(
            " created {} delay {} hold {}{}",
            e.created_at,
            e.delay,
            e.min_hold,
            if e.let_go { " LET GO" } else { "" }
        )
    } else {
        String::new()
    }
}

/// A one-line picture of `doc`, for traces.
pub fn show_doc(doc: &Doc) -> String {
    let mut entry = match &doc.entry {
        None if doc.shared.is_empty() => "free".to_owned(),
        None => String::new(),
        Some(e) => show_entry(e),
    };
    if !doc.shared.is_empty() {
        let shared: Vec<String> = doc.shared.iter().map(show_entry).collect();
        if !entry.is_empty() {
            entry += "; ";
        }
        entry += &format!(
            "shared ({}): {}",
            doc.cap.map_or("no cap".to_owned(), |c| format!("cap {c}")),
            shared.join(" | ")
        );
    }
    let line = if doc.queue.is_empty() {
        String::new()
    } else {
        let places: Vec<String> = (doc.queue.iter())
            .map(|p| {
                let kind = if p.shared { " shared" } else { "" };
                let call = p.call.map_or(String::new(), |c| format!(" call n{c}"));
                format!("L{} until {}{kind}{call}", p.lock_id, p.until)
            })
            .collect();
        format!("; line {}", places.join(", "))
    };
    format!(
        "[{entry}; fence {}; tombs {:?}{line}]",
        doc.fence, doc.tombstones
    )
}
