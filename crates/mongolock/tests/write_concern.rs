//! Writes are majority and journaled unless the caller opts out by name; either way every
//! operation reads back what it wrote.

mod common;

use common::{env, secs};
use mongodb::options::WriteConcern;
use mongolock::{Filter, LockDetails};

#[tokio::test]
async fn an_unsafe_write_concern_still_reads_its_own_writes() {
    let env = env("unsafe_wc").await;
    let locks = env
        .locks
        .clone()
        .with_unsafe_write_concern(WriteConcern::nodes(1));
    let grant = locks
        .xlock("r", "g", LockDetails::default().ttl(secs(30)))
        .await
        .unwrap();
    let renewed = locks.renew("g", secs(60)).await.unwrap();
    assert_eq!(renewed.len(), 1);
    assert_eq!(renewed[0].fencing_token(), grant.fencing_token());
    // The default client sees the same locks.
    assert_eq!(env.locks.status(&Filter::default()).await.unwrap().len(), 1);
    assert_eq!(locks.unlock("g").await.unwrap().len(), 1);
}
