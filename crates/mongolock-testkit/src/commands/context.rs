//! The command context: what a command handler is given besides its arguments (the
//! server, the command's `$db`, its connection, `$$NOW`), and what a connection remembers
//! between commands.

use std::time::Instant;

use bson::{Bson, DateTime, Document};

use super::args;
use super::state::PrimaryWait;
use super::state::ServerState;
use crate::engine::EvalContext;
use crate::engine::collection::{Catalog, Collection, CollectionRef};
use crate::engine::error::{CommandError, Result};
use crate::engine::expr::Expr;

/// What one connection remembers between commands.
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    /// The server-assigned connection id (`connectionId` in hello).
    pub id: i64,
    /// `client.application.name` from the handshake, matched by fail points' `appName`.
    pub app_name: Option<String>,
}

impl ConnectionInfo {
    /// A connection that has not shaken hands yet.
    pub fn new(id: i64) -> Self {
        Self { id, app_name: None }
    }
}

/// Everything a command handler needs besides its arguments.
#[derive(Debug)]
pub struct Ctx<'a> {
    /// The server.
    pub state: &'a ServerState,
    /// The command's `$db`.
    pub db: &'a str,
    /// The connection it arrived on.
    pub conn: &'a ConnectionInfo,
    /// `$$NOW` for this command.
    pub now: DateTime,
    /// When the command's `maxTimeMS` runs out, if it has one.
    pub deadline: Option<Instant>,
    /// For a read at majority read concern on a replica-set member: the member's data as of
    /// its majority commit point, which the read reads instead of the server's catalog.
    pub snapshot: Option<&'a Catalog>,
    /// On a replica-set member, the term when the command arrived while the member was
    /// primary: what it writes is the member's own. `None` on a member that was not primary,
    /// whose `$out` or `$merge` writes go to the primary
    /// ([`super::state::Member::write_through_primary`]), and outside a set.
    pub admitted: Option<i64>,
    /// Where such a `$out` or `$merge` leaves its write-concern wait on the primary, which
    /// the dispatcher awaits once the command ran.
    pub primary_wait: &'a parking_lot::Mutex<Option<PrimaryWait>>,
}

impl Ctx<'_> {
    /// The data a read reads: the committed snapshot of a majority read on a set member,
    /// else the server's catalog.
    pub fn read_catalog(&self) -> &Catalog {
        self.snapshot.unwrap_or(&self.state.catalog)
    }

    /// Fails with `MaxTimeMSExpired` once the command's deadline has passed.
    ///
    /// # Errors
    ///
    /// `MaxTimeMSExpired` (50).
    pub fn check_deadline(&self) -> Result<()> {
        crate::engine::check_deadline(self.deadline)
    }

    /// Locks a collection, waiting for it no later than the command's deadline: a command
    /// that waits for another's lock past its `maxTimeMS` fails with `MaxTimeMSExpired`, as
    /// mongod's lock waits are interrupted at the operation's deadline.
    ///
    /// # Errors
    ///
    /// `MaxTimeMSExpired` (50).
    pub fn lock<'c>(
        &self,
        coll: &'c CollectionRef,
    ) -> Result<parking_lot::MutexGuard<'c, Collection>> {
        match self.deadline {
            None => Ok(coll.lock()),
            Some(at) => {
                let guard = coll.try_lock_until(at);
                self.check_deadline()?;
                guard.ok_or_else(|| CommandError::internal("a collection lock timed out early"))
            }
        }
    }

    /// The evaluation context for this command, with its `let` variables evaluated.
    pub fn eval_context(&self, cmd: &Document, command: &str) -> Result<EvalContext> {
        let mut eval = EvalContext::at(self.now);
        eval.deadline = self.deadline;
        if !self.state.standalone {
            eval.cluster_time = Some(self.state.cluster_time());
        }
        if let Some(vars) = args::opt_document(cmd, command, "let")? {
            let empty = Document::new();
            for (name, value) in vars {
                let valid = name
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_lowercase() || !c.is_ascii())
                    && name.chars().all(|c| c.is_alphanumeric() || c == '_');
                if !valid {
                    return Err(CommandError::new(
                        16870,
                        format!(
                            "'{name}' starts with an invalid character for a user variable name"
                        ),
                    ));
                }
                let evaluated = Expr::parse(value)?
                    .eval(&empty, &eval)?
                    .unwrap_or(Bson::Null);
                eval.vars.insert(name.clone(), evaluated);
            }
        }
        Ok(eval)
    }
}
