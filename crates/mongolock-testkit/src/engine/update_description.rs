//! What an update changed, as a change stream tells it (`updateDescription`): field paths,
//! the description itself, and the element-by-element diff of an operator update. Both the
//! change log ([`super::changes`]) and the pipeline update's delta ([`super::delta`]) build
//! on it.

use bson::{Bson, Document, doc};

/// One step of a field path in an update description.
#[derive(Debug, Clone, PartialEq)]
pub enum PathPart {
    /// A field name.
    Field(String),
    /// An array index.
    Index(usize),
}

/// A path as a list of steps; `updatedFields` shows it dotted.
pub type FieldPath = Vec<PathPart>;

/// `a.0.b` for a path.
pub fn dotted(path: &[PathPart]) -> String {
    path.iter()
        .map(|p| match p {
            PathPart::Field(f) => f.clone(),
            PathPart::Index(i) => i.to_string(),
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// Whether the dotted form of a path is ambiguous: it crosses an array index, or a field
/// name that looks like a number or holds a dot (mongod's `disambiguatedPaths` rule).
fn is_ambiguous(path: &[PathPart]) -> bool {
    path.iter().any(|p| match p {
        PathPart::Index(_) => true,
        PathPart::Field(f) => {
            f.contains('.') || (!f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
        }
    })
}

/// What an update changed, as the change stream's `updateDescription` tells it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UpdateDescription {
    /// Fields set (added or changed), with their new values.
    pub updated: Vec<(FieldPath, Bson)>,
    /// Fields removed.
    pub removed: Vec<FieldPath>,
    /// Arrays that shrank, with their new size.
    pub truncated: Vec<(FieldPath, usize)>,
}

impl UpdateDescription {
    /// The `updateDescription` document; `expanded` adds `disambiguatedPaths` (mongod does
    /// so only for streams with `showExpandedEvents`).
    pub fn to_document(&self, expanded: bool) -> Document {
        let mut updated = Document::new();
        for (path, value) in &self.updated {
            updated.insert(dotted(path), value.clone());
        }
        let removed: Vec<Bson> = self.removed.iter().map(|p| dotted(p).into()).collect();
        let truncated: Vec<Bson> = self
            .truncated
            .iter()
            .map(|(p, size)| Bson::Document(doc! {"field": dotted(p), "newSize": *size as i32}))
            .collect();
        let mut out = doc! {
            "updatedFields": updated,
            "removedFields": removed,
            "truncatedArrays": truncated,
        };
        if expanded {
            let mut paths = Document::new();
            let all = self
                .updated
                .iter()
                .map(|(p, _)| p)
                .chain(&self.removed)
                .chain(self.truncated.iter().map(|(p, _)| p));
            for path in all.filter(|p| is_ambiguous(p)) {
                let parts: Vec<Bson> = path
                    .iter()
                    .map(|p| match p {
                        PathPart::Field(f) => Bson::String(f.clone()),
                        PathPart::Index(i) => Bson::Int32(*i as i32),
                    })
                    .collect();
                paths.insert(dotted(path), parts);
            }
            out.insert("disambiguatedPaths", paths);
        }
        out
    }
}

/// What an operator update changed: sub-documents and arrays are compared element by
/// element, so `updatedFields` names the innermost changed paths (`a.b`, `arr.3`), an array
/// that shrank is reported in `truncatedArrays`, and a changed value of another type is set
/// whole. (Pipeline updates are described by [`super::delta`], which follows mongod's own
/// diff and its choice of a replacement.)
///
/// That matches mongod for dotted `$set`,
/// `$inc`, `$unset` and appending `$push`; where an operator replaces a whole sub-document
/// or array (`$set: {a: {...}}`, `$pull`, `$pop`), mongod names the field itself while this
/// names the inner paths that differ (the collection does not see the operators).
pub fn diff(before: &Document, after: &Document) -> UpdateDescription {
    let mut out = UpdateDescription::default();
    diff_docs(before, after, &mut Vec::new(), &mut out);
    out
}

fn diff_docs(
    before: &Document,
    after: &Document,
    path: &mut FieldPath,
    out: &mut UpdateDescription,
) {
    for key in before.keys() {
        if !after.contains_key(key) {
            path.push(PathPart::Field(key.clone()));
            out.removed.push(path.clone());
            path.pop();
        }
    }
    for (key, value) in after {
        path.push(PathPart::Field(key.clone()));
        diff_values(before.get(key), value, path, out);
        path.pop();
    }
}

fn diff_values(
    before: Option<&Bson>,
    after: &Bson,
    path: &mut FieldPath,
    out: &mut UpdateDescription,
) {
    match (before, after) {
        (Some(old), new) if old == new => {}
        (Some(Bson::Document(old)), Bson::Document(new)) => diff_docs(old, new, path, out),
        (Some(Bson::Array(old)), Bson::Array(new)) => {
            for (i, value) in new.iter().enumerate() {
                path.push(PathPart::Index(i));
                diff_values(old.get(i), value, path, out);
                path.pop();
            }
            if new.len() < old.len() {
                out.truncated.push((path.clone(), new.len()));
            }
        }
        (_, new) => out.updated.push((path.clone(), new.clone())),
    }
}
