# --hold forced to kprobes (kprobe + kretprobe on the rwsem functions): the same answers
# as with fentry.
. /checks/lib
need kprobe
hold_fuse hold-kprobe kprobe
