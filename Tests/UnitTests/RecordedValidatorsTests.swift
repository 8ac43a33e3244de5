import CSystem
import Foundation
import XCTest
@testable import TransferCore

/// The record of what a saved file was (`--skip-unchanged`): small enough to sit inside
/// the inode, and read back to the validators it was given.
final class RecordedValidatorsTests: XCTestCase {
    let url = URL(string: "http://127.0.0.1:8080/small/f10.bin")!
    let lastModified = "Fri, 04 Dec 2026 18:45:07 GMT"

    /// A file written as a download leaves it: its time set to the remote Last-Modified.
    func savedFile(modified: String) throws -> (path: String, fd: Int32) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("recorded-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        addTeardownBlock { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("f.bin").path
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        XCTAssertGreaterThanOrEqual(fd, 0)
        addTeardownBlock { close(fd) }
        XCTAssertEqual(pwrite(fd, [UInt8](repeating: 7, count: 262_144), 262_144, 0), 262_144)
        let seconds = Int(HTTPDate.parse(modified)!.timeIntervalSince1970)
        var times = [timespec(tv_sec: seconds, tv_nsec: 0), timespec(tv_sec: seconds, tv_nsec: 0)]
        XCTAssertEqual(futimens(fd, &times), 0)
        return (path, fd)
    }

    /// Skips the test where the temporary folder's file system keeps no user attributes (asked
    /// with an attribute of the test's own, so a record that is not written fails the test).
    func requireUserAttributes(_ fd: Int32) throws {
        let probe = Array("1".utf8)
        guard fsetxattr(fd, "user.transferd.test-probe", probe, probe.count, 0) == 0 else {
            throw XCTSkip("the temporary folder's file system keeps no user attributes")
        }
        _ = fremovexattr(fd, "user.transferd.test-probe")
    }

    func attribute(_ name: String, of path: String) -> String? {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = getxattr(path, name, &buffer, buffer.count)
        return count > 0 ? String(decoding: buffer[0..<count], as: UTF8.self) : nil
    }

    func testALastModifiedTheFileTimeSaysIsWrittenShortAndReadBackWhole() throws {
        let file = try savedFile(modified: lastModified)
        try requireUserAttributes(file.fd)
        let validators = ResponseValidators(etag: "\"6b130a33-40000\"", lastModified: lastModified)
        RecordedValidators.write(validators, url: url, fd: file.fd)
        let raw = try XCTUnwrap(attribute(RecordedValidators.attribute, of: file.path), "the record was written")
        XCTAssertTrue(raw.hasSuffix("\n="), raw)
        // 60 bytes is what an ext4 inode of 256 bytes holds beside this attribute's name.
        XCTAssertLessThanOrEqual(raw.utf8.count, 60, raw)
        let read = RecordedValidators.read(file.path, url: url)
        XCTAssertEqual(read?.etag, "\"6b130a33-40000\"")
        XCTAssertEqual(read?.lastModified, lastModified)
        XCTAssertEqual(read?.conditionalHeaders["If-Modified-Since"], lastModified)
        XCTAssertNil(RecordedValidators.read(file.path, url: URL(string: "http://127.0.0.1:8080/small/f11.bin")!),
                     "another URL's validators are no answer for this one")
    }

    func testALastModifiedTheFileTimeDoesNotSayIsWrittenAsItCame() throws {
        let file = try savedFile(modified: lastModified)
        try requireUserAttributes(file.fd)
        // The obsolete RFC 850 form, and a date the file's time is not: each kept as the server sent it.
        for sent in ["Friday, 04-Dec-26 18:45:07 GMT", "Fri, 04 Dec 2026 18:45:08 GMT"] {
            RecordedValidators.write(ResponseValidators(etag: nil, lastModified: sent), url: url, fd: file.fd)
            XCTAssertFalse(attribute(RecordedValidators.attribute, of: file.path)?.hasSuffix("\n=") ?? true, sent)
            XCTAssertEqual(RecordedValidators.read(file.path, url: url)?.lastModified, sent)
        }
        // A Last-Modified of "=" is no date: not kept, so it never reads back as the file's time.
        RecordedValidators.write(ResponseValidators(etag: "\"e\"", lastModified: "="), url: url, fd: file.fd)
        let read = RecordedValidators.read(file.path, url: url)
        XCTAssertEqual(read?.etag, "\"e\"")
        XCTAssertNil(read?.lastModified)
    }

    func testARecordUnderTheFormerNameIsStillRead() throws {
        let file = try savedFile(modified: lastModified)
        var info = stat()
        XCTAssertEqual(fstat(file.fd, &info), 0)
        let fullDigest = SHA256Hasher.hex(of: url.absoluteString).prefix(32)
        let former = Array("262144\n\(RecordedValidators.stamp(info))\n\(fullDigest)\n\"e1\"\n\(lastModified)".utf8)
        guard fsetxattr(file.fd, RecordedValidators.formerAttribute, former, former.count, 0) == 0 else {
            throw XCTSkip("the temporary folder's file system keeps no user attributes")
        }
        let read = RecordedValidators.read(file.path, url: url)
        XCTAssertEqual(read?.etag, "\"e1\"")
        XCTAssertEqual(read?.lastModified, lastModified)
        // A former record's "=" is what that server sent, not a shorthand.
        let literal = Array("262144\n\(RecordedValidators.stamp(info))\n\(fullDigest)\n\"e1\"\n=".utf8)
        XCTAssertEqual(fsetxattr(file.fd, RecordedValidators.formerAttribute, literal, literal.count, 0), 0)
        XCTAssertEqual(RecordedValidators.read(file.path, url: url)?.lastModified, "=")
    }

    func testAnEqualsSignWithoutAReadableTimeIsNoRecord() {
        XCTAssertNil(RecordedValidators(encoded: "5\nnot-a-time\nabcd\n\"e\"\n="))
        XCTAssertNil(RecordedValidators(encoded: "5\n99999999999999.0\nabcd\n\"e\"\n="), "a year past 9999")
        XCTAssertEqual(RecordedValidators(encoded: "5\n784111777.0\nabcd\n\n=")?.lastModified, "Sun, 06 Nov 1994 08:49:37 GMT")
    }

    /// The conditional HEAD's answer, as a table: a server that ignores the conditions and
    /// answers 200 with the same Last-Modified and size (no ETag, or a weak one) fetched the
    /// file again before.
    func testWhatAConditionalAnswerSaysOfTheRecordedFile() {
        let date = "Sat, 05 Dec 2026 20:00:00 GMT"
        let other = "Sat, 05 Dec 2026 21:00:00 GMT"
        func record(_ etag: String?, _ lastModified: String?) -> RecordedValidators {
            RecordedValidators(etag: etag, lastModified: lastModified, size: 100, modified: "1.0", source: "x")
        }
        let table: [(RecordedValidators, Int, HTTPHeaders, Bool, String)] = [
            (record("\"a\"", date), 304, [:], true, "304"),
            (record("\"a\"", date), 200, ["ETag": "\"a\"", "Content-Length": "100"], true, "same strong ETag"),
            (record("\"a\"", date), 200, ["ETag": "\"b\"", "Content-Length": "100", "Last-Modified": date], false, "other ETag"),
            (record("\"a\"", date), 200, ["ETag": "\"a\"", "Content-Length": "101"], false, "other size"),
            (record("\"a\"", date), 200, ["ETag": "\"a\""], false, "no size"),
            (record(nil, date), 200, ["Last-Modified": date, "Content-Length": "100"], true, "same date and size, no ETag"),
            (record("W/\"a\"", date), 200, ["ETag": "W/\"a\"", "Last-Modified": date, "Content-Length": "100"], true, "weak ETag, same date"),
            (record("W/\"a\"", date), 200, ["ETag": "W/\"a\"", "Last-Modified": other, "Content-Length": "100"], false, "weak ETag, other date"),
            (record(nil, date), 200, ["Last-Modified": other, "Content-Length": "100"], false, "other date"),
            (record(nil, date), 200, ["Content-Length": "100"], false, "nothing to compare"),
            (record(nil, date), 404, [:], false, "gone"),
            (record(nil, date), 500, ["Last-Modified": date, "Content-Length": "100"], false, "an error"),
        ]
        for (recorded, status, headers, unchanged, label) in table {
            XCTAssertEqual(recorded.answerSaysUnchanged(status: status, headers: headers, localSize: 100), unchanged, label)
        }
    }
}
