//! What each command of the grammar (`grammar.rs`) does: the servers, and
//! the client verbs against a web node's API.

#[cfg(feature = "bench")]
use super::bench_grammar::BenchCommand;
use super::grammar::{Cli, Command};
use super::{
    check, execute, follow, hijack, list, people, secrets, serve, table, teams, validate_plan,
    ApiClient,
};

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
        Command::Bench { which } => {
            match which {
                BenchCommand::Placement {
                    workers,
                    steps,
                    concurrency,
                    database_url,
                    nodes,
                } => actix_web::rt::System::new().block_on(crate::bench::placement::bench(
                    crate::bench::placement::PlacementBench {
                        workers,
                        steps,
                        concurrency,
                        database_url,
                        nodes,
                    },
                ))?,
                BenchCommand::Scheduling {
                    pipelines,
                    chain_jobs,
                    chains,
                    versions,
                    more_versions,
                    database_url,
                } => actix_web::rt::System::new().block_on(crate::bench::scheduling::bench(
                    crate::bench::scheduling::SchedulingBench {
                        pipelines,
                        chain_jobs,
                        chains,
                        versions,
                        more_versions,
                        database_url,
                    },
                ))?,
                BenchCommand::Follow {
                    events,
                    interval_ms,
                    database_url,
                } => actix_web::rt::System::new().block_on(crate::bench::follow::bench(
                    crate::bench::follow::FollowBench {
                        events,
                        interval: std::time::Duration::from_millis(interval_ms),
                        database_url,
                    },
                ))?,
                BenchCommand::Logs {
                    size,
                    followers,
                    database_url,
                    reap_builds,
                } => actix_web::rt::System::new().block_on(crate::bench::logs::bench(
                    crate::bench::logs::LogsBench {
                        size,
                        followers,
                        database_url,
                        reap_builds,
                    },
                ))?,
                BenchCommand::ContainerStart {
                    tasks,
                    warmup,
                    backend,
                } => {
                    actix_web::rt::System::new().block_on(crate::bench::container_start::bench(
                        crate::bench::container_start::ContainerStartBench {
                            tasks,
                            warmup,
                            backend,
                        },
                    ))?
                }
                BenchCommand::ImagePull {
                    size,
                    layers,
                    tasks,
                } => actix_web::rt::System::new().block_on(crate::bench::image_pull::bench(
                    crate::bench::image_pull::ImagePullBench {
                        size,
                        layers,
                        tasks,
                    },
                ))?,
                BenchCommand::Builds {
                    builds,
                    workers,
                    sequential,
                } => actix_web::rt::System::new().block_on(crate::bench::builds::bench(
                    crate::bench::builds::BuildsBench {
                        builds,
                        workers,
                        sequential,
                    },
                ))?,
                BenchCommand::Ui { lines, chromium } => actix_web::rt::System::new().block_on(
                    crate::bench::ui::bench(crate::bench::ui::UiBench { lines, chromium }),
                )?,
                BenchCommand::Stream { size, rounds } => actix_web::rt::System::new().block_on(
                    crate::bench::stream::bench(crate::bench::stream::StreamBench { size, rounds }),
                )?,
                BenchCommand::S3 { size, s3_server } => {
                    let server = crate::bench::s3::server_binary(s3_server)?;
                    actix_web::rt::System::new().block_on(crate::bench::s3::bench(
                        crate::bench::s3::S3Bench { size, server },
                    ))?
                }
                BenchCommand::DeepYaml { depth } => {
                    actix_web::rt::System::new().block_on(crate::bench::deep_yaml::bench(depth))?
                }
                BenchCommand::SignIns {
                    requests,
                    concurrency,
                    addresses,
                } => actix_web::rt::System::new().block_on(crate::bench::sign_ins::bench(
                    crate::bench::sign_ins::SignInsBench {
                        requests,
                        concurrency,
                        addresses,
                    },
                ))?,
                BenchCommand::Secrets { builds, vars } => actix_web::rt::System::new()
                    .block_on(crate::bench::secrets::bench(builds, vars))?,
                BenchCommand::Gc {
                    handles,
                    reports,
                    postgres_url,
                } => actix_web::rt::System::new().block_on(crate::bench::gc::bench(
                    crate::bench::gc::GcBench {
                        handles,
                        reports,
                        postgres_url,
                    },
                ))?,
            }
            Ok(0)
        }
        command => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let client = ApiClient::new(&cli.url).with_token(cli.token.clone())?;
            let target = cli.target.clone();
            rt.block_on(async move {
                match command {
                    Command::Execute {
                        config,
                        inputs,
                        outputs,
                        tags,
                        platform,
                        team,
                        image,
                        timeout,
                    } => {
                        let args = execute::ExecuteArgs {
                            config,
                            inputs,
                            outputs,
                            tags,
                            platform,
                            team,
                            image,
                            timeout,
                        };
                        execute::execute(&client, args).await
                    }
                    Command::Run {
                        pipeline,
                        job,
                        pipeline_name,
                        vars,
                        var_files,
                        team,
                    } => {
                        let args = super::run::RunArgs {
                            pipeline,
                            job,
                            pipeline_name,
                            vars,
                            var_files,
                            team,
                        };
                        super::run::run(&client, args).await
                    }
                    Command::Check {
                        pipeline,
                        resource,
                        vars,
                        var_files,
                        team,
                    } => {
                        let args = check::CheckArgs {
                            pipeline,
                            resource,
                            vars,
                            var_files,
                            team,
                        };
                        check::check(&client, args).await
                    }
                    Command::Hijack {
                        build,
                        step,
                        container,
                        command,
                    } => {
                        let args = hijack::HijackArgs {
                            build,
                            step,
                            container,
                            command,
                        };
                        hijack::hijack(&client, args).await
                    }
                    Command::Workers { json } => list::workers(&client, json).await.map(|_| 0),
                    Command::Queue { json } => list::queue(&client, json).await.map(|_| 0),
                    Command::Builds { json, filters } => {
                        list::builds(&client, &filters, json).await.map(|_| 0)
                    }
                    Command::Containers { json } => {
                        list::handles(&client, "containers", json).await.map(|_| 0)
                    }
                    Command::Volumes { json } => {
                        list::handles(&client, "volumes", json).await.map(|_| 0)
                    }
                    Command::Jobs {
                        json,
                        pipeline: Some(pipeline),
                        team,
                        ..
                    } => list::pipeline_jobs(&client, &team, &pipeline, json)
                        .await
                        .map(|_| 0),
                    Command::Jobs {
                        json,
                        worker: Some(worker),
                        ..
                    } => list::worker_jobs(&client, &worker, json).await.map(|_| 0),
                    Command::Jobs { json, .. } => list::jobs(&client, json).await.map(|_| 0),
                    Command::Pipelines(command) => super::pipelines::run(&client, command).await,
                    Command::WebNodes { json } => list::web_nodes(&client, json).await.map(|_| 0),
                    Command::Watch { build, tail, raw } => {
                        let view: serde_json::Value =
                            client.get(&format!("/api/v1/builds/{build}")).await?;
                        if let Some(at) = view["log_reaped_at"].as_i64() {
                            anyhow::bail!(
                                "build {build} ended {}; its log was deleted by its job's build_log_retention (at {at} ms since the epoch)",
                                view["status"].as_str().unwrap_or("unknown")
                            );
                        }
                        if raw || tail.is_some() {
                            follow::print_log(&client, build, tail).await
                        } else {
                            follow::follow(&client, build, follow::StepLines::Told)
                                .await?
                                .exit_code(build)
                        }
                    }
                    Command::AbortBuild { build } => {
                        let _: serde_json::Value = client
                            .post(
                                &format!("/api/v1/builds/{build}/abort"),
                                &serde_json::json!({}),
                            )
                            .await?;
                        crate::outln!("build {build}: aborting");
                        Ok(0)
                    }
                    Command::LandWorker { name } => {
                        list::lifecycle(&client, &name, "land").await.map(|_| 0)
                    }
                    Command::RetireWorker { name } => {
                        list::lifecycle(&client, &name, "retire").await.map(|_| 0)
                    }
                    Command::PruneWorker { name, force } => {
                        list::prune(&client, &name, force).await.map(|_| 0)
                    }
                    Command::ClearTaskCache {
                        pipeline,
                        job,
                        step,
                        team,
                    } => {
                        let path = format!(
                            "/api/v1/teams/{}/pipelines/{}/jobs/{}/clear-task-cache",
                            gantry_wire::url::segment(&team),
                            gantry_wire::url::segment(&pipeline),
                            gantry_wire::url::segment(&job)
                        );
                        let answer: serde_json::Value = client
                            .post(&path, &serde_json::json!({ "step": step }))
                            .await?;
                        let n = answer["cleared"].as_u64().unwrap_or(0);
                        let what = if n == 1 { "cache" } else { "caches" };
                        crate::outln!("{n} task {what} cleared");
                        Ok(0)
                    }
                    Command::Teams { json } => teams::teams(&client, json).await.map(|_| 0),
                    Command::SetTeam(args) => {
                        let (users, groups) = args.members();
                        let change = teams::TeamChange {
                            users,
                            groups,
                            role: args.role,
                            remove_users: args.remove_users,
                            remove_groups: args.remove_groups,
                        };
                        teams::set_team(&client, &args.name, change).await.map(|_| 0)
                    }
                    Command::Login {
                        api,
                        team,
                        username,
                        password,
                        provider,
                    } => {
                        let target = target.ok_or_else(|| {
                            anyhow::anyhow!("name the target to save: gantry login -t NAME ...")
                        })?;
                        match username {
                            Some(user) => {
                                people::login(&target, &api, team.as_deref(), &user, password)
                                    .await
                            }
                            None if password.is_some() => Err(anyhow::anyhow!(
                                "-p needs -u: a password is a local user's"
                            )),
                            None => {
                                people::login_with_provider(
                                    &target,
                                    &api,
                                    team.as_deref(),
                                    provider.as_deref(),
                                )
                                .await
                            }
                        }
                        .map(|_| 0)
                    }
                    Command::Logout => {
                        let target = target.ok_or_else(|| {
                            anyhow::anyhow!("name the target to sign out of: gantry logout -t NAME")
                        })?;
                        people::logout(&target).await.map(|_| 0)
                    }
                    Command::Targets { json } => people::list(json).map(|_| 0),
                    Command::Status => people::status(&client).await.map(|_| 0),
                    Command::HashPassword => people::hash_password().map(|_| 0),
                    Command::DestroyTeam { name } => {
                        teams::destroy_team(&client, &name).await.map(|_| 0)
                    }
                    Command::Tokens { json } => teams::tokens(&client, json).await.map(|_| 0),
                    Command::Audit { team, json } => {
                        teams::audit(&client, team.as_deref(), json).await.map(|_| 0)
                    }
                    Command::SetSecret {
                        name,
                        pipeline,
                        team,
                    } => secrets::set_secret(&client, &team, pipeline.as_deref(), &name)
                        .await
                        .map(|_| 0),
                    Command::Secrets { team, json } => {
                        secrets::list(&client, &team, json).await.map(|_| 0)
                    }
                    Command::DestroySecret {
                        name,
                        pipeline,
                        team,
                    } => secrets::destroy(&client, &team, pipeline.as_deref(), &name)
                        .await
                        .map(|_| 0),
                    Command::Token { action } => teams::token(&client, action).await.map(|_| 0),
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
