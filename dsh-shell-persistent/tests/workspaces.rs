//! A start directory per owner in one pool: where each owner's shell starts
//! and starts again after a reset.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use dsh_shell_persistent::{CallEnd, OwnerDirError, ShellConfig, ShellPool, ShellRequest};

/// Generous: 50 shells start at once on a loaded machine.
const BOUND: Duration = Duration::from_secs(180);

async fn run(pool: &ShellPool, owner: &str, cmd: &str) -> String {
    pool.run(owner, cmd)
        .await
        .unwrap_or_else(|e| panic!("{owner}: {cmd:?}: {e}"))
}

/// The shared root (the pool's directory) and `n` owner directories in it.
fn dirs(n: usize) -> (tempfile::TempDir, PathBuf, Vec<PathBuf>) {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let owners = (0..n)
        .map(|i| {
            let dir = root.join(format!("agent-{i}"));
            std::fs::create_dir(&dir).unwrap();
            dir
        })
        .collect();
    (tmp, root, owners)
}

/// 50 owners of one pool, each with its own directory, each timed out once
/// after a `cd` elsewhere: each starts in its directory and is back in it
/// after the reset, not in the pool's root (where every owner landed when
/// a pool had one start directory for all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_owners_come_back_to_their_own_directories_after_a_timeout() {
    let (_tmp, root, owner_dirs) = dirs(50);
    let pool = ShellPool::new(ShellConfig::new(&root)).unwrap();
    let mut agents = tokio::task::JoinSet::new();
    for (i, dir) in owner_dirs.into_iter().enumerate() {
        let pool = pool.clone();
        agents.spawn(async move {
            let owner = format!("agent-{i}");
            pool.set_owner_dir(&owner, &dir).unwrap();
            assert_eq!(pool.owner_dir(&owner), Some(dir.clone()));
            let here = dir.display().to_string();
            assert_eq!(run(&pool, &owner, "pwd").await, here);
            // Away from the directory, then a call that outlives its own
            // timeout: the shell is killed and reset.
            let slow =
                ShellRequest::new("cd / && echo away && sleep 600").timeout(Duration::from_secs(1));
            let outcome = pool
                .call(&owner, slow, std::future::pending())
                .await
                .unwrap();
            assert!(
                matches!(outcome.end, CallEnd::TimedOut { .. }),
                "{owner}: {:?}",
                outcome.end
            );
            assert!(outcome.shell_reset, "{owner}: the shell was not reset");
            assert!(
                !pool.has_shell(&owner),
                "{owner}: a shell outlived the timeout"
            );
            // The fresh shell starts in the owner's directory again.
            assert_eq!(run(&pool, &owner, "pwd").await, here);
            assert_eq!(run(&pool, &owner, "cd / && pwd").await, "/");
        });
    }
    let all = async {
        while let Some(agent) = agents.join_next().await {
            agent.unwrap();
        }
    };
    tokio::time::timeout(BOUND, all)
        .await
        .expect("50 owners did not finish");
    // An owner without a directory of its own still starts in the root.
    assert_eq!(run(&pool, "other", "pwd").await, root.display().to_string());
    pool.close_all().await;
}

/// A directory is checked when it is set, with an error naming the owner
/// and the path; it is refused while the owner's shell runs and taken when
/// no process runs; closing the owner forgets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_directories_are_checked_refused_while_in_use_and_forgotten_on_close() {
    let (_tmp, root, owner_dirs) = dirs(2);
    let (a, b) = (&owner_dirs[0], &owner_dirs[1]);
    let file = root.join("file.txt");
    std::fs::write(&file, "x").unwrap();
    let pool = ShellPool::new(ShellConfig::new(&root)).unwrap();

    let refused = |dir: &Path| pool.set_owner_dir("a1", dir).unwrap_err();
    let err = refused(Path::new("agent-0"));
    assert!(matches!(err, OwnerDirError::Relative { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "the start directory of owner \"a1\" must be an absolute path, got agent-0"
    );
    let missing = root.join("missing");
    let err = refused(&missing);
    assert!(matches!(err, OwnerDirError::Missing { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "the start directory {} of owner \"a1\" does not exist",
            missing.display()
        )
    );
    let err = refused(&file);
    assert!(
        matches!(err, OwnerDirError::NotADirectory { .. }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "the start directory {} of owner \"a1\" is not a directory",
            file.display()
        )
    );
    assert_eq!(pool.owner_dir("a1"), None, "a refused directory was kept");

    // Set twice before the first call: the last one holds.
    pool.set_owner_dir("a1", b).unwrap();
    pool.set_owner_dir("a1", a).unwrap();
    assert_eq!(run(&pool, "a1", "pwd").await, a.display().to_string());
    let err = pool.set_owner_dir("a1", b).unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot set the start directory of owner \"a1\" while its shell is running; \
         set it before the owner's first use, or close the owner first"
    );
    assert_eq!(pool.owner_dir("a1"), Some(a.clone()));

    // After a reset no process runs: a new directory is taken, and the
    // next shell starts there.
    let outcome = pool
        .call(
            "a1",
            ShellRequest::new("sleep 600").timeout(Duration::from_secs(1)),
            std::future::pending(),
        )
        .await
        .unwrap();
    assert!(matches!(outcome.end, CallEnd::TimedOut { .. }));
    pool.set_owner_dir("a1", b).unwrap();
    assert_eq!(run(&pool, "a1", "pwd").await, b.display().to_string());

    // Closing the owner forgets its directory.
    pool.close_owner("a1").await;
    assert_eq!(pool.owner_dir("a1"), None);
    assert_eq!(run(&pool, "a1", "pwd").await, root.display().to_string());
    pool.close_all().await;
}

/// An idle close forgets the owner's shell, not its directory: the next
/// call starts in it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_close_keeps_the_owners_directory() {
    let (_tmp, root, owner_dirs) = dirs(1);
    let dir = &owner_dirs[0];
    let pool = ShellPool::new(ShellConfig::new(&root).idle_limit(Some(Duration::from_millis(200))))
        .unwrap();
    pool.set_owner_dir("a1", dir).unwrap();
    assert_eq!(run(&pool, "a1", "pwd").await, dir.display().to_string());
    // Waits for the idle sweep to close the owner's shell (an event of the
    // pool's own task; checked every 20 ms within a generous bound). The
    // owner stays in the pool: it holds a directory.
    let deadline = tokio::time::Instant::now() + BOUND;
    while pool.has_shell("a1") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the idle owner was never closed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(pool.owners(), vec!["a1".to_owned()]);
    assert_eq!(pool.owner_dir("a1"), Some(dir.clone()));
    assert_eq!(run(&pool, "a1", "pwd").await, dir.display().to_string());
    pool.close_all().await;
}
