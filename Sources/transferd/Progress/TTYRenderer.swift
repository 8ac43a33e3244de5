import Foundation
import TransferCore

/// The live terminal view: running transfers and the total at the bottom,
/// finished jobs printed permanently above them, redrawn at most ten times a
/// second.
final class TTYRenderer: RunRenderer, @unchecked Sendable {
    static let minimumFrameInterval: TimeInterval = 0.1

    private let context: RenderContext
    private let screen: TerminalScreen
    private var progress: RunProgress
    private var pendingLines: [String] = []
    private var lastFrame = Date.distantPast
    private let lock = NSLock()

    init(context: RenderContext) {
        self.context = context
        self.screen = TerminalScreen(write: context.out)
        self.progress = RunProgress(startedAt: context.now())
    }

    private func view() -> LiveView {
        let size = context.size()
        // Leave room for the total line, "+N more" and the lines above.
        let jobLines = max(1, min(12, size.rows / 2 - 1))
        return LiveView(width: max(20, size.columns), maxJobLines: jobLines, style: TerminalStyle(color: context.color))
    }

    func handle(_ event: QueueEvent) {
        lock.lock()
        defer { lock.unlock() }
        let now = context.now()
        progress.apply(event, at: now)
        let view = view()
        switch event {
        case .ingested(_, _, let rejected):
            for file in rejected { pendingLines.append(view.rejectedLine(file)) }
        case .paused(let ids) where !ids.isEmpty:
            pendingLines.append(view.pausedLine(count: ids.count))
        default:
            break
        }
        for end in progress.takeFinished() { pendingLines.append(view.finishedLine(end)) }
        if now.timeIntervalSince(lastFrame) >= Self.minimumFrameInterval {
            drawLocked(view, at: now)
        }
    }

    func log(_ line: String) {
        lock.lock()
        pendingLines.append(line)
        lock.unlock()
    }

    private func drawLocked(_ view: LiveView, at now: Date) {
        lastFrame = now
        screen.draw(permanent: pendingLines, live: view.lines(progress, now: now))
        pendingLines = []
    }

    func finish(_ summary: RunSummary) {
        lock.lock()
        defer { lock.unlock() }
        let now = context.now()
        let report = RunReport(progress: progress, summary: summary, now: now, style: TerminalStyle(color: context.color),
                               failedFolder: context.failedFolder)
        for end in progress.takeFinished() { pendingLines.append(view().finishedLine(end)) }
        screen.end(permanent: pendingLines + report.lines())
        pendingLines = []
    }
}
