import Foundation
import TransferCore

/// Output for logs (not a terminal, `--progress=plain`): one line per start,
/// retry, finish and failure, a progress line every `interval` seconds, and
/// never an escape code.
final class PlainRenderer: RunRenderer, Sendable {
    private let context: RenderContext
    private let interval: TimeInterval
    /// Lines are written while it is held, in the order of the events.
    private let state: Locked<(progress: RunProgress, lastSummary: Date)>

    init(context: RenderContext, interval: TimeInterval) {
        self.context = context
        self.interval = interval
        let now = context.now()
        self.state = Locked((RunProgress(startedAt: now), now))
    }

    func handle(_ event: QueueEvent) {
        state.withLock { state in handle(event, &state.progress, &state.lastSummary) }
    }

    /// Called with `state` held.
    private func handle(_ event: QueueEvent, _ progress: inout RunProgress, _ lastSummary: inout Date) {
        let now = context.now()
        progress.apply(event, at: now)
        var lines: [String] = []
        switch event {
        case .runStarted, .finished:
            break
        case .ingested(let files, let jobs, let rejected):
            lines.append("ingested \(files) file\(files == 1 ? "" : "s"): \(jobs) new job\(jobs == 1 ? "" : "s")")
            for problem in rejected.flatMap(\.problems) { lines.append("REJECTED \(problem)") }
        case .started(let start):
            var line = "start   \(start.id)  \(Text.sanitized(start.url))"
            if start.bytesDone > 0 { line += "  (resuming at \(Format.bytes(start.bytesDone)))" }
            lines.append(line)
        case .progress:
            if now.timeIntervalSince(lastSummary) >= interval {
                lastSummary = now
                lines.append(Self.progressLine(progress, now: now))
            }
        case .retrying(let retry):
            lines.append("retry   \(retry.id)  attempt \(retry.attempt) failed, next in \(String(format: "%.1f", retry.delay)) s: \(Text.sanitized(retry.reason))")
        case .paused(let ids):
            if !ids.isEmpty { lines.append("paused  \(ids.count) running job\(ids.count == 1 ? "" : "s"), progress saved") }
        case .held(let ids):
            for id in ids { lines.append("held    \(id)  paused by request, progress saved") }
        case .completing(let id, let bytes):
            // Its slot is free: the next start is no sign of more at once than --jobs.
            lines.append("fetched \(id)  \(Format.bytes(bytes)); being made durable, then done")
        }
        for end in progress.takeFinished() { lines.append(Self.finishedLine(end)) }
        if !lines.isEmpty { context.out(lines.joined(separator: "\n") + "\n") }
    }

    static func finishedLine(_ end: JobFinished) -> String {
        switch end.state {
        case .done:
            if end.skipped { return "done    \(end.id)  already present and identical, skipped" }
            var line = "done    \(end.id)"
            if let bytes = end.bytes { line += "  \(Format.bytes(bytes))" }
            if let elapsed = end.elapsed { line += " in \(Format.seconds(elapsed))" }
            if end.resumedFrom > 0 { line += " (\(Format.bytes(end.resumedFrom)) were already on disk)" }
            if let sha = end.sha256 { line += "  sha256 \(sha.prefix(16))…" }
            // Where the bytes came from, and the mirrors dropped with their reasons.
            for mirror in end.mirrors {
                line += "\n        mirror \(Text.sanitized(mirror.url)): \(Format.bytes(mirror.kept)) of the file"
                if let reason = mirror.dropped { line += ", dropped: \(Text.sanitized(reason))" }
            }
            return line
        case .failed:
            return "FAILED  \(end.id)  \(Text.sanitized(end.error ?? "unknown error"))"
        default:
            return "\(end.state.rawValue)  \(end.id)"
        }
    }

    /// `progress: 12/40 done, 1 failed, 8 running, 2 waiting; 1.2 GiB of ~2.7 GiB (45%), 105.0 MiB/s, ETA 0:14`
    static func progressLine(_ progress: RunProgress, now: Date) -> String {
        let known = progress.done + progress.failed + progress.cancelled + progress.active + progress.pending
        var counts = ["\(progress.done)/\(known) done"]
        if progress.failed > 0 { counts.append("\(progress.failed) failed") }
        counts.append("\(progress.running.count) running")
        if !progress.completing.isEmpty { counts.append("\(progress.completing.count) being made durable") }
        if !progress.waiting.isEmpty { counts.append("\(progress.waiting.count) waiting") }
        var bytes = Format.bytes(progress.bytesDone)
        if let total = progress.bytesTotal {
            bytes += " of \(total.exact ? "" : "~")\(Format.bytes(total.bytes))"
            if let fraction = progress.fraction { bytes += " (\(Int(fraction * 100))%)" }
        }
        let eta = progress.eta.map { ", ETA " + Format.duration($0) } ?? ""
        return "progress: " + counts.joined(separator: ", ") + "; " + bytes + ", " + Format.rate(progress.speed) + eta
    }

    func log(_ line: String) {
        state.withLock { _ in context.err(line + "\n") }
    }

    func finish(_ summary: RunSummary) {
        state.withLock { state in
            let report = RunReport(progress: state.progress, summary: summary, now: context.now(), style: TerminalStyle(color: false),
                                   failedFolder: context.failedFolder)
            context.out(report.lines().joined(separator: "\n") + "\n")
        }
    }
}

/// `--quiet`: failures and rejected files only, on stderr; the summary only when something failed.
final class QuietRenderer: RunRenderer, Sendable {
    private let context: RenderContext
    /// Lines are written while it is held, in the order of the events.
    private let progress: Locked<RunProgress>

    init(context: RenderContext) {
        self.context = context
        self.progress = Locked(RunProgress(startedAt: context.now()))
    }

    func handle(_ event: QueueEvent) {
        switch event {
        case .progress, .started:
            return
        default:
            break
        }
        progress.withLock { progress in
            progress.apply(event, at: context.now())
            if case .ingested(_, _, let rejected) = event {
                for problem in rejected.flatMap(\.problems) { context.err("REJECTED \(problem)\n") }
            }
            for end in progress.takeFinished() where end.state == .failed {
                context.err(PlainRenderer.finishedLine(end) + "\n")
            }
        }
    }

    func log(_ line: String) { context.err(line + "\n") }

    func finish(_ summary: RunSummary) {
        progress.withLock { progress in
            let report = RunReport(progress: progress, summary: summary, now: context.now(), style: TerminalStyle(color: false),
                                   failedFolder: context.failedFolder)
            var lines = report.quietLines()
            if summary.interrupted { lines.insert("interrupted: running jobs are paused; run the same command to resume", at: 0) }
            if !lines.isEmpty { context.err(lines.joined(separator: "\n") + "\n") }
        }
    }
}

extension RejectedFile {
    /// The file's problems, one per line of its error, each safe to print.
    var problems: [String] {
        error.split(separator: "\n").map { Text.sanitized(String($0)) }
    }
}
