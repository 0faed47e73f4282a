//! Concourse's way of naming an instance of an instanced pipeline in the
//! API: `/api/v1/teams/T/pipelines/NAME/...?vars.KEY=JSON` (or
//! `?vars={...}`, a whole object). Before routing, such a request's
//! pipeline segment becomes the instance's name, `NAME/K:V,...` (escaped),
//! which every pipeline route takes as it is, and the `vars` parameters are
//! dropped from the query.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Uri;
use actix_web::middleware::Next;
use gantry_actors::api::{set_dotted, PipelineRef};
use serde_json::{Map, Value};

use crate::web::error::ApiError;

/// The prefix of the routes a pipeline is named in.
const TEAMS: &str = "/api/v1/teams/";

/// Rewrites a request naming an instance by query parameters (see the
/// module's doc); any other passes untouched.
pub async fn rewrite(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    if let Some(uri) = rewritten(req.uri()).map_err(ApiError::bad_request)? {
        req.match_info_mut().get_mut().update(&uri);
        req.head_mut().uri = uri;
    }
    next.call(req).await
}

/// The URI naming the instance in its path, when `uri` names one by its
/// query; a bad `vars` parameter is a problem naming it.
fn rewritten(uri: &Uri) -> Result<Option<Uri>, String> {
    let Some(query) = uri.query() else {
        return Ok(None);
    };
    let path = uri.path();
    let Some(rest) = path.strip_prefix(TEAMS) else {
        return Ok(None);
    };
    let parts: Vec<&str> = rest.splitn(4, '/').collect();
    if parts.len() < 3 || parts[1] != "pipelines" || parts[2].is_empty() {
        return Ok(None);
    }
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(query).map_err(|e| format!("query: {e}"))?;
    let (vars, kept): (Vec<_>, Vec<_>) = pairs
        .into_iter()
        .partition(|(k, _)| k == "vars" || k.starts_with("vars."));
    if vars.is_empty() {
        return Ok(None);
    }
    let mut instance = Map::new();
    let mut sorted = vars;
    sorted.sort();
    for (k, v) in sorted {
        let value: Value =
            serde_json::from_str(&v).map_err(|e| format!("{k}: {v:?} is not JSON: {e}"))?;
        match k.strip_prefix("vars.") {
            Some(key) if !key.is_empty() => set_dotted(&mut instance, key, value),
            Some(_) => return Err(format!("{k}: give vars.KEY")),
            None => match value {
                Value::Object(all) => instance.extend(all),
                _ => return Err("vars: give a JSON object".into()),
            },
        }
    }
    let name = percent_decode(parts[2]);
    let r = PipelineRef::new(&name, Some(instance)).map_err(|e| e.to_string())?;
    let mut new_path = format!(
        "{TEAMS}{}/pipelines/{}",
        parts[0],
        gantry_wire::url::segment(&r.to_string())
    );
    if let Some(tail) = parts.get(3) {
        new_path.push('/');
        new_path.push_str(tail);
    }
    let query = serde_urlencoded::to_string(&kept).map_err(|e| e.to_string())?;
    if !query.is_empty() {
        new_path.push('?');
        new_path.push_str(&query);
    }
    new_path
        .parse::<Uri>()
        .map(Some)
        .map_err(|e| format!("path: {e}"))
}

/// `%XX` escapes of a path segment decoded (invalid ones kept).
pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path_of(uri: &str) -> Option<String> {
        rewritten(&uri.parse().unwrap())
            .unwrap()
            .map(|u| u.to_string())
    }

    #[test]
    fn query_vars_name_the_instance_in_the_path() {
        assert_eq!(
            path_of("/api/v1/teams/main/pipelines/p/jobs?vars.branch=%22main%22&limit=5")
                .as_deref(),
            Some("/api/v1/teams/main/pipelines/p%2Fbranch%3Amain/jobs?limit=5")
        );
        assert_eq!(
            path_of("/api/v1/teams/main/pipelines/p?vars=%7B%22n%22%3A1%7D").as_deref(),
            Some("/api/v1/teams/main/pipelines/p%2Fn%3A1")
        );
        // No vars, or not a pipeline route: untouched.
        assert_eq!(path_of("/api/v1/teams/main/pipelines/p?limit=5"), None);
        assert_eq!(path_of("/api/v1/builds?vars.a=1"), None);
        let bad = rewritten(
            &"/api/v1/teams/main/pipelines/p?vars.a=main"
                .parse()
                .unwrap(),
        );
        assert!(bad.unwrap_err().contains("vars.a: \"main\" is not JSON"));
    }
}
