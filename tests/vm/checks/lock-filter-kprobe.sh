# record --type on the kprobe fallback: the entry probes leave the other types out in the
# kernel (the drain does not filter types again), and the asked type is still recorded.
. /checks/lib
need kprobe
# 2-second storms (record_storm's take 3): the lab's guests are near their time limit.
storm() {
    name=$1
    shift
    run lockpath record --lock-method kprobe "$@" -o "/tmp/$name.json" -- \
        /bin/lock-storm --seconds 2
    lockpath report "/tmp/$name.json" --format json --top 0 > "/tmp/$name-report.json" \
        || fail "lockpath report exited with $?"
}
# How often lock-storm entered the spin slow path, from a tracefs kprobe on it: under
# emulation with every slow path probed, a 2 s storm can contend no spinlock at all.
function=queued_spin_lock_slowpath
grep -q " [tT] $function\$" /proc/kallsyms || function=native_queued_spin_lock_slowpath
echo "p:lplab/fspin $function" >> $TRACING/kprobe_events \
    || fail "cannot add a tracefs kprobe on $function"
echo > $TRACING/trace
echo 1 > $TRACING/events/lplab/enable || fail "cannot enable the tracefs kprobe"
storm kpspin --type spinlock
echo 0 > $TRACING/events/lplab/enable
spins=$(grep -cE '^ *lock-storm-[0-9]+ .* fspin: ' $TRACING/trace)
echo > $TRACING/trace
echo "-:lplab/fspin" >> $TRACING/kprobe_events
echo "tracefs kprobe hits of $function by lock-storm threads: $spins"
grep -q '"method": *"kprobe' /tmp/kpspin.json || fail "not recorded with the kprobe fallback"
if [ "$spins" -gt 0 ]; then
    grep -q '"type": *"spinlock"' /tmp/kpspin-report.json \
        || fail "--type spinlock: no spinlock wait of $spins slow-path entries"
fi
grep -q '"type": *"rwsem' /tmp/kpspin-report.json && fail "--type spinlock recorded rwsem waits"
storm kprw --type rwsem
grep -q '"type": *"rwsem' /tmp/kprw-report.json || fail "--type rwsem: no rwsem wait"
grep -q '"type": *"spinlock"' /tmp/kprw-report.json && fail "--type rwsem recorded spinlock waits"
pass "--type spinlock ($spins spin slow-path entries) and --type rwsem each recorded only their type with kprobes"
