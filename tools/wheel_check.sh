#!/usr/bin/env bash
# moecert as a user installs it, not as the tests do (editable): build the wheel, install it
# into a fresh venv outside the checkout, and from a folder outside the checkout run
# `moecert list`, a small `moecert run` (5 cases, torch backend, worker processes) and the
# pytest plugin on the same cases. An editable install hid that the wheel had no
# moecert.conformance.harness.checks (issue 40). Part of the README's test command.
#
#   tools/wheel_check.sh          (from anywhere; python3 on PATH makes the venv)
#
# The venv gets torch==2.13.0 first (the CPU build CI pins), then the wheel with [test].
# Everything lives in one temporary folder, removed at the end. Exit 1 when a step fails.
set -euo pipefail
checkout=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/moecert-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$SECONDS
step() { echo "wheel_check: $* ($((SECONDS - start)) s)"; }

# a copy of the sources: the in-tree build writes build/ and *.egg-info beside them
mkdir "$work/src"
for name in pyproject.toml setup.py README.md reference kernels conformance reports; do
    cp -r "$checkout/$name" "$work/src/"
done
python3 -m venv "$work/venv"
pip="$work/venv/bin/python -m pip"
$pip wheel -q --no-deps -w "$work/dist" "$work/src"
wheel=$(ls "$work"/dist/moecert-*.whl)
step "built $(basename "$wheel")"
$pip install -q torch==2.13.0
$pip install -q "$wheel[test]"
step "installed into a fresh venv"

cd "$work"  # nothing of the checkout on sys.path from here
export PATH="$work/venv/bin:$PATH"
python - "$work/venv" <<'EOF'
import sys
import moecert.conformance.harness.checks as checks
# the installed wheel, not the checkout
assert checks.__file__.startswith(sys.argv[1]), checks.__file__
EOF
moecert list > list.txt
step "moecert list: $(grep -c '' list.txt) lines"
moecert run --backend torch --scheme gptq-int4 -k M17 -n 1 --no-cache --results results \
    > run.txt
tail -1 run.txt
step "moecert run"
python -m pytest --pyargs moecert.conformance -p no:cacheprovider -q \
    --moecert-suite smoke --moecert-backend torch --moecert-scheme gptq-int4 -k M17 | tail -1
step "pytest plugin: the wheel works"
