# Names of locks in slab objects (kernels with bpf_get_kmem_cache), for the lab to
# compare with a boot of the same kernel with `slab_nomerge`, where every cache is its
# own and a name from the cache is exact. Storms: exclusive flocks of one file (the
# lock context's spinlock, in `file_lock_ctx`, a cache SLUB merges), reads of one
# shared file (`f_pos_lock` in `filp`) and pipes (`kmalloc` objects).
. /checks/lib
need slab_names
reports=""
for mode in flock file pipe; do
    run lockpath record --lock -o /tmp/slab-$mode.json -- \
        /bin/lock-storm --seconds 3 --mode $mode
    lockpath report /tmp/slab-$mode.json --by instance --format json --top 0 \
        > /tmp/slab-$mode-report.json || fail "lockpath report exited with $?"
    reports="$reports /tmp/slab-$mode-report.json"
done
grep -q '' /sys/kernel/slab/file_lock_ctx/aliases 2>/dev/null \
    && echo "file_lock_ctx aliases: $(cat /sys/kernel/slab/file_lock_ctx/aliases)"
exec lab-check slab-names $reports
