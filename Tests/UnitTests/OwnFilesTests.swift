import Foundation
@testable import TransferCore
import XCTest

/// Which files below an uploaded folder are transferd's own (never uploaded):
/// a table over paths, and a queue folder found by what it holds, not by its name.
final class OwnFilesTests: XCTestCase {
    func testTheDecisionTable() {
        let queues: Set<String> = ["queue.d", "backups/jobs"]
        let table: [(path: String, ownBecause: String?)] = [
            // A queue folder: everything in it, whatever the name of the file.
            ("queue.d/.transferd/api.token", "in the transferd queue folder queue.d/"),
            ("queue.d/.transferd/state.db-wal", "in the transferd queue folder queue.d/"),
            ("queue.d/accepted/jobs.json", "in the transferd queue folder queue.d/"),
            ("queue.d/done/j1.json", "in the transferd queue folder queue.d/"),
            ("queue.d/rejected/bad.json.error", "in the transferd queue folder queue.d/"),
            ("queue.d/new.json", "in the transferd queue folder queue.d/"),
            ("queue.d/.new.json.tmp", "in the transferd queue folder queue.d/"),
            ("backups/jobs/failed/x.json", "in the transferd queue folder backups/jobs/"),
            // A .transferd folder anywhere, a queue or not.
            ("other/.transferd/state.db", "in a .transferd/ state folder"),
            ("other/.transferd/hooks/j1.done.json", "in a .transferd/ state folder"),
            // Downloads in progress and their checkpoints.
            ("iso/debian.iso.transferd-part", "a partial download or its checkpoint"),
            ("iso/debian.iso.transferd-part.state", "a partial download or its checkpoint"),
            ("debian.iso.transferd-part.state.4242.17.tmp", "a partial download or its checkpoint"),
            // An earlier version's: a checkpoint, and NAME.part beside one (`siblings`).
            ("iso/old.iso.part", "an earlier version's partial download"),
            ("iso/old.iso.part.state", "an earlier version's checkpoint of a partial download"),
            ("old.iso.part.state.4242.17.tmp", "an earlier version's checkpoint being written"),
            // The user's files: near misses included.
            ("queue.d.txt", nil),
            ("queue.dx/accepted/jobs.json", nil),
            ("notes/queue.d/accepted/jobs.json", nil),
            ("backups/jobs.json", nil),
            ("report.part1", nil),
            ("video.part", nil),
            ("chapter.partial", nil),
            ("part", nil),
            ("a.part.state.bak", nil),
            ("transferd/state.db", nil),
            (".transferd.conf", nil),
            ("photos/2026/img.jpg", nil),
        ]
        for row in table {
            XCTAssertEqual(OwnFiles.reason(for: row.path, queueFolders: queues, siblings: ["iso/old.iso.part.state"]),
                           row.ownBecause, row.path)
        }
        XCTAssertEqual(OwnFiles.reason(for: "anything.txt", queueFolders: [""]), "the uploaded folder is a transferd queue folder")
    }

    func testAQueueFolderIsKnownByItsStateNotItsName() throws {
        let root = (NSTemporaryDirectory() as NSString).appendingPathComponent("own-files-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(atPath: root) }
        let manager = FileManager.default
        for folder in ["jobs/.transferd", "locked/.transferd", "queue.d/accepted", "empty/.transferd", "linked"] {
            try manager.createDirectory(atPath: root + "/" + folder, withIntermediateDirectories: true)
        }
        _ = manager.createFile(atPath: root + "/jobs/.transferd/state.db", contents: Data())
        _ = manager.createFile(atPath: root + "/locked/.transferd/run.lock", contents: Data())
        try manager.createSymbolicLink(atPath: root + "/linked/.transferd", withDestinationPath: root + "/jobs/.transferd")
        XCTAssertTrue(OwnFiles.isQueueFolder(root + "/jobs"), "a state database")
        XCTAssertTrue(OwnFiles.isQueueFolder(root + "/locked"), "a run lock (a queue on another store)")
        XCTAssertFalse(OwnFiles.isQueueFolder(root + "/queue.d"), "the name alone")
        XCTAssertFalse(OwnFiles.isQueueFolder(root + "/empty"), "an empty .transferd")
        XCTAssertFalse(OwnFiles.isQueueFolder(root + "/linked"), "a link is not followed")
    }
}
