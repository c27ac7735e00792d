# record --type on the kprobe fallback: the entry probes leave the other types out in the
# kernel (the drain does not filter types again), and the asked type is still recorded.
. /checks/lib
need kprobe
record_storm kpspin --lock-method kprobe --type spinlock
grep -q '"method": *"kprobe' /tmp/kpspin.json || fail "not recorded with the kprobe fallback"
grep -q '"type": *"spinlock"' /tmp/kpspin-report.json || fail "--type spinlock: no spinlock wait"
grep -q '"type": *"rwsem' /tmp/kpspin-report.json && fail "--type spinlock recorded rwsem waits"
record_storm kprw --lock-method kprobe --type rwsem
grep -q '"type": *"rwsem' /tmp/kprw-report.json || fail "--type rwsem: no rwsem wait"
grep -q '"type": *"spinlock"' /tmp/kprw-report.json && fail "--type rwsem recorded spinlock waits"
pass "--type spinlock and --type rwsem each recorded only their type with kprobes"
