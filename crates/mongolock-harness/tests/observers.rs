//! The election observers' poller logs how each read was served (the member that answered,
//! the snapshot, the rows), so that a report on a read can say what the server gave.

use std::time::Duration;

use mongolock::LockClient;
use mongolock_harness::history::{Recorder, Source};
use mongolock_harness::observers::{Observers, POLL_EVERY};
use mongolock_harness::workload::{COLLECTION, DB};
use mongolock_testkit::TestServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_is_logged_with_the_member_that_answered_and_the_rows_it_read() {
    let server = TestServer::start().await.expect("emulator");
    let locks = LockClient::new(server.new_client().database(DB).collection(COLLECTION));
    locks.create_indexes().await.expect("indexes");
    let recorder = Recorder::new();
    let observers = Observers::start(&server, &["e".to_owned()], &recorder, 1)
        .await
        .expect("observers");
    let leading = locks.election("e").campaign("a").await.expect("campaign");
    tokio::time::sleep(POLL_EVERY * 3).await;
    observers.stop().await;

    let polls: Vec<_> = recorder
        .observations()
        .into_iter()
        .filter(|o| o.source == Source::Poll && o.leader.is_some())
        .collect();
    let Some(read) = polls.last() else {
        panic!("the poller read the leader: {:?}", recorder.observations());
    };
    let served = read.served.as_deref().expect("the read's account");
    assert!(
        served.starts_with(&format!("127.0.0.1:{} answered", server.addr().port())),
        "the member that answered: {served}"
    );
    assert!(
        served.contains(leading.guard().lock_id()) && served.contains("operationTime"),
        "the leader's row and the snapshot: {served}"
    );
    leading.resign().await.expect("resign");
    tokio::time::timeout(Duration::from_secs(5), locks.shutdown())
        .await
        .expect("shutdown");
}

/// The failover nemesis logs what it did to the set, in words, with the members' addresses
/// the poller's accounts name, for reading a report by.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_failover_nemesis_logs_the_members_and_what_it_did() {
    let stage = mongolock_harness::replset::SetStage::start()
        .await
        .expect("set");
    let recorder = Recorder::new();
    let nemesis = mongolock_harness::replset::Nemesis::new(&stage, 41001, &recorder, 1);
    let nemesis = nemesis
        .run(std::time::Instant::now() + Duration::from_secs(6))
        .await;
    let history = recorder.finish(Default::default());
    let events: Vec<&str> = history.set_events.iter().map(|(_, e)| e.as_str()).collect();
    let first = events.first().expect("the members, first");
    for i in 0..stage.set.len() {
        let addr = stage.set.member(i).addr();
        assert!(first.contains(&format!("{i} at {addr}")), "{first}");
    }
    let faults: u64 = nemesis.stats.injected.values().sum();
    assert!(faults > 0, "the nemesis injected faults in 6 s");
    let actions = events
        .iter()
        .filter(|e| {
            [
                "step down",
                "stopped",
                "partitioned",
                "clock offset",
                "lags",
            ]
            .iter()
            .any(|what| e.contains(what))
        })
        .count() as u64;
    assert!(
        actions >= faults,
        "each fault injected is logged ({faults} injected): {events:#?}"
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| e.starts_with("primary now"))
            .count() as u64,
        nemesis.stats.primary_changes,
        "each change of primary is logged: {events:#?}"
    );
    stage.shutdown().await;
}
