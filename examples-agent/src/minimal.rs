//! The minimal agent runtime: a fixed persona, exactly two tools (the
//! persistent shell and `str_replace_editor`), no context compaction, no
//! extra runtime-context messages, and an uncompressed JSONL session log.
//!
//! It talks to any OpenAI-compatible chat-completions endpoint (DeepSeek's
//! by default).

use std::path::PathBuf;

use dsh_editor::{Editor, fs::LocalFs};
use dsh_mcp::SessionLog;
use dsh_shell_persistent::{ShellConfig, ShellPool};
use serde_json::{Value, json};

/// The persona when `DSH_SYSTEM_PROMPT` is not set.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a helpful software engineer assistant.";
/// The endpoint when neither `DEEPSEEK_BASE_URL` nor `OPENAI_BASE_URL` is set.
pub const DEFAULT_BASE_URL: &str = "https://api.deepseek.com";
/// The model when neither `--model` nor `DSH_MODEL` says otherwise.
pub const DEFAULT_MODEL: &str = "deepseek-chat";

/// The runtime's settings.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The chat-completions base URL (`{base_url}/chat/completions` is called).
    pub base_url: String,
    /// The bearer token, if any.
    pub api_key: Option<String>,
    /// The model name.
    pub model: String,
    /// The complete system prompt.
    pub system_prompt: String,
    /// The shell's start directory.
    pub workspace: PathBuf,
    /// Where the session's JSONL file goes; `None` for no log.
    pub session_dir: Option<PathBuf>,
    /// The most model turns before giving up.
    pub max_turns: usize,
}

impl AgentConfig {
    /// Settings from the environment, as that ecosystem does:
    /// `DEEPSEEK_BASE_URL` or `OPENAI_BASE_URL`, `DEEPSEEK_API_KEY` or
    /// `OPENAI_API_KEY`, `DSH_MODEL` (unless `model` is given),
    /// `DSH_SYSTEM_PROMPT`, `DSH_WORKSPACE` (else the current directory) and
    /// `DSH_HOME` (the log goes to `$DSH_HOME/sessions`).
    pub fn from_env(model: Option<String>) -> AgentConfig {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        AgentConfig {
            base_url: var("DEEPSEEK_BASE_URL")
                .or_else(|| var("OPENAI_BASE_URL"))
                .unwrap_or_else(|| DEFAULT_BASE_URL.to_owned()),
            api_key: var("DEEPSEEK_API_KEY").or_else(|| var("OPENAI_API_KEY")),
            model: model
                .or_else(|| var("DSH_MODEL"))
                .unwrap_or_else(|| DEFAULT_MODEL.to_owned()),
            system_prompt: var("DSH_SYSTEM_PROMPT")
                .unwrap_or_else(|| DEFAULT_SYSTEM_PROMPT.to_owned()),
            workspace: var("DSH_WORKSPACE")
                .map(PathBuf::from)
                .or_else(|| std::env::current_dir().ok())
                .unwrap_or_else(|| PathBuf::from("/")),
            session_dir: var("DSH_HOME").map(|h| PathBuf::from(h).join("sessions")),
            max_turns: 100,
        }
    }
}

/// Why a run stopped without a final answer.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The endpoint could not be reached or answered with an error.
    #[error("the chat-completions request failed: {0}")]
    Http(String),
    /// The endpoint's answer was not a chat completion.
    #[error("the endpoint's answer is not a chat completion: {0}")]
    BadResponse(String),
    /// The model kept calling tools past `max_turns`.
    #[error("the model did not finish within {0} turns")]
    TooManyTurns(usize),
    /// The tools could not be set up.
    #[error("setting up the tools failed: {0}")]
    Setup(String),
}

/// One agent session.
#[derive(Debug)]
pub struct Agent {
    config: AgentConfig,
    shell: ShellPool,
    editor: Editor<LocalFs>,
    log: Option<SessionLog>,
    messages: Vec<Value>,
}

impl Agent {
    /// A new session: the tools, the log file, and the system message.
    pub fn new(config: AgentConfig) -> Result<Agent, AgentError> {
        // The shells start from this process's environment less what looks
        // like a credential: the API key read above never reaches them.
        let shell = ShellPool::new(ShellConfig::new(&config.workspace))
            .map_err(|e| AgentError::Setup(e.to_string()))?;
        let log = config
            .session_dir
            .as_deref()
            .map(SessionLog::create)
            .transpose()
            .map_err(|e| AgentError::Setup(format!("session log: {e}")))?;
        let mut agent = Agent {
            messages: Vec::new(),
            shell,
            editor: Editor::new(LocalFs::new()),
            log,
            config,
        };
        let system = json!({"role": "system", "content": agent.config.system_prompt});
        agent.push_message(system);
        Ok(agent)
    }

    /// The session log, if any.
    pub fn log(&self) -> Option<&SessionLog> {
        self.log.as_ref()
    }

    /// The two tools, in the chat-completions `tools` format.
    pub fn tools(&self) -> Value {
        let function = |schema: Value| json!({"type": "function", "function": schema});
        json!([
            function(self.shell.spec().openai()),
            function(self.editor.spec().openai())
        ])
    }

    fn push_message(&mut self, message: Value) {
        self.append_log(json!({"type": "message", "message": message}));
        self.messages.push(message);
    }

    fn append_log(&self, record: Value) {
        if let Some(log) = &self.log {
            log.append(&record);
        }
    }

    /// Runs one user task to the model's final answer.
    pub async fn run(&mut self, task: &str) -> Result<String, AgentError> {
        self.push_message(json!({"role": "user", "content": task}));
        for _ in 0..self.config.max_turns {
            let reply = self.complete().await?;
            let message = reply["choices"][0]["message"].clone();
            if !message.is_object() {
                return Err(AgentError::BadResponse(reply.to_string()));
            }
            let calls = message["tool_calls"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            self.push_message(message.clone());
            if calls.is_empty() {
                return Ok(message["content"].as_str().unwrap_or_default().to_owned());
            }
            for call in calls {
                let id = call["id"].as_str().unwrap_or_default().to_owned();
                let name = call["function"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let raw = call["function"]["arguments"].as_str().unwrap_or("{}");
                self.append_log(
                    json!({"type": "tool_call", "id": id, "name": name, "arguments": raw}),
                );
                let (content, is_error) = self.call_tool(&name, raw).await;
                self.append_log(json!({"type": "tool_result", "id": id, "name": name, "content": content, "is_error": is_error}));
                self.push_message(json!({"role": "tool", "tool_call_id": id, "content": content}));
            }
        }
        Err(AgentError::TooManyTurns(self.config.max_turns))
    }

    async fn call_tool(&self, name: &str, raw_arguments: &str) -> (String, bool) {
        let arguments: Value = match serde_json::from_str(raw_arguments) {
            Ok(v) => v,
            Err(e) => return (format!("The tool arguments are not valid JSON: {e}"), true),
        };
        let result = if name == self.shell.tool_name() {
            self.shell
                .execute("agent", &arguments)
                .await
                .map_err(|e| dsh_shell_persistent::contract::render_error(&e))
        } else if name == dsh_editor::TOOL_NAME {
            self.editor
                .execute(&arguments)
                .await
                .map_err(|e| dsh_editor::contract::render_error(&e))
        } else {
            Err(format!("Unknown tool `{name}`."))
        };
        match result {
            Ok(text) => (text, false),
            Err(text) => (text, true),
        }
    }

    async fn complete(&self) -> Result<Value, AgentError> {
        let url = format!(
            "{}/chat/completions",
            self.config.base_url.trim_end_matches('/')
        );
        let body = json!({
            "model": self.config.model,
            "messages": self.messages,
            "tools": self.tools(),
        });
        let key = self.config.api_key.clone();
        tokio::task::spawn_blocking(move || {
            let mut request = ureq::post(&url).header("Content-Type", "application/json");
            if let Some(key) = key {
                request = request.header("Authorization", format!("Bearer {key}"));
            }
            let mut response = request
                .send_json(&body)
                .map_err(|e| AgentError::Http(e.to_string()))?;
            response
                .body_mut()
                .read_json::<Value>()
                .map_err(|e| AgentError::BadResponse(e.to_string()))
        })
        .await
        .map_err(|e| AgentError::Http(e.to_string()))?
    }

    /// Kills the shell's process tree.
    pub async fn close(&self) {
        self.shell.close_all().await;
    }
}
