//! The minimal agent runtime: a fixed persona, the persistent shell and
//! `str_replace_editor`, nothing else, and a JSONL log under
//! `$DSH_HOME/sessions`.
//!
//! ```text
//! DEEPSEEK_API_KEY=... cargo run --example minimal -- [--model NAME] "fix the failing test"
//! ```
#![allow(clippy::print_stdout, clippy::print_stderr)]

use examples_agent::minimal::{Agent, AgentConfig, DEFAULT_BASE_URL};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut model = None;
    if let Some(i) = args.iter().position(|a| a == "--model") {
        if i + 1 >= args.len() {
            eprintln!("--model needs a value");
            return std::process::ExitCode::FAILURE;
        }
        model = Some(args.remove(i + 1));
        args.remove(i);
    }
    let task = args.join(" ");
    if task.trim().is_empty() {
        eprintln!("usage: minimal [--model NAME] TASK");
        return std::process::ExitCode::FAILURE;
    }
    let config = AgentConfig::from_env(model);
    // The public endpoint needs a key: say which variable is missing rather
    // than fail later on the request (a server of your own may need none).
    if config.api_key.is_none() && config.base_url == DEFAULT_BASE_URL {
        eprintln!(
            "no API key: set DEEPSEEK_API_KEY (or OPENAI_API_KEY) for {}, or point DEEPSEEK_BASE_URL (or OPENAI_BASE_URL) at a server that needs none",
            config.base_url
        );
        return std::process::ExitCode::FAILURE;
    }
    let mut agent = match Agent::new(config) {
        Ok(agent) => agent,
        Err(e) => {
            eprintln!("{e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    if let Some(log) = agent.log() {
        eprintln!("session log: {}", log.path().display());
    }
    let result = agent.run(&task).await;
    agent.close().await;
    match result {
        Ok(answer) => {
            println!("{answer}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::ExitCode::FAILURE
        }
    }
}
