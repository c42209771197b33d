//! The `mcsup` binary: parse the command line, run, map the outcome to an exit code.

use clap::Parser;

fn main() {
    // Before anything else (and before any thread exists): a drain signal Slurm sends early must
    // wait for the supervisor's handler, not kill mcsup.
    mcsup::supervisor::hold_early_signals();
    let cli = mcsup::cli::Cli::parse();
    let code = match mcsup::cli::execute(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", e.message);
            e.code
        }
    };
    std::process::exit(code);
}
