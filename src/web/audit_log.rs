//! Recording the audit log: every change made through the API is
//! recorded by the `identify` middleware (`auth.rs`) once it succeeded
//! ([`record`]); `GET /api/v1/audit` (`api/audit.rs`) lists it, as
//! Concourse's auditing flags log them.

use actix_web::dev::ServiceResponse;
use gantry_actors::api::AuditEntry;

use crate::web::AppState;

/// Who made a request, as the audit log names them: `user:NAME` (a
/// signed-in person), `admin`, `token:ID` (a token made through the API),
/// `config-token:TEAM` (a team token of the config file) or `worker`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor(pub String);

impl actix_web::FromRequest for Actor {
    type Error = actix_web::Error;
    type Future = std::future::Ready<Result<Self, Self::Error>>;

    /// The caller the `identify` middleware named (`anonymous` outside it).
    fn from_request(req: &actix_web::HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        use actix_web::HttpMessage as _;
        let actor = req.extensions().get::<Actor>().cloned();
        std::future::ready(Ok(actor.unwrap_or_else(|| Actor("anonymous".into()))))
    }
}

/// Whether a request of operation `op` with `method` is a change the log
/// keeps: every team or admin operation but a read (hijacks, which are
/// websocket `GET`s, are kept) and an artifact upload (part of `execute`,
/// whose build is kept).
pub fn audited(state: &AppState, method: &actix_web::http::Method, op: &str) -> bool {
    let fleet_or_team =
        state.actions.needs(op).is_some() || crate::web::rbac::ADMIN_ONLY.contains(&op);
    let change = method != actix_web::http::Method::GET || op.starts_with("hijack");
    fleet_or_team && change && op != "uploadArtifact"
}

/// Records a change that succeeded (any status below 400) in the log: the
/// team from the route's `{team}`, or the build's or token's it names. A
/// failure to record is logged, never the request's.
pub async fn record<B>(state: &AppState, op: &str, actor: &Actor, res: &ServiceResponse<B>) {
    if res.status().as_u16() >= 400 {
        return;
    }
    let req = res.request();
    let info = req.match_info();
    let team = match (info.get("team"), info.get("id")) {
        (Some(team), _) => Some(team.to_string()),
        (None, Some(id)) if op == "revokeToken" => {
            state.engine.team_of_token_id(id).await.ok().flatten()
        }
        (None, Some(id)) => match id.parse::<i64>() {
            Ok(id) => state.engine.build(id).await.ok().map(|b| b.team),
            Err(_) => None,
        },
        (None, None) => None,
    };
    let entry = AuditEntry {
        id: 0,
        at: 0,
        team,
        actor: actor.0.clone(),
        action: op.to_string(),
        target: req.path().to_string(),
        status: i64::from(res.status().as_u16()),
    };
    if let Err(e) = state.engine.record_audit(entry).await {
        tracing::warn!(error = %e, op, "recording a change in the audit log failed");
    }
}
