//! Where the web node keeps artifacts: a directory (`web.artifacts_dir`,
//! default `DATA_DIR/artifacts`) or S3-compatible object storage
//! (`web.artifacts = "s3://BUCKET/PREFIX"` with `[web.s3]`), checked into
//! one [`ArtifactLocation`] with a one-line error for every bad setting.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The object storage of `web.artifacts = "s3://..."` (`[web.s3]`). Every
/// field left unset is taken from the environment as the AWS tools read
/// it (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_ALLOW_HTTP`), then
/// from AWS's defaults (the instance's or container's credentials).
#[derive(Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct S3Config {
    /// The S3 API's URL, for a store other than AWS (MinIO, Garage, Ceph,
    /// R2: `https://s3.example.net:9000`). Plain `http://` is accepted for
    /// a loopback address, elsewhere only with `allow_http`. Default:
    /// AWS's endpoint of the region.
    pub endpoint: Option<String>,
    /// The bucket's region. Default `us-east-1`.
    pub region: Option<String>,
    /// Access key id of the credentials.
    pub access_key_id: Option<String>,
    /// Secret access key of the credentials.
    pub secret_access_key: Option<String>,
    /// Session token of temporary credentials.
    pub session_token: Option<String>,
    /// Allow a plain `http://` endpoint that is not on loopback (traffic
    /// and credentials' signatures unencrypted). Default false.
    pub allow_http: bool,
}

impl std::fmt::Debug for S3Config {
    /// The secrets are not shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |v: &Option<String>| v.as_ref().map(|_| "<hidden>");
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &hidden(&self.secret_access_key))
            .field("session_token", &hidden(&self.session_token))
            .field("allow_http", &self.allow_http)
            .finish()
    }
}

/// Where artifacts are kept, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArtifactLocation {
    /// A directory (shared by the web nodes through a network file system).
    Dir(PathBuf),
    /// A bucket of S3-compatible object storage.
    S3 {
        /// The bucket's name.
        bucket: String,
        /// The key prefix every object of the store is under (no leading
        /// or trailing `/`; empty for the bucket's top).
        prefix: String,
        /// Its endpoint, region and credentials.
        config: S3Config,
    },
}

impl ArtifactLocation {
    /// Checks `artifacts` (an `s3://` URL), `artifacts_dir` and `s3`
    /// together: at most one of the first two, `[web.s3]` only with an
    /// `s3://` URL; with neither, the directory `DATA_DIR/artifacts`.
    pub fn resolve(
        artifacts: Option<&str>,
        artifacts_dir: Option<&PathBuf>,
        s3: &S3Config,
        data_dir: &std::path::Path,
    ) -> anyhow::Result<ArtifactLocation> {
        let Some(url) = artifacts else {
            anyhow::ensure!(
                *s3 == S3Config::default(),
                "[web.s3] is set but web.artifacts is not: set web.artifacts = \"s3://BUCKET/PREFIX\" to keep artifacts in object storage, or remove [web.s3]"
            );
            return Ok(ArtifactLocation::Dir(
                artifacts_dir
                    .cloned()
                    .unwrap_or_else(|| data_dir.join("artifacts")),
            ));
        };
        anyhow::ensure!(
            artifacts_dir.is_none(),
            "both web.artifacts and web.artifacts_dir are set: keep one (the object storage URL or the directory)"
        );
        let (bucket, prefix) = parse_s3_url(url)?;
        Ok(ArtifactLocation::S3 {
            bucket,
            prefix,
            config: s3.clone(),
        })
    }
}

/// Splits `s3://BUCKET/PREFIX` into its bucket and prefix.
pub fn parse_s3_url(url: &str) -> anyhow::Result<(String, String)> {
    let Some(rest) = url.strip_prefix("s3://") else {
        let scheme = url.split_once("://").map_or("", |(s, _)| s);
        anyhow::bail!(
            "web.artifacts {url:?}: unknown scheme {scheme:?}; use s3://BUCKET/PREFIX (or web.artifacts_dir for a directory)"
        );
    };
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    anyhow::ensure!(
        !bucket.is_empty(),
        "web.artifacts {url:?} names no bucket: use s3://BUCKET/PREFIX"
    );
    anyhow::ensure!(
        (3..=63).contains(&bucket.len())
            && bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'),
        "web.artifacts {url:?}: {bucket:?} is not a bucket name (3 to 63 lowercase letters, digits, dots and hyphens)"
    );
    let prefix = prefix.trim_end_matches('/');
    anyhow::ensure!(
        prefix.is_empty()
            || prefix
                .split('/')
                .all(|part| !part.is_empty() && part != "." && part != ".."),
        "web.artifacts {url:?}: the prefix {prefix:?} has an empty, `.` or `..` part"
    );
    Ok((bucket.to_string(), prefix.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn resolve(artifacts: Option<&str>, dir: Option<&str>, s3: &S3Config) -> String {
        let dir = dir.map(PathBuf::from);
        match ArtifactLocation::resolve(artifacts, dir.as_ref(), s3, Path::new("/data")) {
            Ok(l) => format!("{l:?}"),
            Err(e) => format!("error: {e}"),
        }
    }

    #[test]
    fn a_bucket_and_prefix_come_from_the_url() {
        assert_eq!(
            parse_s3_url("s3://ci-artifacts/gantry/prod/").unwrap(),
            ("ci-artifacts".to_string(), "gantry/prod".to_string())
        );
        assert_eq!(
            parse_s3_url("s3://ci-artifacts").unwrap(),
            ("ci-artifacts".to_string(), String::new())
        );
    }

    #[test]
    fn a_bad_url_is_one_line_naming_the_fix() {
        for (url, says) in [
            ("s3:///prefix", "names no bucket"),
            ("s3://", "names no bucket"),
            ("gs://b/p", "unknown scheme \"gs\""),
            ("/srv/artifacts", "unknown scheme \"\""),
            ("s3://Bad_Bucket/p", "is not a bucket name"),
            ("s3://bucket/a//b", "has an empty, `.` or `..` part"),
            ("s3://bucket/a/../b", "has an empty, `.` or `..` part"),
        ] {
            let e = parse_s3_url(url).unwrap_err().to_string();
            assert!(e.contains(says), "{url}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }

    #[test]
    fn the_directory_stays_the_default_and_settings_do_not_mix() {
        let none = S3Config::default();
        assert_eq!(resolve(None, None, &none), "Dir(\"/data/artifacts\")");
        assert_eq!(resolve(None, Some("/nfs/a"), &none), "Dir(\"/nfs/a\")");
        assert!(resolve(Some("s3://b-1/p"), Some("/nfs/a"), &none).contains("both web.artifacts"));
        let region = S3Config {
            region: Some("eu-west-1".into()),
            ..S3Config::default()
        };
        assert!(resolve(None, None, &region).contains("[web.s3] is set but web.artifacts is not"));
        let s3 = resolve(Some("s3://b-1/p/q"), None, &region);
        assert!(
            s3.starts_with("S3 { bucket: \"b-1\", prefix: \"p/q\""),
            "{s3}"
        );
    }

    #[test]
    fn secrets_are_not_shown_in_debug_output() {
        let s3 = S3Config {
            access_key_id: Some("AKID".into()),
            secret_access_key: Some("very-secret".into()),
            session_token: Some("tok-secret".into()),
            ..S3Config::default()
        };
        let shown = format!("{s3:?}");
        assert!(!shown.contains("secret\"") && !shown.contains("very-secret"));
        assert!(
            !shown.contains("tok-secret") && shown.contains("AKID"),
            "{shown}"
        );
    }
}
