# report --by cgroup: lock-storm runs in a cgroup made for the check (the shell moves
# itself in, then execs the storm); the profile names the storm's cgroup from the id the
# kernel recorded for its threads, and the cgroup's rows hold exactly its contentions.
. /checks/lib
root=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
if [ -z "$root" ]; then
    root=/sys/fs/cgroup
    mkdir -p $root
    mount -t cgroup2 none $root || fail "cannot mount cgroup2 on $root"
fi
cgroup=$root/lockpath-lab
mkdir -p $cgroup || fail "cannot create $cgroup"
run lockpath record --lock -o /tmp/cg.json -- \
    /bin/sh -c "echo \$\$ > $cgroup/cgroup.procs && exec /bin/lock-storm --seconds 3"
rmdir $cgroup
echo "+ lockpath report /tmp/cg.json --by cgroup"
lockpath report /tmp/cg.json --by cgroup || fail "lockpath report exited with $?"
lockpath report /tmp/cg.json --by cgroup --format json --top 0 > /tmp/cg-report.json \
    || fail "lockpath report exited with $?"
exec lab-check cgroup /tmp/cg.json /tmp/cg-report.json /lockpath-lab
