#!/usr/bin/env bash
# install.sh into a temporary HOME, reusing an already-built build directory (ctest passes it, so
# CI does not build twice). Usage: test_install.sh INSTALL_SH BUILD_DIR
set -euo pipefail

install_sh=$1
build_dir=$(cd "$2" && pwd)
repo=$(cd "$(dirname "$install_sh")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }

home="$tmp/home"
mkdir -p "$home"
npu="$home/.local/bin/npu"
unit="$home/.config/systemd/user/npu-serve.service"
mkdir -p "$tmp/tmpdir"
run_install() { env -u XDG_CONFIG_HOME HOME="$home" TMPDIR="$tmp/tmpdir" "$install_sh" "$@"; }

# What a stray write outside the temporary HOME would change: the real user's install targets and
# install.sh's default build directory; and its TMPDIR must end empty. (The source tree is not
# scanned: other jobs may edit it meanwhile.)
real_config="${XDG_CONFIG_HOME:-$HOME/.config}"
fingerprint() {
  ls -ld --time-style=+%s.%N "$HOME/.local/bin/npu" "$real_config/systemd/user/npu-serve.service" \
    "$repo/build-install" 2>&1 || true
}
before=$(fingerprint)

# 1. Preflight passes here (CI installs every package), then the install.
"$install_sh" --check >"$tmp/check.log" 2>&1 || { cat "$tmp/check.log"; fail "--check failed with every prerequisite installed"; }
grep -q MISSING "$tmp/check.log" && fail "--check reported MISSING with every prerequisite installed"
pass "preflight passes"

run_install --build-dir "$build_dir" >"$tmp/install1.log" 2>&1 || { cat "$tmp/install1.log"; fail "install.sh failed"; }
[ -x "$npu" ] || fail "$npu not installed"
version=$("$npu" --version) || fail "installed npu --version failed"
[[ "$version" == npu\ * ]] || fail "npu --version printed '$version'"
cmp -s "$npu" "$build_dir/bin/npu" || fail "installed npu differs from $build_dir/bin/npu"
grep -q 'systemctl --user enable --now npu-serve' "$tmp/install1.log" || fail "install.sh did not print how to enable the unit"
pass "npu installed and runs: $version"

# 2. The unit: the right ExecStart, keys present, and it parses.
[ -f "$unit" ] || fail "$unit not written"
grep -qx "ExecStart=$npu serve" "$unit" || fail "ExecStart is not '$npu serve': $(grep ExecStart "$unit")"
for key in Restart=on-failure NoNewPrivileges=yes WantedBy=default.target; do
  grep -qx "$key" "$unit" || fail "$unit lacks $key"
done
if grep -Eq -- '--host|0\.0\.0\.0|/dev/' "$unit"; then fail "$unit binds beyond loopback or names a device"; fi
[ -e "$home/.config/systemd/user/default.target.wants/npu-serve.service" ] && fail "install.sh enabled the unit"
if command -v systemd-analyze >/dev/null; then
  mkdir -m 0700 "$tmp/runtime"
  # verify only warns (exit 0) on a bad value, so any output at all is a failure.
  out=$(XDG_RUNTIME_DIR="$tmp/runtime" HOME="$home" systemd-analyze --user verify "$unit" 2>&1) ||
    fail "systemd-analyze verify: $out"
  [ -z "$out" ] || fail "systemd-analyze verify: $out"
  pass "unit verified by systemd-analyze"
else
  pass "unit keys checked (no systemd-analyze)"
fi

# 3. Idempotent: a second run succeeds and leaves the same files.
unit_before=$(cat "$unit")
run_install --build-dir "$build_dir" >"$tmp/install2.log" 2>&1 || { cat "$tmp/install2.log"; fail "second install.sh failed"; }
[ "$(cat "$unit")" = "$unit_before" ] || fail "re-run changed the unit"
"$npu" --version >/dev/null || fail "npu broken after re-run"
leftovers=$(find "$home" -name '.npu*' -o -name '.npu-serve*')
[ -z "$leftovers" ] || fail "temporary files left behind: $leftovers"
pass "re-run is idempotent"

# 4. XDG_CONFIG_HOME is honoured for the unit.
HOME="$home" XDG_CONFIG_HOME="$home/xdg" "$install_sh" --build-dir "$build_dir" >/dev/null 2>&1 ||
  fail "install.sh with XDG_CONFIG_HOME failed"
[ -f "$home/xdg/systemd/user/npu-serve.service" ] || fail "unit not written under XDG_CONFIG_HOME"
HOME="$home" XDG_CONFIG_HOME="$home/xdg" "$install_sh" --uninstall >/dev/null
[ -e "$home/xdg/systemd/user/npu-serve.service" ] && fail "--uninstall left the XDG_CONFIG_HOME unit"
pass "XDG_CONFIG_HOME honoured"

# 5. Nothing written outside the temporary HOME (and the build directory).
[ "$(fingerprint)" = "$before" ] || fail "files outside the temporary HOME changed: $(fingerprint)"
stray=$(find "$tmp/tmpdir" -mindepth 1)
[ -z "$stray" ] || fail "install.sh left files in TMPDIR: $stray"
pass "nothing written outside the temporary HOME"

# 6. --uninstall removes what was installed (an enable link included), and is idempotent too.
mkdir -p "$home/.config/systemd/user/default.target.wants"
ln -s "$unit" "$home/.config/systemd/user/default.target.wants/npu-serve.service"
run_install --uninstall >"$tmp/uninstall.log" 2>&1 || { cat "$tmp/uninstall.log"; fail "--uninstall failed"; }
[ -e "$npu" ] && fail "--uninstall left $npu"
[ -e "$unit" ] && fail "--uninstall left $unit"
[ -L "$home/.config/systemd/user/default.target.wants/npu-serve.service" ] && fail "--uninstall left the enable link"
run_install --uninstall >/dev/null 2>&1 || fail "second --uninstall failed"
pass "--uninstall removes it"

# 7. The preflight fails loud naming a missing prerequisite: a PATH with everything but cmake.
mkdir "$tmp/path"
IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do
  [ -d "$d" ] || continue
  for f in "$d"/*; do
    name=${f##*/}
    [ "$name" = cmake ] && continue
    [ -x "$f" ] && [ ! -e "$tmp/path/$name" ] && ln -s "$f" "$tmp/path/$name"
  done
done
[ -e "$tmp/path/bash" ] || fail "could not build the test PATH"
rc=0
PATH="$tmp/path" "$install_sh" --check >"$tmp/nocmake.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || { cat "$tmp/nocmake.log"; fail "--check passed without cmake"; }
grep -Eq '^ +cmake +MISSING' "$tmp/nocmake.log" || { cat "$tmp/nocmake.log"; fail "--check did not name cmake as MISSING"; }
grep -Eq 'apt-get install -y .*\bcmake\b' "$tmp/nocmake.log" || fail "--check did not say how to get cmake"
grep -q 'scripts/install-deps.sh' "$tmp/nocmake.log" || fail "--check did not point at scripts/install-deps.sh"
rc=0
PATH="$tmp/path" HOME="$home" "$install_sh" --build-dir "$build_dir" >"$tmp/nocmake2.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "install.sh installed without cmake"
[ -e "$npu" ] && fail "install.sh installed npu although the preflight failed"
pass "preflight fails loud without cmake (exit $rc)"
