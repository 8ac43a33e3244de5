import Foundation
@testable import TransferCore
import XCTest

/// A URL list read a piece at a time gives the jobs and the mistakes the same list read
/// whole gives, wherever its pieces end; a large one is ingested in one savepoint that a
/// late mistake drops whole.
final class LargeURLListTests: XCTestCase {
    let parser = JobFileParser(root: "/data")
    var folder = ""

    override func setUpWithError() throws {
        folder = NSTemporaryDirectory() + "large-list-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: folder)
    }

    func write(_ bytes: [UInt8], name: String = "list.urls") throws -> String {
        let path = folder + "/" + name
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// The list at `path` read `pieceSize` bytes at a time: its jobs, or its rejection.
    func readInPieces(_ path: String, pieceSize: Int) -> Result<[JobSpec], JobFileRejection> {
        Result { () throws(JobFileRejection) -> [JobSpec] in
            let descriptor = open(path, O_RDONLY)
            let list = try LargeURLList(name: "list.urls", descriptor: descriptor, parser: parser, pieceSize: pieceSize)
            var jobs: [JobSpec] = []
            do {
                try list.forEachBatch(of: 3) { jobs += $0 }
            } catch let rejection as JobFileRejection {
                throw rejection
            } catch {
                XCTFail("\(error)")
            }
            XCTAssertEqual(list.jobCount, jobs.count)
            return jobs
        }
    }

    func testEveryLineBreakAcrossEveryPieceBoundaryGivesTheJobsOfTheWholeList() throws {
        // LF, CR, CR LF, VT, FF, NEL, LS and PS; blank lines, a comment, a destination folder,
        // a non-ASCII name and no line break at the end.
        let text = "https://e.com/a\nhttps://e.com/b\r\nhttps://e.com/c\rhttps://e.com/d\u{0B}https://e.com/e\u{0C}\n"
            + "# a comment\u{85}https://e.com/f sub\u{2028}https://e.com/g\u{2029}\r\n\r\nhttps://e.com/h\u{00E9}\u{85}https://e.com/i"
        let bytes = Array(text.utf8)
        let whole = try parser.parse(name: "list.urls", data: Data(bytes)).get()
        XCTAssertEqual(whole.count, 9)
        let path = try write(bytes)
        for pieceSize in 1...bytes.count + 1 {
            let pieces = try readInPieces(path, pieceSize: pieceSize).get()
            XCTAssertEqual(pieces, whole, "pieces of \(pieceSize) bytes")
        }
    }

    func testMistakesAreTheOnesOfTheWholeListAndNoBatchFollowsTheFirst() throws {
        let text = "https://e.com/a\nftp://e.com/b\nhttps://e.com/c\nhttps://e.com/a\na b c\n"
        guard case .failure(let whole) = parser.parse(name: "list.urls", data: Data(text.utf8)) else {
            return XCTFail("the list has mistakes")
        }
        let path = try write(Array(text.utf8))
        let descriptor = open(path, O_RDONLY)
        let list = try LargeURLList(name: "list.urls", descriptor: descriptor, parser: parser, pieceSize: 5)
        var handedOn: [JobSpec] = []
        XCTAssertThrowsError(try list.forEachBatch(of: 1) { handedOn += $0 }) { error in
            XCTAssertEqual((error as? JobFileRejection)?.errors, whole.errors)
        }
        XCTAssertEqual(handedOn.map(\.url), ["https://e.com/a"], "nothing after the first mistake")
        XCTAssertEqual(whole.errors.map(\.job), [2, 4, 5])
    }

    func testNotTextBlankOrOverlongIsRefusedWithTheReason() throws {
        func refusal(_ bytes: [UInt8], pieceSize: Int = 4) throws -> String {
            guard case .failure(let rejection) = readInPieces(try write(bytes), pieceSize: pieceSize) else { return "taken" }
            return rejection.description
        }
        XCTAssertTrue(try refusal(Array("https://e.com/a\nhttps://e.com/\u{0}b\n".utf8)).contains("line 2 is not UTF-8 text"))
        XCTAssertTrue(try refusal(Array("https://e.com/a\n".utf8) + [0xE2, 0x0A]).contains("line 2 is not UTF-8 text"))
        XCTAssertTrue(try refusal(Array(" \n\t\r\n".utf8)).contains("the file is empty"))
        XCTAssertTrue(try refusal(Array("# only a comment\n".utf8)).contains("the list has no URLs"))
        let long = Array("https://e.com/".utf8) + [UInt8](repeating: 0x61, count: JobFileParser.maxFileSize)
        XCTAssertTrue(try refusal(long, pieceSize: 1 << 16).contains("line 1 is longer than 8388608 bytes"))
    }

    func testAListChangedBetweenItsTwoReadingsIsRefused() throws {
        let path = try write(Array("https://e.com/a\nhttps://e.com/b\n".utf8))
        let list = try LargeURLList(name: "list.urls", descriptor: open(path, O_RDONLY), parser: parser)
        let handle = try XCTUnwrap(FileHandle(forWritingAtPath: path))
        try handle.seek(toOffset: 14)
        try handle.write(contentsOf: Data("x".utf8))
        try handle.close()
        XCTAssertThrowsError(try list.forEachBatch(of: 10) { _ in }) { error in
            XCTAssertTrue("\(error)".contains("changed while it was being read"), "\(error)")
        }
    }

    func testTwoLinesWithOneDestinationAreFoundByDigest() throws {
        let path = try write(Array("https://e.com/x/a.iso\nhttps://f.com/y/a.iso\n".utf8))
        guard case .failure(let rejection) = readInPieces(path, pieceSize: 1 << 20) else { return XCTFail("taken") }
        XCTAssertEqual(rejection.errors.map(\.message), ["/data/a.iso is also the destination of job 1 in this file"])
    }

    /// A list over 1 MiB goes into the store through the ingestor; one with a mistake on
    /// its last line leaves nothing in the store and is moved aside with its reason.
    func testALargeListIsIngestedWholeOrNotAtAll() throws {
        let queue = folder + "/queue.d"
        let layout = QueueLayout(directory: queue)
        try FileManager.default.createDirectory(atPath: queue, withIntermediateDirectories: true)
        try layout.prepare()
        let store = try SQLiteQueueStore(path: layout.database)
        // 1,200 lines of 1 KiB: past the 1 MiB from which a list is read a piece at a time, in few jobs.
        let folderName = String(repeating: "d", count: 1000)
        var lines = (0..<1_200).map { "https://e.com/files/\(folderName)/release-\($0).bin" }.joined(separator: "\n") + "\n"
        XCTAssertGreaterThan(lines.utf8.count, JobFileParser.largeListSize)
        try Data(lines.utf8).write(to: URL(fileURLWithPath: layout.path("big.urls")))
        var report = try QueueIngestor(layout: layout, store: store).ingestAll()
        XCTAssertEqual(report.jobsAdded, 1_200)
        XCTAssertEqual(try store.counts()[.queued], 1_200)
        XCTAssertEqual(try store.jobs(fromFile: "big.urls").last?.spec.destination, folder + "/release-1199.bin")

        lines = lines.replacingOccurrences(of: "https://e.com/files/", with: "https://e.com/other/") + "gopher://e.com/last\n"
        try Data(lines.utf8).write(to: URL(fileURLWithPath: layout.path("bad.urls")))
        report = try QueueIngestor(layout: layout, store: store).ingestAll()
        XCTAssertEqual(report.jobsAdded, 0)
        XCTAssertEqual(report.rejected.map(\.file), ["bad.urls"])
        XCTAssertTrue(report.rejected.first?.errors.contains("job 1201") ?? false, report.rejected.first?.errors ?? "")
        XCTAssertEqual(try store.counts()[.queued], 1_200, "nothing of the rejected list stayed")
        XCTAssertTrue(FileManager.default.fileExists(atPath: layout.rejected + "/bad.urls"))
    }
}
