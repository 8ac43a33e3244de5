import Foundation
import TestSupport
import TransferCore
import XCTest

/// `transferd run` in a real terminal (tmux): the live view while transfers
/// run, the summary after, the terminal left clean after Ctrl-C, and
/// `status --watch` from a second pane.
final class TerminalViewTests: XCTestCase {
    /// Three 64 MiB downloads from nginx's rate-limited /slow/ (about 4 s each), two at a time.
    private func slowQueue() throws -> QueueFixture {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let jobs: [[String: Any]] = ["alpha", "beta", "gamma"].map { name in
            ["id": name, "url": servers.http.appendingPathComponent("slow/64m.bin").absoluteString, "dest": "out/\(name).bin"]
        }
        try fixture.drop("slow.json", jobs: jobs)
        return fixture
    }

    /// The typed command stays short whatever the checkout's path, so the
    /// prompt line never wraps: a link to the binary in the queue's folder.
    private func shortCommand(in fixture: QueueFixture) throws -> String {
        let link = (fixture.root as NSString).appendingPathComponent("transferd")
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: try TransferdProcess.binary())
        return "./transferd"
    }

    func testLiveViewWhileRunningAndSummaryAfter() throws {
        let fixture = try slowQueue()
        let binary = try shortCommand(in: fixture)
        let terminal = try TmuxSession(width: 100, height: 30, directory: fixture.root)
        try terminal.split(directory: fixture.root)
        try terminal.type("\(binary) run queue.d --jobs 2; echo exit=$?", pane: 0)

        let live = try terminal.waitFor(pane: 0, "two transfers in progress") { screen in
            screen.contains("alpha.bin") && screen.contains("beta.bin") && screen.contains("MiB/s") && screen.contains("Total ")
        }
        XCTAssertTrue(live.range(of: #"alpha\.bin .*\d+%"#, options: .regularExpression) != nil, "a percentage per job:\n\(live)")
        XCTAssertTrue(live.contains("1 queued"), "the third job waits for a slot:\n\(live)")
        XCTAssertFalse(try terminal.cursorVisible(pane: 0), "the cursor is hidden while the view is live")
        for line in live.split(separator: "\n") where !line.hasPrefix("$ ") {
            XCTAssertLessThan(line.count, 100, "no line wraps: \(line)")
        }

        try terminal.type("\(binary) status --watch queue.d", pane: 1)
        let watched = try terminal.waitFor(pane: 1, "the other process's progress") { screen in
            screen.contains("watching") && screen.range(of: #"(alpha|beta)\.bin .*\d+%"#, options: .regularExpression) != nil
        }
        XCTAssertTrue(watched.contains("running"), watched)
        XCTAssertTrue(watched.contains("run active (pid "), "the watch says a run is working the queue:\n\(watched)")

        let finished = try terminal.waitFor(pane: 0, timeout: 60, "the end of the run") { $0.range(of: #"exit=\d+"#, options: .regularExpression) != nil }
        XCTAssertTrue(finished.contains("exit=0"), finished)
        for name in ["alpha", "beta", "gamma"] {
            XCTAssertTrue(finished.contains("done    \(name).bin  64.0 MiB"), "a permanent line per finished job:\n\(finished)")
        }
        XCTAssertTrue(finished.contains("Summary: 3 done, 0 failed; 192.0 MiB transferred"), finished)
        XCTAssertFalse(finished.contains("Total "), "the live area is gone after the run:\n\(finished)")
        XCTAssertTrue(try terminal.cursorVisible(pane: 0))

        try terminal.ctrlC(pane: 1)
        try terminal.waitFor(pane: 1, "the watch to end") { $0.hasSuffix("$") }
        XCTAssertTrue(try terminal.cursorVisible(pane: 1), "status --watch restores the cursor on Ctrl-C")
    }

    /// Narrowed from 200 to 40 columns and widened again while the view is live: the terminal
    /// rewraps what was drawn, and the next frames must still leave one live area and no
    /// pieces of old ones.
    func testResizingTheTerminalLeavesNoStaleLines() throws {
        let fixture = try slowQueue()
        let binary = try shortCommand(in: fixture)
        let terminal = try TmuxSession(width: 200, height: 30, directory: fixture.root)
        try terminal.type("\(binary) run queue.d --jobs 3; echo exit=$?")
        try terminal.waitFor("the live view at 200 columns") { $0.contains("gamma.bin") && $0.contains("Total ") }
        for (width, height) in [(40, 30), (120, 30), (60, 20)] {
            try terminal.resize(width: width, height: height)
            Thread.sleep(forTimeInterval: 0.6)
            let screen = try terminal.screen()
            let lines = screen.split(separator: "\n", omittingEmptySubsequences: false)
            XCTAssertEqual(lines.filter { $0.contains("Total ") }.count, 1, "one live area at \(width) columns:\n\(screen)")
            for name in ["alpha", "beta", "gamma"] {
                XCTAssertLessThanOrEqual(lines.filter { $0.contains(name) }.count, 1,
                                         "no stale line of \(name) at \(width) columns:\n\(screen)")
            }
            // (What tmux rewraps above the cursor goes to its history: the command line too.)
        }
        try terminal.ctrlC()
        try terminal.waitFor("the prompt again") { $0.range(of: #"exit=\d+"#, options: .regularExpression) != nil }
    }

    func testCtrlCLeavesTheTerminalClean() throws {
        let fixture = try slowQueue()
        let binary = try shortCommand(in: fixture)
        let terminal = try TmuxSession(width: 80, height: 24, directory: fixture.root)
        try terminal.type("\(binary) run queue.d --jobs 3; echo exit=$?")
        try terminal.waitFor("the live view") { $0.contains("gamma.bin") && $0.contains("Total ") }
        try terminal.ctrlC()
        let after = try terminal.waitFor("the prompt again") {
            $0.range(of: #"exit=\d+"#, options: .regularExpression) != nil && $0.hasSuffix("$")
        }
        XCTAssertTrue(after.contains("exit=130"), after)
        XCTAssertTrue(after.contains("Interrupted: running jobs are paused"), after)
        XCTAssertFalse(after.contains("Total "), "no live line left behind:\n\(after)")
        XCTAssertTrue(try terminal.cursorVisible(), "the cursor is visible again")
        XCTAssertEqual(try fixture.store().counts()[.paused], 3)
    }
}
