import Foundation

/// A floor under a download's speed (curl's `--speed-limit`/`--speed-time`, aria2's
/// `--lowest-speed-limit`): an exchange that moves fewer than `bytesPerSecond` over `seconds`
/// is abandoned as timed out, so a server that trickles a byte every few seconds cannot hold a
/// job for ever (the idle timeout only catches silence). Time spent waiting on a rate limit
/// (the run's or the job's own) is not counted: a transfer slowed on purpose is not slow.
public struct LowSpeedLimit: Sendable, Equatable {
    public var bytesPerSecond: Int64
    public var seconds: TimeInterval

    /// Under 1 KiB/s for 60 s.
    public static let `default` = LowSpeedLimit(bytesPerSecond: 1024, seconds: 60)

    public init(bytesPerSecond: Int64, seconds: TimeInterval) {
        self.bytesPerSecond = bytesPerSecond
        self.seconds = seconds
    }

    /// The floor for each of a download's `connections` when the download is capped at
    /// `maxRate` in all: the floor watches one connection, and the cap is shared by them all, so
    /// a connection's share at or under the floor would trip it by itself. The floor is then
    /// half that share.
    package func under(maxRate: Int64?, connections: Int = 1) -> LowSpeedLimit {
        guard let maxRate else { return self }
        let share = maxRate / Int64(max(1, connections))
        guard share <= bytesPerSecond else { return self }
        return LowSpeedLimit(bytesPerSecond: max(1, share / 2), seconds: seconds)
    }

    /// What `--speed-limit` and `--speed-time` say of it.
    package var described: String {
        "slower than \(bytesPerSecond) bytes/s for \(Int(seconds)) s (the floor is set by --speed-limit and --speed-time)"
    }
}

/// Watches one exchange against a `LowSpeedLimit`: a pure value fed the bytes as they come
/// and the time spent waiting on purpose, so its judgement is tested without a server.
struct LowSpeedWatch {
    let limit: LowSpeedLimit
    /// Where the current window began (seconds, any monotonic clock), and the bytes since.
    private var windowStart: Double
    private var bytes: Int64 = 0
    /// Time in this window spent waiting on a rate limit.
    private var waited: Double = 0

    init(limit: LowSpeedLimit, now: Double) {
        self.limit = limit
        windowStart = now
    }

    /// Notes `count` bytes received at `now`, after `waited` seconds of deliberate waiting;
    /// returns true when the window that just closed moved too little.
    mutating func observe(_ count: Int, at now: Double, waited wait: Double = 0) -> Bool {
        bytes += Int64(count)
        waited += wait
        let counted = now - windowStart - waited
        guard counted >= limit.seconds else { return false }
        let tooSlow = Double(bytes) < Double(limit.bytesPerSecond) * counted
        windowStart = now
        bytes = 0
        waited = 0
        return tooSlow
    }
}

/// An exchange abandoned under the `LowSpeedLimit`: a timeout whose trickle of bytes is no
/// progress (else a server sending a byte now and then would be retried for ever).
struct TooSlow: Error, CustomStringConvertible {
    let url: URL
    let limit: LowSpeedLimit
    var description: String { limit.described }
    var transportError: TransportError { TransportError(.timeout, url: url, message: limit.described) }
}
