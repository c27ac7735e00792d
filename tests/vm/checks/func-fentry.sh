# --func vfs_read forced to fentry: every read(2) of the workload goes through vfs_read, so
# lockpath's count for the workload is at least its number of reads.
. /checks/lib
if ! has_feature fentry && [ "$(uname -m)" = aarch64 ]; then
    # arm64 before 6.4 cannot attach trampolines to kernel functions: the one line
    # that says so, and no recording that pretends otherwise.
    lockpath record --func vfs_read --func-method fentry -o /tmp/func-fentry.json -- \
        /bin/timed-calls reads /tmp/func-fentry-results 10 2> /tmp/func-fentry.err \
        && fail "--func-method fentry recorded on a kernel without fentry"
    cat /tmp/func-fentry.err
    grep -q "fentry/fexit cannot attach to kernel functions on this kernel" /tmp/func-fentry.err \
        || fail "no line says that this kernel refuses fentry"
    [ ! -e /tmp/func-fentry.json ] || fail "a profile was written"
    pass "fentry refused in one line: $(grep -c . /tmp/func-fentry.err) lines of errors"
fi
need fentry
run lockpath record --func vfs_read --func-method fentry -o /tmp/func-fentry.json -- \
    /bin/timed-calls reads /tmp/func-fentry-results 500
exec lab-check func /tmp/func-fentry.json --function vfs_read --method fentry --min-count 500
