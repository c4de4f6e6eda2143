//! `hello` / `isMaster`: what the drivers learn about the server.

use bson::{Document, doc, oid::ObjectId};

use super::Ctx;
use crate::engine::error::Result;
use crate::server::REPLICA_SET_NAME;

/// Wire versions: 0 up to 21 (MongoDB 7.0), which every 3.x Rust driver, pymongo 4 and the
/// Node driver accept.
pub const MAX_WIRE_VERSION: i32 = 21;
/// The MongoDB version `buildInfo` reports, consistent with [`MAX_WIRE_VERSION`].
pub const SERVER_VERSION: &str = "7.0.14";

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
    if !state.standalone {
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
    reply.insert("maxWireVersion", MAX_WIRE_VERSION);
    reply.insert("readOnly", false);
    Ok(reply)
}

/// The `versionArray` of [`SERVER_VERSION`].
pub fn version_array() -> Vec<i32> {
    let mut parts: Vec<i32> = SERVER_VERSION
        .split('.')
        .filter_map(|p| p.parse().ok())
        .collect();
    parts.push(0);
    parts
}

/// Reply of `buildInfo`.
pub fn build_info() -> Document {
    doc! {
        "version": SERVER_VERSION,
        "gitVersion": "mongolock-testkit",
        "versionArray": version_array(),
        "bits": 64,
        "debug": false,
        "maxBsonObjectSize": 16_777_216,
        "storageEngines": ["inMemory"],
        "modules": [],
    }
}
