#!/usr/bin/env bash
# What `make demo` and `make test` need from the machine, checked before either runs anything.
#
#   scripts/prerequisites.sh demo|test      check; install missing Debian packages (as root, with apt-get)
#   scripts/prerequisites.sh --list         the table the README's set-up paragraph must show
#
# Each missing prerequisite is one line on stderr with the command that fixes it, and the exit status
# is 1. Debian packages are installed here, once, before any test starts: no test or fixture installs
# anything. The Makefile passes the interpreters it found as PYTHON, PYTHON312 and PYTHON313.
set -uo pipefail

# name | needed by | how it gets there (what the README says)
PREREQUISITES=(
	"Python 3.11|demo test|checked: under pyenv or \`python3.11\` on PATH (\`make … PYTHON=…\` picks another)"
	"Python 3.12|test|checked: under pyenv or \`python3.12\` on PATH (\`PYTHON312=…\`)"
	"Python 3.13|test|checked: under pyenv or \`python3.13\` on PATH (\`PYTHON313=…\`)"
	"Node.js 20+ with npm|demo test|checked: \`node\` and \`npm\` on PATH"
	"git|test|Debian package: installed by \`make test\` as root"
	"chromium|test|Debian package: installed by \`make test\` as root (the console's browser tests)"
	"spin|test|Debian package: installed by \`make test\` as root (the protocol's model check)"
	"gcc|test|Debian package: installed by \`make test\` as root (spin compiles its verifier with it)"
)
# Debian packages this script installs, as package:command.
DEBIAN_PACKAGES=(git:git chromium:chromium spin:spin gcc:gcc)
APT_LISTS=/var/lib/apt/lists
# Package lists older than this (minutes) are refreshed before an install.
APT_LISTS_MAX_AGE_MIN=1440

missing=0

say_missing() {
	echo "orderflow: make $TARGET needs $1" >&2
	missing=1
}

# needs TARGET ROW_NAME: whether `make TARGET` needs the prerequisite of that name.
needs() {
	[[ " $(needed_by "$2") " == *" $1 "* ]]
}

check_python() {
	local version=$1 interpreter=$2 variable=$3 wanted found
	wanted=${version/,/.}
	found=$("$interpreter" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || found=""
	if [[ "$found" != "$wanted" ]]; then
		local seen="$interpreter is Python $found"
		[[ -n "$found" ]] || seen="$interpreter is not a Python"
		[[ -n "$interpreter" ]] || seen="none found"
		say_missing "Python $wanted: pyenv install $wanted, or make $TARGET $variable=/path/to/python$wanted ($variable: $seen)"
	elif ! "$interpreter" -c 'import ensurepip, venv' 2>/dev/null; then
		say_missing "Python $wanted with venv: apt-get install -y python$wanted-venv, or pyenv install $wanted ($interpreter has no ensurepip)"
	fi
}

check_node() {
	if ! command -v node >/dev/null || ! command -v npm >/dev/null \
		|| ! node -e 'process.exit(parseInt(process.versions.node, 10) >= 20 ? 0 : 1)' 2>/dev/null; then
		say_missing "Node.js 20 or newer with npm on PATH: apt-get install -y nodejs npm (Debian 13 or newer), or any Node.js 20+ install"
	fi
}

apt_lists_fresh() {
	[[ -n "$(find "$APT_LISTS" -maxdepth 1 -name '*_Packages*' -mmin "-$APT_LISTS_MAX_AGE_MIN" 2>/dev/null)" ]]
}

apt_install() {
	local log
	log=$(mktemp)
	export DEBIAN_FRONTEND=noninteractive
	# Lists that are missing or old can name versions the mirror no longer has: refresh them first,
	# and once more if the install still fails.
	if ! apt_lists_fresh; then
		echo "orderflow: apt-get update (the package lists are empty or older than a day)"
		apt-get update -q >>"$log" 2>&1
	fi
	echo "orderflow: installing Debian packages: apt-get install -y $*"
	if apt-get install -y -q "$@" >>"$log" 2>&1; then
		rm -f "$log"
		return 0
	fi
	if apt-get update -q >>"$log" 2>&1 && apt-get install -y -q "$@" >>"$log" 2>&1; then
		rm -f "$log"
		return 0
	fi
	tail -n 5 "$log" >&2
	rm -f "$log"
	return 1
}

check_debian_packages() {
	local entry package command
	local -a absent=()
	for entry in "${DEBIAN_PACKAGES[@]}"; do
		package=${entry%%:*} command=${entry#*:}
		needs "$TARGET" "$package" || continue
		command -v "$command" >/dev/null || absent+=("$package")
	done
	((${#absent[@]})) || return 0
	if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
		say_missing "Debian packages ${absent[*]}: apt-get install -y ${absent[*]} (as root)"
		return 0
	fi
	if apt_install "${absent[@]}"; then
		for entry in "${DEBIAN_PACKAGES[@]}"; do
			package=${entry%%:*} command=${entry#*:}
			[[ " ${absent[*]} " == *" $package "* ]] || continue
			command -v "$command" >/dev/null \
				|| say_missing "Debian package $package, installed without its $command command: apt-get install --reinstall -y $package"
		done
		return 0
	fi
	say_missing "Debian packages ${absent[*]}, which apt-get could not install (its last lines above): apt-get install -y ${absent[*]}"
}

needed_by() {
	local row name targets
	for row in "${PREREQUISITES[@]}"; do
		IFS='|' read -r name targets _ <<<"$row"
		[[ "$name" == "$1" ]] && { echo "$targets"; return; }
	done
}

list() {
	local row name targets how
	echo "| prerequisite | \`make demo\` | \`make test\` | how it gets there |"
	echo "|---|---|---|---|"
	for row in "${PREREQUISITES[@]}"; do
		IFS='|' read -r name targets how <<<"$row"
		local demo=" " test=" "
		needs demo "$name" && demo="✓"
		needs test "$name" && test="✓"
		echo "| $name | $demo | $test | $how |"
	done
}

case "${1:-}" in
--list) list; exit 0 ;;
demo | test) TARGET=$1 ;;
*) echo "usage: $0 demo|test|--list" >&2; exit 2 ;;
esac

needs "$TARGET" "Python 3.11" && check_python "3,11" "${PYTHON:-}" PYTHON
needs "$TARGET" "Python 3.12" && check_python "3,12" "${PYTHON312:-}" PYTHON312
needs "$TARGET" "Python 3.13" && check_python "3,13" "${PYTHON313:-}" PYTHON313
needs "$TARGET" "Node.js 20+ with npm" && check_node
check_debian_packages
exit "$missing"
