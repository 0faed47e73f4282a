//! The put step: runs the resource type's `out` with the build's artifacts
//! it sees mounted under its directory, stores the version `out` made (in
//! its resource's history for a job build of a stored pipeline, else the
//! team's one-off history; a known version keeps its place), then
//! (unless `no_get`) fetches that version as the artifact of the step's
//! name: Concourse's implicit get, with `get_params`.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::db::Direction;
use crate::error::EngineError;
use crate::plan::{PutInputs, PutStep};
use crate::resources::{scope, ResourceStats};
use crate::steps::resource_fetch::{self as fetch, Halt, Resource, RESOURCE_DIR};
use crate::steps::resource_script::{
    fetch_answer, reattach_script, run_script, Reattached, Script, ScriptEnd, TypeImage,
};
use crate::steps::resource_step::{produce, resource_step};
use crate::steps::{Reattach, StepContext, StepEnd};
use gantry_wire::spec::MountSpec;

// Taken over, a put is followed where it was, never pushed twice.
resource_step!(PutStep, put, "put", is_check: false, containers: 2,
    on_takeover: |_: &PutStep| crate::steps::OnTakeover::Reattach, reattach: take_over);

impl PutStep {
    async fn put(&self, ctx: &mut StepContext) -> Result<StepEnd, Halt> {
        let image = fetch::type_image(ctx, &self.config.type_).await?;
        let inputs = self.chosen_inputs(&ctx.named_artifacts().all())?;
        // The inputs stream in parallel.
        let volumes = ctx
            .input_volumes(
                inputs.iter().map(|(name, artifact)| {
                    (format!("input:{name}"), name.clone(), artifact.clone())
                }),
            )
            .await?;
        let mounts: Vec<MountSpec> = inputs
            .iter()
            .zip(volumes)
            .map(|((name, _), (_, volume))| MountSpec {
                volume: volume.handle().to_string(),
                path: format!("{RESOURCE_DIR}/{name}"),
                readonly: false,
            })
            .collect();
        ResourceStats::count(&ctx.resource_stats().puts);
        // Concourse's `expose_build_created_by`: who triggered the build by
        // hand (read now: it is recorded just after the build is made).
        let mut env = vec![];
        if self.expose_created_by {
            let build = ctx.db().builds().get_build(ctx.build()).await?;
            if let Some(who) = build.and_then(|b| b.created_by) {
                env.push(format!("BUILD_CREATED_BY={}", created_by_name(&who)));
            }
        }
        let end = run_script(
            ctx,
            &image,
            Script {
                name: "out",
                dir: Some(RESOURCE_DIR),
                request: json!({"source": self.config.source, "params": self.params}),
                mounts,
                env,
            },
        )
        .await?;
        self.after_out(ctx, &image, end).await
    }

    /// Takes the put over where it was when its build was taken over by
    /// another web node (or this one, restarted), so nothing is pushed
    /// twice: once `out`'s version was told, only the implicit get is left;
    /// an `out` that began is followed to its answer (its output the worker
    /// kept); an `out` that never started runs now; when that cannot be
    /// known (a container of the step is gone), the step errors saying so.
    async fn take_over(&self, ctx: &mut StepContext, at: Reattach) -> Result<StepEnd, Halt> {
        let image = fetch::type_image(ctx, &self.config.type_).await?;
        if let Some((_, version)) = at.told.iter().find(|(action, _)| action == "put") {
            return self.implicit_get(ctx, &image, version).await;
        }
        match reattach_script(ctx, &at.containers, "out", at.already_stored[1]).await? {
            Reattached::Ended(end) => self.after_out(ctx, &image, end).await,
            Reattached::NeverStarted => self.put(ctx).await,
        }
    }

    /// What follows `out`: the version it made stored and told, then the
    /// implicit get.
    async fn after_out(
        &self,
        ctx: &mut StepContext,
        image: &TypeImage,
        end: ScriptEnd,
    ) -> Result<StepEnd, Halt> {
        let answer = match end {
            ScriptEnd::Answered(v) => v,
            ScriptEnd::Failed(status) => return Ok(StepEnd::Exited(status)),
            ScriptEnd::Stopped => return Ok(StepEnd::Stopped),
        };
        let (version, metadata) = fetch_answer("out", &answer)?;
        // A job build of a stored pipeline saves it in the resource's own
        // history (where scheduling and `passed` read); others in the
        // team's one-off history.
        let key = self.config.key();
        let scope = match ctx.job() {
            Some(_) => {
                ctx.db()
                    .versions()
                    .output_scope(ctx.build(), &self.resource, &key)
                    .await?
            }
            None => None,
        }
        .unwrap_or_else(|| scope::one_off(ctx.team()));
        ctx.db()
            .versions()
            .save_output_version(&scope, &key, &version, &metadata)
            .await?;
        let worker = ctx.worker().name().to_string();
        fetch::tell(
            ctx,
            &self.resource,
            "put",
            &version,
            &metadata,
            false,
            Some(&worker),
        )
        .await?;
        if ctx.job().is_some() {
            ctx.db()
                .versions()
                .record_build_version(
                    ctx.build(),
                    Direction::Out,
                    &self.name,
                    &self.resource,
                    &version,
                )
                .await?;
        }
        self.implicit_get(ctx, image, &version).await
    }

    /// Fetches the version `out` made as the artifact of the step's name
    /// (Concourse's implicit get), unless `no_get`.
    async fn implicit_get(
        &self,
        ctx: &mut StepContext,
        image: &TypeImage,
        version: &Value,
    ) -> Result<StepEnd, Halt> {
        if self.no_get {
            return Ok(StepEnd::Exited(0));
        }
        let r = Resource {
            name: &self.resource,
            config: &self.config,
            image,
            check_timeout: None,
        };
        let fetched = fetch::get(ctx, &r, version, &self.get_params).await?;
        produce(ctx, &self.name, &fetched.artifact_id).await?;
        Ok(StepEnd::Exited(0))
    }

    /// The artifacts `out` sees, by name: all, the detected ones, or the
    /// listed ones (one the build does not have is an error naming it).
    fn chosen_inputs(
        &self,
        all: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>, EngineError> {
        match &self.inputs {
            PutInputs::All => Ok(all.clone()),
            PutInputs::Detect => {
                let mut names = Vec::new();
                detect(&self.params, &mut names);
                Ok(all
                    .iter()
                    .filter(|(name, _)| names.iter().any(|n| n == *name))
                    .map(|(n, a)| (n.clone(), a.clone()))
                    .collect())
            }
            PutInputs::Listed(names) => names
                .iter()
                .map(|name| match all.get(name) {
                    Some(a) => Ok((name.clone(), a.clone())),
                    None => Err(EngineError::Invalid(format!(
                        "step {:?}: input {name:?} was not given: no earlier step of the build produced it",
                        self.name
                    ))),
                })
                .collect(),
        }
    }
}

/// The first path segment of every string in `params`, as Concourse's
/// `inputs: detect` finds the artifacts a put uses.
fn detect(params: &Value, names: &mut Vec<String>) {
    match params {
        Value::String(s) => {
            let first = s.trim_start_matches("./").split('/').next().unwrap_or("");
            if !first.is_empty() {
                names.push(first.to_string());
            }
        }
        Value::Array(list) => list.iter().for_each(|v| detect(v, names)),
        Value::Object(m) => m.values().for_each(|v| detect(v, names)),
        _ => {}
    }
}

/// What `BUILD_CREATED_BY` says of who made a build: a signed-in person's
/// name, as Concourse gives it (`alice`, not the audit's `user:alice`);
/// another caller (the admin token, a team token) as the audit names it.
fn created_by_name(recorded: &str) -> &str {
    recorded.strip_prefix("user:").unwrap_or(recorded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::ResourceConfig;

    fn put(inputs: PutInputs, params: Value) -> PutStep {
        PutStep {
            name: "p".into(),
            resource: "r".into(),
            config: ResourceConfig::base("git", json!({})),
            params,
            inputs,
            get_params: json!({}),
            no_get: false,
            tags: vec![],
            expose_created_by: false,
        }
    }

    #[test]
    fn build_created_by_names_a_person_as_concourse_does() {
        assert_eq!(created_by_name("user:alice"), "alice");
        assert_eq!(created_by_name("user:oidc:bob"), "oidc:bob");
        assert_eq!(created_by_name("admin"), "admin");
        assert_eq!(created_by_name("token:ab12"), "token:ab12");
    }

    #[test]
    fn inputs_are_all_detected_or_listed() {
        let all: BTreeMap<String, String> = [("repo", "a1"), ("out", "a2"), ("other", "a3")]
            .iter()
            .map(|(n, a)| (n.to_string(), a.to_string()))
            .collect();
        assert_eq!(
            put(PutInputs::All, json!({}))
                .chosen_inputs(&all)
                .unwrap()
                .len(),
            3
        );
        let detected = put(
            PutInputs::Detect,
            json!({"repository": "out", "files": ["./repo/x", "nothing/y"], "n": 3}),
        )
        .chosen_inputs(&all)
        .unwrap();
        assert_eq!(detected.keys().collect::<Vec<_>>(), ["out", "repo"]);
        let listed = put(PutInputs::Listed(vec!["other".into()]), json!({}));
        assert_eq!(listed.chosen_inputs(&all).unwrap()["other"], "a3");
        let missing = put(PutInputs::Listed(vec!["nope".into()]), json!({}));
        assert!(missing
            .chosen_inputs(&all)
            .unwrap_err()
            .to_string()
            .contains("\"nope\""));
    }
}
