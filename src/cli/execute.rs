//! `gantry execute`: run a one-off task with local inputs and outputs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context as _};
use futures::StreamExt;
use gantry_actors::api::TaskConfig;
use gantry_wire::spec::Encoding;
use serde::Deserialize;

use crate::cli::client::ApiClient;
use crate::cli::follow::{follow, StepLines};
use crate::cli::progress::Transfers;
use gantry_files::tarball::{self, UnpackLimits};

/// What `execute` was asked to do.
pub struct ExecuteArgs {
    /// Path of task.yml.
    pub config: PathBuf,
    /// `name=dir` for each input.
    pub inputs: Vec<String>,
    /// `name=dir` for each output.
    pub outputs: Vec<String>,
    /// Worker tags required.
    pub tags: Vec<String>,
    /// Platform override.
    pub platform: Option<String>,
    /// Team.
    pub team: String,
    /// An image to run the task in: a rootfs tar or an OCI image layout tar.
    pub image: Option<PathBuf>,
    /// The step's timeout in seconds.
    pub timeout: Option<u64>,
}

fn pairs(kind: &str, given: &[String]) -> anyhow::Result<BTreeMap<String, PathBuf>> {
    let mut out = BTreeMap::new();
    for g in given {
        let (name, dir) = g
            .split_once('=')
            .ok_or_else(|| anyhow!("{kind} {g:?}: expected NAME=DIR"))?;
        if out.insert(name.to_string(), PathBuf::from(dir)).is_some() {
            bail!("{kind} {name:?} given twice");
        }
    }
    Ok(out)
}

/// Directories by input or output name.
type Dirs = BTreeMap<String, PathBuf>;

/// Checks everything that can be checked locally, before anything is created.
fn plan(args: &ExecuteArgs) -> anyhow::Result<(TaskConfig, Dirs, Dirs)> {
    let text = super::read_bounded::read_document(&args.config, "task config")?;
    let mut config = TaskConfig::from_yaml(&text)
        .map_err(|p| anyhow!("{}: {}", args.config.display(), p.join("; ")))?;
    if let Some(p) = &args.platform {
        config.platform = p.clone();
    }
    if let Some(image) = &args.image {
        if !image.is_file() {
            bail!(
                "image {} is not a file (give a rootfs tar or an OCI image layout tar)",
                image.display()
            );
        }
    }
    let inputs = pairs("input", &args.inputs)?;
    let outputs = pairs("output", &args.outputs)?;
    for (name, dir) in &inputs {
        if !config.inputs.iter().any(|i| &i.name == name) {
            let known: Vec<_> = config.inputs.iter().map(|i| i.name.as_str()).collect();
            bail!(
                "the task has no input named {name:?} (its inputs: {})",
                known.join(", ")
            );
        }
        if !dir.is_dir() {
            bail!("input {name:?}: directory {} does not exist", dir.display());
        }
    }
    for input in &config.inputs {
        if !input.optional && !inputs.contains_key(&input.name) {
            bail!(
                "task input {:?} was not given: pass -i {}=DIR",
                input.name,
                input.name
            );
        }
    }
    for name in outputs.keys() {
        if !config.outputs.iter().any(|o| &o.name == name) {
            let known: Vec<_> = config.outputs.iter().map(|o| o.name.as_str()).collect();
            bail!(
                "the task has no output named {name:?} (its outputs: {})",
                known.join(", ")
            );
        }
    }
    Ok((config, inputs, outputs))
}

#[derive(Deserialize)]
struct Created {
    id: serde_json::Value,
}

/// Uploads an input directory, packed as a zstd tar stream (its progress in
/// bytes sent: the packed size is not known beforehand).
async fn upload(
    client: &ApiClient,
    transfers: &Transfers,
    team: &str,
    name: &str,
    dir: &Path,
) -> anyhow::Result<String> {
    let packed = tarball::pack_dir(dir.to_path_buf(), Encoding::Zstd);
    let body = transfers.track(format!("input {name}"), None, packed);
    upload_stream(client, team, name, Box::pin(body), "files").await
}

/// Uploads an image tar file as an `image` artifact (its progress in bytes
/// of the file read).
async fn upload_image(
    client: &ApiClient,
    transfers: &Transfers,
    team: &str,
    file: &Path,
) -> anyhow::Result<String> {
    let f = tokio::fs::File::open(file)
        .await
        .with_context(|| format!("cannot open image {}", file.display()))?;
    let size = f.metadata().await.ok().map(|m| m.len());
    let plain: gantry_wire::runtime::ByteStream =
        Box::pin(tokio_util::io::ReaderStream::with_capacity(f, 256 * 1024));
    let plain = Box::pin(transfers.track("image", size, plain));
    upload_stream(
        client,
        team,
        "image",
        tarball::encode(plain, Encoding::Zstd),
        "image",
    )
    .await
}

async fn upload_stream(
    client: &ApiClient,
    team: &str,
    name: &str,
    body: gantry_wire::runtime::ByteStream,
    kind: &str,
) -> anyhow::Result<String> {
    let resp = client
        .http()
        .post(client.url(&format!("/api/v1/teams/{team}/artifacts?kind={kind}")))
        .header("content-encoding", "zstd")
        .header("content-type", "application/x-tar")
        .body(reqwest::Body::wrap_stream(body))
        .send()
        .await
        .map_err(|e| {
            if e.is_connect() {
                client.unreachable(e)
            } else {
                anyhow!("uploading input {name:?}: {e}")
            }
        })?;
    let created: Created = client
        .check(resp)
        .await
        .with_context(|| format!("uploading input {name:?}"))?
        .json()
        .await?;
    Ok(created.id.as_str().unwrap_or_default().to_string())
}

/// Downloads output `name` (artifact `id`) into `dir`.
async fn download(
    client: &ApiClient,
    transfers: &Transfers,
    team: &str,
    name: &str,
    id: &str,
    dir: &Path,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let resp = client
        .http()
        .get(client.url(&format!("/api/v1/teams/{team}/artifacts/{id}")))
        .header("accept-encoding", "zstd")
        .send()
        .await
        .map_err(|e| client.unreachable(e))?;
    let resp = client.check(resp).await?;
    let size = resp.content_length();
    let encoding = match resp.headers().get("content-encoding") {
        None => Encoding::Raw,
        Some(v) => v
            .to_str()
            .ok()
            .and_then(Encoding::parse)
            .ok_or_else(|| anyhow!("the server sent an unknown Content-Encoding {v:?}"))?,
    };
    let body = Box::pin(
        resp.bytes_stream()
            .map(|r| r.map_err(std::io::Error::other)),
    );
    let body = transfers.track(format!("output {name}"), size, body);
    tarball::unpack(
        Box::pin(body),
        encoding,
        dir.to_path_buf(),
        UnpackLimits::default(),
    )
    .await?;
    Ok(())
}

/// Runs `execute`; returns the process exit code.
pub async fn execute(client: &ApiClient, args: ExecuteArgs) -> anyhow::Result<i32> {
    let (config, inputs, outputs) = plan(&args)?;
    client.get::<serde_json::Value>("/api/v1/info").await?;
    let team = &args.team;
    let transfers = &Transfers::stderr();
    let uploads = inputs.iter().map(|(name, dir)| async move {
        upload(client, transfers, team, name, dir)
            .await
            .map(|id| (name.clone(), id))
    });
    let image = match &args.image {
        Some(file) => Some(upload_image(client, transfers, team, file).await?),
        None => None,
    };
    let artifact_ids: BTreeMap<String, String> = futures::future::try_join_all(uploads)
        .await?
        .into_iter()
        .collect();
    let created: Created = client
        .post(
            &format!("/api/v1/teams/{team}/builds"),
            &serde_json::json!({
                "config": config,
                "inputs": artifact_ids,
                "tags": args.tags,
                "image": image,
                "timeout_secs": args.timeout,
            }),
        )
        .await?;
    let build_id = created.id.as_i64().unwrap_or_default();
    eprintln!("executing build {build_id}");
    let ended = follow(client, build_id, StepLines::Quiet).await?;
    for (name, dir) in &outputs {
        if let Some(id) = ended.produced.get(name) {
            download(client, transfers, team, name, id, dir)
                .await
                .with_context(|| format!("downloading output {name:?}"))?;
        }
    }
    ended.exit_code(build_id)
}
