//! A worker pool limited by a semaphore across processes.
//!
//! `cargo run -p mongolock --example worker_pool` (on the embedded emulator; against a real
//! server when `MONGODB_URI` is set, where it drops and recreates the database
//! `worker_pool_example`).
//!
//! Three processes (each its own connection and lock client) run four workers each, and all
//! twelve share two GPUs: a worker takes a permit of the semaphore "gpu" (at most two
//! holders at once, waiting in line for one), claims a job from a shared queue, runs it, and
//! gives the permit back. The example counts how many permits are in use at any moment, and
//! checks at the end that it never passed two and that every job ran once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bson::{Document, doc};
use mongodb::Collection;
use mongolock::LockClient;

mod common;

const GPUS: u32 = 2;
const JOBS: i32 = 18;

/// How many permits are in use now, and the most seen at once.
#[derive(Default)]
struct InUse {
    now: AtomicUsize,
    most: AtomicUsize,
}

/// One worker: takes a permit, claims and runs one job under it, until the queue is empty.
async fn worker(
    locks: LockClient,
    queue: Collection<Document>,
    in_use: Arc<InUse>,
    name: String,
) -> mongolock::Result<u32> {
    let gpus = locks.semaphore("gpu", GPUS).ttl(Duration::from_secs(10));
    let mut ran = 0;
    loop {
        let permit = gpus.acquire().await?;
        let now = in_use.now.fetch_add(1, Ordering::SeqCst) + 1;
        in_use.most.fetch_max(now, Ordering::SeqCst);
        // Claim the next job: one `findOneAndUpdate`, so no two workers take the same.
        let job = queue
            .find_one_and_update(
                doc! {"state": "queued"},
                doc! {"$set": {"state": "running", "worker": &name}},
            )
            .await
            .expect("the queue answers");
        let Some(job) = job else {
            in_use.now.fetch_sub(1, Ordering::SeqCst);
            permit.release().await?;
            return Ok(ran);
        };
        let id = job.get_i32("_id").expect("a job id");
        tokio::time::sleep(Duration::from_millis(60)).await; // the GPU work
        queue
            .update_one(
                doc! {"_id": id},
                doc! {"$set": {"state": "done", "token": permit.fencing_token()}},
            )
            .await
            .expect("the queue answers");
        ran += 1;
        in_use.now.fetch_sub(1, Ordering::SeqCst);
        permit.release().await?;
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let start = common::start("worker_pool_example").await?;
    let uri = &start.uri;
    let queue = start.db.collection::<Document>("queue");
    let jobs: Vec<Document> = (0..JOBS)
        .map(|id| doc! {"_id": id, "state": "queued"})
        .collect();
    queue.insert_many(jobs).await?;

    let in_use = Arc::new(InUse::default());
    let mut processes = Vec::new();
    let mut workers = Vec::new();
    for process in 0..3 {
        let client = mongodb::Client::with_uri_str(uri).await?;
        let db = client.database("worker_pool_example");
        let locks = LockClient::new(db.collection("locks"));
        for slot in 0..4 {
            workers.push(tokio::spawn(worker(
                locks.clone(),
                db.collection("queue"),
                in_use.clone(),
                format!("process-{process}/worker-{slot}"),
            )));
        }
        processes.push((locks, client));
    }
    let mut ran = 0;
    for worker in workers {
        ran += worker.await??;
    }
    let done = queue.count_documents(doc! {"state": "done"}).await?;
    let most = in_use.most.load(Ordering::SeqCst);
    println!(
        "{ran} jobs run by 12 workers in 3 processes, at most {most} on the {GPUS} GPUs at once"
    );
    if most > GPUS as usize || done != JOBS as u64 || ran != JOBS as u32 {
        return Err(format!("{most} at once, {done} done, {ran} run").into());
    }
    // Each process's lock client first (it sends what it still owes), then its driver
    // client.
    for (locks, client) in processes {
        locks.shutdown().await;
        client.shutdown().await;
    }
    start.shutdown().await;
    Ok(())
}
