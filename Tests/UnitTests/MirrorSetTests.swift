import Foundation
@testable import TransferCore
import XCTest

/// `MirrorSet`'s decisions, without I/O: which mirrors a download uses, which it asks next,
/// which answers it takes, and what it fetches again after a checksum mismatch.
final class MirrorSetTests: XCTestCase {
    let urls = (0..<4).map { URL(string: "http://mirror\($0).example/f.iso")! }
    let etag = { (tag: String) in ResponseValidators(etag: "\"\(tag)\"") }

    func testTheSizeMostMirrorsReportWinsAndTheOthersAreDropped() {
        var set = MirrorSet(urls: urls, perMirror: 2)
        let drops = set.settle([0: .answered(size: 10, validators: etag("a")), 1: .answered(size: 99, validators: etag("b")),
                                2: .answered(size: 10, validators: etag("c")), 3: .failed(reason: "HTTP 404")], expectedSize: nil)
        XCTAssertEqual(set.size, 10)
        XCTAssertEqual(set.inUse, [0, 2])
        XCTAssertEqual(drops.map(\.mirror), [3, 1])
        XCTAssertEqual(set.mirrors[1].dropped, "it serves 99 bytes; the other mirrors say 10")
        XCTAssertEqual(set.mirrors[3].dropped, "HTTP 404")
        // Each mirror is pinned to its own version; the download sees the first one's.
        XCTAssertEqual(set.mirrors[2].pin, etag("c"))
        XCTAssertEqual(set.canonical, etag("a"))
    }

    func testATieGoesToTheFirstListedAndAStatedSizeOutvotesTheMirrors() {
        var tie = MirrorSet(urls: Array(urls.prefix(2)), perMirror: 1)
        tie.settle([0: .answered(size: 5, validators: etag("a")), 1: .answered(size: 6, validators: etag("b"))], expectedSize: nil)
        XCTAssertEqual(tie.size, 5)
        XCTAssertEqual(tie.inUse, [0])

        var stated = MirrorSet(urls: Array(urls.prefix(3)), perMirror: 1)
        stated.settle([0: .answered(size: 5, validators: etag("a")), 1: .answered(size: 5, validators: etag("b")),
                       2: .answered(size: 6, validators: etag("c"))], expectedSize: 6)
        XCTAssertEqual(stated.inUse, [2])
        XCTAssertEqual(stated.mirrors[0].dropped, "it serves 5 bytes; the size given is 6")
    }

    func testAResumedDownloadDropsAMirrorWhoseFileChangedAndTakesANewOne() {
        var first = MirrorSet(urls: Array(urls.prefix(2)), perMirror: 1)
        first.settle([0: .answered(size: 10, validators: etag("a")), 1: .answered(size: 10, validators: etag("b"))], expectedSize: nil)
        // The next run lists a third mirror; the second one's file changed meanwhile.
        var resumed = MirrorSet(urls: Array(urls.prefix(3)), perMirror: 1)
        resumed.restore(first.pins)
        resumed.verified = true
        resumed.settle([0: .answered(size: 10, validators: etag("a")), 1: .answered(size: 10, validators: etag("b2")),
                        2: .answered(size: 10, validators: etag("c"))], expectedSize: nil)
        XCTAssertEqual(resumed.inUse, [0, 2])
        XCTAssertTrue(resumed.mirrors[1].dropped?.hasPrefix("since the partial file was started, the remote file changed") == true,
                      resumed.mirrors[1].dropped ?? "")
        XCTAssertEqual(resumed.canonical, etag("a"))
        XCTAssertEqual(resumed.generation, 0)
    }

    func testWhenEveryPinnedMirrorChangedANewGenerationStarts() {
        var first = MirrorSet(urls: Array(urls.prefix(2)), perMirror: 1)
        first.settle([0: .answered(size: 10, validators: etag("a")), 1: .answered(size: 10, validators: etag("b"))], expectedSize: nil)
        var resumed = MirrorSet(urls: Array(urls.prefix(2)), perMirror: 1)
        resumed.restore(first.pins)
        resumed.settle([0: .answered(size: 12, validators: etag("a2")), 1: .answered(size: 12, validators: etag("b2"))],
                       expectedSize: nil)
        // Both are used for the new version; the download sees a version unlike the one it had.
        XCTAssertEqual(resumed.inUse, [0, 1])
        XCTAssertEqual(resumed.size, 12)
        XCTAssertEqual(resumed.generation, 1)
        XCTAssertFalse(first.canonical.matches(resumed.canonical))
        XCTAssertEqual(resumed.mirrors[1].pin, etag("b2"))
    }

    func testConnectionsGoToUntriedMirrorsFirstThenTheFastestWithAFreeSlot() {
        var set = settled(perMirror: 1)
        XCTAssertEqual(set.choose(now: 0), 0)
        XCTAssertEqual(set.choose(now: 0), 1)
        XCTAssertEqual(set.choose(now: 0), 2)
        XCTAssertNil(set.choose(now: 0), "one slot each, all taken")
        set.finish(0, bytes: 4 << 20, seconds: 1, offset: 0, failure: nil, now: 1)         // 4 MiB/s
        set.finish(1, bytes: 8 << 20, seconds: 1, offset: 4 << 20, failure: nil, now: 1)   // 8 MiB/s
        set.finish(2, bytes: 512 << 10, seconds: 1, offset: 12 << 20, failure: nil, now: 1) // 0.5 MiB/s
        XCTAssertEqual(set.choose(now: 1), 1)
        XCTAssertEqual(set.choose(now: 1), 0)
        // An eighth of the fastest is not worth a connection.
        XCTAssertNil(set.choose(now: 1))
        XCTAssertEqual(set.wait(now: 1), 0.05)
    }

    func testFailuresRestAMirrorAndFiveInARowDropIt() {
        var set = settled(perMirror: 1)
        XCTAssertEqual(set.choose(now: 0), 0)
        set.finish(0, bytes: 0, seconds: 0, offset: 0, failure: "connection refused", now: 10)
        XCTAssertEqual(set.mirrors[0].restingUntil, 11)
        XCTAssertNotEqual(set.choose(now: 10.5), 0)
        for attempt in 2...5 { set.rest(0, reason: "HTTP 503 #\(attempt)", now: 20) }
        XCTAssertEqual(set.mirrors[0].dropped, "it failed 5 times in a row (last: HTTP 503 #5)")
        XCTAssertEqual(set.inUse, [1, 2])
    }

    func testAnAnswerIsTakenOnlyAsTheRangeAskedOfTheSettledVersion() {
        let set = settled(perMirror: 1)
        let range = { (first: Int64, total: Int64) in ContentRange(first: first, last: first + 9, completeLength: total) }
        XCTAssertEqual(set.judge(1, status: 206, contentRange: range(100, 1000), validators: etag("b"), offset: 100), .accept)
        XCTAssertEqual(set.judge(1, status: 206, contentRange: range(0, 1000), validators: etag("b"), offset: 100),
                       .drop(reason: "it answered a request for bytes from 100 with another range"))
        XCTAssertEqual(set.judge(1, status: 206, contentRange: range(100, 999), validators: etag("b"), offset: 100),
                       .drop(reason: "it now serves 999 bytes, not 1000"))
        if case .drop(let reason) = set.judge(1, status: 206, contentRange: range(100, 1000), validators: etag("a"), offset: 100) {
            XCTAssertTrue(reason.hasPrefix("the remote file changed"), reason)
        } else {
            XCTFail("another version is dropped")
        }
        XCTAssertEqual(set.judge(1, status: 200, contentRange: nil, validators: etag("b"), offset: 100),
                       .drop(reason: "it answered a range with the whole file (200)"))
        XCTAssertEqual(set.judge(1, status: 200, contentRange: nil, validators: etag("b"), offset: 0, ranged: false), .accept)
        XCTAssertEqual(set.judge(1, status: 503, contentRange: nil, validators: etag("b"), offset: 100), .rest(reason: "HTTP 503"))
        XCTAssertEqual(set.judge(1, status: 404, contentRange: nil, validators: etag("b"), offset: 100), .drop(reason: "HTTP 404"))
    }

    func testBytesFetchedAgainBelongToTheMirrorThatSentThemLast() {
        var set = settled(perMirror: 4)
        for _ in 0..<3 { _ = set.choose(now: 0) }
        set.finish(0, bytes: 400, seconds: 1, offset: 0, failure: nil, now: 1)
        set.finish(1, bytes: 400, seconds: 1, offset: 400, failure: nil, now: 1)
        set.finish(2, bytes: 200, seconds: 1, offset: 800, failure: nil, now: 1)
        XCTAssertEqual(set.suspects(in: 350..<450), [0, 1])
        XCTAssertEqual(set.holds(1), 400)
        XCTAssertTrue(set.servedEntirely(400..<800, by: 1))
        XCTAssertFalse(set.servedEntirely(300..<800, by: 1))
        // Mirror 0 sends 300..<500 again: the file's bytes there are now its.
        _ = set.choose(now: 2)
        set.finish(0, bytes: 200, seconds: 1, offset: 300, failure: nil, now: 3)
        XCTAssertEqual(set.holds(0), 500)
        XCTAssertEqual(set.holds(1), 300)
        XCTAssertEqual(set.mirrors[0].bytesServed, 600, "delivered counts every byte")
        XCTAssertEqual(set.suspects(in: 350..<450), [0])
    }

    func testAfterAChecksumMismatchOneMirrorIsAskedAndAFileAllItsAndStillWrongDropsIt() {
        var set = settled(perMirror: 4)
        for _ in 0..<3 { _ = set.choose(now: 0) }
        set.finish(0, bytes: 300, seconds: 1, offset: 0, failure: nil, now: 1)
        set.finish(1, bytes: 500, seconds: 1, offset: 300, failure: nil, now: 1)
        set.finish(2, bytes: 200, seconds: 1, offset: 800, failure: nil, now: 1)
        let first = set.narrowToOne()
        XCTAssertEqual(first?.mirror, 1, "the one that served the most")
        XCTAssertEqual(first?.refetch, [0..<300, 800..<1000])
        XCTAssertNil(first?.proven)
        XCTAssertEqual(set.capacity, 4)
        // Only the chosen mirror is asked, up to its slots.
        XCTAssertEqual((0..<5).map { _ in set.choose(now: 2) }, [1, 1, 1, 1, nil])
        set.finish(1, bytes: 300, seconds: 1, offset: 0, failure: nil, now: 3)
        set.finish(1, bytes: 200, seconds: 1, offset: 800, failure: nil, now: 3)
        // Still wrong with every byte from mirror 1: it is wrong; mirror 0 is asked for everything.
        let second = set.narrowToOne()
        XCTAssertEqual(second?.proven?.mirror, 1)
        XCTAssertEqual(set.mirrors[1].dropped, "the whole file from it fails the checksum")
        XCTAssertEqual(second?.mirror, 0)
        XCTAssertEqual(second?.refetch, [0..<1000])
    }

    func testARefetchedPlanKeepsTheBytesBetweenTheRanges() {
        var plan = SegmentPlan.split(totalSize: 1000, connections: 3, minSegmentSize: 1)
        for index in plan.segments.indices { plan.recordWritten(plan.segments[index].remaining!, segment: index) }
        let again = plan.refetching([900..<2000, 100..<200, 150..<300])
        XCTAssertTrue(again.isCoherent)
        XCTAssertEqual(again.bytesWritten, 1000 - 200 - 100)
        XCTAssertEqual(again.segments.filter { !$0.isComplete }.map { $0.start..<$0.end! }, [100..<300, 900..<1000])
    }

    func testTheOneMirrorLeftAfterAMismatchIsAskedHoweverSlow() {
        var set = settled(perMirror: 1)
        for _ in 0..<3 { _ = set.choose(now: 0) }
        set.finish(0, bytes: 100 << 10, seconds: 1, offset: nil, failure: nil, now: 1)    // slow
        set.finish(1, bytes: 64 << 20, seconds: 1, offset: nil, failure: nil, now: 1)     // fast
        set.finish(2, bytes: 32 << 20, seconds: 1, offset: nil, failure: nil, now: 1)
        set.wrote(0..<600, by: 0)
        set.wrote(600..<1000, by: 1)
        XCTAssertEqual(set.narrowToOne()?.mirror, 0, "the one that holds the most")
        // Mirror 0 is an eighth as fast as the others, but it is the only one asked now.
        XCTAssertEqual(set.choose(now: 2), 0)
    }

    func testAResumeWithoutAChecksumTakesNoBytesFromAMirrorWithoutAPin() {
        var first = MirrorSet(urls: Array(urls.prefix(1)), perMirror: 1)
        first.settle([0: .answered(size: 10, validators: etag("a"))], expectedSize: nil)
        for verified in [false, true] {
            var resumed = MirrorSet(urls: Array(urls.prefix(2)), perMirror: 1)
            resumed.restore(first.pins)
            resumed.verified = verified
            resumed.settle([0: .answered(size: 10, validators: etag("a")), 1: .answered(size: 10, validators: etag("b"))],
                           expectedSize: nil)
            if verified {
                XCTAssertEqual(resumed.inUse, [0, 1])
                XCTAssertEqual(resumed.mirrors[1].pin, etag("b"))
            } else {
                XCTAssertEqual(resumed.inUse, [0])
                XCTAssertEqual(resumed.mirrors[1].dropped, MirrorSet.unmatchable)
            }
        }
    }

    func testAMirrorThatMayComeBackRestsInsteadOfBeingDropped() {
        var set = MirrorSet(urls: Array(urls.prefix(2)), perMirror: 1)
        set.settle([0: .answered(size: 10, validators: etag("a")), 1: .unavailable(reason: "HTTP 503")], expectedSize: nil, now: 5)
        XCTAssertEqual(set.inUse, [0, 1])
        XCTAssertEqual(set.mirrors[1].restingUntil, 6)
        XCTAssertNil(set.mirrors[1].pin)
        // Its first answer later is judged by size, then pins it.
        XCTAssertEqual(set.judge(1, status: 206, contentRange: ContentRange(first: 0, last: 4, completeLength: 10),
                                 validators: etag("b"), offset: 0), .accept)
        set.pinIfNeeded(1, etag("b"))
        XCTAssertEqual(set.mirrors[1].pin, etag("b"))
        // None answering: nothing is known, and every one only rests.
        var none = MirrorSet(urls: Array(urls.prefix(2)), perMirror: 1)
        none.settle([0: .unavailable(reason: "timeout"), 1: .unavailable(reason: "HTTP 502")], expectedSize: nil)
        XCTAssertNil(none.size)
        XCTAssertEqual(none.inUse, [0, 1])
        for _ in 0..<4 { none.rest(0, reason: "timeout", now: 0) }
        XCTAssertTrue(none.mirrors[0].droppedAfterFailures)
        XCTAssertTrue(none.onlyFailuresLeft)
        none.drop(1, reason: "HTTP 404")
        XCTAssertFalse(none.onlyFailuresLeft)
        // A conditional HEAD's 304 passes.
        XCTAssertEqual(set.judge(0, status: 304, contentRange: nil, validators: ResponseValidators(), offset: 0, ranged: false), .accept)
    }

    func testASlowOrUntriedMirrorIsAskedForAShortRange() {
        var set = settled(perMirror: 2)
        XCTAssertEqual(set.requestCap(0), 1 << 20, "untried: 1 MiB")
        for _ in 0..<3 { _ = set.choose(now: 0) }
        set.finish(0, bytes: 64 << 20, seconds: 1, offset: nil, failure: nil, now: 1)      // 64 MiB/s
        set.finish(1, bytes: 40 << 20, seconds: 1, offset: nil, failure: nil, now: 1)      // 40 MiB/s: over half
        set.finish(2, bytes: 100 << 10, seconds: 1, offset: nil, failure: nil, now: 1)     // 100 KiB/s
        XCTAssertNil(set.requestCap(0), "the fastest: as the download asks")
        XCTAssertNil(set.requestCap(1), "over half the fastest's speed")
        XCTAssertEqual(set.requestCap(2), 256 << 10, "a second of its speed, at least 256 KiB")
    }

    /// Three mirrors of a 1,000-byte file, settled.
    private func settled(perMirror: Int) -> MirrorSet {
        var set = MirrorSet(urls: Array(urls.prefix(3)), perMirror: perMirror)
        set.settle([0: .answered(size: 1000, validators: etag("a")), 1: .answered(size: 1000, validators: etag("b")),
                    2: .answered(size: 1000, validators: etag("c"))], expectedSize: nil)
        return set
    }
}
