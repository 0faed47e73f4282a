//! The artifacts of one build by name (Concourse's build artifact
//! repository): a step that produces an artifact (a task's output) sets it
//! here, and later steps of the same build find it by name as an input.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Artifact ids by artifact name, shared by every step of one build.
#[derive(Debug, Clone, Default)]
pub struct ArtifactScope {
    /// Name to artifact id; a later step's artifact of the same name
    /// replaces an earlier one, as in Concourse.
    names: Arc<Mutex<BTreeMap<String, String>>>,
}

impl ArtifactScope {
    /// An empty scope: a new build.
    pub fn new() -> ArtifactScope {
        ArtifactScope::default()
    }

    /// Registers artifact `id` under `name`.
    pub fn set(&self, name: &str, id: &str) {
        self.lock().insert(name.to_string(), id.to_string());
    }

    /// The artifact registered under `name`, if any step produced it.
    pub fn get(&self, name: &str) -> Option<String> {
        self.lock().get(name).cloned()
    }

    /// Every artifact of the build so far, by name.
    pub fn all(&self) -> BTreeMap<String, String> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        // A panic while holding the lock leaves the map consistent.
        self.names.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_artifact_of_the_same_name_replaces_the_earlier() {
        let scope = ArtifactScope::new();
        let shared = scope.clone();
        scope.set("out", "a1");
        assert_eq!(shared.get("out").as_deref(), Some("a1"));
        shared.set("out", "a2");
        assert_eq!(scope.get("out").as_deref(), Some("a2"));
        assert_eq!(scope.get("other"), None);
    }
}
