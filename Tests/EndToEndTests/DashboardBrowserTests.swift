import Foundation
import TestSupport
import TransferCore
import XCTest

/// The dashboard in a real browser: headless Chromium, driven by
/// Tests/Browser/dashboard_check.py (selenium), against a real run. The page
/// must ask for the token, show rows and moving progress, pause and resume a
/// running job and the whole queue, cancel a running job and retry a failed one. The screenshot is kept in `.tmp/artifacts/`
/// (or TRANSFERD_TEST_ARTIFACTS).
final class DashboardBrowserTests: XCTestCase {
    /// The repository's root, from this file's place in it.
    private let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    func testTheDashboardShowsTheRunAndCancelsAndRetriesInABrowser() throws {
        for tool in ["/usr/bin/chromium", "/usr/bin/chromedriver"] where !FileManager.default.isExecutableFile(atPath: tool) {
            // Not a skip: scripts/setup installs both, so a missing one is a broken set-up.
            return XCTFail("\(tool) is missing: run scripts/setup (it installs Debian's chromium and chromium-driver)")
        }
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        // At 1 MB/s: the job to cancel runs about 30 s, the watched one about 12 s.
        let names = try Fixtures.makeFiles(in: servers, folder: "browser", sizes: [30_000_000, 12_000_000])
        let missing = "browser/missing-\(UUID().uuidString).bin"
        try fixture.drop("browser.json", jobs: [
            ["id": "to-cancel", "url": servers.http.absoluteString + "/crawl/" + names[0], "dest": "out/to-cancel.bin"],
            ["id": "watched", "url": servers.http.absoluteString + "/crawl/" + names[1], "dest": "out/watched.bin"],
            ["id": "to-retry", "url": servers.http.absoluteString + "/" + missing, "dest": "out/to-retry.bin"],
        ])
        let port = try ControlAPIClient.freePort()
        let run = try fixture.start(["--watch", "--listen", "127.0.0.1:\(port)", "--quiet"])
        defer { if run.process.isRunning { run.process.terminate() } }
        let tokenFile = fixture.queue + "/.transferd/api.token"
        var api = ControlAPIClient(base: "http://127.0.0.1:\(port)")
        try api.waitUntilServing()
        api.token = try String(contentsOfFile: tokenFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        try api.waitForState("to-retry", ["failed"])

        let artifacts = ProcessInfo.processInfo.environment["TRANSFERD_TEST_ARTIFACTS"] ?? repository.path + "/.tmp/artifacts"
        try FileManager.default.createDirectory(atPath: artifacts, withIntermediateDirectories: true)
        let screenshot = artifacts + "/dashboard.png"
        let phone = artifacts + "/dashboard-390px.png"
        let ended = artifacts + "/dashboard-ended.png"
        for path in [screenshot, phone, ended] { try? FileManager.default.removeItem(atPath: path) }
        // python3 from PATH: the one scripts/setup installed selenium into.
        let check = try ControlAPIClient.runTool("/usr/bin/env", [
            "python3", repository.path + "/Tests/Browser/dashboard_check.py", "--base", api.base, "--token-file", tokenFile,
            "--cancel", "to-cancel", "--watch", "watched", "--retry", "to-retry",
            "--retry-file", servers.path(missing), "--screenshot", screenshot, "--phone-screenshot", phone,
            "--ended-screenshot", ended, "--run-pid", String(run.process.processIdentifier),
            "--add-url", servers.http.absoluteString + "/crawl/" + names[1] + "?added=1",
        ])
        guard check.status == 0 else { return XCTFail("the browser check failed: \(check.stderr)") }
        let seen = (try? JSONSerialization.jsonObject(with: Data(check.stdout.utf8))) as? [String: Any] ?? [:]
        XCTAssertEqual((seen["progress"] as? [String])?.count, 2, "the watched bar moved: \(check.stdout)")
        XCTAssertEqual(seen["console_errors"] as? [String], [], "no script errors in the page: \(check.stdout)")
        XCTAssertEqual(seen["totals_held"] as? String, "1", "the held job counted: \(check.stdout)")
        XCTAssertNotEqual(seen["held_kept"] as? String, "0 B", "a held job shows the bytes it keeps: \(check.stdout)")

        XCTAssertEqual(seen["limit_now"] as? String, "now: uploads 64 MiB/s, downloads unlimited", check.stdout)
        XCTAssertTrue((seen["ended"] as? String ?? "").contains("1 cancelled"), "the notice sums the run up: \(check.stdout)")

        // The page stopped the run (SIGINT) once its jobs were through: what it did is what the queue did.
        let result = run.wait()
        XCTAssertEqual(result.status, 130, result.stderr)
        let store = try fixture.store()
        XCTAssertEqual(try store.job("to-cancel")?.state, .cancelled)
        XCTAssertEqual(try store.job("to-retry")?.state, .done)
        XCTAssertEqual(try store.job("watched")?.state, .done)
        XCTAssertEqual(try store.settings().rateLimit, "64M:off")
        XCTAssertEqual(try store.counts().values.reduce(0, +), 4, "the URL added from the page is a job")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: fixture.root + "/out/to-retry.bin")), Data(repeating: 7, count: 1000))
        for path in [screenshot, phone, ended] {
            let png = try Data(contentsOf: URL(fileURLWithPath: path))
            XCTAssertEqual(Array(png.prefix(8)), [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A], "\(path) is a PNG")
            XCTAssertGreaterThan(png.count, 10_000, "\(path) shows a page, not a blank")
        }
        XCTAssertFalse(check.stdout.contains(api.token!) || check.stderr.contains(api.token!), "the token is never printed")
    }
}
