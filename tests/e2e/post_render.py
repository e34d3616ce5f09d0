"""stdin: a Helm rendering; stdout: the same, webhook clientConfig.service -> url (see loopback-webhook)."""
import os
import sys

import yaml

base = os.environ["KHW_E2E_WEBHOOK_URL"].rstrip("/")
docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
for d in docs:
    if d.get("kind") in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for w in d.get("webhooks", []):
            svc = w["clientConfig"].pop("service", None)
            if svc is not None:
                w["clientConfig"]["url"] = base + svc.get("path", "/")
yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)
