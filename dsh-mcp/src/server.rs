//! The MCP server: exactly two tools, one owner.

use std::sync::Arc;
use std::time::Instant;

use dsh_editor::fs::Fs;
use dsh_editor::{Editor, TOOL_NAME as EDITOR_TOOL};
use dsh_sandbox::SandboxedShell;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value;

use crate::{ElicitApprover, SessionLog};

/// The owner id of the server's one shell.
pub const OWNER: &str = "mcp";

/// The two tools over MCP.
#[derive(Clone)]
pub struct DshServer {
    shell: Arc<SandboxedShell>,
    editor: Arc<Editor<Arc<dyn Fs>>>,
    log: Option<Arc<SessionLog>>,
    elicit: Option<Arc<ElicitApprover>>,
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
    /// A server over `shell` and `editor`, logging calls to `log` if given;
    /// `elicit` is told the client of each call so it can ask for approvals.
    pub fn new(
        shell: SandboxedShell,
        editor: Editor<Arc<dyn Fs>>,
        log: Option<SessionLog>,
        elicit: Option<Arc<ElicitApprover>>,
    ) -> Self {
        DshServer {
            shell: Arc::new(shell),
            editor: Arc::new(editor),
            log: log.map(Arc::new),
            elicit,
        }
    }

    /// The shell tool (to close it on shutdown).
    pub fn shell(&self) -> &SandboxedShell {
        &self.shell
    }

    /// The two tool definitions, as MCP lists them.
    pub fn tools(&self) -> Vec<Tool> {
        [self.shell.spec(OWNER), self.editor.spec()]
            .into_iter()
            .map(|spec| {
                let input = spec.json_schema();
                Tool::new(spec.name, spec.description, Arc::new(input))
            })
            .collect()
    }

    /// Runs one call of a tool that exists (`call_tool` refuses the others);
    /// `Err` holds the model-visible error text. Both tools run in the
    /// owner's turn, so calls run one at a time in arrival order: the turn
    /// is a fair lock, and it is the first thing a call waits for.
    async fn dispatch(
        &self,
        name: &str,
        arguments: &Value,
        cancel: impl std::future::Future<Output = ()>,
    ) -> Result<String, String> {
        if name == self.shell.tool_name() {
            self.shell
                .execute_with_cancel(OWNER, arguments, cancel)
                .await
                .map_err(|e| e.to_string())
        } else {
            self.shell
                .in_turn(OWNER, self.editor.execute(arguments))
                .await
                .map_err(|e| e.to_string())
        }
    }
}

impl ServerHandler for DshServer {
    fn get_info(&self) -> ServerConfig {
        let mut config = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        config.server_info = Implementation::new("dsh-mcp", env!("CARGO_PKG_VERSION"));
        config
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let started = Instant::now();
        if let Some(elicit) = &self.elicit {
            elicit.set_peer(context.peer.clone());
        }
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
        let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
        let ct = context.ct.clone();
        // On the heap: a tool call's state is kilobytes, and rmcp holds the
        // future of every request (a ping too) sized for its largest handler.
        let outcome =
            Box::pin(self.dispatch(
                &request.name,
                &arguments,
                async move { ct.cancelled().await },
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
