//! Concourse's team auth (`atc.TeamAuth`: role → `{users, groups}`, with
//! skymarshal's connector-prefixed names such as `local:alice`,
//! `github:alice`, `oidc:alice`), mapped onto Gantry's roles of users and
//! groups. A local user is a bare name in Gantry (`alice`) and
//! `local:alice` in Concourse; a provider's person or group keeps its
//! prefix (`github:`, `oidc:`) in both.

use std::collections::BTreeMap;

use gantry_actors::api::{MemberKind, Role, TeamRole};

/// Concourse's `atc.TeamAuth`: role → `users`/`groups` → names.
pub type TeamAuth = BTreeMap<String, BTreeMap<String, Vec<String>>>;

/// Concourse's `ErrAuthConfigEmpty`.
pub const AUTH_CONFIG_EMPTY: &str = "auth config for the team must not be empty";

/// Concourse's `ErrAuthConfigInvalid`.
pub const AUTH_CONFIG_INVALID: &str =
    "auth config for the team does not have users and groups configured";

/// The connectors whose people sign in to Gantry: `local` (`[web.users]`),
/// `github` and `oidc`.
const PROVIDERS: [&str; 2] = ["github", "oidc"];

/// Gantry's name of Concourse's user `name` (`local:alice` → `alice`).
fn gantry_user(name: &str) -> Result<String, String> {
    match name.split_once(':') {
        Some(("local", user)) if !user.is_empty() && !user.contains(':') => Ok(user.to_string()),
        Some((p, rest)) if PROVIDERS.contains(&p) && !rest.is_empty() => Ok(name.to_string()),
        _ => Err(format!(
            "user {name:?}: give local:NAME (a [web.users] user), github:LOGIN or oidc:NAME (Gantry signs people in through these)"
        )),
    }
}

/// Gantry's name of Concourse's group `name` (groups come from a provider).
fn gantry_group(name: &str) -> Result<String, String> {
    match name.split_once(':') {
        Some((p, rest)) if PROVIDERS.contains(&p) && !rest.is_empty() => Ok(name.to_string()),
        _ => Err(format!(
            "group {name:?}: give github:ORG, github:ORG:TEAM or oidc:GROUP (Gantry's groups come from these providers)"
        )),
    }
}

/// Concourse's name of Gantry's user `name` (`alice` → `local:alice`).
fn concourse_user(name: &str) -> String {
    match name.contains(':') {
        true => name.to_string(),
        false => format!("local:{name}"),
    }
}

/// The roles Concourse's `auth` gives, checked as Concourse checks it
/// (not empty; each role names users or groups) and against Gantry's roles
/// and people. One named in several roles gets the highest.
pub fn roles_of_auth(auth: &TeamAuth) -> Result<Vec<TeamRole>, String> {
    if auth.is_empty() {
        return Err(AUTH_CONFIG_EMPTY.to_string());
    }
    let mut best: BTreeMap<(MemberKind, String), Role> = BTreeMap::new();
    for (role_name, config) in auth {
        let role: Role = role_name.parse().map_err(|_| {
            format!(
                "role {role_name:?}: Gantry's roles are {}",
                Role::ALL.map(Role::as_str).join(", ")
            )
        })?;
        if let Some(other) = config
            .keys()
            .find(|k| !matches!(k.as_str(), "users" | "groups"))
        {
            return Err(format!(
                "role {role_name}: {other:?} is not users or groups"
            ));
        }
        let users = config.get("users").map(Vec::as_slice).unwrap_or_default();
        let groups = config.get("groups").map(Vec::as_slice).unwrap_or_default();
        if users.is_empty() && groups.is_empty() {
            return Err(AUTH_CONFIG_INVALID.to_string());
        }
        let named = users
            .iter()
            .map(|u| gantry_user(u).map(|n| (MemberKind::User, n)))
            .chain(
                groups
                    .iter()
                    .map(|g| gantry_group(g).map(|n| (MemberKind::Group, n))),
            );
        for member in named {
            let slot = best.entry(member?).or_insert(role);
            *slot = (*slot).max(role);
        }
    }
    Ok(best
        .into_iter()
        .map(|((kind, name), role)| TeamRole { kind, name, role })
        .collect())
}

/// Concourse's `auth` of a team whose members are `roles`.
pub fn auth_of_roles<'a>(roles: impl IntoIterator<Item = &'a TeamRole>) -> TeamAuth {
    let mut auth = TeamAuth::new();
    for r in roles {
        let config = auth.entry(r.role.as_str().to_string()).or_insert_with(|| {
            BTreeMap::from([
                ("users".to_string(), vec![]),
                ("groups".to_string(), vec![]),
            ])
        });
        let (key, name) = match r.kind {
            MemberKind::User => ("users", concourse_user(&r.name)),
            MemberKind::Group => ("groups", r.name.clone()),
        };
        config.entry(key.to_string()).or_default().push(name);
    }
    auth
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(json: serde_json::Value) -> TeamAuth {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn concourse_auth_maps_onto_gantry_people_and_back() {
        let roles = roles_of_auth(&auth(serde_json::json!({
            "owner": {"users": ["local:alice"], "groups": []},
            "viewer": {"users": ["github:bob", "local:alice"], "groups": ["oidc:ops"]},
            "pipeline-operator": {"groups": ["github:acme:web"]},
        })))
        .unwrap();
        let find = |name: &str| roles.iter().find(|r| r.name == name).unwrap().clone();
        assert_eq!(
            find("alice").role,
            Role::Owner,
            "the highest of alice's roles"
        );
        assert_eq!(find("alice").kind, MemberKind::User);
        assert_eq!(find("github:bob").role, Role::Viewer);
        assert_eq!(find("oidc:ops").kind, MemberKind::Group);
        assert_eq!(find("github:acme:web").role, Role::PipelineOperator);
        let back = auth_of_roles(&roles);
        assert_eq!(back["owner"]["users"], ["local:alice"]);
        assert_eq!(back["viewer"]["users"], ["github:bob"]);
        assert_eq!(back["viewer"]["groups"], ["oidc:ops"]);
        assert_eq!(back["pipeline-operator"]["users"], Vec::<String>::new());
    }

    #[test]
    fn what_concourse_or_gantry_refuses_is_refused() {
        let refused = |json| roles_of_auth(&auth(json)).unwrap_err();
        assert_eq!(refused(serde_json::json!({})), AUTH_CONFIG_EMPTY);
        assert_eq!(
            refused(serde_json::json!({"owner": {"users": [], "groups": []}})),
            AUTH_CONFIG_INVALID
        );
        assert!(
            refused(serde_json::json!({"admin": {"users": ["local:a"]}}))
                .contains("Gantry's roles")
        );
        assert!(refused(serde_json::json!({"owner": {"users": ["ldap:a"]}})).contains("local:NAME"));
        assert!(refused(serde_json::json!({"owner": {"users": ["alice"]}})).contains("local:NAME"));
        assert!(
            refused(serde_json::json!({"owner": {"groups": ["local:g"]}})).contains("github:ORG")
        );
        assert!(refused(serde_json::json!({"owner": {"people": ["local:a"]}})).contains("people"));
    }
}
