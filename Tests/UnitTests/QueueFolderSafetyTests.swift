import Foundation
@testable import TransferCore
import XCTest

/// The queue's own folders and store, made hostile or broken: transferd writes only
/// inside the queue folder, and never starts an empty queue over a store that lost its jobs.
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

    // MARK: The store

    func testAnEmptyStoreBesideAcceptedJobFilesIsRefusedAndLeftAlone() throws {
        try layout.prepare()
        write(layout.accepted + "/jobs.json", Array(#"{"url": "https://e.com/a"}"#.utf8))
        write(layout.database, [])
        XCTAssertThrowsError(try layout.openStateStore()) { error in
            let text = "\(error)"
            XCTAssertTrue(text.hasPrefix("the queue's state store \(self.layout.database) is empty (0 bytes), but accepted/ holds 1 file:"
                                         + " the jobs recorded in it would be forgotten. transferd will not start on it"), text)
            XCTAssertTrue(text.contains("mv \(self.layout.database) \(self.layout.database).broken"), text)
            XCTAssertTrue(text.contains("mv \(self.layout.directory)/accepted/* \(self.layout.directory)/"), text)
        }
        XCTAssertEqual(bytes(layout.database), [])
        XCTAssertFalse(FileManager.default.fileExists(atPath: layout.database + "-wal"))
    }

    func testAMissingStoreBesideResultFilesIsRefused() throws {
        try layout.prepare()
        write(layout.done + "/jobs.json", Array("[]\n".utf8))
        XCTAssertThrowsError(try layout.openStateStore()) { error in
            XCTAssertTrue("\(error)".contains("\(self.layout.database) is missing, but done/ holds 1 file"), "\(error)")
            XCTAssertFalse("\(error)".contains(".broken"), "nothing to move aside: \(error)")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: layout.database))
    }

    func testAStoreThatIsNotADatabaseIsRefusedAndLeftAlone() throws {
        try layout.prepare()
        let garbage = (0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        write(layout.database, garbage)
        XCTAssertThrowsError(try layout.openStateStore()) { error in
            XCTAssertTrue("\(error)".hasPrefix("the queue's state store \(self.layout.database) is not a SQLite database"), "\(error)")
        }
        XCTAssertEqual(bytes(layout.database), garbage)
    }

    func testADamagedDatabaseIsRefusedAndLeftAlone() throws {
        try layout.prepare()
        do {
            let store = try SQLiteQueueStore(path: layout.database)
            let specs = (0..<200).map { JobSpec(id: "j\($0)", kind: .download, url: "https://e.com/\($0)", destination: "/d/\($0)") }
            _ = try store.ingest([JobFileContent(fileName: "a.json", contentHash: "h", jobs: specs)])
        }
        // Back into one file (the last connection's close checkpoints the WAL), then page 2 overwritten.
        XCTAssertFalse(FileManager.default.fileExists(atPath: layout.database + "-wal"))
        var damaged = try XCTUnwrap(bytes(layout.database))
        let pageSize = Int(damaged[16]) << 8 | Int(damaged[17])
        XCTAssertGreaterThan(damaged.count, 3 * pageSize)
        for offset in pageSize..<2 * pageSize { damaged[offset] = 0xA5 }
        write(layout.database, damaged)
        XCTAssertThrowsError(try layout.openStateStore()) { error in
            XCTAssertTrue("\(error)".contains("\(self.layout.database) fails SQLite's integrity check")
                          || "\(error)".contains("\(self.layout.database) cannot be read as a SQLite database"), "\(error)")
        }
        XCTAssertEqual(bytes(layout.database), damaged)
    }

    func testAnEmptyStoreWithNothingRecordedStartsANewQueue() throws {
        try layout.prepare()
        write(layout.database, [])
        write(layout.rejected + "/bad.json", [1])  // a rejected file recorded no job
        let store = try layout.openStateStore()
        XCTAssertEqual(try store.jobs().count, 0)
        XCTAssertNoThrow(try layout.openStateStore(), "reopened once it holds the schema")
    }
}
