#!/usr/bin/env python3
"""Runs the Python client tests (tests/clients/test_*.py) with the interpreter of the client venv.

    run_client_tests.py --npu build/bin/npu --venv build/clientvenv

Exits 77 (ctest's SKIP_RETURN_CODE) when the venv does not exist: `make client-venv` creates it
from scripts/client-requirements.txt.
"""
import argparse
import os
import subprocess
import sys

SKIP = 77


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--npu", required=True, help="the npu binary to serve with")
    ap.add_argument("--venv", required=True, help="venv with scripts/client-requirements.txt installed")
    ap.add_argument("tests", nargs="*", help="unittest names (default: every test_*.py here)")
    args = ap.parse_args()

    python = os.path.abspath(os.path.join(args.venv, "bin", "python"))
    if not os.path.exists(python):
        print(f"SKIP: no client venv at {args.venv}; `make client-venv` creates it "
              "(pip install -r scripts/client-requirements.txt)")
        return SKIP
    if not os.access(args.npu, os.X_OK):
        print(f"error: {args.npu} is not an executable npu binary", file=sys.stderr)
        return 1

    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, XDNA_NPU_BINARY=os.path.abspath(args.npu))
    cmd = [python, "-m", "unittest"]
    cmd += ["-v", *args.tests] if args.tests else ["discover", "-v", "-s", here, "-p", "test_*.py"]
    return subprocess.call(cmd, cwd=here, env=env)


if __name__ == "__main__":
    sys.exit(main())
