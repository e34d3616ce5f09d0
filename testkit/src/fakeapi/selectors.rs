//! Label and field selectors, and the query string.

use super::*;

/// Label and field selectors of a list or watch.
#[derive(Clone, Debug, Default)]
pub(super) struct Selectors {
    pub(super) labels: Vec<(String, Op, String)>,
    pub(super) fields: Vec<(String, Op, String)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Op {
    Eq,
    Ne,
    Exists,
    NotExists,
}

pub(super) fn parse_selector(s: &str) -> Vec<(String, Op, String)> {
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            if let Some((k, v)) = t.split_once("!=") {
                (k.trim().into(), Op::Ne, v.trim().into())
            } else if let Some((k, v)) = t.split_once("==") {
                (k.trim().into(), Op::Eq, v.trim().into())
            } else if let Some((k, v)) = t.split_once('=') {
                (k.trim().into(), Op::Eq, v.trim().into())
            } else if let Some(k) = t.strip_prefix('!') {
                (k.trim().into(), Op::NotExists, String::new())
            } else {
                (t.into(), Op::Exists, String::new())
            }
        })
        .collect()
}

impl Selectors {
    pub(super) fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        let label_ok = self.labels.iter().all(|(k, op, v)| {
            let got = labels.get(k).and_then(Value::as_str);
            match op {
                Op::Eq => got == Some(v.as_str()),
                Op::Ne => got != Some(v.as_str()),
                Op::Exists => got.is_some(),
                Op::NotExists => got.is_none(),
            }
        });
        let field_ok = self.fields.iter().all(|(path, op, v)| {
            let mut cur = obj;
            for part in path.split('.') {
                cur = &cur[part];
            }
            let got = match cur {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            match op {
                Op::Eq => got == *v,
                Op::Ne => got != *v,
                Op::Exists => !cur.is_null(),
                Op::NotExists => cur.is_null(),
            }
        });
        label_ok && field_ok
    }
}

pub(super) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(super) fn parse_query(q: Option<&str>) -> HashMap<String, String> {
    q.unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}
