# Two call paths through one wrapper (lock-paths: frequent short `read`s and rare long
# `readv`s of one file, both through fdget_pos's f_pos_lock), recorded with the stack
# caches and with exact walks at once: the caches split the waits between the paths as
# the walks do, by count and by wait time.
. /checks/lib
# The tracepoints: both recordings then see the same waits. With the kprobe fallback
# (5.10) each recording loses its own waits to exhausted kretprobe instances (16430 and
# 24708 in one run), so the two would not count the same waits.
need lock_tracepoint
dir=/tmp/paths
mkdir -p $dir
sh -c "i=0; while [ ! -e $dir/go ] && [ \$i -lt 600 ]; do sleep 0.05; i=\$((i+1)); done; \
    exec lock-paths --seconds 4 --threads 4 --short 4096 --long 98304 --long-percent 20 \
    --results $dir/results" > /dev/null &
storm=$!
# One after the other: programs on one tracepoint run in the order they were attached, and
# an exact recording's wait starts after its walk (microseconds under emulation). With
# the exact recording's programs first, the cached one's clock reads after that walk too,
# so both time the same span of each wait.
for how in exact cached; do
    lockpath record --lock --lock-stacks $how -p $storm -o $dir/$how.json 2> $dir/$how.err &
    i=0
    until grep -q ' recording ' $dir/$how.err; do
        i=$((i + 1))
        [ $i -lt 600 ] || { cat $dir/*.err; fail "lockpath did not start recording"; }
        sleep 0.1
    done
done
touch $dir/go
wait
cat $dir/exact.err $dir/cached.err $dir/results
[ -s $dir/exact.json ] && [ -s $dir/cached.json ] || fail "a recording wrote no profile"
exec lab-check paths $dir/exact.json $dir/cached.json --pid $storm
