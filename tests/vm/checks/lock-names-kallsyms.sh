# Static lock names without kallsyms against kallsyms: Debian's kernels list data
# symbols in /proc/kallsyms, so each storm is recorded twice on this boot, named as
# usual (static locks by symbol) and with LOCKPATH_NO_KALLSYMS_LOCK_NAMES=1 (the names a
# kernel without data symbols gets: `static@FUNCTION`, after the function that takes
# the lock). Static locks keep their addresses within a boot; lab-check names-kallsyms
# matches the rows by address and fails listing every disagreement. Storms: open/close
# (`cdev_lock` in chrdev_open, the fd table) and flock (`file_rwsem`, the flc_lock).
. /checks/lib
need lock_tracepoint
grep -q " D cdev_lock\| d cdev_lock\| b cdev_lock" /proc/kallsyms \
    || skip "kernel $LAB_KERNEL lists no data symbols in /proc/kallsyms"
verdicts=""
for mode in open file; do
    run lockpath record --lock -o /tmp/ks-$mode-with.json -- \
        /bin/lock-storm --seconds 3 --mode $mode
    echo "+ LOCKPATH_NO_KALLSYMS_LOCK_NAMES=1 lockpath record ..."
    LOCKPATH_NO_KALLSYMS_LOCK_NAMES=1 lockpath record --lock -o /tmp/ks-$mode-without.json -- \
        /bin/lock-storm --seconds 3 --mode $mode \
        || fail "lockpath record without kallsyms names exited with $?"
    lab-check names-kallsyms /tmp/ks-$mode-with.json /tmp/ks-$mode-without.json \
        > /tmp/ks-$mode.out
    status=$?
    cat /tmp/ks-$mode.out
    why=$(sed -n 's/^WHY: //p' /tmp/ks-$mode.out)
    case $status in
        0) verdicts="$verdicts $mode: $why;" ;;
        77) verdicts="$verdicts $mode: nothing compared ($why);" ;;
        *) fail "$mode storm: $why" ;;
    esac
done
case $verdicts in
    *"open: nothing compared"*"file: nothing compared"*)
        skip "no static lock contended in both runs of either storm:$verdicts" ;;
esac
pass "$verdicts"
