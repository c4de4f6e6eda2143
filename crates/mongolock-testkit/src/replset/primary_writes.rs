//! A `$out` or `$merge` run on a member that is not primary: the pipeline reads the
//! member's own data (at the read concern asked, as any read there), and the stage's writes
//! go to the primary, as mongod (4.4 and later) sends them there as commands
//! (`src/mongo/db/pipeline/process_interface/replica_set_node_process_interface.cpp`,
//! `ReplicaSetNodeProcessInterface`: `insert`, `update`, `createCollection`, `dropCollection`
//! and the `$out` rename each call `_executeCommandOnPrimary` unless the node can write
//! locally). There they are the primary's own writes: admitted as any write it takes, logged
//! in its oplog and replicated back to every member, this one included.

use bson::Document;

use super::member::Replica;
use crate::commands::state::PrimaryWait;
use crate::commands::state::ServerState;
use crate::engine::error::{CommandError, Result};

impl Replica {
    /// Runs `write` (the stage's writes) on the primary this member reaches, as the
    /// primary's own write, and returns the wait for the command's write concern there, as
    /// `ReplicaSetNodeProcessInterface::_executeCommandOnPrimary` sends each write:
    /// - with no primary known, the aggregate fails `PrimarySteppedDown` (189) "No primary
    ///   exists currently" before anything is written;
    /// - the command it sends carries the aggregate's write concern
    ///   (`_attachGenericCommandArgs`; jstest
    ///   `jstests/noPassthrough/query/out_merge/aggWrite/out_merge_on_secondary_write_concern.js`),
    ///   and the primary's reply decides: a command error, a write-concern error or the first
    ///   write error becomes the aggregate's own error, at the top level, with no
    ///   `writeConcernError` or `writeErrors` (the same jstest and `merge_on_secondary.js`);
    /// - a primary that stepped down refuses it as it refuses any write (`NotWritablePrimary`,
    ///   10107, or `InterruptedDueToReplStateChange`, 11602, for one it had admitted: jstest
    ///   `merge_out_on_secondary_fail_on_stepdown.js` expects a not-primary error), and one
    ///   that steps down while the write concern is waited for fails it with 189 "Primary
    ///   stepped down while waiting for replication", as it fails its own waiters;
    /// - the request carries this member's cluster time and the reply the primary's, each
    ///   taken in by the other (`VectorClock::gossipIn`, from the request's metadata and, for
    ///   the reply, `src/mongo/db/vector_clock/vector_clock_metadata_hook.cpp`,
    ///   `readReplyMetadata`; jstest `out_merge_on_secondary_metadata.js`: the primary's
    ///   entries are at least the secondary's cluster time). The reply's `operationTime` is
    ///   the primary's write's (`CommonProcessInterface::updateClientOperationTime`,
    ///   `src/mongo/db/pipeline/process_interface/common_process_interface.cpp`), which the
    ///   thread's record of the command's last entry gives here, and so this member's
    ///   `$clusterTime` must not be behind it.
    ///
    /// # Errors
    ///
    /// As above, and `write`'s own error (a duplicate key, ...).
    pub fn write_through_primary(
        &self,
        cmd: &Document,
        write: &mut dyn FnMut(&ServerState) -> Result<()>,
    ) -> Result<PrimaryWait> {
        let Some((primary, primary_state, own_state)) = self.reached_primary() else {
            return Err(CommandError::new(189, "No primary exists currently"));
        };
        primary_state
            .catalog
            .changes
            .advance_cluster_time(own_state.catalog.changes.current_cluster_time());
        let gossip_back = {
            let primary_state = primary_state.clone();
            move || {
                own_state
                    .catalog
                    .changes
                    .advance_cluster_time(primary_state.catalog.changes.current_cluster_time());
            }
        };
        let Some(term) = primary.admitted_term() else {
            // It stepped down since: the command reaches a member that is no longer primary.
            return Err(CommandError::new(10107, "not primary"));
        };
        let written = match primary.write_intent("aggregate", cmd, Some(term)) {
            // Dropping the intent publishes what was written to the set's oplog.
            Ok(_intent) => write(&primary_state),
            Err(error) => Err(error),
        };
        if let Err(error) = written {
            gossip_back();
            return Err(error);
        }
        let cmd = cmd.clone();
        Ok(PrimaryWait(Box::pin(async move {
            let waited = primary
                .await_write_concern("aggregate", &cmd, Some(term))
                .await;
            gossip_back();
            match waited {
                None => Ok(()),
                Some(error) => Err(CommandError::new(
                    error.get_i32("code").unwrap_or(64),
                    error.get_str("errmsg").unwrap_or_default(),
                )),
            }
        })))
    }
}
