//! `indexes --retention` on a collection whose TTL index keeps idle documents for another
//! retention: the server refuses to change it with `createIndexes` (IndexOptionsConflict,
//! code 85). The command says which retention the index has, and gives the mongosh command
//! (`collMod`) that changes it, instead of the server's raw error.

mod common;

use common::{Env, run, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_retention_is_explained_with_the_command_that_changes_it() {
    let env = Env::start("retention").await;
    let output = run(env.cmd(&["indexes"])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    // The same retention again: nothing to do.
    let output = run(env.cmd(&["indexes", "--retention", "1day"])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));

    let output = run(env.cmd(&["indexes", "--retention", "2d"])).await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    for words in [
        "the TTL index idleSince_ttl of",
        "keeps idle documents for 1day, not 2days",
        &format!(
            "run in mongosh: db.getSiblingDB(\"{}\").runCommand({{collMod: \"locks\", index: \
             {{name: \"idleSince_ttl\", expireAfterSeconds: 172800}}}})",
            env.db
        ),
    ] {
        assert!(stderr.contains(words), "{words:?} in {stderr}");
    }
    assert!(!stderr.contains("Requested index"), "{stderr}");
    assert!(output.stdout.is_empty(), "{}", text(&output.stdout));
}
