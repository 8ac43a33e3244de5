import Foundation
import XCTest
@testable import TransferCore

/// Writeback started from a thread of its own: it holds at most
/// `Writeback.maxPending` descriptors, closes every one, and leaves the
/// caller's descriptor and data alone.
final class WritebackTests: XCTestCase {
    func testDetachedStartsHoldFewDescriptorsAndCloseThemAll() throws {
        #if os(Linux)
        let folder = FileManager.default.temporaryDirectory
            .appendingPathComponent("writeback-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let path = folder.appendingPathComponent("f.bin").path
        let fd = open(path, O_CREAT | O_RDWR, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0)
        let data = [UInt8](repeating: 0x5a, count: 1 << 20)
        XCTAssertEqual(data.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }, data.count)

        Writeback.waitForDetached()
        let before = try descriptors().count
        // The writeback thread held (as a full disk's queue holds it): starts wait, up to the cap.
        let hold = DispatchSemaphore(value: 0)
        Writeback.detachedQueue.async { hold.wait() }
        for _ in 0..<(Writeback.maxPending * 4) { Writeback.startDetached(fd) }
        XCTAssertEqual(try descriptors().count, before + Writeback.maxPending,
                       "each waiting start holds one descriptor, and no more start than the cap")
        hold.signal()
        Writeback.waitForDetached()
        XCTAssertEqual(try descriptors().count, before, "every duplicated descriptor is closed")
        Writeback.detachedQueue.async { hold.wait() }
        Writeback.startDetached(fd)
        var own = stat()
        XCTAssertEqual(fstat(fd, &own), 0)
        let duplicates = try descriptors()
            .filter { other in
                var info = stat()
                return other != fd && fstat(other, &info) == 0 && info.st_ino == own.st_ino && info.st_dev == own.st_dev
            }
        XCTAssertEqual(duplicates.count, 1, "the waiting start holds a duplicate")
        XCTAssertNotEqual(duplicates.first.map { fcntl($0, F_GETFD) & FD_CLOEXEC } ?? 0, 0,
                          "the duplicate is close-on-exec: a hook's command does not inherit it")
        hold.signal()
        Writeback.waitForDetached()

        var info = stat()
        XCTAssertEqual(fstat(fd, &info), 0, "the caller's descriptor stays open")
        XCTAssertEqual(info.st_size, off_t(data.count))
        Writeback.startDetached(fd)
        XCTAssertEqual(close(fd), 0, "the caller may close its descriptor at once")
        Writeback.waitForDetached()
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: path)), Data(data))
        XCTAssertEqual(try descriptors().count, before - 1)
        #else
        throw XCTSkip("sync_file_range is Linux's")
        #endif
    }

    /// This process's open descriptors (the listing's own included, as in every count).
    private func descriptors() throws -> [Int32] {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").compactMap(Int32.init)
    }
}
