import Foundation
import TransferCore

/// The live area of the terminal view, as plain lines: one per running or
/// waiting transfer (capped, with "+N more"), then the queue's total line.
/// Pure: the same progress, clock, width and style give the same lines.
struct LiveView {
    var width: Int
    /// Job lines shown before "+N more".
    var maxJobLines: Int
    var style: TerminalStyle

    func lines(_ progress: RunProgress, now: Date) -> [String] {
        var lines: [String] = []
        let jobs = progress.running + progress.waiting
        let shown = jobs.count > maxJobLines ? max(0, maxJobLines - 1) : jobs.count
        for job in jobs.prefix(shown) {
            lines.append(jobLine(job, now: now))
        }
        if shown < jobs.count {
            let hiddenRunning = max(0, progress.running.count - shown)
            let hiddenWaiting = jobs.count - shown - hiddenRunning
            var parts: [String] = []
            if hiddenRunning > 0 { parts.append("\(hiddenRunning) running") }
            if hiddenWaiting > 0 { parts.append("\(hiddenWaiting) waiting to retry") }
            lines.append(style.dim(fit("  +\(jobs.count - shown) more: " + parts.joined(separator: ", "))))
        }
        lines += totalLines(progress, now: now)
        return lines
    }

    // MARK: Job lines

    func jobLine(_ job: RunProgress.Job, now: Date) -> String {
        if let retry = job.retry {
            let seconds = max(0, Int(retry.until.timeIntervalSince(now).rounded(.up)))
            let marker = "retry \(retry.attempt) in \(seconds)s"
            // "↻ " + name + "  " + marker + "  " + reason, within width - 1 columns.
            let available = width - 1 - marker.count - 6
            let shownName = Text.sanitized(job.name)
            let nameWidth = max(1, min(max(8, available / 3), shownName.count))
            let name = Text.middleTruncated(shownName, to: nameWidth)
            let reason = Text.truncated(Text.sanitized(retry.reason), to: max(0, available - nameWidth))
            return style.yellow("↻ ") + name + "  " + style.yellow(marker) + (reason.isEmpty ? "" : "  " + style.dim(reason))
        }
        let percent = job.fraction.map { String(format: "%3d%%", Int($0 * 100)) } ?? "  --"
        let size = job.bytesTotal.map { "\(Format.bytes(job.bytesDone))/\(Format.bytes($0))" } ?? Format.bytes(job.bytesDone)
        let speed = Format.rate(job.speed)
        let eta = job.eta.map { "ETA " + Format.duration($0) } ?? "ETA --:--"
        return row(marker: "  ", name: Text.sanitized(job.name), fraction: job.fraction, percent: percent,
                   columns: [Text.padLeft(size, 21), Text.padLeft(speed, 12), Text.padRight(eta, 11)])
    }

    /// `marker name [bar] percent columns...`. When the width is short the
    /// bar goes first, then the columns (sizes, then ETA, then speed); the
    /// name takes what is left.
    private func row(marker: String, name: String, fraction: Double?, percent: String, columns: [String]) -> String {
        var kept = Array(columns.indices)
        // Columns are sizes, speed, ETA: sizes go first, then the ETA, then the speed.
        var drops = [0, 2, 1]
        var barWidth = width >= 110 ? 24 : width >= 90 ? 16 : width >= 70 ? 10 : 0
        let minimumName = 10
        func fixedWidth() -> Int {
            marker.count + (barWidth > 0 ? barWidth + 3 : 0) + 1 + percent.count + kept.reduce(0) { $0 + columns[$1].count + 2 }
        }
        while width - 1 - fixedWidth() < minimumName {
            if barWidth > 0 {
                barWidth = 0
            } else if !drops.isEmpty {
                let dropped = drops.removeFirst()
                kept.removeAll { $0 == dropped }
            } else {
                break
            }
        }
        let nameWidth = max(1, width - 1 - fixedWidth())
        var line = marker + Text.padRight(Text.middleTruncated(name, to: nameWidth), nameWidth)
        if barWidth > 0 { line += " " + bar(fraction, width: barWidth) }
        line += " " + percent
        for index in kept { line += "  " + columns[index] }
        return Text.trimmedRight(line)
    }

    private func bar(_ fraction: Double?, width: Int) -> String {
        guard let fraction else { return "[" + style.dim(String(repeating: "·", count: width)) + "]" }
        let filled = Int((fraction * Double(width)).rounded(.down))
        return "[" + style.green(String(repeating: "=", count: filled))
            + style.dim(String(repeating: "-", count: width - filled)) + "]"
    }

    // MARK: The total line

    /// The queue's total: one line, or two when the job counts do not fit beside the bytes.
    func totalLines(_ progress: RunProgress, now: Date) -> [String] {
        var counts = ["\(progress.done) done"]
        if progress.failed > 0 { counts.append(style.red("\(progress.failed) failed")) }
        if progress.cancelled > 0 { counts.append("\(progress.cancelled) cancelled") }
        counts.append("\(progress.running.count) running")
        if !progress.completing.isEmpty { counts.append("\(progress.completing.count) finishing") }
        if !progress.waiting.isEmpty { counts.append(style.yellow("\(progress.waiting.count) waiting")) }
        if progress.pending > 0 { counts.append("\(progress.pending) queued") }
        let summary = counts.joined(separator: ", ")
        let countPieces = counts
        let total = progress.bytesTotal
        let size = total.map { "\(Format.bytes(progress.bytesDone))/\($0.exact ? "" : "~")\(Format.bytes($0.bytes))" }
            ?? Format.bytes(progress.bytesDone)
        let percent = progress.fraction.map { String(format: "%3d%%", Int($0 * 100)) } ?? "  --"
        let eta = progress.eta.map { "ETA " + Format.duration($0) } ?? "ETA --:--"
        let elapsed = Format.duration(progress.elapsed(at: now))
        let head = [style.bold("Total") + " " + percent.trimmingCharacters(in: .whitespaces), size,
                    Format.rate(progress.speed), eta]
        // The job counts share the line when they fit, and get their own otherwise.
        let together = head + [summary, "elapsed " + elapsed]
        if TerminalStyle.visibleCount(together.prefix(5).joined(separator: "  ")) <= width - 1 {
            return [fitted(together)]
        }
        // Narrow: the counts get lines of their own, as many as they need; none is dropped.
        return [fitted(head + ["elapsed " + elapsed])] + wrapped(countPieces, first: "Jobs: ")
    }

    /// Pieces joined by ", " on as many lines as the width needs (a piece wider than a line
    /// is cut, never dropped).
    private func wrapped(_ pieces: [String], first: String) -> [String] {
        var lines: [String] = []
        var line = first
        for (index, piece) in pieces.enumerated() {
            let text = piece + (index == pieces.count - 1 ? "" : ",")
            let lineEmpty = lines.isEmpty ? line == first : line.isEmpty
            if !lineEmpty && TerminalStyle.visibleCount(line) + 1 + TerminalStyle.visibleCount(text) > width - 1 {
                lines.append(line)
                line = ""
            }
            let joined = (line.isEmpty || line == first) ? line + text : line + " " + text
            line = TerminalStyle.visibleCount(joined) > width - 1 ? Text.truncated(joined, to: width - 1) : joined
        }
        lines.append(line)
        return lines
    }

    /// Pieces joined by two spaces, most important first, cut at the width.
    private func fitted(_ pieces: [String]) -> String {
        var line = ""
        var used = 0
        for piece in pieces {
            let visible = TerminalStyle.visibleCount(piece)
            let separator = line.isEmpty ? 0 : 2
            guard used + separator + visible <= width - 1 else { break }
            line += (line.isEmpty ? "" : "  ") + piece
            used += separator + visible
        }
        return line
    }

    // MARK: Permanent lines

    /// The lines printed above the live area when a job ends. The name is shortened to fit, the
    /// message never: an error's fix is what a person needs, so it goes on over lines of its
    /// own, indented.
    func finishedLines(_ end: JobFinished) -> [String] {
        let room = max(12, (width - 8) / 3)
        let name = Text.middleTruncated(Text.sanitized(end.name), to: room)
        switch end.state {
        case .done:
            if end.skipped { return [style.green("done   ") + fit(" \(name): already present and identical, skipped", reserve: 7)] }
            var text = " \(name)"
            if let bytes = end.bytes { text += "  \(Format.bytes(bytes))" }
            if let elapsed = end.elapsed, elapsed > 0 {
                text += String(format: " in %.1f s", elapsed)
                // The rate of what this run moved: bytes an earlier run left are no speed.
                if let moved = end.transferred { text += " (\(Format.rate(Double(moved) / elapsed)))" }
            }
            if end.resumedFrom > 0 { text += ", \(Format.bytes(end.resumedFrom)) already on disk" }
            return [style.green("done   ") + fit(text, reserve: 7)]
        case .failed:
            return wrappedMessage(style.red("FAILED "), " \(name): \(Text.sanitized(end.error ?? "unknown error"))", marker: 7)
        default:
            let marker = "\(end.state.rawValue) "
            return wrappedMessage(marker, " \(name)" + (end.error.map { ": " + Text.sanitized($0) } ?? ""), marker: marker.count)
        }
    }

    /// `marker` then `text` over as many lines as the width needs, broken at spaces where it
    /// can; the lines after the first are indented under the text.
    private func wrappedMessage(_ marker: String, _ text: String, marker markerWidth: Int) -> [String] {
        let room = max(10, width - 1 - markerWidth)
        var lines: [String] = []
        var rest = Substring(text)
        while !rest.isEmpty {
            var piece = rest.prefix(room)
            if piece.count < rest.count, let space = piece.lastIndex(of: " "), piece.distance(from: piece.startIndex, to: space) > room / 2 {
                piece = rest[rest.startIndex..<space]
            }
            lines.append((lines.isEmpty ? marker : String(repeating: " ", count: markerWidth)) + piece)
            rest = rest[piece.endIndex...].drop { $0 == " " }
        }
        return lines.isEmpty ? [marker] : lines
    }

    /// A line per problem the rejected file has.
    func rejectedLines(_ file: RejectedFile) -> [String] {
        file.problems.map { style.red("REJECTED") + fit(" \($0)", reserve: 8) }
    }

    func pausedLine(count: Int) -> String {
        fit("paused  \(count) running job\(count == 1 ? "" : "s"), progress saved")
    }

    func heldLine(_ ids: [String]) -> String {
        fit("held    \(ids.count == 1 ? ids[0] : "\(ids.count) jobs") paused by request, progress saved")
    }

    private func fit(_ text: String, reserve: Int = 0) -> String {
        Text.truncated(text, to: max(1, width - 1 - reserve))
    }
}

/// Colour and weight, or none (`NO_COLOR`, `--no-color`, tests).
struct TerminalStyle {
    var color: Bool

    func green(_ text: String) -> String { wrap(text, "32") }
    func red(_ text: String) -> String { wrap(text, "31") }
    func yellow(_ text: String) -> String { wrap(text, "33") }
    func dim(_ text: String) -> String { wrap(text, "2") }
    func bold(_ text: String) -> String { wrap(text, "1") }

    private func wrap(_ text: String, _ code: String) -> String {
        color && !text.isEmpty ? "\u{1B}[\(code)m\(text)\u{1B}[0m" : text
    }

    /// Characters on screen, not counting SGR escape sequences.
    static func visibleCount(_ text: String) -> Int {
        var count = 0
        var inEscape = false
        for scalar in text.unicodeScalars {
            if inEscape {
                if scalar == "m" { inEscape = false }
            } else if scalar == "\u{1B}" {
                inEscape = true
            } else {
                count += 1
            }
        }
        return count
    }
}

/// Fitting plain text into columns.
enum Text {
    /// Keeps the start and the end (a file name's extension matters): `long…name.iso`.
    static func middleTruncated(_ text: String, to width: Int) -> String {
        guard text.count > width else { return text }
        guard width > 1 else { return String(text.prefix(width)) }
        let tail = (width - 1) / 2
        let head = width - 1 - tail
        return String(text.prefix(head)) + "…" + String(text.suffix(tail))
    }

    static func truncated(_ text: String, to width: Int) -> String {
        guard text.count > width else { return text }
        guard width > 1 else { return String(text.prefix(width)) }
        return String(text.prefix(width - 1)) + "…"
    }

    /// Control characters and bidirectional controls (a file name or a server's message
    /// could hold an escape sequence or a U+202E) escaped visibly (`\u{1B}`), so nothing
    /// reaches the terminal as a command or reorders the line.
    static func sanitized(_ text: String) -> String {
        TerminalText.escaped(text)
    }

    static func trimmedRight(_ text: String) -> String {
        var text = text
        while text.last == " " { text.removeLast() }
        return text
    }

    static func padRight(_ text: String, _ width: Int) -> String {
        text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
    }

    static func padLeft(_ text: String, _ width: Int) -> String {
        text.count >= width ? text : String(repeating: " ", count: width - text.count) + text
    }
}
