//! BSON comparison and type order, as mongod defines them.
//!
//! MongoDB orders values of different types by a canonical type rank (MinKey < null <
//! numbers < strings < objects < arrays < binary < ObjectId < booleans < dates <
//! timestamps < regular expressions < MaxKey) and values of the same rank by value.
//! Numbers of every BSON numeric type compare by their mathematical value.

use std::cmp::Ordering;

use bson::{Bson, Document};

/// The canonical rank of a value's type (mongod's `canonicalizeBSONType`).
pub fn canonical_rank(value: &Bson) -> i32 {
    match value {
        Bson::MinKey => -1,
        Bson::Undefined => 0,
        Bson::Null => 5,
        Bson::Double(_) | Bson::Int32(_) | Bson::Int64(_) | Bson::Decimal128(_) => 10,
        Bson::String(_) | Bson::Symbol(_) => 15,
        Bson::Document(_) => 20,
        Bson::Array(_) => 25,
        Bson::Binary(_) => 30,
        Bson::ObjectId(_) => 35,
        Bson::Boolean(_) => 40,
        Bson::DateTime(_) => 45,
        Bson::Timestamp(_) => 47,
        Bson::RegularExpression(_) => 50,
        Bson::DbPointer(_) => 55,
        Bson::JavaScriptCode(_) => 60,
        Bson::JavaScriptCodeWithScope(_) => 65,
        Bson::MaxKey => 100,
    }
}

/// The `$type` alias of a value ("double", "string", "object", ...).
pub fn type_alias(value: &Bson) -> &'static str {
    match value {
        Bson::Double(_) => "double",
        Bson::String(_) => "string",
        Bson::Document(_) => "object",
        Bson::Array(_) => "array",
        Bson::Binary(_) => "binData",
        Bson::Undefined => "undefined",
        Bson::ObjectId(_) => "objectId",
        Bson::Boolean(_) => "bool",
        Bson::DateTime(_) => "date",
        Bson::Null => "null",
        Bson::RegularExpression(_) => "regex",
        Bson::DbPointer(_) => "dbPointer",
        Bson::JavaScriptCode(_) => "javascript",
        Bson::Symbol(_) => "symbol",
        Bson::JavaScriptCodeWithScope(_) => "javascriptWithScope",
        Bson::Int32(_) => "int",
        Bson::Timestamp(_) => "timestamp",
        Bson::Int64(_) => "long",
        Bson::Decimal128(_) => "decimal",
        Bson::MinKey => "minKey",
        Bson::MaxKey => "maxKey",
    }
}

/// The numeric BSON type code of a value (1 = double, 2 = string, ...; -1 MinKey, 127 MaxKey).
pub fn type_code(value: &Bson) -> i32 {
    match value {
        Bson::MinKey => -1,
        Bson::MaxKey => 127,
        other => other.element_type() as u8 as i32,
    }
}

/// The numeric value of a number as `f64`, if `value` is a number.
///
/// Decimal128 values are converted through their decimal string; `None` for non-numbers.
pub fn as_f64(value: &Bson) -> Option<f64> {
    match value {
        Bson::Double(d) => Some(*d),
        Bson::Int32(i) => Some(f64::from(*i)),
        Bson::Int64(i) => Some(*i as f64),
        Bson::Decimal128(d) => d.to_string().parse::<f64>().ok(),
        _ => None,
    }
}

/// Whether a value is one of the BSON number types.
pub fn is_number(value: &Bson) -> bool {
    matches!(
        value,
        Bson::Double(_) | Bson::Int32(_) | Bson::Int64(_) | Bson::Decimal128(_)
    )
}

fn compare_numbers(a: &Bson, b: &Bson) -> Ordering {
    // Exact integer comparison where both are integers, so large longs do not lose precision.
    let int = |v: &Bson| match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        _ => None,
    };
    if let (Some(x), Some(y)) = (int(a), int(b)) {
        return x.cmp(&y);
    }
    let x = as_f64(a).unwrap_or(f64::NAN);
    let y = as_f64(b).unwrap_or(f64::NAN);
    // NaN sorts below every other number and equals itself.
    match (x.is_nan(), y.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => {
            // An integer against a double: compare exactly when the double is integral and in range.
            if let (Some(i), false) = (int(a), y.fract() != 0.0)
                && y.abs() < 9.2e18
            {
                return i.cmp(&(y as i64));
            }
            if let (Some(j), false) = (int(b), x.fract() != 0.0)
                && x.abs() < 9.2e18
            {
                return (x as i64).cmp(&j);
            }
            x.partial_cmp(&y).unwrap_or(Ordering::Equal)
        }
    }
}

/// Compares two values in MongoDB's total order.
pub fn compare(a: &Bson, b: &Bson) -> Ordering {
    let (ra, rb) = (canonical_rank(a), canonical_rank(b));
    if ra != rb {
        return ra.cmp(&rb);
    }
    match (a, b) {
        _ if ra == 10 => compare_numbers(a, b),
        (Bson::String(x) | Bson::Symbol(x), Bson::String(y) | Bson::Symbol(y)) => {
            x.as_bytes().cmp(y.as_bytes())
        }
        (Bson::Document(x), Bson::Document(y)) => compare_documents(x, y),
        (Bson::Array(x), Bson::Array(y)) => compare_arrays(x, y),
        (Bson::Binary(x), Bson::Binary(y)) => x
            .bytes
            .len()
            .cmp(&y.bytes.len())
            .then_with(|| u8::from(x.subtype).cmp(&u8::from(y.subtype)))
            .then_with(|| x.bytes.cmp(&y.bytes)),
        (Bson::ObjectId(x), Bson::ObjectId(y)) => x.bytes().cmp(&y.bytes()),
        (Bson::Boolean(x), Bson::Boolean(y)) => x.cmp(y),
        (Bson::DateTime(x), Bson::DateTime(y)) => x.timestamp_millis().cmp(&y.timestamp_millis()),
        (Bson::Timestamp(x), Bson::Timestamp(y)) => x
            .time
            .cmp(&y.time)
            .then_with(|| x.increment.cmp(&y.increment)),
        (Bson::RegularExpression(x), Bson::RegularExpression(y)) => x
            .pattern
            .cmp(&y.pattern)
            .then_with(|| x.options.cmp(&y.options)),
        (Bson::JavaScriptCode(x), Bson::JavaScriptCode(y)) => x.cmp(y),
        (Bson::JavaScriptCodeWithScope(x), Bson::JavaScriptCodeWithScope(y)) => x
            .code
            .cmp(&y.code)
            .then_with(|| compare_documents(&x.scope, &y.scope)),
        // MinKey, MaxKey, null, undefined, DBPointer: one value per rank.
        _ => Ordering::Equal,
    }
}

/// Compares two documents element by element: type rank, then field name, then value.
pub fn compare_documents(a: &Document, b: &Document) -> Ordering {
    let mut left = a.iter();
    let mut right = b.iter();
    loop {
        match (left.next(), right.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some((ka, va)), Some((kb, vb))) => {
                let ord = canonical_rank(va)
                    .cmp(&canonical_rank(vb))
                    .then_with(|| ka.as_bytes().cmp(kb.as_bytes()))
                    .then_with(|| compare(va, vb));
                if ord != Ordering::Equal {
                    return ord;
                }
            }
        }
    }
}

fn compare_arrays(a: &[Bson], b: &[Bson]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let ord = canonical_rank(x)
            .cmp(&canonical_rank(y))
            .then_with(|| compare(x, y));
        if ord != Ordering::Equal {
            return ord;
        }
    }
    a.len().cmp(&b.len())
}

/// Equality in MongoDB's sense: `1`, `1.0` and `NumberLong(1)` are equal; field order matters
/// in documents.
pub fn values_equal(a: &Bson, b: &Bson) -> bool {
    compare(a, b) == Ordering::Equal
}

/// A BSON value ordered by [`compare`], usable as a map key (index keys, `_id` lookups).
#[derive(Debug, Clone)]
pub struct OrdBson(pub Bson);

impl PartialEq for OrdBson {
    fn eq(&self, other: &Self) -> bool {
        compare(&self.0, &other.0) == Ordering::Equal
    }
}

impl Eq for OrdBson {}

impl PartialOrd for OrdBson {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OrdBson {
    fn cmp(&self, other: &Self) -> Ordering {
        compare(&self.0, &other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, oid::ObjectId};

    #[test]
    fn numbers_compare_by_value_across_types() {
        assert!(values_equal(&Bson::Int32(1), &Bson::Double(1.0)));
        assert!(values_equal(&Bson::Int64(7), &Bson::Int32(7)));
        assert_eq!(
            compare(&Bson::Int64(i64::MAX), &Bson::Int64(i64::MAX - 1)),
            Ordering::Greater
        );
        assert_eq!(
            compare(&Bson::Double(f64::NAN), &Bson::Int32(-5)),
            Ordering::Less
        );
        assert_eq!(
            compare(&Bson::Double(2.5), &Bson::Int32(2)),
            Ordering::Greater
        );
    }

    #[test]
    fn type_rank_orders_values_of_different_types() {
        let ordered = [
            Bson::MinKey,
            Bson::Null,
            Bson::Int32(100),
            Bson::String("a".into()),
            bson!({"a": 1}),
            bson!([1]),
            Bson::ObjectId(ObjectId::new()),
            Bson::Boolean(false),
            Bson::DateTime(bson::DateTime::from_millis(0)),
            Bson::MaxKey,
        ];
        for pair in ordered.windows(2) {
            assert_eq!(
                compare(&pair[0], &pair[1]),
                Ordering::Less,
                "{:?} < {:?}",
                pair[0],
                pair[1]
            );
        }
    }

    #[test]
    fn documents_and_arrays_compare_element_wise() {
        assert_eq!(compare(&bson!({"a": 1}), &bson!({"a": 2})), Ordering::Less);
        assert_eq!(compare(&bson!({"a": 1}), &bson!({"b": 1})), Ordering::Less);
        assert_eq!(
            compare(&bson!({"a": 1}), &bson!({"a": 1, "b": 0})),
            Ordering::Less
        );
        assert_eq!(compare(&bson!([1, 2]), &bson!([1, 3])), Ordering::Less);
        assert_eq!(compare(&bson!([1, 2]), &bson!([1])), Ordering::Greater);
        assert!(!values_equal(
            &bson!({"a": 1, "b": 2}),
            &bson!({"b": 2, "a": 1})
        ));
    }
}
