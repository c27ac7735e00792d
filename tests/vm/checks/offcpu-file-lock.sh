# --offcpu-all on processes contending on POSIX, OFD and flock locks of one file (the
# file-locks workload, which measures each process's own blocked time): the waits are
# class file-lock, timed like the workers' own clocks, and the filelock tracepoints name
# the process holding the lock (this kernel's record layout: fl_blocker before 6.9).
. /checks/lib
[ -d $TRACING/events/filelock ] || fail "no filelock tracepoints in this kernel"
lockpath record --offcpu-all -o /tmp/fl.json -- /bin/file-locks --procs 2 --rounds 30 \
    --path /tmp/fl-file > /tmp/fl.out 2>&1 || {
    rc=$?
    cat /tmp/fl.out
    tail -n 40 /tmp/lockpath-verifier-*.log 2>/dev/null
    fail "lockpath record exited with $rc"
}
cat /tmp/fl.out
exec lab-check file-lock /tmp/fl.json /tmp/fl.out
