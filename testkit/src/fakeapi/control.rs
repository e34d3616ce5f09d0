//! What a test does to the fake besides HTTP: switches (not installed,
//! failing or held lists, unavailable, dropped or expired watches) and
//! direct reads and writes through the store's bookkeeping.

use super::*;

impl FakeApi {
    /// Registers one more resource.
    pub fn register(&self, def: ResourceDef) {
        self.shared.with_store(|s| {
            s.resources.retain(|r| r.key() != def.key());
            s.resources.push(def);
        });
    }

    /// Installs or uninstalls a resource (uninstalled: 404 everywhere, like
    /// a CRD that is not there).
    pub fn set_installed(&self, group: &str, plural: &str, installed: bool) {
        self.shared.with_store(|s| {
            let key = (group.to_string(), plural.to_string());
            if installed {
                s.uninstalled.remove(&key);
            } else {
                s.uninstalled.insert(key);
            }
        });
    }

    /// The next `codes.len()` lists of this resource answer with these
    /// HTTP status codes (e.g. 500).
    pub fn fail_lists(&self, group: &str, plural: &str, codes: &[u16]) {
        self.shared.with_store(|s| {
            s.list_failures.insert(
                (group.into(), plural.into()),
                codes.iter().rev().copied().collect(),
            );
        });
    }

    /// The next `codes.len()` requests with this method and exact path
    /// answer with these HTTP status codes (any verb, any path).
    pub fn fail_next(&self, method: &str, path: &str, codes: &[u16]) {
        self.shared.with_store(|s| {
            s.failures.insert(
                (method.to_string(), path.to_string()),
                codes.iter().rev().copied().collect(),
            );
        });
    }

    /// Requests with these verbs (`list`, `watch`, `get`, `patch`,
    /// `update`, `create`, `delete`) on any resource in `namespace` answer
    /// 403 Forbidden from now on, as RBAC does once a Role is gone; no
    /// verbs: all allowed again.
    pub fn forbid(&self, namespace: &str, verbs: &[&str]) {
        self.shared.with_store(|s| {
            if verbs.is_empty() {
                s.forbidden.remove(namespace);
            } else {
                s.forbidden.insert(
                    namespace.to_string(),
                    verbs.iter().map(|v| v.to_string()).collect(),
                );
            }
        });
    }

    /// Lists of this resource wait until [`FakeApi::release_lists`].
    pub fn hold_lists(&self, group: &str, plural: &str) {
        self.shared
            .with_store(|s| s.held_lists.insert((group.into(), plural.into())));
    }

    pub fn release_lists(&self, group: &str, plural: &str) {
        self.shared.with_store(|s| {
            s.held_lists
                .remove(&(group.to_string(), plural.to_string()))
        });
        self.shared.released.send_modify(|n| *n += 1);
    }

    /// Runs `f` on the store and the registered resource `group`/`plural`
    /// (the bookkeeping every direct write shares).
    fn with_resource<T>(
        &self,
        group: &str,
        plural: &str,
        f: impl FnOnce(&mut Store, &ResourceDef) -> T,
    ) -> T {
        self.shared.with_store(|s| {
            let res = s
                .resource(group, plural)
                .unwrap_or_else(|| panic!("resource {group}/{plural} not registered"))
                .clone();
            f(s, &res)
        })
    }

    /// Creates an object (namespace taken from `metadata.namespace`). Unlike
    /// a POST, a given `metadata.creationTimestamp` is kept, so tests can
    /// decide which object is older.
    pub fn create(&self, group: &str, plural: &str, obj: Value) -> Value {
        self.with_resource(group, plural, |s, res| {
            let ns = obj["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string();
            s.create(res, &ns, obj, true)
                .unwrap_or_else(|e| panic!("create {plural}: {e:?}"))
        })
    }

    /// Read-modify-write of an object, like `kubectl edit` (status changes
    /// are ignored when `/status` is a subresource).
    pub fn update(
        &self,
        group: &str,
        plural: &str,
        namespace: &str,
        name: &str,
        edit: impl FnOnce(&mut Value),
    ) -> Value {
        self.with_resource(group, plural, |s, res| {
            let key = (group.into(), plural.into(), namespace.into(), name.into());
            let mut obj = s
                .objects
                .get(&key)
                .cloned()
                .unwrap_or_else(|| panic!("{plural} {namespace}/{name} not found"));
            edit(&mut obj);
            s.replace(res, namespace, name, obj, false, true)
                .unwrap_or_else(|e| panic!("update {plural} {name}: {e:?}"))
        })
    }

    pub fn delete(&self, group: &str, plural: &str, namespace: &str, name: &str) -> Value {
        self.with_resource(group, plural, |s, res| {
            s.delete(res, namespace, name)
                .unwrap_or_else(|e| panic!("delete {plural} {name}: {e:?}"))
        })
    }

    pub fn get(&self, group: &str, plural: &str, namespace: &str, name: &str) -> Option<Value> {
        self.shared.with_store(|s| {
            s.objects
                .get(&(group.into(), plural.into(), namespace.into(), name.into()))
                .cloned()
        })
    }

    /// Every object of a resource (all namespaces).
    pub fn list(&self, group: &str, plural: &str) -> Vec<Value> {
        self.shared.with_store(|s| {
            s.objects
                .iter()
                .filter(|((g, p, _, _), _)| g == group && p == plural)
                .map(|(_, v)| v.clone())
                .collect()
        })
    }

    /// Events (core/v1 and events.k8s.io/v1) about the named object.
    pub fn events_for(&self, name: &str) -> Vec<Value> {
        let mut out = self.list("events.k8s.io", "events");
        out.extend(self.list("", "events"));
        out.retain(|e| {
            e["regarding"]["name"].as_str() == Some(name)
                || e["involvedObject"]["name"].as_str() == Some(name)
        });
        out
    }

    /// Before the next PATCH of this object, the fake applies `edit` to it
    /// (a concurrent writer between the client's read and its write): the
    /// object changes and its resourceVersion moves on. Once.
    pub fn interfere_next_patch(
        &self,
        group: &str,
        plural: &str,
        namespace: &str,
        name: &str,
        edit: impl FnOnce(&mut Value) + Send + 'static,
    ) {
        self.shared.with_store(|s| {
            s.interfere.push((
                (group.into(), plural.into(), namespace.into(), name.into()),
                Interference(Box::new(edit)),
            ))
        });
    }

    /// The PATCH requests served so far for one object (main resource).
    pub fn patches_of(&self, group: &str, plural: &str, namespace: &str, name: &str) -> usize {
        let prefix = if group.is_empty() {
            "/api/v1".to_string()
        } else {
            let version = self.shared.with_store(|s| {
                s.resource(group, plural)
                    .map(|r| r.version.clone())
                    .unwrap_or_default()
            });
            format!("/apis/{group}/{version}")
        };
        let path = format!("{prefix}/namespaces/{namespace}/{plural}/{name}");
        self.requests()
            .iter()
            .filter(|r| r.method == "PATCH" && r.path == path)
            .count()
    }

    /// The requests served so far.
    pub fn requests(&self) -> Vec<Request> {
        self.shared.with_store(|s| s.requests.clone())
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.with_store(|s| s.rv)
    }

    /// Closes every open watch connection (clients resume from their last
    /// resourceVersion).
    pub fn drop_watches(&self) {
        self.shared.kill.send_modify(|k| *k = (k.0 + 1, false));
    }

    /// Forgets the event log: a watch from any resourceVersion older than
    /// the current one gets `410 Gone`, forcing a relist.
    pub fn compact(&self) {
        self.shared.with_store(|s| {
            s.compacted = s.rv;
            s.log.clear();
        });
    }

    /// While `true`, every request (watches included) answers `503`, and
    /// the open watches are closed when it is switched on.
    pub fn set_unavailable(&self, unavailable: bool) {
        self.shared.with_store(|s| s.unavailable = unavailable);
        if unavailable {
            self.drop_watches();
        }
    }

    /// Writes `status` of an object the way its controller does (`PUT
    /// .../status`): only `status` and the resourceVersion change, and
    /// watchers see a MODIFIED event.
    pub fn update_status(
        &self,
        group: &str,
        plural: &str,
        namespace: &str,
        name: &str,
        status: Value,
    ) -> Value {
        self.with_resource(group, plural, |s, res| {
            let obj = json!({"metadata": {}, "status": status});
            s.replace(res, namespace, name, obj, true, false)
                .unwrap_or_else(|e| panic!("update status of {plural} {namespace}/{name}: {e:?}"))
        })
    }

    /// Creates many objects under one lock (benchmarks, large lists).
    pub fn create_many(&self, group: &str, plural: &str, objs: Vec<Value>) {
        self.with_resource(group, plural, |s, res| {
            for obj in objs {
                let ns = obj["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                s.create(res, &ns, obj, true)
                    .unwrap_or_else(|e| panic!("create {plural}: {e:?}"));
            }
        });
    }

    /// Forgets the event log up to now without expiring the open watches
    /// that already saw it (benchmarks: keeps the log short).
    pub fn compact_keep_watches(&self) {
        self.shared.with_store(|s| s.log.clear());
    }

    /// Compacts and sends every open watch an ERROR event with a `410
    /// Expired` Status, then closes it.
    pub fn expire_watches(&self) {
        self.compact();
        self.shared.kill.send_modify(|k| *k = (k.0 + 1, true));
    }
}
