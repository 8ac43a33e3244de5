import Foundation

/// What a worker can know about its lease on a job without asking the store.
///
/// A shared store hands a job to another worker only after its lease ran out
/// (`lease_expires` on the database's clock, set when the claim was written,
/// which is after the claim was sent). So a job claimed less than half a
/// lease ago, counted from before the claim was sent, is certainly still this
/// worker's: writes that exist only to be refused if it is not (a fenced write
/// before a partial file is started) can be skipped. Half a lease leaves room
/// for clocks that run at slightly different rates.
enum LeaseClock {
    /// Seconds on a clock that keeps counting while the machine sleeps and
    /// while the process is stopped (SIGSTOP), as the lease does.
    static func now() -> Double {
        var time = timespec()
        #if os(Linux)
        clock_gettime(CLOCK_BOOTTIME, &time)
        #else
        clock_gettime(CLOCK_MONOTONIC_RAW, &time)
        #endif
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// Whether a job claimed with a request sent at `claimSentAt` is still certainly held at `now`.
    static func certainlyHeld(claimSentAt: Double, now: Double, lease: Double) -> Bool {
        let elapsed = now - claimSentAt
        return elapsed >= 0 && elapsed < lease / 2
    }
}
