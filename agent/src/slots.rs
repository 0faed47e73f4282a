//! Idempotent creation by handle, shared by the volume store and the
//! container registry.
//!
//! The web node picks a handle, writes its database row, then asks the agent
//! to create the thing; it may ask again after a timeout. So creating a handle
//! that exists with the same spec returns the existing one, a different spec
//! is a conflict, and two concurrent creates of one handle create it once.
//! Destroying waits for a creation in progress, and a creation that starts
//! while a destroy runs waits for it and then creates afresh.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use super::error::AgentError;

/// One handle's entry.
struct Slot<S, T> {
    /// The spec it was (or is being) created with; compared on every create.
    spec: S,
    /// Held while the thing is being created or destroyed, so that the two
    /// never overlap and waiters learn the outcome once it is released.
    op: Arc<tokio::sync::Mutex<()>>,
    /// The thing, once created; `None` while pending or after a failure.
    item: Mutex<Option<Arc<T>>>,
}

/// Things of one kind (`volume`, `container`) by handle.
pub struct Slots<S, T> {
    /// `volume` or `container`, for error messages.
    kind: &'static str,
    /// Every handle being created, created, or being destroyed.
    map: Mutex<HashMap<String, Arc<Slot<S, T>>>>,
}

/// Locks a std mutex, ignoring poisoning: the data is plain bookkeeping that
/// a panicking holder cannot leave half-updated.
fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<S: PartialEq, T> Slots<S, T> {
    /// An empty map for things of `kind`.
    pub fn new(kind: &'static str) -> Self {
        Slots {
            kind,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// Adds a thing found on disk at start-up.
    pub fn insert_existing(&self, handle: String, spec: S, item: T) {
        let slot = Slot {
            spec,
            op: Arc::new(tokio::sync::Mutex::new(())),
            item: Mutex::new(Some(Arc::new(item))),
        };
        lock(&self.map).insert(handle, Arc::new(slot));
    }

    /// The created thing with this handle.
    pub fn get(&self, handle: &str) -> Option<Arc<T>> {
        let slot = lock(&self.map).get(handle).cloned()?;
        let item = lock(&slot.item).clone();
        item
    }

    /// Handles of every created thing, sorted.
    pub fn handles(&self) -> Vec<String> {
        let map = lock(&self.map);
        let mut handles: Vec<String> = map
            .iter()
            .filter(|(_, slot)| lock(&slot.item).is_some())
            .map(|(h, _)| h.clone())
            .collect();
        handles.sort();
        handles
    }

    /// Every created thing.
    pub fn items(&self) -> Vec<Arc<T>> {
        let map = lock(&self.map);
        map.values()
            .filter_map(|slot| lock(&slot.item).clone())
            .collect()
    }

    /// Removes `slot` from the map if it is still the entry for `handle`.
    fn forget(&self, handle: &str, slot: &Arc<Slot<S, T>>) {
        let mut map = lock(&self.map);
        if map.get(handle).is_some_and(|s| Arc::ptr_eq(s, slot)) {
            map.remove(handle);
        }
    }

    /// Returns the thing with `handle`, creating it with `create` when absent.
    /// The flag is true when this call created it.
    pub async fn find_or_create<F, Fut>(
        &self,
        handle: &str,
        spec: &S,
        create: F,
    ) -> Result<(Arc<T>, bool), AgentError>
    where
        S: Clone,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, AgentError>>,
    {
        let mut create = Some(create);
        loop {
            // Either become the creator (holding the op lock of a new slot)
            // or find the existing slot.
            let (slot, creator_guard) = {
                let mut map = lock(&self.map);
                match map.get(handle).cloned() {
                    Some(slot) if slot.spec == *spec => (slot, None),
                    Some(slot) => {
                        // A creation abandoned half-way does not count.
                        let stale = lock(&slot.item).is_none() && slot.op.try_lock().is_ok();
                        if !stale {
                            return Err(AgentError::Conflict(format!(
                                "{} {handle} already exists with a different spec; \
                                 destroy it first or use a new handle",
                                self.kind
                            )));
                        }
                        map.remove(handle);
                        continue;
                    }
                    None => {
                        let slot = Arc::new(Slot {
                            spec: spec.clone(),
                            op: Arc::new(tokio::sync::Mutex::new(())),
                            item: Mutex::new(None),
                        });
                        let guard = slot.op.clone().try_lock_owned().map_err(|_| {
                            AgentError::Backend("a new slot's lock was taken".into())
                        })?;
                        map.insert(handle.to_string(), slot.clone());
                        (slot, Some(guard))
                    }
                }
            };

            if let Some(_guard) = creator_guard {
                let Some(create) = create.take() else {
                    return Err(AgentError::Backend(format!(
                        "{} {handle}: created twice in one call",
                        self.kind
                    )));
                };
                return match create().await {
                    Ok(item) => {
                        let item = Arc::new(item);
                        *lock(&slot.item) = Some(item.clone());
                        Ok((item, true))
                    }
                    Err(e) => {
                        self.forget(handle, &slot);
                        Err(e)
                    }
                };
            }

            let _wait = slot.op.lock().await;
            if let Some(item) = lock(&slot.item).clone() {
                return Ok((item, false));
            }
            // Its creation failed or was abandoned, or it was destroyed: retry.
            self.forget(handle, &slot);
        }
    }

    /// Destroys the thing with `handle` using `destroy`; returns whether there
    /// was one. On failure the thing stays listed.
    pub async fn remove<F, Fut>(&self, handle: &str, destroy: F) -> Result<bool, AgentError>
    where
        F: FnOnce(Arc<T>) -> Fut,
        Fut: Future<Output = Result<(), AgentError>>,
    {
        let Some(slot) = lock(&self.map).get(handle).cloned() else {
            return Ok(false);
        };
        let _guard = slot.op.lock().await;
        let Some(item) = lock(&slot.item).take() else {
            self.forget(handle, &slot);
            return Ok(false);
        };
        match destroy(item.clone()).await {
            Ok(()) => {
                self.forget(handle, &slot);
                Ok(true)
            }
            Err(e) => {
                *lock(&slot.item) = Some(item);
                Err(e)
            }
        }
    }
}

/// Checks that a handle or process id is safe to use as a file name:
/// 1 to 128 of `A-Z a-z 0-9 _ . -`, not starting with a dot.
pub fn check_name(kind: &str, name: &str) -> Result<(), AgentError> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(AgentError::BadRequest(format!(
            "invalid {kind} {name:?}: use 1 to 128 letters, digits, '_', '.' or '-', \
             not starting with '.' (a UUID is best)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn create_is_idempotent_for_the_same_spec_and_conflicts_otherwise() {
        let slots: Slots<u32, String> = Slots::new("volume");
        let (a, created) = slots
            .find_or_create("h", &1, || async { Ok("first".to_string()) })
            .await
            .unwrap();
        assert!(created);
        assert_eq!(*a, "first");
        let (b, created) = slots
            .find_or_create("h", &1, || async { Ok("second".to_string()) })
            .await
            .unwrap();
        assert!(!created);
        assert_eq!(*b, "first");
        let err = slots
            .find_or_create("h", &2, || async { Ok("third".to_string()) })
            .await
            .unwrap_err();
        assert!(matches!(err, AgentError::Conflict(_)), "{err}");
        assert_eq!(slots.handles(), vec!["h".to_string()]);
    }

    #[tokio::test]
    async fn a_failed_creation_leaves_nothing_and_can_be_retried() {
        let slots: Slots<u32, String> = Slots::new("volume");
        slots
            .find_or_create("h", &1, || async {
                Err(AgentError::BadRequest("no".into()))
            })
            .await
            .unwrap_err();
        assert!(slots.handles().is_empty());
        let (_, created) = slots
            .find_or_create("h", &2, || async { Ok("ok".to_string()) })
            .await
            .unwrap();
        assert!(created);
    }

    #[tokio::test]
    async fn remove_destroys_once_and_reports_absence() {
        let slots: Slots<u32, String> = Slots::new("container");
        slots.insert_existing("h".into(), 1, "x".into());
        assert!(slots.remove("h", |_| async { Ok(()) }).await.unwrap());
        assert!(!slots.remove("h", |_| async { Ok(()) }).await.unwrap());
        assert!(slots.get("h").is_none());
    }

    #[test]
    fn names_must_be_safe_file_names() {
        assert!(check_name("volume", "0b9c3d2e-7f1a-4c55-9e0d-3b2a1c4d5e6f").is_ok());
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            ".hidden",
            "a b",
            &"x".repeat(129),
        ] {
            assert!(check_name("volume", bad).is_err(), "{bad:?} accepted");
        }
    }

    #[tokio::test]
    async fn a_failed_destroy_keeps_the_thing() {
        let slots: Slots<u32, String> = Slots::new("container");
        slots.insert_existing("h".into(), 1, "x".into());
        slots
            .remove("h", |_| async { Err(AgentError::Backend("busy".into())) })
            .await
            .unwrap_err();
        assert_eq!(slots.get("h").as_deref().map(String::as_str), Some("x"));
    }
}
