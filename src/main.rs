//! The `gantry` binary: parses the command line and reports errors as one line.

use clap::Parser;

fn main() -> std::process::ExitCode {
    // A process's keeper (started by the worker agent): before anything
    // else is set up (no runtime, no logging, no descriptor of ours).
    if std::env::args_os().nth(1).as_deref() == Some(gantry_agent::KEEPER_SUBCOMMAND.as_ref()) {
        std::process::exit(gantry_agent::keeper_main());
    }
    // A saved target (`-t NAME`) fills the URL, token and team first.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Err(e) = gantry::cli::targets::apply(&args) {
        eprintln!("error: {}", format!("{e:#}").replace('\n', " "));
        return std::process::ExitCode::from(2);
    }
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
