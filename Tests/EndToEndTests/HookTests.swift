import Foundation
import TestSupport
import TransferCore
import XCTest

/// `on_done`, `on_failed` and `notify` with the real binary: the command's
/// environment and recorded result, a timeout, a notify POST retried and
/// signed, and a hook cut off by `kill -9` that runs on the next start.
final class HookTests: XCTestCase {
    /// A shell command (asked for explicitly, as a user would) that writes its environment's
    /// TRANSFERD_ variables to `file`, one per line.
    private func recorder(_ file: String) -> [String] {
        ["/bin/sh", "-c", "env | grep '^TRANSFERD_' | sort > \"$0\"; echo \"hook for $TRANSFERD_JOB_ID\"", file]
    }

    private func variables(_ file: String) throws -> [String: String] {
        let text = try String(contentsOfFile: file, encoding: .utf8)
        return Dictionary(text.split(separator: "\n").compactMap { line -> (String, String)? in
            guard let equals = line.firstIndex(of: "=") else { return nil }
            return (String(line[..<equals]), String(line[line.index(after: equals)...]))
        }, uniquingKeysWith: { _, last in last })
    }

    private func hook(_ store: QueueStore, _ id: String) throws -> [String: Any] {
        let text = try XCTUnwrap(try store.job(id)?.hook, "job \(id) has a recorded hook")
        return try XCTUnwrap(JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    }

    func testHooksRunWithTheJobsOutcomeAndTheirResultIsRecorded() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let names = try Fixtures.makeFiles(in: servers, folder: "hooks", sizes: [100_000, 2000])
        let (notify, key) = servers.fault("_echo", ["fail": "503", "fail_count": "2"])
        let doneFile = fixture.root + "/done.env"
        let failedFile = fixture.root + "/failed.env"
        try fixture.drop("hooks.json", jobs: [
            ["id": "ok", "url": servers.http.absoluteString + "/" + names[0] + "?token=s3cr3t-token", "dest": "out/ok.bin",
             "on_done": recorder(doneFile), "notify": notify.absoluteString],
            ["id": "missing", "url": servers.http.absoluteString + "/hooks/none.bin", "dest": "out/none.bin",
             "on_failed": recorder(failedFile)],
            // No hook of its own: the run's --on-done, which outlives --hook-timeout.
            ["id": "slow-hook", "url": servers.http.absoluteString + "/" + names[1], "dest": "out/second.bin"],
        ])
        var environment = ProcessInfo.processInfo.environment
        environment["TRANSFERD_NOTIFY_SECRET"] = "hook-signing-secret"
        let result = try TransferdProcess.run(["run", "--queue", fixture.queue, "--on-done", "sleep 30", "--hook-timeout", "1", "--quiet",
                                               "--allow-job-hooks"],
                                              directory: fixture.root, environment: environment)
        XCTAssertEqual(result.status, 1, "one job failed: " + result.stderr)
        let store = try fixture.store()

        // on_done: the outcome in the environment, the URL without its secret.
        let done = try variables(doneFile)
        XCTAssertEqual(done["TRANSFERD_JOB_ID"], "ok")
        XCTAssertEqual(done["TRANSFERD_STATUS"], "done")
        XCTAssertEqual(done["TRANSFERD_BYTES"], "100000")
        XCTAssertEqual(done["TRANSFERD_DEST"], fixture.root + "/out/ok.bin")
        XCTAssertEqual(done["TRANSFERD_SHA256"], try servers.sha256(of: names[0]))
        XCTAssertFalse(done["TRANSFERD_URL", default: ""].contains("s3cr3t-token"), done["TRANSFERD_URL", default: ""])
        XCTAssertNil(done["TRANSFERD_NOTIFY_SECRET"], "the signing secret is not handed to hooks")
        let okHook = try hook(store, "ok")
        let command = try XCTUnwrap(okHook["command"] as? [String: Any])
        XCTAssertEqual(command["status"] as? String, "ok")
        XCTAssertEqual(command["exit"] as? Int, 0)
        XCTAssertEqual(command["output"] as? [String], ["hook for ok"])

        // on_failed: the reason.
        let failed = try variables(failedFile)
        XCTAssertEqual(failed["TRANSFERD_STATUS"], "failed")
        XCTAssertTrue(failed["TRANSFERD_ERROR", default: ""].contains("404"), "\(failed)")
        XCTAssertEqual(failed["TRANSFERD_BYTES"], "")

        // The run's hook, stopped at its timeout.
        let slow = try XCTUnwrap(try hook(store, "slow-hook")["command"] as? [String: Any])
        XCTAssertEqual(slow["status"] as? String, "timed out")
        XCTAssertLessThan(slow["seconds"] as? Double ?? 99, 10)

        // notify: two 503s, then accepted; signed with HMAC-SHA256 of the body.
        let sent = try XCTUnwrap(okHook["notify"] as? [String: Any])
        XCTAssertEqual(sent["status"] as? String, "sent")
        XCTAssertEqual(sent["attempts"] as? Int, 3)
        let stats = try servers.rawStats(key: key)
        XCTAssertEqual(stats["requests"] as? Int, 3)
        let bodies = try XCTUnwrap(stats["bodies"] as? [[String: Any]])
        XCTAssertEqual(bodies.count, 1)
        let body = try XCTUnwrap(bodies.first?["body"] as? String)
        let headers = try XCTUnwrap(bodies.first?["headers"] as? [String: String])
        let outcome = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any])
        XCTAssertEqual(outcome["id"] as? String, "ok")
        XCTAssertEqual(outcome["state"] as? String, "done")
        XCTAssertEqual(outcome["bytes"] as? Int, 100_000)
        XCTAssertFalse(body.contains("s3cr3t-token"))
        XCTAssertEqual(headers["content-type"], "application/json")
        XCTAssertEqual(headers["x-transferd-signature"], DueHookSignature.expected(body: body, secret: "hook-signing-secret"))

        XCTAssertFalse(result.stderr.contains("hook-signing-secret") || result.stdout.contains("hook-signing-secret"))
        let outbox = fixture.queue + "/.transferd/hooks"
        XCTAssertEqual((try? FileManager.default.contentsOfDirectory(atPath: outbox))?.filter { $0.hasSuffix(".json") } ?? [], [],
                       "nothing is owed once every hook ran")
    }

    /// A receiver's answer is not read past its status: one without end (which FoundationNetworking
    /// read on to the 30 s resource timeout, its `.cancel` disposition ignored) costs nothing.
    func testANotifyAnsweredWithoutEndIsSentAtOnce() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let names = try Fixtures.makeFiles(in: servers, folder: "hooks-endless", sizes: [2000])
        let (notify, key) = servers.fault("_echo", ["endless": "1", "rate": "1000000"])
        try fixture.drop("notify.json", jobs: [
            ["id": "ok", "url": servers.http.absoluteString + "/" + names[0], "dest": "out/ok.bin", "notify": notify.absoluteString],
        ])
        let run = try TransferdProcess(["run", "--queue", fixture.queue, "--quiet", "--allow-job-hooks"], directory: fixture.root)
        let deadline = Date().addingTimeInterval(10)
        while run.process.isRunning, Date() < deadline { Thread.sleep(forTimeInterval: 0.1) }
        XCTAssertFalse(run.process.isRunning, "the run still waits for the notify's answer to end after 10 s")
        if run.process.isRunning { kill(run.process.processIdentifier, SIGKILL) }
        let result = run.wait()
        XCTAssertEqual(result.status, 0, result.stderr)
        let sent = try XCTUnwrap(try hook(try fixture.store(), "ok")["notify"] as? [String: Any])
        XCTAssertEqual(sent["status"] as? String, "sent")
        XCTAssertEqual(sent["http"] as? Int, 200)
        XCTAssertEqual(try servers.stats(key: key).requests, 1)
    }

    /// Whether a notify is sent again is the retry classifier's answer, as for transfers: a 501
    /// never becomes a 200 (it was tried five times), a 503 may.
    func testANotifyAnsweredWithAPermanentRefusalIsNotSentAgain() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let names = try Fixtures.makeFiles(in: servers, folder: "hooks-501", sizes: [2000])
        let (notify, key) = servers.fault("_echo", ["fail": "501", "fail_count": "10"])
        try fixture.drop("notify.json", jobs: [
            ["id": "ok", "url": servers.http.absoluteString + "/" + names[0], "dest": "out/ok.bin", "notify": notify.absoluteString],
        ])
        let result = try TransferdProcess.run(["run", "--queue", fixture.queue, "--quiet", "--allow-job-hooks"], directory: fixture.root)
        XCTAssertEqual(result.status, 0, result.stderr)
        let sent = try XCTUnwrap(try hook(try fixture.store(), "ok")["notify"] as? [String: Any])
        XCTAssertEqual(sent["status"] as? String, "failed")
        XCTAssertEqual(sent["error"] as? String, "HTTP 501")
        XCTAssertEqual(sent["attempts"] as? Int, 1)
        XCTAssertEqual(try servers.stats(key: key).requests, 1)
    }

    func testAHookCutOffByKillRunsOnTheNextStart() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let names = try Fixtures.makeFiles(in: servers, folder: "hooks-kill", sizes: [50_000])
        let marker = fixture.root + "/hook-runs"
        // Each run of the hook adds a line; the first then hangs until the process is killed.
        try fixture.drop("kill.json", jobs: [
            ["id": "k", "url": servers.http.absoluteString + "/" + names[0], "dest": "out/k.bin",
             "on_done": ["/bin/sh", "-c", "echo run >> \"$0\"; [ \"$(wc -l < \"$0\")\" -gt 1 ] || sleep 60", marker]],
        ])
        let first = try fixture.start(["--quiet", "--allow-job-hooks"])
        defer { if first.process.isRunning { kill(first.process.processIdentifier, SIGKILL) } }
        let deadline = Date().addingTimeInterval(30)
        while (try? String(contentsOfFile: marker, encoding: .utf8)) == nil, Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        XCTAssertEqual(try String(contentsOfFile: marker, encoding: .utf8), "run\n", "the hook started")
        kill(first.process.processIdentifier, SIGKILL)
        _ = first.wait()
        XCTAssertEqual(try fixture.store().job("k")?.state, .done, "the job's end was recorded before its hook ran")
        XCTAssertNil(try fixture.store().job("k")?.hook)

        let second = try fixture.run(["--quiet", "--allow-job-hooks"])
        XCTAssertEqual(second.status, 0, second.stderr)
        XCTAssertEqual(try String(contentsOfFile: marker, encoding: .utf8), "run\nrun\n", "run again, at least once")
        let recorded = try XCTUnwrap(try fixture.store().job("k")?.hook)
        XCTAssertTrue(recorded.contains("\"status\":\"ok\""), recorded)
        XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: fixture.root + "/out/k.bin"), try servers.sha256(of: names[0]))

        let third = try fixture.run(["--quiet", "--allow-job-hooks"])
        XCTAssertEqual(third.status, 0)
        XCTAssertEqual(try String(contentsOfFile: marker, encoding: .utf8), "run\nrun\n", "and not again once it ran")
    }

    /// A hook that ignores SIGTERM and leaves children (which inherit that) is stopped with all of
    /// them at --hook-timeout: the run ends soon, and a child that would write a file after 5 s never does.
    func testAHookTimeoutEndsEverythingTheHookStarted() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let names = try Fixtures.makeFiles(in: servers, folder: "hooks-group", sizes: [1000])
        let marker = fixture.root + "/late-marker"
        let script = "trap '' TERM; (sleep 5; touch \"$0\") & sleep 60 & echo $! > \"$0.sleep\"; sleep 60"
        try fixture.drop("group.json", jobs: [["id": "g", "url": servers.http.absoluteString + "/" + names[0], "dest": "out/g.bin"]])
        let onDone = String(decoding: try JSONSerialization.data(withJSONObject: ["/bin/sh", "-c", script, marker]), as: UTF8.self)
        let started = Date()
        let result = try fixture.run(["--on-done", onDone, "--hook-timeout", "1", "--quiet"])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertLessThan(Date().timeIntervalSince(started), 15, "the run is not held by the hook's children")
        let command = try XCTUnwrap(try hook(fixture.store(), "g")["command"] as? [String: Any])
        XCTAssertEqual(command["status"] as? String, "timed out")

        let sleeper = try XCTUnwrap(Int32(try String(contentsOfFile: marker + ".sleep", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)))
        let settled = Date().addingTimeInterval(3)
        func running() -> Bool {
            // A zombie (dead, not yet reaped by whoever inherited it) does not count.
            guard let stat = try? String(contentsOfFile: "/proc/\(sleeper)/stat", encoding: .utf8),
                  let end = stat.lastIndex(of: ")") else { return false }
            return !stat[end...].hasPrefix(") Z")
        }
        while running(), Date() < settled { Thread.sleep(forTimeInterval: 0.05) }
        XCTAssertFalse(running(), "the hook's background sleep (pid \(sleeper)) was killed")
        Thread.sleep(until: started.addingTimeInterval(7))
        XCTAssertFalse(FileManager.default.fileExists(atPath: marker), "the hook's subshell was killed before writing")
    }

    func testBadHookFlagsAreRefusedWithTheFix() throws {
        let fixture = try QueueFixture()
        let empty = try fixture.run(["--on-done", "  "])
        XCTAssertEqual(empty.status, 2)
        XCTAssertTrue(empty.stderr.contains("--on-done"), empty.stderr)
        let notJSON = try fixture.run(["--on-failed", "[\"x\", 1]"])
        XCTAssertEqual(notJSON.status, 2)
        XCTAssertTrue(notJSON.stderr.contains("JSON list"), notJSON.stderr)
        let badURL = try fixture.run(["--notify", "ftp://user:hunter2@example.com/"])
        XCTAssertEqual(badURL.status, 2)
        XCTAssertFalse(badURL.stderr.contains("hunter2"), badURL.stderr)
        XCTAssertEqual(try fixture.run(["--hook-timeout", "0"]).status, 2)

        // Without --allow-job-hooks a job file's command is refused with the way to allow it; the
        // run's own --on-done needs no flag.
        try fixture.drop("cmd.json", jobs: [["url": "http://127.0.0.1:9/x", "dest": "x", "on_done": ["/bin/true"]]])
        let refused = try fixture.run(["--on-done", "/bin/true"])
        XCTAssertEqual(refused.status, 2)
        let reason = try String(contentsOfFile: fixture.queue + "/rejected/cmd.json.error", encoding: .utf8)
        XCTAssertTrue(reason.contains("on_done") && reason.contains("--allow-job-hooks"), reason)
    }
}

/// The signature a receiver computes to check `X-Transferd-Signature`, by an
/// independent implementation (Python's hmac), not the one under test.
enum DueHookSignature {
    static func expected(body: String, secret: String) -> String {
        let script = "import hmac,hashlib,sys; print('sha256=' + hmac.new(sys.argv[1].encode(), sys.stdin.buffer.read(), hashlib.sha256).hexdigest())"
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script, secret]
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        guard (try? process.run()) != nil else { return "python3 did not start" }
        input.fileHandleForWriting.write(Data(body.utf8))
        try? input.fileHandleForWriting.close()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
