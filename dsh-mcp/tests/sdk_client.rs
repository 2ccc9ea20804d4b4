//! The real `dsh-mcp` binary driven by the official Rust MCP SDK's client
//! (`rmcp`), as an agent framework built on it would: initialize, list the
//! tools, call both, and close.
#![cfg(target_os = "linux")]
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use serde_json::{Map, Value, json};

const BOUND: Duration = Duration::from_secs(60);

fn arguments(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_client_lists_and_calls_both_tools() {
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    let mut child = common::server(&ws, &[], &[]);
    let transport = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    let client = tokio::time::timeout(BOUND, ().serve(transport))
        .await
        .expect("initialize answered")
        .unwrap();

    let info = client.peer_info().expect("the server introduced itself");
    let server = info.server_info.as_ref().expect("server info");
    assert_eq!(server.name, "dsh-mcp");
    let mut names: Vec<String> = tokio::time::timeout(BOUND, client.list_all_tools())
        .await
        .unwrap()
        .unwrap()
        .into_iter()
        .map(|t| t.name.into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["bash", "str_replace_editor"]);

    let call = |name: &'static str, args: Value| {
        let client = &client;
        async move {
            tokio::time::timeout(
                BOUND,
                client.call_tool(CallToolRequestParams::new(name).with_arguments(arguments(args))),
            )
            .await
            .unwrap()
            .unwrap()
        }
    };
    // State carries over between calls of the one persistent shell.
    let r = call("bash", json!({"command": "cd /tmp && export X=kept"})).await;
    assert_eq!((text(&r), r.is_error), (String::new(), Some(false)));
    let r = call("bash", json!({"command": "echo $PWD $X; false"})).await;
    assert_eq!(text(&r), "/tmp kept\n[exit code: 1]");
    assert_eq!(
        r.is_error,
        Some(false),
        "a failing command is a normal result"
    );

    let file = ws.join("notes.txt");
    let path = file.to_str().unwrap();
    let r = call(
        "str_replace_editor",
        json!({"command": "create", "path": path, "file_text": "one\ntwo\n"}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let r = call(
        "str_replace_editor",
        json!({"command": "str_replace", "path": path, "old_str": "two", "new_str": "2"}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "one\n2\n");
    let r = call(
        "str_replace_editor",
        json!({"command": "str_replace", "path": path, "old_str": "three", "new_str": "3"}),
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("did not appear verbatim"), "{}", text(&r));

    tokio::time::timeout(BOUND, client.cancel())
        .await
        .unwrap()
        .unwrap();
    let status = tokio::time::timeout(BOUND, child.wait())
        .await
        .expect("the server exits when its client closes stdin")
        .unwrap();
    assert!(status.success(), "{status}");
}
