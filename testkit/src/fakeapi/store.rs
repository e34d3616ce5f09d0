//! The in-memory store: objects, the event log and the bookkeeping every
//! write goes through (uid, resourceVersion, generation, status).

use super::*;

pub(super) fn now_string(clock: i64) -> String {
    // A fake clock: each creation is one second after the previous one,
    // so "oldest" is deterministic.
    k8s_openapi::jiff::Timestamp::from_second(1_767_225_600 + clock)
        .unwrap()
        .to_string()
}

pub(super) fn has_content_change(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("metadata");
            o.remove("status");
        }
        v
    };
    strip(old) != strip(new)
}

impl Store {
    pub(super) fn resource(&self, group: &str, plural: &str) -> Option<&ResourceDef> {
        self.resources
            .iter()
            .find(|r| r.group == group && r.plural == plural)
    }

    pub(super) fn installed(&self, group: &str, plural: &str) -> Option<ResourceDef> {
        let r = self.resource(group, plural)?;
        if self.uninstalled.contains(&r.key()) {
            return None;
        }
        Some(r.clone())
    }

    pub(super) fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    pub(super) fn record(
        &mut self,
        res: &ResourceDef,
        kind: &'static str,
        old: Option<Value>,
        object: Value,
    ) {
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        self.log.push(LogEntry {
            rv: self.rv,
            res: res.key(),
            namespace,
            kind,
            old,
            object,
        });
    }

    pub(super) fn create(
        &mut self,
        res: &ResourceDef,
        namespace: &str,
        mut obj: Value,
        honour_timestamp: bool,
    ) -> Result<Value, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::new(400, "BadRequest", "body is not an object"));
        }
        if !obj.get("metadata").is_some_and(Value::is_object) {
            obj["metadata"] = json!({});
        }
        let mut name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if name.is_empty() {
            let Some(prefix) = obj["metadata"]["generateName"].as_str() else {
                return Err(ApiError::new(
                    422,
                    "Invalid",
                    "metadata.name: Required value",
                ));
            };
            name = format!("{prefix}{:05x}", self.uid + 1);
        }
        let ns = if res.namespaced {
            let from_body = obj["metadata"]["namespace"].as_str().unwrap_or_default();
            let ns = if namespace.is_empty() {
                from_body
            } else {
                namespace
            };
            if ns.is_empty() {
                return Err(ApiError::new(
                    400,
                    "BadRequest",
                    "a namespaced resource needs a namespace",
                ));
            }
            ns.to_string()
        } else {
            String::new()
        };
        let key = res.obj_key(&ns, &name);
        if self.objects.contains_key(&key) {
            return Err(ApiError::new(
                409,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", res.plural),
            ));
        }
        self.uid += 1;
        self.clock += 1;
        let rv = self.next_rv();
        let meta = obj["metadata"].as_object_mut().expect("object");
        meta.insert("name".into(), json!(name));
        if res.namespaced {
            meta.insert("namespace".into(), json!(ns));
        } else {
            meta.remove("namespace");
        }
        meta.insert("uid".into(), json!(format!("uid-{}", self.uid)));
        meta.insert("resourceVersion".into(), json!(rv.to_string()));
        if !(honour_timestamp && meta.contains_key("creationTimestamp")) {
            meta.insert("creationTimestamp".into(), json!(now_string(self.clock)));
        }
        if obj.get("spec").is_some() {
            obj["metadata"]["generation"] = json!(1);
        }
        obj["apiVersion"] = json!(res.api_version());
        obj["kind"] = json!(res.kind);
        if res.status_subresource
            && let Some(o) = obj.as_object_mut()
        {
            o.remove("status");
        }
        self.objects.insert(key, obj.clone());
        self.record(res, "ADDED", None, obj.clone());
        Ok(obj)
    }

    /// Replaces an object (main resource or `/status`) with bookkeeping.
    pub(super) fn replace(
        &mut self,
        res: &ResourceDef,
        namespace: &str,
        name: &str,
        mut new: Value,
        status_only: bool,
        check_rv: bool,
    ) -> Result<Value, ApiError> {
        let key = res.obj_key(namespace, name);
        let Some(old) = self.objects.get(&key).cloned() else {
            return Err(res.not_found(name));
        };
        if !new.is_object() {
            return Err(ApiError::new(400, "BadRequest", "body is not an object"));
        }
        let old_rv = old["metadata"]["resourceVersion"].as_str().unwrap_or("");
        let given = new["metadata"]["resourceVersion"].as_str().unwrap_or("");
        if check_rv && !given.is_empty() && given != old_rv {
            return Err(ApiError::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                    res.plural
                ),
            ));
        }
        if status_only {
            let status = new.get("status").cloned();
            new = old.clone();
            match status {
                Some(s) => new["status"] = s,
                None => {
                    new.as_object_mut().expect("object").remove("status");
                }
            }
        } else if res.status_subresource {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    new.as_object_mut().expect("object").remove("status");
                }
            }
        }
        // Server-owned metadata.
        if !new.get("metadata").is_some_and(Value::is_object) {
            new["metadata"] = json!({});
        }
        for field in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "generation",
        ] {
            match old["metadata"].get(field) {
                Some(v) => new["metadata"][field] = v.clone(),
                None => {
                    new["metadata"]
                        .as_object_mut()
                        .expect("object")
                        .remove(field);
                }
            }
        }
        if new == old {
            // No-op writes do not bump the resourceVersion.
            return Ok(old);
        }
        if has_content_change(&old, &new) {
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(0);
            if new.get("spec").is_some() {
                new["metadata"]["generation"] = json!(generation + 1);
            }
        }
        new["apiVersion"] = json!(res.api_version());
        new["kind"] = json!(res.kind);
        let rv = self.next_rv();
        new["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.objects.insert(key, new.clone());
        self.record(res, "MODIFIED", Some(old), new.clone());
        Ok(new)
    }

    pub(super) fn patch(
        &mut self,
        res: &ResourceDef,
        namespace: &str,
        name: &str,
        content_type: &str,
        body: &[u8],
        status_only: bool,
    ) -> Result<Value, ApiError> {
        let key = res.obj_key(namespace, name);
        let Some(old) = self.objects.get(&key).cloned() else {
            return Err(res.not_found(name));
        };
        let mut doc = old.clone();
        if content_type.starts_with("application/json-patch+json") {
            let patch: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::new(400, "BadRequest", format!("json patch: {e}")))?;
            json_patch::patch(&mut doc, &patch)
                .map_err(|e| ApiError::new(422, "Invalid", format!("json patch: {e}")))?;
        } else if content_type.starts_with("application/merge-patch+json")
            || content_type.starts_with("application/strategic-merge-patch+json")
            || content_type.starts_with("application/apply-patch")
        {
            let patch: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::new(400, "BadRequest", format!("merge patch: {e}")))?;
            json_patch::merge(&mut doc, &patch);
        } else {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!("unsupported patch content type {content_type:?}"),
            ));
        }
        // A patch that sets metadata.resourceVersion is a precondition.
        let check_rv = doc["metadata"]["resourceVersion"] != old["metadata"]["resourceVersion"];
        self.replace(res, namespace, name, doc, status_only, check_rv)
    }

    pub(super) fn delete(
        &mut self,
        res: &ResourceDef,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        let Some(mut old) = self.objects.remove(&res.obj_key(namespace, name)) else {
            return Err(res.not_found(name));
        };
        let prev = old.clone();
        let rv = self.next_rv();
        old["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.record(res, "DELETED", Some(prev), old.clone());
        Ok(old)
    }

    pub(super) fn matching<'a>(
        &'a self,
        res: &ResourceDef,
        namespace: &'a str,
        selectors: &'a Selectors,
    ) -> impl Iterator<Item = &'a Value> + 'a {
        let res = res.key();
        self.objects
            .iter()
            .filter(move |((g, p, ns, _), _)| {
                *g == res.0 && *p == res.1 && (namespace.is_empty() || ns == namespace)
            })
            .map(|(_, v)| v)
            .filter(move |v| selectors.matches(v))
    }
}
