//! Collations: the emulator compares strings by their bytes, which is MongoDB's "simple"
//! collation, so `{locale: "simple"}` is accepted wherever mongod accepts a collation and
//! behaves exactly as no collation. Every other collation is refused.
//!
//! The checks follow mongod (`CollatorFactoryICU::makeFromBSON` and the `collation` IDL
//! struct): `locale` is required and must be a string, and with `locale: "simple"` no other
//! field may be present (`FailedToParse`, 9). A locale other than `"simple"` would need ICU,
//! which the emulator does not have: it is refused with `InvalidOptions` (72).

use bson::{Bson, Document};

use super::compare::type_alias;
use super::error::shell_repr;
use super::error::{CommandError, Result, codes};

/// Checks an optional `collation` argument that mongod's IDL types as an object; `field` is
/// its path for the type-mismatch message (`find.collation`, `update.updates.collation`).
pub fn check(collation: Option<&Bson>, field: &str) -> Result<()> {
    match collation {
        None => Ok(()),
        Some(Bson::Document(spec)) => check_spec(spec),
        Some(other) => Err(CommandError::type_mismatch(format!(
            "BSON field '{field}' is the wrong type '{}', expected type 'object'",
            type_alias(other)
        ))),
    }
}

/// Checks a collation specification: `Ok` for the simple collation, an error otherwise.
pub fn check_spec(spec: &Document) -> Result<()> {
    let locale = match spec.get("locale") {
        Some(Bson::String(locale)) => locale,
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'collation.locale' is the wrong type '{}', expected type 'string'",
                type_alias(other)
            )));
        }
        None => {
            return Err(CommandError::new(
                codes::MISSING_REQUIRED_FIELD,
                "BSON field 'collation.locale' is missing but a required field",
            ));
        }
    };
    if locale != "simple" {
        return Err(CommandError::new(
            codes::INVALID_OPTIONS,
            format!(
                "collation {} is not supported by this emulator: only the simple collation \
                 ({{locale: \"simple\"}}, binary comparison) is",
                shell_repr(&Bson::Document(spec.clone()))
            ),
        ));
    }
    if spec.len() > 1 {
        return Err(CommandError::failed_to_parse(format!(
            "If locale=simple, no other fields should be present in: {}",
            shell_repr(&Bson::Document(spec.clone()))
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{Bson, doc};

    fn code(collation: Bson) -> i32 {
        check(Some(&collation), "find.collation").unwrap_err().code
    }

    #[test]
    fn only_the_simple_collation_passes() {
        assert!(check(None, "find.collation").is_ok());
        assert!(
            check(
                Some(&Bson::Document(doc! {"locale": "simple"})),
                "find.collation"
            )
            .is_ok()
        );
        assert_eq!(
            code(Bson::Document(doc! {"locale": "simple", "strength": 2})),
            9
        );
        assert_eq!(code(Bson::Document(doc! {"locale": "en"})), 72);
        assert_eq!(
            code(Bson::Document(doc! {"locale": "fr", "strength": 1})),
            72
        );
        assert_eq!(code(Bson::Document(doc! {"strength": 1})), 40414);
        assert_eq!(code(Bson::Document(doc! {"locale": 1})), 14);
        assert_eq!(code(Bson::String("simple".into())), 14);
    }
}
