//! Many tasks fight over few resources for many rounds. Each holder writes its fencing token
//! into a record guarded only by the lock; no two exclusive holders may ever overlap, and the
//! tokens a record sees only grow.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::env;
use mongolock::{AcquireRequest, Attempt, LockDetails};

const TASKS: usize = 8;
const RESOURCES: usize = 2;
const GRANTS_PER_TASK: usize = 12;
const MAX_ATTEMPTS_PER_TASK: usize = 20_000;

/// What the lock protects: who is inside, and the last token written.
#[derive(Default)]
struct Record {
    occupied: AtomicBool,
    tokens: std::sync::Mutex<Vec<i64>>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_holders_never_overlap_and_tokens_only_grow() {
    let env = env("contention").await;
    let records: Arc<HashMap<String, Record>> = Arc::new(
        (0..RESOURCES)
            .map(|r| (format!("resource-{r}"), Record::default()))
            .collect(),
    );
    let contended = Arc::new(AtomicU64::new(0));

    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let locks = env.locks.clone();
        let records = records.clone();
        let contended = contended.clone();
        tasks.push(tokio::spawn(async move {
            let mut granted = 0;
            let mut attempts = 0;
            while granted < GRANTS_PER_TASK {
                attempts += 1;
                assert!(attempts <= MAX_ATTEMPTS_PER_TASK, "task {task} starved");
                let resource = format!("resource-{}", (task + attempts) % RESOURCES);
                let lock_id = format!("task-{task}-grant-{granted}");
                let request =
                    AcquireRequest::exclusive(&resource, &lock_id, LockDetails::default());
                match locks.acquire(&request).await.expect("acquire") {
                    Attempt::Contended(_) => {
                        contended.fetch_add(1, Ordering::Relaxed);
                        tokio::task::yield_now().await;
                    }
                    Attempt::Granted(grant) => {
                        let record = &records[&resource];
                        assert!(
                            !record.occupied.swap(true, Ordering::SeqCst),
                            "two exclusive holders of {resource} at once"
                        );
                        record.tokens.lock().unwrap().push(grant.fencing_token());
                        tokio::task::yield_now().await;
                        record.occupied.store(false, Ordering::SeqCst);
                        assert!(locks.release(&grant).await.expect("release"), "still held");
                        granted += 1;
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }

    let mut total = 0;
    for (resource, record) in records.iter() {
        let tokens = record.tokens.lock().unwrap();
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "{resource}: tokens did not only grow: {tokens:?}"
        );
        total += tokens.len();
    }
    assert_eq!(total, TASKS * GRANTS_PER_TASK);
    assert!(
        env.locks
            .status(&Default::default())
            .await
            .unwrap()
            .is_empty()
    );
    eprintln!("{} contended attempts", contended.load(Ordering::Relaxed));
}
