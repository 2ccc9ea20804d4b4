//! The MCP server: exactly two tools, one owner per MCP session.

// Without the `http` feature the per-session parts are never built.
#![cfg_attr(not(feature = "http"), allow(dead_code))]

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use dsh_editor::fs::Fs;
use dsh_editor::{Editor, TOOL_NAME as EDITOR_TOOL};
use dsh_sandbox::SandboxedShell;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value;

use crate::SessionLog;

/// The owner id of the server's one shell over stdio.
pub const OWNER: &str = "mcp";

/// The header that names a Streamable HTTP session.
const SESSION_HEADER: &str = "mcp-session-id";

/// The two tools over MCP.
///
/// Over stdio ([`DshServer::new`]) the one client is the owner [`OWNER`].
/// Over Streamable HTTP (`http::HttpServer`) each MCP session is
/// an owner of the shell tool, named by its `Mcp-Session-Id`, with an
/// editor over its own filesystem ([`SandboxedShell::editor_fs`]), made at
/// its first request that names it.
#[derive(Clone)]
pub struct DshServer {
    shell: Arc<SandboxedShell>,
    editors: Editors,
    log: Option<Arc<SessionLog>>,
}

/// Where a call's owner and editor come from.
#[derive(Clone)]
enum Editors {
    /// One owner, [`OWNER`], and its editor.
    Fixed(Arc<Editor<Arc<dyn Fs>>>),
    /// The session's owner and editor, once its first request named it.
    PerSession {
        template: EditorTemplate,
        session: Arc<OnceLock<Acting>>,
    },
}

/// The owner a call acts for, and its editor.
type Acting = (String, Arc<Editor<Arc<dyn Fs>>>);

/// How a session's editor is made.
#[derive(Clone)]
pub(crate) struct EditorTemplate {
    /// The editor's settings, validated when the template was made.
    config: dsh_editor::EditorConfig,
    /// One filesystem for every session (a container's, a remote host's);
    /// `None`: each session's own [`SandboxedShell::editor_fs`].
    fs: Option<Arc<dyn Fs>>,
    /// An editor with these settings over no files: its definition is
    /// every session's.
    probe: Editor<Arc<dyn Fs>>,
}

impl EditorTemplate {
    /// Checks `config` once, for every session after.
    pub(crate) fn new(
        config: dsh_editor::EditorConfig,
        fs: Option<Arc<dyn Fs>>,
    ) -> Result<Self, dsh_editor::EditorConfigError> {
        let none: Arc<dyn Fs> = Arc::new(dsh_editor::fs::MemFs::new());
        let probe = Editor::with_config(none, config.clone())?;
        Ok(EditorTemplate { config, fs, probe })
    }
}

impl std::fmt::Debug for DshServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DshServer")
            .field("shell", &self.shell)
            .field("log", &self.log)
            .finish_non_exhaustive()
    }
}

impl DshServer {
    /// A server over `shell` and `editor`, logging calls to `log` if given.
    /// Each call runs with its client at hand: an
    /// [`ElicitApprover`](crate::ElicitApprover) in `shell`'s config asks
    /// that client.
    pub fn new(
        shell: SandboxedShell,
        editor: Editor<Arc<dyn Fs>>,
        log: Option<SessionLog>,
    ) -> Self {
        DshServer {
            shell: Arc::new(shell),
            editors: Editors::Fixed(Arc::new(editor)),
            log: log.map(Arc::new),
        }
    }

    /// A server for one Streamable HTTP session, sharing `shell` (one
    /// owner per session) and `log` with the other sessions' and making
    /// the session's editor from `template`.
    pub(crate) fn per_session(
        shell: Arc<SandboxedShell>,
        template: EditorTemplate,
        log: Option<Arc<SessionLog>>,
    ) -> Self {
        DshServer {
            shell,
            editors: Editors::PerSession {
                template,
                session: Arc::new(OnceLock::new()),
            },
            log,
        }
    }

    /// The owner a request acts for and its editor: [`OWNER`] over stdio,
    /// the session id over HTTP (a request without one is refused).
    fn owner_of(&self, context: &RequestContext<RoleServer>) -> Result<Acting, McpError> {
        let (template, session) = match &self.editors {
            Editors::Fixed(editor) => return Ok((OWNER.to_owned(), Arc::clone(editor))),
            Editors::PerSession { template, session } => (template, session),
        };
        if let Some((owner, editor)) = session.get() {
            return Ok((owner.clone(), Arc::clone(editor)));
        }
        let id = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.headers.get(SESSION_HEADER))
            .and_then(|value| value.to_str().ok())
            .ok_or_else(|| {
                McpError::invalid_request(
                    "This request carries no Mcp-Session-Id: initialize a session first.",
                    None,
                )
            })?;
        let fs = match &template.fs {
            Some(fs) => Arc::clone(fs),
            None => self.shell.editor_fs(id) as Arc<dyn Fs>,
        };
        let editor = Editor::with_config(fs, template.config.clone())
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        let (owner, editor) = session.get_or_init(|| (id.to_owned(), Arc::new(editor)));
        Ok((owner.clone(), Arc::clone(editor)))
    }

    /// The shell tool (to close it on shutdown).
    pub fn shell(&self) -> &SandboxedShell {
        &self.shell
    }

    /// The two tool definitions, as MCP lists them (for [`OWNER`]).
    pub fn tools(&self) -> Vec<Tool> {
        match &self.editors {
            Editors::Fixed(editor) => self.tools_of(OWNER, editor),
            Editors::PerSession { template, .. } => self.tools_of(OWNER, &template.probe),
        }
    }

    /// The two tool definitions `owner` sees.
    fn tools_of(&self, owner: &str, editor: &Editor<Arc<dyn Fs>>) -> Vec<Tool> {
        [self.shell.spec(owner), editor.spec()]
            .into_iter()
            .map(|spec| {
                let input = spec.json_schema();
                Tool::new(spec.name, spec.description, Arc::new(input))
            })
            .collect()
    }

    /// Runs one call of a tool that exists (`call_tool` refuses the others);
    /// `Err` holds the model-visible error text. Both tools run in the
    /// owner's turn (the editor in the owner's copy-on-write view, with
    /// `--copy-on-write`), so calls run one at a time in arrival order: the turn
    /// is a fair lock, and it is the first thing a call waits for.
    async fn dispatch(
        &self,
        owner: &str,
        editor: &Editor<Arc<dyn Fs>>,
        name: &str,
        arguments: &Value,
        cancel: impl std::future::Future<Output = ()>,
    ) -> Result<String, String> {
        if name == self.shell.tool_name() {
            let request = self
                .shell
                .parse_request(arguments)
                .map_err(|e| dsh_sandbox::contract::render_error(&e))?;
            self.shell
                .call(owner, request, cancel)
                .await
                .map(|outcome| dsh_sandbox::contract::render(&outcome))
                .map_err(|e| dsh_sandbox::contract::render_error(&e))
        } else {
            // In the owner's copy-on-write view, when there is one (its
            // shell started first); else simply in its turn.
            self.shell
                .in_view(owner, editor.execute(arguments))
                .await
                .map_err(|e| dsh_sandbox::contract::render_error(&e))?
                .map_err(|e| dsh_editor::contract::render_error(&e))
        }
    }
}

impl ServerHandler for DshServer {
    fn get_info(&self) -> ServerConfig {
        let mut config = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        config.server_info = Implementation::new("dsh-mcp", env!("CARGO_PKG_VERSION"));
        config
    }

    /// Over HTTP, only the versions with sessions (an `initialize`
    /// handshake): from 2026-07-28 on, MCP has none, and a session is the
    /// owner of a shell here.
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        match &self.editors {
            Editors::Fixed(_) => std::borrow::Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS),
            Editors::PerSession { .. } => ProtocolVersion::KNOWN_VERSIONS
                .iter()
                .filter(|v| v.has_initialize())
                .cloned()
                .collect(),
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let (owner, editor) = self.owner_of(&context)?;
        Ok(ListToolsResult::with_all_items(
            self.tools_of(&owner, &editor),
        ))
    }

    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let started = Instant::now();
        let (owner, editor) = self.owner_of(&context)?;
        // An unknown tool is a JSON-RPC error, as the MCP specification
        // lists it (-32602), not a tool result.
        if request.name != self.shell.tool_name() && request.name != EDITOR_TOOL {
            return Err(McpError::invalid_params(
                format!(
                    "Unknown tool `{}`. The available tools are `{}` and `{EDITOR_TOOL}`.",
                    request.name,
                    self.shell.tool_name()
                ),
                None,
            ));
        }
        let arguments = Value::Object(request.arguments.take().unwrap_or_default());
        let ct = context.ct.clone();
        // On the heap: a tool call's state is kilobytes, and rmcp holds the
        // future of every request (a ping too) sized for its largest handler.
        // The call's client goes with it, for the approver to ask.
        let outcome = Box::pin(crate::approve::asked_by(
            context.peer.clone(),
            self.dispatch(&owner, &editor, &request.name, &arguments, async move {
                ct.cancelled().await
            }),
        ))
        .await;
        let (text, is_error) = match outcome {
            Ok(text) => (text, false),
            Err(text) => (text, true),
        };
        if let Some(log) = &self.log {
            let ms = started.elapsed().as_millis() as u64;
            log.record_async(&request.name, &arguments, &text, is_error, ms)
                .await;
        }
        let content = vec![ContentBlock::text(text)];
        Ok(if is_error {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        }
        .into())
    }
}
