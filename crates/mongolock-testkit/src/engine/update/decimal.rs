//! Exact Decimal128 arithmetic for `$inc` and `$mul` (IEEE 754-2008 decimal128: 34 digits,
//! exponents -6176..=6111, round half to even), as mongod's `SafeNum` does when either operand
//! is a decimal. Other numbers are converted first: integers exactly, doubles to 15
//! significant digits (mongod's `kRoundTo15Digits`).

use std::str::FromStr;

use bson::{Bson, Decimal128};

const MAX_DIGITS: usize = 34;
const MAX_EXP: i64 = 6111;
const MIN_EXP: i64 = -6176;

#[derive(Debug, Clone, PartialEq)]
enum Num {
    NaN,
    Inf {
        neg: bool,
    },
    /// `(-1)^neg * digits * 10^exp`; `digits` most significant first, no leading zeros
    /// (empty for zero).
    Finite {
        neg: bool,
        digits: Vec<u8>,
        exp: i64,
    },
}

/// `a + b` (or `a * b`) where at least one operand is a Decimal128; `None` if an operand is
/// not a number.
pub(crate) fn arithmetic(multiply: bool, a: &Bson, b: &Bson) -> Option<Bson> {
    let (x, y) = (to_num(a)?, to_num(b)?);
    let result = if multiply { mul(x, y) } else { add(x, y) };
    to_decimal(result).map(Bson::Decimal128)
}

fn to_num(v: &Bson) -> Option<Num> {
    match v {
        Bson::Int32(i) => Some(from_integer(i64::from(*i))),
        Bson::Int64(i) => Some(from_integer(*i)),
        Bson::Double(d) if d.is_nan() => Some(Num::NaN),
        Bson::Double(d) if d.is_infinite() => Some(Num::Inf { neg: *d < 0.0 }),
        Bson::Double(d) => parse(&format!("{d:.14e}")),
        Bson::Decimal128(d) => parse(&d.to_string()),
        _ => None,
    }
}

fn from_integer(i: i64) -> Num {
    let digits = strip(
        i.unsigned_abs()
            .to_string()
            .bytes()
            .map(|c| c - b'0')
            .collect(),
    );
    Num::Finite {
        neg: i < 0,
        digits,
        exp: 0,
    }
}

fn strip(mut digits: Vec<u8>) -> Vec<u8> {
    let zeros = digits.iter().take_while(|d| **d == 0).count();
    digits.drain(..zeros);
    digits
}

fn parse(s: &str) -> Option<Num> {
    let (neg, body) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    match body {
        "NaN" => return Some(Num::NaN),
        "Infinity" | "inf" => return Some(Num::Inf { neg }),
        _ => {}
    }
    let (mantissa, exp) = match body.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.strip_prefix('+').unwrap_or(e).parse::<i64>().ok()?),
        None => (body, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all: String = format!("{int}{frac}");
    if all.is_empty() || !all.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let digits = strip(all.bytes().map(|c| c - b'0').collect());
    Some(Num::Finite {
        neg,
        digits,
        exp: exp - i64::try_from(frac.len()).ok()?,
    })
}

/// Magnitude helpers on least-significant-first digit vectors.
fn to_lsb(digits: &[u8], shift: usize) -> Vec<u8> {
    let mut out = vec![0; shift];
    out.extend(digits.iter().rev());
    out
}

fn from_lsb(mut lsb: Vec<u8>) -> Vec<u8> {
    lsb.reverse();
    strip(lsb)
}

fn cmp_lsb(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let trim = |v: &[u8]| v.len() - v.iter().rev().take_while(|d| **d == 0).count();
    let (la, lb) = (trim(a), trim(b));
    la.cmp(&lb)
        .then_with(|| a[..la].iter().rev().cmp(b[..lb].iter().rev()))
}

fn add_lsb(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.len().max(b.len()) + 1);
    let mut carry = 0;
    for i in 0..a.len().max(b.len()) {
        let s = a.get(i).copied().unwrap_or(0) + b.get(i).copied().unwrap_or(0) + carry;
        out.push(s % 10);
        carry = s / 10;
    }
    if carry > 0 {
        out.push(carry);
    }
    out
}

/// `a - b` for `a >= b`.
fn sub_lsb(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.len());
    let mut borrow = 0;
    for (i, &x) in a.iter().enumerate() {
        let y = b.get(i).copied().unwrap_or(0) + borrow;
        if x >= y {
            out.push(x - y);
            borrow = 0;
        } else {
            out.push(x + 10 - y);
            borrow = 1;
        }
    }
    out
}

fn add(a: Num, b: Num) -> Num {
    match (a, b) {
        (Num::NaN, _) | (_, Num::NaN) => Num::NaN,
        (Num::Inf { neg: x }, Num::Inf { neg: y }) if x != y => Num::NaN,
        (inf @ Num::Inf { .. }, _) | (_, inf @ Num::Inf { .. }) => inf,
        (
            Num::Finite {
                neg: na,
                digits: da,
                exp: ea,
            },
            Num::Finite {
                neg: nb,
                digits: db,
                exp: eb,
            },
        ) => {
            let exp = ea.min(eb);
            // Exponent differences are bounded by the decimal128 exponent range.
            let shift = |e: i64| usize::try_from(e - exp).unwrap_or(0);
            let (x, y) = (to_lsb(&da, shift(ea)), to_lsb(&db, shift(eb)));
            if na == nb {
                return Num::Finite {
                    neg: na,
                    digits: from_lsb(add_lsb(&x, &y)),
                    exp,
                };
            }
            match cmp_lsb(&x, &y) {
                std::cmp::Ordering::Equal => Num::Finite {
                    neg: false,
                    digits: Vec::new(),
                    exp,
                },
                std::cmp::Ordering::Greater => Num::Finite {
                    neg: na,
                    digits: from_lsb(sub_lsb(&x, &y)),
                    exp,
                },
                std::cmp::Ordering::Less => Num::Finite {
                    neg: nb,
                    digits: from_lsb(sub_lsb(&y, &x)),
                    exp,
                },
            }
        }
    }
}

fn mul(a: Num, b: Num) -> Num {
    let is_zero = |n: &Num| matches!(n, Num::Finite { digits, .. } if digits.is_empty());
    match (a, b) {
        (Num::NaN, _) | (_, Num::NaN) => Num::NaN,
        (Num::Inf { .. }, z) | (z, Num::Inf { .. }) if is_zero(&z) => Num::NaN,
        (Num::Inf { neg: x }, other) | (other, Num::Inf { neg: x }) => {
            let y = match other {
                Num::Inf { neg } | Num::Finite { neg, .. } => neg,
                Num::NaN => false,
            };
            Num::Inf { neg: x != y }
        }
        (
            Num::Finite {
                neg: na,
                digits: da,
                exp: ea,
            },
            Num::Finite {
                neg: nb,
                digits: db,
                exp: eb,
            },
        ) => {
            let (x, y) = (to_lsb(&da, 0), to_lsb(&db, 0));
            let mut out = vec![0u32; x.len() + y.len() + 1];
            for (i, &p) in x.iter().enumerate() {
                for (j, &q) in y.iter().enumerate() {
                    out[i + j] += u32::from(p) * u32::from(q);
                }
            }
            let mut carry = 0;
            let mut lsb = Vec::with_capacity(out.len());
            for v in out {
                let s = v + carry;
                lsb.push((s % 10) as u8);
                carry = s / 10;
            }
            while carry > 0 {
                lsb.push((carry % 10) as u8);
                carry /= 10;
            }
            Num::Finite {
                neg: na != nb,
                digits: from_lsb(lsb),
                exp: ea + eb,
            }
        }
    }
}

/// Drops the `drop` least significant digits, rounding half to even; may return one more
/// digit than it kept (a carry out of `999…`).
fn round_off(digits: &[u8], drop: usize) -> Vec<u8> {
    if drop == 0 {
        return digits.to_vec();
    }
    if drop > digits.len() {
        return Vec::new();
    }
    let (keep, rest) = digits.split_at(digits.len() - drop);
    let mut keep = keep.to_vec();
    let first = rest[0];
    let tail_nonzero = rest[1..].iter().any(|d| *d != 0);
    let odd = keep.last().is_some_and(|d| d % 2 == 1);
    if first > 5 || (first == 5 && (tail_nonzero || odd)) {
        let mut i = keep.len();
        loop {
            if i == 0 {
                keep.insert(0, 1);
                break;
            }
            i -= 1;
            if keep[i] == 9 {
                keep[i] = 0;
            } else {
                keep[i] += 1;
                break;
            }
        }
    }
    strip(keep)
}

fn to_decimal(n: Num) -> Option<Decimal128> {
    let text = match n {
        Num::NaN => "NaN".to_string(),
        Num::Inf { neg } => if neg { "-Infinity" } else { "Infinity" }.to_string(),
        Num::Finite {
            neg,
            mut digits,
            mut exp,
        } => {
            if digits.len() > MAX_DIGITS {
                let drop = digits.len() - MAX_DIGITS;
                digits = round_off(&digits, drop);
                exp += i64::try_from(drop).ok()?;
                if digits.len() > MAX_DIGITS {
                    digits = round_off(&digits, 1);
                    exp += 1;
                }
            }
            if exp < MIN_EXP {
                let drop = usize::try_from(MIN_EXP - exp).ok()?;
                digits = round_off(&digits, drop);
                exp = MIN_EXP;
            }
            if digits.is_empty() {
                exp = exp.clamp(MIN_EXP, MAX_EXP);
            } else if exp > MAX_EXP {
                let pad = usize::try_from(exp - MAX_EXP).ok()?;
                if digits.len() + pad > MAX_DIGITS {
                    let inf = if neg { "-Infinity" } else { "Infinity" };
                    return Decimal128::from_str(inf).ok();
                }
                digits.extend(std::iter::repeat_n(0, pad));
                exp = MAX_EXP;
            }
            let body: String = if digits.is_empty() {
                "0".to_string()
            } else {
                digits.iter().map(|d| char::from(b'0' + d)).collect()
            };
            format!("{}{body}E{exp}", if neg { "-" } else { "" })
        }
    };
    Decimal128::from_str(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(s: &str) -> Bson {
        Bson::Decimal128(Decimal128::from_str(s).unwrap())
    }

    fn show(v: Option<Bson>) -> String {
        match v {
            Some(Bson::Decimal128(d)) => d.to_string(),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn decimal_arithmetic_table() {
        let nines = "9".repeat(34);
        let cases: Vec<(bool, Bson, Bson, &str)> = vec![
            (false, dec("1.5"), Bson::Int32(2), "3.5"),
            (false, dec("1.10"), dec("2.205"), "3.305"),
            (false, dec("1E+2"), Bson::Int64(1), "101"),
            (false, dec("5"), dec("-5.00"), "0.00"),
            (false, dec("-1"), Bson::Int32(-2), "-3"),
            (false, dec("1"), Bson::Double(0.1), "1.100000000000000"),
            (true, dec("0.1"), dec("0.2"), "0.02"),
            (true, dec("-1.5"), Bson::Int32(4), "-6.0"),
            (true, dec("2"), Bson::Int32(0), "0"),
            // 34 nines + 1 rounds to 34 digits.
            (
                false,
                dec(&nines),
                Bson::Int32(1),
                "1.000000000000000000000000000000000E+34",
            ),
            // Ties round to even.
            (
                false,
                dec("1234567890123456789012345678901234"),
                dec("0.5"),
                "1234567890123456789012345678901234",
            ),
            (
                false,
                dec("1234567890123456789012345678901235"),
                dec("0.5"),
                "1234567890123456789012345678901236",
            ),
            (false, dec("Infinity"), Bson::Int32(1), "Infinity"),
            (false, dec("Infinity"), dec("-Infinity"), "NaN"),
            (true, dec("Infinity"), Bson::Int32(0), "NaN"),
            (true, dec("-Infinity"), Bson::Int32(-3), "Infinity"),
            (true, dec("9E+6111"), Bson::Int32(10), "9.0E+6112"),
            (true, dec("9E+6144"), Bson::Int32(10), "Infinity"),
        ];
        for (multiply, a, b, expected) in cases {
            let got = show(arithmetic(multiply, &a, &b));
            assert_eq!(
                got,
                expected,
                "{a:?} {} {b:?}",
                if multiply { "*" } else { "+" }
            );
        }
        assert_eq!(
            arithmetic(false, &dec("1"), &Bson::String("x".into())),
            None
        );
    }
}
