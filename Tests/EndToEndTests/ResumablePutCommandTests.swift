import Foundation
import TestSupport
import TransferCore
import XCTest

/// `transferd put --resumable` (the IETF draft "Resumable Uploads for HTTP", draft-12, interop
/// version 8) as a user runs it, against the fault server's `/_ietf/` endpoint, and the
/// `resumable` job in the queue.
extension PutCommandTests {
    /// kill -9 in the middle of the upload (the fault server reads at 2 MB/s), then the same
    /// command: it HEADs the recorded upload resource and sends from the server's offset. The
    /// bytes the server received in all, minus the file's size, are the bytes resent.
    /// curl sends the file with the creation and records the 104's Location; urlsession creates
    /// the upload empty, then appends. On both backends, 16 MiB.
    func testResumableKillNineMidUploadResendsNothingTheServerConfirmed() throws {
        let servers = try TestServers.current()
        let directory = try scratchDirectory()
        let source = directory + "/big.bin"
        try randomFile(source, megabytes: 16)
        let size = 16 << 20
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory
        environment["XDG_STATE_HOME"] = nil
        for backend in ["curl", "urlsession"] {
            let key = "ietf-kill-\(backend)-\(UUID().uuidString.prefix(8))"
            try servers.setIetfFaults(key: key, ["rate": "2000000"])
            let url = servers.ietf(key: key).absoluteString
            let arguments = ["put", "--resumable", source, url, "--transport", backend]
            let first = try TransferdProcess(arguments, directory: directory, environment: environment)
            let deadline = Date().addingTimeInterval(30)
            while (try servers.ietfStats(key: key)["received"] as? Int ?? 0) < 3_000_000, Date() < deadline { usleep(20_000) }
            kill(first.process.processIdentifier, SIGKILL)
            _ = first.wait()
            let atKill = try servers.ietfStats(key: key)["received"] as? Int ?? 0
            XCTAssertLessThan(atKill, size, "\(backend): killed before the end")
            try servers.setIetfFaults(key: key, ["rate": ""])

            let second = try TransferdProcess.run(arguments, directory: directory, environment: environment)
            XCTAssertEqual(second.status, 0, "\(backend): \(second.stderr)")
            XCTAssertTrue(second.stderr.contains("resumed at byte"), "\(backend): \(second.stderr)")
            XCTAssertTrue(second.stderr.contains("resumable (draft-ietf-httpbis-resumable-upload-12), continued from the server's offset"),
                          "\(backend): \(second.stderr)")
            let stats = try servers.ietfStats(key: key)
            let resent = (stats["received"] as? Int ?? 0) - size
            print("resumable put, kill -9 at \(atKill) bytes received (\(backend)): bytes resent after the kill: \(resent)")
            XCTAssertEqual(stats["creations"] as? Int, 1, "\(backend): the same upload continued")
            XCTAssertEqual(stats["offset"] as? Int, size, backend)
            XCTAssertEqual(stats["complete"] as? Bool, true, backend)
            XCTAssertEqual(stats["sha256"] as? String, try SHA256Hasher.hex(ofFileAt: source), backend)
            XCTAssertEqual(resent, 0, "\(backend): nothing the server holds is sent again")
            let state = FileUploadStateStore(source: source, bucket: "resumable", key: url, environment: ["HOME": directory])
            XCTAssertNil(try state.load(), "\(backend): the record is gone once complete")
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Options that do not go with --resumable are refused with exit 2 and a reason, before
    /// anything is sent.
    func testResumableUsageErrors() throws {
        let servers = try TestServers.current()
        let directory = try scratchDirectory()
        _ = FileManager.default.createFile(atPath: directory + "/a.bin", contents: Data("abc".utf8))
        let url = servers.ietf(key: "ietf-usage-\(UUID().uuidString.prefix(8))").absoluteString
        let cases: [([String], String)] = [
            (["put", "--resumable", "--tus", "a.bin", url], "--resumable and --tus"),
            (["put", "--resumable", "a.bin", url, "--form", "x=1"], "--form does not apply to a resumable upload"),
            (["put", "--resumable", "a.bin", url, "--chunk-size", "1M"], "--chunk-size does not apply to a resumable upload"),
            (["put", "--resumable", "a.bin", url, "-X", "POST"], "--method does not apply to a resumable upload"),
            (["put", "--resumable", "a.bin", "s3://bucket/key"], "is not an http:// or https:// URL"),
            (["put", "--resumable", "missing.bin", url], "missing.bin: no such file"),
            (["put", "--resumable", "a.bin"], "need PATH and URL"),
            (["put", "--resumable", "a.bin", url, "--limit-rate", "1M", "--transport", "urlsession"], "--transport curl"),
        ]
        for (arguments, expected) in cases {
            let run = try TransferdProcess.run(arguments, directory: directory)
            XCTAssertEqual(run.status, 2, "\(arguments): \(run.stderr)")
            XCTAssertTrue(run.stderr.contains(expected), "\(arguments): \(run.stderr)")
        }
        XCTAssertEqual(try servers.ietfStats(key: URLComponents(string: url)!.queryItems!.first!.value!)["creations"] as? Int, 0)
        let help = try TransferdProcess.run(["put", "--help"], directory: directory)
        XCTAssertTrue(help.stdout.contains("--resumable"), help.stdout)
    }

    /// A `resumable` job in the queue ends done with the file on the server; `transferd cancel`
    /// on a running one cancels the upload on the server (DELETE) and the job ends cancelled.
    func testResumableJobsRunAndCancelInTheQueue() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        try randomFile(fixture.root + "/data.bin", megabytes: 2)
        let done = "ietf-job-\(UUID().uuidString.prefix(8))"
        try fixture.drop("resumable.json", jobs: [["id": "up", "type": "resumable", "url": servers.ietf(key: done).absoluteString,
                                                   "source": "data.bin"]])
        let run = try fixture.run()
        XCTAssertEqual(run.status, 0, run.stderr)
        XCTAssertEqual(try fixture.store().counts(), [.done: 1])
        XCTAssertEqual(try servers.ietfStats(key: done)["sha256"] as? String, try SHA256Hasher.hex(ofFileAt: fixture.root + "/data.bin"))

        let second = try QueueFixture()
        try randomFile(second.root + "/data.bin", megabytes: 4)
        let key = "ietf-cancel-\(UUID().uuidString.prefix(8))"
        try servers.setIetfFaults(key: key, ["rate": "500000"])
        try second.drop("resumable.json", jobs: [["id": "up", "type": "resumable", "url": servers.ietf(key: key).absoluteString,
                                                  "source": "data.bin"]])
        let running = try second.start()
        let deadline = Date().addingTimeInterval(30)
        while (try servers.ietfStats(key: key)["received"] as? Int ?? 0) < 1_200_000, Date() < deadline { usleep(20_000) }
        let cancel = try TransferdProcess.run(["cancel", "up", "--queue", second.queue], directory: second.root)
        XCTAssertEqual(cancel.status, 0, cancel.stderr)
        _ = running.wait()
        XCTAssertEqual(try second.store().job("up")?.state, .cancelled)
        let stats = try servers.ietfStats(key: key)
        XCTAssertEqual(stats["deleted"] as? Int, 1, "the upload was cancelled on the server: \(stats)")
        XCTAssertLessThan(stats["offset"] as? Int ?? Int.max, 4 << 20, "cancelled before the end")
    }

    /// A `resumable` job in the queue, its run killed with SIGKILL mid-upload: the next run
    /// takes the same upload up from the server's offset (its resource is in the job's row),
    /// sends nothing the server confirmed, and the job is done once, on both backends.
    func testAResumableJobKilledMidUploadGoesOnFromTheServersOffsetInTheNextRun() throws {
        let servers = try TestServers.current()
        let size = 8 << 20
        for backend in ["curl", "urlsession"] {
            let fixture = try QueueFixture()
            try randomFile(fixture.root + "/data.bin", megabytes: 8)
            let key = "ietf-queue-kill-\(backend)-\(UUID().uuidString.prefix(8))"
            try servers.setIetfFaults(key: key, ["rate": "2000000"])
            try fixture.drop("resumable.json", jobs: [["id": "up", "type": "resumable", "url": servers.ietf(key: key).absoluteString,
                                                       "source": "data.bin", "transport": backend]])
            let first = try fixture.start()
            let deadline = Date().addingTimeInterval(30)
            while (try servers.ietfStats(key: key)["received"] as? Int ?? 0) < 3_000_000, Date() < deadline { usleep(20_000) }
            kill(first.process.processIdentifier, SIGKILL)
            _ = first.wait()
            let atKill = try servers.ietfStats(key: key)["received"] as? Int ?? 0
            XCTAssertGreaterThan(atKill, 0, backend)
            XCTAssertLessThan(atKill, size, "\(backend): killed before the end")
            try servers.setIetfFaults(key: key, ["rate": ""])

            let second = try fixture.run()
            XCTAssertEqual(second.status, 0, "\(backend): \(second.stderr)")
            XCTAssertEqual(try fixture.store().counts(), [.done: 1], backend)
            let stats = try servers.ietfStats(key: key)
            let resent = (stats["received"] as? Int ?? 0) - size
            print("resumable job, kill -9 of the run at \(atKill) bytes received (\(backend)): bytes resent: \(resent)")
            XCTAssertEqual(stats["creations"] as? Int, 1, "\(backend): the same upload continued: \(stats)")
            XCTAssertEqual(stats["complete"] as? Bool, true, backend)
            XCTAssertEqual(stats["sha256"] as? String, try SHA256Hasher.hex(ofFileAt: fixture.root + "/data.bin"), backend)
            XCTAssertEqual(resent, 0, "\(backend): nothing the server holds is sent again")
        }
    }
}
