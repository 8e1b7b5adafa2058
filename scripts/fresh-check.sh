#!/usr/bin/env bash
# `make test` as CI runs it: a fresh clone of the current commit in a temporary folder, CI=true, no
# venvs or node_modules carried over. Uncommitted changes are not in the clone. A `shared` folder
# beside this checkout (the Azure resource type definitions some infrastructure tests compare with) is
# copied beside the clone, read-only, when there is one.
#
#   make fresh-check                       the clone keeps the machine's pip and npm caches
#   PIP_NO_CACHE_DIR=1 make fresh-check    pip downloads every requirement again
#
# Prints where the log is; exits with make test's status. The folder is removed when the run passes.
set -euo pipefail
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
commit=$(git -C "$repo" rev-parse HEAD)
work=$(mktemp -d "${TMPDIR:-/tmp}/orderflow-fresh.XXXXXX")
log="$work/make-test.log"

git clone --quiet --no-hardlinks "$repo" "$work/main"
git -C "$work/main" checkout --quiet --detach "$commit"
if [[ -d "$repo/../shared" ]]; then
	cp -r "$repo/../shared" "$work/shared"
	chmod -R a-w "$work/shared"
fi
echo "orderflow: make test in a fresh clone of ${commit:0:12} at $work/main; log: $log"
status=0
started=$SECONDS
(cd "$work/main" && CI=true bash .ci/run </dev/null) >"$log" 2>&1 || status=$?
# What make test installed and what each test runner concluded, then the log's end.
grep -E '^orderflow: |^=+ .*(passed|failed|error).* in [0-9.]+s' "$log" || true
tail -n 5 "$log"
echo "orderflow: make test took $((SECONDS - started)) s"
if ((status == 0)); then
	cp "$log" "${TMPDIR:-/tmp}/orderflow-fresh-check.log"
	chmod -R u+w "$work"
	rm -rf "$work"
	echo "orderflow: fresh clone passed (log kept as ${TMPDIR:-/tmp}/orderflow-fresh-check.log)"
else
	echo "orderflow: fresh clone failed (exit $status); kept $work for reading" >&2
fi
exit "$status"
