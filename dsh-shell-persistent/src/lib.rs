//! The persistent `bash(command)` tool for LLM agents.
//!
//! Not implemented yet: this crate is a placeholder in the workspace so that
//! its name and place are fixed. Its issue builds it on top of `dsh-pty`.
