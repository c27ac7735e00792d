# Static lock names without kallsyms against kallsyms: Debian's kernels list data
# symbols in /proc/kallsyms, so each storm is recorded twice on this boot, named as
# usual (static locks by symbol) and with LOCKPATH_NO_KALLSYMS_LOCK_NAMES=1 (the names a
# kernel without data symbols gets: `static@FUNCTION`, after the function that takes
# the lock). Static locks keep their addresses within a boot; lab-check names-kallsyms
# matches the rows by address and fails listing every disagreement.
# Storms: lock-storm's pipes and mmaps recorded with kprobes (under TCG the spinlocks
# queue where the kprobe method sees them: `base_crng`, `rcu_state`, besides mmap_lock),
# and lock-storm started by a shell that first moves itself into a cgroup (the static
# percpu rwsem `cgroup_threadgroup_rwsem`, taken for writing by the move).
. /checks/lib
need kprobe
grep -qE ' [dDbB] (cdev_lock|rcu_state)$' /proc/kallsyms \
    || skip "kernel $LAB_KERNEL lists no data symbols in /proc/kallsyms"
root=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
if [ -z "$root" ]; then
    root=/sys/fs/cgroup
    mkdir -p $root
    mount -t cgroup2 none $root || fail "cannot mount cgroup2 on $root"
fi
cgroup=$root/lockpath-names
verdicts=""
compared=0
for storm in pipes-mmap cgroup; do
    for names in with without; do
        case $names in
            with) unset LOCKPATH_NO_KALLSYMS_LOCK_NAMES ;;
            without) export LOCKPATH_NO_KALLSYMS_LOCK_NAMES=1 ;;
        esac
        out=/tmp/ks-$storm-$names.json
        echo "+ [$names kallsyms names] $storm storm"
        case $storm in
            pipes-mmap)
                run lockpath record --lock --lock-method kprobe -o $out -- \
                    /bin/lock-storm --seconds 3 ;;
            cgroup)
                mkdir -p $cgroup || fail "cannot create $cgroup"
                run lockpath record --lock -o $out -- /bin/sh -c \
                    "echo \$\$ > $cgroup/cgroup.procs && exec /bin/lock-storm --seconds 3"
                rmdir $cgroup ;;
        esac
    done
    unset LOCKPATH_NO_KALLSYMS_LOCK_NAMES
    lab-check names-kallsyms /tmp/ks-$storm-with.json /tmp/ks-$storm-without.json \
        > /tmp/ks-$storm.out
    status=$?
    cat /tmp/ks-$storm.out
    why=$(sed -n 's/^WHY: //p' /tmp/ks-$storm.out)
    case $status in
        0) verdicts="$verdicts $storm: $why;" compared=$((compared + 1)) ;;
        77) verdicts="$verdicts $storm: nothing compared;" ;;
        *) fail "$storm storm: $why" ;;
    esac
done
[ $compared -gt 0 ] || skip "no static lock contended in both runs of either storm:$verdicts"
pass "${verdicts# }"
