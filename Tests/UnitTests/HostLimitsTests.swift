import Foundation
import TransferCore
import XCTest

final class HostLimitsTests: XCTestCase {
    func testAHostStartsAtTheMaximumAndOthersAreUntouched() {
        var limits = HostLimits(maximum: 32)
        XCTAssertEqual(limits.limit(for: "a"), 32)
        limits.throttled("a", retryAfter: nil, sent: 0, now: 1)
        XCTAssertEqual(limits.limit(for: "a"), 16, "nothing seen served: halved")
        XCTAssertEqual(limits.limit(for: "b"), 32)
        XCTAssertEqual(limits.reduced, ["a": 16])
    }

    func testRefusalsOfRequestsSentBeforeTheCutCutNothing() {
        var limits = HostLimits(maximum: 32)
        // 28 requests sent together at t=10 are refused one after another.
        for offset in 0..<28 { limits.throttled("a", retryAfter: 1, sent: 10, now: 10.1 + Double(offset) * 0.01) }
        XCTAssertEqual(limits.limit(for: "a"), 16, "one burst cuts once")
        // A request sent after that cut, refused: the new limit was too high too.
        limits.throttled("a", retryAfter: 1, sent: 11, now: 11.5)
        XCTAssertEqual(limits.limit(for: "a"), 8)
        for step in 0..<6 { limits.throttled("a", retryAfter: 1, sent: 20 + Double(step), now: 20.5 + Double(step)) }
        XCTAssertEqual(limits.limit(for: "a"), 1, "never below one connection")
    }

    func testACutGoesToWhatTheHostWasServing() {
        var limits = HostLimits(maximum: 32)
        limits.throttled("a", retryAfter: 1, sent: 0, now: 0.1, serving: 4)
        XCTAssertEqual(limits.limit(for: "a"), 4, "it served 4 and refused a fifth")
        limits.throttled("c", retryAfter: 1, sent: 0, now: 0.1, serving: 40)
        XCTAssertEqual(limits.limit(for: "c"), 31, "always below the limit that was refused")
    }

    func testAHostThatTakesFourSettlesAtFour() {
        var limits = HostLimits(maximum: 32)
        limits.throttled("a", retryAfter: nil, sent: 0, now: 1, serving: 4)
        for _ in 0..<4 { limits.succeeded("a", now: 2) }
        XCTAssertEqual(limits.limit(for: "a"), 5, "a round of 4 successes tries one more")
        limits.throttled("a", retryAfter: nil, sent: 2, now: 3, serving: 4)
        XCTAssertEqual(limits.limit(for: "a"), 4, "refused at 5 while serving 4: back to 4, not to half of 5")
    }

    func testOnlyTheRefusalThatCutsIsTheJobsFailure() {
        var limits = HostLimits(maximum: 32)
        XCTAssertEqual(limits.throttled("a", retryAfter: nil, sent: 0, now: 1), .cut)
        XCTAssertEqual(limits.throttled("a", retryAfter: nil, sent: 0, now: 1.1), .overshoot, "sent under the old limit")
        XCTAssertEqual(limits.throttled("a", retryAfter: nil, sent: 2, now: 3), .cut)
        // At one connection a refusal still cuts (to one): a URL that always answers 503 runs out of retries.
        var single = HostLimits(maximum: 1)
        XCTAssertEqual(single.throttled("a", retryAfter: nil, sent: 0, now: 1), .cut)
        XCTAssertEqual(single.throttled("a", retryAfter: nil, sent: 2, now: 3), .cut)
        XCTAssertEqual(single.limit(for: "a"), 1)
    }

    func testSuccessesRaiseTheLimitByOnePerRoundUpToTheMaximum() {
        var limits = HostLimits(maximum: 6)
        limits.throttled("a", retryAfter: nil, sent: 0, now: 0, serving: 3)
        XCTAssertEqual(limits.limit(for: "a"), 3)
        for _ in 0..<2 { limits.succeeded("a", now: 1) }
        XCTAssertEqual(limits.limit(for: "a"), 3, "a round is as many successes as the limit")
        limits.succeeded("a", now: 1)
        XCTAssertEqual(limits.limit(for: "a"), 4)
        for _ in 0..<4 { limits.succeeded("a", now: 1) }
        XCTAssertEqual(limits.limit(for: "a"), 5)
        for _ in 0..<5 { limits.succeeded("a", now: 1) }
        XCTAssertEqual(limits.limit(for: "a"), 6)
        XCTAssertEqual(limits.reduced, [:], "back at the maximum, the host is forgotten")
        for _ in 0..<20 { limits.succeeded("a", now: 1) }
        XCTAssertEqual(limits.limit(for: "a"), 6, "never above the maximum")
    }

    func testRetryAfterHoldsIncreasesUntilItHasPassed() {
        var limits = HostLimits(maximum: 8)
        limits.throttled("a", retryAfter: 30, sent: 100, now: 100, serving: 4)
        for _ in 0..<10 { limits.succeeded("a", now: 110) }
        XCTAssertEqual(limits.limit(for: "a"), 4, "no increase while Retry-After holds")
        for _ in 0..<4 { limits.succeeded("a", now: 131) }
        XCTAssertEqual(limits.limit(for: "a"), 5)
    }

    func testARefusalStartsTheRoundOfSuccessesOver() {
        var limits = HostLimits(maximum: 8)
        limits.throttled("a", retryAfter: nil, sent: 0, now: 1, serving: 4)
        for _ in 0..<3 { limits.succeeded("a", now: 1.5) }
        limits.throttled("a", retryAfter: nil, sent: 0.5, now: 2)  // sent before the cut: no cut, but the round starts over
        limits.succeeded("a", now: 2.5)
        XCTAssertEqual(limits.limit(for: "a"), 4)
        for _ in 0..<3 { limits.succeeded("a", now: 2.5) }
        XCTAssertEqual(limits.limit(for: "a"), 5)
    }

    /// A worker that gets no successes from a host keeps no cut limit for good: one that no
    /// refusal has cut for `recoveryInterval` rises by one, and again each interval after.
    func testALimitRecoversWithTimeWithoutSuccesses() {
        var limits = HostLimits(maximum: 4)
        limits.throttled("a", retryAfter: nil, sent: 0, now: 100, serving: 1)
        XCTAssertEqual(limits.limit(for: "a"), 1)
        XCTAssertFalse(limits.recover(now: 109))
        XCTAssertEqual(limits.limit(for: "a"), 1, "not before the interval")
        XCTAssertTrue(limits.recover(now: 110))
        XCTAssertEqual(limits.limit(for: "a"), 2)
        XCTAssertFalse(limits.recover(now: 115), "an interval from the last raise")
        limits.throttled("a", retryAfter: nil, sent: 112, now: 116, serving: 1)
        XCTAssertFalse(limits.recover(now: 121), "a new cut starts the interval over")
        XCTAssertTrue(limits.recover(now: 126))
        XCTAssertTrue(limits.recover(now: 136))
        XCTAssertTrue(limits.recover(now: 146))
        XCTAssertEqual(limits.limit(for: "a"), 4)
        XCTAssertEqual(limits.reduced, [:], "back at the maximum, forgotten")
        XCTAssertFalse(limits.recover(now: 500))
    }

    func testAnotherWorkersCutIsTakenWhenLowerAndRecoveredFromAlike() {
        var limits = HostLimits(maximum: 16)
        XCTAssertTrue(limits.adopt("a", limit: 4, now: 10))
        XCTAssertEqual(limits.limit(for: "a"), 4)
        XCTAssertEqual(limits.ownCuts, [:], "a cut taken from another is not told again (no echo)")
        XCTAssertEqual(limits.reduced, ["a": 4])
        XCTAssertEqual(limits.limit(for: "b"), 16, "other hosts untouched")
        XCTAssertFalse(limits.adopt("a", limit: 6, now: 11), "a higher limit is no cut for this worker")
        XCTAssertEqual(limits.limit(for: "a"), 4)
        XCTAssertEqual(limits.throttled("a", retryAfter: nil, sent: 9, now: 12), .overshoot,
                       "a request sent before the cut taken answers the old limit, as after a cut of its own")
        XCTAssertFalse(limits.adopt("a", limit: 0, now: 13) && limits.limit(for: "a") < 1)
        XCTAssertEqual(limits.limit(for: "a"), 1, "never below one")
        XCTAssertFalse(limits.recover(now: 22), "the interval starts at the cut taken")
        XCTAssertTrue(limits.recover(now: 23))
        XCTAssertEqual(limits.limit(for: "a"), 2)
        limits.throttled("a", retryAfter: nil, sent: 24, now: 25, serving: 1)
        XCTAssertEqual(limits.ownCuts, ["a": 1], "refused itself, the cut is its own to tell")
    }

    func testRetryAfterHoldsRecoveryByTimeToo() {
        var limits = HostLimits(maximum: 8)
        limits.throttled("a", retryAfter: 60, sent: 0, now: 0, serving: 2)
        XCTAssertFalse(limits.recover(now: 30))
        XCTAssertTrue(limits.recover(now: 60))
        XCTAssertEqual(limits.limit(for: "a"), 3)
    }

    func testTheMaximumChangesWhileLimitsAreCut() {
        var limits = HostLimits(maximum: 8)
        limits.throttled("a", retryAfter: nil, sent: 0, now: 1, serving: 3)
        XCTAssertEqual(limits.limit(for: "a"), 3)
        // Lowered below a cut limit: the cut one comes down too; others take the new maximum.
        limits.setMaximum(2)
        XCTAssertEqual(limits.limit(for: "a"), 2)
        XCTAssertEqual(limits.limit(for: "b"), 2)
        XCTAssertEqual(limits.reduced, [:])
        // Raised: a host cut since stays cut, and recovers towards the new maximum.
        limits.throttled("a", retryAfter: nil, sent: 2, now: 3, serving: 1)
        limits.setMaximum(6)
        XCTAssertEqual(limits.limit(for: "a"), 1)
        XCTAssertEqual(limits.limit(for: "b"), 6)
        XCTAssertEqual(limits.maximum, 6)
    }

}
