//! `$dateAdd` and `$dateSubtract` (MongoDB 5.0+), which peers such as
//! `distributed-lock-mongo` use in their pipeline updates: results, calendar clamping, null
//! propagation and mongod's error codes.

mod common;

use bson::{Bson, DateTime, doc};

fn date(rfc3339: &str) -> DateTime {
    DateTime::parse_rfc3339_str(rfc3339).unwrap()
}

/// Evaluates `expr` against `{_id: 1, d: <2024-01-31T10:00:00Z>}` in a `$project`.
async fn eval(t: &common::Target, expr: bson::Document) -> Bson {
    let coll = t.coll("dates");
    coll.delete_many(doc! {}).await.unwrap();
    coll.insert_one(doc! {"_id": 1, "d": date("2024-01-31T10:00:00Z"), "n": 5})
        .await
        .unwrap();
    let mut cursor = coll
        .aggregate(vec![doc! {"$project": {"_id": 0, "v": expr}}])
        .await
        .unwrap();
    use futures_util::TryStreamExt;
    let first = cursor.try_next().await.unwrap().unwrap();
    first.get("v").cloned().unwrap_or(Bson::Undefined)
}

async fn eval_error(t: &common::Target, expr: bson::Document) -> i32 {
    let cmd = doc! {
        "aggregate": "dates",
        "pipeline": [{"$project": {"v": expr}}],
        "cursor": {},
    };
    let coll = t.coll("dates");
    coll.delete_many(doc! {}).await.unwrap();
    coll.insert_one(doc! {"_id": 1, "d": date("2024-01-31T10:00:00Z")})
        .await
        .unwrap();
    t.error_code(cmd).await.0
}

#[tokio::test]
async fn date_add_and_subtract_compute_as_mongod() {
    let t = common::target("date_arith_values").await;
    let cases = [
        (
            doc! {"$dateAdd": {"startDate": "$d", "unit": "millisecond", "amount": 1500}},
            "2024-01-31T10:00:01.500Z",
        ),
        (
            doc! {"$dateAdd": {"startDate": "$d", "unit": "hour", "amount": "$n"}},
            "2024-01-31T15:00:00Z",
        ),
        (
            doc! {"$dateAdd": {"startDate": "$d", "unit": "week", "amount": 1_i64}},
            "2024-02-07T10:00:00Z",
        ),
        // Month arithmetic clamps to the last day of the month (2024 is a leap year).
        (
            doc! {"$dateAdd": {"startDate": "$d", "unit": "month", "amount": 1}},
            "2024-02-29T10:00:00Z",
        ),
        (
            doc! {"$dateAdd": {"startDate": "$d", "unit": "quarter", "amount": 1}},
            "2024-04-30T10:00:00Z",
        ),
        (
            doc! {"$dateAdd": {"startDate": "$d", "unit": "year", "amount": -1, "timezone": "UTC"}},
            "2023-01-31T10:00:00Z",
        ),
        (
            doc! {"$dateSubtract": {"startDate": "$d", "unit": "day", "amount": 31.0}},
            "2023-12-31T10:00:00Z",
        ),
        (
            doc! {"$dateSubtract": {"startDate": "$d", "unit": "month", "amount": 11}},
            "2023-02-28T10:00:00Z",
        ),
    ];
    for (expr, want) in cases {
        let got = eval(&t, expr.clone()).await;
        assert_eq!(got, Bson::DateTime(date(want)), "{expr}");
    }
}

#[tokio::test]
async fn date_add_with_now_in_a_pipeline_update() {
    let t = common::target("date_arith_now").await;
    let coll = t.coll("locks");
    let pipeline = vec![doc! {"$set": {
        "at": "$$NOW",
        "expiresAt": {"$dateAdd": {"startDate": "$$NOW", "unit": "millisecond", "amount": 30_000_i64}},
    }}];
    coll.find_one_and_update(doc! {"_id": "a"}, pipeline)
        .upsert(true)
        .await
        .unwrap();
    let stored = coll.find_one(doc! {"_id": "a"}).await.unwrap().unwrap();
    let at = stored.get_datetime("at").unwrap().timestamp_millis();
    let expires = stored.get_datetime("expiresAt").unwrap().timestamp_millis();
    assert_eq!(expires - at, 30_000);
}

#[tokio::test]
async fn date_add_propagates_null_and_missing() {
    let t = common::target("date_arith_null").await;
    for expr in [
        doc! {"$dateAdd": {"startDate": "$missing", "unit": "day", "amount": 1}},
        doc! {"$dateAdd": {"startDate": "$d", "unit": null, "amount": 1}},
        doc! {"$dateSubtract": {"startDate": "$d", "unit": "day", "amount": "$missing"}},
    ] {
        assert_eq!(eval(&t, expr.clone()).await, Bson::Null, "{expr}");
    }
}

#[tokio::test]
async fn date_add_errors_carry_mongods_codes() {
    let t = common::target("date_arith_errors").await;
    let cases = [
        (doc! {"$dateAdd": "x"}, 5166400),
        (
            doc! {"$dateAdd": {"startDate": "$d", "unit": "day", "amount": 1, "bad": 1}},
            5166401,
        ),
        (
            doc! {"$dateAdd": {"startDate": "$d", "unit": "day"}},
            5166402,
        ),
        (
            doc! {"$dateAdd": {"startDate": "x", "unit": "day", "amount": 1}},
            5166403,
        ),
        (
            doc! {"$dateAdd": {"startDate": "$d", "unit": 1, "amount": 1}},
            5166404,
        ),
        (
            doc! {"$dateAdd": {"startDate": "$d", "unit": "fortnight", "amount": 1}},
            9,
        ),
        (
            doc! {"$dateAdd": {"startDate": "$d", "unit": "day", "amount": 1.5}},
            5166405,
        ),
    ];
    for (expr, code) in cases {
        assert_eq!(eval_error(&t, expr.clone()).await, code, "{expr}");
    }
}
