//! The TTL monitor's pass: delete documents whose TTL-indexed date has expired.

use bson::{Bson, Document};

use super::state::ServerState;

/// The earliest date in a TTL-indexed field (arrays count their earliest date); `None` when
/// the field holds no date, in which case the document never expires.
fn expiry_base(doc: &Document, path: &str) -> Option<i64> {
    let mut value = doc.get(path.split('.').next()?)?;
    for part in path.split('.').skip(1) {
        value = value.as_document()?.get(part)?;
    }
    match value {
        Bson::DateTime(d) => Some(d.timestamp_millis()),
        Bson::Array(items) => items
            .iter()
            .filter_map(|v| match v {
                Bson::DateTime(d) => Some(d.timestamp_millis()),
                _ => None,
            })
            .min(),
        _ => None,
    }
}

/// One pass over every TTL index of every collection; returns how many documents it removed.
pub fn run_pass(state: &ServerState) -> usize {
    let now = state.clock.now().timestamp_millis();
    let mut removed = 0;
    for coll in state.catalog.all_collections() {
        let mut coll = coll.lock();
        let ttl: Vec<(String, i64)> = coll
            .indexes()
            .iter()
            .filter_map(|i| Some((i.key.keys().next()?.clone(), i.expire_after_seconds?)))
            .collect();
        for (field, seconds) in ttl {
            let expired: Vec<u64> = coll
                .iter()
                .filter(|(_, doc)| {
                    expiry_base(doc, &field)
                        .is_some_and(|base| base.saturating_add(seconds.saturating_mul(1000)) < now)
                })
                .map(|(record, _)| record)
                .collect();
            for record in expired {
                if coll.remove(record).is_some() {
                    removed += 1;
                }
            }
        }
    }
    removed
}
