//! The partition-and-rollback schedule of the write-concern control (issue 41), in steps
//! its callers interleave with their own clients' calls: the primary (member 0) is
//! partitioned from the others while clients still reach it; a client asks there; the
//! majority elects a new primary after the election timeout (the old one steps down:
//! mongod's `TopologyCoordinator::checkMemberTimeouts`,
//! `src/mongo/db/repl/topology_coordinator.cpp`); another client asks on the new primary; the
//! partition heals and member 0 rolls back what no majority applied
//! (`src/mongo/db/repl/rollback_impl.cpp`, `RollbackImpl::runRollback`). A write
//! acknowledged with `w: 1` by the partitioned primary alone is undone; one that waits for
//! `w: "majority"` is never acknowledged there.
//!
//! ```no_run
//! # async fn example() -> std::io::Result<()> {
//! use std::time::Duration;
//! use mongolock_testkit::replset::schedule::PartitionRollback;
//!
//! let schedule = PartitionRollback::start(Duration::from_millis(800)).await?;
//! // ... clients A and B find the primary (schedule.set().new_client()) ...
//! assert!(schedule.caught_up(Duration::from_secs(5)).await);
//! schedule.partition();
//! // ... A asks on the partitioned primary ...
//! assert!(schedule.elected(Duration::from_secs(10)).await);
//! // ... B asks on the new primary ...
//! assert!(schedule.heal(Duration::from_secs(10)).await, "member 0 rolled back");
//! schedule.shutdown().await;
//! # Ok(())
//! # }
//! ```

use std::time::{Duration, Instant};

use bson::{Bson, Document, doc};

use super::ReplicaSet;

/// The member partitioned: the set's first primary.
pub const PARTITIONED: usize = 0;

/// A set of three members, member 0 primary, and the schedule's steps on it.
#[derive(Debug)]
pub struct PartitionRollback {
    set: ReplicaSet,
}

impl PartitionRollback {
    /// Starts a set of three members with `election_timeout` (member 0 primary).
    ///
    /// # Errors
    /// A member could not bind.
    ///
    /// # Cancel safety
    /// Dropping the future before it completes leaves nothing running.
    pub async fn start(election_timeout: Duration) -> std::io::Result<PartitionRollback> {
        let set = ReplicaSet::builder()
            .members(3)
            .election_timeout(election_timeout)
            .start()
            .await?;
        Ok(PartitionRollback { set })
    }

    /// The set, for clients ([`ReplicaSet::new_client`]) and what it did.
    pub fn set(&self) -> &ReplicaSet {
        &self.set
    }

    /// Waits (at most `within`) until every secondary has applied everything member 0 has;
    /// returns whether they did. Call it once the clients' set-up writes (indexes, a warm-up
    /// grant) are done, so that the majority that elects next has them.
    ///
    /// # Cancel safety
    /// Cancel safe: waiting changes nothing.
    pub async fn caught_up(&self, within: Duration) -> bool {
        let until = Instant::now() + within;
        loop {
            let primary = self.set.applied(PARTITIONED);
            if (0..self.set.len()).all(|i| self.set.applied(i) >= primary) {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Partitions member 0 (the primary) from the others; clients still reach it. Returns
    /// when, for a history's fault.
    pub fn partition(&self) -> Instant {
        let at = Instant::now();
        self.set.partition(PARTITIONED);
        at
    }

    /// Waits (at most `within`) until a member other than member 0 is primary; returns
    /// whether one was elected.
    ///
    /// # Cancel safety
    /// Cancel safe: waiting changes nothing.
    pub async fn elected(&self, within: Duration) -> bool {
        let until = Instant::now() + within;
        loop {
            if self.set.primary().is_some_and(|p| p != PARTITIONED) {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The document `_id: id` of `db.coll` in member `member`'s own data (a direct
    /// connection, which reads with `primaryPreferred`, so a secondary or a partitioned
    /// member answers too); `None` if there is none or the read failed.
    ///
    /// # Cancel safety
    /// Dropping the future may leave its client's connection to close by itself.
    pub async fn document_on(
        &self,
        member: usize,
        db: &str,
        coll: &str,
        id: impl Into<Bson>,
    ) -> Option<Document> {
        let options = mongodb::options::ClientOptions::builder()
            .hosts(vec![mongodb::options::ServerAddress::Tcp {
                host: "127.0.0.1".into(),
                port: Some(self.set.member(member).addr().port()),
            }])
            .direct_connection(true)
            .build();
        let client = mongodb::Client::with_options(options).ok()?;
        let found = client
            .database(db)
            .collection::<Document>(coll)
            .find_one(doc! {"_id": id.into()})
            .await;
        client.shutdown().immediate(true).await;
        found.ok().flatten()
    }

    /// Ends member 0's partition and waits (at most `within`) for its first rollback;
    /// returns whether it rolled back.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the partition healed; the rollback goes on by itself.
    pub async fn heal(&self, within: Duration) -> bool {
        self.set.heal(PARTITIONED);
        self.set.wait_for_rollbacks(PARTITIONED, 1, within).await
    }

    /// Member 0's rollbacks, and the oplog entries they undid.
    pub fn rollbacks(&self) -> (usize, usize) {
        self.set.rollbacks(PARTITIONED)
    }

    /// The set's term now (it starts in term 1).
    pub fn term(&self) -> i64 {
        self.set.term()
    }

    /// Stops the set.
    ///
    /// # Cancel safety
    /// Dropping the future may leave members running until the set is dropped.
    pub async fn shutdown(self) {
        self.set.shutdown().await;
    }
}
