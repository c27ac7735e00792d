# --io on the block raw tracepoints, requests keyed by their struct request pointer, with
# this kernel's struct layout read from BTF (5.10 passes (q, rq) and reaches the disk
# through rq->rq_disk; 6.1 passes (rq) and goes through rq->q->disk): on a scratch loop
# device, direct writes, reads of one sector by two threads at once and sector-less
# flushes, against tracefs's own count of block_rq_issue on that device: equal, or short
# by no more than the runs of lockpath's issue and completion programs the kernel reports
# it skipped (`prog_recursion_miss`: an interrupt issued a request while the issue
# program ran on that CPU, one request in 6 of 203 runs of a loaded 7.3 guest), each a
# request lost and said so. Then buffered
# writes whose writeback is charged to their writer through the dirty-page tracepoint
# (writeback_dirty_folio, or writeback_dirty_page on 5.10).
. /checks/lib
[ -b /dev/loop0 ] || fail "no /dev/loop0 (loop.ko not loaded?)"
dd if=/dev/zero of=/tmp/io-disk bs=1M count=16 2>/dev/null || fail "cannot make the disk image"
losetup /dev/loop0 /tmp/io-disk || fail "losetup /dev/loop0 failed"
dev=$(cat /sys/block/loop0/dev)
major=${dev%%:*} minor=${dev#*:}
cache=$(cat /sys/block/loop0/queue/write_cache 2>/dev/null)
echo "loop0 is $major:$minor, write cache: $cache"
flushes=20
case "$cache" in *"write back"*) ;; *) flushes=0 ;; esac
events=$TRACING/events/block/block_rq_issue
echo "dev == $(( (major << 20) | minor ))" > $events/filter || fail "cannot filter block_rq_issue"
echo 4096 > $TRACING/buffer_size_kb
echo > $TRACING/trace
echo 1 > $events/enable || fail "cannot enable block_rq_issue"
lockpath record -a --io -o /tmp/io.json -- /bin/ext4-dir block /dev/loop0 $flushes 8 2 100 \
    > /tmp/io.out 2>&1 || {
    rc=$?
    cat /tmp/io.out
    tail -n 40 /tmp/lockpath-verifier-*.log 2>/dev/null
    fail "lockpath record exited with $rc"
}
echo 0 > $events/enable
echo 0 > $events/filter
cat /tmp/io.out
cat $TRACING/trace > /tmp/io-trace.txt
echo > $TRACING/trace
# Buffered writes to the device: its page cache is the file, dd (a target) dirtied it,
# and its writeback (by sync or by a flusher kworker, not a target) is charged to dd.
# With --file-calls, the writes of a regular file are timed per file (on the guest's
# root file system): 16 writes of 4 KiB and the open.
lockpath record --io --file-calls -o /tmp/io-cause.json -- \
    sh -c 'dd if=/dev/zero of=/dev/loop0 bs=65536 count=64 2>/dev/null; sync;
        dd if=/dev/zero of=/tmp/fc bs=4096 count=16 2>/dev/null' \
    > /tmp/io-cause.out 2>&1 || {
    rc=$?
    cat /tmp/io-cause.out
    fail "lockpath record of buffered writes exited with $rc"
}
cat /tmp/io-cause.out
lab-check io-cause /tmp/io-cause.json --dev "$major:$minor" --bytes $((64 * 65536)) --comm dd ||
    fail "the writeback of dd's writes is not charged to dd"
lab-check file-calls /tmp/io-cause.json --path /tmp/fc --writes 16 --bytes 65536 ||
    fail "the writes of /tmp/fc are not timed"
losetup -d /dev/loop0
written=$(awk '/entries-in-buffer/ { split($3, n, "/"); print (n[1] == n[2]) ? "ok" : "lost" }' /tmp/io-trace.txt)
[ "$written" = ok ] || fail "the trace buffer overflowed: the reference count is incomplete"
issued=$(grep -c 'block_rq_issue: ' /tmp/io-trace.txt)
pid=$(grep -o 'pid=[0-9]*' /tmp/io.out | cut -d= -f2)
[ -n "$pid" ] || fail "the workload did not run"
echo "tracefs: $issued requests issued on loop0"
exec lab-check io /tmp/io.json --dev "$major:$minor" --issued "$issued" --flushes $flushes \
    --write-bytes $((8 * 65536)) --reads 200 --pid "$pid"
