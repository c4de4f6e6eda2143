//! Expression field paths through arrays: `"$a.b"` collects `b` from the documents of the
//! array `a`, and passes over everything else in it, arrays nested in it included (they are
//! not searched), so `"$a.b"` on `{a: [{b: 1}, [{b: 2}]]}` is `[1]`.
//!
//! mongod's source: `src/mongo/db/pipeline/expression.cpp`,
//! `ExpressionFieldPath::evaluatePathArray` (an element whose type is not an object is
//! skipped; a document without the field adds nothing) and `ExpressionFieldPath::evaluatePath`
//! (a value found on the way that is an array is walked by `evaluatePathArray`, any other
//! non-document ends the path as missing).

mod common;

use bson::{Bson, Document, bson, doc};
use futures_util::TryStreamExt;

/// `path` evaluated (as `$project: {v: path}`) on `doc`: `None` when missing.
async fn evaluate(t: &common::Target, id: i32, doc: Document, path: Bson) -> Option<Bson> {
    let coll = t.coll("c");
    let mut stored = doc! {"_id": id};
    stored.extend(doc);
    coll.insert_one(stored).await.unwrap();
    let rows: Vec<Document> = coll
        .aggregate(vec![
            doc! {"$match": {"_id": id}},
            doc! {"$project": {"_id": 0, "v": path}},
        ])
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    rows[0].get("v").cloned()
}

#[tokio::test]
async fn arrays_nested_in_arrays_are_not_searched() {
    let t = common::target("fp_nested").await;
    let cases = [
        (doc! {"a": [{"b": 1}, [{"b": 2}]]}, "$a.b", Some(bson!([1]))),
        (
            doc! {"a": [[{"b": 1}], [[{"b": 2}]]]},
            "$a.b",
            Some(bson!([])),
        ),
        (
            doc! {"a": [1, null, {"b": 5}, "x", {"c": 1}]},
            "$a.b",
            Some(bson!([5])),
        ),
        // A value that is itself an array is kept as it is.
        (
            doc! {"a": [{"b": [1, 2]}, {"b": [[3]]}]},
            "$a.b",
            Some(bson!([[1, 2], [[3]]])),
        ),
        // Deeper paths: each array met is walked the same way.
        (
            doc! {"a": [{"b": {"c": 1}}, {"b": [{"c": 2}, [{"c": 3}]]}]},
            "$a.b.c",
            Some(bson!([1, [2]])),
        ),
        (
            doc! {"a": {"b": [[{"c": 1}], {"c": 2}]}},
            "$a.b.c",
            Some(bson!([2])),
        ),
        (doc! {"a": 5}, "$a.b", None),
    ];
    for (i, (doc, path, expected)) in cases.into_iter().enumerate() {
        let got = evaluate(&t, i as i32, doc.clone(), Bson::from(path)).await;
        assert_eq!(got, expected, "{path} on {doc}");
    }
}

#[tokio::test]
async fn variables_holding_arrays_are_walked_the_same_way() {
    let t = common::target("fp_vars").await;
    let path = bson!({"$let": {"vars": {"x": "$a"}, "in": "$$x.b"}});
    let got = evaluate(&t, 1, doc! {"a": [{"b": 1}, [{"b": 2}], {"b": 3}]}, path).await;
    assert_eq!(got, Some(bson!([1, 3])));
    let map = bson!({"$map": {"input": [[{"b": 1}, [{"b": 2}]]], "in": "$$this.b"}});
    let got = evaluate(&t, 2, doc! {}, map).await;
    assert_eq!(got, Some(bson!([[1]])));
}
