import Foundation
import TransferCore
import TestSupport
import XCTest

/// Mirrors and metalinks as a user meets them: `get --mirror`, `get --metalink`, and a `.meta4`
/// file or a job's `mirrors` in a queue folder.
final class MirrorCommandTests: XCTestCase {
    func testGetWithAMetalinkChecksPiecesAndSaysWhereTheBytesCameFrom() throws {
        let servers = try TestServers.current()
        let folder = try servers.mirrorFolder(self)
        let directory = try scratchDirectory()
        let urls = ["bad", "good", "short"].map { servers.http.appendingPathComponent("\(folder)/\($0)/64m.bin") }
        try servers.metalink(for: "64m.bin", urls: urls).write(toFile: directory + "/f.meta4", atomically: true, encoding: .utf8)
        let result = try TransferdProcess.run(["get", "--metalink", "f.meta4", "--connections-per-mirror", "3"], directory: directory)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: directory + "/64m.bin"), try servers.sha256(of: "64m.bin"))
        XCTAssertTrue(result.stderr.contains("sha256 ok"), result.stderr)
        XCTAssertTrue(result.stderr.contains("mirror \(urls[2].absoluteString) dropped: it serves 1000 bytes; the size given is 67108864"),
                      result.stderr)
        // The lying mirror, asked first, served some bytes; the ones in failing pieces name it.
        XCTAssertTrue(result.stderr.contains("mirror \(urls[0].absoluteString) dropped: piece "), result.stderr)
        XCTAssertTrue(result.stderr.contains("as it served it fails its sha-256 hash"), result.stderr)
        XCTAssertTrue(result.stderr.contains("  \(urls[1].absoluteString): "), result.stderr)
    }

    func testGetTakesAMetalinkByItsURL() throws {
        let servers = try TestServers.current()
        let directory = try scratchDirectory()
        let name = "metalink-\(UUID().uuidString.prefix(8)).meta4"
        try servers.metalink(for: "1m.bin", urls: [servers.http.appendingPathComponent("1m.bin")])
            .write(toFile: servers.path(name), atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: servers.path(name)) }
        let location = servers.http.appendingPathComponent(name).absoluteString
        let result = try TransferdProcess.run(["get", "--metalink", location + "?token=hush", "-o", directory], directory: directory)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: directory + "/1m.bin"), try servers.sha256(of: "1m.bin"))
        XCTAssertTrue(result.stderr.contains("sha256 ok"), result.stderr)

        let missing = try TransferdProcess.run(["get", "--metalink", servers.http.absoluteString + "/no-such.meta4?token=hush"],
                                               directory: directory)
        XCTAssertEqual(missing.status, 1, missing.stderr)
        XCTAssertTrue(missing.stderr.contains("--metalink ") && missing.stderr.contains("HTTP 404"), missing.stderr)
        XCTAssertFalse(missing.stderr.contains("hush"), "the URL's secret is not shown: \(missing.stderr)")
    }

    func testMistakesInMirrorsAndMetalinksAreUsageErrors() throws {
        let servers = try TestServers.current()
        let directory = try scratchDirectory()
        let url = servers.http.appendingPathComponent("1m.bin").absoluteString
        var result = try TransferdProcess.run(["get", url, "--mirror", "ftp://example.com/1m.bin"], directory: directory)
        XCTAssertEqual(result.status, 2)
        XCTAssertTrue(result.stderr.contains("--mirror needs an http:// or https:// URL"), result.stderr)
        result = try TransferdProcess.run(["get", url, "--connections-per-mirror", "2"], directory: directory)
        XCTAssertEqual(result.status, 2)
        XCTAssertTrue(result.stderr.contains("--connections-per-mirror goes with --mirror"), result.stderr)

        let two = """
            <metalink xmlns="urn:ietf:params:xml:ns:metalink"><file name="a"><url>\(url)</url></file>\
            <file name="b"><url>\(url)</url></file></metalink>
            """
        try two.write(toFile: directory + "/two.meta4", atomically: true, encoding: .utf8)
        result = try TransferdProcess.run(["get", "--metalink", "two.meta4"], directory: directory)
        XCTAssertEqual(result.status, 2)
        XCTAssertTrue(result.stderr.contains("describes 2 files; get fetches one"), result.stderr)
        try "<metalink xmlns=\"urn:ietf:params:xml:ns:metalink\"><file name=\"../x\"><url>\(url)</url></file></metalink>"
            .write(toFile: directory + "/escape.meta4", atomically: true, encoding: .utf8)
        result = try TransferdProcess.run(["get", "--metalink", "escape.meta4"], directory: directory)
        XCTAssertEqual(result.status, 2, result.stderr)
        XCTAssertTrue(result.stderr.contains("escape.meta4"), result.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: (directory as NSString).deletingLastPathComponent + "/x"))
    }

    func testAQueueTakesMetalinksAndJobsWithMirrors() throws {
        let servers = try TestServers.current()
        let folder = try servers.mirrorFolder(self)
        let directory = try scratchDirectory()
        let queue = directory + "/queue.d"
        try FileManager.default.createDirectory(atPath: queue, withIntermediateDirectories: true)
        let urls = ["bad", "good"].map { servers.http.appendingPathComponent("\(folder)/\($0)/64m.bin") }
        try servers.metalink(for: "64m.bin", urls: urls).write(toFile: queue + "/iso.meta4", atomically: true, encoding: .utf8)
        let job = """
            {"url": "\(servers.http.appendingPathComponent("\(folder)/short/64m.bin"))", "dest": "second.bin",
             "mirrors": ["\(urls[1])", "\(servers.http.appendingPathComponent("slow/\(folder)/good/64m.bin"))"],
             "connections_per_mirror": 3, "sha256": "\(try servers.sha256(of: "64m.bin"))"}
            """
        try job.write(toFile: queue + "/second.json", atomically: true, encoding: .utf8)
        let result = try TransferdProcess.run(["run", "--queue", queue, "--progress", "plain"], directory: directory)
        XCTAssertEqual(result.status, 0, result.stdout + result.stderr)
        let log = result.stdout + result.stderr
        for file in ["64m.bin", "second.bin"] {
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: directory + "/" + file), try servers.sha256(of: "64m.bin"), file)
        }
        XCTAssertTrue(log.contains("mirror \(urls[0].absoluteString): "), log)
        XCTAssertTrue(log.contains("of the file, dropped: piece "), log)
        XCTAssertTrue(log.contains("dropped: it serves 1000 bytes; the other mirrors say 67108864"), log)
    }
}
