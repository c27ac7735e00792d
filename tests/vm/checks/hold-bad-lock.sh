# --hold on a function, and on an address no lock of the type ever has: one clear line
# each, and the lock contention of the same run is still recorded.
. /checks/lib
# Either hold method resolves the lock the same way; kprobes where fentry is missing.
method=auto
has_feature fentry || { need kprobe; method=kprobe; }
lockpath record --hold vfs_read --hold-method $method --lock -o /tmp/hold-bad-fn.json -- /bin/lock-storm --seconds 1 \
    2> /tmp/hold-bad-fn.err || { cat /tmp/hold-bad-fn.err; fail "the run failed"; }
cat /tmp/hold-bad-fn.err
grep -q "is a function, not a lock" /tmp/hold-bad-fn.err || fail "no line says vfs_read is not a lock"
grep -q '"family": *"lock"' /tmp/hold-bad-fn.json || fail "the lock family was not recorded"
lockpath record --hold mutex:0xffff888000000000 --hold-method $method --lock -o /tmp/hold-bad-addr.json -- \
    /bin/lock-storm --seconds 1 2> /tmp/hold-bad-addr.err \
    || { cat /tmp/hold-bad-addr.err; fail "the run failed"; }
cat /tmp/hold-bad-addr.err
grep -q "was not taken" /tmp/hold-bad-addr.err || fail "no line says the lock was never taken"
grep -q '"family": *"hold"' /tmp/hold-bad-addr.json || fail "the hold family was not attached"
grep -q '"family": *"lock"' /tmp/hold-bad-addr.json || fail "the lock family was not recorded"
pass "a function and an address never taken: one line each, the run went on"
