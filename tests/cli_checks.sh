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
# options_need_values NAME PROGRAM [COMMAND]: every option that PROGRAM [COMMAND] --help
# lists with a value, given last without one, exits 2 with "--opt needs a value: " and
# what it takes, never CLI11's wording ("--opt: 1 required TYPE missing") - but an option
# whose help says what it means given "alone: " takes its value as optional.
options_need_values() {
  local name=$1 prog=$2
  shift 2
  "$prog" "$@" --help >"$dir/$name.help" 2>&1 || fail "$name --help: exit $?"
  local opts opt rc
  opts=$(sed -nE 's/^  (-[a-zA-Z],)?(--[a-z0-9-]+) [^ ].*/\2/p' "$dir/$name.help")
  local alone
  alone=$(tr '\n' ' ' <"$dir/$name.help" | sed -E 's/  +(-[a-zA-Z],)?--/\n--/g' | grep -E 'alone: ' | cut -d' ' -f1)
  opts=$(for opt in $opts; do grep -qxF -- "$opt" <<<"$alone" || echo "$opt"; done)
  [ -n "$opts" ] || fail "$name --help lists no option with a value"
  for opt in $opts; do
    timeout 20 "$prog" "$@" "$opt" >"$dir/$name$opt.nothing" 2>&1
    rc=$?
    [ "$rc" -eq 2 ] || fail "$name $opt without a value: exit $rc, expected 2"
    grep -qE -- "^[^:]+: $opt needs a value: [^ ]" "$dir/$name$opt.nothing" && \
      ! grep -qE "[0-9] required .* missing|Could not convert" "$dir/$name$opt.nothing" || \
      { fail "$name $opt without a value: expected '$opt needs a value: ...'"; head -3 "$dir/$name$opt.nothing"; }
  done
}
