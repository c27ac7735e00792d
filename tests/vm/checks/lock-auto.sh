# Default method selection: tracepoints where the kernel has them, else the kprobe fallback.
# (With 2 vCPUs the tracepoints see no spinlock waits: contention_begin is only traced when
# a third CPU has to queue; the kprobe on the slow path also sees pending-bit spins.)
. /checks/lib
if has_feature lock_tracepoint; then
    want=raw_tracepoint types=rwsem
else
    want=kprobe types=spinlock,rwsem
fi
record_storm auto
exec lab-check lock /tmp/auto.json /tmp/auto-report.json --method "$want" --types "$types"
