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
    /// The terminal's width now, read at each frame.
    private let columns: () -> Int
    /// The visible width of each live line last drawn, and the width of the terminal then.
    private var liveWidths: [Int] = []
    private var drawnColumns = 0
    private var cursorHidden = false

    static let hideCursor = "\u{1B}[?25l"
    static let showCursor = "\u{1B}[?25h"

    init(write: @escaping (String) -> Void, columns: @escaping () -> Int = { Output.terminalSize().columns }) {
        self.write = write
        self.columns = columns
    }

    /// Prints `permanent` lines above the live area and redraws it with `live`.
    func draw(permanent: [String], live: [String]) {
        var frame = cursorHidden ? "" : Self.hideCursor
        cursorHidden = true
        let width = columns()
        frame += moveToTop(columns: width)
        for line in permanent { frame += line + "\u{1B}[K\n" }
        for (index, line) in live.enumerated() {
            frame += line + "\u{1B}[K" + (index == live.count - 1 ? "" : "\n")
        }
        frame += "\u{1B}[J"
        liveWidths = live.map(TerminalStyle.visibleCount)
        drawnColumns = width
        write(frame)
    }

    /// Removes the live area, prints the last lines, and shows the cursor.
    func end(permanent: [String]) {
        var frame = moveToTop(columns: columns()) + "\u{1B}[J"
        for line in permanent { frame += line + "\n" }
        frame += Self.showCursor
        liveWidths = []
        cursorHidden = false
        write(frame)
    }

    /// Back to the first column of the live area's first row. Its lines were drawn narrower
    /// than the terminal, one row each; a terminal made narrower since rewraps them (tmux,
    /// VTE, kitty, iTerm2 and Windows Terminal do), so each then takes as many rows as its width
    /// needs at the new width, and the cursor sits on the last one's last row. (A terminal that
    /// cuts lines instead, as xterm does, loses as many rows above the area as this counts too
    /// many: the permanent lines there are drawn again by nobody, but no stale piece stays.)
    private func moveToTop(columns: Int) -> String {
        guard !liveWidths.isEmpty else { return "" }
        let rows = Self.rows(of: liveWidths, drawnAt: drawnColumns, now: columns)
        return "\r" + (rows > 1 ? "\u{1B}[\(rows - 1)A" : "")
    }

    /// The rows lines of `widths` take on a terminal of `now` columns, drawn at `drawnAt`.
    static func rows(of widths: [Int], drawnAt: Int, now: Int) -> Int {
        guard now > 0, now < drawnAt else { return widths.count }
        return widths.reduce(0) { $0 + max(1, ($1 + now - 1) / now) }
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
