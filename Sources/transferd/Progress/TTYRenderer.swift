@preconcurrency import Dispatch
import Foundation
import TransferCore

/// The live terminal view: running transfers and the total at the bottom,
/// finished jobs printed permanently above them, redrawn at most ten times a
/// second.
final class TTYRenderer: RunRenderer, Sendable {
    static let minimumFrameInterval: TimeInterval = 0.1

    private let context: RenderContext
    /// Everything that changes, and the screen, which is drawn only while this is held.
    private let state: Locked<State>

    private struct State {
        let screen: TerminalScreen
        var progress: RunProgress
        var pendingLines: [String] = []
        var lastFrame = Date.distantPast
        /// The layout for the terminal's current size, read again at each frame
        /// (the terminal may be resized), not at each event; made when first needed.
        var view: LiveView?
        /// The view has ended (`finish` or `abandon`): nothing more is drawn.
        var ended = false
    }

    /// SIGWINCH: the terminal was resized; the view is drawn again at once for its new width.
    private let resized: DispatchSourceSignal

    init(context: RenderContext) {
        self.context = context
        self.state = Locked(State(screen: TerminalScreen(write: context.out, columns: { context.size().columns }),
                                  progress: RunProgress(startedAt: context.now())))
        resized = DispatchSource.makeSignalSource(signal: SIGWINCH, queue: .global())
        resized.setEventHandler { [weak self] in self?.redraw() }
        resized.resume()
    }

    deinit { resized.cancel() }

    private func redraw() {
        state.withLock { state in
            guard !state.ended else { return }
            draw(&state, at: context.now())
        }
    }

    private func makeView() -> LiveView {
        let size = context.size()
        // Leave room for the total line, "+N more" and the lines above.
        let jobLines = max(1, min(12, size.rows / 2 - 1))
        return LiveView(width: max(20, size.columns), maxJobLines: jobLines, style: TerminalStyle(color: context.color))
    }

    /// The layout made so far, or a new one the first time.
    private func view(_ state: inout State) -> LiveView {
        if let view = state.view { return view }
        let made = makeView()
        state.view = made
        return made
    }

    func handle(_ event: QueueEvent) {
        state.withLock { state in
            let now = context.now()
            state.progress.apply(event, at: now)
            switch event {
            case .ingested(_, _, let rejected):
                for file in rejected {
                    let lines = view(&state).rejectedLines(file)
                    state.pendingLines.append(contentsOf: lines)
                }
            case .paused(let ids) where !ids.isEmpty:
                let line = view(&state).pausedLine(count: ids.count)
                state.pendingLines.append(line)
            case .held(let ids) where !ids.isEmpty:
                let line = view(&state).heldLine(ids)
                state.pendingLines.append(line)
            default:
                break
            }
            for end in state.progress.takeFinished() {
                let lines = view(&state).finishedLines(end)
                state.pendingLines += lines
            }
            if !state.ended && now.timeIntervalSince(state.lastFrame) >= Self.minimumFrameInterval {
                draw(&state, at: now)
            }
        }
    }

    func log(_ line: String) {
        state.withLock { state in
            // One screen line each, so every one is cleared to its end when drawn.
            state.pendingLines += line.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        }
    }

    func abandon() {
        resized.cancel()
        state.withLock { state in
            state.ended = true
            state.screen.end(permanent: state.pendingLines)
            state.pendingLines = []
        }
    }

    /// Called with `state` held.
    private func draw(_ state: inout State, at now: Date) {
        state.lastFrame = now
        let view = makeView()
        state.view = view
        state.screen.draw(permanent: state.pendingLines, live: view.lines(state.progress, now: now))
        state.pendingLines = []
    }

    func finish(_ summary: RunSummary) {
        resized.cancel()
        state.withLock { state in
            state.ended = true
            let now = context.now()
            let report = RunReport(progress: state.progress, summary: summary, now: now, style: TerminalStyle(color: context.color),
                                   failedFolder: context.failedFolder)
            let view = makeView()
            state.view = view
            for end in state.progress.takeFinished() { state.pendingLines += view.finishedLines(end) }
            state.screen.end(permanent: state.pendingLines + report.lines())
            state.pendingLines = []
        }
    }
}
