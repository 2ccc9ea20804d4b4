//! What more than one bench does with a pool of shells.

use dsh_shell_persistent::ShellPool;

/// Starts the shells of owners `{prefix}0` to `{prefix}{n-1}` (one `true`
/// each), 32 at a time so the machine is not flooded.
pub(crate) async fn start_owners(pool: &ShellPool, prefix: &str, n: usize) {
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let (pool, owner) = (pool.clone(), format!("{prefix}{i}"));
        tasks.spawn(async move { pool.run(&owner, "true").await.unwrap() });
        if tasks.len() >= 32 {
            tasks.join_next().await;
        }
    }
    while tasks.join_next().await.is_some() {}
}
