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
//!   [`UNSUPPORTED_CODES`](crate::error::UNSUPPORTED_CODES), the codes mongod's own parser gives an unknown stage, operator or
//!   variable, or a feature it does not implement. The library's commands never earn these
//!   from MongoDB 4.4 or later, so such a refusal means the server lacks what they use.
//!
//! No operation sends a probe, which would be one more command per client, in every count;
//! only `create_indexes`, the collection's setup, does ([`check_command`]): a pipeline update
//! with `$$NOW` that matches no document, so that setting up on such a server fails too.

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
