import CSystem
import Foundation
import TransferCore
import TestSupport
import XCTest

/// `transferd get` as a user runs it: exit codes, messages, kill -9 and Ctrl-C.
final class GetCommandTests: XCTestCase {
    func testDownloadsAndReportsSuccess() throws {
        let servers = try TestServers.current()
        let directory = try scratchDirectory()
        let url = servers.http.appendingPathComponent("1m.bin").absoluteString
        let result = try TransferdProcess.run(["get", url, "--sha256", try servers.sha256(of: "1m.bin")], directory: directory)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertTrue(result.stderr.contains("sha256 ok"), result.stderr)
        XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: directory + "/1m.bin"), try servers.sha256(of: "1m.bin"))
    }

    func testExitCodesNameTheProblem() throws {
        let servers = try TestServers.current()
        let directory = try scratchDirectory()
        let missing = servers.http.appendingPathComponent("nowhere.bin").absoluteString

        var result = try TransferdProcess.run(["get", missing], directory: directory)
        XCTAssertEqual(result.status, 1)
        XCTAssertTrue(result.stderr.contains("HTTP 404") && result.stderr.contains("/nowhere.bin"), result.stderr)

        result = try TransferdProcess.run(["get", "ftp://example.com/x"], directory: directory)
        XCTAssertEqual(result.status, 2)
        XCTAssertTrue(result.stderr.contains("is not an http://, https:// or s3:// URL"), result.stderr)

        result = try TransferdProcess.run(["get", missing, "--bogus"], directory: directory)
        XCTAssertEqual(result.status, 2)
        XCTAssertTrue(result.stderr.contains("unknown option --bogus"), result.stderr)

        let url = servers.http.appendingPathComponent("1m.bin").absoluteString
        result = try TransferdProcess.run(["get", url, "--sha256", String(repeating: "a", count: 64)], directory: directory)
        XCTAssertEqual(result.status, 3, result.stderr)
        XCTAssertTrue(result.stderr.contains("SHA-256 mismatch"), result.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: directory + "/1m.bin"))

        try Data("mine".utf8).write(to: URL(fileURLWithPath: directory + "/1m.bin"))
        result = try TransferdProcess.run(["get", url], directory: directory)
        XCTAssertEqual(result.status, 5)
        XCTAssertTrue(result.stderr.contains("--overwrite"), result.stderr)
        XCTAssertEqual(try String(contentsOfFile: directory + "/1m.bin", encoding: .utf8), "mine")

        let https = servers.https.appendingPathComponent("1m.bin").absoluteString
        result = try TransferdProcess.run(["get", https, "-o", "tls.bin", "--transport", "urlsession", "--cacert", servers.caBundle],
                                          directory: directory)
        XCTAssertEqual(result.status, 2)
        XCTAssertTrue(result.stderr.contains("--transport curl"), result.stderr)

        result = try TransferdProcess.run(["get", https, "-o", "tls.bin", "--cacert", servers.caBundle], directory: directory)
        XCTAssertEqual(result.status, 0, result.stderr)
    }

    /// `-H` follows the job files' rule: a header that frames the request or steers the
    /// connection is refused before any connection (port 9 has no server: exit 1 would mean one was tried).
    func testHeaderFlagRefusesFramingAndHopByHopHeaders() throws {
        let directory = try scratchDirectory()
        let source = directory + "/body.bin"
        XCTAssertTrue(FileManager.default.createFile(atPath: source, contents: Data("x".utf8)))
        let cases: [([String], String)] = [
            (["get", "http://127.0.0.1:9/a.bin", "-H", "Content-Length: 0"],
             "--header Content-Length is set by transferd from the body; a job cannot set it — remove it"),
            (["get", "http://127.0.0.1:9/a.bin", "--header", "host: other.example"],
             "--header Host is set by transferd from the URL"),
            (["get", "http://127.0.0.1:9/a.bin", "-H", "Range: bytes=0-1"], "--header Range is set by transferd"),
            (["put", source, "http://127.0.0.1:9/up", "-H", "Transfer-Encoding: chunked"],
             "--header Transfer-Encoding is set by transferd from the body; a job cannot set it"),
            (["put", source, "http://127.0.0.1:9/up", "-H", "Connection: keep-alive"], "--header Connection is a hop-by-hop header"),
        ]
        for (arguments, expected) in cases {
            let result = try TransferdProcess.run(arguments, directory: directory)
            XCTAssertEqual(result.status, 2, "\(arguments): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains(expected), "\(arguments): \(result.stderr)")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: directory + "/a.bin"))
    }

    func testUnreachableHostFailsWithAClearError() throws {
        let directory = try scratchDirectory()
        let result = try TransferdProcess.run(["get", "http://127.0.0.1:9/file.bin", "--retries", "2"], directory: directory)
        XCTAssertEqual(result.status, 1)
        XCTAssertTrue(result.stderr.contains("could not connect") && result.stderr.contains("127.0.0.1:9"), result.stderr)
        XCTAssertTrue(result.stderr.contains("gave up after 2 attempts"), result.stderr)
    }

    /// A disk too small for the file: a clear error before any byte is fetched,
    /// nothing else on the disk touched, and the same command finishes once there is room.
    func testFullDiskIsReportedAndNothingIsLost() throws {
        let servers = try TestServers.current()
        guard let disk = ProcessInfo.processInfo.environment["TRANSFERD_TEST_SMALL_DISK"] else {
            XCTFail("TRANSFERD_TEST_SMALL_DISK is not set: scripts/test mounts a 16 MiB tmpfs for this test")
            return
        }
        let other = disk + "/someone-elses.txt"
        try Data("keep me".utf8).write(to: URL(fileURLWithPath: other))
        defer { try? FileManager.default.removeItem(atPath: other) }
        let url = servers.http.appendingPathComponent("64m.bin").absoluteString
        let result = try TransferdProcess.run(["get", url, "-o", disk + "/big.bin"], directory: disk)
        XCTAssertEqual(result.status, 4, result.stderr)
        XCTAssertTrue(result.stderr.contains("No space left on device"), result.stderr)
        XCTAssertTrue(result.stderr.contains("free some space and run the same command again"), result.stderr)
        XCTAssertEqual(try String(contentsOfFile: other, encoding: .utf8), "keep me")
        XCTAssertFalse(FileManager.default.fileExists(atPath: disk + "/big.bin"))

        XCTAssertEqual(try run("/bin/mount", "-o", "remount,size=96m", disk), 0, "remount the tmpfs larger")
        defer { _ = try? run("/bin/mount", "-o", "remount,size=16m", disk) }
        let again = try TransferdProcess.run(["get", url, "-o", disk + "/big.bin"], directory: disk)
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: disk + "/big.bin"), try servers.sha256(of: "64m.bin"))
        try FileManager.default.removeItem(atPath: disk + "/big.bin")
    }

    private func run(_ tool: String, _ arguments: String...) throws -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        try process.run()
        process.waitUntilExit()
        return process.terminationStatus
    }

    /// kill -9 mid-download, then the same command: only the missing bytes are fetched. Also
    /// when the partial file and its checkpoint are under an earlier version's names
    /// (`NAME.part`, `NAME.part.state`): they are taken over and resumed.
    func testKillNineThenResumeFetchesOnlyTheMissingBytes() throws {
        let servers = try TestServers.current()
        let size = try servers.size(of: "64m.bin")
        for (backend, earlierNames) in [("curl", false), ("urlsession", false), ("curl", true)] {
            let label = "\(backend)\(earlierNames ? ", earlier names" : "")"
            let directory = try scratchDirectory("\(backend)-\(earlierNames)")
            let url = servers.http.appendingPathComponent("slow/64m.bin").absoluteString
            let arguments = ["get", url, "-o", "out.bin", "--transport", backend]
            let first = try TransferdProcess(arguments, directory: directory)
            let statePath = directory + "/out.bin.transferd-part.state"
            let deadline = Date().addingTimeInterval(20)
            var written: Int64 = 0
            while Date() < deadline {
                written = (try? FileCheckpointStore(path: statePath).load())?.plan.bytesWritten ?? 0
                if written >= 16 << 20 { break }
                usleep(50_000)
            }
            kill(first.process.processIdentifier, SIGKILL)
            _ = first.wait()
            let checkpoint = try XCTUnwrap(try FileCheckpointStore(path: statePath).load(), label)
            // What the checkpoint holds, plus what the partial file's own record adds in this boot.
            let kept = keptAfterKill(checkpoint, part: directory + "/out.bin.transferd-part")
            XCTAssertGreaterThanOrEqual(kept, 16 << 20, label)
            XCTAssertLessThan(kept, size, label)
            if earlierNames {
                XCTAssertEqual(rename(directory + "/out.bin.transferd-part", directory + "/out.bin.part"), 0)
                XCTAssertEqual(rename(statePath, directory + "/out.bin.part.state"), 0)
            }

            let logStart = try nginxLogSize(servers)
            let second = try TransferdProcess.run(arguments, directory: directory)
            XCTAssertEqual(second.status, 0, "\(label): \(second.stderr)")
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: directory + "/out.bin"), try servers.sha256(of: "64m.bin"), label)
            let fetched = try nginxBytesServed(servers, pathPrefix: "/slow/64m.bin", since: logStart)
            XCTAssertEqual(fetched, size - kept, "\(label): the second run fetched only what was missing")
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: directory), ["out.bin"], label)
        }
    }

    /// The bytes a run resumes from after a kill: the checkpoint's (in this boot), raised by
    /// the partial file's record of how far it is written.
    private func keptAfterKill(_ checkpoint: DownloadCheckpoint, part: String) -> Int64 {
        let trusted = checkpoint.trusted(inBoot: BootID.current)
        let fd = open(part, O_RDONLY)
        guard fd >= 0 else { return trusted.plan.bytesWritten }
        defer { close(fd) }
        return trusted.resumed(onFile: fd, bootID: BootID.current).checkpoint.plan.bytesWritten
    }

    /// kill -9 at speed (256 MB/s): the next run re-fetches at most 2 MiB of what the
    /// killed one had written (the partial file's own record of how far it is written,
    /// every MiB, trusted in the same boot beside its checkpoint), and after a "reboot"
    /// (another boot id in the checkpoint) only the synced bytes count.
    func testKillNineAtSpeedLosesAtMostTwoMiB() throws {
        let servers = try TestServers.current()
        let size = try servers.size(of: "1g.bin")
        let sha = try servers.sha256(of: "1g.bin")
        for (backend, rebooted) in [("curl", false), ("urlsession", false), ("curl", true)] {
            let directory = try scratchDirectory("\(#function)-\(backend)-\(rebooted)")
            let url = servers.http.appendingPathComponent("brisk/1g.bin").absoluteString
            let arguments = ["get", url, "-o", "out.bin", "--transport", backend]
            let first = try TransferdProcess(arguments, directory: directory)
            let statePath = directory + "/out.bin.transferd-part.state"
            let deadline = Date().addingTimeInterval(30)
            // Killed after a checkpoint that claims unsynced bytes (all but a few between syncs do).
            while Date() < deadline {
                let seen = try? FileCheckpointStore(path: statePath).load()
                if let seen, seen.plan.bytesWritten >= 300 << 20, seen.durable != nil { break }
                usleep(5_000)
            }
            // ...at a moment of its own, not just after a checkpoint (up to 15 MiB later at full rate).
            usleep(UInt32.random(in: 0...60_000))
            kill(first.process.processIdentifier, SIGKILL)
            _ = first.wait()
            // One connection writes from 0 on: the partial file's length is what it had written.
            var info = stat()
            XCTAssertEqual(stat(directory + "/out.bin.transferd-part", &info), 0)
            var checkpoint = try XCTUnwrap(try FileCheckpointStore(path: statePath).load(), backend)
            let written = Int64(info.st_size)
            XCTAssertLessThan(written, size, "\(backend): killed before the end")
            let part = open(directory + "/out.bin.transferd-part", O_RDONLY)
            XCTAssertNotNil(WrittenOffsets.read(fd: part), "\(backend): the partial file records how far it is written")
            close(part)
            let byCheckpoint = checkpoint.trusted(inBoot: BootID.current)
            let kept = keptAfterKill(checkpoint, part: directory + "/out.bin.transferd-part")
            XCTAssertLessThanOrEqual(written - kept, 2 << 20, "\(backend): \(written) bytes written, \(kept) kept")
            print("kill -9 at speed (\(backend)): \(written >> 20) MiB written, \(kept >> 20) MiB kept "
                  + "(\(byCheckpoint.plan.bytesWritten >> 20) MiB by the checkpoint alone), \((written - kept) >> 10) KiB to fetch again")
            var expectedFetch = size - kept
            if rebooted {
                checkpoint.bootID = "another-boot"
                try FileCheckpointStore(path: statePath).save(checkpoint)
                expectedFetch = size - (checkpoint.durable ?? checkpoint.plan).bytesWritten
                XCTAssertGreaterThan(expectedFetch, size - kept, "the test should have unsynced bytes to drop")
            }
            let logStart = try nginxLogSize(servers)
            let second = try TransferdProcess.run(arguments, directory: directory)
            XCTAssertEqual(second.status, 0, "\(backend): \(second.stderr)")
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: directory + "/out.bin"), sha, backend)
            XCTAssertEqual(try nginxBytesServed(servers, pathPrefix: "/brisk/1g.bin", since: logStart), expectedFetch, backend)
            try? FileManager.default.removeItem(atPath: directory)
        }
    }

    /// The same `get` started twice: the second stops with exit code 4 and the reason, and the
    /// first, whose partial file it left alone, finishes a correct file.
    func testASecondGetToTheSameDestinationLeavesTheFirstAlone() throws {
        let servers = try TestServers.current()
        let directory = try scratchDirectory()
        let url = servers.http.appendingPathComponent("slow/64m.bin").absoluteString
        let arguments = ["get", url, "-o", "out.bin", "-c", "1"]
        let first = try TransferdProcess(arguments, directory: directory)
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline, (try? FileManager.default.attributesOfItem(atPath: directory + "/out.bin.transferd-part"))?[.size] as? Int ?? 0 == 0 {
            usleep(20_000)
        }
        XCTAssertGreaterThan((try? FileManager.default.attributesOfItem(atPath: directory + "/out.bin.transferd-part"))?[.size] as? Int ?? 0, 0,
                             "the first get wrote nothing")
        let second = try TransferdProcess.run(arguments, directory: directory)
        XCTAssertEqual(second.status, 4, second.stderr)
        XCTAssertTrue(second.stderr.contains("out.bin.transferd-part is being written by another transferd process"), second.stderr)
        let result = first.wait()
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: directory + "/out.bin"), try servers.sha256(of: "64m.bin"))
    }

    func testCtrlCStopsResumablyAndTheNextRunFinishes() throws {
        let servers = try TestServers.current()
        let directory = try scratchDirectory()
        let url = servers.http.appendingPathComponent("slow/64m.bin").absoluteString
        let first = try TransferdProcess(["get", url, "-o", "out.bin"], directory: directory)
        Thread.sleep(forTimeInterval: 1.5)
        kill(first.process.processIdentifier, SIGINT)
        let stopped = Date()
        let result = first.wait()
        XCTAssertLessThan(Date().timeIntervalSince(stopped), 3)
        XCTAssertEqual(result.status, 130, result.stderr)
        XCTAssertTrue(result.stderr.contains("run the same command to resume"), result.stderr)
        let checkpoint = try XCTUnwrap(try FileCheckpointStore(path: directory + "/out.bin.transferd-part.state").load())
        XCTAssertGreaterThan(checkpoint.plan.bytesWritten, 0)

        let second = try TransferdProcess.run(["get", url, "-o", "out.bin"], directory: directory)
        XCTAssertEqual(second.status, 0, second.stderr)
        XCTAssertTrue(second.stderr.contains("resum"), second.stderr)
        XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: directory + "/out.bin"), try servers.sha256(of: "64m.bin"))
    }

    /// `--skip-unchanged` asks the server with the validators recorded when
    /// the file was saved: a 304 to If-None-Match keeps it without a byte of
    /// body; a file changed on the server is fetched again.
    func testSkipUnchangedAsksTheServerWithTheRecordedETag() throws {
        let servers = try TestServers.current()
        let directory = try scratchDirectory()
        let name = "cond-\(UUID().uuidString.prefix(8)).bin"
        try Data(repeating: 1, count: 100_000).write(to: URL(fileURLWithPath: servers.path(name)))
        let url = servers.http.appendingPathComponent(name).absoluteString
        var result = try TransferdProcess.run(["get", url], directory: directory)
        XCTAssertEqual(result.status, 0, result.stderr)

        var log = directory + "/1.log"
        result = try TransferdProcess.run(["get", url, "--skip-unchanged", "--log-file", log], directory: directory)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertTrue(result.stderr.contains("skipped"), result.stderr)
        var text = try String(contentsOfFile: log, encoding: .utf8)
        XCTAssertTrue(text.contains("> HEAD ") && text.contains("If-None-Match: \""), text)
        XCTAssertTrue(text.contains("< 304"), "nginx answered the condition: \(text)")
        XCTAssertFalse(text.contains("> GET "), text)

        // Changed on the server (same size; nginx's ETag is its mtime and size, so a later mtime): fetched again.
        try Data(repeating: 2, count: 100_000).write(to: URL(fileURLWithPath: servers.path(name)))
        try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(5)], ofItemAtPath: servers.path(name))
        log = directory + "/2.log"
        result = try TransferdProcess.run(["get", url, "--skip-unchanged", "--log-file", log], directory: directory)
        XCTAssertEqual(result.status, 0, result.stderr)
        text = try String(contentsOfFile: log, encoding: .utf8)
        XCTAssertTrue(text.contains("< 200") && text.contains("> GET "), text)
        XCTAssertEqual(FileManager.default.contents(atPath: directory + "/" + name), Data(repeating: 2, count: 100_000))

        // Changed locally since it was saved: the record no longer applies, the old comparison does.
        try Data(repeating: 3, count: 100_000).write(to: URL(fileURLWithPath: directory + "/" + name))
        log = directory + "/3.log"
        result = try TransferdProcess.run(["get", url, "--skip-unchanged", "--log-file", log], directory: directory)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertFalse(try String(contentsOfFile: log, encoding: .utf8).contains("If-None-Match"))
        XCTAssertEqual(FileManager.default.contents(atPath: directory + "/" + name), Data(repeating: 2, count: 100_000))
        try? FileManager.default.removeItem(atPath: servers.path(name))
    }

    /// A server that ignores the conditions (200 to the HEAD) with a weak ETag and the same
    /// Last-Modified and size: the file is unchanged and not fetched again (it was before).
    func testSkipUnchangedComparesValidatorsWhenNo304Comes() throws {
        let servers = try TestServers.current()
        let directory = try scratchDirectory()
        let (url, key) = servers.fault("1m.bin", ["weak_etag": "1"])
        var result = try TransferdProcess.run(["get", url.absoluteString, "-o", "out.bin"], directory: directory)
        XCTAssertEqual(result.status, 0, result.stderr)
        let sent = try servers.stats(key: key).bytes_sent
        result = try TransferdProcess.run(["get", url.absoluteString, "-o", "out.bin", "--skip-unchanged"], directory: directory)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertTrue(result.stderr.contains("skipped"), result.stderr)
        XCTAssertEqual(try servers.stats(key: key).bytes_sent, sent, "no body fetched again")
    }

    /// `-o c`: a one-letter destination crashed the process (Foundation's
    /// deletingLastPathComponent traps on it on Linux once fileExists has been asked).
    func testAOneLetterDestinationIsAFile() throws {
        let servers = try TestServers.current()
        let directory = try scratchDirectory()
        let result = try TransferdProcess.run(["get", servers.http.appendingPathComponent("1m.bin").absoluteString, "-o", "c"],
                                              directory: directory)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: directory + "/c"), try servers.sha256(of: "1m.bin"))
        XCTAssertEqual(PathText.parent("c"), "")
        XCTAssertEqual(PathText.parent("/c"), "/")
        XCTAssertEqual(PathText.parent("/"), "/")
        XCTAssertEqual(PathText.parent("a/b/"), "a")
        XCTAssertEqual(PathText.parent("a//b"), "a")
        XCTAssertEqual(PathText.parent("./c"), ".")
    }

    /// A user's own `g/report.part` and `g/report.part.state` beside `get URL -o g/report`: both
    /// were taken as partial files (truncated, then renamed into place: the user's file gone).
    /// Partial files now have names no destination can take (`.transferd-part`), so those are
    /// just files; a file at the new names that transferd cannot prove it wrote stops the
    /// download (exit 4) and is left as it was.
    func testAUsersFileAtThePartialNameIsLeftAlone() throws {
        let servers = try TestServers.current()
        let directory = try scratchDirectory()
        try FileManager.default.createDirectory(atPath: directory + "/g", withIntermediateDirectories: true)
        let mine = Data("my own report, not a download\n".utf8)
        try mine.write(to: URL(fileURLWithPath: directory + "/g/report.part"))
        try mine.write(to: URL(fileURLWithPath: directory + "/g/report.part.state"))
        let url = servers.http.appendingPathComponent("1m.bin").absoluteString
        var result = try TransferdProcess.run(["get", url, "-o", "g/report"], directory: directory)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: directory + "/g/report"), try servers.sha256(of: "1m.bin"))
        XCTAssertEqual(FileManager.default.contents(atPath: directory + "/g/report.part"), mine)
        XCTAssertEqual(FileManager.default.contents(atPath: directory + "/g/report.part.state"), mine)
        try FileManager.default.removeItem(atPath: directory + "/g/report")

        for name in ["report.transferd-part", "report.transferd-part.state"] {
            try mine.write(to: URL(fileURLWithPath: directory + "/g/" + name))
            result = try TransferdProcess.run(["get", url, "-o", "g/report"], directory: directory)
            XCTAssertEqual(result.status, 4, result.stderr)
            XCTAssertTrue(result.stderr.contains("g/\(name) exists and transferd has no record of writing it"), result.stderr)
            XCTAssertEqual(FileManager.default.contents(atPath: directory + "/g/" + name), mine)
            XCTAssertFalse(FileManager.default.fileExists(atPath: directory + "/g/report"))
            try FileManager.default.removeItem(atPath: directory + "/g/" + name)
        }

        // A partial file of transferd's own, left by a run killed before its first checkpoint
        // (tagged when made, no record), is still resumed or started over as before.
        try Data(repeating: 9, count: 1000).write(to: URL(fileURLWithPath: directory + "/g/report.transferd-part"))
        XCTAssertEqual(setxattr(directory + "/g/report.transferd-part", "user.transferd.file", "dead-run", 8, 0), 0)
        result = try TransferdProcess.run(["get", url, "-o", "g/report"], directory: directory)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: directory + "/g/report"), try servers.sha256(of: "1m.bin"))
        XCTAssertEqual(FileManager.default.contents(atPath: directory + "/g/report.part"), mine, "still the user's")
    }

    /// A destination may not take a name transferd keeps for partial files: `-o`, or the name a URL gives.
    func testADestinationNamedLikeAPartialFileIsRefused() throws {
        let servers = try TestServers.current()
        let directory = try scratchDirectory()
        let url = servers.http.appendingPathComponent("1m.bin").absoluteString
        let named = servers.http.appendingPathComponent("a.transferd-part").absoluteString
        for arguments in [["get", url, "-o", "x.transferd-part"], ["get", url, "-o", "x.transferd-part.state"], ["get", named]] {
            let result = try TransferdProcess.run(arguments, directory: directory)
            XCTAssertEqual(result.status, 2, "\(arguments): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains("which transferd keeps for its partial files"), result.stderr)
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: directory), [], "nothing written")
    }
}
