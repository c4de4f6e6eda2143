//! Numeric helpers for arithmetic expressions and accumulators, following mongod's widening
//! rules: int op int stays int unless it overflows (then long), long overflow falls back to
//! double, and any double makes the result a double.

// `CommandError` (owned by `engine::error`) is large; every fallible function here returns it.

use bson::Bson;

use crate::engine::{CommandError, Result};

/// A number as the arithmetic operators see it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Num {
    Int(i32),
    Long(i64),
    Double(f64),
}

impl Num {
    /// The number in `value`, or `None` for a non-number. Decimal128 fails: the emulator has
    /// no decimal arithmetic and must not silently round.
    pub(crate) fn of(value: &Bson, op: &str) -> Result<Option<Num>> {
        Ok(match value {
            Bson::Int32(i) => Some(Num::Int(*i)),
            Bson::Int64(i) => Some(Num::Long(*i)),
            Bson::Double(d) => Some(Num::Double(*d)),
            Bson::Decimal128(_) => return Err(decimal_unsupported(op)),
            _ => None,
        })
    }

    pub(crate) fn to_f64(self) -> f64 {
        match self {
            Num::Int(i) => f64::from(i),
            Num::Long(i) => i as f64,
            Num::Double(d) => d,
        }
    }

    pub(crate) fn to_i64(self) -> Option<i64> {
        match self {
            Num::Int(i) => Some(i64::from(i)),
            Num::Long(i) => Some(i),
            Num::Double(_) => None,
        }
    }

    pub(crate) fn into_bson(self) -> Bson {
        match self {
            Num::Int(i) => Bson::Int32(i),
            Num::Long(i) => Bson::Int64(i),
            Num::Double(d) => Bson::Double(d),
        }
    }

    pub(crate) fn is_zero(self) -> bool {
        match self {
            Num::Int(i) => i == 0,
            Num::Long(i) => i == 0,
            Num::Double(d) => d == 0.0,
        }
    }
}

/// The error for Decimal128 operands, which the emulator does not compute with.
pub(crate) fn decimal_unsupported(op: &str) -> CommandError {
    CommandError::bad_value(format!(
        "{op}: Decimal128 arithmetic is not supported by the mongolock test server"
    ))
}

/// Narrows an exact integer result: int if both inputs were ints and it fits, else long.
fn narrow(value: i64, both_int: bool) -> Num {
    match i32::try_from(value) {
        Ok(i) if both_int => Num::Int(i),
        _ => Num::Long(value),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Width {
    Int,
    Long,
    Double,
}

/// A running fold of numbers with mongod's type widening: an int result while every input is
/// an int and the exact value fits, a long once a long is seen or an int overflows, a double
/// once a double is seen or the exact value overflows a long.
#[derive(Debug, Clone)]
struct Widening {
    width: Width,
    /// The exact integer value, `None` once it overflowed a long.
    exact: Option<i64>,
    double: f64,
}

impl Widening {
    fn starting_at(value: i64) -> Self {
        Widening {
            width: Width::Int,
            exact: Some(value),
            double: value as f64,
        }
    }

    fn fold(&mut self, n: Num, exact: fn(i64, i64) -> Option<i64>, double: fn(f64, f64) -> f64) {
        self.double = double(self.double, n.to_f64());
        match n {
            Num::Int(_) | Num::Long(_) => {
                if matches!(n, Num::Long(_)) && self.width == Width::Int {
                    self.width = Width::Long;
                }
                let v = n.to_i64().unwrap_or_default();
                self.exact = self.exact.and_then(|e| exact(e, v));
            }
            Num::Double(_) => self.width = Width::Double,
        }
    }

    fn result(&self) -> Num {
        match (self.width, self.exact) {
            (Width::Double, _) | (_, None) => Num::Double(self.double),
            (Width::Int, Some(e)) => narrow(e, true),
            (Width::Long, Some(e)) => Num::Long(e),
        }
    }
}

/// A running sum with mongod's type widening (`$add`, `$sum`, `$avg`).
#[derive(Debug, Clone)]
pub(crate) struct Sum {
    value: Widening,
    /// How many numbers were added.
    pub(crate) count: u64,
}

impl Default for Sum {
    fn default() -> Self {
        Sum {
            value: Widening::starting_at(0),
            count: 0,
        }
    }
}

impl Sum {
    pub(crate) fn add(&mut self, n: Num) {
        self.count += 1;
        self.value.fold(n, i64::checked_add, |a, b| a + b);
    }

    pub(crate) fn result(&self) -> Num {
        self.value.result()
    }

    /// The sum as an `i64` when it is integral and exact (for date arithmetic).
    pub(crate) fn as_millis(&self) -> Option<i64> {
        match (self.value.width, self.value.exact) {
            (Width::Double, _) | (_, None) => {
                let r = self.value.double.round();
                (r.is_finite() && r.abs() < 9.2e18).then_some(r as i64)
            }
            (_, Some(e)) => Some(e),
        }
    }
}

/// A running product with mongod's type widening (`$multiply`).
#[derive(Debug, Clone)]
pub(crate) struct Product {
    value: Widening,
}

impl Default for Product {
    fn default() -> Self {
        Product {
            value: Widening::starting_at(1),
        }
    }
}

impl Product {
    pub(crate) fn mul(&mut self, n: Num) {
        self.value.fold(n, i64::checked_mul, |a, b| a * b);
    }

    pub(crate) fn result(&self) -> Num {
        self.value.result()
    }
}

/// `a - b` for two numbers.
pub(crate) fn subtract(a: Num, b: Num) -> Num {
    match (a.to_i64(), b.to_i64()) {
        (Some(x), Some(y)) => {
            let both_int = matches!((a, b), (Num::Int(_), Num::Int(_)));
            match x.checked_sub(y) {
                Some(r) => narrow(r, both_int),
                None => Num::Double(a.to_f64() - b.to_f64()),
            }
        }
        _ => Num::Double(a.to_f64() - b.to_f64()),
    }
}

/// `a mod b` (`b` is not zero): the sign follows the dividend.
pub(crate) fn modulo(a: Num, b: Num) -> Num {
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => Num::Int(x.wrapping_rem(y)),
        _ => match (a.to_i64(), b.to_i64()) {
            (Some(x), Some(y)) => Num::Long(x.wrapping_rem(y)),
            _ => Num::Double(a.to_f64() % b.to_f64()),
        },
    }
}

/// `|a|`; the absolute value of the smallest long cannot be represented (code 28680).
pub(crate) fn abs(a: Num) -> Result<Num> {
    Ok(match a {
        Num::Int(i) => match i.checked_abs() {
            Some(v) => Num::Int(v),
            None => Num::Long(i64::from(i).abs()),
        },
        Num::Long(i) => match i.checked_abs() {
            Some(v) => Num::Long(v),
            None => return Err(CommandError::new(28680, "can't take $abs of long long min")),
        },
        Num::Double(d) => Num::Double(d.abs()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_widen_like_mongod() {
        let cases: Vec<(Vec<Num>, Num)> = vec![
            (vec![Num::Int(1), Num::Int(2)], Num::Int(3)),
            (
                vec![Num::Int(i32::MAX), Num::Int(1)],
                Num::Long(i64::from(i32::MAX) + 1),
            ),
            (vec![Num::Int(1), Num::Long(2)], Num::Long(3)),
            (
                vec![Num::Long(i64::MAX), Num::Int(1)],
                Num::Double(i64::MAX as f64 + 1.0),
            ),
            (vec![Num::Int(1), Num::Double(0.5)], Num::Double(1.5)),
            (vec![], Num::Int(0)),
        ];
        for (inputs, expected) in cases {
            let mut s = Sum::default();
            for n in &inputs {
                s.add(*n);
            }
            assert_eq!(s.result(), expected, "{inputs:?}");
        }
    }

    #[test]
    fn products_subtraction_and_mod_widen() {
        let mut p = Product::default();
        p.mul(Num::Int(65536));
        p.mul(Num::Int(65536));
        assert_eq!(p.result(), Num::Long(1 << 32));
        let mut p = Product::default();
        p.mul(Num::Long(i64::MAX));
        p.mul(Num::Int(2));
        assert_eq!(p.result(), Num::Double(i64::MAX as f64 * 2.0));
        assert_eq!(
            subtract(Num::Int(i32::MIN), Num::Int(1)),
            Num::Long(i64::from(i32::MIN) - 1)
        );
        assert_eq!(subtract(Num::Long(5), Num::Int(1)), Num::Long(4));
        assert_eq!(modulo(Num::Int(-7), Num::Int(3)), Num::Int(-1));
        assert_eq!(modulo(Num::Long(i64::MIN), Num::Int(-1)), Num::Long(0));
        assert_eq!(modulo(Num::Double(7.5), Num::Int(2)), Num::Double(1.5));
        assert_eq!(abs(Num::Int(i32::MIN)).unwrap(), Num::Long(2_147_483_648));
        assert_eq!(abs(Num::Long(i64::MIN)).unwrap_err().code, 28680);
    }
}
