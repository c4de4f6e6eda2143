//! Distributed locks stored in MongoDB.
