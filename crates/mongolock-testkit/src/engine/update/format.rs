//! mongod's `toString()` rendering of BSON values, used verbatim inside error messages
//! (`{_id: 1}`, `{ $set: { a: 1 } }`, `ObjectId('...')`).

use bson::{Bson, Document};

/// Renders a value the way mongod's `BSONElement::toString(false)` does.
pub(crate) fn value(v: &Bson) -> String {
    match v {
        Bson::Double(d) => double(*d),
        Bson::Int32(i) => i.to_string(),
        Bson::Int64(i) => i.to_string(),
        Bson::Decimal128(d) => format!("NumberDecimal(\"{d}\")"),
        Bson::String(s) => format!("\"{s}\""),
        Bson::Symbol(s) => format!("\"{s}\""),
        Bson::Document(d) => document(d),
        Bson::Array(a) => {
            if a.is_empty() {
                "[]".to_string()
            } else {
                let items: Vec<String> = a.iter().map(value).collect();
                format!("[ {} ]", items.join(", "))
            }
        }
        Bson::ObjectId(o) => format!("ObjectId('{}')", o.to_hex()),
        Bson::Boolean(b) => b.to_string(),
        Bson::Null => "null".to_string(),
        Bson::Undefined => "undefined".to_string(),
        Bson::MinKey => "MinKey".to_string(),
        Bson::MaxKey => "MaxKey".to_string(),
        Bson::DateTime(d) => format!("new Date({})", d.timestamp_millis()),
        Bson::Timestamp(t) => format!("Timestamp({}, {})", t.time, t.increment),
        Bson::RegularExpression(r) => format!("/{}/{}", r.pattern, r.options),
        Bson::Binary(b) => {
            let hex: String = b.bytes.iter().map(|x| format!("{x:02X}")).collect();
            format!("BinData({}, {hex})", u8::from(b.subtype))
        }
        Bson::JavaScriptCode(c) => c.clone(),
        Bson::JavaScriptCodeWithScope(c) => {
            format!("CodeWScope( {}, {})", c.code, document(&c.scope))
        }
        Bson::DbPointer(_) => "DBRef(...)".to_string(),
    }
}

/// Renders one element, `name: value`.
pub(crate) fn element(name: &str, v: &Bson) -> String {
    format!("{name}: {}", value(v))
}

/// Renders a document as `{ a: 1, b: "x" }` (`{}` when empty).
pub(crate) fn document(d: &Document) -> String {
    if d.is_empty() {
        return "{}".to_string();
    }
    let items: Vec<String> = d.iter().map(|(k, v)| element(k, v)).collect();
    format!("{{ {} }}", items.join(", "))
}

fn double(d: f64) -> String {
    if d.is_nan() {
        "nan".to_string()
    } else if d.is_infinite() {
        if d > 0.0 {
            "inf".to_string()
        } else {
            "-inf".to_string()
        }
    } else if d.fract() == 0.0 && d.abs() < 1e16 {
        format!("{d:.1}")
    } else {
        format!("{d}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc, oid::ObjectId};

    #[test]
    fn renders_like_mongod() {
        assert_eq!(value(&Bson::Double(5.0)), "5.0");
        assert_eq!(value(&Bson::Double(2.5)), "2.5");
        assert_eq!(value(&Bson::Int64(7)), "7");
        assert_eq!(value(&bson!("x")), "\"x\"");
        assert_eq!(value(&bson!([1, [], {}])), "[ 1, [], {} ]");
        assert_eq!(
            document(&doc! {"$set": {"a.$[i]": 5.0}}),
            "{ $set: { a.$[i]: 5.0 } }"
        );
        let oid = ObjectId::parse_str("5fb222c0697df89a8bb237bf").unwrap();
        assert_eq!(
            element("_id", &Bson::ObjectId(oid)),
            "_id: ObjectId('5fb222c0697df89a8bb237bf')"
        );
    }
}
