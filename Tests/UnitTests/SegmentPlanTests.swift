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
}
