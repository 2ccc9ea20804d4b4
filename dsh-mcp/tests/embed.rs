//! A host embedding the server through [`ServerBuilder`]: HTTP on a port
//! of its own, real bash, a tool call by a real HTTP POST.
#![cfg(all(target_os = "linux", feature = "http"))]
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use dsh_mcp::dsh_sandbox::{SandboxMode, SandboxPolicy};
use dsh_mcp::http::{HttpOptions, Token};
use dsh_mcp::{ApprovalMode, ServerBuilder};
use serde_json::{Value, json};

const BOUND: Duration = Duration::from_secs(60);
const TOKEN: &str = "embed-token-0123456789abcdef";

/// A POST of `body` to `url` (with `session` when given).
fn request(
    client: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    body: &Value,
) -> reqwest::RequestBuilder {
    let mut request = client
        .post(url)
        .header("Authorization", format!("Bearer {TOKEN}"))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2025-06-18")
        .body(body.to_string());
    if let Some(session) = session {
        request = request.header("Mcp-Session-Id", session);
    }
    request
}

/// POSTs `body` to `url` (with `session` when given): the status, the
/// session id it names and the body.
async fn post(
    client: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    body: Value,
) -> (u16, Option<String>, String) {
    let response = tokio::time::timeout(BOUND, request(client, url, session, &body).send())
        .await
        .expect("answered")
        .unwrap();
    let status = response.status().as_u16();
    let id = response
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    let text = tokio::time::timeout(BOUND, response.text())
        .await
        .expect("a whole body")
        .unwrap();
    (status, id, text)
}

/// The task [`serve`] starts: the server back, with what `serve` returned.
type Serving = tokio::task::JoinHandle<(dsh_mcp::Server, Result<(), dsh_mcp::ServeError>)>;

/// Serves `server` on a task of its own until `stop` is sent; the task
/// hands the server back with what `serve` returned.
fn serve(mut server: dsh_mcp::Server) -> (tokio::sync::oneshot::Sender<()>, Serving) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(async move {
        let served = server
            .serve(async {
                let _ = stopped.await;
            })
            .await;
        (server, served)
    });
    (stop, serving)
}

/// The builder gives a host the binary's server: the workspace, the
/// shell's variables and the sandbox it was given, on the address it
/// bound; a `bash` call runs in a real shell of the session's own, and
/// the shutdown the host gives ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_serves_bash_over_http_through_the_builder() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = std::fs::canonicalize(dir.path()).unwrap();
    let options = HttpOptions::new(Token::new(TOKEN, "in the test").unwrap());
    let server = ServerBuilder::new()
        .workspace(&workspace)
        .policy(SandboxPolicy::default().mode(SandboxMode::DangerFullAccess))
        .env([("EMBEDDED".to_owned(), "by-the-host".to_owned())])
        .timeout(Duration::from_secs(30))
        .http("127.0.0.1:0", options)
        .build()
        .await
        .unwrap();
    assert!(!server.is_https());
    let addr = server.http_addr().expect("served over HTTP").unwrap();
    assert_ne!(addr.port(), 0);
    let (stop, serving) = serve(server);

    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/mcp");
    let (status, session, body) = post(
        &client,
        &url,
        None,
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "embedding-host", "version": "1"}}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        common::last_message(&body)["result"]["serverInfo"]["name"],
        "dsh-mcp"
    );
    let session = session.expect("a session id");
    let (status, _, body) = post(
        &client,
        &url,
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let (status, _, body) = post(
        &client,
        &url,
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "bash", "arguments": {"command": "echo $PWD $EMBEDDED; cd /; X=1"}}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let answer = common::last_message(&body);
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert_eq!(
        answer["result"]["content"][0]["text"],
        format!("{} by-the-host", workspace.display())
    );
    // The same shell: its directory and variable kept.
    let (_, _, body) = post(
        &client,
        &url,
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "bash", "arguments": {"command": "echo $PWD $X"}}}),
    )
    .await;
    assert_eq!(
        common::last_message(&body)["result"]["content"][0]["text"],
        "/ 1"
    );

    stop.send(()).unwrap();
    let (server, served) = tokio::time::timeout(BOUND, serving)
        .await
        .expect("the shutdown ended serving")
        .unwrap();
    served.unwrap();
    // Every session's shell ended with the serving.
    assert!(server.shell().owners().is_empty());
    server.close().await.unwrap();
}

/// Opens a session whose client can elicit: its id.
async fn open(client: &reqwest::Client, url: &str) -> String {
    let (status, session, body) = post(
        client,
        url,
        None,
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "embedding-host", "version": "1"}}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let session = session.expect("a session id");
    let (status, _, body) = post(
        client,
        url,
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    session
}

/// With `ApprovalMode::Elicit`, an escalation asks the client of the call
/// that escalates, on that call's own answer stream: declined, the
/// command does not run; approved, it runs with the access asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escalation_asks_the_client_of_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = std::fs::canonicalize(dir.path()).unwrap();
    let options = HttpOptions::new(Token::new(TOKEN, "in the test").unwrap());
    let server = ServerBuilder::new()
        .workspace(&workspace)
        .policy(SandboxPolicy::default().mode(SandboxMode::ReadOnly))
        .approval(ApprovalMode::Elicit)
        .http("127.0.0.1:0", options)
        .build()
        .await
        .unwrap();
    let addr = server.http_addr().unwrap().unwrap();
    let (stop, serving) = serve(server);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/mcp");
    let session = open(&client, &url).await;
    let made = workspace.join("made");
    let call = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "bash", "arguments": {"command": format!("touch {} && echo ran", made.display()),
            "sandbox_permissions": "workspace-write", "justification": "the test asks"}}})
    };
    for (id, approve) in [(1, false), (2, true)] {
        let mut response = tokio::time::timeout(
            BOUND,
            request(&client, &url, Some(&session), &call(id)).send(),
        )
        .await
        .expect("answered")
        .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        // The call's stream: the elicitation first, then the result.
        let mut seen = String::new();
        let mut asked = 0;
        let answer = tokio::time::timeout(BOUND, async {
            loop {
                let chunk = response.chunk().await.unwrap().expect("the result");
                seen.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = seen.find("\n\n") {
                    let event: String = seen.drain(..end + 2).collect();
                    let Some(data) = event.lines().find_map(|l| l.strip_prefix("data:")) else {
                        continue;
                    };
                    let Ok(message) = serde_json::from_str::<Value>(data.trim()) else {
                        continue;
                    };
                    if message["method"] == "elicitation/create" {
                        asked += 1;
                        let result = json!({"action": "accept", "content": {"approve": approve}});
                        let (status, _, body) = post(
                            &client,
                            &url,
                            Some(&session),
                            json!({"jsonrpc": "2.0", "id": message["id"], "result": result}),
                        )
                        .await;
                        assert_eq!(status, 202, "{body}");
                    } else if message["id"] == id {
                        return message;
                    }
                }
            }
        })
        .await
        .expect("the call's result");
        assert_eq!(asked, 1, "{answer}");
        let text = answer["result"]["content"][0]["text"].as_str().unwrap();
        if approve {
            assert_eq!(text, "ran");
            assert!(made.exists());
        } else {
            assert!(text.contains("was denied"), "{text}");
            assert!(!made.exists());
        }
    }
    stop.send(()).unwrap();
    let (server, served) = tokio::time::timeout(BOUND, serving).await.unwrap().unwrap();
    served.unwrap();
    server.close().await.unwrap();
}
