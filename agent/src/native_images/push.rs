//! `out`: pushing an image tarball a task wrote (a `docker save` archive or
//! an OCI layout tar, as concourse/oci-build-task writes) under a tag and
//! its additional tags, as concourse/registry-image-resource does.

use std::path::{Path, PathBuf};

use oci_client::manifest::{
    OciDescriptor, OciImageManifest, IMAGE_CONFIG_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE,
};
use oci_client::RegistryOperation;
use sha2::{Digest, Sha256};

use super::client::Remote;
use super::source::{PutParams, Source, Version};
use crate::error::blocking;
use crate::images::manifest::{open_inside, plan_layers};
use crate::images::{image_limits, magic_encoding};
use gantry_files::tarball;
use gantry_wire::spec::Encoding;

/// Pushes the tarball `params.image` (resolved by `find`) to `source`;
/// answers the version pushed and lines for the log.
pub async fn push(
    source: &Source,
    params: &PutParams,
    find: impl Fn(&str) -> Result<(PathBuf, PathBuf), String>,
    work: &Path,
) -> Result<(Version, Vec<String>), String> {
    let (base, rel) = find_one(&find, &params.image)?;
    let mut tags = vec![match (&params.version, &source.variant) {
        (Some(v), Some(var)) => format!("{v}-{var}"),
        (Some(v), None) => v.clone(),
        (None, _) => source.followed_tag(),
    }];
    if let Some(file) = &params.additional_tags {
        let (b, r) = find(file)?;
        let (bytes, _) = read_blob(&b, &r)
            .await
            .map_err(|e| format!("additional_tags {file:?}: {e}"))?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        tags.extend(text.split_whitespace().map(str::to_string));
    }
    let archive = work.join("archive");
    tokio::fs::create_dir_all(&archive)
        .await
        .map_err(|e| format!("creating {}: {e}", archive.display()))?;
    let (b, r) = (base.clone(), rel.clone());
    let (file, encoding) = blocking("opening the image tarball", move || {
        use std::io::Read;
        let mut head = [0u8; 4];
        let n = open_inside(&b, &r)?.read(&mut head).unwrap_or(0);
        Ok((open_inside(&b, &r)?, magic_encoding(&head[..n])))
    })
    .await
    .map_err(|e| format!("image {:?}: {e}", params.image))?;
    let stream = Box::pin(tokio_util::io::ReaderStream::with_capacity(
        tokio::fs::File::from_std(file),
        64 * 1024,
    ));
    tarball::unpack(stream, encoding, archive.clone(), image_limits())
        .await
        .map_err(|e| format!("image {:?}: {e}", params.image))?;
    let a = archive.clone();
    let plan = blocking("reading the image's manifest", move || plan_layers(&a))
        .await
        .map_err(|e| format!("image {:?}: {e}", params.image))?
        .ok_or_else(|| {
            format!(
                "image {:?} is not an image tarball (no manifest.json, no OCI layout)",
                params.image
            )
        })?;
    let config_path = plan
        .config
        .ok_or_else(|| format!("image {:?} names no config", params.image))?;
    let remote = Remote::new(source, false)?.expect("the source itself");
    let first = remote.tagged(&tags[0]);
    remote
        .client
        .auth(&first, &remote.auth, RegistryOperation::Push)
        .await
        .map_err(|e| remote.explain("pushing", &e))?;
    let mut log = Vec::new();
    let mut layers = Vec::new();
    for layer in &plan.layers {
        let (bytes, encoding) = read_blob(&archive, &layer.path).await?;
        let media_type = match encoding {
            Encoding::Gzip => "application/vnd.oci.image.layer.v1.tar+gzip",
            Encoding::Zstd => "application/vnd.oci.image.layer.v1.tar+zstd",
            Encoding::Raw => "application/vnd.oci.image.layer.v1.tar",
        };
        layers.push(upload(&remote, &first, bytes, media_type, &mut log).await?);
    }
    let (config, _) = read_blob(&archive, &config_path).await?;
    let config = upload(&remote, &first, config, IMAGE_CONFIG_MEDIA_TYPE, &mut log).await?;
    let manifest = OciImageManifest {
        media_type: Some(OCI_IMAGE_MEDIA_TYPE.to_string()),
        config,
        layers,
        ..OciImageManifest::default()
    };
    let body = serde_json::to_vec(&manifest).map_err(|e| format!("the manifest: {e}"))?;
    let digest = format!("sha256:{:x}", Sha256::digest(&body));
    for tag in &tags {
        remote
            .client
            .push_manifest_raw(
                &remote.tagged(tag),
                body.clone(),
                reqwest::header::HeaderValue::from_static(OCI_IMAGE_MEDIA_TYPE),
            )
            .await
            .map_err(|e| remote.explain(&format!("pushing tag {tag:?}"), &e))?;
        log.push(format!("pushed {}:{tag} ({digest})", source.repository));
    }
    Ok((
        Version {
            tag: tags[0].clone(),
            digest,
        },
        log,
    ))
}

/// The one file `pattern` (a glob in its last component) names, as a
/// volume's directory and a path beneath it (opened without following
/// symlinks: the file comes from a task).
fn find_one(
    find: &impl Fn(&str) -> Result<(PathBuf, PathBuf), String>,
    pattern: &str,
) -> Result<(PathBuf, PathBuf), String> {
    let (dir, name) = match pattern.rsplit_once('/') {
        Some((d, n)) => (d, n),
        None => (".", pattern),
    };
    if !name.contains(['*', '?']) {
        return find(pattern);
    }
    let (base, rel) = find(dir)?;
    let listed = base.join(&rel);
    if std::fs::symlink_metadata(&listed).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(format!("image {pattern:?}: {dir:?} is a symlink"));
    }
    let mut hits = Vec::new();
    for entry in std::fs::read_dir(&listed).map_err(|e| format!("image {pattern:?}: {e}"))? {
        let entry = entry.map_err(|e| format!("image {pattern:?}: {e}"))?;
        if let Some(n) = entry.file_name().to_str() {
            if wildcard(name.as_bytes(), n.as_bytes()) {
                hits.push((base.clone(), rel.join(n)));
            }
        }
    }
    match hits.len() {
        1 => Ok(hits.remove(0)),
        0 => Err(format!("image {pattern:?} matches no file")),
        n => Err(format!(
            "image {pattern:?} matches {n} files; it must match one"
        )),
    }
}

/// `*` and `?` matching.
fn wildcard(p: &[u8], s: &[u8]) -> bool {
    match (p.first(), s.first()) {
        (None, None) => true,
        (Some(b'*'), _) => wildcard(&p[1..], s) || (!s.is_empty() && wildcard(p, &s[1..])),
        (Some(b'?'), Some(_)) => wildcard(&p[1..], &s[1..]),
        (Some(a), Some(b)) if a == b => wildcard(&p[1..], &s[1..]),
        _ => false,
    }
}

/// A blob of the extracted archive, whole, with its encoding.
async fn read_blob(archive: &Path, rel: &Path) -> Result<(Vec<u8>, Encoding), String> {
    let (a, r) = (archive.to_path_buf(), rel.to_path_buf());
    blocking("reading an image blob", move || {
        use std::io::Read;
        let mut f = open_inside(&a, &r)?;
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes)
            .map_err(|e| crate::AgentError::io(format!("reading {}", r.display()), e))?;
        let encoding = magic_encoding(&bytes[..bytes.len().min(4)]);
        Ok((bytes, encoding))
    })
    .await
    .map_err(|e| e.to_string())
}

/// Uploads a blob unless the registry has it; its descriptor.
async fn upload(
    remote: &Remote,
    image: &oci_client::Reference,
    bytes: Vec<u8>,
    media_type: &str,
    log: &mut Vec<String>,
) -> Result<OciDescriptor, String> {
    let digest = format!("sha256:{:x}", Sha256::digest(&bytes));
    let size = bytes.len() as i64;
    let exists = remote
        .client
        .blob_exists(image, &digest)
        .await
        .map_err(|e| remote.explain(&format!("blob {digest}"), &e))?;
    if !exists {
        remote
            .client
            .push_blob(image, bytes, &digest)
            .await
            .map_err(|e| remote.explain(&format!("pushing blob {digest}"), &e))?;
        log.push(format!("uploaded {digest} ({size} bytes)"));
    }
    Ok(OciDescriptor {
        media_type: media_type.to_string(),
        digest,
        size,
        ..OciDescriptor::default()
    })
}

#[cfg(test)]
mod tests {
    use super::wildcard;

    #[test]
    fn globs_match_as_a_shell_does_in_one_component() {
        assert!(wildcard(b"*.tar", b"image.tar"));
        assert!(wildcard(b"im?ge.*", b"image.tar"));
        assert!(!wildcard(b"*.tar", b"image.tar.gz"));
    }
}
