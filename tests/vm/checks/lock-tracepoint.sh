# Forced tracepoint method; counts per type against the kernel's own hist trigger on
# lock:contention_begin for the workload's threads (flags 2 = rwsem:R, 4 = rwsem:W,
# 1 = spinlock). With 2 vCPUs spinlocks never queue, so only rwsem rows are required.
. /checks/lib
need lock_tracepoint
event=$TRACING/events/lock/contention_begin
trigger='hist:keys=flags:vals=hitcount if comm == "lock-storm"'
echo "$trigger" > $event/trigger || fail "cannot add a hist trigger to lock:contention_begin"
record_storm tp --lock-method tracepoint
cat $event/hist
read_w=$(hist_hits $event/hist flags=2)
write_w=$(hist_hits $event/hist flags=4)
echo "!$trigger" > $event/trigger
exec lab-check lock /tmp/tp.json /tmp/tp-report.json --method raw_tracepoint --types rwsem \
    --truth rwsem:W=$write_w --truth rwsem:R=$read_w --tolerance 0.05
