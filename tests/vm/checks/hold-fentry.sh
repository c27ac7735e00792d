# --hold with fexit/fentry on the rwsem functions: A's hold of the FUSE directory's inode
# lock within 10% of A's own create time, A's stack, and B's waits naming A as holder.
. /checks/lib
need fentry
hold_fuse hold-fentry fentry
