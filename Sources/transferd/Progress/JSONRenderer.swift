import Foundation
import TransferCore

/// `--json`: one object per line and per event, keys in a fixed order, for
/// `jq` and other programs. The schema is in docs/watching.md ("JSON events").
final class JSONRenderer: RunRenderer, Sendable {
    private let context: RenderContext
    /// Lines are written while it is held, so they reach stdout in the order they were encoded.
    private let encoder: Locked<QueueEventEncoder>

    init(context: RenderContext, interval: TimeInterval) {
        self.context = context
        self.encoder = Locked(QueueEventEncoder(startedAt: context.now(), interval: interval))
    }

    func handle(_ event: QueueEvent) {
        encoder.withLock { encoder in
            if let object = encoder.encode(event, at: context.now()) {
                context.out(object.serialized() + "\n")
            }
        }
    }

    /// Debug-log lines go to stderr so stdout stays JSON.
    func log(_ line: String) { context.err(line + "\n") }

    func finish(_ summary: RunSummary) {
        encoder.withLock { encoder in
            context.out(encoder.summary(summary, at: context.now()).serialized() + "\n")
        }
    }
}
