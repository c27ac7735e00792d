# --cpu with user stack copies (the default): the sampler sends user registers and up
# to 64 KiB of user stack through a ring buffer, lockpath unwinds them with framehop.
# The program must load on this kernel's verifier, and cpu-burn's hot functions must
# come with their whole chain up to main.
. /checks/lib
lockpath record --cpu --freq 499 -o /tmp/cpu.json -- /bin/cpu-burn --cpu-seconds 2 \
    > /tmp/cpu.out 2>&1 || {
    rc=$?
    cat /tmp/cpu.out
    tail -n 40 /tmp/lockpath-verifier-*.log 2>/dev/null
    fail "lockpath record exited with $rc"
}
cat /tmp/cpu.out
exec lab-check cpu /tmp/cpu.json
