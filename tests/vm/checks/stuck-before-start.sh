# The hung client (fuse-workload stuck: a CREATE the server does not answer, and a
# second process queued behind it on the directory's inode lock), stuck before lockpath
# starts: the waits that began before the recording are found, with their age.
. /checks/lib
grep -qw fuse /proc/filesystems || fail "no FUSE in this kernel (fuse.ko not loaded)"
dir=/tmp/stuck
mkdir -p $dir
fuse-workload stuck $dir/results $dir/mnt 60000 &
server=$!
i=0
while [ ! -f $dir/results.ready ]; do
    i=$((i + 1))
    [ $i -lt 300 ] || fail "the hung client never got stuck"
    sleep 0.1
done
sleep 1
lockpath record -a -d 2 --lock --offcpu -o $dir/stuck.json > $dir/stuck.out 2>&1
rc=$?
cat $dir/stuck.out
# The server goes: its connection ends, and with it the stuck calls.
kill -9 $server
wait $server 2>/dev/null
umount -l $dir/mnt
[ $rc -eq 0 ] || fail "lockpath record exited with $rc"
exec lab-check stuck $dir/stuck.json $dir/results.ready
