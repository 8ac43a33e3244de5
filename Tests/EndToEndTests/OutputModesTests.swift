import Foundation
import TestSupport
import TransferCore
import XCTest

/// What `transferd run` prints when it is not on a terminal: plain lines with
/// no escape codes, `--json` lines, `--quiet`, and the debug log.
final class OutputModesTests: XCTestCase {
    /// One good job, one through a 503 (retried), one 404, one slow enough
    /// for progress events, and a rejected job file.
    private func mixedQueue(_ servers: TestServers) throws -> QueueFixture {
        let fixture = try QueueFixture()
        let key = UUID().uuidString
        try fixture.drop("mixed.json", jobs: [
            ["id": "good", "url": servers.http.appendingPathComponent("1m.bin").absoluteString, "dest": "out/good.bin"],
            ["id": "flaky", "url": "\(servers.fault.absoluteString)/1m.bin?fail=503&fail_count=1&key=flaky-\(key)",
             "dest": "out/flaky.bin"],
            ["id": "missing", "url": servers.http.appendingPathComponent("none.bin").absoluteString, "dest": "out/missing.bin"],
            ["id": "slow", "url": "\(servers.fault.absoluteString)/1m.bin?rate=1000000&key=slow-\(key)", "dest": "out/slow.bin"],
        ])
        try fixture.drop("broken.json", #"{"jobs": [{"url": "http://127.0.0.1/x", "colour": "red"}]}"#)
        return fixture
    }

    func testPipedOutputIsPlainWithoutEscapes() throws {
        let servers = try TestServers.current()
        let fixture = try mixedQueue(servers)
        let result = try fixture.run(["--progress-interval", "0.3"])
        XCTAssertEqual(result.status, 1, result.stdout + result.stderr)
        let all = result.stdout + result.stderr
        XCTAssertFalse(all.contains("\u{1B}"), "no escape codes when piped:\n\(all)")
        XCTAssertTrue(result.stdout.contains("start   good  "), result.stdout)
        XCTAssertTrue(result.stdout.contains("retry   flaky  attempt 1 failed"), result.stdout)
        XCTAssertTrue(result.stdout.contains("FAILED  missing  HTTP 404"), result.stdout)
        XCTAssertTrue(result.stdout.contains("REJECTED broken.json"), result.stdout)
        XCTAssertTrue(result.stdout.contains("progress: "), "a progress line every --progress-interval:\n\(result.stdout)")
        XCTAssertTrue(result.stdout.contains("Summary: 3 done, 1 failed, 1 job file rejected"), result.stdout)
        XCTAssertTrue(result.stdout.contains("fix the cause, then: transferd retry missing"), result.stdout)
    }

    func testQuietPrintsOnlyErrorsOnStderr() throws {
        let servers = try TestServers.current()
        let fixture = try mixedQueue(servers)
        let result = try fixture.run(["--quiet"])
        XCTAssertEqual(result.status, 1)
        XCTAssertEqual(result.stdout, "")
        XCTAssertTrue(result.stderr.contains("FAILED  missing"), result.stderr)
        XCTAssertTrue(result.stderr.contains("REJECTED broken.json"), result.stderr)
        XCTAssertFalse(result.stderr.contains("good"), "successes are not mentioned:\n\(result.stderr)")
    }

    func testJSONLinesParseAndCoverEveryEventKind() throws {
        let servers = try TestServers.current()
        let fixture = try mixedQueue(servers)
        let result = try fixture.run(["--json", "--progress-interval", "0.2"])
        XCTAssertEqual(result.status, 1, result.stderr)
        var events = try parse(result.stdout)
        XCTAssertEqual(Set(events.compactMap { $0["event"] as? String }),
                       ["run_started", "ingested", "started", "progress", "retrying", "completing", "finished", "summary"],
                       "one run covers every kind but the pause")
        let finished = events.filter { $0["event"] as? String == "finished" }
        XCTAssertEqual(Set(finished.compactMap { $0["id"] as? String }), ["good", "flaky", "missing", "slow"])
        let missing = try XCTUnwrap(finished.first { $0["id"] as? String == "missing" })
        XCTAssertEqual(missing["state"] as? String, "failed")
        XCTAssertTrue((missing["error"] as? String)?.contains("404") ?? false)
        let summary = try XCTUnwrap(events.last)
        XCTAssertEqual(summary["event"] as? String, "summary")
        XCTAssertEqual(summary["done"] as? Int, 3)
        XCTAssertEqual(summary["failed"] as? Int, 1)

        // The pause: a second queue interrupted with SIGINT.
        let slow = try QueueFixture("json-pause")
        try slow.drop("slow.json", jobs: [["id": "s", "url": servers.http.appendingPathComponent("slow/64m.bin").absoluteString,
                                           "dest": "out/s.bin"]])
        let run = try slow.start(["--json"])
        Thread.sleep(forTimeInterval: 1)
        kill(run.process.processIdentifier, SIGINT)
        let stopped = run.wait()
        XCTAssertEqual(stopped.status, 130, stopped.stderr)
        events += try parse(stopped.stdout)
        let paused = try XCTUnwrap(events.last { $0["event"] as? String == "paused" }, stopped.stdout)
        XCTAssertEqual(paused["ids"] as? [String], ["s"])
    }

    func testVerboseLogRedactsSecrets() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        try fixture.drop("secret.json", jobs: [[
            "id": "secret", "url": servers.http.appendingPathComponent("1m.bin").absoluteString + "?token=hunter2&part=1",
            "dest": "out/secret.bin", "headers": ["Authorization": "Bearer ${env:TRANSFERD_TEST_TOKEN}", "X-Trace": "visible"],
        ]])
        let log = fixture.root + "/debug.log"
        var environment = ProcessInfo.processInfo.environment
        environment["TRANSFERD_TEST_TOKEN"] = "hunter2"
        let result = try TransferdProcess.run(["run", "--queue", fixture.queue, "--log-file", log], directory: fixture.root,
                                              environment: environment)
        XCTAssertEqual(result.status, 0, result.stderr)
        let text = try String(contentsOfFile: log, encoding: .utf8)
        XCTAssertTrue(text.contains("> GET http://127.0.0.1"), text)
        XCTAssertTrue(text.contains("< 200 after"), text)
        XCTAssertTrue(text.contains("X-Trace: visible"), "ordinary headers are logged:\n\(text)")
        XCTAssertTrue(text.contains("Authorization: REDACTED") && text.contains("token=REDACTED"), text)
        XCTAssertFalse(text.contains("hunter2"), "no secret in the log:\n\(text)")

        let verbose = try TransferdProcess.run(["get", "--verbose", "-o", fixture.root + "/v.bin",
                                                servers.http.appendingPathComponent("1m.bin").absoluteString + "?sig=abc123"],
                                               directory: fixture.root)
        XCTAssertEqual(verbose.status, 0, verbose.stderr)
        XCTAssertTrue(verbose.stderr.contains("sig=REDACTED") && !verbose.stderr.contains("abc123"), verbose.stderr)
    }

    private func parse(_ output: String) throws -> [[String: Any]] {
        try output.split(separator: "\n").map { line in
            try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "not a JSON object: \(line)")
        }
    }
}
