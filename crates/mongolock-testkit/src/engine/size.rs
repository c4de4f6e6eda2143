//! BSON size limits, as mongod enforces them.
//!
//! Two limits matter (`src/mongo/bson/util/builder.h`):
//! - `BSONObjMaxUserSize`, 16 MiB ([`MAX_USER_SIZE`], advertised as `maxBsonObjectSize`): the
//!   largest document that can be stored;
//! - `BSONObjMaxInternalSize`, 16 MiB + 16 KiB ([`MAX_INTERNAL_SIZE`]): the largest BSON
//!   object mongod builds or accepts at all, which leaves room for command overhead around a
//!   document of the user size.
//!
//! The codes differ by path, as they do in MongoDB 7.0 (the version the emulator reports):
//!
//! | path | over 16 MiB | over 16 MiB + 16 KiB |
//! |---|---|---|
//! | OP_MSG body or document-sequence document | accepted | 10334 `BSONObjectTooLarge` (`BSONObj size: N (0xN) is invalid...`) |
//! | `insert` document (`fixDocumentForInsert`) | 2 `BadValue`, `object to insert too large` | (refused on the wire first) |
//! | update result (`UpdateStage::transformAndUpdate`) | 17419, `Resulting document after update is larger than 16777216` | 10334 (building the new document) |
//! | upsert result (`UpsertStage::_produceNewDocumentForInsert`) | 17420, `Document to upsert is larger than 16777216` | 10334 (building the new document) |
//!
//! 8.0 reports `BSONObjectTooLarge` for the update case as well; 7.0 still uses the
//! location codes 17419 and 17420 (code names `Location17419`, `Location17420`).

use bson::{Bson, Document, spec::BinarySubtype};

use super::error::shell_repr;
use super::error::{CommandError, codes};

/// `BSONObjMaxUserSize`: the largest document that can be stored (16 MiB).
pub const MAX_USER_SIZE: usize = 16 * 1024 * 1024;

/// `BSONObjMaxInternalSize`: the largest BSON object mongod accepts or builds at all
/// (16 MiB + 16 KiB), which is also the limit of a command's body.
pub const MAX_INTERNAL_SIZE: usize = MAX_USER_SIZE + 16 * 1024;

/// Location code of an update whose result is over [`MAX_USER_SIZE`] (MongoDB 7.0).
pub const UPDATE_TOO_LARGE: i32 = 17419;

/// Location code of an upsert whose new document is over [`MAX_USER_SIZE`] (MongoDB 7.0).
pub const UPSERT_TOO_LARGE: i32 = 17420;

/// The encoded size of a document in bytes, computed without encoding it.
pub fn document_size(doc: &Document) -> usize {
    // int32 length, the elements, the terminating zero.
    4 + doc
        .iter()
        .map(|(key, value)| element_size(key.len(), value))
        .sum::<usize>()
        + 1
}

fn element_size(key_len: usize, value: &Bson) -> usize {
    // type byte, key cstring, value.
    1 + key_len + 1 + value_size(value)
}

fn string_size(s: &str) -> usize {
    4 + s.len() + 1
}

pub(crate) fn value_size(value: &Bson) -> usize {
    match value {
        Bson::Double(_) | Bson::DateTime(_) | Bson::Timestamp(_) | Bson::Int64(_) => 8,
        Bson::String(s) | Bson::JavaScriptCode(s) | Bson::Symbol(s) => string_size(s),
        Bson::Document(d) => document_size(d),
        Bson::Array(items) => {
            4 + items
                .iter()
                .enumerate()
                .map(|(i, v)| element_size(decimal_len(i), v))
                .sum::<usize>()
                + 1
        }
        Bson::Binary(b) => {
            // The old binary subtype repeats the length inside the payload.
            let old = usize::from(b.subtype == BinarySubtype::BinaryOld) * 4;
            4 + 1 + old + b.bytes.len()
        }
        Bson::Undefined | Bson::Null | Bson::MaxKey | Bson::MinKey => 0,
        Bson::ObjectId(_) => 12,
        Bson::Boolean(_) => 1,
        Bson::RegularExpression(r) => r.pattern.len() + 1 + r.options.len() + 1,
        Bson::JavaScriptCodeWithScope(c) => 4 + string_size(&c.code) + document_size(&c.scope),
        Bson::Int32(_) => 4,
        Bson::Decimal128(_) => 16,
        Bson::DbPointer(_) => {
            // Not constructible outside the bson crate; measure it by encoding.
            let doc = bson::doc! {"": value.clone()};
            bson::to_vec(&doc).map_or(0, |bytes| bytes.len().saturating_sub(7))
        }
    }
}

/// Number of decimal digits of an array index (the element's key).
fn decimal_len(mut i: usize) -> usize {
    let mut digits = 1;
    while i >= 10 {
        i /= 10;
        digits += 1;
    }
    digits
}

/// mongod's `BSONObj size: N (0xN) is invalid` error (10334, `BSONObjectTooLarge`), raised
/// when an object over [`MAX_INTERNAL_SIZE`] is received or built. `first` is the object's
/// first element, which the message shows.
pub fn invalid_size(size: usize, first: Option<(&str, &Bson)>) -> CommandError {
    let mut message = format!(
        "BSONObj size: {size} (0x{size:X}) is invalid. Size must be between 0 and \
         {MAX_INTERNAL_SIZE}({}MB)",
        MAX_INTERNAL_SIZE / (1024 * 1024)
    );
    if let Some((key, value)) = first {
        message.push_str(&format!(" First element: {key}: {}", shell_repr(value)));
    }
    CommandError::new(codes::BSON_OBJECT_TOO_LARGE, message)
}

fn first_element(doc: &Document) -> Option<(&str, &Bson)> {
    doc.iter().next().map(|(k, v)| (k.as_str(), v))
}

/// Checks a document an `insert` is about to store (before its `_id` is added, as mongod
/// does): over 16 MiB is `BadValue` (2), "object to insert too large".
pub fn check_insert(doc: &Document) -> Result<(), CommandError> {
    let size = document_size(doc);
    if size > MAX_USER_SIZE {
        return Err(CommandError::bad_value(format!(
            "object to insert too large. size in bytes: {size}, max size: {MAX_USER_SIZE}"
        )));
    }
    Ok(())
}

/// Checks the result of an update: over 16 MiB + 16 KiB mongod cannot even build it (10334),
/// over 16 MiB it refuses to store it (17419).
pub fn check_update_result(doc: &Document) -> Result<(), CommandError> {
    check_built(
        doc,
        UPDATE_TOO_LARGE,
        "Resulting document after update is larger than",
    )
}

/// Checks the document an upsert is about to insert: 10334 over 16 MiB + 16 KiB, 17420 over
/// 16 MiB.
pub fn check_upsert_result(doc: &Document) -> Result<(), CommandError> {
    check_built(doc, UPSERT_TOO_LARGE, "Document to upsert is larger than")
}

fn check_built(doc: &Document, code: i32, message: &str) -> Result<(), CommandError> {
    let size = document_size(doc);
    if size > MAX_INTERNAL_SIZE {
        return Err(invalid_size(size, first_element(doc)));
    }
    if size > MAX_USER_SIZE {
        return Err(CommandError::new(
            code,
            format!("{message} {MAX_USER_SIZE}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{Binary, DateTime, Decimal128, JavaScriptCodeWithScope, Regex, Timestamp, doc};

    #[test]
    fn sizes_match_the_encoder() {
        let docs = vec![
            doc! {},
            doc! {"_id": 1, "s": "text", "f": 1.5, "l": 7i64, "b": true, "n": null},
            doc! {"a": (0..25).map(Bson::Int32).collect::<Vec<_>>(), "d": {"x": {"y": []}}},
            doc! {
                "bin": Binary { subtype: BinarySubtype::Generic, bytes: vec![1, 2, 3] },
                "old": Binary { subtype: BinarySubtype::BinaryOld, bytes: vec![1, 2, 3] },
                "oid": bson::oid::ObjectId::new(),
                "date": DateTime::from_millis(5),
                "ts": Timestamp { time: 1, increment: 2 },
                "re": Regex { pattern: "a.b".into(), options: "im".into() },
                "dec": Decimal128::from_bytes([0; 16]),
                "code": Bson::JavaScriptCode("f()".into()),
                "scope": JavaScriptCodeWithScope { code: "g()".into(), scope: doc! {"v": 1} },
                "sym": Bson::Symbol("s".into()),
                "min": Bson::MinKey, "max": Bson::MaxKey, "u": Bson::Undefined,
                "ünï": "çödé",
            },
        ];
        for doc in docs {
            assert_eq!(
                document_size(&doc),
                bson::to_vec(&doc).unwrap().len(),
                "{doc}"
            );
        }
    }

    #[test]
    fn limits_pick_mongods_codes() {
        let sized = |total: usize| {
            // {_id: 1, s: "..."}: 4 + (1+4+4) + (1+2+4+len+1) + 1 = len + 22 bytes.
            doc! {"_id": 1, "s": "x".repeat(total - 22)}
        };
        assert_eq!(document_size(&sized(100)), 100);
        assert!(check_update_result(&sized(MAX_USER_SIZE)).is_ok());
        assert_eq!(
            check_update_result(&sized(MAX_USER_SIZE + 1))
                .unwrap_err()
                .code,
            17419
        );
        assert_eq!(
            check_upsert_result(&sized(MAX_INTERNAL_SIZE))
                .unwrap_err()
                .code,
            17420
        );
        let error = check_update_result(&sized(MAX_INTERNAL_SIZE + 1)).unwrap_err();
        assert_eq!(error.code, 10334);
        assert_eq!(
            error.errmsg,
            "BSONObj size: 16793601 (0x1004001) is invalid. Size must be between 0 and \
             16793600(16MB) First element: _id: 1"
        );
        assert_eq!(check_insert(&sized(MAX_USER_SIZE + 1)).unwrap_err().code, 2);
    }
}
