import Foundation
@testable import TransferCore
import XCTest

/// The verdict on each kind of answer a download can get, without a server.
final class ResponseDecisionTests: XCTestCase {
    typealias Decision = ResponseDecision
    let mib: Int64 = 1 << 20

    func decide(offset: Int64 = 0, end: Int64? = nil, sent: Bool = true, total: Int64? = nil, etag: String? = nil,
                segmented: Bool = false, status: Int, range: String? = nil, length: Int64? = nil,
                answeredTag: String? = nil, acceptsRanges: Bool = true) -> Decision.Verdict {
        Decision.decide(asked: .init(offset: offset, end: end, sentRange: sent),
                        known: .init(totalSize: total, validators: ResponseValidators(etag: etag), segmented: segmented),
                        answer: .init(status: status, contentRange: range, contentLength: length,
                                      validators: ResponseValidators(etag: answeredTag), acceptsRanges: acceptsRanges))
    }

    func testA206IsTheRangeItNames() {
        XCTAssertEqual(decide(end: 4 * mib, status: 206, range: "bytes 0-4194303/67108864", length: 4 * mib, answeredTag: "\"a\""),
                       .range(end: 4 * mib, completeLength: 64 * mib))
        // A body longer than asked is cut where the request ended.
        XCTAssertEqual(decide(end: 100, status: 206, range: "bytes 0-999/1000"), .range(end: 100, completeLength: 1000))
    }

    func testA206ThatIsNotTheAskedRangeIsNeverWritten() {
        guard case .withoutRange = decide(end: 100, status: 206) else { return XCTFail("no Content-Range") }
        guard case .withoutRange = decide(offset: 50, end: 100, status: 206, range: "bytes 0-49/100") else {
            return XCTFail("another offset")
        }
        guard case .refuse = decide(end: 100, status: 206, range: "bytes 0-99/1000", length: 50) else {
            return XCTFail("a length that disagrees")
        }
        guard case .restart(let reason) = decide(offset: 10, end: 100, etag: "\"a\"", status: 206,
                                                 range: "bytes 10-99/1000", answeredTag: "\"b\"") else {
            return XCTFail("another version")
        }
        XCTAssertTrue(reason.contains("\"a\"") && reason.contains("\"b\""), "says what changed: \(reason)")
        guard case .restart = decide(offset: 10, end: 100, total: 2000, status: 206, range: "bytes 10-99/1000") else {
            return XCTFail("another size")
        }
    }

    func testA200ThatMayBeOnlyTheRangeIsNeverTheWholeFile() {
        // The first range of `-c 4`, answered 200 with exactly its length and nothing else.
        guard case .withoutRange = decide(end: 4 * mib, status: 200, length: 4 * mib) else { return XCTFail("first range") }
        // A resume from 44 MiB answered 200 with the last 20 MiB.
        guard case .withoutRange = decide(offset: 44 * mib, total: 64 * mib, status: 200, length: 20 * mib) else {
            return XCTFail("resume")
        }
        guard case .withoutRange = decide(offset: 44 * mib, status: 200, length: 20 * mib) else { return XCTFail("resume, no size") }
        // No length, from 0: written as the whole file, judged when it ends (DownloadSink).
        XCTAssertEqual(decide(end: 4 * mib, status: 200), .wholeUnlessItEndsAt(span: 4 * mib, changed: false, rangesSupported: true))
        guard case .withoutRange = decide(offset: 1, end: 4 * mib, status: 200) else { return XCTFail("no length, later offset") }
    }

    func testA200ThatCannotBeTheRangeIsTheWholeFile() {
        // More than asked.
        XCTAssertEqual(decide(end: 4 * mib, status: 200, length: 64 * mib),
                       .whole(size: 64 * mib, changed: false, rangesSupported: true))
        // A file shorter than the range asked from 0: the same bytes either way.
        XCTAssertEqual(decide(end: 4 * mib, status: 200, length: mib), .whole(size: mib, changed: false, rangesSupported: true))
        // The known size exactly: a resume the server answered with the whole file.
        XCTAssertEqual(decide(offset: 44 * mib, total: 64 * mib, status: 200, length: 64 * mib),
                       .whole(size: 64 * mib, changed: false, rangesSupported: true))
        // The range's length, but the known size too: a 4 MiB file asked for its first 4 MiB.
        XCTAssertEqual(decide(end: 4 * mib, total: 4 * mib, status: 200, length: 4 * mib),
                       .whole(size: 4 * mib, changed: false, rangesSupported: true))
        // A changed version is whole, and later ranges are not trusted to match it.
        XCTAssertEqual(decide(offset: 10, total: 100, etag: "\"a\"", status: 200, length: 100, answeredTag: "\"b\""),
                       .whole(size: 100, changed: true, rangesSupported: false))
        // Without Range asked, a 200 is the whole file.
        XCTAssertEqual(decide(sent: false, status: 200, length: 5, acceptsRanges: false),
                       .whole(size: 5, changed: false, rangesSupported: false))
        // Segments cannot take a whole file in place.
        guard case .restart = decide(offset: 16 * mib, end: 32 * mib, total: 64 * mib, segmented: true, status: 200,
                                     length: 64 * mib) else { return XCTFail("segmented") }
    }

    func testA200WithAContentRangeIsThatRangeOrNothing() {
        XCTAssertEqual(decide(offset: 4 * mib, end: 8 * mib, status: 200, range: "bytes 4194304-8388607/67108864", length: 4 * mib),
                       .range(end: 8 * mib, completeLength: 64 * mib))
        guard case .refuse = decide(offset: 4 * mib, end: 8 * mib, status: 200, range: "bytes 0-4194303/67108864") else {
            return XCTFail("another offset")
        }
        guard case .refuse = decide(sent: false, status: 200, range: "bytes 0-99/1000", length: 100) else {
            return XCTFail("a part as the whole")
        }
        // The whole body named as a range, to a request without Range: harmless.
        XCTAssertEqual(decide(sent: false, status: 200, range: "bytes 0-99/100", length: 100),
                       .whole(size: 100, changed: false, rangesSupported: true))
    }

    func testA416IsALength() {
        // An empty file: the first range is refused with its size, 0.
        XCTAssertEqual(decide(end: 4 * mib, status: 416, range: "bytes */0"), .nothingLeft(size: 0))
        XCTAssertEqual(decide(offset: 100, end: 200, status: 416, range: "bytes */100"), .nothingLeft(size: 100))
        XCTAssertEqual(decide(offset: 100, total: 100, status: 416), .nothingLeft(size: 100))
        guard case .restart(let reason) = decide(offset: 150, status: 416, range: "bytes */100") else { return XCTFail("shrank") }
        XCTAssertTrue(reason.contains("100") && reason.contains("150"), reason)
        guard case .restart = decide(offset: 100, total: 200, status: 416, range: "bytes */100") else { return XCTFail("size") }
        guard case .withoutRange = decide(offset: 50, status: 416, range: "bytes */100") else { return XCTFail("satisfiable") }
        guard case .withoutRange = decide(end: 100, status: 416) else { return XCTFail("no size") }
        guard case .restart = decide(offset: 100, etag: "\"a\"", status: 416, range: "bytes */100", answeredTag: "\"b\"") else {
            return XCTFail("another version")
        }
        XCTAssertEqual(decide(sent: false, status: 416), .error(status: 416))
    }

    /// Found by the response-decision fuzz target: a 206 to a request without Range and with no
    /// usable Content-Range asked to fetch again "without Range", which had not been sent.
    func testA206ToARequestWithoutRangeIsTheWholeFileOrRefused() {
        guard case .refuse = decide(sent: false, status: 206) else { return XCTFail("no Content-Range") }
        guard case .refuse = decide(sent: false, status: 206, range: "bytes 0-99/1000") else { return XCTFail("a part") }
        XCTAssertEqual(decide(sent: false, status: 206, range: "bytes 0-99/100"), .range(end: 100, completeLength: 100))
    }

    func testOtherStatuses() {
        XCTAssertEqual(decide(status: 404), .error(status: 404))
        XCTAssertEqual(decide(status: 503), .error(status: 503))
        guard case .refuse = decide(status: 204) else { return XCTFail("204") }
    }

    func testTheLengthOfA416() {
        XCTAssertEqual(Decision.unsatisfiedLength("bytes */0"), 0)
        XCTAssertEqual(Decision.unsatisfiedLength(" bytes */1234 "), 1234)
        for bad in ["bytes */", "bytes */-1", "bytes */+1", "bytes */1x", "bytes 0-1/2", "*/5", "bytes */99999999999999999999"] {
            XCTAssertNil(Decision.unsatisfiedLength(bad), bad)
        }
        XCTAssertEqual(Decision.Answer.length("12"), 12)
        XCTAssertNil(Decision.Answer.length("+12"))
        XCTAssertNil(Decision.Answer.length(""))
    }
}

/// The floor under a download's speed, without a server.
final class LowSpeedWatchTests: XCTestCase {
    func testATrickleIsCaughtAtTheEndOfItsWindow() {
        var watch = LowSpeedWatch(limit: LowSpeedLimit(bytesPerSecond: 1024, seconds: 60), now: 0)
        // One byte every 5 s: judged once 60 s have passed, not before.
        for second in stride(from: 5.0, to: 60, by: 5) { XCTAssertFalse(watch.observe(1, at: second), "\(second)") }
        XCTAssertTrue(watch.observe(1, at: 60))
    }

    func testEnoughBytesPassAndStartAWindowAfresh() {
        var watch = LowSpeedWatch(limit: LowSpeedLimit(bytesPerSecond: 1024, seconds: 10), now: 0)
        XCTAssertFalse(watch.observe(20 * 1024, at: 10))
        XCTAssertFalse(watch.observe(100, at: 15))
        XCTAssertTrue(watch.observe(100, at: 20), "the next window is judged on its own bytes")
    }

    func testTimeWaitedOnARateLimitIsNotCounted() {
        var watch = LowSpeedWatch(limit: LowSpeedLimit(bytesPerSecond: 1024, seconds: 10), now: 0)
        // A run's cap held the transfer 9 s of every 10: 2 KiB in the one second it ran.
        XCTAssertFalse(watch.observe(2048, at: 10, waited: 9))
        XCTAssertFalse(watch.observe(2048, at: 20, waited: 9))
    }

    func testAJobsOwnCapBelowTheFloorLowersIt() {
        let floor = LowSpeedLimit.default
        XCTAssertEqual(floor.under(maxRate: 512).bytesPerSecond, 256)
        XCTAssertEqual(floor.under(maxRate: 1 << 20), floor)
        XCTAssertEqual(floor.under(maxRate: nil), floor)
        // The cap is the download's total; the floor watches each connection, whose share it is.
        XCTAssertEqual(floor.under(maxRate: 3072, connections: 4).bytesPerSecond, 384)
        XCTAssertEqual(floor.under(maxRate: 8192, connections: 4), floor)
        XCTAssertEqual(floor.under(maxRate: 4096, connections: 4).bytesPerSecond, 512)
        XCTAssertEqual(floor.under(maxRate: 3072, connections: 0), floor)
    }
}
