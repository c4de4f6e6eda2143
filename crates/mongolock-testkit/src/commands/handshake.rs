//! `hello` / `isMaster`: what the drivers learn about the server.

use bson::{Document, oid::ObjectId};

use super::context::Ctx;
use super::identity::REPLICA_SET_NAME;
use crate::engine::error::Result;

/// `hello`, `isMaster` and `ismaster`.
pub fn hello(ctx: &Ctx<'_>, cmd: &Document, name: &str) -> Result<Document> {
    // Fields drivers send that mongod accepts and we have no use for.
    super::args::check_fields(
        cmd,
        name,
        &[
            "helloOk",
            "client",
            "compression",
            "loadBalanced",
            "saslSupportedMechs",
            "speculativeAuthenticate",
            "backpressure",
            "topologyVersion",
            "maxAwaitTimeMS",
            "hostInfo",
            "forShell",
        ],
    )?;
    if cmd.contains_key("topologyVersion") != cmd.contains_key("maxAwaitTimeMS") {
        return Err(crate::engine::CommandError::new(
            9,
            "topologyVersion must be provided if and only if maxAwaitTimeMS is provided",
        ));
    }
    let state = ctx.state;
    let mut reply = Document::new();
    if cmd.get_bool("helloOk").unwrap_or(false) {
        reply.insert("helloOk", true);
    }
    if name == "hello" {
        reply.insert("isWritablePrimary", true);
    } else {
        reply.insert("ismaster", true);
    }
    if !state.standalone && state.replica.is_none() {
        reply.insert("hosts", vec![state.address.clone()]);
        reply.insert("setName", REPLICA_SET_NAME);
        reply.insert("setVersion", 1);
        reply.insert("secondary", false);
        reply.insert("primary", state.address.clone());
        reply.insert("me", state.address.clone());
        reply.insert(
            "electionId",
            ObjectId::parse_str("7fffffff0000000000000001").expect("valid hex"),
        );
    }
    reply.insert("maxBsonObjectSize", 16_777_216);
    reply.insert("maxMessageSizeBytes", 48_000_000);
    reply.insert("maxWriteBatchSize", 100_000);
    reply.insert("localTime", ctx.now);
    reply.insert("logicalSessionTimeoutMinutes", 30);
    reply.insert("connectionId", ctx.conn.id);
    reply.insert("minWireVersion", 0);
    reply.insert("maxWireVersion", state.version.max_wire_version());
    reply.insert("readOnly", false);
    if let Some(replica) = &state.replica {
        replica.hello_fields(&mut reply, name != "hello");
    }
    Ok(reply)
}
