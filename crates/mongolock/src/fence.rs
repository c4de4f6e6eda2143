//! [`Fence`]: writes to a MongoDB collection that a holder with an older fencing token can no
//! longer make.
//!
//! See [`Fence`] for how, and what it does not cover.

use std::future::IntoFuture;

use bson::{Bson, Document, doc};
use futures_util::future::BoxFuture;
use mongodb::Collection;
use mongodb::options::{ReadPreference, SelectionCriteria, UpdateModifications};
use mongodb::results::UpdateResult;

use crate::error::{Effect, Error, ErrorKind, Result};

/// The field a [`Fence`] stores its token in unless [`Fence::field`] names another.
pub const DEFAULT_FENCE_FIELD: &str = "_fence";

/// The server's code for a duplicate key.
const DUPLICATE_KEY: i32 = 11000;

/// A fencing token, and the field of a protected document that stores it: builds writes that
/// the server applies only if the document holds no newer token than this one.
///
/// Make one from a lock: [`LockGuard::fence`](crate::LockGuard::fence),
/// [`Leadership::fence`](crate::Leadership::fence) (the term),
/// [`MultiGuard::fence`](crate::MultiGuard::fence), or [`Fence::new`] with any
/// [`fencing_token`](crate::Grant::fencing_token). Then either let it run one write
/// ([`update_one`](Fence::update_one), [`replace_one`](Fence::replace_one)), which turns a
/// refusal into [`ErrorKind::StaleToken`], or build the filter and update yourself
/// ([`filter`](Fence::filter), [`update`](Fence::update),
/// [`replacement`](Fence::replacement)) for any other write (a `findOneAndUpdate`, a bulk
/// write, a write in a transaction) and read its result yourself.
///
/// # Why, and how
///
/// A lease can end while its holder works (a pause longer than the TTL, a lost connection,
/// an operator's force release), and the holder may not know before its next write. The lock
/// cannot stop that write: only the store it goes to can, by refusing tokens older than the
/// newest it has seen (Kleppmann, "How to do distributed locking"). When that store is a
/// MongoDB collection, a fence does it inside the write itself, with no extra round trip:
///
/// - every fenced write stores the holder's token in a field of the document (`_fence`
///   unless [`field`](Fence::field) names another);
/// - its filter also requires the stored token to be absent (a document never fenced
///   accepts the first fenced write) or a number not newer than the holder's (not an array:
///   a query compares an array element by element, so `[1, 1000]` would pass for `1`);
/// - so a write with an older token matches nothing, and the wrappers report it as
///   [`ErrorKind::StaleToken`], after one read that only happens on refusal (to tell a stale
///   token from a document that is not there).
///
/// An equal token is admitted: the same holder may repeat its write (after a timeout, say).
///
/// # What it does not cover
///
/// - **Tokens of one lock per document.** Tokens of different resources are not ordered
///   with each other: fence a document with the tokens of the lock that protects it.
/// - **Deletes.** A deleted document loses its token, so a stale holder's late upsert could
///   create it again. To delete under a fence, prefer a fenced update that marks the
///   document deleted; a `delete_one` with [`filter`](Fence::filter) is fenced itself but
///   leaves no token behind.
/// - **Many documents in one write.** There is no `update_many` wrapper, on purpose: one
///   filter over documents with different stored tokens updates those not newer than the
///   holder's and skips the others, so a refusal would come after a partial write, which no
///   error can undo. Fence one document that stands for the set (and write the set in the
///   same transaction), or each document with a write of its own. [`filter`](Fence::filter)
///   and [`update`](Fence::update) still build an `update_many` if that partial write is
///   what you want; the reply's `matched_count` then counts the documents not refused.
/// - **Upserts by a non-unique filter.** An upsert is fenced only if its filter names one
///   document by a unique key (`_id`, or the fields of a unique index): otherwise a document
///   refused by the fence is just not matched, and the upsert inserts another beside it.
/// - **Other writers.** Writes that do not go through a fence neither check nor move the
///   stored token; a token field holding anything but a number (`null` and arrays
///   included) refuses fenced writes as [`ErrorKind::UnexpectedDocument`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// # let db = server.client().database("doc");
/// use bson::{Document, doc};
/// use mongolock::LockClient;
///
/// let locks = LockClient::new(db.collection("locks"));
/// let accounts = db.collection::<Document>("accounts");
///
/// let guard = locks.mutex("account-1").acquire().await?;
/// guard
///     .fence()
///     .update_one(&accounts, doc! {"_id": "account-1"}, doc! {"$inc": {"balance": 10}})
///     .upsert(true)
///     .await?;
/// guard.release().await?;
///
/// // The next holder writes with a newer token ...
/// let next = locks.mutex("account-1").acquire().await?;
/// next.fence()
///     .update_one(&accounts, doc! {"_id": "account-1"}, doc! {"$inc": {"balance": 5}})
///     .await?;
///
/// // ... so a late write with the first token is refused, and nothing changes.
/// let late = mongolock::Fence::new(next.fencing_token() - 1)
///     .update_one(&accounts, doc! {"_id": "account-1"}, doc! {"$set": {"balance": 0}})
///     .await
///     .unwrap_err();
/// assert!(late.is_stale_token());
/// let account = accounts.find_one(doc! {"_id": "account-1"}).await.unwrap().unwrap();
/// assert_eq!(account.get_i32("balance").unwrap(), 15);
/// assert_eq!(account.get_i64("_fence").unwrap(), next.fencing_token());
/// # next.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "a fence does nothing by itself: build a write with it"]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fence {
    token: i64,
    field: String,
}

impl Fence {
    /// A fence for `token`, stored in the field [`DEFAULT_FENCE_FIELD`] (`_fence`).
    ///
    /// ```
    /// let fence = mongolock::Fence::new(42);
    /// assert_eq!((fence.token(), fence.field_name()), (42, "_fence"));
    /// ```
    pub fn new(token: i64) -> Self {
        Fence {
            token,
            field: DEFAULT_FENCE_FIELD.to_owned(),
        }
    }

    /// Stores the token in the field `name` instead: a top-level field of the protected
    /// documents, which only fenced writes should change.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] (argument `field`) if `name` is empty, starts with `$`
    /// (an operator), contains `.` (a path: the token is a top-level field, so that a
    /// replacement can carry it and no update can set a part of it) or a NUL character, or
    /// is `_id` (which a write cannot change).
    ///
    /// ```
    /// let fence = mongolock::Fence::new(42).field("version")?;
    /// assert_eq!(fence.field_name(), "version");
    /// assert!(mongolock::Fence::new(42).field("meta.version").is_err());
    /// # Ok::<(), mongolock::Error>(())
    /// ```
    pub fn field(mut self, name: impl Into<String>) -> Result<Self> {
        let name = name.into();
        check_field(&name)?;
        self.field = name;
        Ok(self)
    }

    /// The token this fence writes and compares with.
    ///
    /// ```
    /// assert_eq!(mongolock::Fence::new(7).token(), 7);
    /// ```
    pub fn token(&self) -> i64 {
        self.token
    }

    /// The field that stores the token.
    ///
    /// ```
    /// assert_eq!(mongolock::Fence::new(7).field_name(), mongolock::DEFAULT_FENCE_FIELD);
    /// ```
    pub fn field_name(&self) -> &str {
        &self.field
    }

    /// `filter`, and also: the document's token field is absent (never fenced) or a number
    /// not newer than this fence's token. `$lte` alone matches only numbers (a query compares
    /// values of one type only), but an array when any of its elements does: the field must
    /// also not be an array. Anything else in the field (text, a document, `null`, an array)
    /// matches neither, so the write is refused. The condition is added as a top-level
    /// `$or`, or, when `filter` already has a top-level `$or` or a condition on the field,
    /// both are put in an `$and`. Equality conditions in `filter` still seed an upsert's new
    /// document (a query operator, not `$expr`, which mongod refuses in an upsert's query).
    ///
    /// ```
    /// use bson::doc;
    ///
    /// let fence = mongolock::Fence::new(42);
    /// assert_eq!(
    ///     fence.filter(doc! {"_id": "account-1"}),
    ///     doc! {
    ///         "_id": "account-1",
    ///         "$or": [
    ///             {"_fence": {"$exists": false}},
    ///             {"_fence": {"$lte": 42_i64, "$not": {"$type": "array"}}},
    ///         ],
    ///     },
    /// );
    /// ```
    pub fn filter(&self, filter: Document) -> Document {
        let field = self.field.as_str();
        let admits = vec![
            Bson::Document(doc! { field: {"$exists": false} }),
            Bson::Document(doc! { field: {"$lte": self.token, "$not": {"$type": "array"}} }),
        ];
        if filter.contains_key("$or") || filter.contains_key(field) {
            doc! {"$and": [filter, {"$or": admits}]}
        } else {
            let mut filter = filter;
            filter.insert("$or", admits);
            filter
        }
    }

    /// `update`, which also sets the token field to this fence's token:
    ///
    /// - an update document (operators only, such as `$set`, `$inc`) gets the field in its
    ///   `$set` (added if missing); an empty document becomes an update that only sets the
    ///   token;
    /// - an aggregation pipeline gets one more stage, `{"$set": {field: token}}`, last, so
    ///   the token wins over whatever the stages before it did with the field.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] (argument `update`) if the update document changes the
    /// token field itself (any operator naming it or a path under it, or a `$rename` to it),
    /// has a key that is not an operator (that is a replacement: see
    /// [`replacement`](Fence::replacement)), or has a `$set` that is not a document.
    ///
    /// ```
    /// use bson::doc;
    /// use mongodb::options::UpdateModifications;
    ///
    /// let fence = mongolock::Fence::new(42);
    /// let UpdateModifications::Document(update) = fence.update(doc! {"$inc": {"balance": 10}})?
    /// else { unreachable!() };
    /// assert_eq!(update, doc! {"$inc": {"balance": 10}, "$set": {"_fence": 42_i64}});
    ///
    /// let UpdateModifications::Pipeline(stages) =
    ///     fence.update(vec![doc! {"$set": {"seen": "$$NOW"}}])?
    /// else { unreachable!() };
    /// assert_eq!(stages, vec![doc! {"$set": {"seen": "$$NOW"}}, doc! {"$set": {"_fence": 42_i64}}]);
    ///
    /// let refused = fence.update(doc! {"$set": {"_fence": 43}}).unwrap_err();
    /// assert!(matches!(
    ///     refused.kind(),
    ///     mongolock::ErrorKind::InvalidArgument { argument: "update", .. },
    /// ));
    /// # Ok::<(), mongolock::Error>(())
    /// ```
    pub fn update(&self, update: impl Into<UpdateModifications>) -> Result<UpdateModifications> {
        match update.into() {
            UpdateModifications::Document(update) => self
                .update_document(update)
                .map(UpdateModifications::Document),
            UpdateModifications::Pipeline(mut stages) => {
                stages.push(doc! {"$set": { self.field.as_str(): self.token }});
                Ok(UpdateModifications::Pipeline(stages))
            }
            other => Err(Error::invalid(
                "update",
                format!("not an update document or a pipeline: {other:?}"),
            )),
        }
    }

    fn update_document(&self, mut update: Document) -> Result<Document> {
        for (operator, arguments) in &update {
            if !operator.starts_with('$') {
                return Err(Error::invalid(
                    "update",
                    format!(
                        "`{operator}` is not an update operator (a document without operators \
                         is a replacement: use Fence::replacement or Fence::replace_one)"
                    ),
                ));
            }
            // The server rejects an operator whose argument is not a document.
            let Bson::Document(arguments) = arguments else {
                continue;
            };
            for (path, argument) in arguments {
                let renamed_to = match (operator.as_str(), argument) {
                    ("$rename", Bson::String(to)) => Some(to.as_str()),
                    _ => None,
                };
                if self.covers(path) || renamed_to.is_some_and(|to| self.covers(to)) {
                    return Err(Error::invalid(
                        "update",
                        format!(
                            "`{operator}` changes `{}`, the fence's field: the fence sets it to \
                             the token",
                            self.field
                        ),
                    ));
                }
            }
        }
        match update.get_mut("$set") {
            Some(Bson::Document(set)) => {
                set.insert(self.field.clone(), self.token);
            }
            Some(_) => return Err(Error::invalid("update", "`$set` must be a document")),
            None => {
                update.insert("$set", doc! { self.field.as_str(): self.token });
            }
        }
        Ok(update)
    }

    /// Whether an update path is the token field or a part of it.
    fn covers(&self, path: &str) -> bool {
        path.strip_prefix(self.field.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    }

    /// `replacement`, with the token field set to this fence's token (in its place if the
    /// replacement has it, last otherwise). A replacement that carries the field (a document
    /// read, changed and written back) has it overwritten: the token it was read with says
    /// nothing about the writer.
    ///
    /// ```
    /// use bson::doc;
    ///
    /// let fence = mongolock::Fence::new(42);
    /// assert_eq!(
    ///     fence.replacement(doc! {"_id": "account-1", "_fence": 7_i64, "balance": 3}),
    ///     doc! {"_id": "account-1", "_fence": 42_i64, "balance": 3},
    /// );
    /// ```
    pub fn replacement(&self, mut replacement: Document) -> Document {
        replacement.insert(self.field.clone(), self.token);
        replacement
    }

    /// One `update_one` on `collection`, fenced: [`filter`](Fence::filter) and
    /// [`update`](Fence::update), applied by the server only if the document holds no newer
    /// token. Await it for the driver's [`UpdateResult`]; call
    /// [`upsert`](FencedWrite::upsert) first to insert a document that is not there.
    ///
    /// The write is sent with the collection's settings (write concern, timeouts). If it
    /// matches nothing, one more read (on the primary) tells why: a document that matches
    /// `filter` and holds a newer token makes the write stale; no such document is the
    /// driver's `Ok` with `matched_count == 0`, as without a fence. Writes that are not
    /// refused cost no extra round trip.
    ///
    /// # Errors
    ///
    /// - [`ErrorKind::StaleToken`] if a document matching `filter` holds a newer token, also
    ///   for an upsert, which then meets a duplicate key on `_id` (its filter refused the
    ///   document, so it tried to insert another). Nothing was written.
    /// - [`ErrorKind::InvalidArgument`] for an update that [`update`](Fence::update)
    ///   refuses; nothing is sent.
    /// - [`ErrorKind::UnexpectedDocument`] if the refused document's token field holds
    ///   something other than a whole number (another writer uses the field).
    /// - [`ErrorKind::Database`] if the write or the read fails;
    ///   [`Error::is_outcome_unknown`] tells whether the write may have been applied.
    ///
    /// An upsert is fenced only if `filter` names one document by a unique key (`_id`, or the
    /// fields of a unique index): with any other filter, a document refused by the fence is
    /// just not matched, and the upsert inserts another one beside it.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes may or may not leave the write applied. The
    /// fence admits its own token again, so repeating the write is safe as far as the fence
    /// goes; whether applying the update twice is harmless is the update's business (a `$set`
    /// is, an `$inc` is not).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let accounts = server.client().database("doc").collection::<bson::Document>("accounts");
    /// use bson::doc;
    /// use mongolock::{ErrorKind, Fence};
    ///
    /// let filter = doc! {"_id": "account-1"};
    /// let set = |balance: i32| doc! {"$set": {"balance": balance}};
    /// Fence::new(20).update_one(&accounts, filter.clone(), set(5)).upsert(true).await?;
    /// Fence::new(20).update_one(&accounts, filter.clone(), set(5)).await?; // a retry
    ///
    /// let stale = Fence::new(10).update_one(&accounts, filter.clone(), set(0)).await;
    /// match stale.unwrap_err().kind() {
    ///     ErrorKind::StaleToken { stored, presented, .. } => assert_eq!((*stored, *presented), (20, 10)),
    ///     other => panic!("{other:?}"),
    /// }
    ///
    /// // No such document: not stale, just nothing matched.
    /// let missing = Fence::new(10).update_one(&accounts, doc! {"_id": "none"}, set(0)).await?;
    /// assert_eq!(missing.matched_count, 0);
    /// # Ok(()) }
    /// ```
    pub fn update_one<T: Send + Sync>(
        &self,
        collection: &Collection<T>,
        filter: Document,
        update: impl Into<UpdateModifications>,
    ) -> FencedWrite {
        FencedWrite {
            write: self.update(update).map(Write::Update),
            fence: self.clone(),
            collection: collection.clone_with_type(),
            filter,
            upsert: false,
        }
    }

    /// One `replace_one` on `collection`, fenced: [`filter`](Fence::filter) and
    /// [`replacement`](Fence::replacement) (which carries the token), applied by the server
    /// only if the document holds no newer token. With [`upsert`](FencedWrite::upsert), it
    /// inserts the document unless a newer holder wrote it. The replacement is a
    /// [`Document`] whatever the collection's type (serialize yours with
    /// [`bson::to_document`]), since the fence adds a field to it.
    ///
    /// Refusals are told apart as for [`update_one`](Fence::update_one), with one read that
    /// only happens when the write matched nothing.
    ///
    /// # Errors
    ///
    /// As for [`update_one`](Fence::update_one): [`ErrorKind::StaleToken`] if a document
    /// matching `filter` holds a newer token (also for an upsert that meets a duplicate
    /// key); [`ErrorKind::InvalidArgument`] (argument `replacement`) if the replacement has
    /// a key starting with `$` (an operator), and nothing is sent;
    /// [`ErrorKind::UnexpectedDocument`] if the refused document's token field is not an
    /// integer; [`ErrorKind::Database`] if the write or the read fails. An upsert is fenced
    /// only if `filter` names one document by a unique key.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes may or may not leave the replacement written.
    /// Repeating it with the same fence is safe: the fence admits its own token again, and a
    /// replacement written twice is the same document.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let accounts = server.client().database("doc").collection::<bson::Document>("accounts");
    /// use bson::doc;
    /// use mongolock::Fence;
    ///
    /// let filter = doc! {"_id": "account-1"};
    /// let written = Fence::new(20)
    ///     .replace_one(&accounts, filter.clone(), doc! {"_id": "account-1", "balance": 5})
    ///     .upsert(true)
    ///     .await?;
    /// assert!(written.upserted_id.is_some());
    ///
    /// // An older token meets the newer document: stale, not a duplicate key.
    /// let late = Fence::new(10)
    ///     .replace_one(&accounts, filter.clone(), doc! {"_id": "account-1", "balance": 0})
    ///     .upsert(true)
    ///     .await;
    /// assert!(late.unwrap_err().is_stale_token());
    /// # Ok(()) }
    /// ```
    pub fn replace_one<T: Send + Sync>(
        &self,
        collection: &Collection<T>,
        filter: Document,
        replacement: Document,
    ) -> FencedWrite {
        let replacement = match replacement.keys().find(|k| k.starts_with('$')) {
            Some(key) => Err(Error::invalid(
                "replacement",
                format!("`{key}` is an operator: a replacement holds fields only"),
            )),
            None => Ok(self.replacement(replacement)),
        };
        FencedWrite {
            write: replacement.map(Write::Replace),
            fence: self.clone(),
            collection: collection.clone_with_type(),
            filter,
            upsert: false,
        }
    }

    /// Why a write with `filter` matched nothing: a stale token (an error to return), or not
    /// because of the fence (`None`). One read, on the primary, of the matching document
    /// with the newest token.
    async fn refusal(
        &self,
        collection: &Collection<Document>,
        filter: &Document,
    ) -> Result<Option<Error>> {
        let field = self.field.as_str();
        let found = collection
            .find_one(filter.clone())
            .projection(doc! {"_id": 1, field: 1})
            .sort(doc! { field: -1 })
            .selection_criteria(SelectionCriteria::ReadPreference(ReadPreference::Primary))
            .await
            .map_err(|e| Error::database(e, Effect::Read))?;
        let Some(found) = found else {
            return Ok(None);
        };
        let id = found.get("_id").cloned().unwrap_or(Bson::Null);
        let Some(stored) = found.get(field) else {
            // Never fenced: the document matched `filter` only after the write.
            return Ok(None);
        };
        match token_of(stored) {
            Some(stored) if stored > self.token => Ok(Some(Error::new(ErrorKind::StaleToken {
                id: id.into_relaxed_extjson().to_string(),
                stored,
                presented: self.token,
            }))),
            Some(_) => Ok(None),
            None => Ok(Some(Error::unexpected(
                &id,
                format!("its field `{field}` holds {stored}, not a fencing token"),
            ))),
        }
    }
}

/// A stored token as an integer, whatever numeric type another driver stored it as.
fn token_of(stored: &Bson) -> Option<i64> {
    match stored {
        Bson::Int64(token) => Some(*token),
        Bson::Int32(token) => Some(i64::from(*token)),
        #[allow(clippy::cast_possible_truncation)]
        Bson::Double(token) if token.fract() == 0.0 && token.abs() < 9.0e18 => Some(*token as i64),
        _ => None,
    }
}

fn check_field(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "must not be empty"
    } else if name.starts_with('$') {
        "must not start with `$` (that is an operator)"
    } else if name.contains('.') {
        "must not contain `.`: the token is a top-level field of the document"
    } else if name.contains('\0') {
        "must not contain a NUL character"
    } else if name == "_id" {
        "must not be `_id`, which a write cannot change"
    } else {
        return Ok(());
    };
    Err(Error::invalid("field", format!("{name:?} {reason}")))
}

/// The write a [`FencedWrite`] sends.
#[derive(Debug)]
enum Write {
    Update(UpdateModifications),
    Replace(Document),
}

/// One fenced write, made by [`Fence::update_one`] or [`Fence::replace_one`]: await it (it
/// implements [`IntoFuture`]) for the driver's [`UpdateResult`], or
/// [`ErrorKind::StaleToken`] if a newer holder wrote the document.
///
/// The future owns what it needs (`Send`, `'static`): it can be spawned.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// # let accounts = server.client().database("doc").collection::<bson::Document>("accounts");
/// use bson::doc;
///
/// let write = mongolock::Fence::new(20)
///     .update_one(&accounts, doc! {"_id": "account-1"}, doc! {"$set": {"balance": 5}})
///     .upsert(true);
/// let result = tokio::spawn(write.into_future()).await.unwrap()?;
/// assert_eq!(result.upserted_id, Some(bson::Bson::from("account-1")));
/// # Ok(()) }
/// ```
#[must_use = "a fenced write is sent only when it is awaited"]
#[derive(Debug)]
pub struct FencedWrite {
    fence: Fence,
    collection: Collection<Document>,
    filter: Document,
    write: Result<Write>,
    upsert: bool,
}

impl FencedWrite {
    /// Whether to insert a document when none matches the filter (default `false`). An
    /// upsert refused because the document holds a newer token is
    /// [`ErrorKind::StaleToken`], not a duplicate key; it is fenced only if the filter names
    /// one document by a unique key (see [`Fence::update_one`]).
    pub fn upsert(mut self, upsert: bool) -> Self {
        self.upsert = upsert;
        self
    }

    async fn run(self) -> Result<UpdateResult> {
        let FencedWrite {
            fence,
            collection,
            filter,
            write,
            upsert,
        } = self;
        let fenced = fence.filter(filter.clone());
        let sent = match write? {
            Write::Update(update) => collection.update_one(fenced, update).upsert(upsert).await,
            Write::Replace(replacement) => {
                collection
                    .replace_one(fenced, replacement)
                    .upsert(upsert)
                    .await
            }
        };
        match sent {
            Ok(result) if result.matched_count > 0 || result.upserted_id.is_some() => Ok(result),
            Ok(result) => match fence.refusal(&collection, &filter).await? {
                Some(refused) => Err(refused),
                None => Ok(result),
            },
            Err(error) if upsert && is_duplicate_key(&error) => {
                match fence.refusal(&collection, &filter).await? {
                    Some(refused) => Err(refused),
                    None => Err(Error::database(error, Effect::Write)),
                }
            }
            Err(error) => Err(Error::database(error, Effect::Write)),
        }
    }
}

impl IntoFuture for FencedWrite {
    type Output = Result<UpdateResult>;
    type IntoFuture = BoxFuture<'static, Result<UpdateResult>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

fn is_duplicate_key(error: &mongodb::error::Error) -> bool {
    use mongodb::error::{ErrorKind as Driver, WriteFailure};
    matches!(
        error.kind.as_ref(),
        Driver::Write(WriteFailure::WriteError(e)) if e.code == DUPLICATE_KEY
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_with_its_own_or_or_field_is_wrapped_in_and() {
        let fence = Fence::new(5);
        let admits = doc! {"$or": [
            {"_fence": {"$exists": false}},
            {"_fence": {"$lte": 5_i64, "$not": {"$type": "array"}}},
        ]};
        let own = doc! {"$or": [{"a": 1}, {"b": 1}]};
        assert_eq!(
            fence.filter(own.clone()),
            doc! {"$and": [own, admits.clone()]}
        );
        let on_field = doc! {"_fence": {"$gte": 3}};
        assert_eq!(
            fence.filter(on_field.clone()),
            doc! {"$and": [on_field, admits.clone()]}
        );
        assert_eq!(fence.filter(doc! {}), admits);
    }

    #[test]
    fn updates_that_touch_the_field_are_refused() {
        let fence = Fence::new(5).field("v").unwrap();
        for update in [
            doc! {"$set": {"v": 1}},
            doc! {"$inc": {"v": 1}},
            doc! {"$unset": {"v": ""}},
            doc! {"$set": {"v.x": 1}},
            doc! {"$setOnInsert": {"v": 1}},
            doc! {"$rename": {"w": "v"}},
            doc! {"$rename": {"v": "w"}},
            doc! {"balance": 1},
            doc! {"$set": 1},
        ] {
            let error = fence.update(update.clone()).unwrap_err();
            assert!(
                matches!(
                    error.kind(),
                    ErrorKind::InvalidArgument {
                        argument: "update",
                        ..
                    }
                ),
                "{update}: {error:?}"
            );
        }
        // A field whose name starts with the fence's is another field.
        let UpdateModifications::Document(update) = fence.update(doc! {"$set": {"vx": 1}}).unwrap()
        else {
            panic!("a document")
        };
        assert_eq!(update, doc! {"$set": {"vx": 1, "v": 5_i64}});
        let UpdateModifications::Document(empty) = fence.update(doc! {}).unwrap() else {
            panic!("a document")
        };
        assert_eq!(empty, doc! {"$set": {"v": 5_i64}});
    }

    #[test]
    fn field_names_are_checked() {
        for bad in ["", "$v", "a.b", "_id", "a\0b"] {
            let error = Fence::new(1).field(bad).unwrap_err();
            assert!(
                matches!(
                    error.kind(),
                    ErrorKind::InvalidArgument {
                        argument: "field",
                        ..
                    }
                ),
                "{bad:?}"
            );
        }
        assert_eq!(Fence::new(1).field("_v").unwrap().field_name(), "_v");
    }

    #[test]
    fn stored_tokens_of_any_numeric_type_are_read() {
        assert_eq!(token_of(&Bson::Int32(3)), Some(3));
        assert_eq!(token_of(&Bson::Int64(3)), Some(3));
        assert_eq!(token_of(&Bson::Double(3.0)), Some(3));
        assert_eq!(token_of(&Bson::Double(3.5)), None);
        assert_eq!(token_of(&Bson::String("3".into())), None);
    }

    #[test]
    fn fences_and_fenced_writes_are_send_and_sync() {
        // The future is a `BoxFuture`: `Send + 'static` is checked where it is built.
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<Fence>();
        assert_send_sync::<FencedWrite>();
    }
}
