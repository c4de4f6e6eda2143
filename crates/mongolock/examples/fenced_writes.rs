//! Two workers take turns on a lock and write to the collection it protects through a
//! `Fence`: the one that was paused past its lease has its write refused.
//!
//! `cargo run -p mongolock --example fenced_writes` (on the embedded emulator; against a
//! real server when `MONGODB_URI` is set, where it drops and recreates the database
//! `fenced_writes_example`). Exits 0 only if the stale write was refused.
//!
//! Worker A takes the lock on `account-42`, reads the balance, and stops: its thread blocks,
//! as a whole process does in a long GC pause or a suspended VM, so nothing of it runs, not
//! even the renewal of its lease. The lease ends on the server, worker B takes the lock with
//! a newer fencing token and writes. Worker A wakes up and writes the balance it computed
//! before the pause: the fence refuses it (`ErrorKind::StaleToken`), and B's write stands.
//! Checking `guard.is_lost()` before writing would not have been enough, since a pause can
//! fall between any check and the write; the store has to refuse it. A then takes its turn
//! again, with a new token, and its write goes through.

use std::sync::mpsc;
use std::time::Duration;

use bson::{Document, doc};
use mongodb::{Client, Collection};
use mongolock::{LockClient, LockGuard};

mod common;

const DB: &str = "fenced_writes_example";
const ACCOUNT: &str = "account-42";
/// Short, so that the paused worker's lease ends soon.
const TTL: Duration = Duration::from_secs(1);

async fn balance(accounts: &Collection<Document>) -> Result<i64, Box<dyn std::error::Error>> {
    let account = accounts
        .find_one(doc! {"_id": ACCOUNT})
        .await?
        .ok_or("the account exists")?;
    Ok(account.get_i64("balance")?)
}

/// Under `guard`, reads the balance and writes it plus `amount`, fenced; returns what it
/// read.
async fn deposit(
    guard: &LockGuard,
    accounts: &Collection<Document>,
    amount: i64,
    by: &str,
) -> Result<i64, Box<dyn std::error::Error>> {
    let read = balance(accounts).await?;
    guard
        .fence()
        .update_one(
            accounts,
            doc! {"_id": ACCOUNT},
            doc! {"$set": {"balance": read + amount, "by": by}},
        )
        .await?;
    Ok(read)
}

/// Worker A, on a thread and runtime of its own (so that blocking the thread stops all of
/// it, its lease's renewals included). Returns whether its stale write was refused.
fn worker_a(
    uri: String,
    holding: tokio::sync::oneshot::Sender<()>,
    b_wrote: mpsc::Receiver<()>,
) -> Result<bool, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime
        .block_on(async move {
            let client = Client::with_uri_str(&uri).await?;
            let db = client.database(DB);
            let locks = LockClient::new(db.collection("locks"));
            let accounts: Collection<Document> = db.collection("accounts");

            let guard = locks.mutex(ACCOUNT).ttl(TTL).acquire().await?;
            let read = balance(&accounts).await?;
            println!(
                "worker-a: holds the lock (token {}), reads balance {read}",
                guard.fencing_token()
            );
            let _ = holding.send(());
            println!("worker-a: paused (a GC pause, a suspended VM): nothing of it runs");
            // Blocks the thread, and so this whole runtime: no renewal is sent. Worker B can
            // only write once the lease has ended on the server, after at least one TTL.
            b_wrote
                .recv_timeout(Duration::from_secs(60))
                .map_err(|_| "worker B never wrote")?;
            println!("worker-a: wakes up and writes balance {}", read + 10);
            let refused = match guard
                .fence()
                .update_one(
                    &accounts,
                    doc! {"_id": ACCOUNT},
                    doc! {"$set": {"balance": read + 10, "by": "worker-a"}},
                )
                .await
            {
                Err(error) if error.is_stale_token() => {
                    println!("worker-a: refused: {error}");
                    true
                }
                Err(error) => return Err(error.into()),
                Ok(_) => {
                    println!("worker-a: the stale write went through");
                    false
                }
            };
            drop(guard);

            // Its next turn, with a new token: read again, write, and it goes through.
            let guard = locks.mutex(ACCOUNT).ttl(TTL).acquire().await?;
            let read = deposit(&guard, &accounts, 10, "worker-a").await?;
            println!(
                "worker-a: takes the lock again (token {}), reads {read}, writes {}",
                guard.fencing_token(),
                read + 10
            );
            guard.release().await?;
            locks.shutdown().await;
            client.shutdown().await;
            Ok::<_, Box<dyn std::error::Error>>(refused)
        })
        .map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let start = common::start(DB).await?;
    let (client, uri, locks) = (start.client.clone(), start.uri.clone(), start.locks.clone());
    let accounts: Collection<Document> = start.db.collection("accounts");
    // Never fenced yet: the first fenced write is accepted.
    accounts
        .insert_one(doc! {"_id": ACCOUNT, "balance": 100_i64})
        .await?;

    let (holding_tx, holding) = tokio::sync::oneshot::channel();
    let (b_wrote, b_wrote_rx) = mpsc::channel();
    let a = std::thread::spawn(move || worker_a(uri, holding_tx, b_wrote_rx));
    holding
        .await
        .map_err(|_| "worker A failed before it held the lock")?;

    // Worker B waits for the lock: it frees when A's lease ends, A being paused.
    let guard = locks
        .mutex(ACCOUNT)
        .ttl(TTL)
        .acquire_timeout(Duration::from_secs(30))
        .await?
        .ok_or("worker A's lease never ended")?;
    let read = deposit(&guard, &accounts, 20, "worker-b").await?;
    println!(
        "worker-b: takes the lock after A's lease ended (token {}), reads {read}, writes {}",
        guard.fencing_token(),
        read + 20
    );
    guard.release().await?;
    b_wrote.send(())?;

    let refused = tokio::task::spawn_blocking(move || a.join())
        .await?
        .map_err(|_| "worker A panicked")??;
    let account = accounts
        .find_one(doc! {"_id": ACCOUNT})
        .await?
        .ok_or("the account exists")?;
    println!(
        "accounts: {ACCOUNT} has balance {}, last written by {} with token {}",
        account.get_i64("balance")?,
        account.get_str("by")?,
        account.get_i64("_fence")?
    );
    // In this order: the lock client closes its change stream, then the driver waits for
    // the cursor to be killed on the server.
    locks.shutdown().await;
    client.shutdown().await;
    if refused && account.get_i64("balance")? == 130 {
        println!("the paused worker's stale write was refused; no update was lost");
        Ok(())
    } else {
        eprintln!("the stale write was not refused");
        std::process::exit(1);
    }
}
