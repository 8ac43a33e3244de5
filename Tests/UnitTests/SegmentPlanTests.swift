import TransferCore
import XCTest

final class SegmentPlanTests: XCTestCase {
    func testSplitCoversTheFileExactly() {
        let plan = SegmentPlan.split(totalSize: 100, connections: 3, minSegmentSize: 10)
        XCTAssertEqual(plan.segments.map(\.start), [0, 33, 66])
        XCTAssertEqual(plan.segments.map(\.end), [33, 66, 100])
        XCTAssertEqual(plan.totalSize, 100)
    }

    func testSmallFilesAreNotSplitBelowTheMinimum() {
        XCTAssertEqual(SegmentPlan.split(totalSize: 15, connections: 8, minSegmentSize: 10).segments.count, 1)
        XCTAssertEqual(SegmentPlan.split(totalSize: 45, connections: 8, minSegmentSize: 10).segments.count, 4)
    }

    func testRecordingCompletesSegments() {
        var plan = SegmentPlan.split(totalSize: 20, connections: 2, minSegmentSize: 10)
        plan.recordWritten(10, segment: 0)
        XCTAssertTrue(plan.segments[0].isComplete)
        XCTAssertFalse(plan.isComplete)
        plan.recordWritten(4, segment: 1)
        XCTAssertEqual(plan.segments[1].offset, 14)
        XCTAssertEqual(plan.bytesWritten, 14)
        plan.recordWritten(6, segment: 1)
        XCTAssertTrue(plan.isComplete)
    }

    func testOpenEndedStreamLearnsItsSizeWhenItEnds() {
        var plan = SegmentPlan.single(totalSize: nil)
        plan.recordWritten(1234, segment: 0)
        XCTAssertFalse(plan.isComplete)
        plan.finishOpenSegment(0)
        XCTAssertTrue(plan.isComplete)
        XCTAssertEqual(plan.totalSize, 1234)
    }

    func testSplitRemainderKeepsWrittenBytes() {
        var plan = SegmentPlan.single(totalSize: 100)
        plan.recordWritten(10, segment: 0)
        plan.splitRemainder(connections: 3, minSegmentSize: 10)
        XCTAssertEqual(plan.segments.map(\.start), [0, 10, 40, 70])
        XCTAssertEqual(plan.segments.map(\.end), [10, 40, 70, 100])
        XCTAssertTrue(plan.segments[0].isComplete)
        XCTAssertEqual(plan.bytesWritten, 10)
    }

    func testStealingSplitsTheLargestRemainder() {
        var plan = SegmentPlan.split(totalSize: 100, connections: 2, minSegmentSize: 10)
        plan.recordWritten(50, segment: 0)
        plan.recordWritten(10, segment: 1)
        let stolen = plan.splitLargestRemainder(minSegmentSize: 10)
        XCTAssertEqual(stolen, 2)
        XCTAssertEqual(plan.segments[1].end, 80)
        XCTAssertEqual(plan.segments[2].start, 80)
        XCTAssertEqual(plan.segments[2].end, 100)
        var tiny = SegmentPlan.split(totalSize: 15, connections: 1, minSegmentSize: 10)
        XCTAssertNil(tiny.splitLargestRemainder(minSegmentSize: 10))
    }

    /// Two segments of 100 from 0 and 100, the second written to 120.
    private func twoSegments() -> SegmentPlan {
        var plan = SegmentPlan.split(totalSize: 200, connections: 2, minSegmentSize: 10)
        plan.recordWritten(100, segment: 0)
        plan.recordWritten(20, segment: 1)
        return plan
    }

    func testASplitFallsAfterTheRangeAConnectionIsReceiving() {
        // The connection of segment 1 asked for 120..<170: the middle (160) would cut its response.
        var plan = twoSegments()
        let request = SegmentPlan.Request(end: 170, from: 120, elapsed: 0.5)
        XCTAssertEqual(plan.splitLargestRemainder(minSegmentSize: 10, requests: [1: request]), 2)
        XCTAssertEqual(plan.segments[1].end, 170)
        XCTAssertEqual(plan.segments[2].start, 170)
        XCTAssertEqual(plan.segments[2].end, 200)
        // A range that ends before the middle does not move the cut.
        var early = twoSegments()
        _ = early.splitLargestRemainder(minSegmentSize: 10, requests: [1: SegmentPlan.Request(end: 140, from: 120, elapsed: 0)])
        XCTAssertEqual(early.segments[1].end, 160)
    }

    func testARangeBeingReceivedBySteadyConnectionIsNotCut() {
        // 100..<195 asked for, 20 bytes in 0.5 s: 75 left at 40 a second is under 2 s, the
        // patience, so it is left alone (only 5 would remain after its range, under the minimum).
        var plan = twoSegments()
        let request = SegmentPlan.Request(end: 195, from: 100, elapsed: 0.5)
        XCTAssertNil(plan.splitLargestRemainder(minSegmentSize: 10, requests: [1: request], patience: 2))
        XCTAssertEqual(plan.segments.count, 2)
        XCTAssertTrue(plan.hasSplittableRemainder(minSegmentSize: 10), "the idle connection waits: it may still slow down")
        // One that started moments ago has shown no rate yet.
        XCTAssertNil(plan.splitLargestRemainder(minSegmentSize: 10,
                                                requests: [1: SegmentPlan.Request(end: 200, from: 120, elapsed: 0.1)]))
    }

    func testASlowConnectionIsCutInTheMiddleOfItsRange() {
        // 120..<200 asked for, no byte in a second (a stall): cut at the middle of the remainder.
        var plan = twoSegments()
        let request = SegmentPlan.Request(end: 200, from: 120, elapsed: 1)
        XCTAssertEqual(plan.splitLargestRemainder(minSegmentSize: 10, requests: [1: request]), 2)
        XCTAssertEqual(plan.segments[1].end, 160)
        XCTAssertEqual(plan.segments[2].start, 160)
    }

    func testTheCleanCutIsPreferredOverASlowConnection() {
        var plan = SegmentPlan.split(totalSize: 300, connections: 3, minSegmentSize: 10)
        plan.recordWritten(100, segment: 0)
        // Segment 1 is stalled over its whole remainder; segment 2's range ends at 230, leaving 70.
        let requests = [1: SegmentPlan.Request(end: 200, from: 100, elapsed: 2),
                        2: SegmentPlan.Request(end: 230, from: 200, elapsed: 0.1)]
        XCTAssertEqual(plan.splitLargestRemainder(minSegmentSize: 10, requests: requests), 3)
        XCTAssertEqual(plan.segments[2].end, 250, "the middle of 200..<300 lies after the range being received")
        XCTAssertEqual(plan.segments[1].end, 200)
    }

    func testRemaindersUnderTwiceTheMinimumAreNotWaitedFor() {
        var plan = SegmentPlan.split(totalSize: 40, connections: 2, minSegmentSize: 10)
        plan.recordWritten(20, segment: 0)
        plan.recordWritten(5, segment: 1)
        XCTAssertFalse(plan.hasSplittableRemainder(minSegmentSize: 10))
        XCTAssertNil(plan.splitLargestRemainder(minSegmentSize: 10, requests: [1: SegmentPlan.Request(end: 40, from: 20, elapsed: 9)]))
    }

    func testRequestWindowGrowsWithTheRoundTrip() {
        let floor: Int64 = 16 << 20
        XCTAssertEqual(SegmentPlan.requestWindow(rate: nil, roundTrip: nil), floor)
        XCTAssertEqual(SegmentPlan.requestWindow(rate: 160e6, roundTrip: nil), floor, "no round trip measured yet")
        // Loopback: 160 MB/s, 0.2 ms: 50 round trips are 1.6 MB, under the floor.
        XCTAssertEqual(SegmentPlan.requestWindow(rate: 160e6, roundTrip: 0.0002), floor)
        // 100 ms away at 12.5 MB/s: 50 round trips are 62.5 MB.
        XCTAssertEqual(Double(SegmentPlan.requestWindow(rate: 12.5e6, roundTrip: 0.1)), 62_500_000, accuracy: 1000)
        XCTAssertEqual(SegmentPlan.requestWindow(rate: 1e9, roundTrip: 0.5), 256 << 20, "never over the ceiling")
        XCTAssertEqual(SegmentPlan.requestWindow(rate: .infinity, roundTrip: 0.5), 256 << 20)
        XCTAssertEqual(SegmentPlan.requestWindow(rate: 0, roundTrip: 0.5), floor)
        // An S3 source's floor (`S3Client.requestFloor`): 62.5 MB of round trips is under it.
        XCTAssertEqual(SegmentPlan.requestWindow(rate: 12.5e6, roundTrip: 0.1, floor: S3Client.requestFloor), 64 << 20)
        XCTAssertEqual(SegmentPlan.requestWindow(rate: 160e6, roundTrip: 0.0002, floor: S3Client.requestFloor), 64 << 20)
        XCTAssertEqual(SegmentPlan.requestWindow(rate: 25e6, roundTrip: 0.1, floor: S3Client.requestFloor), 125_000_000)
    }
}
