//! The server: one lock document per resource, reduced to what decides the protocol, and
//! the one atomic step each command takes on it.
//!
//! A document here is the exclusive entry (`lockId`, `nonce`, `token`, `keeper`,
//! `expiresAt`, `afterUnlocks`, `adopted`), the shared entries (the same fields each) and
//! their cap, the fence (the last token granted, shared or exclusive) and the tombstones
//! (retired nonces).
//! An entry also carries `createdAt`, its lock-delay (`delayMs`), its minimum hold
//! (`minHoldMs`) and `letGoAt` (let go of within its hold).
//! Times are whole ticks of the server's clock. The line (`queue`) is modelled: each place
//! is a lock id, its `until`, its kind and the waiting call that holds it (its first
//! attempt's nonce), in the order the waiters joined. A waiting
//! acquire's attempt (`announce`) is granted only with no live place before its lock id's
//! own (or none at all, without one; for a share, no writer's place, and the places before
//! it counted in the cap); made to wait, it joins at the end, or keeps its place; answered
//! with a lock it does not wait for (`o`: withdrawn, its own grant held, its lock id holding
//! the other kind; for a share, any entry of its lock id in force), it leaves the line. An
//! exclusive one answered "already held" (its lock id's entry, from another attempt) keeps
//! or takes its place, and the adoption that resumes the lease takes the adopting call's
//! place out in the same update, and a place of the lock id that names no call (4b66416,
//! issue 39: a restarted process whose adoption is refused keeps its turn; a late copy of
//! an ended call's adoption leaves the lock id's next call's place: issue 40). A grant takes the lock id's place out; a withdrawal, `leave_line` and a
//! waiting attempt answered out of the line take their own call's place out, and only it (a
//! late one leaves the place of its lock id's next call: issue 40); a waiting attempt that
//! keeps its lock id's place names it by its call (a restarted process's call takes over
//! its predecessor's place, its turn kept); a released grant's call left the line with its
//! grant. A place lapses at its `until` (the model's clients do not refresh theirs).
//! `idleSince` and the wake are left out (see the crate docs). Each request is
//! the command of the same name in `mongolock/src/command/`, decided the way its pipeline
//! decides it; the conformance test (`tests/conformance.rs`) runs both on the same
//! documents and compares.

/// A resource's index.
pub type Res = u8;
/// A lock id's index.
pub type LockId = u8;
/// An attempt's nonce (its index: each attempt gets a fresh one).
pub type Nonce = u8;

/// The seal among a document's tombstones (the library's tombstone whose nonce is null):
/// a nonce no attempt has, sorted last.
pub const SEAL: Nonce = Nonce::MAX;
/// A lease keeper's id (one per client incarnation).
pub type KeeperId = u8;
/// A fencing token.
pub type Token = u8;
/// An instant or a span of the server's clock, in ticks.
pub type Time = u8;
/// An `unlock` call's operation id (its index: each call gets a fresh one).
pub type UnlockOp = u8;

/// A set of `unlock` calls (`afterUnlocks`, or the calls a client doubts), as bits: call `u`
/// is bit `u`. A run of the model makes few calls: at most [`Unlocks::CAPACITY`].
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Unlocks(pub u8);

impl Unlocks {
    /// No call.
    pub const NONE: Unlocks = Unlocks(0);
    /// How many calls a set can name (the operation ids `0..CAPACITY`).
    pub const CAPACITY: u8 = 8;

    /// The set of the one call `op`.
    pub const fn of(op: UnlockOp) -> Unlocks {
        Unlocks(1 << op)
    }

    /// Whether it names `op`.
    pub const fn contains(self, op: UnlockOp) -> bool {
        self.0 & (1 << op) != 0
    }

    /// Both sets' calls.
    pub const fn union(self, other: Unlocks) -> Unlocks {
        Unlocks(self.0 | other.0)
    }

    /// This set without `op`.
    pub const fn without(self, op: UnlockOp) -> Unlocks {
        Unlocks(self.0 & !(1 << op))
    }

    /// Whether it names no call.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// How many calls it names.
    pub const fn len(self) -> u8 {
        self.0.count_ones() as u8
    }

    /// Its first `n` calls (by operation id).
    pub fn first(self, n: u8) -> Unlocks {
        (self.ops().take(n as usize)).fold(Unlocks::NONE, |set, op| set.union(Unlocks::of(op)))
    }

    /// The calls it names, in order.
    pub fn ops(self) -> impl Iterator<Item = UnlockOp> {
        (0..Self::CAPACITY).filter(move |&op| self.contains(op))
    }
}

impl std::fmt::Debug for Unlocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ops: Vec<String> = self.ops().map(|op| format!("u{op}")).collect();
        write!(f, "{{{}}}", ops.join(", "))
    }
}

/// The kind of lock an attempt asks for (`LockKind`, and a shared request's cap).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// An exclusive lock: a mutex, a writer, `xlock`.
    Exclusive,
    /// A shared lock, granted beside other shared ones while fewer than `cap` are in force
    /// (none: no cap): a reader (no cap) or a semaphore's permit (`cap` its permits).
    Shared {
        /// `max_shared`: the cap the request asks for (the stored `cap` must agree).
        cap: Option<u8>,
    },
}

impl Kind {
    /// Whether it is a shared kind.
    pub const fn is_shared(self) -> bool {
        matches!(self, Kind::Shared { .. })
    }
}

/// An entry of a lock document: the exclusive one, or one of the shared ones.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Entry {
    /// `lockId`: the holder.
    pub lock_id: LockId,
    /// `nonce`: the attempt that was granted.
    pub nonce: Nonce,
    /// `token`: the fencing token of the grant.
    pub token: Token,
    /// `keeper`: the lease keeper renewing it (none for the low-level calls).
    pub keeper: Option<KeeperId>,
    /// `expiresAt`, by the server's clock; none: no TTL.
    pub expires_at: Option<Time>,
    /// `afterUnlocks`: the `unlock` calls of the lock id whose copies might still land when
    /// the entry was asked for (or resumed); each of them leaves it.
    pub after_unlocks: Unlocks,
    /// `adopted`: a client resumed its lease (an adoption); a retiring release of an earlier
    /// incarnation leaves it, though it may be a re-grant of that release's attempt.
    pub adopted: bool,
    /// `createdAt`: when it was granted, by the server's clock; kept only for an entry with
    /// a minimum hold, the only one that reads it (0 for the others).
    pub created_at: Time,
    /// `delayMs`: its lock-delay (0: none). `expiresAt` is the end of the delay: the lease
    /// ends this long before it. An entry let go of within its minimum hold has the hold here.
    pub delay: Time,
    /// `minHoldMs`: its minimum hold (0: none).
    pub min_hold: Time,
    /// `letGoAt` is set: the entry holds nothing, whatever the clock reads, and is only in
    /// force for what is left of its delay: its holder let go of it within its minimum hold
    /// (in force until `createdAt + minHoldMs`), or a force release ended its lease (in force
    /// for its lock-delay).
    pub let_go: bool,
}

impl Entry {
    /// Whether the entry is in force at server time `now`, keeping the resource from
    /// everybody (`expr::is_live`): an entry without TTL always is; one with a lock-delay or
    /// let go of within its hold until the end of those.
    pub fn is_live(&self, now: Time) -> bool {
        self.expires_at.is_none_or(|end| end > now)
    }

    /// Whether its holder still holds its lease at `now` (`expr::holds`): as [`is_live`],
    /// the lock-delay taken off `expiresAt`; an entry let go of within its minimum hold
    /// holds nothing, whatever the clock reads (a clock stepped back before its grant would
    /// otherwise read its hold as a lease again: see [`holds_by_time`]).
    ///
    /// [`is_live`]: Entry::is_live
    /// [`holds_by_time`]: Entry::holds_by_time
    pub fn holds(&self, now: Time) -> bool {
        !self.let_go && self.holds_by_time(now)
    }

    /// The time test of [`holds`](Entry::holds) alone: `expiresAt` less the lock-delay is
    /// after `now`. For a let-go entry (`expiresAt = createdAt + minHoldMs`, the hold as its
    /// delay) that is `createdAt > now`: false while the clock only moves forward, true once
    /// it steps back before the grant (`expr::holds` before d44da17; bug (z)).
    pub fn holds_by_time(&self, now: Time) -> bool {
        self.expires_at.is_none_or(|end| end > now + self.delay)
    }

    /// When its lease ends (`expiresAt` less the delay), by the server's clock.
    pub fn lease_end(&self) -> Option<Time> {
        self.expires_at.map(|end| end.saturating_sub(self.delay))
    }

    /// The entry once its holder lets go of it at `now` (`expr::let_go`): none, unless its
    /// minimum hold runs past `now`: then in force until `createdAt + minHoldMs`, its lease
    /// ended (the hold as its delay), marked let go of.
    pub fn let_go(&self, now: Time) -> Option<Entry> {
        let until = self.created_at + self.min_hold;
        (until > now).then(|| Entry {
            expires_at: Some(until),
            delay: self.min_hold,
            let_go: true,
            ..self.clone()
        })
    }
}

/// A waiter's place in a resource's line (`queue`): the lock id it waits as, until when it
/// lasts (`until`, by the server's clock: `$$NOW` plus the place's life when it joined; the
/// model's clients do not refresh it, so it lapses then), whether it waits for a shared
/// lock (`kind`), and the waiting call that holds it (`call`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Place {
    /// `lockId`.
    pub lock_id: LockId,
    /// `until`: the place counts for nothing from then on.
    pub until: Time,
    /// `kind` is `shared`: a reader's or a permit's place.
    pub shared: bool,
    /// `call`: the waiting call that holds the place, named by its first attempt's nonce
    /// (none: a place written before places named their call, which only its lock id's
    /// next attempt takes over, or a grant of its lock id takes out).
    pub call: Option<Nonce>,
}

/// One resource's lock document (a resource without one is the default: no entry, fence 0,
/// no tombstones, nobody in line).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Doc {
    /// `exclusive`.
    pub entry: Option<Entry>,
    /// `shared`: the shared entries, in the order they were granted (a lock id has one in
    /// force at most).
    pub shared: Vec<Entry>,
    /// `cap`: the cap the shared entries were granted under (none: no cap, or no shared
    /// entry: it is cleared when the last one goes).
    pub cap: Option<u8>,
    /// `fence`: the last token granted (shared and exclusive grants share it).
    pub fence: Token,
    /// `released`: retired nonces, sorted. A tombstone lives at least five minutes, longer
    /// than any run of the model, so none lapses here.
    pub tombstones: Vec<Nonce>,
    /// `queue`: the waiters' places, in the order they joined (a lock id has one at most).
    /// Lapsed places count for nothing, and every step drops them.
    pub queue: Vec<Place>,
}

impl Doc {
    /// Every entry, the exclusive one first.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entry.iter().chain(self.shared.iter())
    }

    /// Every entry, the exclusive one first, to change.
    pub fn entries_mut(&mut self) -> impl Iterator<Item = &mut Entry> {
        self.entry.iter_mut().chain(self.shared.iter_mut())
    }

    /// Each entry replaced by what `next` makes of it (none: it goes), on both sides; the
    /// cap cleared when no shared entry is left. Whether any changed.
    fn map_entries(&mut self, mut next: impl FnMut(&Entry) -> Option<Entry>) -> bool {
        let mut changed = false;
        if let Some(e) = self.entry.take() {
            let n = next(&e);
            changed |= n.as_ref() != Some(&e);
            self.entry = n;
        }
        let shared = std::mem::take(&mut self.shared);
        for e in shared {
            let n = next(&e);
            changed |= n.as_ref() != Some(&e);
            self.shared.extend(n);
        }
        if self.shared.is_empty() {
            self.cap = None;
        }
        changed
    }

    /// The line without `lock_id`'s place (it stops waiting: granted).
    fn leave(&mut self, lock_id: LockId) {
        self.queue.retain(|p| p.lock_id != lock_id);
    }

    /// The line without the place of the waiting call `call` (it stopped waiting: withdrawn,
    /// left, answered out of the line); with bug (aj), without every place of `lock_id`, as
    /// before issue 40's fix.
    fn leave_call(&mut self, lock_id: LockId, call: Nonce, bugs: &Bugs) {
        match bugs.line_removal_by_lock_id {
            true => self.leave(lock_id),
            false => self.queue.retain(|p| p.call != Some(call)),
        }
    }

    /// The line after an adoption by the call `call` of `lock_id`: without that call's place,
    /// nor a place of the lock id that names no call (written before places named their
    /// call); a place of another call of the lock id stays (a late copy of an ended call's
    /// adoption leaves the lock id's next call where it stands). With bug (al), without
    /// every place of `lock_id`, as before.
    fn leave_adopted(&mut self, lock_id: LockId, call: Nonce, bugs: &Bugs) {
        match bugs.adoption_by_lock_id {
            true => self.leave(lock_id),
            false => self.queue.retain(|p| match p.call {
                Some(named) => named != call,
                None => p.lock_id != lock_id,
            }),
        }
    }

    /// The resource is sealed: a withdrawal past the tombstone cap went into the seal (a
    /// tombstone whose nonce is null in the library, [`SEAL`] here), which refuses every
    /// attempt (its `until`, the latest of those it stands for, outlives every run as the
    /// tombstones do).
    pub fn sealed(&self) -> bool {
        self.tombstones.last() == Some(&SEAL)
    }

    fn tombstone(&mut self, nonce: Nonce) {
        if let Err(at) = self.tombstones.binary_search(&nonce) {
            self.tombstones.insert(at, nonce);
        }
    }
}

/// A request, as the library sends it (the commands of `mongolock/src/command/`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Request {
    /// `acquire`: grant if free for the kind, repeat a grant to the same attempt; not
    /// granted, the lock id's own live entries gain the attempt's `afterUnlocks`. A waiting
    /// acquire's attempt (`announce`) also asks the line, and takes, keeps or leaves its place
    /// (see the module docs); a single attempt asks it too (every place is ahead of it), and a
    /// grant takes its lock id's place out.
    Acquire {
        /// The resource.
        resource: Res,
        /// Exclusive, or shared with the cap asked for.
        kind: Kind,
        /// The holder.
        lock_id: LockId,
        /// The attempt.
        nonce: Nonce,
        /// The keeper the entry names (none: a low-level call).
        keeper: Option<KeeperId>,
        /// The TTL (none: the lock never expires).
        ttl: Option<Time>,
        /// The client's doubted `unlock` calls of the lock id, which a grant names (and
        /// the lock id's entry the attempt is answered with, when not granted).
        after_unlocks: Unlocks,
        /// The lock-delay (0: none): a grant's entry stays in force that long after its lease.
        delay: Time,
        /// The minimum hold (0: none).
        min_hold: Time,
        /// A waiting acquire's attempt (`announce`): the life of the place it takes in line
        /// when it is made to wait. None: a single attempt, which joins no line.
        announce: Option<Time>,
        /// The call the attempt is made for, which its place names: its first attempt's
        /// nonce.
        call: Nonce,
    },
    /// `release` of one grant, by lock id, token and (for a lease) keeper; with `retire`,
    /// the retirement of its attempt too (a tombstone for that nonce).
    Release {
        /// The resource.
        resource: Res,
        /// The holder.
        lock_id: LockId,
        /// The grant's token.
        token: Token,
        /// The keeper the grant names.
        keeper: Option<KeeperId>,
        /// The nonce to retire, if the grant's attempt was ever uncertain or resumed.
        retire: Option<Nonce>,
        /// The grant has a minimum hold: its entry is let go of (`Entry::let_go`), not
        /// removed.
        hold: bool,
    },
    /// `release_attempt`: remove the attempt's entry (by lock id, nonce and keeper) if
    /// there, and tombstone the nonce. With `hold` (`Hold::Kept`, an attempt with a minimum
    /// hold: the user's `release_attempt`), a granted entry is let go of instead.
    Withdraw {
        /// The resource.
        resource: Res,
        /// The holder.
        lock_id: LockId,
        /// The attempt.
        nonce: Nonce,
        /// The keeper the attempt names.
        keeper: Option<KeeperId>,
        /// `Hold::Kept` with a minimum hold: the entry is let go of, not removed (`Waived`: a
        /// grant nobody was handed, removed).
        hold: bool,
        /// The attempt asked for a shared lock: the reply tells whether a shared entry was
        /// removed (an exclusive one, else), though entries of both sides go.
        shared: bool,
        /// The attempt's call, whose place in line goes.
        call: Nonce,
    },
    /// The keeper's renewal: one statement per lease it tracks (resource, token), each
    /// matching lock id, token and keeper while the lease is live by the grant's lock-delay
    /// (`keepalive::lease_query`: `expiresAt > $$NOW + delay`, the grant's delay, not the
    /// entry's `delayMs`; never a let-go entry), renewing it to `$$NOW + ttl + delay`; then
    /// the keeper's read of which of them it holds (`keepalive::live_leases`, by
    /// [`Entry::holds`]).
    Renew {
        /// The lock id of the leases.
        lock_id: LockId,
        /// The keeper.
        keeper: KeeperId,
        /// The leases named, as (resource, token).
        leases: Vec<(Res, Token)>,
        /// Their TTL.
        ttl: Time,
        /// Their grants' lock-delay.
        delay: Time,
    },
    /// `renew(lock_id)` of the low-level API: every live entry of the lock id.
    RenewLockId {
        /// The lock id.
        lock_id: LockId,
        /// The TTL.
        ttl: Time,
    },
    /// Resume's adoption: the live entry of lock id and token names `keeper` from now on,
    /// and the client's doubted `unlock` calls of the lock id too; it is marked `adopted`.
    /// Live as the keeper's renewal matches it (`keepalive::lease_query`, by the grant's
    /// lock-delay; never a let-go entry). Adopted, the adopting call's place leaves the line
    /// in the same update, and so does a place of the lock id that names no call; a place of
    /// another call of the lock id stays.
    Adopt {
        /// The resource.
        resource: Res,
        /// The holder.
        lock_id: LockId,
        /// The grant's token.
        token: Token,
        /// The new keeper.
        keeper: KeeperId,
        /// The keeper the entry named in the "already held" reply the adoption follows:
        /// the adoption matches an entry naming it or `keeper` (a copy of an adoption that
        /// landed already), no other (`keepalive::adopted_keepers`).
        answered: Option<KeeperId>,
        /// The client's doubted `unlock` calls of the lock id, added to the entry's.
        after_unlocks: Unlocks,
        /// The grant's lock-delay (the entry's `delayMs` when the attempt was answered).
        delay: Time,
        /// The adopting call (its first attempt's nonce), whose place goes.
        call: Nonce,
    },
    /// `unlock(lock_id)`, the call `op`: every entry of the lock id goes, except one that
    /// names `op` (granted or resumed after `op` was sent).
    Unlock {
        /// The lock id.
        lock_id: LockId,
        /// The call's operation id.
        op: UnlockOp,
    },
    /// `leave_line`: the call's place goes from the resource's line (a waiter that stops
    /// waiting with every attempt refused).
    Leave {
        /// The resource.
        resource: Res,
        /// The waiter.
        lock_id: LockId,
        /// The call that stops waiting.
        call: Nonce,
    },
    /// An operator's `force_release(resource)`.
    ForceRelease {
        /// The resource.
        resource: Res,
    },
}

/// A reply, by class (what the client tells from it).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reply {
    /// `Attempt::Granted`: this attempt holds the resource (now or from an earlier copy).
    Granted {
        /// The grant's token.
        token: Token,
        /// Its expiry.
        expires_at: Option<Time>,
        /// The server's clock when it was decided.
        now: Time,
    },
    /// `Attempt::AlreadyHeld`: this lock id holds it from another attempt.
    AlreadyHeld {
        /// The grant's token.
        token: Token,
        /// The nonce of the attempt that was granted.
        nonce: Nonce,
        /// The keeper the entry names (none: a low-level call's), which the lock id's
        /// adoption asks for.
        keeper: Option<KeeperId>,
        /// Its expiry.
        expires_at: Option<Time>,
        /// The server's clock when it was decided.
        now: Time,
    },
    /// `Attempt::Contended`.
    Refused,
    /// `Attempt::HeldWithOtherKind`: this lock id holds it with the other kind.
    HeldOtherKind,
    /// `Attempt::CapMismatch`: the shared entries in force were granted under another cap.
    CapMismatch,
    /// `Attempt::Withdrawn`: the nonce was retired.
    Withdrawn,
    /// A release or a withdrawal: whether it removed the entry, and whether it was live.
    Released {
        /// An entry was removed.
        removed: bool,
        /// It was live.
        live: bool,
    },
    /// A renewal: per lease named, whether the server holds it live for this keeper after
    /// the command (the keeper's read), and the command's count.
    Renewed {
        /// Per lease named.
        live: Vec<bool>,
        /// The reply's `n`.
        count: u8,
    },
    /// An adoption: whether it matched.
    Adopted(bool),
    /// An unlock, a low-level renewal or a force release: how many entries it touched.
    Count(u8),
}

/// Deliberate departures from the library's protocol: each puts back a bug found before,
/// so that the model can show it fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bugs {
    /// (a) An attempt does not wait for a release its client owes for its lock id.
    pub no_settle_releases: bool,
    /// (b) An attempt does not wait for a withdrawal its client owes for its lock id.
    pub no_settle_withdrawals: bool,
    /// (c) A grant whose attempt was uncertain is released without retiring its nonce.
    pub no_retire_on_release: bool,
    /// (l) A retiring release removes its grant by token only, leaving a re-grant of the same
    /// attempt (a late copy, under a later token) in place.
    pub release_by_token_only: bool,
    /// (d) `xlock` with an unknown outcome does not withdraw its attempt.
    pub xlock_no_withdraw: bool,
    /// (e) The keeper renews by lock id alone (every live entry of the lock id).
    pub keeper_by_lock_id: bool,
    /// (f) The keeper believes every lease renewed when the count is high enough.
    pub keeper_trusts_count: bool,
    /// (g) A refusal settles an attempt that once had an unknown outcome.
    pub refusal_settles: bool,
    /// (h) A release or withdrawal does not match the keeper the entry names.
    pub no_keeper_match: bool,
    /// (i) The fence restarts when the entry goes (a counter reset on delete).
    pub counter_reset: bool,
    /// (j) The local deadline is the TTL past the send, with no margin, plus a tick (a
    /// client clock that runs slow).
    pub long_deadline: bool,
    /// (k) A release reports `Ok` when it removed nothing (an "idempotent" release).
    pub release_ok_when_gone: bool,
    /// (m) An `unlock` removes every entry of its lock id, those that name it too (before
    /// `afterUnlocks`: a late copy removes a grant made after it was sent).
    pub unlock_spares_nothing: bool,
    /// (n) An `unlock` call whose repeat was answered stops being doubted, though its first
    /// copy had an unknown outcome (and may still land).
    pub unlock_repeat_settles: bool,
    /// (o) An attempt that is not granted leaves its lock id's entry as it is (before
    /// 9119560: an `xlock` answered "already held" by an entry granted before its client's
    /// doubted `unlock` was sent, which a late copy of that unlock then removes).
    pub held_answer_unmarked: bool,
    /// (p) A retiring release removes a re-grant of its attempt even if a client adopted it
    /// since (before 9119560: a dead incarnation's retiring release removes the lease its
    /// restart resumed).
    pub release_ignores_adopted: bool,
    /// (q) `release_attempt` removes a granted entry outright, dropping its minimum hold
    /// (issue 39, item 3: a withdrawal always removed).
    pub withdraw_drops_hold: bool,
    /// (r) An acquire drops an entry whose lease ended, as if it were gone, though its
    /// lock-delay keeps it in force.
    pub delay_ignored: bool,
    /// (t) `purge_abandoned_groups` takes an entry let go of within its minimum hold for
    /// abandoned once the hold ends, and removes its lock id's entries created before the
    /// hold's end (issue 39, item 4: the cut-off was `expiresAt`, and `letGoAt` was not read).
    pub purge_takes_let_go: bool,
    /// (u) A low-level `release_attempt` whose outcome is unknown is not owed: nothing sends
    /// its withdrawal again, nor before the client's next attempt of the lock id (before
    /// 1943688: a late copy of it ends the grant that next attempt was answered "already
    /// held" with).
    pub release_attempt_not_owed: bool,
    /// (v) A shared grant ignores the cap (the `$lt` term of a semaphore's attempt left
    /// out): a permit granted while every permit is taken.
    pub shared_ignores_cap: bool,
    /// (w) A shared grant ignores the exclusive entry in force (the `x == null` term left
    /// out of a reader's attempt): a reader admitted while a writer holds.
    pub reader_beside_writer: bool,
    /// (x) An exclusive grant ignores the shared entries in force (the `$size` of `s` term
    /// left out): a writer admitted while a reader's share is live; the shared entries are
    /// kept beside it.
    pub writer_beside_readers: bool,
    /// (y) A shared grant's release removes every shared entry of the document (filtering
    /// the shared entries by the lock id's `$elemMatch` found, not by token): the other
    /// holders' shares go with it, while they believe.
    pub shared_release_takes_all: bool,
    /// (z) "Held" is a time test only (`expr::holds` and the client's `interpret` before
    /// d44da17): an entry let go of within its minimum hold is read as held again once the
    /// server's clock steps back before its grant, so its lock id's next attempt is answered
    /// "already held" with it (and adopts it), and renewals extend it.
    pub let_go_held: bool,
    /// (aa) The keeper's statements (its renewal, resume's adoption: `keepalive::lease_query`)
    /// do not read `letGoAt`: a restarted guard adopts the entry its dead predecessor's late
    /// release let go of within its hold, between its attempt's answer and its adoption, and
    /// believes a lease the server holds for nobody (found by the model, fixed in the
    /// library's `lease_query`).
    pub keeper_ignores_let_go: bool,
    /// (ac) `purge` (and the TTL index's `idleSince`) reads an entry as expired once its
    /// lease has ended (`expiresAt` less `delayMs`): an entry within its lock-delay, or let go
    /// of within its minimum hold, is purged (or its document deleted) while it is to keep
    /// the resource from everybody.
    pub purge_by_lease_end: bool,
    /// (ad) The TTL index's deletion takes the fence with the document, and nothing
    /// replaces it (before tokens were at least `$$NOW` in microseconds: a counter that
    /// restarts at 1).
    pub ttl_resets_fence: bool,
    /// (ae) A force release keeps an entry with a lock-delay in force for its delay from
    /// `$$NOW` alone: after a step back of the server's clock past the grant, an entry let go
    /// of within its minimum hold (its hold as its delay) ends before `createdAt +
    /// minHoldMs`.
    pub force_cuts_hold: bool,
    /// (af) An attempt of a lock id whose client doubts more unlocks than the limit
    /// (`unlocks::MAX_DOUBTED_UNLOCKS`) is sent with the first of them only, instead of
    /// being refused: a late copy of an unlock it leaves out removes its grant.
    pub unlock_limit_truncates: bool,
    /// (ak) An acquire that does not read the seal (only its own nonce's tombstone, as before
    /// the tombstone cap): a late copy of an attempt whose withdrawal went into the seal is
    /// granted.
    pub seal_ignored: bool,
    /// (ag) A force release that keeps an entry in force for its lock-delay leaves it
    /// unmarked (no `letGoAt`, before issue 40's fix): once the server's clock steps back by
    /// more than the delay, its revoked holder's keeper renews it (`keepalive::lease_query`
    /// reads `expiresAt > $$NOW + delay` true again) and `expr::holds` reads it as held:
    /// the holder is never told of the revocation.
    pub force_leaves_unmarked: bool,
    /// (ah) A waiting exclusive attempt answered "already held" (its lock id's entry, from
    /// another attempt, held) is out of the line (`o`), as before 4b66416: it takes no place,
    /// and loses the one it had; a restarted process whose adoption is then refused joins
    /// the line again at its end, behind a waiter that came after it.
    pub held_answer_leaves_line: bool,
    /// (ai) A line jumper: a waiting exclusive attempt's grant ignores the places ahead of it
    /// (the `$size` of `a` term left out).
    pub line_jumper: bool,
    /// (aj) A withdrawal, a retiring release, `leave_line` and a waiting attempt answered
    /// out of the line take out every place of their lock id, as before issue 40's fix: one
    /// that lands late, after the lock id's next call joined the line, takes that call's
    /// place, which joins again at the end, behind waiters that came after it.
    pub line_removal_by_lock_id: bool,
    /// (al) An adoption takes out every place of its lock id, as before it named its call: a
    /// late copy of an ended call's adoption, landing while the lease is still live and the
    /// lock id's next call stands in line (answered "already held" too), takes that call's
    /// place; if the next call's own adoption is then refused (the lease let go of or ended
    /// meanwhile), it joins again at the end, behind waiters that came after it.
    pub adoption_by_lock_id: bool,
    /// (am) An adoption matches the lease whatever keeper its entry names (as before the
    /// adoption asked for the keeper its attempt was answered with): a late copy of a dead
    /// process's adoption, landing after the lock id's live successor adopted the lease,
    /// renames it to the dead keeper, and the successor's release finds nothing.
    pub adoption_ignores_keeper: bool,
    /// (an) `renew(lock_id)` sets every live entry of the lock id to expire its TTL after
    /// now, a kept lease's too, as if the guards' keeper did not renew it: a user's call with
    /// a TTL shorter than the guard's ends the lease before the guard's local deadline, and
    /// another client is granted while the guard still believes it holds. The library keeps
    /// a later expiry of an entry that names a keeper (`renew_group`).
    pub renew_by_id_shortens: bool,
    /// (ao) Writes acknowledged with `w: 1` (`with_unsafe_write_concern`): the primary that
    /// acknowledged the last one is cut off before any other member applied it, another is
    /// elected, and the write is rolled back (`Action::RollBack`). Under the library's
    /// `w: "majority"` an acknowledged write is majority-committed and never rolled back
    /// (mongod rolls back only what no majority applied: `src/mongo/db/repl/rollback_impl.cpp`,
    /// the replication README's "Rollback: Recover To A Timestamp"), and a write whose reply
    /// never came is an unknown outcome, which the model already gives both ways (executed,
    /// its reply lost; or never delivered).
    pub w1_rollback: bool,
}

/// The cap a request of `kind` asks for (none for an exclusive one).
fn kind_cap(kind: Kind) -> Option<u8> {
    match kind {
        Kind::Shared { cap } => cap,
        Kind::Exclusive => None,
    }
}

/// Whether the lease of `e` is live at `now` as the keeper's statements ask it
/// (`keepalive::lease_query`): not let go of (unless bug (aa)), and `expiresAt` after `now`
/// plus the grant's lock-delay `delay` (not the entry's `delayMs`).
fn lease_live(e: &Entry, now: Time, delay: Time, bugs: &Bugs) -> bool {
    (!e.let_go || bugs.keeper_ignores_let_go) && e.expires_at.is_some_and(|end| end > now + delay)
}

/// Whether `e`'s holder holds its lease at `now`, as the server's commands ask it
/// ([`Entry::holds`]; with bug (z), [`Entry::holds_by_time`]).
fn held(e: &Entry, now: Time, bugs: &Bugs) -> bool {
    if bugs.let_go_held {
        e.holds_by_time(now)
    } else {
        e.holds(now)
    }
}

/// Whether `keeper` (a request's) matches `stored` (the entry's), as the library's release
/// and withdrawal queries do: a request that names a keeper matches only that keeper.
fn keeper_matches(request: Option<KeeperId>, stored: Option<KeeperId>, bugs: &Bugs) -> bool {
    bugs.no_keeper_match || request.is_none() || request == stored
}

/// The server: one document per resource.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Server {
    /// The documents, by resource.
    pub docs: Vec<Doc>,
}

impl Server {
    /// A server with `resources` empty documents.
    pub fn new(resources: usize) -> Self {
        Server {
            docs: vec![Doc::default(); resources],
        }
    }

    /// Removes the entry of `resource` (the fence stays, unless the counter-reset bug).
    fn remove(&mut self, resource: Res, bugs: &Bugs) -> Option<Entry> {
        let doc = &mut self.docs[resource as usize];
        let removed = doc.entry.take();
        if bugs.counter_reset && removed.is_some() {
            doc.fence = 0;
        }
        removed
    }

    /// Carries out `request` atomically at server time `now`, as the library's command
    /// does, and returns its reply.
    pub fn execute(&mut self, request: &Request, now: Time, bugs: &Bugs) -> Reply {
        // A lapsed place counts for nothing: every write drops it (`expr::live_queue`).
        for doc in &mut self.docs {
            doc.queue.retain(|p| p.until > now);
        }
        match *request {
            Request::Acquire {
                resource,
                kind,
                lock_id,
                nonce,
                keeper,
                ttl,
                after_unlocks,
                delay,
                min_hold,
                announce,
                call,
            } => {
                // Entries no longer in force never stand in the way: dropped first (`x` and
                // `s` are the live ones, and the document is rewritten with them).
                let gone = |e: &Entry| !e.is_live(now) || (bugs.delay_ignored && !e.holds(now));
                if (self.docs[resource as usize].entry.as_ref()).is_some_and(gone) {
                    self.remove(resource, bugs);
                }
                let doc = &mut self.docs[resource as usize];
                doc.shared.retain(|e| !gone(e));
                if doc.shared.is_empty() {
                    doc.cap = None;
                }
                // Not granted, the lock id's own live entries (which answer the attempt) name
                // the unlocks the attempt carries too, as a grant would: its holder goes on
                // believing, so a late copy of those unlocks must leave them (the `marked`
                // closure of the library's `acquire` pipeline: a set union).
                if !bugs.held_answer_unmarked {
                    for e in doc.entries_mut().filter(|e| e.lock_id == lock_id) {
                        e.after_unlocks = e.after_unlocks.union(after_unlocks);
                    }
                }
                // Withdrawn: its nonce's tombstone, or the seal (`withdrawn()` of
                // `command/acquire.rs`, which both variants read; bug (ak) reads the nonce's
                // only).
                let withdrawn = doc.tombstones.binary_search(&nonce).is_ok()
                    || (doc.sealed() && !bugs.seal_ignored);
                // `a`: the places ahead of this lock id's own, or every place if it has none.
                let own_place = doc.queue.iter().position(|p| p.lock_id == lock_id);
                let ahead = &doc.queue[..own_place.unwrap_or(doc.queue.len())];
                let cap_agrees = |cap: Option<u8>| doc.shared.is_empty() || doc.cap == cap;
                // `o` (a waiting attempt): out of the line, answered with a lock it does not
                // wait for. An exclusive one: withdrawn, its own grant held (a repeat), or its
                // lock id holds a share (an error); its lock id's exclusive entry from another
                // attempt, held, keeps it in line (answered "already held", unless bug (ah)).
                // A shared one: withdrawn, or its lock id has an entry in force.
                let out = announce.is_some()
                    && (withdrawn
                        || match kind {
                            Kind::Exclusive => {
                                (doc.entry.as_ref()).is_some_and(|x| {
                                    (x.nonce == nonce
                                        || (bugs.held_answer_leaves_line && x.lock_id == lock_id))
                                        && held(x, now, bugs)
                                }) || (doc.shared.iter())
                                    .any(|e| e.lock_id == lock_id && held(e, now, bugs))
                            }
                            Kind::Shared { .. } => doc.entries().any(|e| e.lock_id == lock_id),
                        });
                // `g`: the grant's terms.
                let granted = !withdrawn
                    && !out
                    && match kind {
                        Kind::Exclusive => {
                            doc.entry.is_none()
                                && (doc.shared.is_empty() || bugs.writer_beside_readers)
                                && (ahead.is_empty() || (bugs.line_jumper && announce.is_some()))
                        }
                        Kind::Shared { cap } => {
                            (doc.entry.is_none() || bugs.reader_beside_writer)
                                && !doc.shared.iter().any(|e| e.lock_id == lock_id)
                                && cap_agrees(cap)
                                && !ahead.iter().any(|p| !p.shared)
                                && (cap.is_none_or(|max| {
                                    doc.shared.len() + ahead.len() < max as usize
                                }) || bugs.shared_ignores_cap)
                        }
                    };
                // The line: a grant takes the lock id's place out; a waiting attempt out of
                // it (or asking another cap than the shares in force) takes its call's place
                // out; a waiting attempt made to wait joins at the end if its lock id has no
                // place, else keeps it where it is, named by its call.
                let stops = out || (kind.is_shared() && !cap_agrees(kind_cap(kind)));
                match (announce, own_place) {
                    _ if granted => doc.leave(lock_id),
                    (Some(_), _) if stops => doc.leave_call(lock_id, call, bugs),
                    (Some(life), None) => doc.queue.push(Place {
                        lock_id,
                        until: now + life,
                        shared: kind.is_shared(),
                        call: Some(call),
                    }),
                    (Some(_), Some(at)) => doc.queue[at].call = Some(call),
                    (None, _) => {}
                }
                if granted {
                    let token = doc.fence + 1;
                    doc.fence = token;
                    let entry = Entry {
                        lock_id,
                        nonce,
                        token,
                        keeper,
                        expires_at: ttl.map(|ttl| now + ttl + delay),
                        after_unlocks,
                        adopted: false,
                        // Read only by a minimum hold: none, none kept (fewer states).
                        created_at: if min_hold > 0 { now } else { 0 },
                        delay,
                        min_hold,
                        let_go: false,
                    };
                    let expires_at = entry.lease_end();
                    match kind {
                        Kind::Exclusive => doc.entry = Some(entry),
                        Kind::Shared { cap } => {
                            doc.shared.push(entry);
                            doc.cap = cap;
                        }
                    }
                    return Reply::Granted {
                        token,
                        expires_at,
                        now,
                    };
                }
                // This lock id's entry (the exclusive one, else its shared one) holds
                // nothing once its lease has ended: within its lock-delay or minimum hold it
                // keeps this lock id out as it keeps everybody out (the client's
                // `interpret`). A reply tells the lease's end.
                let (mine, mine_kind) = match &doc.entry {
                    Some(e) if e.lock_id == lock_id => (Some(e), Kind::Exclusive),
                    _ => (
                        doc.shared.iter().find(|e| e.lock_id == lock_id),
                        Kind::Shared { cap: None },
                    ),
                };
                let mine = mine.filter(|e| held(e, now, bugs));
                match mine {
                    Some(e) if e.nonce == nonce => Reply::Granted {
                        token: e.token,
                        expires_at: e.lease_end(),
                        now,
                    },
                    _ if withdrawn => Reply::Withdrawn,
                    Some(e) if mine_kind.is_shared() == kind.is_shared() => Reply::AlreadyHeld {
                        token: e.token,
                        nonce: e.nonce,
                        keeper: e.keeper,
                        expires_at: e.lease_end(),
                        now,
                    },
                    Some(_) => Reply::HeldOtherKind,
                    None => match kind {
                        Kind::Shared { cap } if !doc.shared.is_empty() && doc.cap != cap => {
                            Reply::CapMismatch
                        }
                        _ => Reply::Refused,
                    },
                }
            }
            Request::Release {
                resource,
                lock_id,
                token,
                keeper,
                retire,
                hold,
            } => {
                let doc = &self.docs[resource as usize];
                let reports = |e: &Entry| {
                    e.lock_id == lock_id
                        && e.token == token
                        && keeper_matches(keeper, e.keeper, bugs)
                };
                let found = doc.entries().find(|e| reports(e));
                let removed = found.is_some();
                let live = found.is_some_and(|e| held(e, now, bugs));
                let shared = doc.shared.iter().any(reports);
                // A retiring release also removes a re-grant of its attempt (same nonce, another
                // token: only a late copy makes one, whatever keeper it named), which nobody
                // holds, unless a client adopted it since (its adopter holds it).
                let regrant = |e: &Entry| {
                    !bugs.release_by_token_only
                        && retire.is_some_and(|nonce| {
                            e.lock_id == lock_id
                                && e.nonce == nonce
                                && e.token != token
                                && (!e.adopted || bugs.release_ignores_adopted)
                        })
                };
                if (doc.entry.as_ref()).is_some_and(|e| regrant(e) || (reports(e) && !hold)) {
                    self.remove(resource, bugs);
                }
                let doc = &mut self.docs[resource as usize];
                let takes_all = bugs.shared_release_takes_all && shared;
                doc.map_entries(|e| {
                    if reports(e) && hold {
                        // Let go of: kept in force for what is left of its minimum hold.
                        e.let_go(now)
                    } else if reports(e) || regrant(e) {
                        None
                    } else {
                        Some(e.clone())
                    }
                });
                if takes_all {
                    doc.shared.clear();
                    doc.cap = None;
                }
                if let Some(nonce) = retire {
                    doc.tombstone(nonce);
                    // The grant's call left the line with its grant: no place goes (bug (aj):
                    // every place of the lock id).
                    if bugs.line_removal_by_lock_id {
                        doc.leave(lock_id);
                    }
                }
                Reply::Released { removed, live }
            }
            Request::Withdraw {
                resource,
                lock_id,
                nonce,
                keeper,
                hold,
                shared,
                call,
            } => {
                let doc = &self.docs[resource as usize];
                let matches = |e: &Entry| {
                    e.lock_id == lock_id
                        && e.nonce == nonce
                        && keeper_matches(keeper, e.keeper, bugs)
                };
                let found = match shared {
                    false => doc.entry.as_ref().filter(|e| matches(e)),
                    true => doc.shared.iter().find(|e| matches(e)),
                };
                let removed = found.is_some();
                let live = found.is_some_and(|e| held(e, now, bugs));
                let keep_hold = hold && !bugs.withdraw_drops_hold;
                if (doc.entry.as_ref()).is_some_and(|e| matches(e) && !keep_hold) {
                    self.remove(resource, bugs);
                }
                let doc = &mut self.docs[resource as usize];
                doc.map_entries(|e| match (matches(e), keep_hold) {
                    (true, true) => e.let_go(now),
                    (true, false) => None,
                    (false, _) => Some(e.clone()),
                });
                doc.tombstone(nonce);
                doc.leave_call(lock_id, call, bugs);
                Reply::Released { removed, live }
            }
            Request::Leave {
                resource,
                lock_id,
                call,
            } => {
                self.docs[resource as usize].leave_call(lock_id, call, bugs);
                Reply::Count(0)
            }
            Request::Renew {
                lock_id,
                keeper,
                ref leases,
                ttl,
                delay,
            } => {
                let mut count = 0;
                let kept = |e: &Entry, token: Token| {
                    e.lock_id == lock_id && e.token == token && e.keeper == Some(keeper)
                };
                if bugs.keeper_by_lock_id {
                    count = self.renew_lock_id(lock_id, ttl, now, false, bugs);
                } else {
                    for &(resource, token) in leases {
                        let doc = &mut self.docs[resource as usize];
                        let statement =
                            |e: &Entry| kept(e, token) && lease_live(e, now, delay, bugs);
                        if let Some(e) = doc.entries_mut().find(|e| statement(e)) {
                            e.expires_at = Some(now + ttl + delay);
                            count += 1;
                        }
                    }
                }
                // The keeper's read: which of the named leases it holds live.
                let live = (leases.iter())
                    .map(|&(resource, token)| {
                        (self.docs[resource as usize].entries())
                            .any(|e| kept(e, token) && held(e, now, bugs))
                    })
                    .collect();
                Reply::Renewed { live, count }
            }
            Request::RenewLockId { lock_id, ttl } => {
                let never_shorten = !bugs.renew_by_id_shortens;
                Reply::Count(self.renew_lock_id(lock_id, ttl, now, never_shorten, bugs))
            }
            Request::Adopt {
                resource,
                lock_id,
                token,
                keeper,
                answered,
                after_unlocks,
                delay,
                call,
            } => {
                let doc = &mut self.docs[resource as usize];
                let live = |e: &Entry| match bugs.let_go_held {
                    true => e.holds_by_time(now),
                    false => lease_live(e, now, delay, bugs),
                };
                // The entry as the attempt was answered with it, or as this adoption left it
                // (a copy of one that landed): not one another process adopted since.
                let as_answered = |e: &Entry| {
                    bugs.adoption_ignores_keeper || e.keeper == answered || e.keeper == Some(keeper)
                };
                let adopted = match (doc.entries_mut())
                    .find(|e| e.lock_id == lock_id && e.token == token && live(e) && as_answered(e))
                {
                    Some(e) => {
                        e.keeper = Some(keeper);
                        e.after_unlocks = e.after_unlocks.union(after_unlocks);
                        e.adopted = true;
                        true
                    }
                    None => false,
                };
                // The call holds it: its place in line (kept by the waiting attempt answered
                // "already held") goes in the same update, and no other call's.
                if adopted {
                    doc.leave_adopted(lock_id, call, bugs);
                }
                Reply::Adopted(adopted)
            }
            Request::Unlock { lock_id, op } => {
                let mut count = 0;
                for resource in 0..self.docs.len() {
                    // An entry that names this call was granted (or resumed) after it was
                    // sent: this is a late copy, and the entry stays. The others are let go
                    // of (their minimum hold kept); `nModified` counts the documents that
                    // changed.
                    let unspared = |e: &Entry| {
                        e.lock_id == lock_id
                            && (bugs.unlock_spares_nothing || !e.after_unlocks.contains(op))
                    };
                    let doc = &self.docs[resource];
                    let mut changed = false;
                    if (doc.entry.as_ref()).is_some_and(|e| unspared(e) && e.let_go(now).is_none())
                    {
                        self.remove(resource as Res, bugs);
                        changed = true;
                    }
                    changed |= self.docs[resource].map_entries(|e| match unspared(e) {
                        true => e.let_go(now),
                        false => Some(e.clone()),
                    });
                    count += u8::from(changed);
                }
                Reply::Count(count)
            }
            Request::ForceRelease { resource } => {
                // Counts the leases it ended. An entry with a lock-delay, in force, stays in
                // force for its delay from now, or from its grant when the clock reads before
                // it (stepped back past it), never longer than it was: its lease ends, and it
                // is marked (`letGoAt`), so that it holds nothing however the clock reads
                // (unmarked, a step back by more than the delay reads it as held again, and its
                // keeper renews it: bug (ag)). An
                // entry let go of within its minimum hold (its hold as its delay) so stays as
                // it is, in force until `createdAt + minHoldMs` (from `$$NOW` after a step back
                // past its grant it ended earlier, bug (ae)). The model keeps `createdAt` only
                // for an entry with a minimum hold (0 for the others: from `$$NOW`, a shorter
                // delay, which allows more).
                let doc = &self.docs[resource as usize];
                let ended = doc.entries().filter(|e| held(e, now, bugs)).count() as u8;
                let delayed = |e: &Entry| {
                    (e.delay > 0 && e.is_live(now)).then(|| {
                        let from = match bugs.force_cuts_hold {
                            true => now,
                            false => now.max(e.created_at),
                        };
                        let end = from + e.delay;
                        Entry {
                            expires_at: Some(e.expires_at.map_or(end, |at| at.min(end))),
                            let_go: e.let_go || !bugs.force_leaves_unmarked,
                            ..e.clone()
                        }
                    })
                };
                if (doc.entry.as_ref()).is_some_and(|e| delayed(e).is_none()) {
                    self.remove(resource, bugs);
                }
                self.docs[resource as usize].map_entries(delayed);
                Reply::Count(ended)
            }
        }
    }

    /// `purge_abandoned_groups` at `now` (`command/purge.rs`, `run_groups`), as one step: the
    /// lock ids with an abandoned entry (not in force, not let go of), each with the earliest
    /// end T of such an entry's lease; then every entry not in force goes, and every entry of
    /// such a lock id created before its T. Returns what it removed, as (resource, token).
    /// (`createdAt` is kept only for entries with a minimum hold: the model offers the purge
    /// only where every entry has one.)
    pub fn purge_groups(&mut self, now: Time, bugs: &Bugs) -> Vec<(Res, Token)> {
        let mut groups: Vec<(LockId, Time)> = vec![];
        for e in self.docs.iter().flat_map(Doc::entries) {
            if e.is_live(now) || (e.let_go && !bugs.purge_takes_let_go) {
                continue;
            }
            let Some(end) = e.expires_at else { continue };
            let cut = if bugs.purge_takes_let_go {
                end
            } else {
                end.saturating_sub(e.delay)
            };
            match groups.iter_mut().find(|(l, _)| *l == e.lock_id) {
                Some((_, t)) => *t = (*t).min(cut),
                None => groups.push((e.lock_id, cut)),
            }
        }
        let mut removed = vec![];
        for (l, cut) in groups {
            for (r, doc) in self.docs.iter_mut().enumerate() {
                // Only a document where the lock id holds an entry is touched.
                if !doc.entries().any(|e| e.lock_id == l) {
                    continue;
                }
                // Every entry out of force goes, whoever's (conformance: the model took only
                // the lock id's before), and the lock id's granted before its cut-off.
                doc.map_entries(|e| {
                    if !e.is_live(now) || (e.lock_id == l && e.created_at < cut) {
                        removed.push((r as Res, e.token));
                        None
                    } else {
                        Some(e.clone())
                    }
                });
            }
        }
        // The expired entries elsewhere are of no group: dropped by the first statement that
        // meets them, or by the next acquire; they hold nothing either way.
        removed
    }

    /// `purge` at `now` (`command/purge.rs`, `run`), as one step: every entry no longer in
    /// force goes (`expiresAt` not after `now`: an entry within its lock-delay, or let go of
    /// within its minimum hold, stays), and nothing else. Returns what it removed, as
    /// (resource, token). With bug [`Bugs::purge_by_lease_end`], an entry goes once its
    /// lease has ended (`expiresAt` less `delayMs`), its delay or hold under way.
    pub fn purge(&mut self, now: Time, bugs: &Bugs) -> Vec<(Res, Token)> {
        let mut removed = vec![];
        for (r, doc) in self.docs.iter_mut().enumerate() {
            doc.map_entries(|e| {
                let out = !e.is_live(now)
                    || (bugs.purge_by_lease_end && e.lease_end().is_some_and(|end| end <= now));
                if out {
                    removed.push((r as Res, e.token));
                    None
                } else {
                    Some(e.clone())
                }
            });
        }
        removed
    }

    /// The TTL index's deletion of `resource`'s document at `now`, if it is due: the
    /// document is deleted `retention` after `idleSince` (`crate::schema`: the latest
    /// `expiresAt` of its entries, null when one has no TTL, pushed to the end of its last
    /// tombstone; the model's tombstones outlive every run, so a document with one is never
    /// deleted). What it removed, as tokens; none: not due (a document without entries is
    /// left: deleting it changes nothing the model reads). The fence survives: a grant's
    /// token is at least `$$NOW` in microseconds, and the clock has moved on by the
    /// retention since every token of the deleted document (`crate::schema`), unless bug
    /// [`Bugs::ttl_resets_fence`]. With bug [`Bugs::purge_by_lease_end`], `idleSince` is
    /// the latest lease end (the delays and holds left out).
    pub fn ttl_delete(
        &mut self,
        resource: Res,
        now: Time,
        retention: Time,
        bugs: &Bugs,
    ) -> Option<Vec<Token>> {
        let doc = &mut self.docs[resource as usize];
        if !doc.tombstones.is_empty() || doc.entries().next().is_none() {
            return None;
        }
        let mut idle_since = 0;
        for e in doc.entries() {
            let end = match bugs.purge_by_lease_end {
                true => e.lease_end()?,
                false => e.expires_at?,
            };
            idle_since = idle_since.max(end);
        }
        if idle_since + retention > now {
            return None;
        }
        let removed = doc.entries().map(|e| e.token).collect();
        let fence = if bugs.ttl_resets_fence { 0 } else { doc.fence };
        *doc = Doc {
            fence,
            ..Doc::default()
        };
        Some(removed)
    }

    /// The tombstone cap (`command/release.rs`, `MAX_TOMBSTONES`, here `cap`) after a
    /// withdrawal or retirement of `nonce` on `resource` landed: past `cap` tombstones of
    /// other nonces, its own goes into the seal instead ([`Doc::sealed`]); a seal stays.
    pub fn seal_past(&mut self, resource: Res, nonce: Nonce, cap: u8) {
        let doc = &mut self.docs[resource as usize];
        let others = (doc.tombstones.iter())
            .filter(|&&n| n != nonce && n != SEAL)
            .count();
        if others >= usize::from(cap) {
            doc.tombstones.retain(|&n| n != nonce);
            doc.tombstone(SEAL);
        }
    }

    /// Renews every live entry of `lock_id` by `ttl`; with `never_shorten`, an entry that
    /// names a keeper keeps a later expiry it has (as `renew(lock_id)` treats a kept lease).
    /// Counts the documents renewed.
    fn renew_lock_id(
        &mut self,
        lock_id: LockId,
        ttl: Time,
        now: Time,
        never_shorten: bool,
        bugs: &Bugs,
    ) -> u8 {
        let mut count = 0;
        for doc in &mut self.docs {
            let mut touched = false;
            for e in doc.entries_mut() {
                if e.lock_id == lock_id && held(e, now, bugs) {
                    if let Some(end) = e.expires_at {
                        let renewed = now + ttl + e.delay;
                        e.expires_at = Some(if never_shorten && e.keeper.is_some() {
                            end.max(renewed)
                        } else {
                            renewed
                        });
                    }
                    touched = true;
                }
            }
            count += u8::from(touched);
        }
        count
    }
}
