//! Index specifications and unique-key enforcement.

use std::collections::BTreeMap;

use bson::{Bson, Document, doc};

use super::compare::OrdBson;
use super::error::{CommandError, Result, codes, shell_repr};

/// One index of a collection, as created by `createIndexes` (or the implicit `_id_`).
#[derive(Debug, Clone)]
pub struct Index {
    /// The index name (`_id_`, `expiresAt_1`, ...).
    pub name: String,
    /// The key pattern (`{field: 1, other: -1}`).
    pub key: Document,
    /// Whether the index rejects duplicate keys.
    pub unique: bool,
    /// Whether documents missing every key field are left out.
    pub sparse: bool,
    /// TTL: documents expire this many seconds after the date in the (single) key field.
    pub expire_after_seconds: Option<i64>,
    /// For unique indexes: key -> record ids holding it (one, unless the key is absent).
    entries: BTreeMap<Vec<OrdBson>, u64>,
}

/// Options `createIndexes` accepts in an index specification. Anything else is refused.
const SPEC_FIELDS: &[&str] = &[
    "key",
    "name",
    "unique",
    "sparse",
    "expireAfterSeconds",
    "background",
    "v",
    "collation",
];

impl Index {
    /// The implicit unique index on `_id`.
    pub fn id_index() -> Self {
        Self {
            name: "_id_".into(),
            key: doc! {"_id": 1},
            unique: true,
            sparse: false,
            expire_after_seconds: None,
            entries: BTreeMap::new(),
        }
    }

    /// Parses and validates one `createIndexes` specification.
    pub fn from_spec(spec: &Document) -> Result<Self> {
        for field in spec.keys() {
            if !SPEC_FIELDS.contains(&field.as_str()) {
                return Err(CommandError::new(
                    197,
                    format!(
                        "The field '{field}' is not valid for an index specification (or is not \
                         supported by this emulator). Specification: {spec}"
                    ),
                ));
            }
        }
        // Only the simple collation is supported, and mongod leaves a simple collation out of
        // the stored specification (`validateIndexSpecCollation`): such an index is the same
        // as one without a collation.
        match spec.get("collation") {
            None => {}
            Some(Bson::Document(collation)) => super::collation::check_spec(collation)?,
            Some(other) => {
                return Err(CommandError::type_mismatch(format!(
                    "The field 'collation' must be an object, but got {}",
                    super::compare::type_alias(other)
                )));
            }
        }
        let key = spec.get_document("key").map_err(|_| {
            CommandError::new(
                codes::FAILED_TO_PARSE,
                "The 'key' field is a required property of an index specification",
            )
        })?;
        if key.is_empty() {
            return Err(CommandError::new(
                codes::CANNOT_CREATE_INDEX,
                "Index keys cannot be empty.",
            ));
        }
        for (field, direction) in key {
            let valid = match direction {
                Bson::Int32(n) => *n != 0,
                Bson::Int64(n) => *n != 0,
                Bson::Double(n) => *n != 0.0 && n.is_finite(),
                _ => false,
            };
            if !valid || field.is_empty() || field.starts_with('$') {
                return Err(CommandError::new(
                    codes::CANNOT_CREATE_INDEX,
                    format!(
                        "Error in specification {spec} :: caused by :: Values in the index key pattern can only be non-zero numbers (this emulator supports ascending and descending keys only)"
                    ),
                ));
            }
        }
        let name = match spec.get("name") {
            Some(Bson::String(name)) if !name.is_empty() => name.clone(),
            Some(Bson::String(_)) => {
                return Err(CommandError::new(
                    codes::CANNOT_CREATE_INDEX,
                    "index name cannot be empty",
                ));
            }
            Some(_) => {
                return Err(CommandError::type_mismatch(
                    "The field 'name' must be a string",
                ));
            }
            None => {
                return Err(CommandError::new(
                    codes::FAILED_TO_PARSE,
                    "The 'name' field is a required property of an index specification",
                ));
            }
        };
        let flag = |field: &str| -> Result<bool> {
            match spec.get(field) {
                None => Ok(false),
                Some(Bson::Boolean(b)) => Ok(*b),
                Some(v) => match super::compare::as_f64(v) {
                    Some(n) => Ok(n != 0.0),
                    None => Err(CommandError::type_mismatch(format!(
                        "The field '{field}' must be a boolean, not {}",
                        super::compare::type_alias(v)
                    ))),
                },
            }
        };
        let unique = flag("unique")?;
        let sparse = flag("sparse")?;
        let expire_after_seconds = match spec.get("expireAfterSeconds") {
            None => None,
            Some(v) => {
                let n = super::compare::as_f64(v).ok_or_else(|| {
                    CommandError::type_mismatch(
                        "TTL index 'expireAfterSeconds' option must be numeric",
                    )
                })?;
                if !(0.0..=2_147_483_647.0).contains(&n) || n.fract() != 0.0 {
                    return Err(CommandError::new(
                        codes::CANNOT_CREATE_INDEX,
                        format!(
                            "TTL index 'expireAfterSeconds' option must be within an acceptable range, try a lower number. Got {n}"
                        ),
                    ));
                }
                if key.len() != 1 {
                    return Err(CommandError::new(
                        codes::CANNOT_CREATE_INDEX,
                        "TTL indexes are single-field indexes, compound indexes do not support TTL",
                    ));
                }
                Some(n as i64)
            }
        };
        if (name == "_id_" || key.keys().eq(["_id"]))
            && (unique || sparse || expire_after_seconds.is_some())
        {
            return Err(CommandError::new(
                codes::INVALID_OPTIONS,
                "The field 'unique', 'sparse' or 'expireAfterSeconds' is not valid for an _id index specification",
            ));
        }
        Ok(Self {
            name,
            key: key.clone(),
            unique,
            sparse,
            expire_after_seconds,
            entries: BTreeMap::new(),
        })
    }

    /// The same index with no entries, to build over other documents.
    pub fn emptied(&self) -> Index {
        Index {
            entries: BTreeMap::new(),
            ..self.clone()
        }
    }

    /// Whether `other` describes the same index (same key and options).
    pub fn same_spec(&self, other: &Index) -> bool {
        super::compare::compare_documents(&self.key, &other.key).is_eq()
            && self.unique == other.unique
            && self.sparse == other.sparse
            && self.expire_after_seconds == other.expire_after_seconds
    }

    /// Whether the two key patterns are the same.
    pub fn same_key(&self, other: &Index) -> bool {
        super::compare::compare_documents(&self.key, &other.key).is_eq()
    }

    /// The index as `listIndexes` shows it.
    pub fn describe(&self) -> Document {
        let mut out = doc! {"v": 2, "key": self.key.clone(), "name": self.name.clone()};
        if self.unique {
            out.insert("unique", true);
        }
        if self.sparse {
            out.insert("sparse", true);
        }
        if let Some(secs) = self.expire_after_seconds {
            out.insert("expireAfterSeconds", secs);
        }
        out
    }

    /// The keys a document produces in this index (several when a key field is an array).
    /// `None` when a sparse index leaves the document out.
    pub fn keys_of(&self, doc: &Document) -> Option<Vec<Vec<OrdBson>>> {
        let mut any_present = false;
        let mut keys: Vec<Vec<OrdBson>> = vec![Vec::new()];
        for field in self.key.keys() {
            let values = index_values(doc, field);
            if values.iter().any(|v| !matches!(v, Bson::Null)) || path_exists(doc, field) {
                any_present = true;
            }
            let mut next = Vec::with_capacity(keys.len() * values.len());
            for prefix in &keys {
                for value in &values {
                    let mut key = prefix.clone();
                    key.push(OrdBson(value.clone()));
                    next.push(key);
                }
            }
            keys = next;
        }
        if self.sparse && !any_present {
            return None;
        }
        keys.sort();
        keys.dedup();
        Some(keys)
    }

    /// Checks that `doc` (stored as `record`) would not collide with another record.
    pub fn check_unique(&self, doc: &Document, record: u64, ns: &str) -> Result<()> {
        if !self.unique {
            return Ok(());
        }
        for key in self.keys_of(doc).unwrap_or_default() {
            if let Some(&holder) = self.entries.get(&key)
                && holder != record
            {
                return Err(self.duplicate_key_error(ns, &key));
            }
        }
        Ok(())
    }

    /// Records `doc`'s keys for `record` (after `check_unique` passed).
    pub fn add(&mut self, doc: &Document, record: u64) {
        if !self.unique {
            return;
        }
        for key in self.keys_of(doc).unwrap_or_default() {
            self.entries.insert(key, record);
        }
    }

    /// Forgets `doc`'s keys for `record`.
    pub fn remove(&mut self, doc: &Document, record: u64) {
        if !self.unique {
            return;
        }
        for key in self.keys_of(doc).unwrap_or_default() {
            if self.entries.get(&key) == Some(&record) {
                self.entries.remove(&key);
            }
        }
    }

    /// mongod's E11000 error for `key` in this index.
    pub fn duplicate_key_error(&self, ns: &str, key: &[OrdBson]) -> CommandError {
        let mut key_value = Document::new();
        let mut shown = Vec::new();
        for (field, value) in self.key.keys().zip(key) {
            key_value.insert(field.clone(), value.0.clone());
            shown.push(format!("{field}: {}", shell_repr(&value.0)));
        }
        let mut key_pattern = Document::new();
        for (field, direction) in &self.key {
            key_pattern.insert(field.clone(), direction.clone());
        }
        CommandError::new(
            codes::DUPLICATE_KEY,
            format!(
                "E11000 duplicate key error collection: {ns} index: {} dup key: {{ {} }}",
                self.name,
                shown.join(", ")
            ),
        )
        .with_extra("keyPattern", key_pattern)
        .with_extra("keyValue", key_value)
    }
}

fn path_exists(doc: &Document, path: &str) -> bool {
    let mut parts = path.split('.');
    let Some(mut current) = parts.next().and_then(|first| doc.get(first)) else {
        return false;
    };
    for part in parts {
        match current {
            Bson::Document(d) => match d.get(part) {
                Some(v) => current = v,
                None => return false,
            },
            _ => return false,
        }
    }
    true
}

/// The values an index sees at `path`: arrays fan out into their elements, a missing field
/// is null, an empty array is `undefined` (as in mongod's multikey indexes).
fn index_values(doc: &Document, path: &str) -> Vec<Bson> {
    fn walk(value: &Bson, parts: &[&str], out: &mut Vec<Bson>) {
        match (value, parts.split_first()) {
            (Bson::Array(items), _) if items.is_empty() => out.push(Bson::Undefined),
            (Bson::Array(items), None) => out.extend(items.iter().cloned()),
            (v, None) => out.push(v.clone()),
            (Bson::Document(d), Some((first, rest))) => match d.get(*first) {
                Some(v) => walk(v, rest, out),
                None => out.push(Bson::Null),
            },
            (Bson::Array(items), Some((first, rest))) => {
                if let Ok(i) = first.parse::<usize>() {
                    match items.get(i) {
                        Some(v) => walk(v, rest, out),
                        None => out.push(Bson::Null),
                    }
                } else {
                    for item in items {
                        walk(item, parts, out);
                    }
                }
            }
            _ => out.push(Bson::Null),
        }
    }
    let parts: Vec<&str> = path.split('.').collect();
    let mut out = Vec::new();
    let (first, rest) = parts.split_first().expect("split yields one part");
    match doc.get(*first) {
        Some(v) => walk(v, rest, &mut out),
        None => out.push(Bson::Null),
    }
    out
}
