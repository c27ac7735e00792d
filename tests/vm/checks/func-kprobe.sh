# --func vfs_read forced to kprobe: every read(2) of the workload goes through vfs_read, so
# lockpath's count for the workload is at least its number of reads.
. /checks/lib
need kprobe
run lockpath record --func vfs_read --func-method kprobe -o /tmp/func-kprobe.json -- \
    /bin/timed-calls reads /tmp/func-kprobe-results 500
exec lab-check func /tmp/func-kprobe.json --function vfs_read --method kprobe --min-count 500
