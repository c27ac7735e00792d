//! Workload: a pthread mutex held a known time by a named thread while another waits.
//! `mutex-hold [--rounds N] [--hold-ms MS]`. Each round the holder (thread `lp-holder`)
//! locks the mutex, lets the waiter (thread `lp-waiter`) block on it, sleeps MS with the
//! lock held and unlocks it in `release_lock`; the waiter measures its own time in
//! `pthread_mutex_lock`. Prints
//! `mutex-hold waiter_tid=W holder_tid=H rounds=N waited_ns=T` (T: the waiter's own
//! measurement, summed over the rounds).

use std::{
    cell::UnsafeCell,
    sync::{
        atomic::{AtomicBool, AtomicU32, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

/// A process-private pthread mutex.
struct Mutex(UnsafeCell<libc::pthread_mutex_t>);

// SAFETY: a pthread mutex is made to be shared between threads; it never moves (boxed
// in an Arc).
unsafe impl Sync for Mutex {}
// SAFETY: as above.
unsafe impl Send for Mutex {}

impl Mutex {
    fn new() -> Self {
        Mutex(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER))
    }

    fn lock(&self) {
        // SAFETY: an initialized mutex that outlives every thread using it.
        let rc = unsafe { libc::pthread_mutex_lock(self.0.get()) };
        assert_eq!(rc, 0, "pthread_mutex_lock failed");
    }

    /// Not inlined: libc's unlock keeps no frame pointer, so the user stack walk from
    /// inside it goes on at this function's caller (`release_lock`, which then shows).
    #[inline(never)]
    fn unlock(&self) {
        // SAFETY: as in `lock`; called by the thread that holds it.
        let rc = unsafe { libc::pthread_mutex_unlock(self.0.get()) };
        assert_eq!(rc, 0, "pthread_mutex_unlock failed");
    }
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// The holder's unlock, a frame of its own in the holder's stack.
#[inline(never)]
fn release_lock(mutex: &Mutex) {
    mutex.unlock();
    std::hint::black_box(());
}

/// Whether `thread` is blocked (state S or D in /proc).
fn is_sleeping(tid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next().map(str::to_string))
        })
        .is_some_and(|state| state == "S" || state == "D")
}

fn main() {
    let args = lockpath_tests::Args::parse(&["--rounds", "--hold-ms"], &[]);
    let rounds = args.get("--rounds", 20u32);
    let hold_ms = args.get("--hold-ms", 50u64);
    let mutex = Arc::new(Mutex::new());
    // Round number the waiter may go for (the holder has the lock by then).
    let go = Arc::new(AtomicU32::new(0));
    let waiter_tid = Arc::new(AtomicU32::new(0));
    let done = Arc::new(AtomicBool::new(false));

    let waiter = {
        let (mutex, go, waiter_tid) = (mutex.clone(), go.clone(), waiter_tid.clone());
        std::thread::Builder::new()
            .name("lp-waiter".into())
            .spawn(move || {
                waiter_tid.store(gettid(), Ordering::SeqCst);
                let mut waited = Duration::ZERO;
                for round in 1..=rounds {
                    while go.load(Ordering::SeqCst) < round {
                        std::thread::yield_now();
                    }
                    let start = Instant::now();
                    mutex.lock();
                    waited += start.elapsed();
                    mutex.unlock();
                }
                waited
            })
            .expect("spawn waiter")
    };
    let holder = {
        let (mutex, go, waiter_tid, done) =
            (mutex.clone(), go.clone(), waiter_tid.clone(), done.clone());
        std::thread::Builder::new()
            .name("lp-holder".into())
            .spawn(move || {
                while waiter_tid.load(Ordering::SeqCst) == 0 {
                    std::thread::yield_now();
                }
                let waiter = waiter_tid.load(Ordering::SeqCst);
                for round in 1..=rounds {
                    mutex.lock();
                    go.store(round, Ordering::SeqCst);
                    // Hold until the waiter sleeps on the mutex, then MS more.
                    while !is_sleeping(waiter) {
                        std::thread::yield_now();
                    }
                    std::thread::sleep(Duration::from_millis(hold_ms));
                    release_lock(&mutex);
                    // Let the waiter take and drop it before the next round.
                    std::thread::sleep(Duration::from_millis(5));
                }
                done.store(true, Ordering::SeqCst);
                gettid()
            })
            .expect("spawn holder")
    };
    let holder_tid = holder.join().expect("holder panicked");
    let waited = waiter.join().expect("waiter panicked");
    println!(
        "mutex-hold waiter_tid={} holder_tid={holder_tid} rounds={rounds} waited_ns={}",
        waiter_tid.load(Ordering::SeqCst),
        waited.as_nanos()
    );
}
