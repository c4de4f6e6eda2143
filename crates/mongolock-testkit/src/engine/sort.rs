//! Sort specifications (`{a: 1, b: -1}`), with mongod's rules for arrays and missing fields.
//!
//! Each key's sort value is taken from the field at a dotted path, through arrays of
//! documents: an ascending key uses the smallest value found there and a descending key the
//! largest (so an array sorts by its smallest element ascending and its largest descending).
//! A missing field sorts as `null`, and an empty array sorts below `null`.

// `CommandError` is large (reply extras, labels); boxing it is the lead's call (error.rs).

use std::cmp::Ordering;

use bson::{Bson, Document};

use super::compare::{as_f64, compare, is_number};
use super::{CommandError, Result};

/// A parsed sort specification.
#[derive(Debug, Clone)]
pub struct SortSpec {
    keys: Vec<(Vec<String>, bool)>,
    natural: Option<bool>,
}

impl SortSpec {
    /// Parses `{field: 1 | -1, ...}`; bad values fail with mongod's error.
    ///
    /// Any number equal to 1 or -1 (`1`, `1.0`, `NumberLong(-1)`) is accepted. `$meta` sorts are
    /// rejected: the emulator has no text search, so there is never text score metadata.
    pub fn parse(spec: &Document) -> Result<SortSpec> {
        let mut keys = Vec::with_capacity(spec.len());
        let mut natural = None;
        for (field, value) in spec {
            if let Bson::Document(obj) = value {
                let meta = obj.get("$meta");
                match (obj.len(), meta) {
                    (1, Some(Bson::String(kind))) if kind == "textScore" => {
                        return Err(CommandError::new(
                            40218,
                            "query requires text score metadata, but it is not available",
                        ));
                    }
                    (1, Some(Bson::String(kind))) if kind == "randVal" || kind == "searchScore" => {
                        return Err(CommandError::bad_value(format!(
                            "$meta sort by '{kind}' is not supported by the emulator"
                        )));
                    }
                    (1, Some(other)) => {
                        return Err(CommandError::new(
                            31138,
                            format!("Illegal $meta sort: $meta: {other}"),
                        ));
                    }
                    _ => {
                        return Err(CommandError::new(
                            17312,
                            "$meta is the only expression supported by $sort right now",
                        ));
                    }
                }
            }
            if !is_number(value) {
                return Err(CommandError::new(
                    15974,
                    format!("Illegal key in $sort specification: {field}: {value}"),
                ));
            }
            let direction = as_f64(value).unwrap_or(f64::NAN);
            let ascending = if direction == 1.0 {
                true
            } else if direction == -1.0 {
                false
            } else {
                return Err(CommandError::new(
                    15975,
                    "$sort key ordering must be 1 (for ascending) or -1 (for descending)",
                ));
            };
            if field.is_empty() {
                return Err(CommandError::new(
                    40352,
                    "FieldPath cannot be constructed with empty string",
                ));
            }
            if field == "$natural" {
                if spec.len() != 1 {
                    return Err(CommandError::bad_value(
                        "$natural sort cannot be combined with other sort keys in the emulator",
                    ));
                }
                natural = Some(ascending);
                continue;
            }
            let path: Vec<String> = field.split('.').map(str::to_string).collect();
            if path.iter().any(String::is_empty) {
                return Err(CommandError::new(
                    15998,
                    "FieldPath field names may not be empty strings.",
                ));
            }
            if path.iter().any(|p| p.starts_with('$')) {
                return Err(CommandError::new(
                    16410,
                    "FieldPath field names may not start with '$'. Consider using $getField or \
                     $setField.",
                ));
            }
            keys.push((path, ascending));
        }
        Ok(SortSpec { keys, natural })
    }

    /// For `{$natural: 1}` / `{$natural: -1}` (allowed only alone): `Some(true)` for
    /// insertion order, `Some(false)` for reverse insertion order. [`SortSpec::compare`] cannot
    /// express it (it sees no insertion order), so the caller must reverse the scan for
    /// `Some(false)`.
    pub fn natural(&self) -> Option<bool> {
        self.natural
    }

    /// Orders two documents. Documents equal on every key compare `Equal`; callers use a
    /// stable sort to keep their natural order.
    pub fn compare(&self, a: &Document, b: &Document) -> Ordering {
        for (path, ascending) in &self.keys {
            let ka = sort_key(a, path, *ascending);
            let kb = sort_key(b, path, *ascending);
            let ord = compare(&ka, &kb);
            let ord = if *ascending { ord } else { ord.reverse() };
            if ord != Ordering::Equal {
                return ord;
            }
        }
        Ordering::Equal
    }
}

/// The value a document sorts by for one key.
fn sort_key(doc: &Document, path: &[String], ascending: bool) -> Bson {
    let mut values = Vec::new();
    if let Some((head, rest)) = path.split_first() {
        collect(doc.get(head), rest, &mut values);
    }
    let pick = |best: Bson, v: Bson| {
        let ord = compare(&v, &best);
        if (ascending && ord.is_lt()) || (!ascending && ord.is_gt()) {
            v
        } else {
            best
        }
    };
    let mut iter = values.into_iter();
    match iter.next() {
        None => Bson::Null,
        Some(first) => iter.fold(first, pick),
    }
}

/// Collects the candidate sort values at `path` under `cur` (missing as `null`, a leaf
/// array as its elements, an empty leaf array as `undefined`, which sorts below `null`).
fn collect(cur: Option<&Bson>, path: &[String], out: &mut Vec<Bson>) {
    let Some((head, rest)) = path.split_first() else {
        match cur {
            None => out.push(Bson::Null),
            Some(Bson::Array(items)) if items.is_empty() => out.push(Bson::Undefined),
            Some(Bson::Array(items)) => out.extend(items.iter().cloned()),
            Some(v) => out.push(v.clone()),
        }
        return;
    };
    match cur {
        Some(Bson::Document(d)) => collect(d.get(head), rest, out),
        Some(Bson::Array(items)) => {
            if head.bytes().all(|b| b.is_ascii_digit())
                && let Ok(n) = head.parse::<usize>()
            {
                collect(items.get(n), rest, out);
                return;
            }
            let before = out.len();
            for item in items {
                if let Bson::Document(d) = item {
                    collect(d.get(head), rest, out);
                }
            }
            if out.len() == before {
                // An empty array on the path sorts like an empty leaf array (below null).
                out.push(if items.is_empty() {
                    Bson::Undefined
                } else {
                    Bson::Null
                });
            }
        }
        _ => out.push(Bson::Null),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn order(spec: Document, docs: Vec<Document>) -> Vec<i32> {
        let spec = SortSpec::parse(&spec).unwrap();
        let mut docs = docs;
        docs.sort_by(|a, b| spec.compare(a, b));
        docs.iter().map(|d| d.get_i32("_id").unwrap()).collect()
    }

    #[test]
    fn sorts_by_keys_and_directions() {
        let docs = vec![
            doc! {"_id": 1, "a": 2, "b": "x"},
            doc! {"_id": 2, "a": 1, "b": "y"},
            doc! {"_id": 3, "a": 2, "b": "z"},
            doc! {"_id": 4, "a": 1.5},
        ];
        assert_eq!(order(doc! {"a": 1}, docs.clone()), vec![2, 4, 1, 3]);
        assert_eq!(order(doc! {"a": -1}, docs.clone()), vec![1, 3, 4, 2]);
        assert_eq!(
            order(doc! {"a": -1, "b": -1}, docs.clone()),
            vec![3, 1, 4, 2]
        );
        assert_eq!(
            order(doc! {"a": 1.0, "b": -1_i64}, docs.clone()),
            vec![2, 4, 3, 1]
        );
        assert_eq!(order(doc! {"b": 1}, docs.clone()), vec![4, 1, 2, 3]);
        assert_eq!(order(doc! {}, docs.clone()), vec![1, 2, 3, 4]);
        assert!(SortSpec::parse(&doc! {}).unwrap().keys.is_empty());
        let natural = SortSpec::parse(&doc! {"$natural": -1}).unwrap();
        assert_eq!(
            (natural.keys.is_empty(), natural.natural()),
            (true, Some(false))
        );
        assert_eq!(SortSpec::parse(&doc! {"a": 1}).unwrap().natural(), None);
    }

    #[test]
    fn missing_null_mixed_types_and_arrays() {
        let docs = vec![
            doc! {"_id": 1, "a": "s"},
            doc! {"_id": 2},
            doc! {"_id": 3, "a": 5},
            doc! {"_id": 4, "a": Bson::Null},
            doc! {"_id": 5, "a": [7, 0]},
            doc! {"_id": 6, "a": []},
            doc! {"_id": 7, "a": {"x": 1}},
        ];
        // Empty array < null == missing < numbers < strings < objects.
        assert_eq!(
            order(doc! {"a": 1}, docs.clone()),
            vec![6, 2, 4, 5, 3, 1, 7]
        );
        // Descending: the array sorts by its largest element (7).
        assert_eq!(
            order(doc! {"a": -1}, docs.clone()),
            vec![7, 1, 5, 3, 2, 4, 6]
        );
    }

    #[test]
    fn cases_from_mongod_jstests() {
        // sorta.js: MinKey < [] < null == missing < numbers < arrays by element < MaxKey.
        let docs = vec![
            doc! {"_id": 8, "a": Bson::MaxKey},
            doc! {"_id": 5, "a": Bson::Null},
            doc! {"_id": 7, "a": [2]},
            doc! {"_id": 1, "a": []},
            doc! {"_id": 4},
            doc! {"_id": 0, "a": Bson::MinKey},
            doc! {"_id": 6, "a": 1},
            doc! {"_id": 3, "a": Bson::Null},
            doc! {"_id": 2, "a": []},
        ];
        assert_eq!(
            order(doc! {"a": 1, "_id": 1}, docs),
            (0..9).collect::<Vec<_>>()
        );
        // sort8.js: an array sorts by its members, in both directions.
        let docs = vec![doc! {"_id": 1, "a": 5}, doc! {"_id": 2, "a": [1, 10]}];
        assert_eq!(order(doc! {"a": 1}, docs.clone()), vec![2, 1]);
        assert_eq!(order(doc! {"a": -1}, docs), vec![2, 1]);
        // Ties on the minimum fall through to the next key.
        let docs = vec![
            doc! {"_id": 2, "a": [2, 3]},
            doc! {"_id": 3, "a": [2, 4]},
            doc! {"_id": 4, "a": [2, 1]},
        ];
        assert_eq!(order(doc! {"a": 1, "_id": 1}, docs), vec![4, 2, 3]);
    }

    #[test]
    fn dotted_paths_through_arrays() {
        let docs = vec![
            doc! {"_id": 1, "a": [{"b": 5}, {"b": 1}]},
            doc! {"_id": 2, "a": {"b": 3}},
            doc! {"_id": 3, "a": [{"b": 4}, {"c": 1}]},
            doc! {"_id": 4, "a": [{"b": 2}]},
            doc! {"_id": 5, "a": []},
            doc! {"_id": 6, "a": [1, 2]},
        ];
        // Ascending: min of [5, 1] = 1; min of [4, null] = null.
        // `a: []` sorts below null; `a: [1, 2]` has no `b`, so null.
        assert_eq!(order(doc! {"a.b": 1}, docs.clone()), vec![5, 3, 6, 1, 4, 2]);
        assert_eq!(
            order(doc! {"a.b": -1}, docs.clone()),
            vec![1, 3, 2, 4, 6, 5]
        );
        assert_eq!(
            order(doc! {"a.0.b": 1}, docs.clone()),
            vec![2, 5, 6, 4, 3, 1]
        );
    }

    #[test]
    fn bad_specs_fail_like_mongod() {
        let cases: Vec<(Document, i32, &str)> = vec![
            (
                doc! {"a": 2},
                15975,
                "$sort key ordering must be 1 (for ascending) or -1 (for descending)",
            ),
            (
                doc! {"a": 0},
                15975,
                "$sort key ordering must be 1 (for ascending) or -1 (for descending)",
            ),
            (
                doc! {"a": "asc"},
                15974,
                "Illegal key in $sort specification: a: \"asc\"",
            ),
            (
                doc! {"a": true},
                15974,
                "Illegal key in $sort specification: a: true",
            ),
            (
                doc! {"a": {"$foo": 1}},
                17312,
                "$meta is the only expression supported by $sort right now",
            ),
            (
                doc! {"a": {"$meta": "textScore"}},
                40218,
                "query requires text score metadata, but it is not available",
            ),
            (
                doc! {"a": {"$meta": 1}},
                31138,
                "Illegal $meta sort: $meta: 1",
            ),
            (
                doc! {"": 1},
                40352,
                "FieldPath cannot be constructed with empty string",
            ),
            (
                doc! {"a..b": 1},
                15998,
                "FieldPath field names may not be empty strings.",
            ),
            (
                doc! {"a.$b": 1},
                16410,
                "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
            ),
        ];
        for (spec, code, msg) in cases {
            let err = SortSpec::parse(&spec).unwrap_err();
            assert_eq!((err.code, err.errmsg.as_str()), (code, msg), "{spec}");
        }
        assert_eq!(
            SortSpec::parse(&doc! {"a": {"$meta": "randVal"}})
                .unwrap_err()
                .code,
            2
        );
    }
}
