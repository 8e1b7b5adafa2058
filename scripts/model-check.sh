#!/usr/bin/env bash
# make model-check: the protocol's model (model/orderflow.pml) searched exhaustively at a larger bound
# than make test's, in a temporary folder (spin and pan write their files to the working directory).
#
#   MODEL_SAFETY    -D flags of the safety search (assertions, invalid end states)
#   MODEL_LIVENESS  -D flags of the liveness search (every order terminates, under weak fairness)
#   MODEL_FEATURES  the request features searched each on its own, with a failure (make test: without)
#
# Then the protocol machine's runs, random and ten times make test's, against model/moves.txt.
# Prints pan's figures for each search; exits 1 when either finds an error (its trail is kept).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
SAFETY=${MODEL_SAFETY:--DNS=2 -DF=1}
LIVENESS=${MODEL_LIVENESS:--DNS=2 -DF=1}
FEATURES=${MODEL_FEATURES:-CANCEL SUSPEND RESUBMIT REVIEW BUDGET REPLIES}
work=$(mktemp -d)
status=0

search() {
	local name=$1 defines=$2 cflags=$3 runflags=$4 dir="$work/$1" out
	mkdir -p "$dir" && cp "$REPO/model/orderflow.pml" "$dir/"
	# shellcheck disable=SC2086 # the flags are words
	(cd "$dir" && spin -a $defines orderflow.pml >/dev/null && gcc -O2 -DCOLLAPSE -DNFAIR=4 $cflags -o pan pan.c)
	echo "model-check $name ($defines):"
	# shellcheck disable=SC2086
	out=$(cd "$dir" && ./pan -m1000000 $runflags 2>&1)
	grep -E "errors:|states, stored|elapsed time|assertion violated|acceptance cycle" <<<"$out" | sed 's/^/  /'
	if ! grep -q "errors: 0" <<<"$out"; then
		echo "  counterexample: $dir/orderflow.pml.trail (spin -t -p $defines orderflow.pml in $dir)"
		status=1
	fi
}

search safety "$SAFETY" -DNOCLAIM ""
search liveness "$LIVENESS" "" "-a -f"
for feature in $FEATURES; do
	search "$feature" "-D$feature -DF=1" -DNOCLAIM ""
done
python3 "$REPO/scripts/model_moves.py" --check || status=1
echo "model-check: the protocol machine's random runs against the model's changes"
(cd "$REPO" && MACHINE_RUNS_RANDOM=1 .venv/bin/pytest -p no:cacheprovider -q tests/model/test_machine_runs.py \
	-k protocol_machine) || status=1
((status)) || rm -rf "$work"
exit "$status"
