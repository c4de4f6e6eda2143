//! Type conversion (`$convert`, `$toLong`, ...) and the value formatting mongod uses in
//! messages and `$toString`.

use bson::{Bson, DateTime, oid::ObjectId};

use crate::engine::compare::type_alias;

/// A target type of `$convert`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    Double,
    String,
    ObjectId,
    Bool,
    Date,
    Int,
    Long,
}

impl Target {
    /// Parses `to`: a type alias or a numeric BSON type code.
    pub(crate) fn from_bson(value: &Bson) -> Option<Result<Target, String>> {
        let by_code = |c: f64| match c as i64 {
            _ if c.fract() != 0.0 => None,
            1 => Some(Target::Double),
            2 => Some(Target::String),
            7 => Some(Target::ObjectId),
            8 => Some(Target::Bool),
            9 => Some(Target::Date),
            16 => Some(Target::Int),
            18 => Some(Target::Long),
            _ => None,
        };
        Some(match value {
            Bson::String(s) => match s.as_str() {
                "double" => Ok(Target::Double),
                "string" => Ok(Target::String),
                "objectId" => Ok(Target::ObjectId),
                "bool" => Ok(Target::Bool),
                "date" => Ok(Target::Date),
                "int" => Ok(Target::Int),
                "long" => Ok(Target::Long),
                other => Err(format!("Unknown type name: {other}")),
            },
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) => {
                let c = crate::engine::compare::as_f64(value).unwrap_or(f64::NAN);
                by_code(c).ok_or_else(|| format!("In $convert, numeric value for 'to' does not correspond to a BSON type: {}", fmt_value(value)))
            }
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Target::Double => "double",
            Target::String => "string",
            Target::ObjectId => "objectId",
            Target::Bool => "bool",
            Target::Date => "date",
            Target::Int => "int",
            Target::Long => "long",
        }
    }
}

/// Converts a non-null value; the error is mongod's message without the
/// " in $convert with no onError value" context (the caller adds it).
pub(crate) fn convert(value: &Bson, to: Target) -> Result<Bson, ConvError> {
    let unsupported = || ConvError::Unsupported(type_alias(value), to.name());
    Ok(match to {
        Target::Double => Bson::Double(match value {
            Bson::Double(d) => *d,
            Bson::Int32(i) => f64::from(*i),
            Bson::Int64(i) => *i as f64,
            Bson::Boolean(b) => f64::from(u8::from(*b)),
            Bson::DateTime(d) => d.timestamp_millis() as f64,
            Bson::String(s) => parse_double(s)?,
            _ => return Err(unsupported()),
        }),
        Target::Long => Bson::Int64(match value {
            Bson::Int64(i) => *i,
            Bson::Int32(i) => i64::from(*i),
            Bson::Boolean(b) => i64::from(*b),
            Bson::DateTime(d) => d.timestamp_millis(),
            Bson::Double(d) => double_to_int(*d, i64::MIN as f64, i64::MAX as f64)? as i64,
            Bson::String(s) => parse_int(s)?,
            _ => return Err(unsupported()),
        }),
        Target::Int => Bson::Int32(match value {
            Bson::Int32(i) => *i,
            Bson::Int64(i) => {
                i32::try_from(*i).map_err(|_| ConvError::Overflow(fmt_value(value)))?
            }
            Bson::Boolean(b) => i32::from(*b),
            Bson::Double(d) => double_to_int(*d, f64::from(i32::MIN), f64::from(i32::MAX))? as i32,
            Bson::String(s) => {
                let v = parse_int(s)?;
                i32::try_from(v).map_err(|_| ConvError::Parse(s.clone(), "Overflow"))?
            }
            _ => return Err(unsupported()),
        }),
        Target::Bool => Bson::Boolean(match value {
            Bson::Boolean(b) => *b,
            Bson::Int32(i) => *i != 0,
            Bson::Int64(i) => *i != 0,
            Bson::Double(d) => *d != 0.0,
            Bson::String(_) | Bson::ObjectId(_) | Bson::DateTime(_) | Bson::Timestamp(_) => true,
            _ => return Err(unsupported()),
        }),
        Target::Date => Bson::DateTime(match value {
            Bson::DateTime(d) => *d,
            Bson::Int64(i) => DateTime::from_millis(*i),
            Bson::Double(d) => {
                DateTime::from_millis(double_to_int(*d, i64::MIN as f64, i64::MAX as f64)? as i64)
            }
            Bson::ObjectId(o) => o.timestamp(),
            Bson::Timestamp(t) => DateTime::from_millis(i64::from(t.time) * 1000),
            Bson::String(s) => parse_date(s).ok_or_else(|| ConvError::Date(s.clone()))?,
            _ => return Err(unsupported()),
        }),
        Target::ObjectId => Bson::ObjectId(match value {
            Bson::ObjectId(o) => *o,
            Bson::String(s) => {
                if s.len() != 24 {
                    return Err(ConvError::Oid(
                        s.clone(),
                        format!(
                            "Invalid string length for parsing to OID, expected 24 but found {}",
                            s.len()
                        ),
                    ));
                }
                ObjectId::parse_str(s).map_err(|_| {
                    ConvError::Oid(
                        s.clone(),
                        "Invalid character found in hex string".to_string(),
                    )
                })?
            }
            _ => return Err(unsupported()),
        }),
        Target::String => Bson::String(match value {
            Bson::String(s) => s.clone(),
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Boolean(_) => {
                fmt_value(value)
            }
            Bson::ObjectId(o) => o.to_hex(),
            Bson::DateTime(d) => format_date_iso(*d),
            _ => return Err(unsupported()),
        }),
    })
}

/// Why a conversion failed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ConvError {
    Unsupported(&'static str, &'static str),
    Parse(String, &'static str),
    Overflow(String),
    NaN,
    Infinity,
    Date(String),
    Oid(String, String),
    Hex(String),
}

impl ConvError {
    /// mongod's message, with the `$convert` context.
    pub(crate) fn message(&self) -> String {
        const CTX: &str = "in $convert with no onError value";
        match self {
            ConvError::Unsupported(from, to) => {
                format!("Unsupported conversion from {from} to {to} {CTX}")
            }
            ConvError::Parse(s, why) => format!("Failed to parse number '{s}' {CTX}: {why}"),
            ConvError::Overflow(v) => format!("Conversion would overflow target type {CTX}: {v}"),
            ConvError::NaN => format!("Attempt to convert NaN value to integer type {CTX}: nan"),
            ConvError::Infinity => {
                format!("Attempt to convert infinity value to integer type {CTX}: inf")
            }
            ConvError::Date(s) => {
                format!("Error parsing date string '{s}'; 0: Unexpected character '{s}' {CTX}")
            }
            ConvError::Oid(s, why) => format!("Failed to parse objectId '{s}' {CTX}: {why}"),
            ConvError::Hex(s) => format!("Illegal hexadecimal input {CTX}: {s}"),
        }
    }
}

fn double_to_int(d: f64, min: f64, max: f64) -> Result<f64, ConvError> {
    if d.is_nan() {
        return Err(ConvError::NaN);
    }
    if d.is_infinite() {
        return Err(ConvError::Infinity);
    }
    let t = d.trunc();
    // `max` for i64 rounds up to 2^63, which is itself out of range.
    if t < min || t > max || (max >= 9.2e18 && t >= max) {
        return Err(ConvError::Overflow(fmt_value(&Bson::Double(d))));
    }
    Ok(t)
}

/// Parses a base-10 integer as mongod's `NumberParser` does (no whitespace, optional sign).
fn parse_int(s: &str) -> Result<i64, ConvError> {
    reject_hex(s)?;
    let fail = |why| Err(ConvError::Parse(s.to_string(), why));
    let (negative, magnitude) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if magnitude.is_empty() {
        return fail("No digits");
    }
    let mut n: u64 = 0;
    let mut consumed = 0;
    for c in magnitude.bytes() {
        if !c.is_ascii_digit() {
            break;
        }
        n = match n
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(c - b'0')))
        {
            Some(v) => v,
            None => return fail("Overflow"),
        };
        consumed += 1;
    }
    if consumed != magnitude.len() {
        return fail("Did not consume whole string.");
    }
    let max = i64::MAX as u64 + u64::from(negative);
    if n > max {
        return fail("Overflow");
    }
    Ok(if negative {
        (n as i64).wrapping_neg()
    } else {
        n as i64
    })
}

fn reject_hex(s: &str) -> Result<(), ConvError> {
    if s.starts_with("0x") || s.starts_with("0X") {
        return Err(ConvError::Hex(s.to_string()));
    }
    Ok(())
}

/// Parses a double as mongod does (`strtod` over the whole string).
fn parse_double(s: &str) -> Result<f64, ConvError> {
    reject_hex(s)?;
    let fail = |why| Err(ConvError::Parse(s.to_string(), why));
    if s.is_empty() {
        return fail("Empty string");
    }
    if s.starts_with(|c: char| c.is_ascii_whitespace()) {
        return fail("Leading whitespace");
    }
    match s.parse::<f64>() {
        Ok(d) => {
            let unsigned = s.trim_start_matches(['-', '+']).to_ascii_lowercase();
            let special = unsigned.starts_with("inf") || unsigned.starts_with("nan");
            let nonzero_digits = unsigned
                .split(['e'])
                .next()
                .is_some_and(|m| m.bytes().any(|c| (b'1'..=b'9').contains(&c)));
            let overflow = d.is_infinite() && !special;
            let underflow = nonzero_digits && d.abs() < f64::MIN_POSITIVE;
            if overflow || underflow {
                fail("Out of range")
            } else {
                Ok(d)
            }
        }
        Err(_) => {
            let unsigned = s.trim_start_matches(['-', '+']);
            let starts_number = unsigned.starts_with(|c: char| c.is_ascii_digit())
                || (unsigned.starts_with('.')
                    && unsigned[1..].starts_with(|c: char| c.is_ascii_digit()))
                || ["inf", "nan"]
                    .iter()
                    .any(|p| unsigned.to_ascii_lowercase().starts_with(p));
            if starts_number && s.len() - unsigned.len() <= 1 {
                fail("Did not consume whole string.")
            } else {
                fail("Did not consume any digits")
            }
        }
    }
}

/// Parses the ISO-8601 forms mongod accepts most commonly: RFC 3339 timestamps, the same
/// without an offset (UTC), and plain dates.
pub(crate) fn parse_date(s: &str) -> Option<DateTime> {
    if let Ok(d) = DateTime::parse_rfc3339_str(s) {
        return Some(d);
    }
    let candidates = [format!("{s}Z"), format!("{s}T00:00:00Z")];
    candidates
        .iter()
        .find_map(|c| DateTime::parse_rfc3339_str(c).ok())
}

/// Days since 1970-01-01 to a civil (year, month, day) date (proleptic Gregorian).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The broken-down UTC parts of a date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DateParts {
    pub(crate) year: i64,
    pub(crate) month: u32,
    pub(crate) day: u32,
    pub(crate) hour: u32,
    pub(crate) minute: u32,
    pub(crate) second: u32,
    pub(crate) millis: u32,
    /// Day of week, 1 = Sunday ... 7 = Saturday.
    pub(crate) weekday: u32,
    /// Day of year, 1-based.
    pub(crate) yearday: u32,
}

/// Breaks a date into UTC parts.
pub(crate) fn date_parts(d: DateTime) -> DateParts {
    let ms = d.timestamp_millis();
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    let jan1 = days_from_civil(year, 1, 1);
    DateParts {
        year,
        month,
        day,
        hour: (rem / 3_600_000) as u32,
        minute: (rem / 60_000 % 60) as u32,
        second: (rem / 1000 % 60) as u32,
        millis: (rem % 1000) as u32,
        weekday: ((days + 4).rem_euclid(7) + 1) as u32,
        yearday: (days - jan1 + 1) as u32,
    }
}

/// A time unit of `$dateAdd`, `$dateSubtract` (and, in mongod, `$dateDiff`, `$dateTrunc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimeUnit {
    Year,
    Quarter,
    Month,
    Week,
    Day,
    Hour,
    Minute,
    Second,
    Millisecond,
}

impl TimeUnit {
    /// The unit named `s`, or mongod's `FailedToParse` for an unknown name.
    pub(crate) fn parse(s: &str) -> crate::engine::Result<TimeUnit> {
        Ok(match s {
            "year" => TimeUnit::Year,
            "quarter" => TimeUnit::Quarter,
            "month" => TimeUnit::Month,
            "week" => TimeUnit::Week,
            "day" => TimeUnit::Day,
            "hour" => TimeUnit::Hour,
            "minute" => TimeUnit::Minute,
            "second" => TimeUnit::Second,
            "millisecond" => TimeUnit::Millisecond,
            _ => {
                return Err(crate::engine::CommandError::new(
                    9,
                    format!("unknown time unit value: {s}"),
                ));
            }
        })
    }
}

/// `date + amount × unit` in UTC, as `$dateAdd` computes it: fixed-length units add
/// milliseconds; months, quarters and years move the calendar month and clamp the day to the
/// last day of the resulting month (Jan 31 + 1 month = Feb 28 or 29). `None` on overflow.
pub(crate) fn date_add(date: DateTime, unit: TimeUnit, amount: i64) -> Option<DateTime> {
    let ms = date.timestamp_millis();
    let fixed = |per: i64| {
        amount
            .checked_mul(per)
            .and_then(|delta| ms.checked_add(delta))
    };
    let months = |per: i64| -> Option<i64> {
        let delta = amount.checked_mul(per)?;
        let days = ms.div_euclid(86_400_000);
        let rem = ms.rem_euclid(86_400_000);
        let (y, m, d) = civil_from_days(days);
        let index = y
            .checked_mul(12)?
            .checked_add(i64::from(m) - 1)?
            .checked_add(delta)?;
        let (ny, nm) = (index.div_euclid(12), index.rem_euclid(12) as u32 + 1);
        // Keep the arithmetic far from i64 limits before converting back to days.
        if ny.abs() > 300_000_000 {
            return None;
        }
        let last = days_in_month(ny, nm);
        let nd = days_from_civil(ny, nm, d.min(last));
        nd.checked_mul(86_400_000)?.checked_add(rem)
    };
    let out = match unit {
        TimeUnit::Millisecond => fixed(1),
        TimeUnit::Second => fixed(1000),
        TimeUnit::Minute => fixed(60_000),
        TimeUnit::Hour => fixed(3_600_000),
        TimeUnit::Day => fixed(86_400_000),
        TimeUnit::Week => fixed(7 * 86_400_000),
        TimeUnit::Month => months(1),
        TimeUnit::Quarter => months(3),
        TimeUnit::Year => months(12),
    }?;
    Some(DateTime::from_millis(out))
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `2024-01-02T03:04:05.678Z`, as `$toString` and `$dateToString` default to.
pub(crate) fn format_date_iso(d: DateTime) -> String {
    let p = date_parts(d);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        p.year, p.month, p.day, p.hour, p.minute, p.second, p.millis
    )
}

/// A double as mongod prints it: integral values without a fraction, exponent notation for
/// very large and very small magnitudes.
pub(crate) fn fmt_double(d: f64) -> String {
    if d.is_nan() {
        return "NaN".to_string();
    }
    if d.is_infinite() {
        return if d > 0.0 { "Infinity" } else { "-Infinity" }.to_string();
    }
    let a = d.abs();
    if a != 0.0 && !(1e-4..1e16).contains(&a) {
        let s = format!("{d:e}");
        // Rust prints `1e20` / `1.5e-7`; mongod prints `1e+20` / `1.5e-07`.
        if let Some((mant, exp)) = s.split_once('e') {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(rest) => ('-', rest),
                None => ('+', exp),
            };
            return format!("{mant}e{sign}{digits:0>2}");
        }
        return s;
    }
    let s = format!("{d}");
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

/// A value in mongod's `Value::toString` style, used in error messages and `$toString`.
pub(crate) fn fmt_value(value: &Bson) -> String {
    match value {
        Bson::Double(d) => fmt_double(*d),
        Bson::Int32(i) => i.to_string(),
        Bson::Int64(i) => i.to_string(),
        Bson::Boolean(b) => b.to_string(),
        Bson::Null => "null".to_string(),
        Bson::Undefined => "undefined".to_string(),
        Bson::String(s) => format!("\"{s}\""),
        Bson::ObjectId(o) => format!("ObjectId('{}')", o.to_hex()),
        Bson::DateTime(d) => format!("new Date({})", d.timestamp_millis()),
        Bson::Timestamp(t) => format!("Timestamp({}, {})", t.time, t.increment),
        Bson::Array(a) => {
            let items: Vec<String> = a.iter().map(fmt_value).collect();
            format!("[{}]", items.join(", "))
        }
        Bson::Document(d) => {
            let items: Vec<String> = d
                .iter()
                .map(|(k, v)| format!("{k}: {}", fmt_value(v)))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
        Bson::MinKey => "MinKey".to_string(),
        Bson::MaxKey => "MaxKey".to_string(),
        other => other.to_string(),
    }
}

/// A document in mongod's `BSONObj::toString` style (`{ a: 1, b: "x" }`), used in parse
/// error messages.
pub(crate) fn fmt_obj(doc: &bson::Document) -> String {
    if doc.is_empty() {
        return "{}".to_string();
    }
    let items: Vec<String> = doc
        .iter()
        .map(|(k, v)| format!("{k}: {}", fmt_obj_value(v)))
        .collect();
    format!("{{ {} }}", items.join(", "))
}

fn fmt_obj_value(value: &Bson) -> String {
    match value {
        Bson::Document(d) => fmt_obj(d),
        Bson::Array(a) if a.is_empty() => "[]".to_string(),
        Bson::Array(a) => {
            let items: Vec<String> = a.iter().map(fmt_obj_value).collect();
            format!("[ {} ]", items.join(", "))
        }
        other => fmt_value(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{Timestamp, bson};

    #[test]
    fn conversions_follow_the_convert_table() {
        let ok = [
            (bson!(1.9), Target::Long, bson!(1_i64)),
            (bson!(-1.9), Target::Int, bson!(-1)),
            (bson!("42"), Target::Long, bson!(42_i64)),
            (bson!("-7"), Target::Int, bson!(-7)),
            (bson!("2.5"), Target::Double, bson!(2.5)),
            (bson!(true), Target::Long, bson!(1_i64)),
            (
                Bson::DateTime(DateTime::from_millis(1500)),
                Target::Long,
                bson!(1500_i64),
            ),
            (bson!(0), Target::Bool, bson!(false)),
            (bson!(""), Target::Bool, bson!(true)),
            (
                bson!(3_i64),
                Target::Date,
                Bson::DateTime(DateTime::from_millis(3)),
            ),
            (
                bson!("1970-01-01T00:00:01Z"),
                Target::Date,
                Bson::DateTime(DateTime::from_millis(1000)),
            ),
            (
                bson!("1970-01-02"),
                Target::Date,
                Bson::DateTime(DateTime::from_millis(86_400_000)),
            ),
            (
                Bson::Timestamp(Timestamp {
                    time: 2,
                    increment: 9,
                }),
                Target::Date,
                Bson::DateTime(DateTime::from_millis(2000)),
            ),
            (bson!(2.0), Target::String, bson!("2")),
            (bson!(2.5), Target::String, bson!("2.5")),
            (bson!(1e20), Target::String, bson!("1e+20")),
            (bson!(1e15), Target::String, bson!("1000000000000000")),
            (bson!(1.5e-7), Target::String, bson!("1.5e-07")),
            (bson!(-0.0), Target::String, bson!("-0")),
            (
                Bson::DateTime(DateTime::from_millis(1_700_000_000_123)),
                Target::String,
                bson!("2023-11-14T22:13:20.123Z"),
            ),
            (
                bson!("000000000000000000000001"),
                Target::ObjectId,
                Bson::ObjectId(ObjectId::parse_str("000000000000000000000001").unwrap()),
            ),
        ];
        for (input, to, expected) in ok {
            assert_eq!(
                convert(&input, to).unwrap(),
                expected,
                "{input:?} -> {to:?}"
            );
        }
    }

    #[test]
    fn conversion_failures_have_mongod_messages() {
        let cases = [
            (
                bson!({"a": 1}),
                Target::Long,
                "Unsupported conversion from object to long in $convert with no onError value",
            ),
            (
                bson!("abc"),
                Target::Long,
                "Failed to parse number 'abc' in $convert with no onError value: Did not consume whole string.",
            ),
            (
                bson!("-"),
                Target::Long,
                "Failed to parse number '-' in $convert with no onError value: No digits",
            ),
            (
                bson!("99999999999999999999"),
                Target::Long,
                "Failed to parse number '99999999999999999999' in $convert with no onError value: Overflow",
            ),
            (
                bson!("0x10"),
                Target::Int,
                "Illegal hexadecimal input in $convert with no onError value: 0x10",
            ),
            (
                bson!("abc"),
                Target::Double,
                "Failed to parse number 'abc' in $convert with no onError value: Did not consume any digits",
            ),
            (
                bson!("1.5x"),
                Target::Double,
                "Failed to parse number '1.5x' in $convert with no onError value: Did not consume whole string.",
            ),
            (
                bson!(" 5"),
                Target::Double,
                "Failed to parse number ' 5' in $convert with no onError value: Leading whitespace",
            ),
            (
                bson!("1e400"),
                Target::Double,
                "Failed to parse number '1e400' in $convert with no onError value: Out of range",
            ),
            (
                bson!(""),
                Target::Double,
                "Failed to parse number '' in $convert with no onError value: Empty string",
            ),
            (
                bson!("12x"),
                Target::Int,
                "Failed to parse number '12x' in $convert with no onError value: Did not consume whole string.",
            ),
            (
                bson!(1e20),
                Target::Long,
                "Conversion would overflow target type in $convert with no onError value: 1e+20",
            ),
            (
                bson!(3_000_000_000_i64),
                Target::Int,
                "Conversion would overflow target type in $convert with no onError value: 3000000000",
            ),
            (
                bson!(f64::NAN),
                Target::Int,
                "Attempt to convert NaN value to integer type in $convert with no onError value: nan",
            ),
            (
                bson!(1),
                Target::Date,
                "Unsupported conversion from int to date in $convert with no onError value",
            ),
        ];
        for (input, to, msg) in cases {
            assert_eq!(convert(&input, to).unwrap_err().message(), msg);
        }
    }

    #[test]
    fn dates_break_down_in_utc() {
        let p = date_parts(DateTime::from_millis(-1));
        assert_eq!(
            (p.year, p.month, p.day, p.hour, p.millis),
            (1969, 12, 31, 23, 999)
        );
        let p = date_parts(DateTime::from_millis(951_782_400_000)); // 2000-02-29
        assert_eq!(
            (p.year, p.month, p.day, p.weekday, p.yearday),
            (2000, 2, 29, 3, 60)
        );
    }
}
