#!/usr/bin/env python3
"""The JSON Schema of defaultPolicy.spec in values.schema.json, derived from the CRD.

`check` validates a policy with the CRD's openAPIV3Schema (unknown fields, types, bounds, enums,
patterns) and then semantic rules. Helm validates values with JSON Schema, so the chart carries
the CRD's spec schema translated into it (definitions.policySpec): every object closed
(`additionalProperties: false`, so `replcas` is refused at render), int-or-string as `anyOf`,
`nullable` as a `null` alternative (Helm users drop a default with `key: null`), other
Kubernetes-only keywords dropped. The semantic rules (leader-election timings, budgets that allow
a disruption, ...) cannot be written in JSON Schema: `check` and the server still apply them.

Usage: policy_schema.py CRD.yaml   prints definitions.policySpec as JSON
charts/tests/check_rendered.py checks that values.schema.json holds exactly this.
"""
from __future__ import annotations

import json
import sys

import yaml

DROP = {"nullable", "format", "x-kubernetes-int-or-string"}


def convert(node: dict) -> dict:
    """One CRD schema node as JSON Schema."""
    if node.get("x-kubernetes-int-or-string"):
        integer = {"type": "integer"}
        if "minimum" in node:
            integer["minimum"] = node["minimum"]
        string = {"type": "string"}
        if "pattern" in node:
            string["pattern"] = node["pattern"]
        out = {"description": node["description"]} if "description" in node else {}
        out["anyOf"] = [integer, string] + ([{"type": "null"}] if node.get("nullable") else [])
        return out
    out = {}
    for key, value in node.items():
        if key in DROP:
            continue
        if key == "properties":
            out[key] = {name: convert(child) for name, child in value.items()}
        elif key == "items":
            out[key] = convert(value)
        else:
            out[key] = value
    if node.get("type") == "object" and "properties" in node:
        out["additionalProperties"] = False
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def policy_spec(crd: dict) -> dict:
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return convert(schema)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(json.dumps(policy_spec(yaml.safe_load(f)), indent=2, ensure_ascii=False))
