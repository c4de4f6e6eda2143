//! `writeConcern`, as every write command checks it (apart from the other arguments: the
//! member count comes from the server's state, which the argument readers do not need).

use bson::{Bson, Document};

use super::args::{opt_document, wrong_type};
use super::state::ServerState;
use crate::engine::compare::as_f64;
use crate::engine::error::{CommandError, Result, codes};

/// Validates `writeConcern` (w, j, wtimeout, fsync). Majority and numbers up to the member
/// count are satisfiable (one member, or the members of the server's replica set);
/// anything else is answered as mongod would.
pub fn check(cmd: &Document, state: &ServerState) -> Result<Option<i64>> {
    let standalone = state.standalone;
    let members = state.replica.as_ref().map_or(1, |r| r.members()) as f64;
    let Some(wc) = opt_document(cmd, "command", "writeConcern")? else {
        return Ok(None);
    };
    let mut w_number = None;
    for (field, value) in wc {
        match field.as_str() {
            "w" => match value {
                Bson::String(mode) if mode == "majority" => {}
                Bson::String(mode) => {
                    return Err(CommandError::new(
                        79,
                        format!(
                            "No write concern mode named '{mode}' found in replica set configuration"
                        ),
                    ));
                }
                v => match as_f64(v) {
                    Some(n) if n >= 0.0 && n.fract() == 0.0 => {
                        if n > members {
                            return Err(CommandError::new(
                                100,
                                if standalone {
                                    "cannot use 'w' > 1 on a standalone mongod".to_string()
                                } else {
                                    format!(
                                        "Not enough data-bearing nodes to satisfy write concern w:{n}"
                                    )
                                },
                            ));
                        }
                        w_number = Some(n as i64);
                    }
                    _ => {
                        return Err(CommandError::failed_to_parse(format!(
                            "w has to be a non-negative number and not greater than 50; found: {v}"
                        )));
                    }
                },
            },
            "j" | "fsync" => {
                if !matches!(value, Bson::Boolean(_)) && as_f64(value).is_none() {
                    return Err(wrong_type("writeConcern", field, value, " 'bool'"));
                }
            }
            "wtimeout" | "wtimeoutMS" => {
                if as_f64(value).is_none() {
                    return Err(wrong_type("writeConcern", field, value, " 'int'"));
                }
            }
            "provenance" | "getLastError" => {}
            other => {
                return Err(CommandError::new(
                    codes::UNKNOWN_BSON_FIELD,
                    format!("BSON field 'writeConcern.{other}' is an unknown field."),
                ));
            }
        }
    }
    Ok(w_number)
}
