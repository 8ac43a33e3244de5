import TestSupport
@testable import TransferCore
import XCTest

/// What a later run may trust of a partial file and its checkpoint: nothing
/// that a started-over file, a damaged checkpoint or a weak validator no
/// longer backs.
final class DownloadResumeSafetyTests: XCTestCase {
    private func plan(_ segments: [SegmentPlan.Segment], total: Int64?) -> SegmentPlan {
        SegmentPlan(segments: segments, totalSize: total)
    }

    func testStartingOverForgetsTheCheckpointBeforeTheFileIsTruncated() throws {
        // A run had 8 MiB of a file on disk; a server then answered its range request with the
        // whole file (200), so the file starts over. Were the process killed before its next
        // checkpoint, a checkpoint still claiming 8 MiB would make the next run keep a hole.
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let part = (directory as NSString).appendingPathComponent("f.part")
        XCTAssertTrue(FileManager.default.createFile(atPath: part, contents: Data(repeating: 7, count: 8 << 20)))
        let store = FileCheckpointStore(path: part + ".state")
        var written = SegmentPlan.single(totalSize: 64 << 20)
        written.recordWritten(8 << 20, segment: 0)
        let checkpoint = DownloadCheckpoint(url: "http://127.0.0.1/f", validators: ResponseValidators(etag: "\"v1\""),
                                            plan: written, rangesSupported: true)
        try store.save(checkpoint)
        let fd = open(part, O_RDWR)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        let state = DownloadState(fd: fd, partPath: part, url: URL(string: "http://127.0.0.1/f")!,
                                  checkpoint: checkpoint, store: store)
        try state.reset(plan: SegmentPlan.single(totalSize: 64 << 20), validators: ResponseValidators(etag: "\"v1\""),
                        rangesSupported: false)
        var info = stat()
        XCTAssertEqual(fstat(fd, &info), 0)
        XCTAssertEqual(info.st_size, 0)
        XCTAssertEqual(try store.load()?.plan.bytesWritten ?? 0, 0, "no checkpoint may claim the truncated bytes")
    }

    /// A takeover's file (`PartFile.replaced`): the old one's bytes and attributes in a new inode at
    /// the same name; what the old descriptor writes afterwards (a frozen worker woken) stays out of it.
    func testATakeoverWritesANewFileTheOldDescriptorCannotReach() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let part = (directory as NSString).appendingPathComponent("f.transferd-part")
        let old = try PartFile.create(part, takingOver: false)
        let bytes = Data((0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        XCTAssertEqual(bytes.withUnsafeBytes { pwrite(old.fd, $0.baseAddress, $0.count, 0) }, bytes.count)
        guard let tag = old.tag().tag else { throw XCTSkip("this file system keeps no user attributes") }
        // The frozen worker's descriptor, still open after its PartFile moved on.
        let stale = dup(old.fd)
        defer { close(stale) }
        let (fresh, method) = try old.replaced(at: part, keeping: 2 << 20)
        defer { fresh.close() }
        XCTAssertNotNil(method)
        XCTAssertTrue(PartFile.names(fresh.fd, part))
        XCTAssertFalse(PartFile.names(stale, part))
        XCTAssertTrue(fresh.carries(tag), "the checkpoint's tag goes with the bytes")
        XCTAssertEqual(fresh.size(), 2 << 20)
        XCTAssertEqual(FileManager.default.contents(atPath: part), bytes.prefix(2 << 20))
        let late = Data(repeating: 0xEE, count: 1 << 20)
        XCTAssertEqual(late.withUnsafeBytes { pwrite(stale, $0.baseAddress, $0.count, 0) }, late.count)
        XCTAssertEqual(FileManager.default.contents(atPath: part), bytes.prefix(2 << 20), "the late write went elsewhere")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: directory), ["f.transferd-part"])
    }

    func testAPartialFileHasOneWriterAtATime() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let part = (directory as NSString).appendingPathComponent("f.part")
        XCTAssertNil(try PartFile.lockExisting(part, takingOver: false), "nothing there: nothing locked, nothing created")
        XCTAssertFalse(FileManager.default.fileExists(atPath: part))

        let first = try PartFile.create(part, takingOver: false)
        XCTAssertFalse(first.existed)
        // A second writer, whether it comes to create the file or to resume it, is turned away.
        XCTAssertThrowsError(try PartFile.create(part, takingOver: false)) { error in
            guard case DownloadError.partInUse(let path) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(path, part)
        }
        XCTAssertThrowsError(try PartFile.lockExisting(part, takingOver: false))
        // A queue job handed over from a lost worker writes it regardless (its store fences the worker).
        let taken = try XCTUnwrap(try PartFile.lockExisting(part, takingOver: true))
        XCTAssertTrue(taken.existed)
        taken.close()
        XCTAssertTrue(try PartFile.create(part, takingOver: true).existed)
        // Closing another descriptor of the file (the checksum pass does) keeps the lock.
        close(open(part, O_RDONLY))
        XCTAssertThrowsError(try PartFile.lockExisting(part, takingOver: false))
        first.close()
        first.close()

        let second = try XCTUnwrap(try PartFile.lockExisting(part, takingOver: false))
        XCTAssertTrue(second.existed)
        second.close()
        let third = try PartFile.create(part, takingOver: false)
        XCTAssertTrue(third.existed, "opened, not created: the caller decides whether to truncate")
        third.close()

        // A link planted at NAME.part is not written through.
        let link = (directory as NSString).appendingPathComponent("g.part")
        XCTAssertEqual(symlink(part, link), 0)
        XCTAssertNil(try PartFile.lockExisting(link, takingOver: false))
        XCTAssertThrowsError(try PartFile.create(link, takingOver: false)) { error in
            guard case DownloadError.local = error else { return XCTFail("\(error)") }
        }
    }

    func testALockIsKeptOnlyOnTheFileThePathStillNames() throws {
        // Another writer may rename its finished file into place (or remove it) between this
        // process's open and its lock: the lock would then be on that file, not on NAME.part.
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let part = (directory as NSString).appendingPathComponent("f.part")
        let file = try PartFile.create(part, takingOver: false)
        XCTAssertTrue(PartFile.names(file.fd, part))
        XCTAssertEqual(rename(part, (directory as NSString).appendingPathComponent("f")), 0)
        XCTAssertFalse(PartFile.names(file.fd, part), "renamed away")
        XCTAssertTrue(FileManager.default.createFile(atPath: part, contents: Data("another".utf8)))
        XCTAssertFalse(PartFile.names(file.fd, part), "another file at the path")
        file.close()
        let next = try XCTUnwrap(try PartFile.lockExisting(part, takingOver: false))
        XCTAssertTrue(PartFile.names(next.fd, part))
        next.close()
    }

    func testAPartialFileCarriesTheTagItsCheckpointsName() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let part = (directory as NSString).appendingPathComponent("f.part")
        let file = try PartFile.create(part, takingOver: false)
        defer { file.close() }
        XCTAssertFalse(file.carries("anything"), "an untagged file carries no tag")
        let tag = try XCTUnwrap(file.tag().tag, "this file system keeps user attributes")
        XCTAssertTrue(file.carries(tag))
        XCTAssertFalse(file.carries(tag + "x"))
        let second = try XCTUnwrap(file.tag().tag)
        XCTAssertNotEqual(second, tag, "a new tag each time the file starts over")
        XCTAssertTrue(file.carries(second))
        // Taken off once the file is in place; a closed file (its descriptor may be another file's
        // by then) is neither tagged nor looked at.
        file.untag()
        XCTAssertFalse(file.carries(second))
        let closed = try PartFile.create(part + "2", takingOver: false)
        closed.close()
        XCTAssertEqual(closed.tag(), .failed, "a closed file is not tagged: tried again at the next checkpoint")
        XCTAssertFalse(closed.carries(second))
        // Kept in the checkpoint, through its JSON.
        var checkpoint = DownloadCheckpoint(url: "http://127.0.0.1/f", validators: ResponseValidators(),
                                            plan: .single(totalSize: 10), rangesSupported: true)
        checkpoint.fileTag = tag
        let decoded = try JSONDecoder().decode(DownloadCheckpoint.self, from: try JSONEncoder().encode(checkpoint))
        XCTAssertEqual(decoded.fileTag, tag)
        var durable = checkpoint
        durable.durable = .single(totalSize: 10)
        XCTAssertEqual(durable.durableOnly.fileTag, tag, "the file is the same one after a crash")
    }

    func testACheckpointWhosePlanCannotDescribeAFileIsNotTrusted() {
        func coherent(_ plan: SegmentPlan) -> Bool {
            DownloadCheckpoint(url: "u", validators: ResponseValidators(), plan: plan, rangesSupported: true).isCoherent
        }
        XCTAssertTrue(coherent(.single(totalSize: nil)))
        XCTAssertTrue(coherent(SegmentPlan.split(totalSize: 100, connections: 4, minSegmentSize: 1)))
        XCTAssertTrue(coherent(plan([.init(start: 0, end: 10, written: 10), .init(start: 10, end: 20, written: 3)], total: 20)))
        // A written count past the end, or one that overflows.
        XCTAssertFalse(coherent(plan([.init(start: 0, end: 10, written: 11)], total: 10)))
        XCTAssertFalse(coherent(plan([.init(start: 0, end: nil, written: .max), .init(start: 5, end: nil, written: .max)], total: nil)))
        XCTAssertFalse(coherent(plan([.init(start: .max, end: nil, written: 1)], total: nil)))
        XCTAssertFalse(coherent(plan([.init(start: 0, end: 10, written: -1)], total: 10)))
        // A gap (never fetched, so zeros), an overlap, an open end among several, a wrong total.
        XCTAssertFalse(coherent(plan([.init(start: 0, end: 10), .init(start: 20, end: 30)], total: 30)))
        XCTAssertFalse(coherent(plan([.init(start: 0, end: 10), .init(start: 5, end: 30)], total: 30)))
        XCTAssertFalse(coherent(plan([.init(start: 0, end: nil), .init(start: 5, end: 30)], total: 30)))
        XCTAssertFalse(coherent(plan([.init(start: 0, end: 10), .init(start: 10, end: 30)], total: 40)))
        XCTAssertFalse(coherent(plan([.init(start: 3, end: 10)], total: 10)))
        XCTAssertFalse(coherent(plan([], total: 0)))
        // The durable plan is checked too.
        var checkpoint = DownloadCheckpoint(url: "u", validators: ResponseValidators(), plan: .single(totalSize: 10),
                                            rangesSupported: true)
        checkpoint.durable = plan([.init(start: 0, end: 10, written: 99)], total: 10)
        XCTAssertFalse(checkpoint.isCoherent)
    }

    func testOnlyStrongValidatorsProveTheSameVersion() {
        let strong = ResponseValidators(etag: "\"a\"", lastModified: "Mon, 30 Nov 2026 10:00:00 GMT")
        XCTAssertTrue(strong.matches(ResponseValidators(etag: "\"a\"", lastModified: "Tue, 01 Dec 2026 10:00:00 GMT")))
        XCTAssertFalse(strong.matches(ResponseValidators(etag: "\"b\"")))
        // Equal weak tags say "equivalent", not "the same bytes": Last-Modified decides when both have it.
        let weak = ResponseValidators(etag: "W/\"a\"", lastModified: "Mon, 30 Nov 2026 10:00:00 GMT")
        XCTAssertTrue(weak.matches(weak))
        XCTAssertFalse(weak.matches(ResponseValidators(etag: "W/\"a\"", lastModified: "Tue, 01 Dec 2026 10:00:00 GMT")))
        XCTAssertFalse(weak.matches(ResponseValidators(etag: "W/\"b\"", lastModified: "Mon, 30 Nov 2026 10:00:00 GMT")))
        XCTAssertTrue(ResponseValidators(etag: "W/\"a\"").matches(ResponseValidators(etag: "W/\"a\"")))
    }

    func testARunThatFinishedEarlierIsRecognisedOnlyByItsOwnFile() async throws {
        // A run renamed the file into place and stopped before forgetting its checkpoint; then
        // another file of the same size was put at the destination. No request is made: the
        // URL has no server, and a destination that exists is refused (the default).
        let directory = try scratchDirectory()
        let destination = (directory as NSString).appendingPathComponent("out.bin")
        let url = URL(string: "http://127.0.0.1:9/out.bin")!
        let lastModified = "Mon, 30 Nov 2026 10:00:00 GMT"
        var complete = SegmentPlan.single(totalSize: 4)
        complete.recordWritten(4, segment: 0)
        let options = DownloadOptions(url: url, destination: destination)
        let store = FileCheckpointStore(path: options.statePath)
        let checkpoint = DownloadCheckpoint(url: url.absoluteString, validators: ResponseValidators(lastModified: lastModified),
                                            plan: complete, rangesSupported: true)
        let seconds = Int(HTTPDate.parse(lastModified)!.timeIntervalSince1970)
        func place(_ text: String, modified: Int) {
            XCTAssertTrue(FileManager.default.createFile(atPath: destination, contents: Data(text.utf8)))
            var times = [timespec(tv_sec: modified, tv_nsec: 0), timespec(tv_sec: modified, tv_nsec: 0)]
            XCTAssertEqual(utimensat(AT_FDCWD, destination, &times, 0), 0)
        }
        let transport = Backends.all[0].1

        // Its own file (the remote's time): finished, nothing fetched.
        place("abcd", modified: seconds)
        try store.save(checkpoint)
        let finished = try await DownloadEngine(transport: transport, options: options).run()
        XCTAssertEqual(finished.size, 4)
        XCTAssertNil(try store.load(), "the checkpoint is forgotten")

        // Another file of the same size: the destination is refused, as any existing file is.
        place("wxyz", modified: seconds + 3600)
        try store.save(checkpoint)
        do {
            _ = try await DownloadEngine(transport: transport, options: options).run()
            XCTFail("a replaced destination was taken as this download's")
        } catch DownloadError.destinationExists {
        }

        // Its own file, but a checksum asked for now that it does not have.
        place("abcd", modified: seconds)
        try store.save(checkpoint)
        var checked = options
        checked.sha256 = String(repeating: "0", count: 64)
        do {
            _ = try await DownloadEngine(transport: transport, options: checked).run()
            XCTFail("a file with another checksum was taken as finished")
        } catch DownloadError.destinationExists {
        }
    }

    /// Which existing partial files transferd may start over: only those it can prove it wrote.
    func testOnlyAProvablyOwnPartialFileIsStartedOver() {
        XCTAssertTrue(PartFile.mayStartOver(size: 0, tagged: false, recordFound: false), "empty: nothing to lose")
        XCTAssertTrue(PartFile.mayStartOver(size: 10, tagged: true, recordFound: false), "tagged when made")
        XCTAssertTrue(PartFile.mayStartOver(size: 10, tagged: false, recordFound: true), "named by a checkpoint")
        XCTAssertTrue(PartFile.mayStartOver(size: 10, tagged: nil, recordFound: false), "no attributes: nothing provable")
        XCTAssertFalse(PartFile.mayStartOver(size: 10, tagged: false, recordFound: false), "a user's file")
    }
}
