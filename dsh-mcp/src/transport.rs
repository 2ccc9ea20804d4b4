//! Stdio for the MCP service, as an rmcp [`Transport`]: each line is parsed
//! once, straight into rmcp's message type; only a line that fails is looked
//! at again to say why. A line that is not JSON gets a JSON-RPC parse error
//! (-32700), valid JSON that is not a JSON-RPC message an invalid-request
//! error (-32600), a known method with unusable parameters -32602, and a
//! line longer than [`MAX_LINE`] is answered with -32600 and skipped without
//! being buffered: nothing is dropped silently.
//!
//! On Unix, stdin and stdout that are pipes (the MCP client's usual set-up)
//! are read and written non-blocking through tokio's reactor; a file or a
//! terminal falls back to tokio's stdin/stdout (which use its blocking
//! pool). Responses go through one writer task, in the order they are sent.

use std::borrow::Cow;
use std::future::Future;

use rmcp::RoleServer;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientRequest, Extensions, JsonRpcMessage,
    JsonRpcRequest, JsonRpcVersion2_0, PingRequest, RequestId,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
/// The longest line (one JSON-RPC message) the server reads.
pub const MAX_LINE: usize = 64 << 20;

const PARSE_ERROR: &str = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: the line is not valid JSON"}}"#;

/// One pass over a message's top level: the keys of a request, each read
/// as rmcp's parse reads it, and whether anything else was there.
#[derive(Default)]
struct Envelope<'a> {
    jsonrpc: Option<JsonRpcVersion2_0>,
    id: Option<RequestId>,
    method: Option<Cow<'a, str>>,
    params: Params,
    /// A key other than those four (`result`, `error`, an extension), one
    /// of them twice, or `params` before `method`: rmcp's own parse
    /// decides then.
    unusual: bool,
}

/// The `params` of an [`Envelope`], read as its `method` (seen before)
/// asks.
#[derive(Default)]
enum Params {
    /// None given.
    #[default]
    Absent,
    /// Those of `tools/call`.
    Call(CallToolRequestParams),
    /// Those of `ping` (`null`, or an object): whether they hold a `_meta`.
    Ping { meta: bool },
}

impl<'de> serde::Deserialize<'de> for Envelope<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(EnvelopeVisitor)
    }
}

/// The visitor of [`Envelope`]. A value of the wrong type fails the whole
/// pass, which leaves the message to rmcp's parse.
struct EnvelopeVisitor;

impl<'de> serde::de::Visitor<'de> for EnvelopeVisitor {
    type Value = Envelope<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> Result<Envelope<'de>, A::Error> {
        let mut envelope = Envelope::default();
        let mut params_seen = false;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match key.as_ref() {
                "jsonrpc" if envelope.jsonrpc.is_none() => {
                    envelope.jsonrpc = Some(map.next_value()?);
                }
                "id" if envelope.id.is_none() => envelope.id = Some(map.next_value()?),
                "method" if envelope.method.is_none() && !params_seen => {
                    envelope.method = Some(map.next_value()?);
                }
                "params" if !params_seen => {
                    params_seen = true;
                    envelope.params = match envelope.method.as_deref() {
                        Some("tools/call") => {
                            Params::Call(map.next_value::<Object<CallToolRequestParams>>()?.0)
                        }
                        Some("ping") => Params::Ping {
                            meta: map
                                .next_value::<Option<Object<MetaKey>>>()?
                                .is_some_and(|params| params.0.meta.is_some()),
                        },
                        _ => {
                            envelope.unusual = true;
                            map.next_value::<serde::de::IgnoredAny>()?;
                            Params::Absent
                        }
                    };
                }
                _ => {
                    envelope.unusual = true;
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(envelope)
    }
}

/// A `T` read only from a JSON object (as rmcp reads params: a derived
/// struct alone would also take an array).
struct Object<T>(T);

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// Hands the object's entries to `T`.
        struct ObjectVisitor<T>(std::marker::PhantomData<T>);
        impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for ObjectVisitor<T> {
            type Value = Object<T>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Object<T>, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Object)
            }
        }
        deserializer.deserialize_map(ObjectVisitor(std::marker::PhantomData))
    }
}

/// Whether a params object holds a `_meta` that rmcp would keep (anything
/// but `null`; a `_meta` twice fails the pass).
#[derive(serde::Deserialize)]
struct MetaKey {
    #[serde(rename = "_meta")]
    meta: Option<serde::de::IgnoredAny>,
}

/// The requests made over and over (`tools/call`, `ping`) in their plain
/// form (the four keys of a request, each once, `method` before `params`;
/// params an object without `_meta`), made in one pass into the message
/// rmcp's generic parse makes of them (which buffers the message twice,
/// for its flattened fields, and tries each request type in turn).
/// `None`: anything else, left to rmcp's parse.
fn parse_plain(body: &[u8]) -> Option<RxJsonRpcMessage<RoleServer>> {
    let Envelope {
        jsonrpc: Some(jsonrpc),
        id: Some(id),
        method: Some(method),
        params,
        unusual: false,
    } = serde_json::from_slice::<Envelope<'_>>(body).ok()?
    else {
        return None;
    };
    let request = match (method.as_ref(), params) {
        ("tools/call", Params::Call(params)) if params.meta.is_none() => {
            ClientRequest::CallToolRequest(CallToolRequest::new(params))
        }
        ("ping", Params::Absent | Params::Ping { meta: false }) => {
            ClientRequest::PingRequest(PingRequest {
                method: Default::default(),
                extensions: Extensions::new(),
            })
        }
        _ => return None,
    };
    Some(JsonRpcMessage::Request(JsonRpcRequest {
        jsonrpc,
        id,
        request,
    }))
}

/// Parses one line into rmcp's message type: [`parse_plain`] where it
/// can, else rmcp's generic parse.
fn parse_message(body: &[u8]) -> serde_json::Result<RxJsonRpcMessage<RoleServer>> {
    match parse_plain(body) {
        Some(message) => Ok(message),
        None => serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(body),
    }
}

/// Why a JSON value is not a JSON-RPC 2.0 message, if it is not.
fn invalid_request(message: &Value) -> Option<&'static str> {
    let Some(object) = message.as_object() else {
        return Some("a message must be a JSON object (batches are not supported)");
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Some("\"jsonrpc\" must be \"2.0\"");
    }
    if let Some(id) = object.get("id")
        && !(id.is_string() || id.is_number() || id.is_null())
    {
        return Some("\"id\" must be a string or a number");
    }
    match object.get("method") {
        Some(method) if !method.is_string() => Some("\"method\" must be a string"),
        Some(_) => None,
        // A response to a request of the server (elicitation).
        None if object.contains_key("id")
            && (object.contains_key("result") || object.contains_key("error")) =>
        {
            None
        }
        None => Some("a request needs a \"method\""),
    }
}

/// A JSON-RPC error line answering the request with `id` (null unless it
/// is a string or a number).
fn error_line(id: &Value, code: i32, message: String) -> Vec<u8> {
    let id = if id.is_string() || id.is_number() {
        id.clone()
    } else {
        Value::Null
    };
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        .to_string()
        .into_bytes()
}

/// The error line answering an invalid request.
fn invalid_request_error(id: &Value, why: &str) -> Vec<u8> {
    error_line(id, -32600, format!("Invalid request: {why}"))
}

/// The error line answering a known request whose parameters do not fit.
fn invalid_params_error(id: &Value, why: &serde_json::Error) -> Vec<u8> {
    error_line(id, -32602, format!("Invalid params: {why}"))
}

/// The answer to a line that is not a message rmcp can take (`error` is
/// why it could not), or `None` when it needs none (a stray response or
/// notification rmcp would not know).
fn answer_for(body: &[u8], error: &serde_json::Error) -> Option<Vec<u8>> {
    let Ok(message) = serde_json::from_slice::<Value>(body) else {
        return Some(PARSE_ERROR.as_bytes().to_vec());
    };
    let id = message.get("id").unwrap_or(&Value::Null);
    if let Some(why) = invalid_request(&message) {
        return Some(invalid_request_error(id, why));
    }
    // A notification or a response gets no answer (JSON-RPC forbids one).
    if message.get("method").is_none() || !message.as_object().is_some_and(|o| o.contains_key("id"))
    {
        tracing::debug!(%error, "an incoming message rmcp cannot take was ignored");
        return None;
    }
    Some(invalid_params_error(id, error))
}

/// The JSON-RPC error answering `body` when it is not a message rmcp
/// takes (the same answers as a line over stdio; a notification or a
/// response it does not know, which stdio ignores, is an invalid request
/// here); `None` when it is one. For `--listen`, whose answer is a status
/// as well: 400 with this body.
#[cfg(feature = "http")]
pub(crate) fn refusal(body: &[u8]) -> Option<Vec<u8>> {
    let error = parse_message(body).err()?;
    Some(answer_for(body, &error).unwrap_or_else(|| {
        invalid_request_error(
            &Value::Null,
            &format!("not a message this server takes ({error})"),
        )
    }))
}

/// What one bounded line read found.
enum LineRead {
    /// A whole line is in the buffer (with its newline, if it had one).
    Line,
    /// A line longer than [`MAX_LINE`] was skipped.
    TooLong,
    /// The end of the input.
    Eof,
}

/// The server's side of stdio (or of any reader and writer, for tests).
pub struct StdioTransport {
    input: Box<dyn AsyncBufRead + Send + Unpin>,
    /// The line being read: kept across cancelled reads (rmcp polls
    /// `receive` in a `select!`), cleared once handled.
    line: Vec<u8>,
    /// Skipping the rest of a line that was too long.
    skipping: bool,
    /// The writer task's queue; `None` once closed.
    output: Option<mpsc::UnboundedSender<Vec<u8>>>,
    writer: Option<tokio::task::JoinHandle<()>>,
}

/// How long closing waits for queued responses to reach a client that
/// stopped reading.
const DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

impl std::fmt::Debug for StdioTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StdioTransport")
            .field("buffered", &self.line.len())
            .finish_non_exhaustive()
    }
}

impl StdioTransport {
    /// Over `input` and `output`; the writer task starts on the current
    /// runtime.
    pub fn new<R, W>(input: R, output: W) -> Self
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        let writer = tokio::spawn(write_lines(rx, output));
        StdioTransport {
            input: Box::new(BufReader::with_capacity(64 << 10, input)),
            line: Vec::new(),
            skipping: false,
            output: Some(tx),
            writer: Some(writer),
        }
    }

    /// Over the process's stdin and stdout: non-blocking pipes where they
    /// are pipes (Unix), tokio's stdin and stdout otherwise.
    pub fn stdio() -> Self {
        #[cfg(unix)]
        {
            use std::os::fd::AsFd;
            use tokio::net::unix::pipe;
            let input = std::io::stdin()
                .as_fd()
                .try_clone_to_owned()
                .and_then(pipe::Receiver::from_owned_fd);
            let output = std::io::stdout()
                .as_fd()
                .try_clone_to_owned()
                .and_then(pipe::Sender::from_owned_fd);
            match (input, output) {
                (Ok(input), Ok(output)) => return StdioTransport::new(input, output),
                (Ok(input), Err(_)) => return StdioTransport::new(input, tokio::io::stdout()),
                (Err(_), Ok(output)) => return StdioTransport::new(tokio::io::stdin(), output),
                (Err(_), Err(_)) => {}
            }
        }
        StdioTransport::new(tokio::io::stdin(), tokio::io::stdout())
    }

    /// Queues one line for the writer task.
    fn queue(&self, line: Vec<u8>) -> std::io::Result<()> {
        self.output
            .as_ref()
            .ok_or(std::io::ErrorKind::BrokenPipe)?
            .send(line)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))
    }

    /// Reads into `self.line` until a newline or the end of input, never
    /// keeping more than [`MAX_LINE`] bytes. Cancellation-safe: `fill_buf`
    /// consumes nothing, and the copy and `consume` happen without an await
    /// between them.
    async fn read_line(&mut self) -> std::io::Result<LineRead> {
        loop {
            let buf = self.input.fill_buf().await?;
            if buf.is_empty() {
                return Ok(if self.line.is_empty() || self.skipping {
                    LineRead::Eof
                } else {
                    LineRead::Line
                });
            }
            let newline = memchr::memchr(b'\n', buf);
            let take = newline.map_or(buf.len(), |i| i + 1);
            let mut read = None;
            if self.skipping {
                if newline.is_some() {
                    self.skipping = false;
                }
            } else if self.line.len() + take > MAX_LINE + 1 {
                self.line.clear();
                self.skipping = newline.is_none();
                read = Some(LineRead::TooLong);
            } else {
                self.line.extend_from_slice(&buf[..take]);
                if newline.is_some() {
                    read = Some(LineRead::Line);
                }
            }
            self.input.consume(take);
            if let Some(read) = read {
                return Ok(read);
            }
        }
    }
}

/// Writes each queued line to `output` and flushes once the queue is empty.
async fn write_lines<W: AsyncWrite + Unpin>(
    mut lines: mpsc::UnboundedReceiver<Vec<u8>>,
    mut output: W,
) {
    while let Some(line) = lines.recv().await {
        if output.write_all(&line).await.is_err() {
            return;
        }
        while let Ok(more) = lines.try_recv() {
            if output.write_all(&more).await.is_err() {
                return;
            }
        }
        if output.flush().await.is_err() {
            return;
        }
    }
}

impl Transport<RoleServer> for StdioTransport {
    type Error = std::io::Error;

    fn name() -> Cow<'static, str> {
        "stdio".into()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let sent = serde_json::to_vec(&item)
            .map_err(std::io::Error::other)
            .and_then(|mut line| {
                line.push(b'\n');
                self.queue(line)
            });
        std::future::ready(sent)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            match self.read_line().await {
                Ok(LineRead::Line) => {}
                Ok(LineRead::TooLong) => {
                    let answer =
                        invalid_request_error(&Value::Null, "the line is longer than 64 MiB");
                    self.queue(with_newline(answer)).ok()?;
                    continue;
                }
                Ok(LineRead::Eof) => return None,
                Err(err) => {
                    tracing::error!(%err, "reading stdin failed");
                    return None;
                }
            }
            let body = self.line.trim_ascii();
            if body.is_empty() {
                self.line.clear();
                continue;
            }
            let parsed = parse_message(body);
            let answer = match &parsed {
                Ok(_) => None,
                Err(error) => answer_for(body, error),
            };
            self.line.clear();
            match parsed {
                Ok(message) => return Some(message),
                Err(_) => {
                    if let Some(answer) = answer {
                        self.queue(with_newline(answer)).ok()?;
                    }
                }
            }
        }
    }

    /// Lets the writer write what is queued (rmcp sends the answers of
    /// requests still in flight before it closes), for up to 5 s.
    async fn close(&mut self) -> Result<(), Self::Error> {
        self.output = None;
        if let Some(writer) = self.writer.take() {
            let _ = tokio::time::timeout(DRAIN, writer).await;
        }
        Ok(())
    }
}

fn with_newline(mut line: Vec<u8>) -> Vec<u8> {
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-pass parse takes exactly the plain requests, and makes of
    /// each the message rmcp's own parse makes.
    #[test]
    fn the_plain_parse_is_rmcps() {
        let plain = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash","arguments":{"command":"true"}}}"#,
            r#"{"id":"x","jsonrpc":"2.0","method":"tools/call","params":{"arguments":{"command":"a\nb","n":1.5,"z":[1,{"k":null}]},"name":"bash"}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools\/call","params":{"name":"bash","arguments":null,"_meta":null}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"e","arguments":{"a":1,"a":2},"unknown":3}}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"ping","params":null}"#,
            r#"{"jsonrpc":"2.0","id":2.0,"method":"ping","params":{"x":1}}"#,
            r#"{"method":"ping","params":{},"id":3,"jsonrpc":"2.0"}"#,
        ];
        for line in plain {
            let fast = parse_plain(line.as_bytes()).unwrap_or_else(|| panic!("{line}"));
            let generic: RxJsonRpcMessage<RoleServer> = serde_json::from_str(line).unwrap();
            assert_eq!(format!("{fast:?}"), format!("{generic:?}"), "{line}");
        }
        // Left to rmcp's parse: it may refuse them, or keep more of them.
        let other = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash","_meta":{"progressToken":1}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":["bash"]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":null}"#,
            r#"{"jsonrpc":"2.0","id":1,"params":{"name":"bash"},"method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash","name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","extra":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":5}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
            r#"{"id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
        ];
        for line in other {
            assert!(parse_plain(line.as_bytes()).is_none(), "{line}");
        }
    }

    #[test]
    fn requests_are_told_from_what_is_not_one() {
        for ok in [
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": "a", "result": {}}),
        ] {
            assert_eq!(invalid_request(&ok), None, "{ok}");
        }
        for bad in [
            json!({"jsonrpc": "2.0", "id": 77, "method": 5}),
            json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]),
            json!({"id": 1, "method": "ping"}),
            json!({"jsonrpc": "2.0", "id": {}, "method": "ping"}),
            json!({"jsonrpc": "2.0", "id": 1}),
            json!(3),
        ] {
            assert!(invalid_request(&bad).is_some(), "{bad}");
        }
        let answer: Value =
            serde_json::from_slice(&invalid_request_error(&json!(77), "x")).unwrap();
        assert_eq!(answer["id"], 77);
        assert_eq!(answer["error"]["code"], -32600);
    }
}
