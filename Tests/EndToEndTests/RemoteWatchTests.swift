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
        XCTAssertFalse(view.stdout.contains(try String(contentsOfFile: tokenFile).trimmingCharacters(in: .whitespacesAndNewlines)))
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
