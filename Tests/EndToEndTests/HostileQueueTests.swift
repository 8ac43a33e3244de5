import Foundation
import TestSupport
import TransferCore
import XCTest

/// The real binary against job files and folders a hostile or careless user
/// makes: nothing may crash the process, block the queue, escape the root or
/// show a secret.
final class HostileQueueTests: XCTestCase {
    /// Runs transferd, killing it if it takes longer than `seconds` (a hang is a failure, not a stuck suite).
    func run(_ arguments: [String], in directory: String, seconds: TimeInterval = 60,
             file: StaticString = #filePath, line: UInt = #line) throws -> TransferdProcess.Result {
        let process = try TransferdProcess(arguments, directory: directory)
        let deadline = DispatchWorkItem { if process.process.isRunning { process.process.terminate() } }
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds, execute: deadline)
        let result = process.wait()
        deadline.cancel()
        XCTAssertNotEqual(process.process.terminationReason, .uncaughtSignal, "transferd crashed: \(result.stderr)", file: file, line: line)
        return result
    }

    func mode(_ path: String) throws -> Int {
        (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as! NSNumber).intValue
    }

    func testAPoisonJobFileIsRejectedAndTheOthersRun() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let url = servers.http.appendingPathComponent("1m.bin").absoluteString
        try fixture.drop("a-poison.json", #"{"url": "\#(url)", "dest": "p.bin", "limit_rate": "1e30"}"#)
        try fixture.drop("b-inf.json", #"{"type": "s3-upload", "url": "s3://b/k", "source": "x", "part_size": "inf"}"#)
        try fixture.drop("c-good.json", #"{"url": "\#(url)", "dest": "good.bin"}"#)
        let validate = try run(["validate", fixture.queue + "/a-poison.json"], in: fixture.root)
        XCTAssertEqual(validate.status, 2, validate.stderr)
        XCTAssertTrue(validate.stdout.contains("limit_rate") || validate.stderr.contains("limit_rate"), validate.stdout + validate.stderr)

        let first = try run(["run", "--queue", fixture.queue], in: fixture.root)
        XCTAssertEqual(first.status, 2, "rejected files make the run exit 2: \(first.stderr)")
        XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: fixture.root + "/good.bin"), try servers.sha256(of: "1m.bin"))
        for name in ["a-poison.json", "b-inf.json"] {
            XCTAssertTrue(FileManager.default.fileExists(atPath: "\(fixture.queue)/rejected/\(name).error"), name)
            XCTAssertFalse(FileManager.default.fileExists(atPath: "\(fixture.queue)/\(name)"), name)
        }
        let again = try run(["run", "--queue", fixture.queue], in: fixture.root)
        XCTAssertEqual(again.status, 0, "the next run is not blocked: \(again.stderr)")
    }

    /// A queue job whose server trickles (20 bytes a second, never silent) is abandoned under its
    /// own speed floor and fails with the reason, instead of holding its slot for ever.
    func testATricklingJobFailsUnderItsSpeedFloor() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let (url, _) = servers.fault("1m.bin", ["rate": "20"])
        try fixture.drop("slow.json", #"{"url": "\#(url.absoluteString)", "dest": "slow.bin", "speed_limit": "1K", "speed_time": 2, "retries": 2}"#)
        let started = Date()
        let result = try run(["run", "--queue", fixture.queue], in: fixture.root)
        XCTAssertEqual(result.status, 1, result.stderr)
        XCTAssertEqual(try fixture.store().counts(), [.failed: 1])
        let failed = "\(try fixture.results("failed", "slow.json"))"
        XCTAssertTrue(failed.contains("slower than 1024 bytes/s for 2 s"), failed)
        XCTAssertLessThan(Date().timeIntervalSince(started), 60, "abandoned in time")
    }

    func testAQueueFolderLinkedElsewhereIsRefusedAndNothingLandsThere() throws {
        let fixture = try QueueFixture()
        let elsewhere = try scratchDirectory("linked-elsewhere")
        XCTAssertEqual(symlink(elsewhere, fixture.queue + "/done"), 0)
        try fixture.drop("a.json", #"{"url": "http://127.0.0.1:9/a.bin", "dest": "a.bin"}"#)
        for command in ["run", "ingest"] {
            let result = try run([command, "--queue", fixture.queue], in: fixture.root)
            XCTAssertEqual(result.status, 2, "\(command): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains("queue.d/done is a symbolic link to \(elsewhere); transferd writes only inside the queue"
                                                 + " folder: replace it with a directory"), "\(command): \(result.stderr)")
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: elsewhere), [])
        XCTAssertTrue(FileManager.default.fileExists(atPath: fixture.queue + "/a.json"), "the job file was not taken")
    }

    func testAStoreThatLostItsJobsIsRefusedAndLeftAsItIs() throws {
        let fixture = try QueueFixture()
        let database = fixture.queue + "/.transferd/state.db"
        try fixture.drop("a.json", #"{"url": "http://127.0.0.1:9/a.bin", "dest": "a.bin"}"#)
        XCTAssertEqual(try run(["ingest", "--queue", fixture.queue], in: fixture.root).status, 0)
        XCTAssertTrue(FileManager.default.fileExists(atPath: fixture.queue + "/accepted/a.json"))
        // Truncated to nothing (its WAL gone too), beside the accepted job file.
        for companion in ["-wal", "-shm"] { unlink(database + companion) }
        XCTAssertEqual(truncate(database, 0), 0)
        for command in [["run", "--queue", fixture.queue], ["status", "--queue", fixture.queue], ["ingest", "--queue", fixture.queue]] {
            let result = try run(command, in: fixture.root)
            XCTAssertEqual(result.status, 2, "\(command): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains("state store \(database) is empty (0 bytes), but accepted/ holds 1 file"),
                          "\(command): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains("mv \(fixture.queue)/accepted/* \(fixture.queue)/"), result.stderr)
            XCTAssertEqual(FileManager.default.contents(atPath: database), Data(), "\(command) left the file as it was")
        }
        // Not a database at all: refused, the bytes kept.
        let garbage = Data((0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 131) })
        try garbage.write(to: URL(fileURLWithPath: database))
        let result = try run(["run", "--queue", fixture.queue], in: fixture.root)
        XCTAssertEqual(result.status, 2, result.stderr)
        XCTAssertTrue(result.stderr.contains("state store \(database) is not a SQLite database"), result.stderr)
        XCTAssertEqual(FileManager.default.contents(atPath: database), garbage)
    }

    func testAStoreLeftEmptyBeforeAnyJobStartsANewQueue() throws {
        let fixture = try QueueFixture()
        try FileManager.default.createDirectory(atPath: fixture.queue + "/.transferd", withIntermediateDirectories: true)
        XCTAssertTrue(FileManager.default.createFile(atPath: fixture.queue + "/.transferd/state.db", contents: Data()))
        let result = try run(["run", "--queue", fixture.queue], in: fixture.root)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(try run(["status", "--queue", fixture.queue], in: fixture.root).status, 0)
    }

    /// A job recorded before the header rule (put in the store directly here) fails with
    /// the reason as it starts, instead of sending another origin's Host.
    func testARecordedJobWithARefusedHeaderFailsWithTheReason() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let url = servers.http.appendingPathComponent("1m.bin").absoluteString
        var spec = JobSpec(id: "old", kind: .download, url: url, destination: fixture.root + "/old.bin")
        spec.headers = ["Host": "other.example"]
        try QueueLayout(directory: fixture.queue).prepare()
        do {
            let store = try fixture.store()
            _ = try store.ingest([JobFileContent(fileName: "old.json", contentHash: "h-old", jobs: [spec])])
        }
        let result = try run(["run", "--queue", fixture.queue], in: fixture.root)
        XCTAssertEqual(result.status, 1, result.stderr)
        XCTAssertEqual(try fixture.store().job("old")?.state, .failed)
        let error = try fixture.store().job("old")?.lastError ?? ""
        XCTAssertTrue(error.contains("Host is set by transferd from the URL"), error)
        XCTAssertFalse(FileManager.default.fileExists(atPath: fixture.root + "/old.bin"))
    }

    func testOutOfRangeNumbersOnTheCommandLineAreUsageErrors() throws {
        let servers = try TestServers.current()
        let directory = try scratchDirectory()
        let url = servers.http.appendingPathComponent("1m.bin").absoluteString
        for extra in [["--limit-rate", "1e19"], ["--limit-rate", "inf"], ["--connect-timeout", "inf"],
                      ["--idle-timeout", "1e300"], ["--connect-timeout", "nan"]] {
            let result = try run(["get", url] + extra, in: directory)
            XCTAssertEqual(result.status, 2, "\(extra): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains(extra[0]), result.stderr)
        }
    }

    func testAJobThatCannotBeRenamedFailsAloneAndDoesNotBlockTheNextRun() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        try FileManager.default.createDirectory(atPath: fixture.root + "/existingdir/inner", withIntermediateDirectories: true)
        let url = servers.http.appendingPathComponent("1m.bin").absoluteString
        try fixture.drop("jobs.json", jobs: [["id": "to-dir", "url": url, "dest": "existingdir", "overwrite": "overwrite"],
                                             ["id": "fine", "url": url, "dest": "fine.bin"]])
        let first = try run(["run", "--queue", fixture.queue], in: fixture.root)
        XCTAssertEqual(first.status, 1, "one job failed: \(first.stdout) \(first.stderr)")
        let store = try fixture.store()
        XCTAssertEqual(try store.job("fine")?.state, .done)
        let failed = try XCTUnwrap(try store.job("to-dir"))
        XCTAssertEqual(failed.state, .failed)
        XCTAssertTrue(failed.lastError?.contains("is a folder") ?? false, failed.lastError ?? "")
        XCTAssertTrue(FileManager.default.fileExists(atPath: fixture.root + "/existingdir/inner"), "the folder is untouched")
        let second = try run(["run", "--queue", fixture.queue], in: fixture.root)
        // 1: the failed job is still listed as failed; the run started and ended normally.
        XCTAssertEqual(second.status, 1, "nothing left to run, nothing blocked: \(second.stderr)")
        XCTAssertFalse(second.stderr.contains("rename"), second.stderr)
    }

    func testCancelEndsAJobInAnyUnfinishedStateIncludingFinishing() throws {
        let fixture = try QueueFixture()
        try fixture.drop("one.json", jobs: [["id": "f", "url": "http://127.0.0.1:9/x.bin", "dest": "x.bin"]])
        XCTAssertEqual(try run(["ingest", "--queue", fixture.queue], in: fixture.root).status, 0)
        let store = try fixture.store()
        XCTAssertEqual(try store.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { _ in true }.map(\.id), ["f"])
        XCTAssertEqual(try store.markFinishing([(id: "f", bytes: 10, sha256: nil)]), [])
        XCTAssertEqual(try store.job("f")?.state, .finishing)
        let cancel = try run(["cancel", "f", "--queue", fixture.queue], in: fixture.root)
        XCTAssertEqual(cancel.status, 0, cancel.stderr)
        XCTAssertEqual(try store.job("f")?.state, .cancelled)
        // A run finishing the rename afterwards does not turn it back into done.
        XCTAssertEqual(try store.finishDone([(id: "f", bytes: 10, sha256: nil)], at: Date()), ["f"], "reported as not done")
        XCTAssertEqual(try store.job("f")?.state, .cancelled)
    }

    func testTwoJobsWithOneDestinationNeverShareAPartialFile() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        // Slow enough that both would be running at once without the rule.
        let first = servers.http.appendingPathComponent("slow/64m.bin").absoluteString
        let second = servers.http.appendingPathComponent("slow/64m-v2.bin").absoluteString
        try fixture.drop("a.json", jobs: [["id": "first", "url": first, "dest": "same.bin"]])
        try fixture.drop("b.json", jobs: [["id": "second", "url": second, "dest": "same.bin"]])
        // same.bin.part is a destination like any other: its own partial file, no shared one.
        try fixture.drop("c.json", jobs: [["id": "third", "url": second, "dest": "same.bin.part"]])
        let result = try run(["run", "--queue", fixture.queue, "--jobs", "4"], in: fixture.root, seconds: 120)
        XCTAssertEqual(result.status, 1, "the second finds the file there and refuses: \(result.stdout) \(result.stderr)")
        let store = try fixture.store()
        XCTAssertEqual(try store.job("first")?.state, .done)
        let refused = try XCTUnwrap(try store.job("second"))
        XCTAssertEqual(refused.state, .failed)
        XCTAssertTrue(refused.lastError?.contains("already exists") ?? false, refused.lastError ?? "")
        XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: fixture.root + "/same.bin"), try servers.sha256(of: "64m.bin"),
                       "one job's bytes, whole")
        XCTAssertEqual(try store.job("third")?.state, .done)
        XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: fixture.root + "/same.bin.part"), try servers.sha256(of: "64m-v2.bin"))
    }

    func testSpecialFilesInTheQueueFolderAreRejectedUnread() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        XCTAssertEqual(mkfifo(fixture.queue + "/pipe.json", 0o644), 0)
        // A link to a private file elsewhere: its content must not be copied anywhere.
        let outside = try scratchDirectory() + "/private.json"
        try Data(#"{"url": "http://example.com/TOPSECRET-CONTENT"#.utf8).write(to: URL(fileURLWithPath: outside))
        chmod(outside, 0o600)
        XCTAssertEqual(symlink(outside, fixture.queue + "/link.json"), 0)
        try fixture.drop("good.json", #"{"url": "\#(servers.http.appendingPathComponent("1m.bin").absoluteString)", "dest": "g.bin"}"#)
        let result = try run(["run", "--queue", fixture.queue], in: fixture.root, seconds: 30)
        XCTAssertEqual(result.status, 2, "rejected files: \(result.stdout) \(result.stderr)")
        XCTAssertTrue(FileManager.default.fileExists(atPath: fixture.root + "/g.bin"), "the other job ran")
        for name in ["pipe.json", "link.json"] {
            let errorFile = "\(fixture.queue)/rejected/\(name).error"
            let text = try String(contentsOfFile: errorFile, encoding: .utf8)
            XCTAssertTrue(text.contains("not a regular file"), text)
            XCTAssertFalse(text.contains("TOPSECRET"), text)
            XCTAssertEqual(try mode(errorFile) & 0o077, 0, "\(name).error is private")
        }
        XCTAssertEqual(try run(["status", "--queue", fixture.queue], in: fixture.root).status, 0)
    }

    func testTheStoreIsPrivateAndStatusJSONRedacts() throws {
        let fixture = try QueueFixture()
        try fixture.drop("s.json", #"{"id": "sec", "url": "http://user:hunter2@127.0.0.1:9/a.bin?token=abc123&x=1", "dest": "a.bin"}"#)
        XCTAssertEqual(try run(["ingest", "--queue", fixture.queue], in: fixture.root).status, 0)
        XCTAssertEqual(try mode(fixture.queue + "/.transferd") & 0o077, 0)
        XCTAssertEqual(try mode(fixture.queue + "/.transferd/state.db") & 0o077, 0)
        let json = try run(["status", "--queue", fixture.queue, "--json"], in: fixture.root)
        XCTAssertEqual(json.status, 0, json.stderr)
        XCTAssertFalse(json.stdout.contains("hunter2"), json.stdout)
        XCTAssertFalse(json.stdout.contains("abc123"), json.stdout)
        XCTAssertTrue(json.stdout.contains("REDACTED"), json.stdout)
        let table = try run(["status", "--queue", fixture.queue], in: fixture.root)
        XCTAssertFalse(table.stdout.contains("hunter2") || table.stdout.contains("abc123"), table.stdout)
    }

    func testControlCharactersNeverReachTheTerminal() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let url = servers.http.appendingPathComponent("nothing-here.bin").absoluteString
        try fixture.drop("c.json", jobs: [["id": "esc", "url": url, "dest": "evil\u{1B}[31m\u{07}name.bin"]])
        let result = try run(["run", "--queue", fixture.queue, "--progress", "plain"], in: fixture.root)
        XCTAssertEqual(result.status, 1)
        let status = try run(["status", "--queue", fixture.queue], in: fixture.root)
        for output in [result.stdout, result.stderr, status.stdout] {
            XCTAssertFalse(output.contains("\u{1B}") || output.contains("\u{07}"), output)
        }
        XCTAssertTrue(status.stdout.contains("evil?[31m?name.bin") || status.stdout.contains("HTTP 404"), status.stdout)
    }

    func testSymbolicLinksCannotLeadAJobOutOfTheRoot() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let elsewhere = try scratchDirectory()
        XCTAssertEqual(symlink(elsewhere, fixture.root + "/outlink"), 0)
        let secret = elsewhere + "/secret.txt"
        try Data("private".utf8).write(to: URL(fileURLWithPath: secret))
        chmod(secret, 0o600)
        XCTAssertEqual(symlink(secret, fixture.root + "/source-link.txt"), 0)
        let url = servers.http.appendingPathComponent("1m.bin").absoluteString
        try fixture.drop("l.json", jobs: [
            ["id": "down", "url": url, "dest": "outlink/c.bin"],
            ["id": "up", "type": "put", "url": servers.fault.appendingPathComponent("_echo").absoluteString, "source": "source-link.txt"],
            ["id": "up-dir", "type": "put", "url": servers.fault.appendingPathComponent("_echo").absoluteString, "source": "outlink/secret.txt"],
        ])
        let result = try run(["run", "--queue", fixture.queue], in: fixture.root)
        XCTAssertEqual(result.status, 1, result.stdout + result.stderr)
        let store = try fixture.store()
        for id in ["down", "up", "up-dir"] {
            let job = try XCTUnwrap(try store.job(id))
            XCTAssertEqual(job.state, .failed, id)
            XCTAssertTrue(job.lastError?.contains("symbolic link") ?? false, "\(id): \(job.lastError ?? "")")
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: elsewhere), ["secret.txt"], "nothing written outside the root")
    }

    func testALinkPlantedAsThePartialFileIsNotWrittenThrough() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let victim = try scratchDirectory() + "/victim.txt"
        try Data("keep me".utf8).write(to: URL(fileURLWithPath: victim))
        XCTAssertEqual(symlink(victim, fixture.root + "/planted.bin.transferd-part"), 0)
        try fixture.drop("p.json", jobs: [["id": "p", "url": servers.http.appendingPathComponent("1m.bin").absoluteString,
                                           "dest": "planted.bin"]])
        let result = try run(["run", "--queue", fixture.queue], in: fixture.root)
        XCTAssertEqual(result.status, 1, result.stdout + result.stderr)
        XCTAssertEqual(try String(contentsOfFile: victim, encoding: .utf8), "keep me")
    }

    func testANameFromTheURLStaysInTheChosenFolder() throws {
        let servers = try TestServers.current()
        let base = try scratchDirectory()
        let cwd = base + "/a/b"
        try FileManager.default.createDirectory(atPath: cwd + "/outdir", withIntermediateDirectories: true)
        let url = servers.fault.absoluteString + "/ok/..%2F..%2Fescape.bin?status=200"
        for arguments in [["get", url], ["get", url, "-o", "outdir"]] {
            let result = try run(arguments, in: cwd)
            XCTAssertEqual(result.status, 0, "\(arguments): \(result.stderr)")
        }
        XCTAssertTrue(FileManager.default.fileExists(atPath: cwd + "/.._.._escape.bin"))
        XCTAssertTrue(FileManager.default.fileExists(atPath: cwd + "/outdir/.._.._escape.bin"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: base + "/escape.bin"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: base + "/a/escape.bin"))
    }
}
