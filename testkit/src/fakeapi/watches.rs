//! WATCH: chunked streams of events from the log, BOOKMARKs and 410.

use super::*;

pub(super) fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = json!({"type": kind, "object": object}).to_string();
    line.push('\n');
    Bytes::from(line)
}

/// Events of the log after `since` that a watch with these parameters sees.
pub(super) fn pending_events(
    store: &Store,
    res: &ResourceDef,
    namespace: &str,
    sel: &Selectors,
    since: u64,
) -> Vec<(u64, Bytes)> {
    let key = res.key();
    store
        .log
        .iter()
        .filter(|e| {
            e.rv > since && e.res == key && (namespace.is_empty() || e.namespace == namespace)
        })
        .filter_map(|e| {
            let now = sel.matches(&e.object);
            let before = e.old.as_ref().is_some_and(|o| sel.matches(o));
            let kind = match (e.kind, before, now) {
                ("ADDED", _, true) => "ADDED",
                ("DELETED", true, _) => "DELETED",
                ("MODIFIED", true, true) => "MODIFIED",
                ("MODIFIED", false, true) => "ADDED",
                ("MODIFIED", true, false) => "DELETED",
                _ => return None,
            };
            Some((e.rv, event_line(kind, &e.object)))
        })
        .collect()
}

pub(super) fn start_watch(
    shared: Arc<Shared>,
    res: ResourceDef,
    namespace: String,
    query: HashMap<String, String>,
) -> Response {
    let sel = selectors(&query);
    let bookmarks = matches!(
        query.get("allowWatchBookmarks").map(String::as_str),
        Some("true" | "1")
    );
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let since_raw = query.get("resourceVersion").cloned().unwrap_or_default();
    let (tx, rx) = futures::channel::mpsc::channel::<Result<Bytes, Infallible>>(64);
    let mut kill = shared.kill.subscribe();
    kill.mark_unchanged();
    let mut changed = shared.changed.subscribe();
    // A watch that raced with `set_unavailable(true)` (admitted before,
    // subscribed after the watches were dropped) is refused too.
    if shared.with_store(|s| s.unavailable) {
        return json_response(503, &status_value(503, "ServiceUnavailable", "unavailable"));
    }
    // Initial backlog, computed under the lock together with subscribing.
    let (initial, mut since, gone) = shared.with_store(|s| {
        changed.mark_unchanged();
        match since_raw.parse::<u64>() {
            Ok(n) if n > 0 => {
                if n < s.compacted {
                    (Vec::new(), n, true)
                } else {
                    let ev = pending_events(s, &res, &namespace, &sel, n);
                    let last = ev.last().map(|e| e.0).unwrap_or(n);
                    (ev.into_iter().map(|e| e.1).collect(), last, false)
                }
            }
            // "" or "0": the current state as ADDED events.
            _ => {
                let ev: Vec<Bytes> = s
                    .matching(&res, &namespace, &sel)
                    .map(|o| event_line("ADDED", o))
                    .collect();
                (ev, s.rv, false)
            }
        }
    });
    let kind = res.kind.clone();
    let api_version = res.api_version();
    tokio::spawn(async move {
        let mut tx = tx;
        let gone_event = |rv: u64| {
            event_line(
                "ERROR",
                &status_value(410, "Expired", &format!("too old resource version: {rv}")),
            )
        };
        if gone {
            let _ = tx.send(Ok(gone_event(since))).await;
            return;
        }
        for line in initial {
            if tx.send(Ok(line)).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let mut bookmark = tokio::time::interval(BOOKMARK_EVERY);
        bookmark.tick().await;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return,
                k = kill.changed() => {
                    if k.is_err() {
                        return;
                    }
                    let send_gone = kill.borrow().1;
                    if send_gone {
                        let _ = tx.send(Ok(gone_event(since))).await;
                    }
                    return;
                }
                c = changed.changed() => {
                    if c.is_err() {
                        return;
                    }
                    changed.mark_unchanged();
                    let (events, rv_now, expired) = shared.with_store(|s| {
                        (pending_events(s, &res, &namespace, &sel, since), s.rv, since < s.compacted)
                    });
                    if expired {
                        let _ = tx.send(Ok(gone_event(since))).await;
                        return;
                    }
                    for (_, line) in events {
                        if tx.send(Ok(line)).await.is_err() {
                            return;
                        }
                    }
                    // Everything up to rv_now was seen (events of other
                    // resources move the watch on too).
                    since = rv_now;
                }
                _ = bookmark.tick(), if bookmarks => {
                    let obj = json!({"kind": kind, "apiVersion": api_version,
                        "metadata": {"resourceVersion": since.to_string()}});
                    if tx.send(Ok(event_line("BOOKMARK", &obj))).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(rx))
        .expect("watch response")
}
