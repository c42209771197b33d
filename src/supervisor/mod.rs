//! Stub (lead's build copy).
use crate::plan::Plan;
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat { #[default] Human, Json }
#[derive(Debug, Clone, Default)]
pub struct RunOptions { pub log_format: LogFormat, pub console: bool }
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome { pub exit_code: i32 }
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError { #[error("{0}")] Setup(String) }
pub fn run_blocking(_plan: Plan, _opts: RunOptions) -> Result<RunOutcome, SupervisorError> {
    Err(SupervisorError::Setup("the supervisor is not built yet".into()))
}
pub fn print_status(_log_dir: &std::path::Path, _node: Option<&str>, _json: bool) -> Result<String, SupervisorError> {
    Err(SupervisorError::Setup("no status".into()))
}
pub const EXIT_SETUP: i32 = 3;
