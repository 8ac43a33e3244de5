import Foundation

/// A token bucket shared by every transfer of a run (`--limit-rate`): the
/// total receive rate stays at the cap however many transfers are active.
/// Writers call `consume` before using bytes and sleep when ahead of the rate.
// @unchecked: `tokens`, `last`, the rate and the burst change only under `lock`.
public final class BandwidthLimiter: @unchecked Sendable {
    private var rate: Double
    private var burst: Double
    private var tokens: Double
    private var last: DispatchTime
    private let lock = NSLock()

    public init(bytesPerSecond: Int64) {
        rate = Double(bytesPerSecond)
        burst = max(Double(bytesPerSecond) / 10, 64 * 1024)
        tokens = burst
        last = .now()
    }

    public var bytesPerSecond: Double {
        lock.lock()
        defer { lock.unlock() }
        return rate
    }

    /// Changes the rate from now on (a fleet's share of `--limit-rate` as workers come and go).
    public func setRate(_ bytesPerSecond: Int64) {
        lock.lock()
        rate = Double(max(1, bytesPerSecond))
        burst = max(rate / 10, 64 * 1024)
        tokens = min(tokens, burst)
        lock.unlock()
    }

    /// Takes `count` bytes from the bucket at once and returns how long the taker should
    /// wait before taking more (0 when the bucket still holds tokens): for a caller that must
    /// not sleep (a libcurl callback on the thread of every transfer) and pauses instead.
    public func take(_ count: Int) -> TimeInterval {
        lock.lock()
        defer { lock.unlock() }
        let now = DispatchTime.now()
        let elapsed = Double(now.uptimeNanoseconds - last.uptimeNanoseconds) / 1e9
        last = now
        tokens = min(burst, tokens + elapsed * rate) - Double(count)
        return tokens < 0 ? -tokens / rate : 0
    }

    /// Takes `count` bytes from the bucket, sleeping the caller until they are available.
    public func consume(_ count: Int) {
        let wait = take(count)
        if wait > 0 { usleep(UInt32(min(wait, 5) * 1_000_000)) }
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
