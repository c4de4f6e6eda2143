//! Who the emulator says it is: the replica set it pretends to be, the MongoDB version and
//! wire versions it reports, and the `buildInfo` reply built from them.

use bson::{Document, doc};

/// Name of the replica set the emulator pretends to be.
pub const REPLICA_SET_NAME: &str = "rs0";

/// The MongoDB release a server reports itself as, in `hello` (`maxWireVersion`) and
/// `buildInfo` (`version`), and whose behaviour it follows where releases differ.
///
/// Every release here is accepted by every 3.x Rust driver, pymongo 4 and the Node driver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerVersion {
    /// MongoDB 4.2 (wire version 8), reported only: it behaves as 4.4. A client that needs
    /// 4.4 must tell it apart by the wire version.
    V4_2,
    /// MongoDB 4.4 (wire version 9): as 7.0, except that every pipeline-style update is
    /// logged, and seen by change streams, as a `replace` (pipeline updates were first logged
    /// as deltas in 5.0).
    V4_4,
    /// MongoDB 7.0 (wire version 21), the default.
    #[default]
    V7_0,
}

impl ServerVersion {
    /// The highest wire version `hello` reports.
    pub fn max_wire_version(self) -> i32 {
        match self {
            ServerVersion::V4_2 => 8,
            ServerVersion::V4_4 => 9,
            ServerVersion::V7_0 => 21,
        }
    }

    /// The version `buildInfo` reports.
    pub fn version(self) -> &'static str {
        match self {
            ServerVersion::V4_2 => "4.2.25",
            ServerVersion::V4_4 => "4.4.29",
            ServerVersion::V7_0 => "7.0.14",
        }
    }

    /// Whether a pipeline-style update is logged as a delta when that is smaller than the
    /// new document (5.0 and later).
    pub fn logs_pipeline_deltas(self) -> bool {
        !matches!(self, ServerVersion::V4_2 | ServerVersion::V4_4)
    }

    /// The `versionArray` of [`ServerVersion::version`].
    pub fn version_array(self) -> Vec<i32> {
        let mut parts: Vec<i32> = self
            .version()
            .split('.')
            .filter_map(|p| p.parse().ok())
            .collect();
        parts.push(0);
        parts
    }
}

/// Reply of `buildInfo`.
pub fn build_info(version: ServerVersion) -> Document {
    doc! {
        "version": version.version(),
        "gitVersion": "mongolock-testkit",
        "versionArray": version.version_array(),
        "bits": 64,
        "debug": false,
        "maxBsonObjectSize": 16_777_216,
        "storageEngines": ["inMemory"],
        "modules": [],
    }
}
