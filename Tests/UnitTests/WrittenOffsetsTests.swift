import Foundation
import XCTest
@testable import TransferCore

/// The partial file's own record of how far each segment is written: what it
/// may add to a checkpoint, and what it must never claim.
final class WrittenOffsetsTests: XCTestCase {
    let plan = SegmentPlan(segments: [SegmentPlan.Segment(start: 0, end: 100, written: 10),
                                      SegmentPlan.Segment(start: 100, end: 200, written: 5)], totalSize: 200)

    func record(_ written: [Int64], id: String = "i1", boot: String = "b1", starts: [Int64] = [0, 100]) -> WrittenOffsets {
        var record = WrittenOffsets(id: id, bootID: boot, plan: plan)
        record.segments = zip(starts, written).map { WrittenOffsets.Segment(start: $0, written: $1) }
        return record
    }

    func testItRoundTripsThroughItsText() {
        let original = record([40, 60])
        XCTAssertEqual(original.encoded, "1\ni1\nb1\n0:40\n100:60")
        XCTAssertEqual(WrittenOffsets(encoded: original.encoded), original)
    }

    func testTextItDidNotWriteIsNoRecord() {
        for text in ["", "1", "1\ni1", "1\n\nb1", "2\ni1\nb1\n0:1", "1\ni1\nb1\n0", "1\ni1\nb1\n0:x", "1\ni1\nb1\n-1:5",
                     "1\ni1\nb1\n0:-5", "1\ni1\nb1\n9223372036854775807:1", "1\ni1\nb1\n0:1:2", "1\ni1\nb1\n0:1\n"] {
            XCTAssertNil(WrittenOffsets(encoded: text), text.debugDescription)
        }
        XCTAssertEqual(WrittenOffsets(encoded: "1\ni1\nb1")?.segments, [], "a plan of no segments yet")
    }

    func testItRaisesWrittenBytesOnlyForItsIncarnationAndBoot() {
        let claim = record([40, 60])
        let extended = claim.extending(plan, id: "i1", bootID: "b1", fileSize: 200)
        XCTAssertEqual(extended.segments.map(\.written), [40, 60])
        XCTAssertEqual(extended.segments.map(\.end), [100, 200], "segments are kept, only their written bytes move")
        XCTAssertEqual(claim.extending(plan, id: "i2", bootID: "b1", fileSize: 200), plan, "another incarnation of the file")
        XCTAssertEqual(claim.extending(plan, id: nil, bootID: "b1", fileSize: 200), plan, "a checkpoint naming none")
        XCTAssertEqual(claim.extending(plan, id: "i1", bootID: "b2", fileSize: 200), plan, "another boot: maybe lost with the page cache")
        XCTAssertEqual(claim.extending(plan, id: "i1", bootID: nil, fileSize: 200), plan, "no boot identity")
    }

    func testItNeverClaimsMoreThanTheSegmentOrTheFileHolds() {
        XCTAssertEqual(record([500, 500]).extending(plan, id: "i1", bootID: "b1", fileSize: 200).segments.map(\.written), [100, 100])
        XCTAssertEqual(record([500, 500]).extending(plan, id: "i1", bootID: "b1", fileSize: 150).segments.map(\.written), [100, 50],
                       "a file shorter than the claim (truncated meanwhile)")
        XCTAssertEqual(record([500, 500]).extending(plan, id: "i1", bootID: "b1", fileSize: 50).segments.map(\.written), [50, 5])
        XCTAssertEqual(record([5, 1]).extending(plan, id: "i1", bootID: "b1", fileSize: 200), plan, "an older record takes nothing away")
        XCTAssertEqual(record([40, 60], starts: [0, 90]).extending(plan, id: "i1", bootID: "b1", fileSize: 200).segments.map(\.written),
                       [40, 5], "a segment that starts elsewhere is another segment")
        XCTAssertEqual(record([40]).extending(plan, id: "i1", bootID: "b1", fileSize: 200).segments.map(\.written), [40, 5],
                       "a record of fewer segments")
        let split = record([40, 60, 30], starts: [0, 100, 150])
        XCTAssertEqual(split.extending(plan, id: "i1", bootID: "b1", fileSize: 200).segments.count, 2,
                       "a segment split off after the checkpoint is fetched again as part of the one it came from")
        let hostile = SegmentPlan(segments: [SegmentPlan.Segment(start: .min, end: 10), SegmentPlan.Segment(start: 20, end: .min)],
                                  totalSize: nil)
        let claim = WrittenOffsets(id: "i1", bootID: "b1", plan: SegmentPlan(segments: [], totalSize: nil))
        var wild = claim
        wild.segments = [WrittenOffsets.Segment(start: .min, written: 1), WrittenOffsets.Segment(start: 20, written: 1)]
        XCTAssertEqual(wild.extending(hostile, id: "i1", bootID: "b1", fileSize: .max), hostile, "a checkpoint's wild numbers: no trap")
    }

    func testAnOpenEndedOrFinishedSegment() {
        let open = SegmentPlan(segments: [SegmentPlan.Segment(start: 0, end: nil, written: 10)], totalSize: nil)
        let claim = WrittenOffsets(id: "i1", bootID: "b1", plan: SegmentPlan(segments: [SegmentPlan.Segment(start: 0, end: nil, written: 80)],
                                                                             totalSize: nil))
        XCTAssertEqual(claim.extending(open, id: "i1", bootID: "b1", fileSize: 70).segments[0].written, 70, "bounded by the file")
        var finished = open
        finished.finishOpenSegment(0)
        XCTAssertEqual(claim.extending(finished, id: "i1", bootID: "b1", fileSize: 70), finished, "a finished segment is left alone")
    }

    func testACheckpointExtendedByItsRecordKeepsWhatIsDurable() {
        var checkpoint = DownloadCheckpoint(url: "http://h/f", validators: ResponseValidators(), plan: plan, rangesSupported: true)
        checkpoint.writtenID = "i1"
        let extended = checkpoint.extended(by: record([40, 60]), bootID: "b1", fileSize: 200)
        XCTAssertEqual(extended.plan.bytesWritten, 100)
        XCTAssertEqual(extended.durable, plan, "every byte of the checkpoint was synced; the added ones are not")
        XCTAssertEqual(extended.bootID, "b1", "the added bytes are trusted only in this boot")
        XCTAssertEqual(extended.trusted(inBoot: "b2").plan, plan, "after a reboot only the synced bytes count")
        XCTAssertEqual(checkpoint.extended(by: record([40, 60], boot: "b0"), bootID: "b1", fileSize: 200), checkpoint)
        var partly = checkpoint
        partly.durable = SegmentPlan(segments: [SegmentPlan.Segment(start: 0, end: 100, written: 2),
                                                SegmentPlan.Segment(start: 100, end: 200, written: 0)], totalSize: 200)
        partly.bootID = "b1"
        XCTAssertEqual(partly.extended(by: record([40, 60]), bootID: "b1", fileSize: 200).durable, partly.durable)
        XCTAssertNil(partly.durableOnly.writtenID, "after a failed sync the file's record is not trusted")
    }
}
