//! The fault proxy: the official driver talks to the emulator through a `FaultProxy` while
//! the proxy forwards, delays, blackholes, resets and refuses connections.

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use bson::{Document, doc};
use mongodb::error::ErrorKind;
use mongodb::{Client, Collection};
use mongolock_testkit::TestServer;
use mongolock_testkit::faults::proxy::FaultProxy;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// Bound on any one step, so a broken proxy fails a test instead of hanging it. Not a
/// timing assertion: every step is expected to finish far sooner.
const HANG_GUARD: Duration = Duration::from_secs(30);

async fn start() -> (TestServer, FaultProxy) {
    let server = TestServer::start().await.expect("emulator starts");
    let proxy = FaultProxy::start(server.addr())
        .await
        .expect("proxy starts");
    (server, proxy)
}

/// Runs `step`, failing the test if it does not finish within [`HANG_GUARD`].
async fn guarded<T>(what: &str, step: impl IntoFuture<Output = T>) -> T {
    match tokio::time::timeout(HANG_GUARD, step).await {
        Ok(output) => output,
        Err(_) => panic!("{what} hung for {HANG_GUARD:?}"),
    }
}

async fn ping(client: &Client) -> mongodb::error::Result<Document> {
    guarded(
        "ping",
        client.database("admin").run_command(doc! {"ping": 1}),
    )
    .await
}

/// A client through the proxy whose monitor tolerates slow round trips, for tests that
/// add latency but must not trip the client's own timeouts.
fn patient_client(proxy: &FaultProxy) -> Client {
    let mut options = proxy.client_options();
    options.connect_timeout = Some(Duration::from_secs(10));
    options.server_selection_timeout = Some(Duration::from_secs(10));
    Client::with_options(options).expect("valid options")
}

/// Waits until `condition` holds.
async fn eventually(what: &str, condition: impl Fn() -> bool) {
    guarded(what, async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// Whether `error` is what a driver reports when the network fails it: an I/O error, a
/// pool cleared under it, or no server to select.
fn is_network_failure(error: &mongodb::error::Error) -> bool {
    matches!(
        error.kind.as_ref(),
        ErrorKind::Io(_)
            | ErrorKind::ConnectionPoolCleared { .. }
            | ErrorKind::ServerSelection { .. }
    )
}

#[tokio::test]
async fn forwards_driver_traffic_through_the_uri_and_the_client() {
    let (_server, proxy) = start().await;
    assert!(
        proxy.uri().contains("directConnection=true"),
        "{}",
        proxy.uri()
    );
    let client = Client::with_uri_str(proxy.uri()).await.expect("valid uri");
    let pong = ping(&client).await.expect("ping through the proxy");
    assert_eq!(pong.get_f64("ok"), Ok(1.0));

    let coll: Collection<Document> = client.database("proxied").collection("things");
    guarded(
        "insert",
        coll.insert_many(vec![doc! {"_id": 1}, doc! {"_id": 2}, doc! {"_id": 3}]),
    )
    .await
    .expect("insert through the proxy");
    let count = guarded("count", coll.estimated_document_count())
        .await
        .expect("count through the proxy");
    assert_eq!(count, 3);
    assert!(proxy.connection_count() >= 1);

    // A second client, from the proxy's own options, sees the same data.
    let other = proxy.client();
    let names = guarded("list databases", other.list_database_names())
        .await
        .expect("list databases through the proxy");
    assert!(names.iter().any(|n| n == "proxied"), "{names:?}");
}

#[tokio::test]
async fn latency_delays_each_direction() {
    let (_server, proxy) = start().await;
    let client = patient_client(&proxy);
    let coll: Collection<Document> = client.database("slow").collection("things");
    guarded("insert", coll.insert_one(doc! {"_id": 1}))
        .await
        .expect("insert");

    let latency = Duration::from_millis(150);
    proxy.add_latency(latency);
    // The request waits once on the way in and the reply once on the way out.
    let started = Instant::now();
    ping(&client).await.expect("ping with latency");
    let elapsed = started.elapsed();
    assert!(elapsed >= 2 * latency, "ping took {elapsed:?}");

    let started = Instant::now();
    let count = guarded("count", coll.estimated_document_count())
        .await
        .expect("count with latency");
    let elapsed = started.elapsed();
    assert_eq!(count, 1);
    assert!(elapsed >= 2 * latency, "count took {elapsed:?}");

    proxy.heal();
    ping(&client).await.expect("ping after heal");
}

#[tokio::test]
async fn blackhole_times_out_operations_and_heal_restores_them() {
    let (_server, proxy) = start().await;
    let client = proxy.client();
    let coll: Collection<Document> = client.database("dark").collection("things");
    guarded("insert", coll.insert_one(doc! {"_id": 1}))
        .await
        .expect("insert");
    let connections = proxy.connection_count();

    proxy.blackhole();
    // An operation on a pooled connection hangs until the client's monitor times out; a
    // fresh client cannot even select the server. Both run at once to keep the test short.
    let fresh = proxy.client();
    let (pooled, fresh) = tokio::join!(
        guarded("count while blackholed", coll.estimated_document_count()),
        ping(&fresh),
    );
    let error = pooled.expect_err("count while blackholed");
    assert!(is_network_failure(&error), "{error:?}");
    let error = fresh.expect_err("fresh client while blackholed");
    assert!(
        matches!(error.kind.as_ref(), ErrorKind::ServerSelection { .. }),
        "{error:?}"
    );
    // The proxy dropped nothing: connections stay open while blackholed.
    assert!(proxy.connection_count() >= connections);

    proxy.heal();
    ping(&client).await.expect("ping after heal");
    let count = guarded("count after heal", coll.estimated_document_count())
        .await
        .expect("count after heal");
    assert_eq!(count, 1);
}

#[tokio::test]
async fn reset_fails_the_operation_in_flight_and_the_driver_recovers() {
    let (_server, proxy) = start().await;
    let client = patient_client(&proxy);
    ping(&client).await.expect("ping before reset");

    // Hold the next request in the proxy long enough to reset it in flight.
    proxy.add_latency(Duration::from_millis(500));
    let in_flight = tokio::spawn({
        let client = client.clone();
        async move { ping(&client).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    proxy.reset_connections();
    let error = guarded("ping in flight", in_flight)
        .await
        .expect("task ends")
        .expect_err("ping in flight during reset");
    assert!(matches!(error.kind.as_ref(), ErrorKind::Io(_)), "{error:?}");

    proxy.heal();
    ping(&client).await.expect("ping after reset");
    let coll: Collection<Document> = client.database("reset").collection("things");
    guarded("insert", coll.insert_one(doc! {"_id": 1}))
        .await
        .expect("insert after reset");
    let count = guarded("count", coll.estimated_document_count())
        .await
        .expect("count after reset");
    assert_eq!(count, 1);
}

#[tokio::test]
async fn reset_sends_rst_and_closes_every_connection() {
    let (_server, proxy) = start().await;
    let mut first = TcpStream::connect(proxy.addr()).await.expect("connect");
    let mut second = TcpStream::connect(proxy.addr()).await.expect("connect");
    eventually("both connections counted", || proxy.connection_count() == 2).await;

    proxy.reset_connections();
    for stream in [&mut first, &mut second] {
        let mut buffer = [0u8; 16];
        let read = guarded("read after reset", stream.read(&mut buffer)).await;
        match read {
            Err(error) => assert_eq!(error.kind(), std::io::ErrorKind::ConnectionReset),
            Ok(n) => panic!("read {n} bytes instead of a reset"),
        }
    }
    eventually("connections closed", || proxy.connection_count() == 0).await;

    // New connections are not affected by an earlier reset.
    let client = proxy.client();
    ping(&client).await.expect("ping after reset");
}

#[tokio::test]
async fn refuse_new_keeps_out_new_clients_until_heal() {
    let (_server, proxy) = start().await;
    let existing = proxy.client();
    ping(&existing).await.expect("ping before refusing");
    let connections = proxy.connection_count();

    proxy.refuse_new();
    let fresh = proxy.client();
    let error = ping(&fresh).await.expect_err("fresh client while refusing");
    assert!(
        matches!(error.kind.as_ref(), ErrorKind::ServerSelection { .. }),
        "{error:?}"
    );
    // A raw connection is accepted and immediately reset, and never counted.
    let mut raw = TcpStream::connect(proxy.addr()).await.expect("tcp connect");
    let mut buffer = [0u8; 16];
    let read = guarded("read on a refused connection", raw.read(&mut buffer)).await;
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert_eq!(proxy.connection_count(), connections);
    // Connections made before keep working.
    ping(&existing)
        .await
        .expect("existing client while refusing");

    proxy.heal();
    ping(&fresh).await.expect("fresh client after heal");
}

#[tokio::test]
async fn dropping_or_shutting_down_the_proxy_closes_its_connections() {
    let (_server, proxy) = start().await;
    let mut stream = TcpStream::connect(proxy.addr()).await.expect("connect");
    eventually("connection counted", || proxy.connection_count() == 1).await;
    drop(proxy);
    let mut buffer = [0u8; 16];
    let read = guarded("read after drop", stream.read(&mut buffer)).await;
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");

    let (_server, proxy) = start().await;
    let addr = proxy.addr();
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    eventually("connection counted", || proxy.connection_count() == 1).await;
    guarded("shutdown", proxy.shutdown()).await;
    let read = guarded("read after shutdown", stream.read(&mut buffer)).await;
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert!(TcpStream::connect(addr).await.is_err(), "still listening");
}

#[tokio::test]
async fn lost_replies_apply_the_write_but_fail_the_client_until_heal() {
    let (server, proxy) = start().await;
    let client = proxy.client();
    let through: Collection<Document> = client.database("proxy").collection("lost");
    let direct: Collection<Document> = server.client().database("proxy").collection("lost");
    ping(&client).await.expect("ping before the fault");

    proxy.lose_replies();
    let error = guarded(
        "insert with its reply lost",
        through.insert_one(doc! {"_id": 1}),
    )
    .await
    .expect_err("the reply is lost");
    assert!(is_network_failure(&error), "{error:?}");
    // The server applied the write although its client never heard of it.
    let applied = guarded("direct read", direct.find_one(doc! {"_id": 1}))
        .await
        .expect("direct read");
    assert_eq!(applied, Some(doc! {"_id": 1}));

    proxy.heal();
    // The driver reconnects; a repeat of the write now reports the duplicate it made.
    let again = guarded("insert after heal", async {
        loop {
            match through.insert_one(doc! {"_id": 1}).await {
                Err(e) if is_network_failure(&e) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                other => return other,
            }
        }
    })
    .await
    .expect_err("the first insert was applied");
    assert!(
        matches!(
            again.kind.as_ref(),
            ErrorKind::Write(mongodb::error::WriteFailure::WriteError(w)) if w.code == 11000
        ),
        "{again:?}"
    );
    ping(&client).await.expect("ping after heal");
}
