#!/usr/bin/env bash
# Tests of certs/generate.sh's CA reuse (called by scripts/test; charts/test.sh checks the SANs and
# the chain of a fresh run):
#  - a reused CA that ends before the new certificate would is renewed with its own key, so the new
#    certificate never outlives its chain and the certificates the old CA signed still verify;
#  - a reused CA that outlives the new certificate is kept byte for byte.
# Needs openssl. Prints one line per check and `certs: N passed, M failed`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "PASS $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1${2:+: $2}"; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
end() { date -d "$(openssl x509 -in "$1" -noout -enddate | cut -d= -f2)" +%s; }
pub() { openssl pkey -in "$1" -pubout 2>/dev/null || openssl x509 -in "$1" -noout -pubkey; }

# A CA that ends in 2 days (generate.sh makes CAs for twice the certificate's days), then a
# 365-day certificate from the same directory.
certs/generate.sh -o "$work/out" -d 1 >/dev/null 2>&1 || fail "generate.sh -d 1"
cp "$work/out/tls.crt" "$work/old-tls.crt"
pub "$work/out/ca.key" >"$work/ca-key.pub"
if msg=$(certs/generate.sh -o "$work/out" -d 365 2>&1 >/dev/null); then
  ca_end=$(end "$work/out/ca.crt") leaf_end=$(end "$work/out/tls.crt")
  if [ "$ca_end" -ge "$leaf_end" ]; then
    pass "a CA ending before the new certificate is renewed: CA until $(date -ud @"$ca_end" +%F), certificate until $(date -ud @"$leaf_end" +%F)"
  else
    fail "the 365-day certificate outlives its CA" "CA $(date -ud @"$ca_end" +%F) < certificate $(date -ud @"$leaf_end" +%F)"
  fi
  case $msg in
    *"renewed the CA"*) pass "the renewal is said on stderr: $msg" ;;
    *) fail "no message about the renewed CA" "$msg" ;;
  esac
  if openssl verify -CAfile "$work/out/ca.crt" "$work/out/tls.crt" >/dev/null 2>&1 \
    && openssl verify -CAfile "$work/out/ca.crt" "$work/old-tls.crt" >/dev/null 2>&1 \
    && cmp -s <(openssl x509 -in "$work/out/ca.crt" -noout -pubkey) "$work/ca-key.pub"; then
    pass "the renewed CA keeps its key: the new and the old certificate verify against it"
  else
    fail "the renewed CA does not verify the new and the old certificate with the same key"
  fi
else
  fail "generate.sh -d 365 over a CA ending in 2 days" "$msg"
fi

# A CA that outlives the new certificate is reused as it is.
cp "$work/out/ca.crt" "$work/ca-before.crt"
if certs/generate.sh -o "$work/out" -d 30 >/dev/null 2>&1 && cmp -s "$work/ca-before.crt" "$work/out/ca.crt"; then
  pass "a CA that outlives the new certificate is reused byte for byte"
else
  fail "a CA that outlives the new certificate was changed"
fi

echo "certs: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
