# Forced kprobe fallback; spinlock and rwsem:W counts against tracefs kprobe events with hist
# triggers on the same slow-path functions, for the workload's threads.
. /checks/lib
need kprobe
echo "kprobe blacklist entries for lock slow paths:"
grep -E 'spin_lock_slowpath|mutex_lock_slowpath|rwsem_down' /sys/kernel/debug/kprobes/blacklist \
    || echo "  (none)"
trigger='hist:keys=common_pid:vals=hitcount if comm == "lock-storm"'
probes=""
i=0
for function in queued_spin_lock_slowpath native_queued_spin_lock_slowpath \
                __pv_queued_spin_lock_slowpath; do
    grep -q " [tT] $function\$" /proc/kallsyms || continue
    echo "p:lplab/spin$i $function" >> $TRACING/kprobe_events \
        || fail "cannot add a tracefs kprobe on $function"
    echo "$trigger" > $TRACING/events/lplab/spin$i/trigger || fail "cannot add a hist trigger"
    probes="$probes spin$i"
    i=$((i + 1))
done
[ -n "$probes" ] || fail "no spin slow path in /proc/kallsyms"
echo "p:lplab/rwsem_w rwsem_down_write_slowpath" >> $TRACING/kprobe_events \
    || fail "cannot add a tracefs kprobe on rwsem_down_write_slowpath"
echo "$trigger" > $TRACING/events/lplab/rwsem_w/trigger || fail "cannot add a hist trigger"
record_storm kp --lock-method kprobe
hits=0
for probe in $probes; do
    hits=$((hits + $(hist_hits $TRACING/events/lplab/$probe/hist)))
    echo "!$trigger" > $TRACING/events/lplab/$probe/trigger
    echo "-:lplab/$probe" >> $TRACING/kprobe_events
done
write_hits=$(hist_hits $TRACING/events/lplab/rwsem_w/hist)
echo "!$trigger" > $TRACING/events/lplab/rwsem_w/trigger
echo "-:lplab/rwsem_w" >> $TRACING/kprobe_events
echo "tracefs kprobe hits: spin slow path $hits, rwsem_down_write_slowpath $write_hits"
exec lab-check lock /tmp/kp.json /tmp/kp-report.json --method kprobe --types spinlock,rwsem \
    --truth spinlock=$hits --truth rwsem:W=$write_hits --tolerance 0.05
