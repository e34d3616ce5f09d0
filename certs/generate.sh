#!/usr/bin/env bash
# Generates a private CA and a serving certificate for the knative-ha-webhook Service, for installs
# without cert-manager and for local runs of `knative-ha-webhook serve --tls-cert --tls-key`.
#
# Usage: certs/generate.sh [-s SERVICE] [-n NAMESPACE] [-o OUT_DIR] [-d DAYS] [-i IMAGE_REPO] [-f]
#   or the environment: SERVICE, NAMESPACE, OUT_DIR, DAYS, IMAGE_REPO, FRESH_CA=1 (flags win).
#   -f: make a new CA even when OUT_DIR already holds ca.crt + ca.key (otherwise they are reused; a
#       reused CA that ends before the new certificate would is renewed with its own key first).
#   -i: the image repository you pushed (docs/install.md "Getting an image"), put in the printed helm line.
# Defaults: SERVICE=knative-ha-webhook NAMESPACE=knative-ha-webhook OUT_DIR=./certs-out DAYS=365.
#
# SERVICE must be the chart's Service name: the release's full name (`helm install knative-ha-webhook
# ...` gives knative-ha-webhook; another release name R gives R-knative-ha-webhook).
# Writes OUT_DIR/ca.crt, ca.key, tls.crt, tls.key. The serving certificate carries the DNS names
# SERVICE, SERVICE.NAMESPACE, SERVICE.NAMESPACE.svc, SERVICE.NAMESPACE.svc.cluster.local, plus
# localhost and 127.0.0.1 for local runs. Keys are ECDSA P-256 (PKCS#8). Needs openssl >= 1.1.1.
set -euo pipefail

SERVICE=${SERVICE:-knative-ha-webhook}
NAMESPACE=${NAMESPACE:-knative-ha-webhook}
OUT_DIR=${OUT_DIR:-./certs-out}
DAYS=${DAYS:-365}
FRESH_CA=${FRESH_CA:-0}
IMAGE_REPO=${IMAGE_REPO:-}

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }
while getopts "s:n:o:d:i:fh" opt; do
  case $opt in
    s) SERVICE=$OPTARG ;;
    n) NAMESPACE=$OPTARG ;;
    o) OUT_DIR=$OPTARG ;;
    d) DAYS=$OPTARG ;;
    i) IMAGE_REPO=$OPTARG ;;
    f) FRESH_CA=1 ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done

dns_label='^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'
for v in "$SERVICE" "$NAMESPACE"; do
  if ! [[ $v =~ $dns_label ]] || [ ${#v} -gt 63 ]; then
    echo "generate.sh: '$v' is not a valid Service/namespace name (lowercase DNS label, at most 63 characters)" >&2
    exit 2
  fi
done
[[ $DAYS =~ ^[1-9][0-9]*$ ]] || { echo "generate.sh: DAYS must be a positive integer, got '$DAYS'" >&2; exit 2; }
command -v openssl >/dev/null || { echo "generate.sh: openssl not found" >&2; exit 1; }

mkdir -p "$OUT_DIR"
umask 077
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 1. The CA (self-signed, may only sign certificates). An existing CA in OUT_DIR is reused (renewal
#    keeps the caBundle valid) unless -f is given.
if [ "$FRESH_CA" = 1 ] || [ ! -s "$OUT_DIR/ca.crt" ] || [ ! -s "$OUT_DIR/ca.key" ]; then
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$OUT_DIR/ca.key" 2>/dev/null
  openssl req -x509 -new -key "$OUT_DIR/ca.key" -sha256 -days "$((DAYS * 2))" \
    -subj "/CN=${SERVICE}-ca" \
    -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -addext "subjectKeyIdentifier=hash" \
    -out "$OUT_DIR/ca.crt"
  ca_note="a new CA"
elif ! openssl x509 -in "$OUT_DIR/ca.crt" -noout -checkend "$(((DAYS + 1) * 86400))" >/dev/null; then
  # The CA ends before the new certificate would (or has ended): a chain that expires under a leaf
  # that still looks valid stops the API server calling the webhook, silently with
  # failurePolicy Ignore. Renew it with its own key and subject: certificates it signed still
  # verify against the renewed CA, and the old caBundle keeps working until the old CA ends.
  ca_end=$(openssl x509 -in "$OUT_DIR/ca.crt" -noout -enddate | cut -d= -f2)
  openssl x509 -in "$OUT_DIR/ca.crt" -signkey "$OUT_DIR/ca.key" -sha256 -days "$((DAYS * 2))" \
    -set_serial "0x$(openssl rand -hex 16)" -out "$work/ca.crt" 2>/dev/null \
    || { echo "generate.sh: cannot renew the CA in $OUT_DIR (does ca.key belong to ca.crt?); use -f for a new CA" >&2; exit 1; }
  mv "$work/ca.crt" "$OUT_DIR/ca.crt"
  ca_note="the CA in $OUT_DIR, renewed for $((DAYS * 2)) days with its own key (it ends $ca_end, before this certificate would); set tls.caBundle to the new ca.crt (the helm line below does)"
  echo "generate.sh: renewed the CA in $OUT_DIR: it ends $ca_end, before the new $DAYS-day certificate would" >&2
else
  ca_note="the existing CA in $OUT_DIR, valid until $(openssl x509 -in "$OUT_DIR/ca.crt" -noout -enddate | cut -d= -f2) (use -f for a new one)"
fi

# 2. The serving key and certificate, signed by the CA.
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$OUT_DIR/tls.key" 2>/dev/null
cat > "$work/ext.cnf" <<EXT
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = DNS:${SERVICE},DNS:${SERVICE}.${NAMESPACE},DNS:${SERVICE}.${NAMESPACE}.svc,DNS:${SERVICE}.${NAMESPACE}.svc.cluster.local,DNS:localhost,IP:127.0.0.1
EXT
openssl req -new -key "$OUT_DIR/tls.key" -subj "/CN=${SERVICE}.${NAMESPACE}.svc" -out "$work/tls.csr"
openssl x509 -req -in "$work/tls.csr" -CA "$OUT_DIR/ca.crt" -CAkey "$OUT_DIR/ca.key" \
  -CAcreateserial -CAserial "$work/ca.srl" -sha256 -days "$DAYS" \
  -extfile "$work/ext.cnf" -out "$OUT_DIR/tls.crt" 2>/dev/null
chmod 600 "$OUT_DIR/ca.key" "$OUT_DIR/tls.key"
chmod 644 "$OUT_DIR/ca.crt" "$OUT_DIR/tls.crt"

openssl verify -CAfile "$OUT_DIR/ca.crt" "$OUT_DIR/tls.crt" >/dev/null

secret="${SERVICE}-tls"
# The chart names its Service after the release's full name: pick a release name (or a
# fullnameOverride) that yields SERVICE.
release=knative-ha-webhook
override=""
if [ "$SERVICE" != knative-ha-webhook ]; then
  if [ "${SERVICE%-knative-ha-webhook}" != "$SERVICE" ]; then
    release="${SERVICE%-knative-ha-webhook}"
  else
    release="$SERVICE"
    override=" --set fullnameOverride=${SERVICE}"
  fi
fi
# No image is published: the chart refuses to render without the one you pushed.
image_repo=${IMAGE_REPO:-REGISTRY/knative-ha-webhook}
image_note=""
if [ -z "$IMAGE_REPO" ]; then
  image_note="
  (REGISTRY/knative-ha-webhook: the image you built and pushed, see \"Getting an image\" in
  docs/install.md; pass -i REPO to have it filled in)"
fi
cat <<MSG
Wrote $OUT_DIR/{tls.crt,tls.key} for ${SERVICE}.${NAMESPACE}.svc (valid $DAYS days), signed by $ca_note.
Keep ca.key offline; the cluster only needs tls.crt, tls.key and the CA certificate.

Install without cert-manager:

  kubectl create namespace ${NAMESPACE}
  kubectl -n ${NAMESPACE} create secret tls ${secret} --cert=$OUT_DIR/tls.crt --key=$OUT_DIR/tls.key
  helm install ${release} charts/knative-ha-webhook --namespace ${NAMESPACE} \\
    --set image.repository=${image_repo} \\
    --set certManager.enabled=false${override} \\
    --set tls.existingSecret=${secret} \\
    --set tls.caBundle=\$(base64 -w0 $OUT_DIR/ca.crt)${image_note}

Run locally:

  knative-ha-webhook serve --policy-file examples/policy.yaml --tls-cert $OUT_DIR/tls.crt --tls-key $OUT_DIR/tls.key
  curl --cacert $OUT_DIR/ca.crt https://localhost:8443/mutate ...
MSG
