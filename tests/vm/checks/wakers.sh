# Wakers (--wakers) on the lab kernel: the two threads of a pipe ping-pong wake each
# other through pipe_write, and a pthread mutex's waits are woken by its holder thread
# through futex_wake (offwake folded lines: waiter stack;--;waker stack;waker thread).
. /checks/lib
# A refused program leaves its verifier log in /tmp: show its end when a step fails.
verifier_logs() {
    for log in /tmp/lockpath-verifier-*.log; do
        [ -f "$log" ] && { echo "--- $log (last 40 lines)"; tail -40 "$log"; }
    done
}
run lockpath record --offcpu-all --wakers -o /tmp/wakers-pp.json -- /bin/ping-pong --seconds 2
lockpath export /tmp/wakers-pp.json --format folded --kind offwake > /tmp/wakers-pp.folded \
    || fail "lockpath export exited with $?"
grep -q 'pipe_read;.*;--;.*pipe_write;.*;ping-pong\[[0-9]*\] ' /tmp/wakers-pp.folded \
    || { grep pipe_read /tmp/wakers-pp.folded | head -5; verifier_logs; fail "no pipe wait woken by the other side through pipe_write"; }
echo "+ lockpath record --offcpu-all --wakers -o /tmp/wakers-mh.json -- /bin/mutex-hold --rounds 5 --hold-ms 50"
lockpath record --offcpu-all --wakers -o /tmp/wakers-mh.json -- /bin/mutex-hold --rounds 5 --hold-ms 50 \
    > /tmp/wakers-mh.out || fail "lockpath record exited with $?"
cat /tmp/wakers-mh.out
holder=$(sed -n 's/.*holder_tid=\([0-9]*\).*/\1/p' /tmp/wakers-mh.out)
[ -n "$holder" ] || fail "mutex-hold printed no holder_tid"
lockpath export /tmp/wakers-mh.json --format folded --kind offwake > /tmp/wakers-mh.folded \
    || fail "lockpath export exited with $?"
grep -q "futex_wait.*;--;.*futex_wake;.*;lp-holder\[$holder\] " /tmp/wakers-mh.folded \
    || { grep futex /tmp/wakers-mh.folded | head -5; verifier_logs; fail "the mutex waits are not woken by lp-holder[$holder] through futex_wake"; }
pass "ping-pong woken through pipe_write; the mutex waiter woken by its holder through futex_wake"
