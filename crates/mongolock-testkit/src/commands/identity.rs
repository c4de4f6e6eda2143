//! Who the emulator says it is: the replica set it pretends to be, the MongoDB version and
//! wire versions it reports, and the `buildInfo` reply built from them.

use bson::{Document, doc};

/// Name of the replica set the emulator pretends to be.
pub const REPLICA_SET_NAME: &str = "rs0";

/// Wire versions: 0 up to 21 (MongoDB 7.0), which every 3.x Rust driver, pymongo 4 and the
/// Node driver accept.
pub const MAX_WIRE_VERSION: i32 = 21;
/// The MongoDB version `buildInfo` reports, consistent with [`MAX_WIRE_VERSION`].
pub const SERVER_VERSION: &str = "7.0.14";

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
