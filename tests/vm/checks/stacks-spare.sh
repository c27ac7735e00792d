# A stack map of one bucket (`--stack-entries 1`): every call path but the first
# collides in it and goes to the spare stacks (STACKS_SPARE). lock-paths' two paths to
# its file's f_pos_lock (`read`, `readv`) must both be named by their stacks, no wait
# may be without a stack (but one whose walk failed or found the spare stacks busy,
# reported as such), and no stack may be lost to a collision.
. /checks/lib
need lock_tracepoint
dir=/tmp/spare
mkdir -p $dir
run lockpath record --lock --stack-entries 1 -o $dir/spare.json -- \
    lock-paths --seconds 3 --threads 4 --short 4096 --long 98304 --long-percent 20 \
    --results $dir/results
cat $dir/results
exec lab-check spare $dir/spare.json
