# Forced kprobe fallback; spinlock and rwsem:W counts against tracefs kprobe events on the
# same slow-path functions, counted from the trace buffer for the workload's threads
# (hist triggers would be simpler, but 5.10's cloud kernel has no CONFIG_HIST_TRIGGERS).
. /checks/lib
need kprobe
echo "kprobe blacklist entries for lock slow paths:"
grep -E 'spin_lock_slowpath|mutex_lock_slowpath|rwsem_down' /sys/kernel/debug/kprobes/blacklist \
    || echo "  (none)"
spin_events=""
i=0
for function in queued_spin_lock_slowpath native_queued_spin_lock_slowpath \
                __pv_queued_spin_lock_slowpath; do
    grep -q " [tT] $function\$" /proc/kallsyms || continue
    echo "p:lplab/spin$i $function" >> $TRACING/kprobe_events \
        || fail "cannot add a tracefs kprobe on $function"
    spin_events="$spin_events spin$i"
    i=$((i + 1))
done
[ -n "$spin_events" ] || fail "no spin slow path in /proc/kallsyms"
echo "p:lplab/rwsem_w rwsem_down_write_slowpath" >> $TRACING/kprobe_events \
    || fail "cannot add a tracefs kprobe on rwsem_down_write_slowpath"
echo 16384 > $TRACING/buffer_size_kb
echo > $TRACING/trace
echo 1 > $TRACING/events/lplab/enable || fail "cannot enable the tracefs kprobes"
record_storm kp --lock-method kprobe
echo 0 > $TRACING/events/lplab/enable
cat $TRACING/trace > /tmp/kp-trace.txt
echo > $TRACING/trace
for event in $spin_events rwsem_w; do echo "-:lplab/$event" >> $TRACING/kprobe_events; done
grep -m1 'entries-in-buffer' /tmp/kp-trace.txt
# `# entries-in-buffer/entries-written: N/M`: N < M means the buffer overflowed.
written=$(awk '/entries-in-buffer/ { split($3, n, "/"); print (n[1] == n[2]) ? "ok" : "lost" }' /tmp/kp-trace.txt)
[ "$written" = ok ] || fail "the trace buffer overflowed: the reference count is incomplete"
spin=$(grep -cE '^ *lock-storm-[0-9]+ .* spin[0-9]+: ' /tmp/kp-trace.txt)
write=$(grep -cE '^ *lock-storm-[0-9]+ .* rwsem_w: ' /tmp/kp-trace.txt)
echo "tracefs kprobe hits by lock-storm threads: spin slow path $spin, rwsem_down_write_slowpath $write"
exec lab-check lock /tmp/kp.json /tmp/kp-report.json --method kprobe --types spinlock,rwsem \
    --truth spinlock=$spin --truth rwsem:W=$write --tolerance 0.05
