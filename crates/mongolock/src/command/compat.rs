//! Whether the server runs this crate's commands, checked once per client before its first
//! command, so that a server that cannot fails with one typed error that says what is
//! missing, never with a parse error in the middle of an acquire.
//!
//! Every decision is an aggregation-pipeline update evaluated with `$$NOW`, and the replies
//! are computed in `findAndModify`'s projection: MongoDB 4.4 or later. Servers that speak
//! MongoDB's protocol without these exist (Amazon DocumentDB refuses pipeline updates and
//! `$$NOW`; Azure Cosmos DB's API for MongoDB differs too). Two round trips:
//!
//! ```text
//! hello: 1                                        // maxWireVersion 9 or more: 4.4 or later
//! update: <collection>, updates: [{               // matches nothing: writes nothing
//!   q: { _id: "mongolock compatibility check", mongolock: -1 },
//!   u: [ { $set: { checkedAt: "$$NOW" } } ] }]    // a pipeline update with $$NOW, parsed
//! ```
//!
//! A server that refuses the second (any error but a transient one) lacks pipeline updates
//! or `$$NOW`. A transient failure is no verdict: the next call checks again.

use bson::{Bson, doc};
use mongodb::options::{ReadPreference, SelectionCriteria};

use crate::command::Context;
use crate::error::{Effect, Error, ErrorKind, Result};

/// The oldest MongoDB release the commands run on.
pub(crate) const MINIMUM_VERSION: &str = "4.4";

/// The wire version of MongoDB 4.4.
const MINIMUM_WIRE_VERSION: i64 = 9;

/// The check; see the module docs.
pub(crate) async fn check(ctx: &Context) -> Result<()> {
    let database = ctx.database();
    let primary = SelectionCriteria::ReadPreference(ReadPreference::Primary);
    let limit = ctx.timeout;
    let hello = tokio::time::timeout(
        limit,
        database
            .run_command(doc! { "hello": 1 })
            .selection_criteria(primary.clone()),
    )
    .await
    .map_err(|_| Error::timeout(limit, Effect::Read))?
    .map_err(|error| Error::database(error, Effect::Read))?;
    let wire = match hello.get("maxWireVersion") {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        _ => 0,
    };
    if wire < MINIMUM_WIRE_VERSION {
        return Err(unsupported(format!(
            "pipeline updates with $$NOW and computed fields in findAndModify's projection (the server reports wire version {wire})"
        )));
    }
    let probe = doc! {
        "update": ctx.collection_name(),
        "updates": [{
            "q": { "_id": "mongolock compatibility check", crate::schema::MARK: -1 },
            "u": [{ "$set": { "checkedAt": "$$NOW" } }],
        }],
    };
    let reply = tokio::time::timeout(
        limit,
        database.run_command(probe).selection_criteria(primary),
    )
    .await
    .map_err(|_| Error::timeout(limit, Effect::Read))?;
    match reply {
        Ok(reply) if reply.get_array("writeErrors").is_err() => Ok(()),
        Ok(reply) => Err(unsupported(format!(
            "pipeline updates with $$NOW (the server refused one: {})",
            first_error(&reply)
        ))),
        Err(error) => {
            // The server's own words, not the driver's dump of its reply.
            // Not a missing feature: the user may not write here (Unauthorized,
            // AuthenticationFailed), which every command would meet as it is.
            let refusal = match error.kind.as_ref() {
                mongodb::error::ErrorKind::Command(e) if ![13, 18].contains(&e.code) => {
                    Some(format!("code {} ({}): {}", e.code, e.code_name, e.message))
                }
                _ => None,
            };
            let error = Error::database(error, Effect::Read);
            match refusal {
                Some(refusal) if !error.is_retryable() => Err(unsupported(format!(
                    "pipeline updates with $$NOW (the server refused one: {refusal})"
                ))),
                _ => Err(error),
            }
        }
    }
}

/// The first write error of an `update` reply, as text.
fn first_error(reply: &bson::Document) -> String {
    match reply.get_array("writeErrors").ok().and_then(|e| e.first()) {
        Some(Bson::Document(error)) => error.get_str("errmsg").unwrap_or("no message").to_owned(),
        _ => "no message".to_owned(),
    }
}

/// The error for a server without `missing`.
fn unsupported(missing: String) -> Error {
    Error::new(ErrorKind::UnsupportedServer {
        missing,
        minimum: MINIMUM_VERSION,
    })
}
