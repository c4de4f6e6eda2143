//! Acquire: one `findOneAndUpdate` that decides and grants atomically, by the server's clock.
//!
//! On the wire:
//!
//! ```text
//! findAndModify: <collection>
//!   query:  { _id: <resource> }            // only _id: $expr is refused in an upsert's filter
//!   update: [ { $replaceWith: ... } ]      // the pipeline below, one stage
//!   upsert: true, new: true                // returnDocument: After
//!   writeConcern: { w: "majority", j: true }
//! ```
//!
//! The stage, in words (each step is one `$let` level of [`pipeline`]):
//! 1. If the document is not a lock document, leave it as it is ([`replace_if_lock_document`]).
//! 2. `x`, `s`: the live exclusive entry (or null) and the live shared entries. Expired entries
//!    are dropped here, so they never block anybody, whatever their kind.
//! 3. `held`: whether this lock id already holds the resource (exclusive or shared).
//! 4. `grant`: not `held`, no live exclusive, and for an exclusive lock no live shared entry, for
//!    a shared lock fewer than `max` live shared entries.
//! 5. `fence`: on a grant `max(fence + 1, toLong($$NOW) * 1000)`, else unchanged.
//! 6. The new entry, with the token `fence`, `expiresAt = $$NOW + ttl` (or null), added as the
//!    exclusive entry or to the shared ones when granted.
//!
//! The returned document is the server's view after the decision: the client finds its own
//! entry there (granted now if the entry carries this attempt's nonce, or earlier), or the
//! live holders and their `expiresAt`, which say when to try again.

use bson::{Bson, Document, bson, doc};
use mongodb::options::ReturnDocument;

use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::schema::{self, literal};
use crate::types::{Grant, Holder, LockDetails, LockKind, Nonce, check_id, ttl_millis};

/// One acquire attempt: what [`LockClient::acquire`] sends.
///
/// [`LockClient::xlock`] and [`LockClient::slock`] build one for you; build it yourself to
/// choose the nonce (to recognise a retried attempt) or to handle contention without an error.
///
/// ```
/// use mongolock::{AcquireRequest, LockDetails, LockKind};
///
/// let request = AcquireRequest::exclusive("ledger", "tx-7", LockDetails::default());
/// assert_eq!(request.kind(), LockKind::Exclusive);
/// let readers = AcquireRequest::shared("ledger", "report-1", LockDetails::default(), Some(4));
/// assert_eq!(readers.max_shared(), Some(4));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct AcquireRequest {
    pub(crate) resource: String,
    pub(crate) lock_id: String,
    pub(crate) kind: LockKind,
    pub(crate) details: LockDetails,
    pub(crate) max_shared: Option<u32>,
    pub(crate) nonce: Nonce,
}

impl AcquireRequest {
    /// A request for an exclusive lock, with a fresh nonce.
    ///
    /// ```
    /// let request = mongolock::AcquireRequest::exclusive("r", "id", Default::default());
    /// # let _ = request;
    /// ```
    pub fn exclusive(
        resource: impl Into<String>,
        lock_id: impl Into<String>,
        details: LockDetails,
    ) -> Self {
        AcquireRequest {
            resource: resource.into(),
            lock_id: lock_id.into(),
            kind: LockKind::Exclusive,
            details,
            max_shared: None,
            nonce: Nonce::new(),
        }
    }

    /// A request for a shared lock granted while fewer than `max` shared locks are live
    /// (`None`: no cap), with a fresh nonce. The cap is checked by this request only; callers
    /// sharing a resource must agree on it.
    ///
    /// ```
    /// let request = mongolock::AcquireRequest::shared("r", "id", Default::default(), None);
    /// # let _ = request;
    /// ```
    pub fn shared(
        resource: impl Into<String>,
        lock_id: impl Into<String>,
        details: LockDetails,
        max: Option<u32>,
    ) -> Self {
        AcquireRequest {
            kind: LockKind::Shared,
            max_shared: max,
            ..AcquireRequest::exclusive(resource, lock_id, details)
        }
    }

    /// Uses `nonce` instead of a fresh one, for instance to repeat an attempt whose outcome is
    /// unknown and learn from [`Grant::is_new`] whether the first one got through.
    ///
    /// ```
    /// let nonce = mongolock::Nonce::new();
    /// let request = mongolock::AcquireRequest::exclusive("r", "id", Default::default()).nonce(nonce);
    /// assert_eq!(request.nonce_value(), nonce);
    /// ```
    pub fn nonce(mut self, nonce: Nonce) -> Self {
        self.nonce = nonce;
        self
    }

    /// The resource.
    ///
    /// ```
    /// let request = mongolock::AcquireRequest::shared("report", "job-1", Default::default(), Some(3));
    /// assert_eq!(request.resource(), "report");
    /// ```
    pub fn resource(&self) -> &str {
        &self.resource
    }
    /// The lock id.
    ///
    /// ```
    /// let request = mongolock::AcquireRequest::shared("report", "job-1", Default::default(), Some(3));
    /// assert_eq!(request.lock_id(), "job-1");
    /// ```
    pub fn lock_id(&self) -> &str {
        &self.lock_id
    }
    /// The kind of lock asked for.
    ///
    /// ```
    /// let request = mongolock::AcquireRequest::shared("report", "job-1", Default::default(), Some(3));
    /// assert_eq!(request.kind(), mongolock::LockKind::Shared);
    /// ```
    pub fn kind(&self) -> LockKind {
        self.kind
    }
    /// The cap on live shared locks, for a shared request.
    ///
    /// ```
    /// let request = mongolock::AcquireRequest::shared("report", "job-1", Default::default(), Some(3));
    /// assert_eq!(request.max_shared(), Some(3));
    /// ```
    pub fn max_shared(&self) -> Option<u32> {
        self.max_shared
    }
    /// This attempt's nonce.
    ///
    /// ```
    /// let request = mongolock::AcquireRequest::shared("report", "job-1", Default::default(), Some(3));
    /// let resent = request.clone();
    /// assert_eq!(resent.nonce_value(), request.nonce_value());
    /// ```
    pub fn nonce_value(&self) -> Nonce {
        self.nonce
    }

    /// Checks every argument; nothing is sent when this fails.
    pub(crate) fn validate(&self) -> Result<Option<i64>> {
        check_id("resource", &self.resource)?;
        check_id("lock_id", &self.lock_id)?;
        self.details.validate()?;
        if self.max_shared == Some(0) {
            return Err(Error::invalid(
                "max",
                "a cap of zero would never grant; use None for no cap",
            ));
        }
        self.details.ttl_value().map(ttl_millis).transpose()
    }
}

/// The outcome of one acquire attempt that reached the server.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
/// use mongolock::{AcquireRequest, Attempt, LockDetails};
///
/// let first = locks.acquire(&AcquireRequest::exclusive("r", "a", LockDetails::default())).await?;
/// assert!(matches!(first, Attempt::Granted(_)));
/// match locks.acquire(&AcquireRequest::exclusive("r", "b", LockDetails::default())).await? {
///     Attempt::Contended(c) => assert_eq!(c.holders()[0].lock_id(), "a"),
///     Attempt::Granted(_) => unreachable!("a holds it"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Attempt {
    /// The lock id holds the lock (granted now, or earlier: see [`Grant::is_new`]).
    Granted(Grant),
    /// Others hold the resource.
    Contended(Contention),
}

/// Who stood in the way of an acquire attempt, as the server saw them.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
/// use std::time::Duration;
/// use mongolock::{AcquireRequest, Attempt, LockDetails};
///
/// locks.xlock("report", "job-1", LockDetails::default().ttl(Duration::from_secs(30))).await?;
/// let request = AcquireRequest::exclusive("report", "job-2", LockDetails::default());
/// if let Attempt::Contended(contention) = locks.acquire(&request).await? {
///     // A waiter sleeps until about then (server time), instead of guessing.
///     assert!(contention.free_at().is_some());
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Contention {
    resource: String,
    holders: Vec<Holder>,
    free_at: Option<bson::DateTime>,
}

impl Contention {
    /// The contended resource.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use mongolock::{AcquireRequest, Attempt, LockDetails};
    /// # locks.xlock("report", "job-1", LockDetails::default()).await?;
    /// # let request = AcquireRequest::exclusive("report", "job-2", LockDetails::default());
    /// # let Attempt::Contended(contention) = locks.acquire(&request).await? else { unreachable!() };
    /// assert_eq!(contention.resource(), "report");
    /// # Ok(()) }
    /// ```
    pub fn resource(&self) -> &str {
        &self.resource
    }
    /// The live holders that stand in the way.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use mongolock::{AcquireRequest, Attempt, LockDetails};
    /// # locks.xlock("report", "job-1", LockDetails::default()).await?;
    /// # let request = AcquireRequest::exclusive("report", "job-2", LockDetails::default());
    /// # let Attempt::Contended(contention) = locks.acquire(&request).await? else { unreachable!() };
    /// assert_eq!(contention.holders()[0].lock_id(), "job-1");
    /// # Ok(()) }
    /// ```
    pub fn holders(&self) -> &[Holder] {
        &self.holders
    }
    /// When, in server time, the holders' leases end unless renewed: the earliest moment a
    /// new attempt could succeed. `None` when a blocking holder has no TTL.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use mongolock::{AcquireRequest, Attempt, LockDetails};
    /// # locks.xlock("report", "job-1", LockDetails::default()).await?;
    /// # let request = AcquireRequest::exclusive("report", "job-2", LockDetails::default());
    /// # let Attempt::Contended(contention) = locks.acquire(&request).await? else { unreachable!() };
    /// assert_eq!(contention.free_at(), None); // job-1 has no TTL
    /// # Ok(()) }
    /// ```
    pub fn free_at(&self) -> Option<bson::DateTime> {
        self.free_at
    }

    pub(crate) fn into_error(self) -> Error {
        Error::new(crate::ErrorKind::AlreadyLocked {
            resource: self.resource,
            holders: self.holders,
            free_at: self.free_at,
        })
    }
}

/// The query: the resource's `_id` and nothing else, so the upsert's insert seeds only `_id`
/// and the server itself retries an upsert that lost a race on creating the document.
pub(crate) fn filter(request: &AcquireRequest) -> Document {
    doc! { "_id": &request.resource }
}

/// The update pipeline; see the module docs for the steps.
pub(crate) fn pipeline(request: &AcquireRequest, ttl_ms: Option<i64>) -> Vec<Document> {
    let lock_id = literal(request.lock_id.as_str());

    // 2. Live entries only.
    let live = bson!({
        "x": { "$cond": [
            { "$and": [{ "$eq": [{ "$type": "$exclusive" }, "object"] }, schema::is_live("$exclusive")] },
            "$exclusive",
            null,
        ]},
        "s": { "$filter": { "input": schema::shared_or_empty(), "as": "e", "cond": schema::is_live("$$e") } },
    });
    // 3. Does this lock id hold it already?
    let held = bson!({
        "held": { "$in": [lock_id.clone(), { "$concatArrays": [
            { "$cond": [{ "$eq": ["$$x", null] }, [], ["$$x.lockId"]] },
            { "$map": { "input": "$$s", "as": "e", "in": "$$e.lockId" } },
        ]}]},
    });
    // 4. Is it free for this kind?
    let free = match (request.kind, request.max_shared) {
        (LockKind::Exclusive, _) => bson!({ "$eq": [{ "$size": "$$s" }, 0] }),
        (LockKind::Shared, None) => bson!(true),
        (LockKind::Shared, Some(max)) => bson!({ "$lt": [{ "$size": "$$s" }, i64::from(max)] }),
    };
    let grant = bson!({
        "grant": { "$and": [{ "$not": ["$$held"] }, { "$eq": ["$$x", null] }, free] },
    });
    // 5. The fencing token: above every earlier one, even if the document was deleted.
    let fence = bson!({
        "fence": { "$cond": [
            "$$grant",
            { "$max": [
                { "$add": [{ "$ifNull": ["$fence", 0_i64] }, 1_i64] },
                { "$multiply": [{ "$toLong": "$$NOW" }, 1000_i64] },
            ]},
            { "$ifNull": ["$fence", 0_i64] },
        ]},
    });
    // 6. The entry, and where it goes.
    let (expires_at, ttl) = match ttl_ms {
        Some(ms) => (bson!({ "$add": ["$$NOW", ms] }), Bson::Int64(ms)),
        None => (Bson::Null, Bson::Null),
    };
    let details = &request.details;
    let entry = bson!({
        "entry": {
            "lockId": lock_id,
            "nonce": literal(request.nonce.0),
            "owner": details.owner_value().map_or(Bson::Null, literal),
            "host": literal(details.host_value()),
            "token": "$$fence",
            "createdAt": "$$NOW",
            "renewedAt": "$$NOW",
            "expiresAt": expires_at,
            "ttlMs": ttl,
        },
    });
    let (exclusive, shared) = match request.kind {
        LockKind::Exclusive => (
            bson!({ "$cond": ["$$grant", "$$entry", "$$x"] }),
            bson!("$$s"),
        ),
        LockKind::Shared => (
            bson!("$$x"),
            bson!({ "$cond": ["$$grant", { "$concatArrays": ["$$s", ["$$entry"]] }, "$$s"] }),
        ),
    };
    let result = schema::lock_document(bson!("$$fence"), exclusive, shared);

    let nested = [live, held, grant, fence, entry].into_iter().rev().fold(
        result,
        |inner, vars| bson!({ "$let": { "vars": vars, "in": inner } }),
    );
    vec![schema::replace_if_lock_document(nested)]
}

/// Sends one attempt.
pub(crate) async fn run(client: &LockClient, request: &AcquireRequest) -> Result<Attempt> {
    let ttl_ms = request.validate()?;
    let after = client
        .collection
        .find_one_and_update(filter(request), pipeline(request, ttl_ms))
        .upsert(true)
        .return_document(ReturnDocument::After)
        .write_concern(client.write_concern.clone())
        .await
        .map_err(Error::database)?;
    let Some(after) = after else {
        // An upsert with returnDocument After always returns a document.
        return Err(Error::unexpected(
            &Bson::String(request.resource.clone()),
            "the server returned no document for an upsert",
        ));
    };
    let attempt = interpret(request, &after)?;
    match &attempt {
        Attempt::Granted(grant) => tracing::debug!(
            resource = %request.resource, lock_id = %request.lock_id, kind = %request.kind,
            token = grant.fencing_token(), new = grant.is_new(), "lock granted"
        ),
        Attempt::Contended(c) => tracing::debug!(
            resource = %request.resource, lock_id = %request.lock_id, kind = %request.kind,
            holders = c.holders.len(), "lock contended"
        ),
    }
    Ok(attempt)
}

/// Reads the document returned after the attempt. Its entries are all live: the pipeline
/// dropped the expired ones.
pub(crate) fn interpret(request: &AcquireRequest, after: &Document) -> Result<Attempt> {
    let document = schema::decode_document(after)?;
    if let Some(mine) = document.entries().find(|h| h.lock_id == request.lock_id)
        && mine.kind == request.kind
    {
        return Ok(Attempt::Granted(Grant {
            new: mine.nonce == Some(request.nonce.0),
            holder: mine.clone(),
        }));
    }
    // Refused. For a shared request blocked only by the cap, one expiry frees a slot;
    // otherwise every blocker must go.
    let holders: Vec<Holder> = document.entries().cloned().collect();
    let by_cap = request.kind == LockKind::Shared
        && document.exclusive.is_none()
        && !holders.iter().any(|h| h.lock_id == request.lock_id);
    let expiries = holders.iter().map(|h| h.expires_at);
    let free_at = if by_cap {
        expiries.flatten().min()
    } else {
        expiries
            .collect::<Option<Vec<_>>>()
            .and_then(|all| all.into_iter().max())
    };
    Ok(Attempt::Contended(Contention {
        resource: document.resource,
        holders,
        free_at,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use bson::DateTime;
    use std::time::Duration;

    fn stage(request: &AcquireRequest) -> Document {
        let ttl = request.validate().unwrap();
        let mut pipeline = pipeline(request, ttl);
        assert_eq!(pipeline.len(), 1, "one stage");
        pipeline.remove(0)
    }

    fn text(doc: &Document) -> String {
        Bson::Document(doc.clone())
            .into_relaxed_extjson()
            .to_string()
    }

    #[test]
    fn filter_is_the_id_only() {
        let request = AcquireRequest::exclusive("r1", "id", LockDetails::default());
        assert_eq!(filter(&request), doc! { "_id": "r1" });
    }

    #[test]
    fn user_values_go_in_as_literals() {
        let details = LockDetails::default().owner("$owner").host("$$host");
        let request = AcquireRequest::exclusive("$r", "$$NOW", details);
        let text = text(&stage(&request));
        assert!(text.contains(r#"{"$literal":"$$NOW"}"#), "{text}");
        assert!(text.contains(r#"{"$literal":"$owner"}"#), "{text}");
        assert!(text.contains(r#"{"$literal":"$$host"}"#), "{text}");
    }

    #[test]
    fn ttl_becomes_now_plus_millis_and_no_ttl_stays_null() {
        let with = AcquireRequest::exclusive(
            "r",
            "id",
            LockDetails::default().ttl(Duration::from_millis(1500)),
        );
        let text_with = text(&stage(&with));
        assert!(
            text_with.contains(r#""expiresAt":{"$add":["$$NOW",1500]}"#),
            "{text_with}"
        );
        assert!(text_with.contains(r#""ttlMs":1500"#), "{text_with}");
        let without = AcquireRequest::exclusive("r", "id", LockDetails::default());
        let text_without = text(&stage(&without));
        assert!(
            text_without.contains(r#""expiresAt":null"#),
            "{text_without}"
        );
    }

    #[test]
    fn fence_floor_is_server_time_in_microseconds() {
        let request = AcquireRequest::shared("r", "id", LockDetails::default(), Some(3));
        let text = text(&stage(&request));
        assert!(
            text.contains(r#"{"$multiply":[{"$toLong":"$$NOW"},1000]}"#),
            "{text}"
        );
        assert!(text.contains(r#"{"$lt":[{"$size":"$$s"},3]}"#), "{text}");
    }

    #[test]
    fn bad_arguments_are_refused_before_sending() {
        let cases = [
            (
                AcquireRequest::exclusive("", "id", LockDetails::default()),
                "resource",
            ),
            (
                AcquireRequest::exclusive("r", "", LockDetails::default()),
                "lock_id",
            ),
            (
                AcquireRequest::exclusive("r", "x".repeat(513), LockDetails::default()),
                "lock_id",
            ),
            (
                AcquireRequest::exclusive("r", "id", LockDetails::default().ttl(Duration::ZERO)),
                "ttl",
            ),
            (
                AcquireRequest::shared("r", "id", LockDetails::default(), Some(0)),
                "max",
            ),
        ];
        for (request, expected) in cases {
            match request.validate().unwrap_err().kind() {
                ErrorKind::InvalidArgument { argument, .. } => assert_eq!(*argument, expected),
                other => panic!("{other:?}"),
            }
        }
    }

    fn entry(lock_id: &str, token: i64, expires_ms: Option<i64>, nonce: Option<Nonce>) -> Document {
        doc! {
            "lockId": lock_id, "nonce": nonce.map_or(Bson::Null, |n| Bson::ObjectId(n.0)),
            "owner": Bson::Null, "host": "h", "token": token,
            "createdAt": DateTime::from_millis(1), "renewedAt": DateTime::from_millis(1),
            "expiresAt": expires_ms.map_or(Bson::Null, |ms| Bson::DateTime(DateTime::from_millis(ms))),
            "ttlMs": Bson::Null,
        }
    }

    #[test]
    fn interprets_a_grant_by_this_attempt_and_by_an_earlier_one() {
        let request = AcquireRequest::exclusive("r", "me", LockDetails::default());
        let now = doc! { "_id": "r", "fence": 9_i64, "exclusive": entry("me", 9, None, Some(request.nonce)), "shared": [] };
        let Attempt::Granted(grant) = interpret(&request, &now).unwrap() else {
            panic!()
        };
        assert!(grant.is_new());
        assert_eq!(grant.fencing_token(), 9);
        let earlier = doc! { "_id": "r", "fence": 9_i64, "exclusive": entry("me", 9, None, Some(Nonce::new())), "shared": [] };
        let Attempt::Granted(grant) = interpret(&request, &earlier).unwrap() else {
            panic!()
        };
        assert!(!grant.is_new());
    }

    #[test]
    fn interprets_contention_and_when_it_ends() {
        let x = AcquireRequest::exclusive("r", "me", LockDetails::default());
        let readers = doc! { "_id": "r", "fence": 9_i64, "exclusive": Bson::Null,
        "shared": [entry("a", 8, Some(5_000), None), entry("b", 9, Some(7_000), None)] };
        let Attempt::Contended(c) = interpret(&x, &readers).unwrap() else {
            panic!()
        };
        assert_eq!(c.holders().len(), 2);
        assert_eq!(
            c.free_at(),
            Some(DateTime::from_millis(7_000)),
            "all readers must go"
        );

        let s = AcquireRequest::shared("r", "me", LockDetails::default(), Some(2));
        let Attempt::Contended(c) = interpret(&s, &readers).unwrap() else {
            panic!()
        };
        assert_eq!(
            c.free_at(),
            Some(DateTime::from_millis(5_000)),
            "one slot suffices"
        );

        let forever = doc! { "_id": "r", "fence": 9_i64, "exclusive": entry("a", 9, None, None), "shared": [] };
        let Attempt::Contended(c) = interpret(&s, &forever).unwrap() else {
            panic!()
        };
        assert_eq!(c.free_at(), None);
        let error = c.into_error();
        assert!(error.is_already_locked());
        assert!(error.to_string().contains("\"a\" (exclusive)"), "{error}");
    }

    #[test]
    fn holding_the_other_kind_is_contention() {
        let s = AcquireRequest::shared("r", "me", LockDetails::default(), None);
        let mine = doc! { "_id": "r", "fence": 9_i64, "exclusive": entry("me", 9, Some(3_000), None), "shared": [] };
        let Attempt::Contended(c) = interpret(&s, &mine).unwrap() else {
            panic!()
        };
        assert_eq!(c.holders()[0].lock_id(), "me");
        assert_eq!(c.free_at(), Some(DateTime::from_millis(3_000)));
    }

    #[test]
    fn a_foreign_document_is_an_error() {
        let request = AcquireRequest::exclusive("r", "me", LockDetails::default());
        let foreign =
            doc! { "_id": "r", "exclusive": { "acquired": false }, "shared": { "count": 0 } };
        assert!(matches!(
            interpret(&request, &foreign).unwrap_err().kind(),
            ErrorKind::UnexpectedDocument { .. }
        ));
    }
}
