import Foundation
import TransferCore

/// Draws a live area at the bottom of a terminal and permanent lines above
/// it. Each frame is one write: the cursor goes back to the top of the live
/// area, every line is overwritten in place and cleared to its end, and what
/// is left below is erased, so nothing flickers. The cursor is hidden while
/// the live area is shown and always shown again at the end.
/// Not Sendable: one owner at a time uses it, the TTY renderer (under its lock) or status --watch (its one loop).
final class TerminalScreen {
    private let write: (String) -> Void
    private var liveLines = 0
    private var cursorHidden = false

    static let hideCursor = "\u{1B}[?25l"
    static let showCursor = "\u{1B}[?25h"

    init(write: @escaping (String) -> Void) {
        self.write = write
    }

    /// Prints `permanent` lines above the live area and redraws it with `live`.
    func draw(permanent: [String], live: [String]) {
        var frame = cursorHidden ? "" : Self.hideCursor
        cursorHidden = true
        frame += moveToTop()
        for line in permanent { frame += line + "\u{1B}[K\n" }
        for (index, line) in live.enumerated() {
            frame += line + "\u{1B}[K" + (index == live.count - 1 ? "" : "\n")
        }
        frame += "\u{1B}[J"
        liveLines = live.count
        write(frame)
    }

    /// Removes the live area, prints the last lines, and shows the cursor.
    func end(permanent: [String]) {
        var frame = moveToTop() + "\u{1B}[J"
        for line in permanent { frame += line + "\n" }
        frame += Self.showCursor
        liveLines = 0
        cursorHidden = false
        write(frame)
    }

    private func moveToTop() -> String {
        guard liveLines > 0 else { return "" }
        return "\r" + (liveLines > 1 ? "\u{1B}[\(liveLines - 1)A" : "")
    }
}

/// What must reach the terminal even when the process exits at once (a
/// second Ctrl-C): the cursor made visible again.
enum TerminalRestore {
    private static let active = Locked(false)

    static func activate() { active.withLock { $0 = true } }
    static func deactivate() { active.withLock { $0 = false } }

    /// Called from the signal path before `_exit`.
    static func restoreIfNeeded() {
        guard active.current else { return }
        Output.out("\u{1B}[J" + TerminalScreen.showCursor + "\n")
    }
}
