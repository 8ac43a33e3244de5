import Foundation
import XCTest

/// A real terminal for end-to-end tests: a tmux server of its own (its own
/// socket), one session of a fixed size running a plain shell, read back with
/// `capture-pane`.
package final class TmuxSession {
    let socket = "transferd-test-\(UUID().uuidString.prefix(8))"

    package init(width: Int, height: Int, directory: String) throws {
        try tmux(["-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", "\(width)", "-y", "\(height)", "-c", directory,
                  "env", "PS1=$ ", "TERM=tmux-256color", "bash", "--norc", "--noprofile"])
        try tmux(["set-option", "-t", "t", "status", "off"])
    }

    deinit { _ = try? tmux(["kill-server"]) }

    /// Opens a second pane below the first, with the same shell, in `directory`.
    package func split(directory: String) throws {
        try tmux(["split-window", "-v", "-t", "t", "-c", directory, "env", "PS1=$ ", "TERM=tmux-256color",
                  "bash", "--norc", "--noprofile"])
    }

    /// Types `text` and Enter into pane `pane`.
    package func type(_ text: String, pane: Int = 0) throws {
        try tmux(["send-keys", "-t", "t.\(pane)", "-l", text])
        try tmux(["send-keys", "-t", "t.\(pane)", "Enter"])
    }

    /// Resizes the terminal, as a user dragging its window does (the programs in it get SIGWINCH).
    package func resize(width: Int, height: Int) throws {
        try tmux(["resize-window", "-t", "t", "-x", "\(width)", "-y", "\(height)"])
    }

    package func ctrlC(pane: Int = 0) throws {
        try tmux(["send-keys", "-t", "t.\(pane)", "C-c"])
    }

    /// The pane's visible text (no colour codes), trailing blank lines removed.
    package func screen(pane: Int = 0) throws -> String {
        var text = try tmux(["capture-pane", "-p", "-t", "t.\(pane)"])
        while text.hasSuffix("\n") { text.removeLast() }
        return text
    }

    package func cursorVisible(pane: Int = 0) throws -> Bool {
        try tmux(["display-message", "-p", "-t", "t.\(pane)", "#{cursor_flag}"]).hasPrefix("1")
    }

    /// Polls the screen until `condition` holds (or fails the test after `timeout`).
    @discardableResult
    package func waitFor(pane: Int = 0, timeout: TimeInterval = 30, _ what: String,
                        _ condition: (String) -> Bool) throws -> String {
        let deadline = Date().addingTimeInterval(timeout)
        var last = ""
        while Date() < deadline {
            last = try screen(pane: pane)
            if condition(last) { return last }
            Thread.sleep(forTimeInterval: 0.1)
        }
        XCTFail("pane \(pane) never showed \(what) within \(timeout) s; last screen:\n\(last)")
        return last
    }

    /// Runs tmux with posix_spawn and waitpid. Not `Process`: Foundation
    /// learns of a child's exit from a descriptor the child inherits, and the
    /// server that `new-session` forks keeps it, so `waitUntilExit` would
    /// never return. Output goes to a file for the same reason.
    @discardableResult
    func tmux(_ arguments: [String]) throws -> String {
        let outputPath = NSTemporaryDirectory() + "/tmux-\(UUID().uuidString).out"
        defer { unlink(outputPath) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let argv = ["/usr/bin/tmux", "-L", socket] + arguments
        var cArguments: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        defer { for pointer in cArguments { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, argv[0], &actions, nil, &cArguments, environ)
        guard spawned == 0 else { throw TmuxError(message: "cannot start tmux: \(String(cString: strerror(spawned)))") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        guard status == 0 else {
            throw TmuxError(message: "tmux \(arguments.joined(separator: " ")): \(text)")
        }
        return text
    }
}

package struct TmuxError: Error, CustomStringConvertible {
    package let message: String
    package var description: String { message }
}
