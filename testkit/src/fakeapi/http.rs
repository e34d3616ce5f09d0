//! The HTTP side: paths, the handler for every verb, LIST and the JSON
//! answers.

use super::*;

pub(super) fn json_response(code: u16, body: &Value) -> Response {
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

pub(super) fn status_value(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code,
    })
}

pub(super) fn error_response(e: ApiError) -> Response {
    json_response(e.code, &status_value(e.code, e.reason, &e.message))
}

pub(super) fn not_found_resource() -> Response {
    json_response(
        404,
        &status_value(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ),
    )
}

pub(super) enum Path {
    Discovery(Value),
    Resource {
        group: String,
        plural: String,
        namespace: String,
        name: Option<String>,
        subresource: Option<String>,
    },
    NotFound,
}

pub(super) fn parse_path(store: &Store, path: &str) -> Path {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest): (&str, &str, &[&str]) = match segs.as_slice() {
        ["api"] => return Path::Discovery(json!({"kind": "APIVersions", "versions": ["v1"]})),
        ["apis"] => {
            let mut groups: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
            for r in store.resources.iter().filter(|r| !r.group.is_empty()) {
                let vs = groups.entry(&r.group).or_default();
                if !vs.contains(&r.version.as_str()) {
                    vs.push(&r.version);
                }
            }
            let groups: Vec<Value> = groups
                .into_iter()
                .map(|(g, vs)| {
                    let versions: Vec<Value> = vs
                        .iter()
                        .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
                        .collect();
                    json!({"name": g, "versions": versions, "preferredVersion": versions[0]})
                })
                .collect();
            return Path::Discovery(
                json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}),
            );
        }
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Path::NotFound,
    };
    if rest.is_empty() {
        let resources: Vec<Value> = store
            .resources
            .iter()
            .filter(|r| r.group == group && r.version == version && !store.uninstalled.contains(&r.key()))
            .flat_map(|r| {
                let mut v = vec![json!({
                    "name": r.plural, "singularName": "", "namespaced": r.namespaced, "kind": r.kind,
                    "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                })];
                if r.status_subresource {
                    v.push(json!({"name": format!("{}/status", r.plural), "singularName": "",
                        "namespaced": r.namespaced, "kind": r.kind, "verbs": ["get", "patch", "update"]}));
                }
                v
            })
            .collect();
        if resources.is_empty() {
            return Path::NotFound;
        }
        let gv = if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        };
        return Path::Discovery(json!({"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": gv, "resources": resources}));
    }
    let (namespace, tail): (&str, &[&str]) = match rest {
        ["namespaces", ns, plural, tail @ ..] => {
            let mut t = vec![*plural];
            t.extend_from_slice(tail);
            return finish_path(group, ns, &t);
        }
        _ => ("", rest),
    };
    finish_path(group, namespace, tail)
}

pub(super) fn finish_path(group: &str, namespace: &str, tail: &[&str]) -> Path {
    match tail {
        [plural] => Path::Resource {
            group: group.into(),
            plural: (*plural).into(),
            namespace: namespace.into(),
            name: None,
            subresource: None,
        },
        [plural, name] => Path::Resource {
            group: group.into(),
            plural: (*plural).into(),
            namespace: namespace.into(),
            name: Some((*name).into()),
            subresource: None,
        },
        [plural, name, sub] => Path::Resource {
            group: group.into(),
            plural: (*plural).into(),
            namespace: namespace.into(),
            name: Some((*name).into()),
            subresource: Some((*sub).into()),
        },
        _ => Path::NotFound,
    }
}

/// The 403 RBAC would answer, when the test forbade this verb in `namespace`.
fn forbidden(
    shared: &Shared,
    method: &Method,
    query: &HashMap<String, String>,
    res: &ResourceDef,
    namespace: &str,
    named: bool,
) -> Option<Response> {
    let watching = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    let verb = match (method.as_str(), named) {
        ("GET", false) if watching => "watch",
        ("GET", false) => "list",
        ("GET", true) => "get",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", _) => "delete",
        _ => return None,
    };
    let refused = shared.with_store(|s| {
        s.forbidden
            .get(namespace)
            .is_some_and(|verbs| verbs.contains(verb))
    });
    refused.then(|| {
        let qualified = match res.group.as_str() {
            "" => res.plural.clone(),
            group => format!("{}.{group}", res.plural),
        };
        let message = format!(
            "{qualified} is forbidden: User \"system:serviceaccount:test:fake\" cannot {verb} resource \"{plural}\" in API group \"{group}\" in the namespace \"{namespace}\"",
            plural = res.plural,
            group = res.group,
        );
        json_response(403, &status_value(403, "Forbidden", &message))
    })
}

pub(super) async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let query = parse_query(uri.query());
    let (parsed, injected) = shared.with_store(|s| {
        s.requests.push(Request {
            method: method.to_string(),
            path: uri.path().to_string(),
            query: uri.query().unwrap_or_default().to_string(),
        });
        let injected = s
            .failures
            .get_mut(&(method.to_string(), uri.path().to_string()))
            .and_then(Vec::pop)
            .or(s.unavailable.then_some(503));
        (parse_path(s, uri.path()), injected)
    });
    if let Some(code) = injected {
        return json_response(
            code,
            &status_value(code, "InternalError", "injected failure"),
        );
    }
    let (group, plural, namespace, name, subresource) = match parsed {
        Path::Discovery(v) => return json_response(200, &v),
        Path::NotFound => return not_found_resource(),
        Path::Resource {
            group,
            plural,
            namespace,
            name,
            subresource,
        } => (group, plural, namespace, name, subresource),
    };
    let Some(res) = shared.with_store(|s| s.installed(&group, &plural)) else {
        return not_found_resource();
    };
    if let Some(sub) = &subresource
        && (sub != "status" || !res.status_subresource)
    {
        return not_found_resource();
    }
    if let Some(refused) = forbidden(&shared, &method, &query, &res, &namespace, name.is_some()) {
        return refused;
    }
    let status_only = subresource.is_some();
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    let parse_body = || -> Result<Value, ApiError> {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::new(400, "BadRequest", format!("body: {e}")))
    };
    let result = match (method.clone(), name) {
        (Method::GET, None) => {
            let watching = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
            if watching {
                return start_watch(shared, res, namespace, query);
            }
            return list(shared, res, namespace, query).await;
        }
        (Method::POST, None) => parse_body()
            .and_then(|obj| shared.with_store(|s| s.create(&res, &namespace, obj, false))),
        (Method::GET, Some(name)) => shared.with_store(|s| {
            s.objects
                .get(&res.obj_key(&namespace, &name))
                .cloned()
                .ok_or_else(|| res.not_found(&name))
        }),
        (Method::PUT, Some(name)) => parse_body().and_then(|obj| {
            shared.with_store(|s| s.replace(&res, &namespace, &name, obj, status_only, true))
        }),
        (Method::PATCH, Some(name)) => shared.with_store(|s| {
            let key = res.obj_key(&namespace, &name);
            if let Some(i) = s.interfere.iter().position(|(k, _)| *k == key) {
                let (_, Interference(edit)) = s.interfere.remove(i);
                if let Some(mut obj) = s.objects.get(&key).cloned() {
                    edit(&mut obj);
                    s.replace(&res, &namespace, &name, obj, false, true)
                        .expect("interfering write");
                }
            }
            s.patch(&res, &namespace, &name, &content_type, &body, status_only)
        }),
        (Method::DELETE, Some(name)) => shared.with_store(|s| s.delete(&res, &namespace, &name)),
        _ => Err(ApiError::new(
            405,
            "MethodNotAllowed",
            format!("{method} not supported here"),
        )),
    };
    match result {
        Ok(v) => json_response(if method == Method::POST { 201 } else { 200 }, &v),
        Err(e) => error_response(e),
    }
}

pub(super) fn selectors(query: &HashMap<String, String>) -> Selectors {
    Selectors {
        labels: query
            .get("labelSelector")
            .map(|s| parse_selector(s))
            .unwrap_or_default(),
        fields: query
            .get("fieldSelector")
            .map(|s| parse_selector(s))
            .unwrap_or_default(),
    }
}

pub(super) async fn list(
    shared: Arc<Shared>,
    res: ResourceDef,
    namespace: String,
    query: HashMap<String, String>,
) -> Response {
    // Held lists wait (bounded) until released.
    let mut released = shared.released.subscribe();
    for _ in 0..600 {
        let held = shared.with_store(|s| s.held_lists.contains(&res.key()));
        if !held {
            break;
        }
        let _ = tokio::time::timeout(Duration::from_millis(50), released.changed()).await;
    }
    let failure = shared.with_store(|s| s.list_failures.get_mut(&res.key()).and_then(Vec::pop));
    if let Some(code) = failure {
        return json_response(
            code,
            &status_value(code, "InternalError", "injected list failure"),
        );
    }
    let sel = selectors(&query);
    let limit: usize = query.get("limit").and_then(|l| l.parse().ok()).unwrap_or(0);
    let offset: usize = query
        .get("continue")
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    shared.with_store(|s| {
        let all: Vec<Value> = s.matching(&res, &namespace, &sel).cloned().collect();
        let end = if limit == 0 {
            all.len()
        } else {
            (offset + limit).min(all.len())
        };
        let items: Vec<Value> = all
            .get(offset.min(all.len())..end)
            .unwrap_or_default()
            .to_vec();
        let mut metadata = json!({"resourceVersion": s.rv.to_string()});
        if end < all.len() {
            metadata["continue"] = json!(end.to_string());
        }
        json_response(
            200,
            &json!({
                "kind": format!("{}List", res.kind),
                "apiVersion": res.api_version(),
                "metadata": metadata,
                "items": items,
            }),
        )
    })
}
