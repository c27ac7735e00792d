//! What the drains of waits in progress share: which of them are listed, and which
//! process a thread belongs to.

/// Waits in progress shorter than this are not listed one by one (with `--offcpu-all`
/// every sleeping thread has a wait in progress at any moment).
pub const WAITING_MIN_NS: u64 = 100_000_000;

/// The age at `now_ns` of a wait begun at `start_ns`, when it is listed (it began
/// before `now_ns` and has lasted `WAITING_MIN_NS`).
pub fn listed_age(start_ns: u64, now_ns: u64) -> Option<u64> {
    now_ns
        .checked_sub(start_ns)
        .filter(|age| *age >= WAITING_MIN_NS)
}
