#!/usr/bin/env bash
# Creates the tooling venv (default ../venv, outside the repo: torch from PyPI is several GB)
# and installs scripts/requirements.txt into it. Usage: scripts/setup-venv.sh [DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${1:-$here/../../venv}
python3 -m venv "$venv"
"$venv/bin/pip" install -q -r "$here/requirements.txt"
echo "venv ready: $venv (run fixture scripts with $venv/bin/python)"
