// Linux's Dispatch does not mark its sources Sendable; a source is safe to cancel from any thread.
@preconcurrency import Dispatch
import Foundation
import TransferCore

/// SIGINT/SIGTERM: the first asks the work to stop cleanly (checkpoint, exit
/// resumable); a second exits at once (state on disk is still consistent,
/// because checkpoints are only written after their data).
final class SignalHandler: Sendable {
    private let sources: [DispatchSourceSignal]
    /// Signals seen so far, by both sources.
    private let count = Locked(0)

    init(onFirst: @escaping @Sendable () -> Void) {
        var sources: [DispatchSourceSignal] = []
        for number in [SIGINT, SIGTERM] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [count] in
                let first = count.withLock { count in
                    count += 1
                    return count == 1
                }
                if first {
                    onFirst()
                } else {
                    TerminalRestore.restoreIfNeeded()
                    _exit(130)
                }
            }
            source.resume()
            sources.append(source)
        }
        self.sources = sources
    }

    func restore() {
        for source in sources { source.cancel() }
        signal(SIGINT, SIG_DFL)
        signal(SIGTERM, SIG_DFL)
    }
}

extension SignalHandler {
    /// Runs `work` as a task that the first SIGINT/SIGTERM cancels (it then
    /// checkpoints and throws `CancellationError`); a second exits at once.
    static func cancelling<Result: Sendable>(_ work: @escaping @Sendable () async throws -> Result) async throws -> Result {
        let task = Task { try await work() }
        let signals = SignalHandler { task.cancel() }
        defer { signals.restore() }
        return try await task.value
    }
}
