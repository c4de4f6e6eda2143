//! Which servers run this crate's commands, and how a server that cannot is told apart from
//! any other failure, so that it fails the client's first operation with one typed error
//! that says what is missing ([`ErrorKind::UnsupportedServer`](crate::ErrorKind::UnsupportedServer)),
//! never with a raw parse error in the middle of an acquire.
//!
//! Every decision is an aggregation-pipeline update evaluated with `$$NOW`, and the replies
//! are computed in `findAndModify`'s projection: MongoDB 4.4 or later. Two ways a server
//! falls short, both seen at the first command, before anything is written:
//!
//! - **Older than 4.4**: the driver (3.x) refuses it by its wire version before sending
//!   anything (`Error::database` maps that refusal).
//! - **No pipeline updates, or no `$$NOW`** (servers that speak MongoDB's protocol without
//!   them; Amazon DocumentDB is one): the server refuses the command with one of
//!   [`UNSUPPORTED_CODES`], the codes mongod's own parser gives an unknown stage, operator or
//!   variable, or a feature it does not implement. The library's commands never earn these
//!   from MongoDB 4.4 or later, so such a refusal means the server lacks what they use.
//!
//! No operation sends a probe, which would be one more command per client, in every count;
//! only `create_indexes`, the collection's setup, does ([`check_command`]): a pipeline update
//! with `$$NOW` that matches no document, so that setting up on such a server fails too.

/// The oldest MongoDB release the commands run on.
pub(crate) const MINIMUM_VERSION: &str = "4.4";

/// Refusals that mean the server lacks what the commands use: CommandNotSupported (115),
/// InvalidPipelineOperator (168: an unknown expression operator), NotImplemented (238), an
/// undefined variable such as `$$NOW` (17276), an unknown pipeline stage (40324).
pub(crate) const UNSUPPORTED_CODES: [i32; 5] = [115, 168, 238, 17276, 40324];

/// The error for a server that refused a command with `code`, if that code means it lacks
/// what the commands use.
pub(crate) fn refused(code: i32, message: &str) -> Option<crate::Error> {
    UNSUPPORTED_CODES.contains(&code).then(|| {
        unsupported(format!(
            "pipeline updates with $$NOW (the server refused one with code {code}: {message})"
        ))
    })
}

/// The error for a server that lacks `missing`, which MongoDB has from [`MINIMUM_VERSION`].
pub(crate) fn unsupported(missing: String) -> crate::Error {
    crate::Error::new(crate::ErrorKind::UnsupportedServer {
        missing,
        minimum: MINIMUM_VERSION,
    })
}

/// The `update` that `create_indexes` sends first: a pipeline update with `$$NOW` that
/// matches nothing (the mark is never -1), so it writes nothing on any server that runs it.
pub(crate) fn check_command(ctx: &super::Context) -> bson::Document {
    bson::doc! {
        "update": ctx.collection_name(),
        "updates": [{
            "q": { "_id": "mongolock compatibility check", crate::schema::MARK: -1 },
            "u": [{ "$set": { "checkedAt": "$$NOW" } }],
            "collation": super::Context::collation(),
        }],
    }
}

/// Sends [`check_command`].
pub(crate) async fn check(ctx: &super::Context) -> crate::Result<()> {
    ctx.write(check_command(ctx), super::Upsert::No)
        .await
        .map(drop)
}
