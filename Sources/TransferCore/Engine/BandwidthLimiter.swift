import Foundation

/// A token bucket: a transfer's own cap (`--limit-rate` of `get`, a job's `limit_rate`), or a
/// run's, shared by every transfer it runs (`RunBandwidth`). Takers call `take` (and pause
/// their transfer) or `consume` (and sleep) before using bytes. A run's buckets change while
/// transfers hold them: a bucket may be unlimited (no rate), or lend its takers to another
/// bucket (`RunBandwidth`'s one bucket for both directions).
public final class BandwidthLimiter: Sendable {
    private struct Bucket {
        var rate: Double?
        var burst: Double
        var tokens: Double
        var last: DispatchTime
        /// When set, takers take from this bucket instead (set by `RunBandwidth` only).
        var lender: BandwidthLimiter?
        /// Counts the changes of rate and lender: a taker paused under one rate looks again when
        /// it changed (a limit lifted lets it go at once, not when the old rate's wait is over).
        var changes = 0
    }

    private let bucket: Locked<Bucket>

    public init(bytesPerSecond: Int64) {
        let burst = max(Double(bytesPerSecond) / 10, 64 * 1024)
        bucket = Locked(Bucket(rate: Double(max(1, bytesPerSecond)), burst: burst, tokens: burst, last: .now()))
    }

    /// A bucket without a rate: nothing waits until `setRate` gives it one.
    public init() {
        let burst: Double = 64 * 1024
        bucket = Locked(Bucket(rate: nil, burst: burst, tokens: burst, last: .now()))
    }

    /// The rate in bytes per second; nil when unlimited.
    public var bytesPerSecond: Double? {
        bucket.withLock { $0.lender?.bytesPerSecond ?? $0.rate }
    }

    /// Changes the rate from now on (nil: unlimited). A fleet's share of `--limit-rate` as
    /// workers come and go, or a person's `transferd limit` while the run goes on.
    public func setRate(_ bytesPerSecond: Int64?) {
        bucket.withLock { bucket in
            let new = bytesPerSecond.map { Double(max(1, $0)) }
            guard new != bucket.rate else { return }
            bucket.changes += 1
            guard let new else {
                bucket.rate = nil
                return
            }
            let wasUnlimited = bucket.rate == nil
            bucket.rate = new
            bucket.burst = max(new / 10, 64 * 1024)
            // A bucket that starts limiting now starts with a burst's worth, not what it saved up;
            // one whose rate changes carries at most a burst's debt into the new rate (a timetable
            // that raises the limit must not leave transfers paying the old rate's debt).
            bucket.tokens = wasUnlimited ? bucket.burst : min(bucket.burst, max(bucket.tokens, -bucket.burst))
            if wasUnlimited { bucket.last = .now() }
        }
    }

    /// Lends this bucket's takers to `other` (nil: they take from this one again).
    func lend(to other: BandwidthLimiter?) {
        bucket.withLock { bucket in
            if bucket.lender !== other { bucket.changes += 1 }
            bucket.lender = other
        }
    }

    /// Changes so far to the rate this bucket's takers keep (its own, or its lender's).
    package var generation: Int {
        bucket.withLock { $0.changes + ($0.lender?.generation ?? 0) }
    }

    /// Takes `count` bytes from the bucket at once and returns how long the taker should
    /// wait before taking more (0 when the bucket still holds tokens, or has no rate): for a
    /// caller that must not sleep (a libcurl callback on the thread of every transfer) and
    /// pauses instead.
    public func take(_ count: Int) -> TimeInterval {
        let taken = bucket.withLock { bucket -> (lender: BandwidthLimiter?, wait: TimeInterval) in
            if let lender = bucket.lender { return (lender, 0) }
            let now = DispatchTime.now()
            guard let rate = bucket.rate else {
                bucket.last = now
                return (nil, 0)
            }
            let elapsed = Double(now.uptimeNanoseconds - bucket.last.uptimeNanoseconds) / 1e9
            bucket.last = now
            bucket.tokens = min(bucket.burst, bucket.tokens + elapsed * rate) - Double(count)
            return (nil, bucket.tokens < 0 ? -bucket.tokens / rate : 0)
        }
        // A lent bucket's takers take from the lender, outside this bucket's lock.
        if let lender = taken.lender { return lender.take(count) }
        return taken.wait
    }

    /// Takes `count` bytes from the bucket, sleeping the caller until they are available.
    public func consume(_ count: Int) {
        let wait = take(count)
        if wait > 0 { usleep(UInt32(min(wait, 5) * 1_000_000)) }
    }
}

/// A run's bandwidth: the buckets every transfer of the run takes from, one for downloads and
/// one for uploads, whose rates change while the run goes on (`RateLimit`): one rate for both
/// directions together lends both to a third bucket; `UP:DOWN` gives each its own; `off`
/// leaves them unlimited. A transfer holds its direction's bucket from its start, so a change
/// reaches the transfers under way at their next piece.
package final class RunBandwidth: Sendable {
    /// What downloads take from.
    package let down = BandwidthLimiter()
    /// What uploads take from.
    package let up = BandwidthLimiter()
    /// Both directions' bucket under one rate for both.
    private let both = BandwidthLimiter()
    private let current = Locked<RateLimit>(.off)

    package init() {}

    /// The limit the buckets keep now.
    package var limit: RateLimit { current.current }

    /// Keeps `limit` from now on.
    package func apply(_ limit: RateLimit) {
        current.withLock { applied in
            guard applied != limit else { return }
            applied = limit
            if let total = limit.total {
                both.setRate(total)
                down.lend(to: both)
                up.lend(to: both)
            } else {
                down.setRate(limit.down)
                up.setRate(limit.up)
                down.lend(to: nil)
                up.lend(to: nil)
            }
        }
    }
}

/// How fast an upload may send: its own cap (a job's `limit_rate`, `put
/// --limit-rate`), a bucket shared with the rest of the run (the run's
/// `--limit-rate`), both or neither. Needs a backend with `.sendRateLimit`.
public struct SendRate: Sendable {
    /// This upload's cap in bytes per second, over all its requests in flight.
    public var bytesPerSecond: Int64?
    /// The run's bucket, shared by every transfer in both directions.
    public var shared: BandwidthLimiter?

    public init(bytesPerSecond: Int64? = nil, shared: BandwidthLimiter? = nil) {
        self.bytesPerSecond = bytesPerSecond
        self.shared = shared
    }

    /// Sets the request's limits for one of `inFlight` requests sending at once
    /// (each gets an equal share of the cap).
    func apply(to request: inout TransferRequest, inFlight: Int = 1) {
        request.maxSendRate = bytesPerSecond.map { max(1, $0 / Int64(max(1, inFlight))) }
        request.sendLimiter = shared
    }
}
