# Lock names in the guest: on lock-storm (pipes and mmap) and on the open/close
# storm, at least 80% of the lock wait is on named locks; `mmap_lock` is named from the
# waiting task. (With 2 emulated vCPUs the spinlocks hardly queue: rq_lock and file_lock
# are asserted by name by the host's root test, and an open/close storm without a single
# contention is reported, not failed; the pipes-and-mmap storm must contend.)
. /checks/lib
need lock_tracepoint
run lockpath record --lock -o /tmp/names-both.json -- /bin/lock-storm --seconds 3 --mode both
run lockpath record --lock -o /tmp/names-open.json -- /bin/lock-storm --seconds 3 --mode open
exec lab-check names /tmp/names-both.json /tmp/names-open.json
