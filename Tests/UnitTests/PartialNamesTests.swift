import CSystem
import Foundation
@testable import TransferCore
import XCTest

final class PartialNamesTests: XCTestCase {
    func testThePartialFileAndItsCheckpointHaveNamesNoDestinationTakes() {
        XCTAssertEqual(PartialNames.part(of: "/d/report"), "/d/report.transferd-part")
        XCTAssertEqual(PartialNames.state(of: "/d/report"), "/d/report.transferd-part.state")
        for refused in ["/d/report.transferd-part", "report.transferd-part.state", "a.transferd-part.state.42.7.tmp",
                        "/d/x.transferd-partial", String(repeating: "n", count: PartialNames.longestName + 1)] {
            XCTAssertNotNil(PartialNames.refusal(of: refused), refused)
        }
        for taken in ["/d/report", "/d/report.part", "/d/report.part.state", "/d.transferd-part/report",
                      "transferd-part", String(repeating: "n", count: PartialNames.longestName)] {
            XCTAssertNil(PartialNames.refusal(of: taken), taken)
        }
        // The longest name still leaves room for the checkpoint's temporary file in 255 bytes.
        let longest = String(repeating: "n", count: PartialNames.longestName)
        XCTAssertLessThanOrEqual((PartialNames.state(of: longest) + ".4194304.4294967295.tmp").utf8.count, 255)
    }

    /// An earlier version's `NAME.part` is taken over only when it provably is transferd's.
    func testAnEarlierPartialIsAdoptedOnlyWithItsOwnTag() {
        func decide(new: Bool = false, regular: Bool = true, checkpoint: String??, file: String?, keepsTags: Bool = true)
            -> PartialNames.Adoption {
            PartialNames.adoption(newFilesExist: new, earlierPartIsRegularFile: regular, checkpointTag: checkpoint,
                                  fileTag: file, fileSystemKeepsTags: keepsTags)
        }
        XCTAssertEqual(decide(checkpoint: .some("t1"), file: "t1"), .adopt)
        XCTAssertEqual(decide(checkpoint: .some("t1"), file: "t2"), .leave, "another download's file")
        XCTAssertEqual(decide(checkpoint: .some("t1"), file: nil), .leave, "a file put there since")
        XCTAssertEqual(decide(checkpoint: nil, file: "t1"), .leave, "no checkpoint: nothing to resume")
        XCTAssertEqual(decide(checkpoint: .some(nil), file: nil, keepsTags: false), .adopt, "untaggable file system")
        XCTAssertEqual(decide(checkpoint: .some(nil), file: nil, keepsTags: true), .leave)
        XCTAssertEqual(decide(new: true, checkpoint: .some("t1"), file: "t1"), .leave, "the new names are taken")
        XCTAssertEqual(decide(regular: false, checkpoint: .some("t1"), file: "t1"), .leave)
    }

    /// A finishing queue job of an earlier version puts its `NAME.part` in place when that
    /// carries transferd's tag; a user's `NAME.part` is never taken.
    func testAFinishingJobTakesAnEarlierPartialOnlyWhenTagged() throws {
        let directory = NSTemporaryDirectory() + "partial-names-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let destination = directory + "/f.bin"
        XCTAssertEqual(PartialNames.finishingPart(of: destination), destination + ".transferd-part")
        try Data("x".utf8).write(to: URL(fileURLWithPath: destination + ".part"))
        XCTAssertEqual(PartialNames.finishingPart(of: destination), destination + ".transferd-part", "a user's file")
        guard setxattr(destination + ".part", PartFile.tagAttribute, "t", 1, 0) == 0 else {
            throw XCTSkip("this file system keeps no user attributes")
        }
        XCTAssertEqual(PartialNames.finishingPart(of: destination), destination + ".part")
        try Data("y".utf8).write(to: URL(fileURLWithPath: destination + ".transferd-part"))
        XCTAssertEqual(PartialNames.finishingPart(of: destination), destination + ".transferd-part", "today's name first")
    }
}
