//! `check`: the digest the followed tag points at, or every tag matching a
//! semver constraint from the given version on, as concourse/
//! registry-image-resource answers.

use super::client::Remote;
use super::source::{Source, Version};

/// Runs `check` for `source` from `from` (none: the first check).
pub async fn check(source: &Source, from: Option<&Version>) -> Result<Vec<Version>, String> {
    match &source.semver_constraint {
        None => {
            let tag = source.followed_tag();
            let digest = with_mirror(source, |remote| {
                let tag = tag.clone();
                async move {
                    remote
                        .client
                        .fetch_manifest_digest(&remote.tagged(&tag), &remote.auth)
                        .await
                        .map_err(|e| remote.explain(&format!("tag {tag:?}"), &e))
                }
            })
            .await?;
            Ok(vec![Version { tag, digest }])
        }
        Some(constraint) => {
            let remote = Remote::new(source, false)?.expect("the source itself");
            let tags = all_tags(&remote).await?;
            let mut matching: Vec<(semver::Version, String)> = tags
                .into_iter()
                .filter_map(|tag| {
                    let bare = match &source.variant {
                        Some(v) => tag.strip_suffix(&format!("-{v}"))?.to_string(),
                        None => tag.clone(),
                    };
                    let version = lenient_semver(&bare)?;
                    let pre_ok = source.pre_releases || version.pre.is_empty();
                    (pre_ok && constraint.matches(&version)).then_some((version, tag))
                })
                .collect();
            matching.sort();
            if let Some(from) = from.and_then(|v| {
                let bare = match &source.variant {
                    Some(var) => v.tag.strip_suffix(&format!("-{var}"))?.to_string(),
                    None => v.tag.clone(),
                };
                lenient_semver(&bare)
            }) {
                matching.retain(|(v, _)| *v >= from);
            }
            let mut versions = Vec::with_capacity(matching.len());
            for (_, tag) in matching {
                let digest = remote
                    .client
                    .fetch_manifest_digest(&remote.tagged(&tag), &remote.auth)
                    .await
                    .map_err(|e| remote.explain(&format!("tag {tag:?}"), &e))?;
                versions.push(Version { tag, digest });
            }
            if versions.is_empty() {
                return Err(format!(
                    "no tag of {} matches semver_constraint {constraint}",
                    source.repository
                ));
            }
            Ok(versions)
        }
    }
}

/// Runs `op` against the mirror first when the source has one for its
/// registry, then against the registry itself.
pub async fn with_mirror<T, F, Fut>(source: &Source, op: F) -> Result<T, String>
where
    F: Fn(std::sync::Arc<Remote>) -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    if let Some(mirror) = Remote::new(source, true)? {
        match op(std::sync::Arc::new(mirror)).await {
            Ok(v) => return Ok(v),
            Err(e) => tracing::warn!("registry mirror failed, using the registry: {e}"),
        }
    }
    let remote = Remote::new(source, false)?.expect("the source itself");
    op(std::sync::Arc::new(remote)).await
}

/// Every tag of the repository, page by page.
async fn all_tags(remote: &Remote) -> Result<Vec<String>, String> {
    let mut tags: Vec<String> = Vec::new();
    let reference = remote.tagged("latest");
    loop {
        let last = tags.last().cloned();
        let page = remote
            .client
            .list_tags(&reference, &remote.auth, Some(1000), last.as_deref())
            .await
            .map_err(|e| remote.explain("listing tags", &e))?;
        let n = page.tags.len();
        tags.extend(page.tags);
        if n < 1000 {
            return Ok(tags);
        }
    }
}

/// A semver version, `1` and `1.2` read as `1.0.0` and `1.2.0` (as
/// Masterminds' semver, which the Concourse resource uses, reads them), and a
/// leading `v` allowed.
pub fn lenient_semver(tag: &str) -> Option<semver::Version> {
    let t = tag.strip_prefix('v').unwrap_or(tag);
    if let Ok(v) = semver::Version::parse(t) {
        return Some(v);
    }
    let (core, rest) = match t.find(['-', '+']) {
        Some(i) => (&t[..i], &t[i..]),
        None => (t, ""),
    };
    let parts: Vec<&str> = core.split('.').collect();
    if parts.is_empty()
        || parts.len() > 3
        || parts
            .iter()
            .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    let mut padded: Vec<&str> = parts.clone();
    while padded.len() < 3 {
        padded.push("0");
    }
    semver::Version::parse(&format!("{}{rest}", padded.join("."))).ok()
}

#[cfg(test)]
mod tests {
    use super::lenient_semver;

    #[test]
    fn tags_read_as_semver_as_concourse_reads_them() {
        assert_eq!(
            lenient_semver("1.2").unwrap(),
            semver::Version::new(1, 2, 0)
        );
        assert_eq!(lenient_semver("v3").unwrap(), semver::Version::new(3, 0, 0));
        assert!(!lenient_semver("1.2.3-rc.1").unwrap().pre.is_empty());
        assert!(lenient_semver("latest").is_none());
        assert!(lenient_semver("1.2.3.4").is_none());
    }
}
