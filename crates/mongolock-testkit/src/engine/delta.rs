//! How mongod logs a pipeline-style update: as a delta (`$v: 2`, an `update` change event
//! with an `updateDescription`) only when the delta is smaller than the new document, and as
//! the whole new document (a `replace` event) otherwise.
//!
//! The model follows `src/mongo/db/update/pipeline_executor.cpp` (`applyUpdate` asks for a
//! delta and falls back to a replacement), `src/mongo/db/update/document_diff_calculator.cpp`
//! (`computeOplogDiff`, `computeDocDiff`, `computeArrayDiff`) and the size bookkeeping of
//! `src/mongo/db/update/document_diff_serialization.{h,cpp}`:
//!
//! - The old and new documents are walked side by side, field by field in stored order. A
//!   field whose element (name, type and bytes) is unchanged is skipped. A field of the same
//!   name and a different value is an update, unless both values are documents or both are
//!   arrays: then it is diffed in turn, and if that inner diff would not be smaller than the
//!   new value it is an update of the whole field. A field whose name differs from the new
//!   document's field at that place is marked deleted; old fields left over are deleted, new
//!   fields left over are inserted (and a field inserted after being marked deleted is not
//!   deleted: it moved). Arrays are compared index by index: a changed element is an update
//!   (or an inner diff), extra new elements are updates, and a shorter array is a resize.
//! - While it builds a diff, mongod keeps an approximate size: 5 bytes for an empty document
//!   diff (plus, at the top, 15 bytes for the oplog entry's own fields), 9 for an array diff,
//!   and for each entry its name's length plus 2, plus the value's size (1 for a deletion, the
//!   inner diff's approximate size for an inner diff, plus 1 for its `s` prefix in a
//!   document), plus 8 for the first entry of each section (`u`, `i`, `d`); an array entry
//!   counts `1 + digits` for its name and a resize 7. A diff is given up, at any level, as
//!   soon as that approximation is not below the new value's BSON size.
//! - A top-level diff that survives is serialized (`{d: {...}, u: {...}, i: {...},
//!   s<field>: {...}}`, arrays as `{a: true, l: <size>, u<i>: ..., s<i>: ...}`) and used only
//!   if its exact BSON size is below the new document's.
//!
//! The change stream turns the delta into `updateDescription` as
//! `src/mongo/db/pipeline/change_stream_document_diff_parser.cpp` does: updates and inserts
//! are `updatedFields`, deletions `removedFields`, resizes `truncatedArrays`, and inner diffs
//! add their path.
//!
//! Before 5.0 no delta existed for pipeline updates: every one was logged as a replacement.

use std::collections::BTreeSet;

use bson::{Bson, Document};

use super::size::{document_size, value_size};
use super::update_description::{FieldPath, PathPart, UpdateDescription};

/// The oplog entry's own fields, counted in with the top-level diff
/// (`update_oplog_entry::kSizeOfDeltaOplogEntryMetadata`).
const DELTA_ENTRY_METADATA: usize = 15;
/// The approximate size of an empty document diff (`kSizeOfEmptyDocumentDiffBuilder`).
const EMPTY_DOCUMENT_DIFF: usize = 5;
/// The approximate size of an empty array diff (`kSizeOfEmptyArrayDiffBuilder`).
const EMPTY_ARRAY_DIFF: usize = 9;
/// What the first entry of a section adds: its type byte, one-letter name, NUL and an empty
/// document.
const SECTION_WRAPPING: usize = 8;
/// What a resize adds: its one-letter name, a 4-byte size and 2.
const RESIZE_ENTRY: usize = 7;

/// What a pipeline update logs, when it logs a delta: `Some(description)`; `None` when mongod
/// logs the whole new document instead (a `replace` change event).
pub fn pipeline_delta(before: &Document, after: &Document) -> Option<UpdateDescription> {
    let diff = doc_diff(before, after, DELTA_ENTRY_METADATA)?;
    if diff.serialized_size() >= document_size(after) {
        return None;
    }
    let mut description = UpdateDescription::default();
    diff.describe(&mut Vec::new(), &mut description);
    Some(description)
}

/// An inner diff: of a sub-document or of an array.
#[derive(Debug)]
enum Inner {
    Document(DocDiff),
    Array(ArrayDiff),
}

impl Inner {
    fn approx(&self) -> usize {
        match self {
            Inner::Document(d) => d.approx,
            Inner::Array(a) => a.approx,
        }
    }

    fn serialized_size(&self) -> usize {
        match self {
            Inner::Document(d) => d.serialized_size(),
            Inner::Array(a) => a.serialized_size(),
        }
    }

    fn describe(&self, path: &mut FieldPath, out: &mut UpdateDescription) {
        match self {
            Inner::Document(d) => d.describe(path, out),
            Inner::Array(a) => a.describe(path, out),
        }
    }
}

/// The diff of two documents, with mongod's approximate size.
#[derive(Debug)]
struct DocDiff {
    updates: Vec<(String, Bson)>,
    inserts: Vec<(String, Bson)>,
    deletes: Vec<String>,
    inner: Vec<(String, Inner)>,
    approx: usize,
}

impl DocDiff {
    fn new(padding: usize) -> Self {
        Self {
            updates: Vec::new(),
            inserts: Vec::new(),
            deletes: Vec::new(),
            inner: Vec::new(),
            approx: padding + EMPTY_DOCUMENT_DIFF,
        }
    }

    fn update(&mut self, name: &str, value: &Bson) {
        self.approx += entry(name.len(), value_size(value)) + wrapping(&self.updates);
        self.updates.push((name.to_string(), value.clone()));
    }

    fn insert(&mut self, name: &str, value: &Bson) {
        self.approx += entry(name.len(), value_size(value)) + wrapping(&self.inserts);
        self.inserts.push((name.to_string(), value.clone()));
    }

    fn delete(&mut self, name: &str) {
        self.approx += entry(name.len(), 1) + wrapping(&self.deletes);
        self.deletes.push(name.to_string());
    }

    fn nest(&mut self, name: &str, inner: Inner) {
        // The `s` prefix of the inner diff's name.
        self.approx += entry(name.len(), inner.approx()) + 1;
        self.inner.push((name.to_string(), inner));
    }

    /// The exact BSON size of the serialized diff.
    fn serialized_size(&self) -> usize {
        let section = |entries: usize, values: usize| -> usize {
            if entries == 0 {
                0
            } else {
                // type byte, one-letter name and NUL, then the sub-document.
                3 + 5 + values
            }
        };
        let deletes = section(
            self.deletes.len(),
            self.deletes.iter().map(|n| element(n.len(), 1)).sum(),
        );
        let updates = section(
            self.updates.len(),
            self.updates
                .iter()
                .map(|(n, v)| element(n.len(), value_size(v)))
                .sum(),
        );
        let inserts = section(
            self.inserts.len(),
            self.inserts
                .iter()
                .map(|(n, v)| element(n.len(), value_size(v)))
                .sum(),
        );
        let inner: usize = self
            .inner
            .iter()
            .map(|(n, d)| element(n.len() + 1, d.serialized_size()))
            .sum();
        5 + deletes + updates + inserts + inner
    }

    /// Adds this diff's changes, under `path`, to `out`, in the order the change stream
    /// reads them: updates and inserts, deletions, then inner diffs.
    fn describe(&self, path: &mut FieldPath, out: &mut UpdateDescription) {
        for (name, value) in self.updates.iter().chain(&self.inserts) {
            path.push(PathPart::Field(name.clone()));
            out.updated.push((path.clone(), value.clone()));
            path.pop();
        }
        for name in &self.deletes {
            path.push(PathPart::Field(name.clone()));
            out.removed.push(path.clone());
            path.pop();
        }
        for (name, inner) in &self.inner {
            path.push(PathPart::Field(name.clone()));
            inner.describe(path, out);
            path.pop();
        }
    }
}

/// The diff of two arrays, with mongod's approximate size.
#[derive(Debug)]
struct ArrayDiff {
    /// Updated elements and inner diffs, by index, in index order.
    entries: Vec<(usize, ArrayEntry)>,
    /// The new length, when the array shrank.
    resize: Option<usize>,
    approx: usize,
}

#[derive(Debug)]
enum ArrayEntry {
    Update(Bson),
    Inner(Inner),
}

impl ArrayDiff {
    fn new() -> Self {
        Self {
            entries: Vec::new(),
            resize: None,
            approx: EMPTY_ARRAY_DIFF,
        }
    }

    fn update(&mut self, index: usize, value: &Bson) {
        self.approx += entry(1 + digits(index), value_size(value));
        self.entries
            .push((index, ArrayEntry::Update(value.clone())));
    }

    fn nest(&mut self, index: usize, inner: Inner) {
        self.approx += entry(1 + digits(index), inner.approx());
        self.entries.push((index, ArrayEntry::Inner(inner)));
    }

    fn shrink_to(&mut self, len: usize) {
        self.approx += RESIZE_ENTRY;
        self.resize = Some(len);
    }

    fn serialized_size(&self) -> usize {
        // `a: true`, then `l: <int32>` when resized.
        let header = element(1, 1) + self.resize.map_or(0, |_| element(1, 4));
        let entries: usize = self
            .entries
            .iter()
            .map(|(i, e)| {
                let value = match e {
                    ArrayEntry::Update(v) => value_size(v),
                    ArrayEntry::Inner(inner) => inner.serialized_size(),
                };
                element(1 + digits(*i), value)
            })
            .sum();
        5 + header + entries
    }

    fn describe(&self, path: &mut FieldPath, out: &mut UpdateDescription) {
        if let Some(len) = self.resize {
            out.truncated.push((path.clone(), len));
        }
        for (index, e) in &self.entries {
            path.push(PathPart::Index(*index));
            match e {
                ArrayEntry::Update(v) => out.updated.push((path.clone(), v.clone())),
                ArrayEntry::Inner(inner) => inner.describe(path, out),
            }
            path.pop();
        }
    }
}

/// What an entry adds to an approximate size: its name, a type byte and a NUL, its value.
fn entry(name_len: usize, value: usize) -> usize {
    name_len + 2 + value
}

/// What the first entry of a section adds.
fn wrapping<T>(section: &[T]) -> usize {
    if section.is_empty() {
        SECTION_WRAPPING
    } else {
        0
    }
}

/// The exact size of a BSON element: type byte, name, NUL, value.
fn element(name_len: usize, value: usize) -> usize {
    1 + name_len + 1 + value
}

/// The BSON size of an array value.
fn array_size(items: &[Bson]) -> usize {
    5 + items
        .iter()
        .enumerate()
        .map(|(i, v)| element(digits(i), value_size(v)))
        .sum::<usize>()
}

fn digits(n: usize) -> usize {
    n.to_string().len()
}

/// The diff of `before` and `after`, or `None` when it would not be smaller than `after`
/// (`computeDocDiff`); `padding` is counted in from the start.
fn doc_diff(before: &Document, after: &Document, padding: usize) -> Option<DocDiff> {
    let limit = document_size(after);
    let mut diff = DocDiff::new(padding);
    let mut moved: BTreeSet<&str> = BTreeSet::new();
    let mut old = before.iter().peekable();
    let mut new = after.iter().peekable();
    while let (Some(&(old_name, old_value)), Some(&(new_name, new_value))) =
        (old.peek(), new.peek())
    {
        if limit < diff.approx {
            return None;
        }
        if old_name == new_name && identical(old_value, new_value) {
            old.next();
            new.next();
            continue;
        }
        if old_name == new_name {
            match inner_diff(old_value, new_value) {
                Some(Some(inner)) => diff.nest(old_name, inner),
                Some(None) | None => diff.update(old_name, new_value),
            }
            old.next();
            new.next();
        } else {
            // Gone, unless it comes back later in the new document.
            moved.insert(old_name);
            old.next();
        }
    }
    for (name, _) in old {
        diff.delete(name);
    }
    for (name, value) in new {
        diff.insert(name, value);
        moved.remove(name.as_str());
    }
    for name in moved {
        diff.delete(name);
    }
    (limit > diff.approx).then_some(diff)
}

/// The diff of two values of the same name: `None` when they are not both documents or both
/// arrays (the field is updated whole), `Some(None)` when their diff would not be smaller
/// than the new value (updated whole too), `Some(Some(diff))` otherwise.
fn inner_diff(old: &Bson, new: &Bson) -> Option<Option<Inner>> {
    match (old, new) {
        (Bson::Document(o), Bson::Document(n)) => Some(doc_diff(o, n, 0).map(Inner::Document)),
        (Bson::Array(o), Bson::Array(n)) => Some(array_diff(o, n).map(Inner::Array)),
        _ => None,
    }
}

/// The diff of two arrays, or `None` when it would not be smaller than `after`
/// (`computeArrayDiff`).
fn array_diff(before: &[Bson], after: &[Bson]) -> Option<ArrayDiff> {
    let limit = array_size(after);
    let mut diff = ArrayDiff::new();
    let common = before.len().min(after.len());
    for index in 0..common {
        if limit < diff.approx {
            return None;
        }
        let (old, new) = (&before[index], &after[index]);
        if identical(old, new) {
            continue;
        }
        match inner_diff(old, new) {
            Some(Some(inner)) => diff.nest(index, inner),
            Some(None) | None => diff.update(index, new),
        }
    }
    for (index, value) in after.iter().enumerate().skip(common) {
        diff.update(index, value);
    }
    if before.len() > after.len() {
        diff.shrink_to(after.len());
    }
    (limit > diff.approx).then_some(diff)
}

/// Binary equality of two values: same type, same bytes (field order counts, `0.0` is not
/// `-0.0`).
fn identical(a: &Bson, b: &Bson) -> bool {
    super::update::identical(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn a_small_document_is_replaced_and_a_large_one_gets_a_delta() {
        // {_id: 1, a: 1} -> {_id: 1, a: 2}: 21 bytes; the delta's approximation is
        // 15 + 5 + (1 + 2 + 4) + 8 = 35.
        assert!(pipeline_delta(&doc! {"_id": 1, "a": 1}, &doc! {"_id": 1, "a": 2}).is_none());
        let pad = "x".repeat(100);
        let d = pipeline_delta(
            &doc! {"_id": 1, "pad": &pad, "a": 1},
            &doc! {"_id": 1, "pad": &pad, "a": 2},
        )
        .expect("a delta");
        assert_eq!(
            d.updated,
            vec![(vec![PathPart::Field("a".into())], Bson::Int32(2))]
        );
    }

    #[test]
    fn sizes_follow_the_serialized_form() {
        let (pad, q) = ("x".repeat(100), "q".repeat(30));
        let before = doc! {"_id": 1, "pad": &pad, "a": {"b": 1, "c": [&q, 2, 3]}, "gone": 1};
        let after = doc! {"_id": 1, "pad": &pad, "a": {"b": 2, "c": [&q, 5]}, "new": true};
        let diff = doc_diff(&before, &after, DELTA_ENTRY_METADATA).expect("a delta");
        let serialized = doc! {
            "d": {"gone": false},
            "i": {"new": true},
            "sa": {"u": {"b": 2}, "sc": {"a": true, "l": 2, "u1": 5}},
        };
        assert_eq!(diff.serialized_size(), document_size(&serialized));
        let mut d = UpdateDescription::default();
        diff.describe(&mut Vec::new(), &mut d);
        let field = |s: &str| PathPart::Field(s.to_string());
        assert_eq!(
            d.updated,
            vec![
                (vec![field("new")], Bson::Boolean(true)),
                (vec![field("a"), field("b")], Bson::Int32(2)),
                (
                    vec![field("a"), field("c"), PathPart::Index(1)],
                    Bson::Int32(5)
                ),
            ]
        );
        assert_eq!(d.removed, vec![vec![field("gone")]]);
        assert_eq!(d.truncated, vec![(vec![field("a"), field("c")], 2)]);
    }

    #[test]
    fn inner_diffs_not_smaller_than_their_values_are_dropped() {
        // `c`: [1, 5] is 19 bytes, its diff approximates to 9 + 8 + 7 = 24; then `a` (34
        // bytes) costs 20 + 22 = 42 with `c` set whole: `a` is set whole too.
        let pad = "x".repeat(100);
        let before = doc! {"_id": 1, "pad": &pad, "a": {"b": 1, "c": [1, 2, 3]}};
        let after = doc! {"_id": 1, "pad": &pad, "a": {"b": 2, "c": [1, 5]}};
        let d = pipeline_delta(&before, &after).expect("a delta");
        assert_eq!(
            d.updated,
            vec![(
                vec![PathPart::Field("a".into())],
                Bson::Document(doc! {"b": 2, "c": [1, 5]})
            )]
        );
        assert!(d.truncated.is_empty());
    }

    #[test]
    fn a_moved_field_is_inserted_not_deleted() {
        let pad = "x".repeat(100);
        let before = doc! {"_id": 1, "a": 1, "pad": &pad};
        let after = doc! {"_id": 1, "pad": &pad, "a": 1};
        let d = pipeline_delta(&before, &after).expect("a delta");
        assert_eq!(
            d.updated,
            vec![(vec![PathPart::Field("a".into())], Bson::Int32(1))]
        );
        assert!(d.removed.is_empty());
    }
}
