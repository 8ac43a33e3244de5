import Foundation
import TransferCore
import XCTest

final class QueueStoreTests: XCTestCase {
    var path = ""
    var store: SQLiteQueueStore!

    override func setUpWithError() throws {
        path = NSTemporaryDirectory() + "/transferd-store-\(UUID().uuidString).db"
        store = try SQLiteQueueStore(path: path)
    }

    override func tearDown() {
        store = nil
        for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) }
    }

    func job(_ id: String, priority: Int = 0, host: String = "a.example") -> JobSpec {
        JobSpec(id: id, kind: .download, url: "https://\(host)/\(id)", destination: "/data/\(id)", priority: priority)
    }

    func testTheRunLockNamesTheLiveRunOnly() throws {
        let lockPath = path + ".lock"
        defer { unlink(lockPath) }
        XCTAssertNil(RunLock.activeRun(path: lockPath), "no lock file")
        var lock: RunLock? = try RunLock(path: lockPath)
        XCTAssertEqual(RunLock.activeRun(path: lockPath), getpid())
        XCTAssertThrowsError(try RunLock(path: lockPath), "a second run is refused")
        XCTAssertEqual(RunLock.activeRun(path: lockPath), getpid(), "the refused one left the lock file alone")
        withExtendedLifetime(lock) {}
        lock = nil
        XCTAssertNil(RunLock.activeRun(path: lockPath), "released")
        // A run killed with -9 leaves its pid behind; a dead pid is no run.
        try Data("999999999\n".utf8).write(to: URL(fileURLWithPath: lockPath))
        XCTAssertNil(RunLock.activeRun(path: lockPath))
    }

    func testCheckpointsAndProgressPersistAcrossConnections() throws {
        _ = try store.ingest(fileName: "a.json", contentHash: "h", jobs: [job("1")])
        _ = try store.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { _ in true }
        try store.saveCheckpoint("{\"x\":1}", for: "1")
        try store.saveProgress(["1": ProgressSnapshot(bytesDone: 5, bytesTotal: 10, speed: 2)])
        let reopened = try SQLiteQueueStore(path: path)
        XCTAssertEqual(try reopened.checkpoint(for: "1"), "{\"x\":1}")
        XCTAssertEqual(try reopened.job("1")?.bytesDone, 5)
        XCTAssertEqual(try reopened.job("1")?.checkpoint, "{\"x\":1}")
    }

    func testANewerSchemaIsRefused() throws {
        store = nil
        let raw = try SQLiteQueueStore(path: path)
        _ = raw
        // Pretend a future transferd migrated the file.
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA user_version=99'); c.commit()", path]
        try process.run()
        process.waitUntilExit()
        XCTAssertThrowsError(try SQLiteQueueStore(path: path)) { error in
            XCTAssertTrue(String(describing: error).contains("schema version 99"), "\(error)")
        }
    }
}
