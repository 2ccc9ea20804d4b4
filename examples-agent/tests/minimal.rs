//! The minimal agent against a scripted OpenAI-compatible server on
//! loopback: the exact first request, real tool runs, and the JSONL log.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};

use examples_agent::minimal::{Agent, AgentConfig};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Serves the scripted replies in order and records every request body.
async fn scripted_server(replies: Vec<Value>) -> (String, Arc<Mutex<Vec<Value>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    tokio::spawn(async move {
        for reply in replies {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 8192];
            // Headers, then Content-Length bytes of body.
            let (head_end, length) = loop {
                let n = sock.read(&mut chunk).await.unwrap();
                assert!(n > 0, "client closed early");
                buf.extend_from_slice(&chunk[..n]);
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&buf[..i]).to_ascii_lowercase();
                    assert!(head.starts_with("post /v1/chat/completions "), "{head}");
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .unwrap()
                        .trim()
                        .parse()
                        .unwrap();
                    break (i + 4, length);
                }
            };
            while buf.len() < head_end + length {
                let n = sock.read(&mut chunk).await.unwrap();
                buf.extend_from_slice(&chunk[..n]);
            }
            let body: Value = serde_json::from_slice(&buf[head_end..head_end + length]).unwrap();
            record.lock().unwrap().push(body);
            let text = reply.to_string();
            let response = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            );
            sock.write_all(response.as_bytes()).await.unwrap();
            sock.shutdown().await.unwrap();
        }
    });
    (format!("http://{addr}/v1"), seen)
}

fn tool_call(id: &str, name: &str, arguments: Value) -> Value {
    json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": null,
        "tool_calls": [{"id": id, "type": "function",
            "function": {"name": name, "arguments": arguments.to_string()}}]
    }}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_minimal_agent_sends_exactly_two_tools_and_really_runs_them() {
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    let file = ws.join("proj/notes.txt");
    let path = file.to_str().unwrap();
    let replies = vec![
        tool_call(
            "c1",
            "bash",
            json!({"command": "mkdir -p proj && cd proj && export STEP=one"}),
        ),
        tool_call(
            "c2",
            "str_replace_editor",
            json!({"command": "create", "path": path, "file_text": "hello\n"}),
        ),
        tool_call(
            "c3",
            "str_replace_editor",
            json!({"command": "str_replace", "path": path, "old_str": "hello", "new_str": "bye"}),
        ),
        tool_call(
            "c4",
            "bash",
            json!({"command": "echo \"$STEP $(basename \"$PWD\") $(cat notes.txt)\""}),
        ),
        json!({"choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "All done."}}]}),
    ];
    let (base_url, seen) = scripted_server(replies).await;
    let home = ws.join("home");
    let config = AgentConfig {
        base_url,
        api_key: Some("test-key".into()),
        model: "test-model".into(),
        system_prompt: "You are a helpful software engineer assistant.".into(),
        workspace: ws.clone(),
        session_dir: Some(home.join("sessions")),
        max_turns: 10,
    };
    let mut agent = Agent::new(config).unwrap();
    let answer = agent
        .run("Create proj/notes.txt and edit it.")
        .await
        .unwrap();
    let log_path = agent.log().unwrap().path().to_owned();
    agent.close().await;
    assert_eq!(answer, "All done.");

    // The exact first request: the fixed prompt, the task, exactly two tools.
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 5);
    let first = &requests[0];
    assert_eq!(first["model"], "test-model");
    assert_eq!(
        first["messages"],
        json!([
            {"role": "system", "content": "You are a helpful software engineer assistant."},
            {"role": "user", "content": "Create proj/notes.txt and edit it."}
        ])
    );
    let tools = first["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 2);
    assert_eq!(tools[0]["type"], "function");
    assert_eq!(tools[0]["function"]["name"], "bash");
    assert_eq!(tools[1]["function"]["name"], "str_replace_editor");
    assert_eq!(
        first.as_object().unwrap().len(),
        3,
        "no other fields: {first}"
    );

    // The tools really ran, and the shell kept its state between calls.
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "bye\n");
    let last = requests[4]["messages"].as_array().unwrap();
    assert_eq!(last.len(), 2 + 4 * 2);
    assert_eq!(
        last[9],
        json!({"role": "tool", "tool_call_id": "c4", "content": "one proj bye"})
    );
    // Only the conversation itself: no runtime-context messages were added.
    let roles: Vec<&str> = last.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "tool"
        ]
    );

    // The JSONL log holds every step, in order.
    let records: Vec<Value> = std::fs::read_to_string(log_path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<String> = records
        .iter()
        .map(|r| match r["type"].as_str().unwrap() {
            "message" => format!("message:{}", r["message"]["role"].as_str().unwrap()),
            other => other.to_owned(),
        })
        .collect();
    let mut want = vec!["message:system".to_owned(), "message:user".to_owned()];
    for _ in 0..4 {
        want.extend(
            [
                "message:assistant",
                "tool_call",
                "tool_result",
                "message:tool",
            ]
            .map(String::from),
        );
    }
    want.push("message:assistant".to_owned());
    assert_eq!(kinds, want);
    assert_eq!(
        records[12]["content"],
        format!("The file {path} has been edited successfully.")
    );
    assert_eq!(records[16]["name"], "bash");
    assert_eq!(records[16]["content"], "one proj bye");
    assert_eq!(records[16]["is_error"], false);
}
