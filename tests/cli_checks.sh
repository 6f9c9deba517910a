# The checks the command-line tests share; source it after setting $dir (the scratch
# directory). Failures are counted in $failures and the script goes on.
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }
# run EXPECTED_EXIT NAME CMD...: runs CMD, output in $dir/NAME.out and .err
run() {
  local want=$1 name=$2
  shift 2
  "$@" >"$dir/$name.out" 2>"$dir/$name.err"
  local got=$?
  [ "$got" -eq "$want" ] || { fail "$name: exit $got, expected $want"; tail -20 "$dir/$name.err"; }
}
contains() {  # FILE TEXT
  grep -qF -- "$2" "$1" || { fail "$1 lacks '$2'"; sed 's/^/    /' "$1" | tail -20; }
}
