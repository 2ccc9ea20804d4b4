//! 200 sessions spawned and closed leave no zombie, no descriptor, no task.
//! Alone in its binary so that nothing else opens descriptors meanwhile.
#![cfg(unix)]
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use dsh_pty::{NativeBackend, PtyBackend, SpawnSpec};

fn our_zombies() -> usize {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            let rest: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..]
                .split_whitespace()
                .collect();
            rest[0] == "Z" && rest[1] == me
        })
        .count()
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn spec() -> SpawnSpec {
    SpawnSpec::new("bash")
        .args(["--norc", "--noprofile", "--noediting"])
        .env("PS1", "")
        .echo(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_sessions_leave_nothing_behind() {
    let backend = NativeBackend::new();
    // Warm up tokio's process driver and signal pipe, which open descriptors once.
    let s = backend.spawn(spec()).await.unwrap();
    s.end(Duration::from_millis(50)).await.unwrap();
    drop(s);
    let fds_before = open_fds();

    for i in 0..200 {
        let mut s = backend.spawn(spec()).await.unwrap();
        let mut out = s.take_output().unwrap();
        s.write_all(b"sleep 1000 & echo up\n").await.unwrap();
        let mut seen = Vec::new();
        while !String::from_utf8_lossy(&seen).contains("up") {
            seen.extend_from_slice(&out.recv().await.unwrap());
        }
        if i % 2 == 0 {
            let st = s.end(Duration::from_millis(50)).await.unwrap();
            assert!(st.signal().is_some() || st.code().is_some());
        } else {
            drop(s); // drop kills without grace; the waiter task reaps
        }
        drop(out);
    }

    // Dropped sessions are reaped by their waiter tasks; give them a bounded while.
    let settled = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if our_zombies() == 0 && open_fds() <= fds_before {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        settled.is_ok(),
        "zombies: {}, fds before {fds_before}, after {}",
        our_zombies(),
        open_fds()
    );
    let metrics = tokio::runtime::Handle::current().metrics();
    assert_eq!(
        metrics.num_alive_tasks(),
        0,
        "every pump and waiter task ended"
    );
}
