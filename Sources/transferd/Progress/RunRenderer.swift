import Foundation
import TransferCore

/// Turns a run's events into output. Events arrive from one task, in order;
/// `log` may be called from transport threads (the debug log).
protocol RunRenderer: AnyObject, Sendable {
    func handle(_ event: QueueEvent)
    /// A debug-log line to show without disturbing the rendering.
    func log(_ line: String)
    /// The end of the run: the summary, and the terminal left clean.
    func finish(_ summary: RunSummary)
    /// The run stopped on an error: what is pending is printed and the terminal left clean, no summary.
    func abandon()
}

extension RunRenderer {
    func abandon() {}
}

/// How `run` shows its progress.
enum ProgressMode: String {
    /// A live view redrawn in place (stdout is a terminal).
    case tty
    /// One line per event and a summary line every `--progress-interval`.
    case plain
    /// One JSON object per event.
    case json
    /// Errors only, on stderr.
    case quiet
}

/// Where rendered text goes and what time it is: the real terminal, or a test's fixed ones.
struct RenderContext: Sendable {
    var out: @Sendable (String) -> Void = { Output.out($0) }
    var err: @Sendable (String) -> Void = { Output.err($0) }
    var now: @Sendable () -> Date = { Date() }
    /// Columns and rows of the terminal, read again for every frame (it may be resized).
    var size: @Sendable () -> (columns: Int, rows: Int) = { Output.terminalSize() }
    var color = false
    /// How `failed/` is named in the summary.
    var failedFolder = "queue.d/failed"
}
