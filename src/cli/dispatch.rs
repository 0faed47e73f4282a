//! Runs a command of the grammar (`grammar.rs`): the servers, `completions`
//! and the validators here, each group of client verbs by the `run` beside
//! its grammar (`build_grammar.rs`, `fleet_grammar.rs`, `pipelines.rs`, `resources.rs`,
//! `teams.rs`, `session_grammar.rs`, `bench_grammar.rs`), against a
//! web node's API.

use super::grammar::{Cli, Command};
use super::{serve, table, validate_plan, ApiClient};

/// Runs the CLI; returns the process exit code.
pub fn run(cli: Cli) -> anyhow::Result<i32> {
    table::set_wide(cli.wide);
    match cli.command {
        Command::Web { web } => serve::web(&cli.log_format, web).map(|_| 0),
        Command::Worker {
            config,
            registration_key,
            worker,
        } => serve::worker(&cli.log_format, config, registration_key, worker).map(|_| 0),
        Command::Quickstart { web, backend } => {
            serve::quickstart(&cli.log_format, web, backend).map(|_| 0)
        }
        Command::ValidateTask { file } => Ok(validate_task(&file)),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "gantry", &mut script);
            // A reader that stops early (`| head`) is not an error.
            crate::cli::output::write_bytes(&script);
            Ok(0)
        }
        Command::ValidatePlan {
            file,
            vars,
            var_files,
        } => Ok(validate_plan::validate_plan(&file, &vars, &var_files)),
        #[cfg(feature = "bench")]
        Command::Bench { which } => super::bench_grammar::run(which).map(|_| 0),
        command => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let client = ApiClient::new(&cli.url).with_token(cli.token.clone())?;
            let target = cli.target.clone();
            rt.block_on(async move {
                match command {
                    Command::Build(command) => super::build_grammar::run(&client, command).await,
                    Command::Fleet(command) => super::fleet_grammar::run(&client, command).await,
                    Command::Pipelines(command) => super::pipelines::run(&client, command).await,
                    Command::Resources(command) => super::resources::run(&client, command).await,
                    Command::Team(command) => super::teams::run(&client, command).await,
                    Command::Session(command) => {
                        super::session_grammar::run(&client, target, command).await
                    }
                    _ => unreachable!("server commands are handled above"),
                }
            })
        }
    }
}

/// `gantry validate-task`: prints every problem and returns 1, or 0.
fn validate_task(file: &std::path::Path) -> i32 {
    let text = match super::read_bounded::read_document(file, "task config") {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e:#}");
            return 1;
        }
    };
    match gantry_actors::api::TaskConfig::from_yaml(&text) {
        Ok(_) => {
            crate::outln!("{}: valid", file.display());
            0
        }
        Err(problems) => {
            for p in problems {
                eprintln!("{}: {p}", file.display());
            }
            1
        }
    }
}
