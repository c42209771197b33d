//! The `mcsup` binary: parse the command line, run, map the outcome to an exit code.

use std::time::Duration;

use clap::Parser;

/// How long the last lines of mcsup's own log may take to reach stderr before exiting; a stderr
/// nobody reads must not keep a finished mcsup alive.
const STDERR_FLUSH: Duration = Duration::from_secs(1);

fn main() {
    // Before anything else (and before any thread exists): a drain signal Slurm sends early must
    // wait for the supervisor's handler, not kill mcsup; a write over `ulimit -f` must fail, not
    // kill it.
    mcsup::supervisor::hold_early_signals();
    mcsup::supervisor::survive_file_size_limit();
    let cli = mcsup::cli::Cli::parse();
    if let Some(format) = cli.log_format() {
        mcsup::supervisor::init_tracing(format);
    }
    let code = match mcsup::cli::execute(cli) {
        Ok(code) => code,
        Err(e) => {
            // A message can quote a file's content or name: nothing in it acts on the terminal.
            let message = mcsup::domain::signature::for_terminal(&e.message);
            mcsup::supervisor::stderr_write(format!("error: {message}\n").as_bytes());
            e.code
        }
    };
    mcsup::supervisor::flush_stderr(STDERR_FLUSH);
    std::process::exit(code);
}
