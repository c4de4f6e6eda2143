//! Faults on single requests (`FaultProxy::fault_requests`): a request delivered late runs on
//! the server after its client gave up on it; a cut request never runs; a request whose reply
//! is lost runs and its client sees a network error. Requests no rule picks out, and every
//! request once the proxy is healed, go through as before.

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use bson::{Document, doc};
use mongodb::error::ErrorKind;
use mongodb::{Client, Collection};
use mongolock_testkit::TestServer;
use mongolock_testkit::faults::proxy::{FaultProxy, RequestFault, Requests};

/// Bound on any one step, so a broken proxy fails a test instead of hanging it. Not a
/// timing assertion.
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

/// The same collection through the proxy and directly.
fn jobs(server: &TestServer, client: &Client) -> (Collection<Document>, Collection<Document>) {
    let through = client.database("faults").collection("jobs");
    let direct = server.client().database("faults").collection("jobs");
    (through, direct)
}

/// Inserts `{_id: id}` with `run_command`, as mongolock sends its writes: the driver neither
/// retries it nor gives it a transaction number, so a copy that arrives late runs as sent
/// (a retryable write's late copy is refused once its session moved on, as by mongod).
async fn insert(through: &Collection<Document>, id: i32) -> mongodb::error::Result<Document> {
    through
        .client()
        .database("faults")
        .run_command(doc! {"insert": through.name(), "documents": [{"_id": id}]})
        .await
}

async fn find(direct: &Collection<Document>, id: i32) -> Option<Document> {
    guarded("direct read", direct.find_one(doc! {"_id": id}))
        .await
        .expect("direct read")
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

#[tokio::test]
async fn a_request_held_past_its_clients_timeout_runs_when_it_is_delivered() {
    let (server, proxy) = start().await;
    let client = proxy.client();
    let (through, direct) = jobs(&server, &client);
    guarded("warm-up", through.insert_one(doc! {"_id": 0}))
        .await
        .expect("insert before the fault");

    let hold = Duration::from_secs(2);
    let late = proxy.fault_requests(
        Requests::named(&["insert"]).times(1),
        RequestFault::Late {
            hold,
            cut_after: None,
        },
    );
    let sent = Instant::now();
    // The client's own timeout: it gives up after 500 ms.
    let gave_up = tokio::time::timeout(Duration::from_millis(500), insert(&through, 1)).await;
    assert!(
        gave_up.is_err(),
        "the held insert was answered: {gave_up:?}"
    );
    assert_eq!(late.applied(), 1);
    assert_eq!(
        find(&direct, 1).await,
        None,
        "not run before it is delivered"
    );

    // The client goes on, on another connection: its next insert is not held (the rule
    // picked out one request).
    guarded("insert meanwhile", insert(&through, 2))
        .await
        .expect("the next insert goes through");
    assert_eq!(find(&direct, 2).await, Some(doc! {"_id": 2}));
    assert_eq!(find(&direct, 1).await, None, "still held");
    assert_eq!(late.delivered(), 0);

    eventually("the late insert delivered", || late.delivered() == 1).await;
    assert!(
        sent.elapsed() >= hold,
        "delivered after {:?}",
        sent.elapsed()
    );
    assert_eq!(
        find(&direct, 1).await,
        Some(doc! {"_id": 1}),
        "run on the server after its client gave up"
    );
}

#[tokio::test]
async fn a_late_request_can_cut_its_clients_connection_early() {
    let (server, proxy) = start().await;
    let client = proxy.client();
    let (through, direct) = jobs(&server, &client);
    guarded("warm-up", through.insert_one(doc! {"_id": 0}))
        .await
        .expect("insert before the fault");

    let late = proxy.fault_requests(
        Requests::named(&["insert"]).times(1),
        RequestFault::Late {
            hold: Duration::from_millis(1_500),
            cut_after: Some(Duration::from_millis(100)),
        },
    );
    let sent = Instant::now();
    let error = guarded("insert cut early", insert(&through, 1))
        .await
        .expect_err("the client's connection is reset");
    let failed_after = sent.elapsed();
    assert!(
        matches!(error.kind.as_ref(), ErrorKind::Io(_)),
        "a network error: {error:?}"
    );
    assert!(
        failed_after < Duration::from_millis(1_000),
        "failed after {failed_after:?}, before the hold ended"
    );
    assert_eq!(find(&direct, 1).await, None, "held, not run yet");

    // The client sends it again (the library's way after an unknown outcome): it runs now.
    guarded("insert again", insert(&through, 1))
        .await
        .expect("the copy sent again runs");
    // The late copy then runs too: a duplicate, which only its discarded reply says.
    eventually("the late copy delivered", || late.delivered() == 1).await;
    assert!(sent.elapsed() >= Duration::from_millis(1_500));
    let count = guarded("count", direct.count_documents(doc! {}))
        .await
        .expect("count");
    assert_eq!(count, 2, "the warm-up and one _id 1");
}

#[tokio::test]
async fn a_cut_request_never_runs_and_the_rule_picks_out_only_its_commands() {
    let (server, proxy) = start().await;
    let client = proxy.client();
    let (through, direct) = jobs(&server, &client);
    guarded("warm-up", through.insert_one(doc! {"_id": 0}))
        .await
        .expect("insert before the fault");

    let cut = proxy.fault_requests(
        Requests::matching(|command| {
            command.get_str("delete") == Ok("jobs") || command.get_str("update") == Ok("jobs")
        }),
        RequestFault::Cut,
    );
    let db = client.database("faults");
    let delete =
        || db.run_command(doc! {"delete": "jobs", "deletes": [{"q": {"_id": 0}, "limit": 1}]});
    let error = guarded("delete", delete()).await.expect_err("cut");
    assert!(
        matches!(error.kind.as_ref(), ErrorKind::Io(_)),
        "a network error: {error:?}"
    );
    // Reads and inserts are not picked out.
    guarded("insert", insert(&through, 1))
        .await
        .expect("an insert is not cut");
    assert_eq!(
        guarded("read", through.find_one(doc! {"_id": 0}))
            .await
            .expect("a read is not cut"),
        Some(doc! {"_id": 0}),
        "the cut delete never ran"
    );
    // The rule stays in force until healed: every delete is cut.
    assert!(guarded("delete again", delete()).await.is_err());
    assert!(cut.applied() >= 2, "{}", cut.applied());
    assert_eq!(cut.delivered(), 0);
    assert!(find(&direct, 0).await.is_some());

    proxy.heal();
    guarded("delete after heal", delete())
        .await
        .expect("healed");
    assert_eq!(find(&direct, 0).await, None);
}

#[tokio::test]
async fn a_request_whose_reply_is_lost_runs_and_its_client_sees_a_network_error() {
    let (server, proxy) = start().await;
    let client = proxy.client();
    let (through, direct) = jobs(&server, &client);
    guarded("warm-up", through.insert_one(doc! {"_id": 0}))
        .await
        .expect("insert before the fault");

    let lost = proxy.fault_requests(
        Requests::named(&["insert"]).times(1),
        RequestFault::LoseReply,
    );
    let error = guarded("insert", insert(&through, 1))
        .await
        .expect_err("the reply is lost");
    assert!(
        matches!(
            error.kind.as_ref(),
            ErrorKind::Io(_) | ErrorKind::ConnectionPoolCleared { .. }
        ),
        "a network error: {error:?}"
    );
    assert_eq!(lost.applied(), 1);
    assert_eq!(find(&direct, 1).await, Some(doc! {"_id": 1}), "it ran");
    // The rule is spent: the next insert is answered.
    guarded("insert after", insert(&through, 2))
        .await
        .expect("answered");
}

#[tokio::test]
async fn a_late_request_still_runs_after_its_client_and_its_connection_are_gone() {
    let (server, proxy) = start().await;
    let (through, direct) = {
        let client = proxy.client();
        jobs(&server, &client)
    };
    guarded("warm-up", through.insert_one(doc! {"_id": 0}))
        .await
        .expect("insert before the fault");
    let late = proxy.fault_requests(
        Requests::named(&["insert"]),
        RequestFault::Late {
            hold: Duration::from_millis(400),
            cut_after: Some(Duration::ZERO),
        },
    );
    let _ = guarded("insert", insert(&through, 1)).await;
    // The client and every connection of the proxy go; the held request does not.
    drop(through);
    proxy.reset_connections();
    eventually("connections closed", || proxy.connection_count() == 0).await;
    eventually("the late insert delivered", || late.delivered() >= 1).await;
    assert_eq!(find(&direct, 1).await, Some(doc! {"_id": 1}));
}

#[tokio::test]
async fn stopping_the_proxy_drops_the_requests_it_holds() {
    let (server, proxy) = start().await;
    let client = proxy.client();
    let (through, direct) = jobs(&server, &client);
    guarded("warm-up", through.insert_one(doc! {"_id": 0}))
        .await
        .expect("insert before the fault");
    let late = proxy.fault_requests(
        Requests::named(&["insert"]).times(1),
        RequestFault::Late {
            hold: Duration::from_millis(300),
            cut_after: Some(Duration::ZERO),
        },
    );
    let _ = guarded("insert", insert(&through, 1)).await;
    assert_eq!(late.applied(), 1);
    guarded("shutdown", proxy.shutdown()).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(late.delivered(), 0);
    assert_eq!(find(&direct, 1).await, None, "never delivered");
}

#[tokio::test]
async fn a_rule_with_a_deadline_picks_out_nothing_after_it() {
    let (server, proxy) = start().await;
    let client = proxy.client();
    let (through, direct) = jobs(&server, &client);
    guarded("warm-up", through.insert_one(doc! {"_id": 0}))
        .await
        .expect("insert before the fault");
    let until = Instant::now() + Duration::from_millis(300);
    let cut = proxy.fault_requests(Requests::named(&["insert"]).until(until), RequestFault::Cut);
    assert!(guarded("insert", insert(&through, 1)).await.is_err());
    assert_eq!(cut.applied(), 1);
    tokio::time::sleep_until(until.into()).await;
    guarded("insert after the deadline", insert(&through, 1))
        .await
        .expect("no longer cut");
    assert_eq!(cut.applied(), 1);
    assert_eq!(find(&direct, 1).await, Some(doc! {"_id": 1}));
}

/// The code of a command error (`ok: 0`) the driver reports.
fn command_code(error: &mongodb::error::Error) -> Option<i32> {
    match error.kind.as_ref() {
        ErrorKind::Command(e) => Some(e.code),
        _ => None,
    }
}

#[tokio::test]
async fn a_refused_request_never_runs_and_its_client_gets_the_error_on_a_live_connection() {
    let (server, proxy) = start().await;
    let client = proxy.client();
    let (through, direct) = jobs(&server, &client);
    guarded("warm-up", through.insert_one(doc! {"_id": 0}))
        .await
        .expect("insert before the fault");
    let connections = proxy.connection_count();

    let refused = proxy.fault_requests(
        Requests::named(&["insert"]).times(1),
        RequestFault::Refuse { code: 6 },
    );
    let error = guarded("refused insert", insert(&through, 1))
        .await
        .expect_err("refused");
    assert_eq!(command_code(&error), Some(6), "{error:?}");
    assert_eq!(refused.applied(), 1);
    assert_eq!(find(&direct, 1).await, None, "never ran");
    // No connection was reset: the next command goes through at once, on the same ones.
    guarded("insert after", insert(&through, 1))
        .await
        .expect("answered");
    assert_eq!(find(&direct, 1).await, Some(doc! {"_id": 1}));
    assert_eq!(proxy.connection_count(), connections);
}

#[tokio::test]
async fn a_request_whose_reply_is_replaced_runs_and_its_client_gets_the_error() {
    let (server, proxy) = start().await;
    let client = proxy.client();
    let (through, direct) = jobs(&server, &client);
    guarded("warm-up", through.insert_one(doc! {"_id": 0}))
        .await
        .expect("insert before the fault");

    let replaced = proxy.fault_requests(
        Requests::named(&["insert"]).times(1),
        RequestFault::ReplaceReply { code: 262 },
    );
    let error = guarded("insert", insert(&through, 1))
        .await
        .expect_err("its reply replaced");
    assert_eq!(command_code(&error), Some(262), "{error:?}");
    assert_eq!(replaced.applied(), 1);
    assert_eq!(find(&direct, 1).await, Some(doc! {"_id": 1}), "it ran");
    // Other replies on the connection are not touched.
    guarded("insert after", insert(&through, 2))
        .await
        .expect("answered");
}
