//! A container as a pod: the pod spec Gantry sends for a [`ContainerSpec`]
//! (pure functions, tested without a cluster).
//!
//! Layout of every pod: one container `main` whose PID 1 is an idle shell
//! (processes run through exec, as Garden runs them beside its init); an
//! `emptyDir` mounted at [`SCRATCH`] for Gantry's own files (process ids);
//! one `emptyDir` per volume the spec mounts, mounted twice: read-write at
//! the volume's home `SCRATCH/v/<handle>`, where Gantry streams into and out
//! of it, and at the spec's path, read-only when asked.

use std::collections::BTreeMap;

use gantry_wire::spec::{ContainerSpec, ResourceLimits, RootfsSpec};
use k8s_openapi::api::core::v1::{
    Container as PodContainer, EmptyDirVolumeSource, EnvVar, LocalObjectReference, Pod, PodSpec,
    ResourceRequirements, Volume as PodVolume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::config::KubernetesConfig;

/// Where Gantry keeps its own files in a pod.
pub const SCRATCH: &str = "/tmp/.gantry";
/// The pod's one container.
pub const CONTAINER: &str = "main";
/// Label every Gantry pod carries (`app.kubernetes.io/managed-by=gantry`).
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Label naming the worker (cluster) a pod belongs to.
pub const WORKER_LABEL: &str = "gantry.dev/worker";
/// Label holding the container's handle.
pub const HANDLE_LABEL: &str = "gantry.dev/handle";
/// Annotation listing the handles of the volumes that live in the pod
/// (those it mounts read-write; see `worker.rs`).
pub const VOLUMES_ANNOTATION: &str = "gantry.dev/volumes";
/// PID 1 of every pod: idle until told to stop.
const IDLE: &str = "trap 'exit 0' TERM INT; while true; do sleep 3600 & wait $!; done";

/// The pod of container `handle`.
pub fn pod_name(handle: &str) -> String {
    let clean: String = handle
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let mut name = format!("gantry-{clean}");
    name.truncate(253);
    name.trim_end_matches('-').to_string()
}

/// Where volume `handle` is read and written in a pod that mounts it.
pub fn volume_home(handle: &str) -> String {
    format!("{SCRATCH}/v/{handle}")
}

/// `value` made a valid label value: at most 63 characters of `[A-Za-z0-9-_.]`,
/// starting and ending with an alphanumeric.
pub fn label_value(value: &str) -> String {
    let mapped: String = value
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut v = mapped.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if v.len() > 63 {
        v = v[..63].trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    }
    v.to_string()
}

/// The image of a container, or why the cluster cannot run it.
pub fn image_of(spec: &ContainerSpec, cfg: &KubernetesConfig) -> Result<String, String> {
    if let Some(kind) = &spec.resource_type {
        return cfg.resource_types.get(kind).cloned().ok_or_else(|| {
            format!(
                "kubernetes worker {} has no image for resource type {kind} (set web.kubernetes.resource_types)",
                cfg.name
            )
        });
    }
    match &spec.rootfs {
        RootfsSpec::Default => Ok(cfg.default_image.clone()),
        RootfsSpec::Image { reference } => Ok(reference.clone()),
        RootfsSpec::Raw { path } => Err(format!(
            "kubernetes worker {}: rootfs raw://{path} is a directory on a host; a pod's image comes from a registry",
            cfg.name
        )),
        RootfsSpec::Volume { .. } => Err(format!(
            "kubernetes worker {}: an uploaded or fetched image cannot be a pod's image; a pod's image comes from a registry (the worker's default_image)",
            cfg.name
        )),
    }
}

/// `requests` and `limits` of a container: memory as both (a hard cap, as
/// the cgroup limit of the runc backend), CPU shares as the CPU request
/// (shares are a weight, as a request is: 1024 shares = 1 CPU).
fn resources(limits: &ResourceLimits) -> Result<Option<ResourceRequirements>, String> {
    if let Some(pids) = limits.pids {
        return Err(format!(
            "container_limits.pids {pids}: a pod cannot limit its own processes (the kubelet's podPidsLimit does, for every pod of a node)"
        ));
    }
    let mut requests = BTreeMap::new();
    let mut caps = BTreeMap::new();
    if let Some(memory) = limits.memory {
        requests.insert("memory".to_string(), Quantity(memory.to_string()));
        caps.insert("memory".to_string(), Quantity(memory.to_string()));
    }
    if let Some(shares) = limits.cpu {
        let millis = (shares.saturating_mul(1000) / 1024).max(1);
        requests.insert("cpu".to_string(), Quantity(format!("{millis}m")));
    }
    if requests.is_empty() {
        return Ok(None);
    }
    Ok(Some(ResourceRequirements {
        requests: Some(requests),
        limits: (!caps.is_empty()).then_some(caps),
        ..Default::default()
    }))
}

/// The pod for `spec` on the cluster worker `cfg`, and the handles of the
/// volumes it mounts (in mount order, without repeats).
pub fn pod_for(spec: &ContainerSpec, cfg: &KubernetesConfig) -> Result<(Pod, Vec<String>), String> {
    if spec.hermetic {
        return Err(format!(
            "kubernetes worker {}: a pod cannot be limited to loopback networking (hermetic); a NetworkPolicy would, for the whole namespace",
            cfg.name
        ));
    }
    if spec.privileged {
        return Err(format!(
            "kubernetes worker {}: privileged containers are not run by the kubernetes runtime yet",
            cfg.name
        ));
    }
    let image = image_of(spec, cfg)?;
    let mut volumes = vec![PodVolume {
        name: "gantry".into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }];
    let mut mounts = vec![VolumeMount {
        name: "gantry".into(),
        mount_path: SCRATCH.into(),
        ..Default::default()
    }];
    let mut handles: Vec<String> = Vec::new();
    for m in &spec.mounts {
        if !m.path.starts_with('/') {
            return Err(format!("mount path {:?} is not absolute", m.path));
        }
        let index = match handles.iter().position(|h| h == &m.volume) {
            Some(i) => i,
            None => {
                handles.push(m.volume.clone());
                let i = handles.len() - 1;
                volumes.push(PodVolume {
                    name: format!("v{i}"),
                    empty_dir: Some(EmptyDirVolumeSource::default()),
                    ..Default::default()
                });
                mounts.push(VolumeMount {
                    name: format!("v{i}"),
                    mount_path: volume_home(&m.volume),
                    ..Default::default()
                });
                i
            }
        };
        mounts.push(VolumeMount {
            name: format!("v{index}"),
            mount_path: m.path.trim_end_matches('/').to_string(),
            read_only: m.readonly.then_some(true),
            ..Default::default()
        });
    }
    let env: Vec<EnvVar> = spec
        .env
        .iter()
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            EnvVar {
                name: k.to_string(),
                value: Some(v.to_string()),
                ..Default::default()
            }
        })
        .collect();
    let mut labels = BTreeMap::from([
        (MANAGED_BY.to_string(), "gantry".to_string()),
        (WORKER_LABEL.to_string(), label_value(&cfg.name)),
        (HANDLE_LABEL.to_string(), label_value(&spec.handle)),
    ]);
    for key in ["build", "step", "team"] {
        if let Some(v) = spec.properties.get(key) {
            let v = label_value(v);
            if !v.is_empty() {
                labels.insert(format!("gantry.dev/{key}"), v);
            }
        }
    }
    // The volumes that will live in this pod: those it mounts read-write.
    let homed: Vec<&String> = handles
        .iter()
        .filter(|h| spec.mounts.iter().any(|m| &m.volume == *h && !m.readonly))
        .collect();
    let annotations = BTreeMap::from([
        (
            VOLUMES_ANNOTATION.to_string(),
            serde_json::to_string(&homed).unwrap_or_default(),
        ),
        (
            "gantry.dev/properties".to_string(),
            serde_json::to_string(&spec.properties).unwrap_or_default(),
        ),
    ]);
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(&spec.handle)),
            namespace: Some(cfg.namespace.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![PodContainer {
                name: CONTAINER.into(),
                image: Some(image),
                command: Some(vec!["/bin/sh".into(), "-c".into(), IDLE.into()]),
                env: (!env.is_empty()).then_some(env),
                resources: resources(&spec.limits)?,
                volume_mounts: Some(mounts),
                ..Default::default()
            }],
            volumes: Some(volumes),
            restart_policy: Some("Never".into()),
            automount_service_account_token: Some(false),
            termination_grace_period_seconds: Some(5),
            service_account_name: cfg.service_account.clone(),
            image_pull_secrets: (!cfg.image_pull_secrets.is_empty()).then(|| {
                cfg.image_pull_secrets
                    .iter()
                    .map(|n| LocalObjectReference { name: n.clone() })
                    .collect()
            }),
            ..Default::default()
        }),
        status: None,
    };
    Ok((pod, handles))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::is_dns_label;
    use gantry_wire::spec::MountSpec;

    fn cfg() -> KubernetesConfig {
        toml::from_str(
            "name = \"k8s\"\nnamespace = \"ci\"\ndefault_image = \"busybox:1.36\"\n[resource_types]\ngit = \"concourse/git-resource\"\n",
        )
        .unwrap()
    }

    fn spec() -> ContainerSpec {
        ContainerSpec {
            handle: "c1".into(),
            rootfs: RootfsSpec::Default,
            mounts: vec![
                MountSpec {
                    volume: "in".into(),
                    path: "/tmp/build/x/in".into(),
                    readonly: true,
                },
                MountSpec {
                    volume: "out".into(),
                    path: "/tmp/build/x/out/".into(),
                    readonly: false,
                },
            ],
            env: vec!["A=1".into(), "B=x=y".into()],
            limits: ResourceLimits {
                memory: Some(64 << 20),
                cpu: Some(512),
                pids: None,
            },
            hermetic: false,
            properties: BTreeMap::from([
                ("build".into(), "42".into()),
                ("step".into(), "unit tests/1".into()),
                ("team".into(), "main".into()),
            ]),
            resource_type: None,
            privileged: false,
        }
    }

    #[test]
    fn a_task_pod_has_its_image_mounts_limits_and_labels() {
        let (pod, handles) = pod_for(&spec(), &cfg()).unwrap();
        assert_eq!(handles, ["in", "out"]);
        let v = serde_json::to_value(&pod).unwrap();
        assert_eq!(v["metadata"]["name"], "gantry-c1");
        assert_eq!(v["metadata"]["labels"]["gantry.dev/build"], "42");
        assert_eq!(v["metadata"]["labels"]["gantry.dev/step"], "unit_tests_1");
        assert_eq!(v["metadata"]["labels"]["gantry.dev/team"], "main");
        assert_eq!(v["metadata"]["labels"]["gantry.dev/worker"], "k8s");
        let c = &v["spec"]["containers"][0];
        assert_eq!(c["image"], "busybox:1.36");
        assert_eq!(
            c["env"][1],
            serde_json::json!({"name": "B", "value": "x=y"})
        );
        assert_eq!(c["resources"]["limits"]["memory"], "67108864");
        assert_eq!(c["resources"]["requests"]["cpu"], "500m");
        let mounts: Vec<(String, String, bool)> = c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["name"].as_str().unwrap().to_string(),
                    m["mountPath"].as_str().unwrap().to_string(),
                    m["readOnly"].as_bool().unwrap_or(false),
                )
            })
            .collect();
        assert_eq!(
            mounts,
            [
                ("gantry".into(), "/tmp/.gantry".into(), false),
                ("v0".into(), "/tmp/.gantry/v/in".into(), false),
                ("v0".into(), "/tmp/build/x/in".into(), true),
                ("v1".into(), "/tmp/.gantry/v/out".into(), false),
                ("v1".into(), "/tmp/build/x/out".into(), false),
            ]
        );
        assert_eq!(v["spec"]["restartPolicy"], "Never");
        // Only the read-write volume will live in the pod.
        assert_eq!(
            v["metadata"]["annotations"]["gantry.dev/volumes"],
            "[\"out\"]"
        );
    }

    #[test]
    fn what_a_pod_cannot_do_is_refused_by_name() {
        let mut s = spec();
        s.limits.pids = Some(10);
        assert!(pod_for(&s, &cfg()).unwrap_err().contains("pids"));
        let mut s = spec();
        s.hermetic = true;
        assert!(pod_for(&s, &cfg()).unwrap_err().contains("hermetic"));
        let mut s = spec();
        s.privileged = true;
        assert!(pod_for(&s, &cfg()).unwrap_err().contains("privileged"));
        let mut s = spec();
        s.rootfs = RootfsSpec::Raw {
            path: "/srv".into(),
        };
        assert!(pod_for(&s, &cfg()).unwrap_err().contains("raw:///srv"));
        let mut s = spec();
        s.resource_type = Some("time".into());
        assert!(pod_for(&s, &cfg())
            .unwrap_err()
            .contains("resource type time"));
        s.resource_type = Some("git".into());
        let (pod, _) = pod_for(&s, &cfg()).unwrap();
        assert_eq!(
            pod.spec.unwrap().containers[0].image.as_deref(),
            Some("concourse/git-resource")
        );
    }

    #[test]
    fn names_and_labels_are_valid_for_kubernetes() {
        assert_eq!(pod_name("AB_c"), "gantry-ab-c");
        assert_eq!(label_value("-x y-"), "x_y");
        assert_eq!(label_value(&"a".repeat(80)).len(), 63);
        assert!(is_dns_label("ci-1"));
        assert!(!is_dns_label("Ci"));
    }
}
