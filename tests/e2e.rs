//! Gantry's end-to-end tests, in one test binary.
//!
//! Each module is one area (a file beside this one) driving the real
//! `gantry` binary against a real database, real containers and real worker
//! processes. They share one binary so the support code in `common/` and
//! the dependency tree are compiled and linked once, not once per area;
//! `scripts/run_tests.py` still runs each module in a process of its own
//! (`e2e --exact NAME...`), so per-process state stays per area as it was.
//!
//! Run one area with `cargo test --features gantry/bench --test e2e fleet::`.

// The benchmarks' areas run `gantry bench`, built only with the `bench`
// feature; so do the browser tests' areas, whose DevTools driver is
// `gantry::bench::cdp` (shared with `gantry bench ui`).

mod common;
#[path = "kube_mock/mod.rs"]
mod kube_mock;
#[path = "vault_mock/mod.rs"]
mod vault_mock;

mod abort;
mod agent_isolation;
mod artifacts_s3;
mod auth;
mod background_jobs;
#[cfg(feature = "bench")]
mod bench_builds;
#[cfg(feature = "bench")]
mod bench_container_start;
#[cfg(feature = "bench")]
mod bench_deep_yaml;
#[cfg(feature = "bench")]
mod bench_follow;
#[cfg(feature = "bench")]
mod bench_gc;
mod bench_image_pull;
#[cfg(feature = "bench")]
mod bench_logs;
#[cfg(feature = "bench")]
mod bench_placement;
#[cfg(feature = "bench")]
mod bench_s3;
#[cfg(feature = "bench")]
mod bench_scheduling;
#[cfg(feature = "bench")]
mod bench_secrets;
#[cfg(feature = "bench")]
mod bench_sign_ins;
#[cfg(feature = "bench")]
mod bench_stream;
#[cfg(feature = "bench")]
mod bench_ui;
mod build_log_text;
mod build_logs;
mod cli;
mod cluster;
mod concourse_api;
mod concourse_artifacts;
mod concourse_builds;
mod concourse_containers;
mod concourse_events;
mod concourse_fleet;
mod concourse_signin;
mod concourse_verbs;
mod concoursepy;
mod custom_types;
#[cfg(feature = "bench")]
mod dashboard_a11y;
#[cfg(feature = "bench")]
mod dashboard_actions;
#[cfg(feature = "bench")]
mod dashboard_browser;
mod dashboard_feeds;
#[cfg(feature = "bench")]
mod dashboard_pages;
#[cfg(feature = "bench")]
mod dashboard_signin;
mod fleet;
mod gc_collect;
mod gc_pressure;
mod gc_soak;
mod gc_sweep;
mod github_sign_in;
mod hardening;
mod hijack;
mod images;
mod job_turns;
mod k8s_builds;
mod k8s_runtime;
mod limits;
mod metrics;
#[cfg(feature = "bench")]
mod oidc;
mod openapi;
mod p2p_security;
mod paging;
mod people;
mod pipeline_controls;
mod pipeline_lifecycle;
mod pipelines;
mod privileged;
mod public_pipelines;
mod quickstart_execute;
mod readyz_postgres;
mod registry_images;
mod resource_scripts;
mod resources;
mod resume_plans;
mod roles;
mod rolling_upgrade;
mod run_job;
mod run_job_vars;
mod secrets;
mod secrets_aws;
mod secrets_kubernetes;
mod secrets_vault;
mod sign_in_load;
mod streaming;
mod strict_input;
mod tar_safety;
mod task_caches;
mod task_start_errors;
mod teams;
mod testflight;
mod traces;
mod validate_plan;
mod validate_task;
mod web_nodes;
mod web_nodes_s3;
mod web_nodes_sessions;
mod web_nodes_start;
mod web_restart;
mod worker_restart;
