import Foundation
@testable import TransferCore
import XCTest

final class HTTPParsingTests: XCTestCase {
    func testHeaderLinesAreSplitAndTrimmedByByte() {
        XCTAssertEqual(HTTPHeaders.parseLine("Content-Length:  262144 \r\n")?.0, "Content-Length")
        XCTAssertEqual(HTTPHeaders.parseLine("Content-Length:  262144 \r\n")?.1, "262144")
        XCTAssertEqual(HTTPHeaders.parseLine("ETag:\t\"a:b\"\r\n")?.1, "\"a:b\"")
        XCTAssertEqual(HTTPHeaders.parseLine("X-Name: caf\u{E9} \u{1F600}\r\n")?.1, "caf\u{E9} \u{1F600}")
        XCTAssertEqual(HTTPHeaders.parseLine("X-Empty:\r\n")?.1, "")
        XCTAssertNil(HTTPHeaders.parseLine(": no name"))
        XCTAssertNil(HTTPHeaders.parseLine("no colon"))
        XCTAssertNil(HTTPHeaders.parseLine("Bad Name: x"))
        XCTAssertEqual(HTTPHeaders.trimmed(Substring(" \t x y \r\n")), "x y")
        XCTAssertEqual(HTTPHeaders.trimmed(Substring(" \r\n")), "")
        let raw = Array("HTTP/1.1 200 OK\r\n".utf8)
        XCTAssertEqual(raw.withUnsafeBytes { HTTPHeaders.trimmed($0) }, "HTTP/1.1 200 OK")
        XCTAssertEqual([UInt8]().withUnsafeBytes { HTTPHeaders.trimmed($0) }, "")
        // Bytes that are not UTF-8 are repaired, never trusted as text.
        XCTAssertEqual(([0x20, 0xFF, 0x41, 0x0D, 0x0A] as [UInt8]).withUnsafeBytes { HTTPHeaders.trimmed($0) }, "\u{FFFD}A")
    }

    func testDisplayNameIsTheLastPathComponent() {
        for (path, last) in [("a/b/c.bin", "c.bin"), ("a/b/", "b"), ("/", "/"), ("//", "/"), ("c.bin", "c.bin"), ("/x//y//", "y"),
                             ("dir/\u{E9}t\u{E9}.txt", "\u{E9}t\u{E9}.txt"), ("a//b", "b"), ("", "")] {
            XCTAssertEqual(JobSpec.lastComponent(path), last, path)
        }
    }

    func testContentRange() {
        XCTAssertEqual(ContentRange(header: "bytes 0-99/1000"), ContentRange(first: 0, last: 99, completeLength: 1000))
        XCTAssertEqual(ContentRange(header: "bytes 5-5/*"), ContentRange(first: 5, last: 5, completeLength: nil))
        XCTAssertNil(ContentRange(header: "bytes 10-5/100"))
        XCTAssertNil(ContentRange(header: "bytes 0-99/50"))
        XCTAssertNil(ContentRange(header: "bytes */1000"))
        XCTAssertNil(ContentRange(header: "items 0-1/2"))
    }

    func testValidatorsPreferStrongETagForIfRange() {
        XCTAssertEqual(ResponseValidators(etag: "\"abc\"", lastModified: "x").ifRangeValue, "\"abc\"")
        XCTAssertEqual(ResponseValidators(etag: "W/\"abc\"", lastModified: "Mon").ifRangeValue, "Mon")
        XCTAssertNil(ResponseValidators(etag: "W/\"abc\"").ifRangeValue)
    }

    func testValidatorsMatchOnWhatBothHave() {
        let known = ResponseValidators(etag: "\"1\"", lastModified: "Mon")
        XCTAssertTrue(known.matches(ResponseValidators(etag: "\"1\"")))
        XCTAssertFalse(known.matches(ResponseValidators(etag: "\"2\"", lastModified: "Mon")))
        XCTAssertFalse(ResponseValidators(lastModified: "Mon").matches(ResponseValidators(lastModified: "Tue")))
        XCTAssertTrue(ResponseValidators().matches(ResponseValidators(etag: "\"9\"")))
    }

    func testHeadersAreCaseInsensitiveAndOrdered() {
        var headers: HTTPHeaders = ["Content-Type": "a", "X-One": "1"]
        headers.add("x-one", "2")
        XCTAssertEqual(headers["content-type"], "a")
        XCTAssertEqual(headers["X-ONE"], "1")
        headers.set("X-One", "3")
        XCTAssertEqual(headers.fields.filter { $0.name.lowercased() == "x-one" }.map(\.value), ["3"])
    }

    func testRedactionHidesSecrets() {
        let url = URL(string: "https://user:hunter2@example.com/a?X-Amz-Signature=abc&part=1&token=t")!
        let shown = Redaction.url(url)
        XCTAssertFalse(shown.contains("hunter2"))
        XCTAssertFalse(shown.contains("abc"))
        XCTAssertFalse(shown.contains("token=t"))
        XCTAssertTrue(shown.contains("part=1"))
        XCTAssertEqual(Redaction.headerValue(name: "Authorization", value: "AWS4 x"), "REDACTED")
        XCTAssertEqual(Redaction.headerValue(name: "Range", value: "bytes=0-"), "bytes=0-")
    }

    func testSHA256KnownAnswers() {
        XCTAssertEqual(SHA256Hasher.hex(of: Data()), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        XCTAssertEqual(SHA256Hasher.hex(of: Data("abc".utf8)), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    func testCheckpointRoundTripsThroughItsFile() throws {
        let path = NSTemporaryDirectory() + "/transferd-checkpoint-\(UUID().uuidString).state"
        defer { unlink(path) }
        let store = FileCheckpointStore(path: path)
        XCTAssertNil(try store.load())
        var plan = SegmentPlan.split(totalSize: 100, connections: 2, minSegmentSize: 10)
        plan.recordWritten(7, segment: 1)
        let checkpoint = DownloadCheckpoint(url: "http://x/y", validators: ResponseValidators(etag: "\"e\""),
                                            plan: plan, rangesSupported: true)
        try store.save(checkpoint)
        XCTAssertEqual(try store.load(), checkpoint)
        try Data("not json".utf8).write(to: URL(fileURLWithPath: path))
        XCTAssertNil(try store.load(), "an unreadable checkpoint means start over, not crash")
        try store.remove()
        XCTAssertFalse(FileManager.default.fileExists(atPath: path))
    }

    /// Bytes written but not synced count only in the boot that wrote them.
    func testUnsyncedBytesAreTrustedOnlyInTheBootThatWroteThem() {
        var durable = SegmentPlan.single(totalSize: 100)
        durable.recordWritten(10, segment: 0)
        var written = durable
        written.recordWritten(60, segment: 0)
        var checkpoint = DownloadCheckpoint(url: "http://x/y", validators: ResponseValidators(), plan: written, rangesSupported: true)
        XCTAssertEqual(checkpoint.trusted(inBoot: "b1").plan.bytesWritten, 70, "no `durable`: every byte was synced")

        checkpoint.durable = durable
        checkpoint.bootID = "b1"
        let sameBoot = checkpoint.trusted(inBoot: "b1")
        XCTAssertEqual(sameBoot.plan.bytesWritten, 70, "same boot: the page cache holds the unsynced bytes")
        XCTAssertEqual(sameBoot.durable?.bytesWritten, 10, "they are still not synced")
        let rebooted = checkpoint.trusted(inBoot: "b2")
        XCTAssertEqual(rebooted.plan.bytesWritten, 10, "after a reboot only the synced bytes count")
        XCTAssertNil(rebooted.durable)
        XCTAssertEqual(checkpoint.trusted(inBoot: nil).plan.bytesWritten, 10, "no boot identity: only synced bytes")
        checkpoint.bootID = nil
        XCTAssertEqual(checkpoint.trusted(inBoot: nil).plan.bytesWritten, 10, "a claim without its boot is not trusted")
        checkpoint.bootID = "b1"
        let afterFailedSync = checkpoint.durableOnly
        XCTAssertEqual(afterFailedSync.plan.bytesWritten, 10, "after a failed sync only the synced bytes count, even in the same boot")
        XCTAssertNil(afterFailedSync.durable)
        XCTAssertNil(afterFailedSync.bootID)
        XCTAssertEqual(afterFailedSync.trusted(inBoot: "b1").plan.bytesWritten, 10)
    }

    /// A failed sync sticks to the download: the first failure is kept and every later write refuses.
    func testAFailedSyncSticksToTheDownload() throws {
        let path = NSTemporaryDirectory() + "sticky-\(UUID().uuidString).part"
        let fd = open(path, O_RDWR | O_CREAT, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd); unlink(path) }
        let plan = SegmentPlan.single(totalSize: 100)
        let state = DownloadState(fd: fd, partPath: path, url: URL(string: "http://x/y")!,
                                  checkpoint: DownloadCheckpoint(url: "http://x/y", validators: ResponseValidators(), plan: plan,
                                                                 rangesSupported: true))
        XCTAssertNil(state.syncFailure)
        state.noteSyncFailed(POSIXFailure(operation: "sync", path: path, code: EIO))
        state.noteSyncFailed(POSIXFailure(operation: "sync", path: path, code: ENOSPC))
        XCTAssertEqual(state.syncFailure?.code, EIO, "the first failure is the one reported")
    }
}
