//! The `gantry` binary: parses the command line and reports errors as one line.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = gantry::cli::Cli::parse();
    match gantry::cli::run(cli) {
        Ok(code) => std::process::ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            let msg = format!("{e:#}").replace('\n', " ");
            eprintln!("error: {msg}");
            std::process::ExitCode::from(2)
        }
    }
}
