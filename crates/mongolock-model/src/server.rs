//! The server: one lock document per resource, reduced to what decides the protocol, and
//! the one atomic step each command takes on it.
//!
//! A document here is the exclusive entry (`lockId`, `nonce`, `token`, `keeper`,
//! `expiresAt`, `afterUnlocks`, `adopted`), the fence (the last token granted) and the
//! tombstones (retired nonces).
//! An entry also carries `createdAt`, its lock-delay (`delayMs`), its minimum hold
//! (`minHoldMs`) and `letGoAt` (let go of within its hold).
//! Times are whole ticks of the server's clock. Shared entries, the line, the cap,
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

/// The exclusive entry of a lock document.
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
    /// `letGoAt` is set: its holder let go of it within its minimum hold, and it is only in
    /// force until `createdAt + minHoldMs`.
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
    /// the lock-delay taken off `expiresAt`.
    ///
    /// [`is_live`]: Entry::is_live
    pub fn holds(&self, now: Time) -> bool {
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

/// One resource's lock document (a resource without one is the default: no entry, fence 0,
/// no tombstones).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Doc {
    /// `exclusive`.
    pub entry: Option<Entry>,
    /// `fence`: the last token granted.
    pub fence: Token,
    /// `released`: retired nonces, sorted. A tombstone lives at least five minutes, longer
    /// than any run of the model, so none lapses here.
    pub tombstones: Vec<Nonce>,
}

impl Doc {
    fn tombstone(&mut self, nonce: Nonce) {
        if let Err(at) = self.tombstones.binary_search(&nonce) {
            self.tombstones.insert(at, nonce);
        }
    }
}

/// A request, as the library sends it (the commands of `mongolock/src/command/`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Request {
    /// `acquire` (exclusive): grant if free, repeat a grant to the same attempt; not
    /// granted, the lock id's own live entry gains the attempt's `afterUnlocks`.
    Acquire {
        /// The resource.
        resource: Res,
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
    },
    /// The keeper's renewal: one statement per lease it tracks (resource, token), each
    /// matching lock id, token and keeper, only while live.
    Renew {
        /// The lock id of the leases.
        lock_id: LockId,
        /// The keeper.
        keeper: KeeperId,
        /// The leases named, as (resource, token).
        leases: Vec<(Res, Token)>,
        /// Their TTL.
        ttl: Time,
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
    Adopt {
        /// The resource.
        resource: Res,
        /// The holder.
        lock_id: LockId,
        /// The grant's token.
        token: Token,
        /// The new keeper.
        keeper: KeeperId,
        /// The client's doubted `unlock` calls of the lock id, added to the entry's.
        after_unlocks: Unlocks,
    },
    /// `unlock(lock_id)`, the call `op`: every entry of the lock id goes, except one that
    /// names `op` (granted or resumed after `op` was sent).
    Unlock {
        /// The lock id.
        lock_id: LockId,
        /// The call's operation id.
        op: UnlockOp,
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
        /// Its expiry.
        expires_at: Option<Time>,
        /// The server's clock when it was decided.
        now: Time,
    },
    /// `Attempt::Contended`.
    Refused,
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
    /// does, and returns its reply and, for a grant, the new entry's token.
    pub fn execute(&mut self, request: &Request, now: Time, bugs: &Bugs) -> Reply {
        match *request {
            Request::Acquire {
                resource,
                lock_id,
                nonce,
                keeper,
                ttl,
                after_unlocks,
                delay,
                min_hold,
            } => {
                // Entries no longer in force never stand in the way: dropped first.
                if (self.docs[resource as usize].entry.as_ref())
                    .is_some_and(|e| !e.is_live(now) || (bugs.delay_ignored && !e.holds(now)))
                {
                    self.remove(resource, bugs);
                }
                let doc = &mut self.docs[resource as usize];
                // Not granted, the lock id's own live entry (which answers the attempt) names
                // the unlocks the attempt carries too, as a grant would: its holder goes on
                // believing, so a late copy of those unlocks must leave it (the `marked`
                // closure of the library's `acquire` pipeline: a set union).
                if let Some(e) = &mut doc.entry
                    && e.lock_id == lock_id
                    && !bugs.held_answer_unmarked
                {
                    e.after_unlocks = e.after_unlocks.union(after_unlocks);
                }
                // This lock id's entry holds nothing once its lease has ended: within its
                // lock-delay or minimum hold it keeps this lock id out as it keeps everybody
                // out (the client's `interpret`). A reply tells the lease's end.
                let mine = (doc.entry.as_ref()).filter(|e| e.lock_id == lock_id && e.holds(now));
                match (mine, &doc.entry) {
                    (Some(e), _) if e.nonce == nonce => Reply::Granted {
                        token: e.token,
                        expires_at: e.lease_end(),
                        now,
                    },
                    _ if doc.tombstones.binary_search(&nonce).is_ok() => Reply::Withdrawn,
                    (Some(e), _) => Reply::AlreadyHeld {
                        token: e.token,
                        nonce: e.nonce,
                        expires_at: e.lease_end(),
                        now,
                    },
                    (None, Some(_)) => Reply::Refused,
                    (None, None) => {
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
                        doc.entry = Some(entry);
                        Reply::Granted {
                            token,
                            expires_at,
                            now,
                        }
                    }
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
                let found = doc.entry.as_ref().is_some_and(|e| {
                    e.lock_id == lock_id
                        && e.token == token
                        && keeper_matches(keeper, e.keeper, bugs)
                });
                let live = found && doc.entry.as_ref().is_some_and(|e| e.holds(now));
                // A retiring release also removes a re-grant of its attempt (same nonce, another
                // token: only a late copy makes one, whatever keeper it named), which nobody
                // holds, unless a client adopted it since (its adopter holds it).
                let regrant = !bugs.release_by_token_only
                    && retire.is_some_and(|nonce| {
                        doc.entry.as_ref().is_some_and(|e| {
                            e.lock_id == lock_id
                                && e.nonce == nonce
                                && e.token != token
                                && (!e.adopted || bugs.release_ignores_adopted)
                        })
                    });
                if found && hold {
                    // Let go of: kept in force for what is left of its minimum hold.
                    let doc = &mut self.docs[resource as usize];
                    doc.entry = doc.entry.as_ref().and_then(|e| e.let_go(now));
                } else if found || regrant {
                    self.remove(resource, bugs);
                }
                if let Some(nonce) = retire {
                    self.docs[resource as usize].tombstone(nonce);
                }
                Reply::Released {
                    removed: found,
                    live,
                }
            }
            Request::Withdraw {
                resource,
                lock_id,
                nonce,
                keeper,
                hold,
            } => {
                let doc = &self.docs[resource as usize];
                let found = doc.entry.as_ref().is_some_and(|e| {
                    e.lock_id == lock_id
                        && e.nonce == nonce
                        && keeper_matches(keeper, e.keeper, bugs)
                });
                let live = found && doc.entry.as_ref().is_some_and(|e| e.holds(now));
                if found && hold && !bugs.withdraw_drops_hold {
                    let doc = &mut self.docs[resource as usize];
                    doc.entry = doc.entry.as_ref().and_then(|e| e.let_go(now));
                } else if found {
                    self.remove(resource, bugs);
                }
                self.docs[resource as usize].tombstone(nonce);
                Reply::Released {
                    removed: found,
                    live,
                }
            }
            Request::Renew {
                lock_id,
                keeper,
                ref leases,
                ttl,
            } => {
                let mut count = 0;
                if bugs.keeper_by_lock_id {
                    count = self.renew_lock_id(lock_id, ttl, now, false);
                } else {
                    for &(resource, token) in leases {
                        if let Some(e) = &mut self.docs[resource as usize].entry
                            && e.lock_id == lock_id
                            && e.token == token
                            && e.keeper == Some(keeper)
                            && e.holds(now)
                        {
                            e.expires_at = Some(now + ttl + e.delay);
                            count += 1;
                        }
                    }
                }
                // The keeper's read: which of the named leases it holds live.
                let live = (leases.iter())
                    .map(|&(resource, token)| {
                        self.docs[resource as usize]
                            .entry
                            .as_ref()
                            .is_some_and(|e| {
                                e.lock_id == lock_id
                                    && e.token == token
                                    && e.keeper == Some(keeper)
                                    && e.holds(now)
                            })
                    })
                    .collect();
                Reply::Renewed { live, count }
            }
            Request::RenewLockId { lock_id, ttl } => {
                Reply::Count(self.renew_lock_id(lock_id, ttl, now, true))
            }
            Request::Adopt {
                resource,
                lock_id,
                token,
                keeper,
                after_unlocks,
            } => match &mut self.docs[resource as usize].entry {
                Some(e) if e.lock_id == lock_id && e.token == token && e.holds(now) => {
                    e.keeper = Some(keeper);
                    e.after_unlocks = e.after_unlocks.union(after_unlocks);
                    e.adopted = true;
                    Reply::Adopted(true)
                }
                _ => Reply::Adopted(false),
            },
            Request::Unlock { lock_id, op } => {
                let mut count = 0;
                for resource in 0..self.docs.len() {
                    // An entry that names this call was granted (or resumed) after it was
                    // sent: this is a late copy, and the entry stays. The others are let go
                    // of (their minimum hold kept); `nModified` counts those that changed.
                    let Some(e) = self.docs[resource].entry.clone() else {
                        continue;
                    };
                    if e.lock_id == lock_id
                        && (bugs.unlock_spares_nothing || !e.after_unlocks.contains(op))
                    {
                        match e.let_go(now) {
                            Some(kept) => {
                                count += u8::from(kept != e);
                                self.docs[resource].entry = Some(kept);
                            }
                            None => {
                                self.remove(resource as Res, bugs);
                                count += 1;
                            }
                        }
                    }
                }
                Reply::Count(count)
            }
            Request::ForceRelease { resource } => {
                // Counts the leases it ended. An entry with a lock-delay, in force, stays in
                // force for its delay from now (never longer than it was): its lease ends.
                let Some(e) = self.docs[resource as usize].entry.clone() else {
                    return Reply::Count(0);
                };
                if e.delay > 0 && e.is_live(now) {
                    let end = now + e.delay;
                    let entry = self.docs[resource as usize].entry.as_mut().expect("there");
                    entry.expires_at = Some(e.expires_at.map_or(end, |at| at.min(end)));
                } else {
                    self.remove(resource, bugs);
                }
                Reply::Count(u8::from(e.holds(now)))
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
        for e in self.docs.iter().filter_map(|d| d.entry.as_ref()) {
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
                if let Some(e) = &doc.entry
                    && e.lock_id == l
                    && (!e.is_live(now) || e.created_at < cut)
                {
                    removed.push((r as Res, e.token));
                    doc.entry = None;
                }
            }
        }
        // The expired entries elsewhere are of no group: dropped by the first statement that
        // meets them, or by the next acquire; they hold nothing either way.
        removed
    }

    /// Renews every live entry of `lock_id` by `ttl`; with `never_shorten`, an entry that
    /// names a keeper keeps a later expiry it has (as `renew(lock_id)` treats a kept lease).
    fn renew_lock_id(&mut self, lock_id: LockId, ttl: Time, now: Time, never_shorten: bool) -> u8 {
        let mut count = 0;
        for doc in &mut self.docs {
            if let Some(e) = &mut doc.entry
                && e.lock_id == lock_id
                && e.holds(now)
            {
                if let Some(end) = e.expires_at {
                    let renewed = now + ttl + e.delay;
                    e.expires_at = Some(if never_shorten && e.keeper.is_some() {
                        end.max(renewed)
                    } else {
                        renewed
                    });
                }
                count += 1;
            }
        }
        count
    }
}
