import Foundation
@testable import TransferCore
import XCTest

/// A hook command's process: its status and output, its timeout reaching
/// every process of its group (one that ignores SIGTERM too), leftovers
/// stopped when it exits, and only descriptors 0, 1 and 2 inherited.
final class HookProcessTests: XCTestCase {
    private var folder = ""

    override func setUpWithError() throws {
        folder = (NSTemporaryDirectory() as NSString).appendingPathComponent("hook-process-\(UUID().uuidString)")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: folder)
    }

    private func run(_ script: String, _ arguments: [String] = [], timeout: TimeInterval = 10,
                     grace: TimeInterval = 1) -> HookProcess.Outcome {
        HookProcess.run(["/bin/sh", "-c", script] + arguments, environment: ["PATH": "/usr/bin:/bin"], directory: folder,
                        timeout: timeout, grace: grace, outputLines: 20)
    }

    /// Whether process `pid` is running (a zombie, dead and not yet reaped by its new parent, is not).
    private func running(_ pid: Int32) -> Bool {
        guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/stat"),
              let end = data.lastIndex(of: UInt8(ascii: ")")) else { return false }
        let state = data[(end + 2)...].first
        return state != UInt8(ascii: "Z") && state != UInt8(ascii: "X")
    }

    private func pid(in file: String) throws -> Int32 {
        try XCTUnwrap(Int32(try String(contentsOfFile: file, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)))
    }

    func testACommandThatExitsHasItsStatusAndOutput() {
        let failed = run("echo out; echo err >&2; pwd; exit 3")
        XCTAssertEqual(failed.ending, .exited(3))
        XCTAssertEqual(failed.output, ["out", "err", folder], "stdout and stderr in order, run in the given folder")
        XCTAssertEqual(run("echo \"$PATH|$HOME\"").output, ["/usr/bin:/bin|"], "the given environment only")
        XCTAssertEqual(run("kill -USR1 $$").ending, .signalled(SIGUSR1))
        let missing = HookProcess.run(["no-such-program-here"], environment: ["PATH": "/usr/bin:/bin"], directory: folder,
                                      timeout: 10, outputLines: 20)
        XCTAssertEqual(missing.ending, .exited(127))
    }

    func testTheTimeoutEndsTheWholeGroupEvenWhatIgnoresTERM() throws {
        let marker = folder + "/marker"
        // TERM ignored by the command and (inherited) by both children; the subshell would write
        // the marker after 4 s, and the sleep would run for a minute.
        let script = "echo $$ > \"$0.group\"; trap '' TERM; (sleep 4; touch \"$0\") & sleep 60 & echo $! > \"$0.sleep\"; echo started; wait"
        let started = Date()
        let outcome = run(script, [marker], timeout: 1, grace: 1)
        let elapsed = Date().timeIntervalSince(started)
        XCTAssertEqual(outcome.ending, .timedOut)
        XCTAssertEqual(outcome.output, ["started"])
        XCTAssertLessThan(elapsed, 15, "the run ends within a bounded time")
        let group = try pid(in: marker + ".group")
        let sleeper = try pid(in: marker + ".sleep")
        let settled = Date().addingTimeInterval(2)
        while HookProcess.groupAlive(group, leaderGone: true) || running(sleeper), Date() < settled {
            Thread.sleep(forTimeInterval: 0.02)
        }
        XCTAssertFalse(HookProcess.groupAlive(group, leaderGone: true), "nothing of the command's group is left")
        XCTAssertFalse(running(sleeper), "the background sleep was killed")
        Thread.sleep(until: started.addingTimeInterval(5.5))
        XCTAssertFalse(FileManager.default.fileExists(atPath: marker), "the subshell never wrote its marker")
    }

    func testWhatACommandLeavesRunningIsStoppedWhenItExits() throws {
        let marker = folder + "/marker"
        let started = Date()
        let outcome = run("(sleep 3; touch \"$0\") & echo $! > \"$0.pid\"; echo done", [marker], timeout: 30)
        XCTAssertEqual(outcome.ending, .exited(0))
        XCTAssertEqual(outcome.output, ["done"])
        XCTAssertLessThan(Date().timeIntervalSince(started), 3, "not held until the leftover ends")
        let leftover = try pid(in: marker + ".pid")
        let settled = Date().addingTimeInterval(2)
        while running(leftover), Date() < settled { Thread.sleep(forTimeInterval: 0.02) }
        XCTAssertFalse(running(leftover))
        Thread.sleep(until: started.addingTimeInterval(4))
        XCTAssertFalse(FileManager.default.fileExists(atPath: marker))
    }

    func testOnlyDescriptorsZeroToTwoAreInherited() throws {
        // Opened without O_CLOEXEC, as a careless library might.
        let leaked = open(folder + "/leak", O_WRONLY | O_CREAT, 0o600)
        XCTAssertGreaterThanOrEqual(leaked, 3)
        defer { close(leaked) }
        let outcome = run("ls /proc/$$/fd")
        XCTAssertEqual(outcome.ending, .exited(0))
        XCTAssertEqual(outcome.output, ["0", "1", "2"])
    }
}
