use super::*;
use bson::{DateTime, bson, doc};

fn dec(s: &str) -> Bson {
    Bson::Decimal128(s.parse().unwrap())
}

const NOW_MS: i64 = 1_700_000_000_123;

fn eval() -> EvalContext {
    EvalContext::at(DateTime::from_millis(NOW_MS))
}

struct Run<'a> {
    filters: Option<Vec<Bson>>,
    is_insert: bool,
    matched: Option<&'a MatchDetails>,
}

const PLAIN: Run<'static> = Run {
    filters: None,
    is_insert: false,
    matched: None,
};

fn run_with(doc: &Document, update: Bson, opts: &Run<'_>) -> Result<(Document, bool)> {
    let parsed = Update::parse(&update, opts.filters.as_deref())?;
    let ev = eval();
    let ctx = UpdateContext {
        eval: &ev,
        is_insert: opts.is_insert,
        matched: opts.matched,
    };
    let mut out = doc.clone();
    let changed = parsed.apply(&mut out, &ctx)?;
    Ok((out, changed))
}

fn run(doc: &Document, update: Bson) -> Result<(Document, bool)> {
    run_with(doc, update, &PLAIN)
}

/// Order- and type-exact document comparison with a readable failure.
fn assert_same(actual: &Document, expected: &Document, what: &str) {
    assert!(
        docs_identical(actual, expected),
        "{what}:\n  actual   {actual:?}\n  expected {expected:?}"
    );
}

fn assert_err<T: std::fmt::Debug>(result: Result<T>, code: i32, msg: &str) {
    match result {
        Ok(v) => panic!("expected error {code} '{msg}', got Ok({v:?})"),
        Err(e) => {
            assert_eq!(e.code, code, "wrong code for '{}'", e.errmsg);
            assert_eq!(e.errmsg, msg);
        }
    }
}

/// (start document, update, expected document, expected "changed").
fn check_table(cases: Vec<(Document, Bson, Document, bool)>) {
    for (start, update, expected, changed) in cases {
        let what = format!("{start:?} with {update:?}");
        let (out, did) = run(&start, update).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_same(&out, &expected, &what);
        assert_eq!(did, changed, "changed flag for {what}");
    }
}

#[test]
fn set_cases() {
    check_table(vec![
        (
            doc! {"_id": 1, "a": 1},
            bson!({"$set": {"a": 2}}),
            doc! {"_id": 1, "a": 2},
            true,
        ),
        (
            doc! {"_id": 1, "a": 1},
            bson!({"$set": {"a": 1}}),
            doc! {"_id": 1, "a": 1},
            false,
        ),
        // Same value, different BSON type: a modification.
        (
            doc! {"_id": 1, "a": 1},
            bson!({"$set": {"a": 1.0}}),
            doc! {"_id": 1, "a": 1.0},
            true,
        ),
        // Existing fields keep their position; new ones append in path order.
        (
            doc! {"_id": 1, "a": 1, "b": 2},
            bson!({"$set": {"z": 1, "c": 2, "a": 3}}),
            doc! {"_id": 1, "a": 3, "b": 2, "c": 2, "z": 1},
            true,
        ),
        (
            doc! {"_id": 1},
            bson!({"$set": {"a.b.c": 1}}),
            doc! {"_id": 1, "a": {"b": {"c": 1}}},
            true,
        ),
        (
            doc! {"_id": 1, "a": {"x": 1}},
            bson!({"$set": {"a.y": 2}}),
            doc! {"_id": 1, "a": {"x": 1, "y": 2}},
            true,
        ),
        // Numeric components index arrays, padding with nulls.
        (
            doc! {"_id": 1, "a": [1]},
            bson!({"$set": {"a.3": 9}}),
            doc! {"_id": 1, "a": [1, null, null, 9]},
            true,
        ),
        (
            doc! {"_id": 1, "a": [{"b": 1}, {"b": 2}]},
            bson!({"$set": {"a.1.b": 5}}),
            doc! {"_id": 1, "a": [{"b": 1}, {"b": 5}]},
            true,
        ),
        (
            doc! {"_id": 1, "a": [1]},
            bson!({"$set": {"a.2.b": 1}}),
            doc! {"_id": 1, "a": [1, null, {"b": 1}]},
            true,
        ),
        // Numeric field names are processed in numeric order, others lexicographically.
        (
            doc! {"_id": 1, "a": {}},
            bson!({"$set": {"a.10": 1, "a.2": 2}}),
            doc! {"_id": 1, "a": {"2": 2, "10": 1}},
            true,
        ),
        // Missing numeric component on a document creates a field, not an array.
        (
            doc! {"_id": 1},
            bson!({"$set": {"a.0": 1}}),
            doc! {"_id": 1, "a": {"0": 1}},
            true,
        ),
        (
            doc! {"_id": 1, "a": 1},
            bson!({"$set": {}}),
            doc! {"_id": 1, "a": 1},
            false,
        ),
        // Field order inside documents matters for no-op detection.
        (
            doc! {"_id": 1, "a": {"x": 1, "y": 2}},
            bson!({"$set": {"a": {"y": 2, "x": 1}}}),
            doc! {"_id": 1, "a": {"y": 2, "x": 1}},
            true,
        ),
        // $set of _id to the same value is allowed.
        (
            doc! {"_id": 1, "a": 1},
            bson!({"$set": {"_id": 1, "a": 2}}),
            doc! {"_id": 1, "a": 2},
            true,
        ),
    ]);
}

#[test]
fn unset_cases() {
    check_table(vec![
        (
            doc! {"_id": 1, "a": 1, "b": 2, "c": 3},
            bson!({"$unset": {"b": ""}}),
            doc! {"_id": 1, "a": 1, "c": 3},
            true,
        ),
        (
            doc! {"_id": 1, "a": 1},
            bson!({"$unset": {"x": 1}}),
            doc! {"_id": 1, "a": 1},
            false,
        ),
        (
            doc! {"_id": 1, "a": {"b": 1, "c": 2}},
            bson!({"$unset": {"a.b": 1}}),
            doc! {"_id": 1, "a": {"c": 2}},
            true,
        ),
        // On an array element $unset leaves null.
        (
            doc! {"_id": 1, "a": [1, 2, 3]},
            bson!({"$unset": {"a.1": 1}}),
            doc! {"_id": 1, "a": [1, null, 3]},
            true,
        ),
        (
            doc! {"_id": 1, "a": [1]},
            bson!({"$unset": {"a.5": 1}}),
            doc! {"_id": 1, "a": [1]},
            false,
        ),
        // Paths through scalars or non-numeric array components do nothing.
        (
            doc! {"_id": 1, "a": 1},
            bson!({"$unset": {"a.b": 1}}),
            doc! {"_id": 1, "a": 1},
            false,
        ),
        (
            doc! {"_id": 1, "a": [{"b": 1}]},
            bson!({"$unset": {"a.b": 1}}),
            doc! {"_id": 1, "a": [{"b": 1}]},
            false,
        ),
    ]);
}

#[test]
fn arithmetic_cases() {
    check_table(vec![
        (
            doc! {"_id": 1, "a": 1},
            bson!({"$inc": {"a": 2}}),
            doc! {"_id": 1, "a": 3},
            true,
        ),
        (
            doc! {"_id": 1, "a": 1},
            bson!({"$inc": {"a": 0}}),
            doc! {"_id": 1, "a": 1},
            false,
        ),
        (
            doc! {"_id": 1, "a": 1},
            bson!({"$inc": {"a": 0.0}}),
            doc! {"_id": 1, "a": 1.0},
            true,
        ),
        (
            doc! {"_id": 1, "a": i32::MAX},
            bson!({"$inc": {"a": 1}}),
            doc! {"_id": 1, "a": i64::from(i32::MAX) + 1},
            true,
        ),
        (
            doc! {"_id": 1, "a": 5_i64},
            bson!({"$inc": {"a": 1}}),
            doc! {"_id": 1, "a": 6_i64},
            true,
        ),
        (
            doc! {"_id": 1, "a": 1},
            bson!({"$inc": {"a": 1.5}}),
            doc! {"_id": 1, "a": 2.5},
            true,
        ),
        (
            doc! {"_id": 1},
            bson!({"$inc": {"a.b": 5_i64}}),
            doc! {"_id": 1, "a": {"b": 5_i64}},
            true,
        ),
        (
            doc! {"_id": 1, "a": 3},
            bson!({"$mul": {"a": 4}}),
            doc! {"_id": 1, "a": 12},
            true,
        ),
        (
            doc! {"_id": 1, "a": 70000},
            bson!({"$mul": {"a": 70000}}),
            doc! {"_id": 1, "a": 4_900_000_000_i64},
            true,
        ),
        (
            doc! {"_id": 1, "a": 3},
            bson!({"$mul": {"a": 1}}),
            doc! {"_id": 1, "a": 3},
            false,
        ),
        // $mul on a missing field creates a zero of the multiplier's type.
        (
            doc! {"_id": 1},
            bson!({"$mul": {"a": 7_i64, "b": 2.5}}),
            doc! {"_id": 1, "a": 0_i64, "b": 0.0},
            true,
        ),
        (
            doc! {"_id": 1, "d": dec("1.5")},
            bson!({"$inc": {"d": 1, "n": dec("2.50")}, "$mul": {"m": dec("-1.5")}}),
            doc! {"_id": 1, "d": dec("2.5"), "m": dec("-0.0"), "n": dec("2.50")},
            true,
        ),
        (
            doc! {"_id": 1, "d": dec("1.5")},
            bson!({"$inc": {"d": dec("0")}}),
            doc! {"_id": 1, "d": dec("1.5")},
            false,
        ),
        (
            doc! {"_id": 1, "d": dec("1.5")},
            bson!({"$inc": {"d": dec("0.00")}}),
            doc! {"_id": 1, "d": dec("1.50")},
            true,
        ),
    ]);
}

#[test]
fn arithmetic_errors() {
    let d = doc! {"_id": 1, "a": "x", "l": i64::MAX};
    assert_err(
        run(&d, bson!({"$inc": {"a": 1}})),
        14,
        "Cannot apply $inc to a value of non-numeric type. {_id: 1} has the field 'a' of non-numeric type string",
    );
    assert_err(
        run(&d, bson!({"$mul": {"a": 1}})),
        14,
        "Cannot apply $mul to a value of non-numeric type. {_id: 1} has the field 'a' of non-numeric type string",
    );
    assert_err(
        run(&d, bson!({"$inc": {"b": "1"}})),
        14,
        "Cannot increment with non-numeric argument: {b: \"1\"}",
    );
    assert_err(
        run(&d, bson!({"$mul": {"b": null}})),
        14,
        "Cannot multiply with non-numeric argument: {b: null}",
    );
    assert_err(
        run(&d, bson!({"$inc": {"l": 1}})),
        2,
        "Failed to apply $inc operations to current value ((NumberLong)9223372036854775807) for document {_id: 1}",
    );
}

#[test]
fn min_max_cases() {
    check_table(vec![
        (
            doc! {"_id": 1, "a": 5},
            bson!({"$min": {"a": 3}}),
            doc! {"_id": 1, "a": 3},
            true,
        ),
        (
            doc! {"_id": 1, "a": 5},
            bson!({"$min": {"a": 7}}),
            doc! {"_id": 1, "a": 5},
            false,
        ),
        // Equal values of another numeric type do not replace.
        (
            doc! {"_id": 1, "a": 5},
            bson!({"$max": {"a": 5.0}}),
            doc! {"_id": 1, "a": 5},
            false,
        ),
        (
            doc! {"_id": 1, "a": 5},
            bson!({"$max": {"a": 9_i64}}),
            doc! {"_id": 1, "a": 9_i64},
            true,
        ),
        // BSON order across types: strings sort above numbers, null below.
        (
            doc! {"_id": 1, "a": 5},
            bson!({"$max": {"a": "s"}}),
            doc! {"_id": 1, "a": "s"},
            true,
        ),
        (
            doc! {"_id": 1, "a": 5},
            bson!({"$min": {"a": null}}),
            doc! {"_id": 1, "a": null},
            true,
        ),
        (
            doc! {"_id": 1},
            bson!({"$max": {"a": 1}}),
            doc! {"_id": 1, "a": 1},
            true,
        ),
    ]);
}

#[test]
fn set_on_insert_only_applies_on_insert() {
    let d = doc! {"_id": 1};
    let update = bson!({"$set": {"a": 1}, "$setOnInsert": {"b": 2}});
    let (out, changed) = run(&d, update.clone()).unwrap();
    assert_same(&out, &doc! {"_id": 1, "a": 1}, "update");
    assert!(changed);
    let (out, _) = run_with(
        &d,
        update,
        &Run {
            is_insert: true,
            ..PLAIN
        },
    )
    .unwrap();
    assert_same(&out, &doc! {"_id": 1, "a": 1, "b": 2}, "insert");
    // On an update, $setOnInsert does not even traverse its path.
    let (out, changed) = run(
        &doc! {"_id": 1, "a": 1},
        bson!({"$setOnInsert": {"a.b": 1}}),
    )
    .unwrap();
    assert_same(&out, &doc! {"_id": 1, "a": 1}, "no traversal");
    assert!(!changed);
}

#[test]
fn current_date() {
    let (out, changed) = run(
        &doc! {"_id": 1},
        bson!({"$currentDate": {"d": true, "t": {"$type": "timestamp"}, "e": {"$type": "date"}}}),
    )
    .unwrap();
    assert!(changed);
    let now = DateTime::from_millis(NOW_MS);
    let ts = Timestamp {
        time: (NOW_MS / 1000) as u32,
        increment: 1,
    };
    assert_same(
        &out,
        &doc! {"_id": 1, "d": now, "e": now, "t": ts},
        "currentDate",
    );
    assert_err(
        run(&doc! {}, bson!({"$currentDate": {"d": 1}})),
        2,
        "int is not valid type for $currentDate. Please use a boolean ('true') or a $type expression ({$type: 'timestamp/date'}).",
    );
    assert_err(
        run(&doc! {}, bson!({"$currentDate": {"d": {"x": 1}}})),
        2,
        "Unrecognized $currentDate option: x",
    );
    assert_err(
        run(&doc! {}, bson!({"$currentDate": {"d": {"$type": "int"}}})),
        2,
        "The '$type' string field is required to be 'date' or 'timestamp': {$currentDate: {field : {$type: 'date'}}}",
    );
}

#[test]
fn push_cases() {
    check_table(vec![
        (
            doc! {"_id": 1, "a": [1]},
            bson!({"$push": {"a": 2}}),
            doc! {"_id": 1, "a": [1, 2]},
            true,
        ),
        (
            doc! {"_id": 1},
            bson!({"$push": {"a": [1]}}),
            doc! {"_id": 1, "a": [[1]]},
            true,
        ),
        // A document without $each is pushed as a value, even with other $ fields.
        (
            doc! {"_id": 1},
            bson!({"$push": {"a": {"$slice": 1}}}),
            doc! {"_id": 1, "a": [{"$slice": 1}]},
            true,
        ),
        (
            doc! {"_id": 1, "a": [1, 2]},
            bson!({"$push": {"a": {"$each": [3, 4]}}}),
            doc! {"_id": 1, "a": [1, 2, 3, 4]},
            true,
        ),
        (
            doc! {"_id": 1, "a": [1, 2]},
            bson!({"$push": {"a": {"$each": []}}}),
            doc! {"_id": 1, "a": [1, 2]},
            false,
        ),
        (
            doc! {"_id": 1, "a": [1, 2, 3]},
            bson!({"$push": {"a": {"$each": [9], "$position": 1}}}),
            doc! {"_id": 1, "a": [1, 9, 2, 3]},
            true,
        ),
        (
            doc! {"_id": 1, "a": [1, 2, 3]},
            bson!({"$push": {"a": {"$each": [9], "$position": -1}}}),
            doc! {"_id": 1, "a": [1, 2, 9, 3]},
            true,
        ),
        (
            doc! {"_id": 1, "a": [5, 1]},
            bson!({"$push": {"a": {"$each": [3], "$sort": 1, "$slice": 2}}}),
            doc! {"_id": 1, "a": [1, 3]},
            true,
        ),
        (
            doc! {"_id": 1, "a": [5, 1]},
            bson!({"$push": {"a": {"$each": [3], "$sort": -1, "$slice": -2}}}),
            doc! {"_id": 1, "a": [3, 1]},
            true,
        ),
        (
            doc! {"_id": 1, "a": [{"s": 2, "n": "b"}, {"s": 1, "n": "a"}]},
            bson!({"$push": {"a": {"$each": [{"s": 3, "n": "c"}], "$sort": {"s": -1}}}}),
            doc! {"_id": 1, "a": [{"s": 3, "n": "c"}, {"s": 2, "n": "b"}, {"s": 1, "n": "a"}]},
            true,
        ),
        // Sorting by an embedded field: non-documents and missing fields sort as null.
        (
            doc! {"_id": 1, "a": [{"p": {"q": [0, 5]}}, 7, {"p": {"q": [0, 1]}}]},
            bson!({"$push": {"a": {"$each": [], "$sort": {"p.q.1": 1}}}}),
            doc! {"_id": 1, "a": [7, {"p": {"q": [0, 1]}}, {"p": {"q": [0, 5]}}]},
            true,
        ),
        (
            doc! {"_id": 1, "a": [1, 2, 3]},
            bson!({"$push": {"a": {"$each": [], "$slice": 0}}}),
            doc! {"_id": 1, "a": []},
            true,
        ),
    ]);
}

#[test]
fn modification_counting_follows_mongod() {
    // $push with $sort and $currentDate always count as modifications.
    let sorted = doc! {"_id": 1, "a": [1, 2]};
    let (out, changed) = run(&sorted, bson!({"$push": {"a": {"$each": [], "$sort": 1}}})).unwrap();
    assert_same(&out, &sorted, "already sorted");
    assert!(changed);
    let (_, changed) = run(&sorted, bson!({"$push": {"a": {"$each": [], "$slice": 5}}})).unwrap();
    assert!(!changed);
    let now = doc! {"_id": 1, "d": DateTime::from_millis(NOW_MS)};
    let (out, changed) = run(&now, bson!({"$currentDate": {"d": true}})).unwrap();
    assert_same(&out, &now, "same date");
    assert!(changed);
}

#[test]
fn messages_name_the_path_taken() {
    let d = doc! {"_id": 1, "a": [{"s": "x"}, {"s": "y"}]};
    let matched = MatchDetails {
        elem_match_index: Some(1),
    };
    let opts = Run {
        matched: Some(&matched),
        ..PLAIN
    };
    assert_err(
        run_with(&d, bson!({"$push": {"a.$.s": 1}}), &opts),
        2,
        "The field 'a.1.s' must be an array but is of type string in document {_id: 1}",
    );
    assert_err(
        run(&d, bson!({"$pop": {"a.$[].s": 1}})),
        14,
        "Path 'a.0.s' contains an element of non-array type 'string'",
    );
    assert_err(
        run(&doc! {"a": 1}, bson!({"$push": {"a": 1}})),
        2,
        "The field 'a' must be an array but is of type int in document {no id}",
    );
}

#[test]
fn push_errors() {
    let d = doc! {"_id": 1, "s": "x"};
    assert_err(
        run(&d, bson!({"$push": {"s": 1}})),
        2,
        "The field 's' must be an array but is of type string in document {_id: 1}",
    );
    assert_err(
        run(&d, bson!({"$push": {"a": {"$each": [1], "$foo": 1}}})),
        2,
        "Unrecognized clause in $push: $foo",
    );
    assert_err(
        run(&d, bson!({"$push": {"a": {"$each": 1}}})),
        2,
        "The argument to $each in $push must be an array but it was of type: int",
    );
    assert_err(
        run(&d, bson!({"$push": {"a": {"$each": [1], "$slice": "x"}}})),
        2,
        "The value for $slice must be an integer value but was given type: string",
    );
    assert_err(
        run(&d, bson!({"$push": {"a": {"$each": [1], "$sort": {}}}})),
        2,
        "The $sort pattern is empty when it should be a set of fields.",
    );
    assert_err(
        run(
            &d,
            bson!({"$push": {"a": {"$each": [1], "$sort": {"x": 2}}}}),
        ),
        2,
        "The $sort element value must be either 1 or -1",
    );
    assert_err(
        run(&d, bson!({"$push": {"a": {"$each": [1], "$sort": 2}}})),
        2,
        "The $sort is invalid: use 1/-1 to sort the whole element, or {field:1/-1} to sort embedded fields",
    );
}

#[test]
fn add_to_set_cases() {
    check_table(vec![
        (
            doc! {"_id": 1, "a": [1, 2]},
            bson!({"$addToSet": {"a": 3}}),
            doc! {"_id": 1, "a": [1, 2, 3]},
            true,
        ),
        // Equality is MongoDB's: 2.0 equals 2.
        (
            doc! {"_id": 1, "a": [1, 2]},
            bson!({"$addToSet": {"a": 2.0}}),
            doc! {"_id": 1, "a": [1, 2]},
            false,
        ),
        (
            doc! {"_id": 1, "a": [1]},
            bson!({"$addToSet": {"a": {"$each": [1, 4, 4, 5]}}}),
            doc! {"_id": 1, "a": [1, 4, 5]},
            true,
        ),
        (
            doc! {"_id": 1},
            bson!({"$addToSet": {"a": {"$each": [3, 3]}}}),
            doc! {"_id": 1, "a": [3]},
            true,
        ),
        // Documents compare with field order.
        (
            doc! {"_id": 1, "a": [{"x": 1, "y": 2}]},
            bson!({"$addToSet": {"a": {"y": 2, "x": 1}}}),
            doc! {"_id": 1, "a": [{"x": 1, "y": 2}, {"y": 2, "x": 1}]},
            true,
        ),
    ]);
    assert_err(
        run(&doc! {"_id": 1, "a": 1}, bson!({"$addToSet": {"a": 1}})),
        2,
        "Cannot apply $addToSet to non-array field. Field named 'a' has non-array type int",
    );
    assert_err(
        run(
            &doc! {},
            bson!({"$addToSet": {"a": {"$each": [1], "x": 1}}}),
        ),
        2,
        "Found unexpected fields after $each in $addToSet: { $each: [ 1 ], x: 1 }",
    );
}

#[test]
fn pop_pull_pull_all_cases() {
    check_table(vec![
        (
            doc! {"_id": 1, "a": [1, 2, 3]},
            bson!({"$pop": {"a": 1}}),
            doc! {"_id": 1, "a": [1, 2]},
            true,
        ),
        (
            doc! {"_id": 1, "a": [1, 2, 3]},
            bson!({"$pop": {"a": -1}}),
            doc! {"_id": 1, "a": [2, 3]},
            true,
        ),
        (
            doc! {"_id": 1, "a": []},
            bson!({"$pop": {"a": 1}}),
            doc! {"_id": 1, "a": []},
            false,
        ),
        (
            doc! {"_id": 1},
            bson!({"$pop": {"a": 1}}),
            doc! {"_id": 1},
            false,
        ),
        (
            doc! {"_id": 1, "a": [1, 2, 1.0, 3]},
            bson!({"$pull": {"a": 1}}),
            doc! {"_id": 1, "a": [2, 3]},
            true,
        ),
        // Equality on the element itself: a nested [1] is not pulled by 1.
        (
            doc! {"_id": 1, "a": [[1], 2]},
            bson!({"$pull": {"a": 1}}),
            doc! {"_id": 1, "a": [[1], 2]},
            false,
        ),
        (
            doc! {"_id": 1},
            bson!({"$pull": {"a": 1}}),
            doc! {"_id": 1},
            false,
        ),
        (
            doc! {"_id": 1, "a": [1, 2, 3, 2]},
            bson!({"$pullAll": {"a": [2, 3]}}),
            doc! {"_id": 1, "a": [1]},
            true,
        ),
        (
            doc! {"_id": 1, "a": [1]},
            bson!({"$pullAll": {"a": [5]}}),
            doc! {"_id": 1, "a": [1]},
            false,
        ),
    ]);
    let d = doc! {"_id": 1, "a": "x"};
    assert_err(
        run(&d, bson!({"$pop": {"a": 2}})),
        9,
        "$pop expects 1 or -1, found: 2",
    );
    assert_err(
        run(&d, bson!({"$pop": {"a": 2.0}})),
        9,
        "$pop expects 1 or -1, found: 2",
    );
    assert_err(
        run(&d, bson!({"$pop": {"a": 1.5}})),
        9,
        "Expected an integer: a: 1.5",
    );
    assert_err(
        run(&d, bson!({"$pop": {"a": "x"}})),
        9,
        "Expected a number in: a: \"x\"",
    );
    assert_err(
        run(&d, bson!({"$pop": {"a": 1}})),
        14,
        "Path 'a' contains an element of non-array type 'string'",
    );
    assert_err(
        run(&d, bson!({"$pull": {"a": 1}})),
        2,
        "Cannot apply $pull to a non-array value",
    );
    assert_err(
        run(&d, bson!({"$pullAll": {"a": [1]}})),
        2,
        "Cannot apply $pull to a non-array value",
    );
    assert_err(
        run(&d, bson!({"$pullAll": {"a": 1}})),
        2,
        "$pullAll requires an array argument but was given a int",
    );
}

#[test]
fn pull_with_conditions() {
    check_table(vec![
        (
            doc! {"_id": 1, "a": [1, 5, 7, 3]},
            bson!({"$pull": {"a": {"$gte": 5}}}),
            doc! {"_id": 1, "a": [1, 3]},
            true,
        ),
        (
            doc! {"_id": 1, "r": [{"score": 8, "item": "A"}, {"score": 7, "item": "B"}, 3]},
            bson!({"$pull": {"r": {"score": 8}}}),
            doc! {"_id": 1, "r": [{"score": 7, "item": "B"}, 3]},
            true,
        ),
    ]);
}

#[test]
fn rename_cases() {
    check_table(vec![
        // The field moves to the end.
        (
            doc! {"_id": 1, "a": 1, "b": 2},
            bson!({"$rename": {"a": "c"}}),
            doc! {"_id": 1, "b": 2, "c": 1},
            true,
        ),
        // An existing destination is overwritten in place.
        (
            doc! {"_id": 1, "a": 1, "b": 2, "c": 3},
            bson!({"$rename": {"a": "b"}}),
            doc! {"_id": 1, "b": 1, "c": 3},
            true,
        ),
        (
            doc! {"a": 2, "b": []},
            bson!({"$rename": {"a": "b"}}),
            doc! {"b": 2},
            true,
        ),
        (
            doc! {"a": [], "b": 2},
            bson!({"$rename": {"a": "b"}}),
            doc! {"b": []},
            true,
        ),
        // A missing array element is a missing source.
        (
            doc! {"_id": 1, "a": [{"x": 1}]},
            bson!({"$rename": {"a.5.x": "b"}}),
            doc! {"_id": 1, "a": [{"x": 1}]},
            false,
        ),
        (
            doc! {"_id": 1, "b": 2},
            bson!({"$rename": {"a": "c"}}),
            doc! {"_id": 1, "b": 2},
            false,
        ),
        (
            doc! {"_id": 1, "a": {"x": 1, "y": 2}},
            bson!({"$rename": {"a.x": "b.z"}}),
            doc! {"_id": 1, "a": {"y": 2}, "b": {"z": 1}},
            true,
        ),
    ]);
    let d = doc! {"_id": 1, "a": [{"x": 1}], "b": [1], "s": 1};
    assert_err(
        run(&d, bson!({"$rename": {"a.0.x": "c"}})),
        2,
        "The source field cannot be an array element, 'a.0.x' in doc with _id: 1 has an array field called 'a'",
    );
    assert_err(
        run(
            &doc! {"a": [{"a": 1}, {"b": 2}]},
            bson!({"$rename": {"a.a": "b"}}),
        ),
        28,
        "cannot use the part (a of a.a) to traverse the element ({a: [ { a: 1 }, { b: 2 } ]})",
    );
    assert_err(
        run(&d, bson!({"$rename": {"s.t": "z"}})),
        28,
        "cannot use the part (t of s.t) to traverse the element ({s: 1})",
    );
    assert_err(
        run(&doc! {"b": [1]}, bson!({"$rename": {"b.0": "c"}})),
        2,
        "The source field cannot be an array element, 'b.0' in doc with no id has an array field called 'b'",
    );
    assert_err(
        run(&d, bson!({"$rename": {"s": "b.c"}})),
        2,
        "The destination field cannot be an array element, 'b.c' in doc with _id: 1 has an array field called 'b'",
    );
    assert_err(
        run(&d, bson!({"$rename": {"s": "b.0"}})),
        2,
        "The destination field cannot be an array element, 'b.0' in doc with _id: 1 has an array field called 'b'",
    );
    assert_err(
        run(&d, bson!({"$rename": {"s": "s"}})),
        2,
        "The source and target field for $rename must differ: s: \"s\"",
    );
    assert_err(
        run(&d, bson!({"$rename": {"s": "s.t"}})),
        2,
        "The source and target field for $rename must not be on the same path: s: \"s.t\"",
    );
    assert_err(
        run(&d, bson!({"$rename": {"s": 1}})),
        2,
        "The 'to' field for $rename must be a string: s: 1",
    );
    assert_err(
        run(&d, bson!({"$rename": {"a.$": "c"}})),
        2,
        "The source field for $rename may not be dynamic: a.$",
    );
    assert_err(
        run(&d, bson!({"$rename": {"s": "x", "q": "x"}})),
        40,
        "Updating the path 'x' would create a conflict at 'x'",
    );
}

#[test]
fn bit_cases() {
    check_table(vec![
        (
            doc! {"_id": 1, "a": 13},
            bson!({"$bit": {"a": {"and": 10}}}),
            doc! {"_id": 1, "a": 8},
            true,
        ),
        (
            doc! {"_id": 1, "a": 3},
            bson!({"$bit": {"a": {"or": 5_i64}}}),
            doc! {"_id": 1, "a": 7_i64},
            true,
        ),
        (
            doc! {"_id": 1},
            bson!({"$bit": {"a": {"xor": 5}}}),
            doc! {"_id": 1, "a": 5},
            true,
        ),
    ]);
    assert_err(
        run(&doc! {}, bson!({"$bit": {"a": {"and": 1.5}}})),
        2,
        "The $bit modifier field must be an Integer(32/64 bit); a 'double' is not supported here: {and: 1.5}",
    );
}

#[test]
fn parse_errors() {
    let d = doc! {"_id": 1, "a": 1};
    let cases: Vec<(Bson, i32, &str)> = vec![
        (
            bson!({"$foo": {"a": 1}}),
            9,
            "Unknown modifier: $foo. Expected a valid update modifier or pipeline-style update specified as an array",
        ),
        (
            bson!({"$set": {"a": 1}, "b": 2}),
            9,
            "Unknown modifier: b. Expected a valid update modifier or pipeline-style update specified as an array",
        ),
        (
            bson!({"$set": 1}),
            9,
            "Modifiers operate on fields but we found type int instead. For example: {$mod: {<field>: ...}} not {$set: 1}",
        ),
        (
            bson!({"$set": {"a": 1}, "$inc": {"a": 1}}),
            40,
            "Updating the path 'a' would create a conflict at 'a'",
        ),
        (
            bson!({"$set": {"a": 1}, "$inc": {"a.b": 1}}),
            40,
            "Updating the path 'a.b' would create a conflict at 'a'",
        ),
        (
            bson!({"$set": {"a.b.c": 1, "a.b": 1}}),
            40,
            "Updating the path 'a.b' would create a conflict at 'a.b'",
        ),
        (
            bson!({"$set": {"": 1}}),
            56,
            "An empty update path is not valid.",
        ),
        (
            bson!({"$set": {"a..b": 1}}),
            56,
            "The update path 'a..b' contains an empty field name, which is not allowed.",
        ),
        (
            bson!({"$set": {"a.$x": 1}}),
            52,
            "The dollar ($) prefixed field '$x' in 'a.$x' is not valid for storage.",
        ),
        (
            bson!({"$set": {"a.$.b.$": 1}}),
            2,
            "Too many positional (i.e. '$') elements found in path 'a.$.b.$'",
        ),
        (
            bson!({"$set": {"$.a.$": 1}}),
            2,
            "Too many positional (i.e. '$') elements found in path '$.a.$'",
        ),
        (
            bson!({"$set": {"$.a": 1}}),
            2,
            "Cannot have positional (i.e. '$') element in the first position in path '$.a'",
        ),
        (
            bson!({"$set": {"$z": 1}}),
            52,
            "The dollar ($) prefixed field '$z' in '$z' is not valid for storage.",
        ),
        (
            Bson::Int32(3),
            9,
            "Update argument must be either an object or an array",
        ),
    ];
    for (update, code, msg) in cases {
        assert_err(run(&d, update), code, msg);
    }
}

#[test]
fn path_not_viable_and_padding_limit() {
    let d = doc! {"_id": 1, "a": 1, "arr": [{"b": 1}], "n": {"b": 1}, "e": []};
    assert_err(
        run(&d, bson!({"$set": {"a.b": 1}})),
        28,
        "Cannot create field 'b' in element {a: 1}",
    );
    assert_err(
        run(&d, bson!({"$inc": {"n.b.c": 1}})),
        28,
        "Cannot create field 'c' in element {b: 1}",
    );
    assert_err(
        run(&d, bson!({"$set": {"arr.b": 1}})),
        28,
        "Cannot create field 'b' in element {arr: [ { b: 1 } ]}",
    );
    assert_err(
        run(&d, bson!({"$set": {"e.99999999": 1}})),
        34,
        "can't backfill more than 1500000 elements",
    );
    // An index beyond usize is just a field name an array cannot have.
    assert_err(
        run(&d, bson!({"$set": {"e.99999999999999999999999": 1}})),
        28,
        "Cannot create field '99999999999999999999999' in element {e: []}",
    );
    // Paths deeper than the storage nesting limit are refused, not recursed into.
    let deep = vec!["a"; 200_000].join(".");
    let mut set = Document::new();
    set.insert(deep.clone(), 1);
    assert_err(
        run(&doc! {"_id": 1}, bson!({"$set": set})),
        15,
        "Document exceeds maximum nesting depth of 180",
    );
    let mut filter = Document::new();
    filter.insert(deep, 1);
    assert_err(
        upsert_seed(&filter, false),
        15,
        "Document exceeds maximum nesting depth of 180",
    );
    let at_limit = vec!["a"; 180].join(".");
    assert!(run(&doc! {"_id": 1}, bson!({"$set": {at_limit: 1}})).is_ok());
    // Exactly at the padding limit is fine.
    let (out, _) = run(&doc! {"_id": 1, "e": []}, bson!({"$set": {"e.1500000": 1}})).unwrap();
    assert_eq!(out.get_array("e").unwrap().len(), 1_500_001);
}

#[test]
fn id_is_immutable() {
    let d = doc! {"_id": 1, "a": 1};
    assert_err(
        run(&d, bson!({"$set": {"_id": 2}})),
        66,
        "Performing an update on the path '_id' would modify the immutable field '_id'",
    );
    assert_err(
        run(&d, bson!({"$unset": {"_id": 1}})),
        66,
        "Performing an update on the path '_id' would modify the immutable field '_id'",
    );
    assert_err(
        run(&doc! {"_id": {"x": 1}}, bson!({"$inc": {"_id.x": 1}})),
        66,
        "Performing an update on the path '_id.x' would modify the immutable field '_id'",
    );
    assert_err(
        run(&d, bson!({"$rename": {"_id": "b"}})),
        66,
        "Performing an update on the path '_id' would modify the immutable field '_id'",
    );
    // Same value of another type is still a modification of _id.
    assert_err(
        run(&d, bson!({"$set": {"_id": 1.0}})),
        66,
        "Performing an update on the path '_id' would modify the immutable field '_id'",
    );
    assert_err(
        run(&d, bson!({"$inc": {"_id": 1}})),
        66,
        "Performing an update on the path '_id' would modify the immutable field '_id'",
    );
    let (out, changed) = run(&d, bson!({"$inc": {"_id": 0}, "$max": {"a": 0}})).unwrap();
    assert_same(&out, &d, "no-op on _id");
    assert!(!changed);
    let (out, changed) = run(&d, bson!({"$set": {"_id": 1}})).unwrap();
    assert_same(&out, &d, "same _id");
    assert!(!changed);
    // An upsert whose seed has no _id may set it.
    let (out, _) = run_with(
        &doc! {"a": 1},
        bson!({"$set": {"_id": 7}}),
        &Run {
            is_insert: true,
            ..PLAIN
        },
    )
    .unwrap();
    assert_same(&out, &doc! {"a": 1, "_id": 7}, "upsert sets _id");
    assert_err(
        run_with(
            &doc! {"a": 1},
            bson!({"$set": {"_id": [1]}}),
            &Run {
                is_insert: true,
                ..PLAIN
            },
        ),
        53,
        "The '_id' value cannot be of type array",
    );
}

#[test]
fn replacement() {
    let d = doc! {"_id": 1, "a": 1, "b": 2};
    let parsed = Update::parse(&bson!({"b": 3, "c": 4}), None).unwrap();
    assert!(parsed.is_replacement());
    assert!(Update::parse(&bson!({}), None).unwrap().is_replacement());
    assert!(
        !Update::parse(&bson!({"$set": {}}), None)
            .unwrap()
            .is_replacement()
    );
    check_table(vec![
        (
            d.clone(),
            bson!({"b": 3, "c": 4}),
            doc! {"_id": 1, "b": 3, "c": 4},
            true,
        ),
        // The old _id stays first even when the replacement lists it later.
        (
            d.clone(),
            bson!({"x": 1, "_id": 1}),
            doc! {"_id": 1, "x": 1},
            true,
        ),
        (
            d.clone(),
            bson!({"_id": 1, "a": 1, "b": 2}),
            d.clone(),
            false,
        ),
        (
            d.clone(),
            bson!({"b": 2, "a": 1}),
            doc! {"_id": 1, "b": 2, "a": 1},
            true,
        ),
        (d.clone(), bson!({}), doc! {"_id": 1}, true),
    ]);
    assert_err(
        run(&d, bson!({"_id": 2, "a": 1})),
        66,
        "After applying the update, the (immutable) field '_id' was found to have been altered to _id: 2",
    );
    assert_err(
        run(&d, bson!({"a": 1, "$x": 1})),
        52,
        "The dollar ($) prefixed field '$x' in '$x' is not allowed in the context of an update's replacement document. Consider using an aggregation pipeline with $replaceWith.",
    );
    // Replacing an upsert seed without _id keeps the replacement's _id, first.
    let (out, _) = run_with(
        &doc! {},
        bson!({"a": 1, "_id": 5}),
        &Run {
            is_insert: true,
            ..PLAIN
        },
    )
    .unwrap();
    assert_same(&out, &doc! {"_id": 5, "a": 1}, "seeded replacement");
}

#[test]
fn positional_operator() {
    let d = doc! {"_id": 1, "a": [{"b": 1}, {"b": 2}, {"b": 3}]};
    let matched = MatchDetails {
        elem_match_index: Some(1),
    };
    let (out, changed) = run_with(
        &d,
        bson!({"$set": {"a.$.b": 20}}),
        &Run {
            matched: Some(&matched),
            ..PLAIN
        },
    )
    .unwrap();
    assert!(changed);
    assert_same(
        &out,
        &doc! {"_id": 1, "a": [{"b": 1}, {"b": 20}, {"b": 3}]},
        "a.$.b",
    );
    let (out, _) = run_with(
        &doc! {"_id": 1, "a": [5, 6]},
        bson!({"$inc": {"a.$": 1}}),
        &Run {
            matched: Some(&matched),
            ..PLAIN
        },
    )
    .unwrap();
    assert_same(&out, &doc! {"_id": 1, "a": [5, 7]}, "a.$");
    let none = MatchDetails {
        elem_match_index: None,
    };
    for opts in [
        PLAIN,
        Run {
            matched: Some(&none),
            ..PLAIN
        },
    ] {
        assert_err(
            run_with(&d, bson!({"$set": {"a.$.b": 1}}), &opts),
            2,
            "The positional operator did not find the match needed from the query.",
        );
    }
}

#[test]
fn all_positional() {
    check_table(vec![
        (
            doc! {"_id": 1, "a": [1, 2]},
            bson!({"$inc": {"a.$[]": 10}}),
            doc! {"_id": 1, "a": [11, 12]},
            true,
        ),
        (
            doc! {"_id": 1, "a": [{"b": 1}, {}]},
            bson!({"$set": {"a.$[].b": 0}}),
            doc! {"_id": 1, "a": [{"b": 0}, {"b": 0}]},
            true,
        ),
        (
            doc! {"_id": 1, "a": [{"b": [1, 2]}, {"b": [3]}]},
            bson!({"$inc": {"a.$[].b.$[]": 1}}),
            doc! {"_id": 1, "a": [{"b": [2, 3]}, {"b": [4]}]},
            true,
        ),
        (
            doc! {"_id": 1, "a": []},
            bson!({"$set": {"a.$[]": 1}}),
            doc! {"_id": 1, "a": []},
            false,
        ),
    ]);
    assert_err(
        run(&doc! {"_id": 1}, bson!({"$set": {"a.$[]": 1}})),
        2,
        "The path 'a' must exist in the document in order to apply array updates.",
    );
    assert_err(
        run(&doc! {"_id": 1, "a": 1}, bson!({"$set": {"a.$[]": 1}})),
        2,
        "Cannot apply array updates to non-array element a: 1",
    );
    assert_err(
        run(
            &doc! {"_id": 1, "a": [1, {}]},
            bson!({"$set": {"a.$[].b": 1}}),
        ),
        28,
        "Cannot create field 'b' in element {0: 1}",
    );
}

#[test]
fn array_filter_parsing() {
    let d = doc! {"_id": 1, "a": [1]};
    let with = |filters: Vec<Bson>| Run {
        filters: Some(filters),
        ..PLAIN
    };
    assert_err(
        run_with(
            &d,
            bson!({"$set": {"a.$[i]": 5.0}}),
            &with(vec![bson!({"i": 0}), bson!({"j": 0})]),
        ),
        9,
        "The array filter for identifier 'j' was not used in the update { $set: { a.$[i]: 5.0 } }",
    );
    assert_err(
        run_with(
            &d,
            bson!({"$set": {"a.$[x]": 1}}),
            &with(vec![bson!({"i": 0})]),
        ),
        2,
        "No array filter found for identifier 'x' in path 'a.$[x]'",
    );
    assert_err(
        run_with(&d, bson!({"$set": {"a.$[x]": 1}}), &PLAIN),
        2,
        "No array filter found for identifier 'x' in path 'a.$[x]'",
    );
    assert_err(
        run_with(
            &d,
            bson!({"$set": {"a.$[i]": 1}}),
            &with(vec![bson!({"i": 0}), bson!({"i": 1})]),
        ),
        9,
        "Found multiple array filters with the same top-level field name i",
    );
    assert_err(
        run_with(
            &d,
            bson!({"$set": {"a.$[i]": 1}}),
            &with(vec![bson!({"i": 0, "j.x": 1})]),
        ),
        9,
        "Error parsing array filter :: caused by :: Expected a single top-level field name, found 'i' and 'j'",
    );
    assert_err(
        run_with(
            &d,
            bson!({"$set": {"a.$[I]": 1}}),
            &with(vec![bson!({"I": 0})]),
        ),
        2,
        "Error parsing array filter :: caused by :: The top-level field name must be an alphanumeric string beginning with a lowercase letter, found 'I'",
    );
    assert_err(
        run_with(
            &d,
            bson!({"$set": {"a.$[i]": 1}}),
            &with(vec![bson!({"$or": [{"i": 0}, {"j": 1}]})]),
        ),
        9,
        "Error parsing array filter :: caused by :: Expected a single top-level field name, found 'i' and 'j'",
    );
    assert_err(
        run_with(&d, bson!({"$set": {"a.$[i]": 1}}), &with(vec![bson!({})])),
        9,
        "Cannot use an expression without a top-level field name in arrayFilters",
    );
    // Identifiers inside logical operators count.
    assert!(
        Update::parse(
            &bson!({"$set": {"a.$[i]": 1}}),
            Some(&[bson!({"$or": [{"i": 0}, {"i.x": {"$gt": 1}}]})])
        )
        .is_ok()
    );
    // A filter used only in one operator of several is "used".
    assert!(
        Update::parse(
            &bson!({"$set": {"a.$[i]": 1}, "$inc": {"b": 1}}),
            Some(&[bson!({"i": 0})])
        )
        .is_ok()
    );
}

#[test]
fn array_filters_select_elements() {
    let d = doc! {"_id": 1, "g": [{"grade": 80}, {"grade": 90}], "s": [70, 95]};
    let opts = Run {
        filters: Some(vec![
            bson!({"e.grade": {"$gte": 85}}),
            bson!({"x": {"$gte": 85}}),
        ]),
        ..PLAIN
    };
    let (out, changed) = run_with(
        &d,
        bson!({"$set": {"g.$[e].ok": true, "s.$[x]": 100}}),
        &opts,
    )
    .unwrap();
    assert!(changed);
    assert_same(
        &out,
        &doc! {"_id": 1, "g": [{"grade": 80}, {"grade": 90, "ok": true}], "s": [70, 100]},
        "filters",
    );
}

#[test]
fn pipeline_rejects_array_filters() {
    assert_err(
        Update::parse(&bson!([{"$set": {"a": 1}}]), Some(&[bson!({"i": 0})])),
        9,
        "arrayFilters may not be specified for pipeline-style updates",
    );
}

#[test]
fn pipeline_updates() {
    let d = doc! {"_id": 1, "a": 1};
    let (out, changed) = run(&d, bson!([{"$set": {"b": {"$add": ["$a", 1]}}}])).unwrap();
    assert!(changed);
    assert_same(&out, &doc! {"_id": 1, "a": 1, "b": 2}, "pipeline $set");
    let (out, changed) = run(&d, bson!([{"$set": {"a": 1}}])).unwrap();
    assert!(!changed);
    assert_same(&out, &d, "pipeline no-op");
    // Removing _id in a pipeline keeps the old one; changing it is code 66.
    let (out, _) = run(&d, bson!([{"$unset": "_id"}])).unwrap();
    assert_same(&out, &d, "pipeline keeps _id");
    assert_err(
        run(&d, bson!([{"$set": {"_id": 2}}])),
        66,
        "After applying the update, the (immutable) field '_id' was found to have been altered to _id: 2",
    );
}

#[test]
fn upsert_seed_cases() {
    let cases: Vec<(Document, bool, Document)> = vec![
        (
            doc! {"b": 1, "a": {"$gt": 1}, "c.d": 2, "_id": 5, "e": {"$eq": 3}, "r": {"$regex": "x"}},
            false,
            doc! {"_id": 5, "b": 1, "c": {"d": 2}, "e": 3},
        ),
        (doc! {"b": 1, "a": 2}, false, doc! {"a": 2, "b": 1}),
        (
            doc! {"$and": [{"a": 1}, {"$and": [{"b.c": 2}]}], "$expr": {"$eq": ["$x", 1]}, "$comment": "hi"},
            false,
            doc! {"a": 1, "b": {"c": 2}},
        ),
        (doc! {"$or": [{"a": 1}]}, false, doc! {"a": 1}),
        (doc! {"$or": [{"a": 1}, {"b": 1}]}, false, doc! {}),
        (
            doc! {"a": {"$in": [4]}, "b": {"$in": [1, 2]}},
            false,
            doc! {"a": 4},
        ),
        (
            doc! {"a": {"x": 1, "$y": 2}},
            false,
            doc! {"a": {"x": 1, "$y": 2}},
        ),
        (
            doc! {"a.x": 1, "a.y": 2},
            false,
            doc! {"a": {"x": 1, "y": 2}},
        ),
        (
            doc! {"a": bson::Regex { pattern: "x".into(), options: String::new() }},
            false,
            doc! {},
        ),
        (
            doc! {"a": 1, "_id": {"$eq": 9}, "_id.z": {"$gt": 0}},
            true,
            doc! {"_id": 9},
        ),
        (doc! {"a": 1}, true, doc! {}),
    ];
    for (filter, replacement, expected) in cases {
        let seed = upsert_seed(&filter, replacement).unwrap_or_else(|e| panic!("{filter:?}: {e}"));
        assert_same(&seed, &expected, &format!("{filter:?}"));
    }
    assert_err(
        upsert_seed(&doc! {"a": 1, "$and": [{"a": 1}]}, false),
        54,
        "cannot infer query fields to set, path 'a' is matched twice",
    );
    assert_err(
        upsert_seed(&doc! {"t": {"$all": [1, 2]}}, false),
        54,
        "cannot infer query fields to set, path 't' is matched twice",
    );
    // Reported in path order whatever the filter's order.
    assert_err(
        upsert_seed(&doc! {"a.b": 1, "a": 1}, false),
        54,
        "cannot infer query fields to set, both paths 'a.b' and 'a' are matched",
    );
    assert_err(
        upsert_seed(&doc! {"_id.x": 1}, true),
        111,
        "field at '_id' must be exactly specified, field at sub-path '_id.x'found",
    );
    assert_err(
        upsert_seed(&doc! {"a": 1, "a.b": 1}, false),
        54,
        "cannot infer query fields to set, both paths 'a.b' and 'a' are matched",
    );
}

#[test]
fn storage_validation() {
    assert!(validate_document_for_storage(&doc! {"_id": 1, "a": {"$b": 1}}).is_ok());
    assert_err(
        validate_document_for_storage(&doc! {"_id": [1]}),
        53,
        "The '_id' value cannot be of type array",
    );
    assert_err(
        validate_document_for_storage(
            &doc! {"_id": bson::Regex { pattern: "x".into(), options: String::new() }},
        ),
        53,
        "The '_id' value cannot be of type regex",
    );
    assert!(validate_document_for_insert(&doc! {"a": 1, "$x": 1}).is_ok());
    assert!(validate_document_for_storage(&doc! {"_id": 1, "$x": 1}).is_ok());
    assert_err(
        validate_replacement(&doc! {"a": 1, "$x": 1}),
        52,
        "The dollar ($) prefixed field '$x' in '$x' is not allowed in the context of an update's replacement document. Consider using an aggregation pipeline with $replaceWith.",
    );
    assert_err(
        validate_document_for_insert(&doc! {"_id": [1]}),
        2,
        "can't use an array for _id",
    );
    assert!(validate_document_for_insert(&doc! {"_id": {"a": 1}, "b": {"$c": 1}}).is_ok());
    for check in [validate_document_for_insert, validate_document_for_storage] {
        assert_err(
            check(&doc! {"_id": {"a": {"$oid": "x"}}}),
            52,
            "_id fields may not contain '$'-prefixed fields: $oid is not valid for storage.",
        );
    }
}

#[test]
fn failed_update_leaves_document_untouched() {
    let parsed = Update::parse(&bson!({"$set": {"a": 5}, "$inc": {"z": 1}}), None).unwrap();
    let ev = eval();
    let ctx = UpdateContext {
        eval: &ev,
        is_insert: false,
        matched: None,
    };
    let mut d = doc! {"_id": 1, "a": 1, "z": "text"};
    assert!(parsed.apply(&mut d, &ctx).is_err());
    assert_same(&d, &doc! {"_id": 1, "a": 1, "z": "text"}, "untouched");
}
