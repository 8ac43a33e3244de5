import Foundation
@testable import TransferCore
import XCTest

/// The queue's own folders made hostile: transferd writes only inside the queue folder.
final class QueueFolderSafetyTests: XCTestCase {
    private var folder = ""
    private var layout: QueueLayout!
    /// A folder outside the queue that a planted link points to: nothing may land in it.
    private var elsewhere = ""

    override func setUpWithError() throws {
        folder = NSTemporaryDirectory() + "/transferd-folders-\(UUID().uuidString)"
        elsewhere = folder + "/elsewhere"
        try FileManager.default.createDirectory(atPath: folder + "/queue.d", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
        layout = QueueLayout(directory: folder + "/queue.d")
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: folder)
    }

    private func write(_ path: String, _ bytes: [UInt8]) {
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(bytes)), path)
    }

    private func bytes(_ path: String) -> [UInt8]? {
        FileManager.default.contents(atPath: path).map { [UInt8]($0) }
    }

    // MARK: Folders

    func testAQueueFolderThatIsALinkIsRefusedAtStart() throws {
        for name in ["done", "accepted", "rejected", "failed", ".transferd"] {
            try? FileManager.default.removeItem(atPath: layout.path(name))
            XCTAssertEqual(symlink(elsewhere, layout.path(name)), 0)
            XCTAssertThrowsError(try layout.prepare(), name) { error in
                XCTAssertEqual("\(error)", "queue.d/\(name) is a symbolic link to \(elsewhere); transferd writes only inside the queue"
                               + " folder: replace it with a directory (mv queue.d/\(name) queue.d/\(name).link && mkdir queue.d/\(name))")
            }
            unlink(layout.path(name))
            try layout.prepare()
        }
        write(layout.path("done.file"), [1])
        try FileManager.default.removeItem(atPath: layout.done)
        XCTAssertEqual(rename(layout.path("done.file"), layout.done), 0)
        XCTAssertThrowsError(try layout.prepare()) { error in
            XCTAssertTrue("\(error)".hasPrefix("queue.d/done is not a folder; "), "\(error)")
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: elsewhere), [])
    }

    func testAFolderSwappedForALinkAfterStartIsNotWrittenThrough() throws {
        try layout.prepare()
        let store = try SQLiteQueueStore(path: layout.database)
        try FileManager.default.removeItem(atPath: layout.rejected)
        XCTAssertEqual(symlink(elsewhere, layout.rejected), 0)
        try Data("{not json".utf8).write(to: URL(fileURLWithPath: layout.path("bad.json")))
        XCTAssertThrowsError(try QueueIngestor(layout: layout, store: store).ingestAll()) { error in
            XCTAssertTrue("\(error)".hasPrefix("queue.d/rejected is a symbolic link to \(self.elsewhere)"), "\(error)")
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: elsewhere), [])
        XCTAssertTrue(FileManager.default.fileExists(atPath: layout.path("bad.json")))

        try FileManager.default.removeItem(atPath: layout.done)
        XCTAssertEqual(symlink(elsewhere, layout.done), 0)
        XCTAssertThrowsError(try ResultFiles(layout: layout, store: store).update(sourceFiles: ["a.json"]))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: elsewhere), [])
    }
}
