# --hold by symbol: the static mutex module_mutex, which every read of /proc/modules takes
# in m_start and drops in m_stop. 20 reads by cat: at least 20 holds by cat processes,
# taken in m_start.
. /checks/lib
need fentry
grep -q " module_mutex$" /proc/kallsyms || skip "no module_mutex in /proc/kallsyms"
grep -q . /proc/modules || fail "/proc/modules is empty (fuse.ko or loop.ko should be loaded)"
run lockpath record --hold mutex:module_mutex -o /tmp/hold-symbol.json -- \
    sh -c 'i=0; while [ $i -lt 20 ]; do cat /proc/modules > /dev/null; i=$((i + 1)); done'
lockpath report /tmp/hold-symbol.json --format json --top 0 > /tmp/hold-symbol-report.json \
    || fail "lockpath report exited with $?"
exec lab-check hold-symbol /tmp/hold-symbol-report.json --lock module_mutex --process cat \
    --caller m_start --min-count 20
