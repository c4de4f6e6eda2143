//! A writer whose process dies while it waits for a reader-writer lock, as the harness's
//! "kill while acquiring" does it: the acquire future is dropped together with its runtime,
//! so the withdrawal the drop spawns never runs. Its announcement keeps readers out until
//! it lapses (twice the TTL after its last refresh), then no longer: the liveness probe's reader check sees both.

use std::time::{Duration, Instant};

use mongolock::LockClient;
use mongolock_harness::history::Mode;
use mongolock_harness::workload::readers_let_in;
use mongolock_testkit::TestServer;

const RESOURCE: &str = "rw";

fn locks(client: mongodb::Client) -> LockClient {
    LockClient::new(client.database("harness").collection("locks"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_killed_while_waiting_keeps_readers_out_only_until_its_announcement_lapses() {
    let server = TestServer::start().await.expect("emulator");
    let observer = locks(server.new_client());
    observer.create_indexes().await.expect("indexes");
    let ttl = Duration::from_secs(1);
    assert_eq!(
        readers_let_in(&observer, RESOURCE, Mode::ReadWrite, ttl).await,
        None,
        "a free lock lets a reader in"
    );

    // A reader holds; a writer in a process of its own waits, and dies while waiting.
    let reader = observer
        .rwlock(RESOURCE)
        .ttl(ttl)
        .read()
        .await
        .expect("read");
    let uri = server.uri();
    let writer = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let client = mongodb::Client::with_uri_str(&uri).await.expect("client");
            let locks = locks(client);
            let rwlock = locks.rwlock(RESOURCE).ttl(ttl);
            tokio::select! {
                got = rwlock.write_timeout(Duration::from_secs(30)) => {
                    panic!("the writer got the lock while a reader held it: {got:?}")
                }
                () = tokio::time::sleep(Duration::from_millis(400)) => {}
            }
            // Dropping the runtime now: the withdrawal the dropped acquire spawned never runs.
        });
    });
    writer.join().expect("the writer's thread");
    let died = Instant::now();
    reader.release().await.expect("release");

    // The dead writer's announcement keeps a new reader out...
    let kept_out = readers_let_in(&observer, RESOURCE, Mode::ReadWrite, ttl).await;
    assert!(
        kept_out.is_some(),
        "a reader got in at once: the writer's announcement was withdrawn or never made"
    );
    // ...until it lapses: twice the TTL after its last refresh, which was before the death.
    tokio::time::sleep_until((died + ttl * 2 + Duration::from_millis(300)).into()).await;
    assert_eq!(
        readers_let_in(&observer, RESOURCE, Mode::ReadWrite, ttl).await,
        None,
        "the announcement outlived twice the TTL"
    );
    server.shutdown().await;
}
