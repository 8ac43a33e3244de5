import Foundation
import TransferCore

/// `--json`: one object per line and per event, keys in a fixed order, for
/// `jq` and other programs. The schema is in docs/watching.md ("JSON events").
// @unchecked: `encoder` changes only under `lock`.
final class JSONRenderer: RunRenderer, @unchecked Sendable {
    private let context: RenderContext
    private var encoder: QueueEventEncoder
    private let lock = NSLock()

    init(context: RenderContext, interval: TimeInterval) {
        self.context = context
        self.encoder = QueueEventEncoder(startedAt: context.now(), interval: interval)
    }

    func handle(_ event: QueueEvent) {
        lock.lock()
        defer { lock.unlock() }
        if let object = encoder.encode(event, at: context.now()) {
            context.out(object.serialized() + "\n")
        }
    }

    /// Debug-log lines go to stderr so stdout stays JSON.
    func log(_ line: String) { context.err(line + "\n") }

    func finish(_ summary: RunSummary) {
        lock.lock()
        defer { lock.unlock() }
        context.out(encoder.summary(summary, at: context.now()).serialized() + "\n")
    }
}
