import Foundation
import TransferCore

/// The live terminal view: running transfers and the total at the bottom,
/// finished jobs printed permanently above them, redrawn at most ten times a
/// second.
// @unchecked: every mutable field (the progress, pending lines, the lazily made view) is used under `lock`.
final class TTYRenderer: RunRenderer, @unchecked Sendable {
    static let minimumFrameInterval: TimeInterval = 0.1

    private let context: RenderContext
    private let screen: TerminalScreen
    private var progress: RunProgress
    private var pendingLines: [String] = []
    private var lastFrame = Date.distantPast
    private let lock = NSLock()

    /// SIGWINCH: the terminal was resized; the view is drawn again at once for its new width.
    private var resized: DispatchSourceSignal?

    init(context: RenderContext) {
        self.context = context
        self.screen = TerminalScreen(write: context.out, columns: { context.size().columns })
        self.progress = RunProgress(startedAt: context.now())
        let source = DispatchSource.makeSignalSource(signal: SIGWINCH, queue: .global())
        source.setEventHandler { [weak self] in self?.redraw() }
        source.resume()
        resized = source
    }

    deinit { resized?.cancel() }

    private func redraw() {
        lock.lock()
        defer { lock.unlock() }
        guard !ended else { return }
        drawLocked(at: context.now())
    }

    /// The view has ended (`finish` or `abandon`): nothing more is drawn.
    private var ended = false

    /// The layout for the terminal's current size, read again at each frame
    /// (the terminal may be resized), not at each event.
    private lazy var view = makeView()

    private func makeView() -> LiveView {
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
        switch event {
        case .ingested(_, _, let rejected):
            for file in rejected { pendingLines.append(contentsOf: view.rejectedLines(file)) }
        case .paused(let ids) where !ids.isEmpty:
            pendingLines.append(view.pausedLine(count: ids.count))
        case .held(let ids) where !ids.isEmpty:
            pendingLines.append(view.heldLine(ids))
        default:
            break
        }
        for end in progress.takeFinished() { pendingLines += view.finishedLines(end) }
        if !ended && now.timeIntervalSince(lastFrame) >= Self.minimumFrameInterval {
            drawLocked(at: now)
        }
    }

    func log(_ line: String) {
        lock.lock()
        // One screen line each, so every one is cleared to its end when drawn.
        pendingLines += line.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        lock.unlock()
    }

    func abandon() {
        lock.lock()
        defer { lock.unlock() }
        ended = true
        resized?.cancel()
        screen.end(permanent: pendingLines)
        pendingLines = []
    }

    private func drawLocked(at now: Date) {
        lastFrame = now
        view = makeView()
        screen.draw(permanent: pendingLines, live: view.lines(progress, now: now))
        pendingLines = []
    }

    func finish(_ summary: RunSummary) {
        lock.lock()
        defer { lock.unlock() }
        ended = true
        resized?.cancel()
        let now = context.now()
        let report = RunReport(progress: progress, summary: summary, now: now, style: TerminalStyle(color: context.color),
                               failedFolder: context.failedFolder)
        view = makeView()
        for end in progress.takeFinished() { pendingLines += view.finishedLines(end) }
        screen.end(permanent: pendingLines + report.lines())
        pendingLines = []
    }
}
