@testable import TransferCore
import XCTest

/// The queue makes a batch of finished files durable with one `syncfs` per filesystem they are on.
final class QueueSyncTests: XCTestCase {
    private func device(ofDescriptor fd: Int32) -> dev_t {
        var info = stat()
        XCTAssertEqual(fstat(fd, &info), 0)
        return info.st_dev
    }

    private func device(_ path: String) -> dev_t {
        var info = stat()
        XCTAssertEqual(stat(path, &info), 0, path)
        return info.st_dev
    }

    private func makeFolder(in parent: String) throws -> String {
        let folder = (parent as NSString).appendingPathComponent("sync-" + UUID().uuidString)
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        addTeardownBlock { try? FileManager.default.removeItem(atPath: folder) }
        return folder
    }

    func testEveryFilesystemOfTheBatchIsSyncedOnce() throws {
        // scripts/test mounts a small tmpfs (another filesystem than the scratch folder's).
        guard let otherMount = ProcessInfo.processInfo.environment["TRANSFERD_TEST_SMALL_DISK"] else {
            return XCTFail("TRANSFERD_TEST_SMALL_DISK is not set: scripts/test mounts a 16 MiB tmpfs for this test")
        }
        let root = try makeFolder(in: NSTemporaryDirectory())
        let elsewhere = try makeFolder(in: otherMount)
        XCTAssertNotEqual(device(root), device(elsewhere), "the tmpfs is the scratch folder's filesystem")
        var files: [(id: String, path: String, fd: Int32?)] = []
        for (index, folder) in [root, root, elsewhere, elsewhere].enumerated() {
            let path = (folder as NSString).appendingPathComponent("f\(index).part")
            XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data("x".utf8)))
            files.append(("job\(index)", path, nil))
        }
        var synced: [dev_t] = []
        let failures = QueueRunner.syncFiles(files, root: root) { fd in
            synced.append(self.device(ofDescriptor: fd))
            return 0
        }
        XCTAssertEqual(failures, [:])
        XCTAssertEqual(synced, [device(root), device(elsewhere)], "one syncfs per filesystem, the root's first")

        // A filesystem whose syncfs fails has its files synced one by one (here they succeed).
        let rootDevice = device(root)
        var calls = 0
        let fallback = QueueRunner.syncFiles(files, root: root) { fd in
            calls += 1
            return self.device(ofDescriptor: fd) == rootDevice ? -1 : 0
        }
        XCTAssertEqual(fallback, [:])
        XCTAssertEqual(calls, 2)
        // A file that is gone by then cannot be synced: its job alone fails, with the reason.
        let missing = QueueRunner.syncFiles(files + [("gone", root + "/nothing.part", nil)], root: root) { _ in 0 }
        XCTAssertEqual(Array(missing.keys), ["gone"])
        XCTAssertTrue(missing["gone"]?.contains("No such file") ?? false, missing["gone"] ?? "")
    }

    func testAFileHeldOpenIsSyncedThroughItsDescriptor() throws {
        // The queue holds each finished file open until its rename: nothing needs opening to sync
        // it, so a process out of descriptors still can, and only these descriptors are used.
        let root = try makeFolder(in: NSTemporaryDirectory())
        var files: [(id: String, path: String, fd: Int32?)] = []
        for index in 0..<2 {
            let path = (root as NSString).appendingPathComponent("f\(index).part")
            let fd = open(path, O_RDWR | O_CREAT, 0o644)
            XCTAssertGreaterThanOrEqual(fd, 0)
            addTeardownBlock { close(fd) }
            files.append(("job\(index)", path, fd))
        }
        // Renamed away meanwhile: its path names nothing, its descriptor still reaches it.
        XCTAssertEqual(rename(files[1].path, root + "/elsewhere"), 0)
        var given: [Int32] = []
        XCTAssertEqual(QueueRunner.syncFiles(files, root: root) { fd in given.append(fd); return 0 }, [:])
        XCTAssertEqual(given, [files[0].fd!], "the root's filesystem, through a file of it that is open")
        given = []
        XCTAssertEqual(QueueRunner.syncFiles(files, root: root) { fd in given.append(fd); return -1 }, [:],
                       "each file on its own, through its descriptor")
        XCTAssertEqual(given, [files[0].fd!])
    }
}
