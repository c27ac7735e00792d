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
storm kpspin --type spinlock
grep -q '"method": *"kprobe' /tmp/kpspin.json || fail "not recorded with the kprobe fallback"
grep -q '"type": *"spinlock"' /tmp/kpspin-report.json || fail "--type spinlock: no spinlock wait"
grep -q '"type": *"rwsem' /tmp/kpspin-report.json && fail "--type spinlock recorded rwsem waits"
storm kprw --type rwsem
grep -q '"type": *"rwsem' /tmp/kprw-report.json || fail "--type rwsem: no rwsem wait"
grep -q '"type": *"spinlock"' /tmp/kprw-report.json && fail "--type rwsem recorded spinlock waits"
pass "--type spinlock and --type rwsem each recorded only their type with kprobes"
