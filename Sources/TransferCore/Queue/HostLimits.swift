import Foundation

/// Per-host connection limits that follow a server's pushback.
///
/// A host that answers 429 or 503 gets its limit cut: to the connections it
/// was seen serving at that moment (it took those and refused one more), or
/// halved when none was seen; never below one. A run of successes as long as
/// the limit raises it by one, up to the configured maximum (additive
/// increase, as TCP does; the decrease uses what the host showed it takes
/// instead of a blind half, so a host that takes four settles at four).
/// Refusals of requests sent before the last cut answer the old limit and
/// cut nothing, so one burst cuts once. A `Retry-After` holds increases until
/// it has passed. A pure value: the runner feeds it outcomes and asks it for
/// limits.
public struct HostLimits: Sendable, Equatable {
    /// The configured limit (`--per-host`), which no host exceeds.
    public let maximum: Int

    struct Host: Sendable, Equatable {
        var limit: Int
        var successes = 0
        var lastCut: TimeInterval
        var holdUntil: TimeInterval
    }

    private var hosts: [String: Host] = [:]

    public init(maximum: Int) {
        self.maximum = max(1, maximum)
    }

    /// The host's current limit.
    public func limit(for host: String) -> Int { hosts[host]?.limit ?? maximum }

    /// The hosts whose limit is below the maximum now, with their limits.
    public var reduced: [String: Int] { hosts.mapValues(\.limit) }

    /// What a refusal meant.
    public enum Refusal: Sendable, Equatable {
        /// It answered the current limit, which it cut: a failure of the job's like any other.
        case cut
        /// It answered a request sent before the last cut, under a higher limit: the run
        /// asked too much, not the job, so it costs the job nothing.
        case overshoot
    }

    /// A request to `host`, sent at `sent`, was refused with 429 or 503 at `now`, while
    /// `serving` other connections to it were seen receiving data (0: none seen).
    @discardableResult
    public mutating func throttled(_ host: String, retryAfter: TimeInterval?, sent: TimeInterval, now: TimeInterval,
                                   serving: Int = 0) -> Refusal {
        var state = hosts[host] ?? Host(limit: maximum, lastCut: -.infinity, holdUntil: -.infinity)
        let refusal: Refusal
        if sent >= state.lastCut {
            state.limit = max(1, serving > 0 ? min(state.limit - 1, serving) : state.limit / 2)
            state.lastCut = now
            refusal = .cut
        } else {
            refusal = .overshoot
        }
        state.successes = 0
        state.holdUntil = max(state.holdUntil, now + max(0, retryAfter ?? 0))
        hosts[host] = state
        return refusal
    }

    /// A transfer from `host` ended well.
    public mutating func succeeded(_ host: String, now: TimeInterval) {
        guard var state = hosts[host], now >= state.holdUntil else { return }
        state.successes += 1
        if state.successes >= state.limit {
            state.limit += 1
            state.successes = 0
        }
        hosts[host] = state.limit >= maximum ? nil : state
    }
}
