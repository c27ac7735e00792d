# --func vfs_read forced to fentry: every read(2) of the workload goes through vfs_read, so
# lockpath's count for the workload is at least its number of reads.
. /checks/lib
need fentry
run lockpath record --func vfs_read --func-method fentry -o /tmp/func-fentry.json -- \
    /bin/timed-calls reads /tmp/func-fentry-results 500
exec lab-check func /tmp/func-fentry.json --function vfs_read --method fentry --min-count 500
