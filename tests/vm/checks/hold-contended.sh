# Holds under contention (from --lock's own events) against --hold (kprobes) on one
# lock: three threads create files in a FUSE directory whose CREATE is delayed 200 ms,
# at 0, +40 and +80 ms; the second holds the directory's inode lock while the third
# waits. Its hold under contention must match the workload's clock and --hold.
. /checks/lib
need kprobe
dir=/tmp/hold-contended
mkdir -p $dir
grep -qw fuse /proc/filesystems || fail "no FUSE in this kernel (fuse.ko not loaded)"
fuse-workload serve $dir/stop $dir/mnt 200 &
server=$!
i=0
while ! grep -q " $dir/mnt " /proc/mounts; do
    i=$((i + 1))
    [ $i -lt 100 ] || fail "the FUSE fixture did not mount"
    sleep 0.1
done
run lockpath record --lock -o $dir/find.json -- /bin/fuse-workload holdchain-client $dir/r1 $dir/mnt 1
lockpath report $dir/find.json --format json --top 0 > $dir/find-report.json \
    || fail "lockpath report exited with $?"
lock=$(lab-check hold-lock $dir/find-report.json $dir/find.json) || { echo "$lock"; exit 1; }
echo "the directory's inode lock: $lock"
run lockpath record --hold rwsem:$lock --hold-method kprobe --lock \
    -o $dir/hold.json -- /bin/fuse-workload holdchain-client $dir/r2 $dir/mnt 2
touch $dir/stop
wait $server
exec lab-check hold-contended $dir/hold.json $dir/r2 "$lock"
