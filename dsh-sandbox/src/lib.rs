//! Sandbox modes (read-only, workspace-write, danger-full-access) for agent
//! shells and editors.
//!
//! Not implemented yet: this crate is a placeholder in the workspace so that
//! its name and place are fixed. It will compose `dsh-shell-persistent` and
//! `dsh-editor`; neither of them depends on it.
