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
/// it has passed. Time raises a limit too: one that no refusal has cut for
/// `recoveryInterval` rises by one (`recover`), so a worker that gets no
/// successes from a host (its jobs went to other workers, or it has none
/// left for it) does not keep a cut limit for good. A pure value: the
/// runner feeds it outcomes and the time, and asks it for limits.
package struct HostLimits: Sendable, Equatable {
    /// The configured limit (`--per-host`, or the queue's `per_host` setting), which no host
    /// exceeds.
    package private(set) var maximum: Int

    struct Host: Sendable, Equatable {
        var limit: Int
        var successes = 0
        var lastCut: TimeInterval
        var holdUntil: TimeInterval
        /// When the limit last changed (a cut or a raise), for `recover`.
        var lastChange: TimeInterval = -.infinity
        /// Whether the limit came from another worker's cut (`adopt`) and none of this one's since.
        var adopted = false
    }

    /// How long a limit stays where a refusal or a raise left it before time alone raises it by one.
    package static let recoveryInterval: TimeInterval = 10

    private var hosts: [String: Host] = [:]

    package init(maximum: Int) {
        self.maximum = max(1, maximum)
    }

    /// Changes the configured limit: a host's limit above the new one comes down to it; one cut
    /// below it stays cut, and recovers towards the new one.
    package mutating func setMaximum(_ value: Int) {
        maximum = max(1, value)
        for (host, state) in hosts where state.limit >= maximum { hosts[host] = nil }
    }

    /// The host's current limit.
    package func limit(for host: String) -> Int { hosts[host]?.limit ?? maximum }

    /// The hosts whose limit is below the maximum now, with their limits.
    package var reduced: [String: Int] { hosts.mapValues(\.limit) }

    /// The hosts whose limit this worker's own refusals cut, with their limits: what it tells
    /// the fleet (a cut taken from another is never told again, so none echoes from worker to
    /// worker).
    package var ownCuts: [String: Int] { hosts.filter { !$0.value.adopted }.mapValues(\.limit) }

    /// What a refusal meant.
    package enum Refusal: Sendable, Equatable {
        /// It answered the current limit, which it cut: a failure of the job's like any other.
        case cut
        /// It answered a request sent before the last cut, under a higher limit: the run
        /// asked too much, not the job, so it costs the job nothing.
        case overshoot
    }

    /// A request to `host`, sent at `sent`, was refused with 429 or 503 at `now`, while
    /// `serving` other connections to it were seen receiving data (0: none seen).
    @discardableResult
    package mutating func throttled(_ host: String, retryAfter: TimeInterval?, sent: TimeInterval, now: TimeInterval,
                                   serving: Int = 0) -> Refusal {
        var state = hosts[host] ?? Host(limit: maximum, lastCut: -.infinity, holdUntil: -.infinity)
        let refusal: Refusal
        if sent >= state.lastCut {
            state.limit = max(1, serving > 0 ? min(state.limit - 1, serving) : state.limit / 2)
            state.lastCut = now
            state.lastChange = now
            state.adopted = false
            refusal = .cut
        } else {
            refusal = .overshoot
        }
        state.successes = 0
        state.holdUntil = max(state.holdUntil, now + max(0, retryAfter ?? 0))
        hosts[host] = state
        return refusal
    }

    /// Another worker of the fleet cut its limit for `host` to `limit` (it was refused): this one
    /// takes the cut as its own when it is lower, as if refused itself, and recovers from it the
    /// same way. Returns whether the limit came down.
    @discardableResult
    package mutating func adopt(_ host: String, limit: Int, now: TimeInterval) -> Bool {
        var state = hosts[host] ?? Host(limit: maximum, lastCut: -.infinity, holdUntil: -.infinity)
        guard limit < state.limit else { return false }
        state.limit = max(1, limit)
        state.successes = 0
        state.lastCut = now
        state.lastChange = now
        state.adopted = true
        hosts[host] = state
        return true
    }

    /// A transfer from `host` ended well.
    package mutating func succeeded(_ host: String, now: TimeInterval) {
        guard var state = hosts[host], now >= state.holdUntil else { return }
        state.successes += 1
        if state.successes >= state.limit {
            state.limit += 1
            state.successes = 0
            state.lastChange = now
        }
        hosts[host] = state.limit >= maximum ? nil : state
    }

    /// Raises by one every limit that has not changed for `recoveryInterval` (and whose
    /// `Retry-After` has passed); returns whether any rose. The runner calls it as time passes.
    @discardableResult
    package mutating func recover(now: TimeInterval) -> Bool {
        var raised = false
        for (host, var state) in hosts where now >= state.holdUntil && now - state.lastChange >= Self.recoveryInterval {
            state.limit += 1
            state.successes = 0
            state.lastChange = now
            hosts[host] = state.limit >= maximum ? nil : state
            raised = true
        }
        return raised
    }
}
