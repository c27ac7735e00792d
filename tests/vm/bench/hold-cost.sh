# Cost of --hold (cargo xtask bench): the workloads' own time per operation without
# lockpath and with --hold on the lock functions of each type (mutex, rwsem), by fentry
# and by kprobe.
# The lock asked for is an address no lock has, so every lock operation of the workload
# pays exactly what every other lock of a production system pays: the hook and one
# compare. `--lock` (the contention tracepoints) is the comparison. Prints one
# `BENCH workload/config NS_PER_OP` line per run; the host computes medians.
. /checks/lib
NOLOCK=0xffff888000000000
runs=${LAB_BENCH_RUNS:-5}

measure() {
    key=$1 workload=$2 rounds=$3
    shift 3
    rm -f /tmp/bench-r
    echo "  $(cut -d' ' -f1 /proc/uptime) s: $key ..." > /dev/console
    if [ $# -eq 0 ]; then
        /bin/timed-calls $workload /tmp/bench-r $rounds || fail "timed-calls $workload failed"
    else
        lockpath record "$@" -o /tmp/bench.json -- /bin/timed-calls $workload /tmp/bench-r $rounds \
            > /dev/null 2> /tmp/bench.err || { cat /tmp/bench.err; fail "lockpath $* failed"; }
        grep -q '"family": *"hold"\|"family": *"lock"' /tmp/bench.json \
            || { cat /tmp/bench.err; fail "$key: nothing attached"; }
    fi
    line="BENCH $key $(awk '/^ns_per_op/ { print $2 }' /tmp/bench-r)"
    echo "$line"
    # Progress on the console while the run goes on (the output file is shown at the end).
    echo "  $(cut -d' ' -f1 /proc/uptime) s: $line" > /dev/console
}

i=0
while [ $i -lt $runs ]; do
    i=$((i + 1))
    measure pipe/none pipe 20000
    measure pipe/lock pipe 20000 --lock
    measure pipe/hold-mutex-fentry pipe 20000 --hold mutex:$NOLOCK --hold-method fentry
    measure pipe/hold-mutex-kprobe pipe 20000 --hold mutex:$NOLOCK --hold-method kprobe
    measure mmap/none mmap 5000
    measure mmap/lock mmap 5000 --lock
    measure mmap/hold-rwsem-fentry mmap 5000 --hold rwsem:$NOLOCK --hold-method fentry
    measure mmap/hold-rwsem-kprobe mmap 5000 --hold rwsem:$NOLOCK --hold-method kprobe
done
pass "$runs runs"
