# On a kernel without lock:contention_*, forcing the tracepoint method fails with one
# clear line, a non-zero exit and no profile.
. /checks/lib
has_feature lock_tracepoint && skip "kernel $LAB_KERNEL has the lock tracepoints"
out=$(lockpath record --lock-method tracepoint -o /tmp/none.json -- /bin/true 2>&1)
rc=$?
echo "$out"
[ $rc -ne 0 ] || fail "--lock-method tracepoint succeeded without the tracepoints"
[ "$(echo "$out" | grep -c .)" -eq 1 ] || fail "expected one error line, got: $out"
echo "$out" | grep -q "contention_begin" || fail "the error does not name the tracepoint"
[ ! -e /tmp/none.json ] || fail "a profile was written"
pass "exit $rc: $out"
