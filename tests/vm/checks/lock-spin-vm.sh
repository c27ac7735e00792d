# A virtual machine without paravirt spinlocks (the lab's TCG guests have the CPU's
# hypervisor flag and no PV spinlocks) takes contended spinlocks by test-and-set in
# virt_spin_lock, before the lock tracepoints: with the tracepoints alone a storm shows
# no spinlock at all. lockpath reads virt_spin_lock_key and adds the kprobe on the spin
# slow path. Default method; spinlock count against a tracefs kprobe on the same slow
# path, counted from the trace buffer for the workload's threads.
. /checks/lib
need lock_tracepoint
need kprobe
[ "$(uname -m)" = x86_64 ] || skip "virt_spin_lock is x86-only: $(uname -m) guests take spinlocks by the queued slow path"
grep -qw hypervisor /proc/cpuinfo || skip "no hypervisor flag: spin waits reach the tracepoints"
function=queued_spin_lock_slowpath
grep -q " [tT] $function\$" /proc/kallsyms || function=native_queued_spin_lock_slowpath
grep -q " [tT] $function\$" /proc/kallsyms || fail "no spin slow path in /proc/kallsyms"
grep -q " virt_spin_lock_key\$" /proc/kallsyms \
    || fail "kallsyms has no virt_spin_lock_key (this check needs a kernel with data symbols)"
echo "p:lplab/spin $function" >> $TRACING/kprobe_events \
    || fail "cannot add a tracefs kprobe on $function"
echo 16384 > $TRACING/buffer_size_kb
echo > $TRACING/trace
echo 1 > $TRACING/events/lplab/enable || fail "cannot enable the tracefs kprobe"
record_storm vmspin
echo 0 > $TRACING/events/lplab/enable
cat $TRACING/trace > /tmp/vmspin-trace.txt
echo > $TRACING/trace
echo "-:lplab/spin" >> $TRACING/kprobe_events
written=$(awk '/entries-in-buffer/ { split($3, n, "/"); print (n[1] == n[2]) ? "ok" : "lost" }' /tmp/vmspin-trace.txt)
[ "$written" = ok ] || fail "the trace buffer overflowed: the reference count is incomplete"
spin=$(grep -cE '^ *lock-storm-[0-9]+ .* spin: ' /tmp/vmspin-trace.txt)
echo "tracefs kprobe hits of $function by lock-storm threads: $spin"
[ "$spin" -gt 0 ] || skip "the storm entered no spin slow path"
exec lab-check lock /tmp/vmspin.json /tmp/vmspin-report.json --method "for spinlocks" \
    --types spinlock,rwsem --truth spinlock=$spin --tolerance 0.05
