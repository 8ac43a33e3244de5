import Foundation
import TestSupport
import TransferCore
import XCTest

/// `transferd status --watch --remote`: the live view of a run in another
/// process, from its control API, through a run killed and started again.
final class RemoteWatchTests: XCTestCase {
    func testTheRemoteViewFollowsARunThroughItsRestartAndEndsWithIt() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        // At 1 MB/s a connection (crawl/): several seconds each, two at a time, so the second
        // run outlasts the view's reconnection delay.
        let names = try Fixtures.makeFiles(in: servers, folder: "remote", sizes: [12_000_000, 12_000_000, 300_000])
        try fixture.drop("remote.json", jobs: names.enumerated().map { index, name in
            ["id": "r\(index)", "url": servers.http.absoluteString + "/crawl/" + name, "dest": "out/r\(index).bin"]
        })
        let port = try ControlAPIClient.freePort()
        let base = "http://127.0.0.1:\(port)"
        var first = try fixture.start(["--jobs", "2", "--listen", "127.0.0.1:\(port)", "--quiet"])
        defer { if first.process.isRunning { kill(first.process.processIdentifier, SIGKILL) } }
        try ControlAPIClient(base: base).waitUntilServing()
        let tokenFile = fixture.queue + "/.transferd/api.token"

        let watch = try TransferdProcess(["status", "--watch", "--remote", base, "--api-token-file", tokenFile, "--interval", "0.2"],
                                         directory: fixture.root)
        defer { if watch.process.isRunning { watch.process.terminate() } }
        Thread.sleep(forTimeInterval: 1.5)
        // The run dies without a word (no summary): the view waits and rejoins.
        kill(first.process.processIdentifier, SIGKILL)
        _ = first.wait()
        Thread.sleep(forTimeInterval: 1)
        first = try fixture.start(["--jobs", "2", "--listen", "127.0.0.1:\(port)", "--quiet"])
        let second = first.wait()
        XCTAssertEqual(second.status, 0, second.stderr)

        let deadline = Date().addingTimeInterval(20)
        while watch.process.isRunning, Date() < deadline { Thread.sleep(forTimeInterval: 0.1) }
        XCTAssertFalse(watch.process.isRunning, "the view ends with the run")
        // Stopped if it did not (else reading its output to the end would wait for ever).
        if watch.process.isRunning { watch.process.terminate() }
        let view = watch.wait()
        XCTAssertEqual(view.status, 0, view.stderr)
        let lines = view.stdout.split(separator: "\n").map(String.init)
        XCTAssertTrue(lines.contains { $0.contains(": live") && $0.contains("running") }, view.stdout)
        XCTAssertTrue(lines.contains { $0.contains("reconnecting") }, "the dropped stream is shown: \(view.stdout)")
        let afterDrop = lines.drop { !$0.contains("reconnecting") }
        XCTAssertTrue(afterDrop.contains { $0.contains(": live") }, "and rejoined: \(view.stdout)")
        XCTAssertEqual(lines.last, "run ended: 3 done, 0 failed, 0 cancelled", view.stdout)
        XCTAssertFalse(view.stdout.contains(try String(contentsOfFile: tokenFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)))
    }

    /// `status --watch --remote` pointed at the fault server, whose presets answer the control
    /// API's paths; the view must end by itself within 20 s (else it is stopped and the test fails).
    private func watchFaultServer(_ servers: TestServers) throws -> TransferdProcess.Result {
        let fixture = try QueueFixture()
        var environment = ProcessInfo.processInfo.environment
        environment["TRANSFERD_API_TOKEN"] = "0123456789abcdef0123"
        let watch = try TransferdProcess(["status", "--watch", "--remote", servers.fault.absoluteString, "--interval", "0.2"],
                                         directory: fixture.root, environment: environment)
        let deadline = Date().addingTimeInterval(20)
        while watch.process.isRunning, Date() < deadline { Thread.sleep(forTimeInterval: 0.1) }
        XCTAssertFalse(watch.process.isRunning, "the view still reads after 20 s")
        if watch.process.isRunning { kill(watch.process.processIdentifier, SIGKILL) }
        let result = watch.wait()
        XCTAssertFalse(result.stderr.contains("0123456789abcdef0123"), result.stderr)
        return result
    }

    func testAnAnswerWithoutEndFailsAtTheCapWithTheAddressToCheck() throws {
        let servers = try TestServers.current()
        let key = UUID().uuidString
        defer { servers.reset(key: key) }
        // Paced at 2 MB/s: what was read without end before the cap grows slowly in a failing run.
        try servers.preset("/v1/summary", ["endless": "1", "rate": "2000000"], key: key)
        let result = try watchFaultServer(servers)
        XCTAssertEqual(result.status, 1, result.stderr)
        let base = servers.fault.absoluteString
        XCTAssertTrue(result.stderr.contains("the answer from \(base)/v1/summary is longer than 4 MiB (4194304 bytes),"
                                             + " the most transferd reads of it; check that \(base) is the address"
                                             + " `transferd run --listen` printed on that machine"), result.stderr)
        XCTAssertEqual(try servers.stats(key: key).requests, 1)
    }

    func testAnEventStreamLineWithoutEndFailsAtTheCap() throws {
        let servers = try TestServers.current()
        let key = UUID().uuidString
        defer { servers.reset(key: key) }
        // A snapshot of an idle run, then a stream whose one line never ends (paced as above).
        try servers.preset("/v1/summary", ["status": "200", "message": #"{"jobs": {"running": 0}}"#], key: key)
        try servers.preset("/v1/jobs", ["status": "200", "message": #"{"jobs": []}"#], key: key)
        try servers.preset("/v1/events", ["endless_line": "1", "rate": "4000000"], key: key)
        let result = try watchFaultServer(servers)
        XCTAssertEqual(result.status, 1, result.stderr)
        let events = servers.fault.absoluteString + "/v1/events"
        XCTAssertTrue(result.stderr.contains("a line of the event stream from \(events) is longer than 1 MiB (1048576 bytes),"
                                             + " the most transferd reads of it; check that \(events) is the event stream"
                                             + " of `transferd run --listen`"), result.stderr)
        // One connection: the stream is not joined again to read as much again.
        XCTAssertEqual(try servers.stats(key: key).requests, 1 + 2 + 1, "summary, two pages of jobs, the stream")
    }

    func testMistakesAreRefusedWithTheFix() throws {
        let fixture = try QueueFixture()
        let noToken = try TransferdProcess.run(["status", "--watch", "--remote", "http://127.0.0.1:9"], directory: fixture.root,
                                               environment: ProcessInfo.processInfo.environment.filter { $0.key != "TRANSFERD_API_TOKEN" })
        XCTAssertEqual(noToken.status, 2)
        XCTAssertTrue(noToken.stderr.contains("--api-token-file"), noToken.stderr)
        let notURL = try TransferdProcess.run(["status", "--watch", "--remote", "127.0.0.1:9"], directory: fixture.root)
        XCTAssertEqual(notURL.status, 2)
        var environment = ProcessInfo.processInfo.environment
        environment["TRANSFERD_API_TOKEN"] = "0123456789abcdef0123"
        let unreachable = try TransferdProcess.run(["status", "--watch", "--remote", "http://127.0.0.1:9"], directory: fixture.root,
                                                   environment: environment)
        XCTAssertEqual(unreachable.status, 1)
        XCTAssertTrue(unreachable.stderr.contains("could not reach http://127.0.0.1:9"), unreachable.stderr)
        XCTAssertFalse(unreachable.stderr.contains("0123456789abcdef0123"))
    }
}
