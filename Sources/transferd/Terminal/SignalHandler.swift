import Dispatch
import Foundation

/// SIGINT/SIGTERM: the first asks the work to stop cleanly (checkpoint, exit
/// resumable); a second exits at once (state on disk is still consistent,
/// because checkpoints are only written after their data).
// @unchecked: `sources` is set in init and read in restore() on the owner's thread; `count` changes under `lock`.
final class SignalHandler: @unchecked Sendable {
    private var sources: [DispatchSourceSignal] = []
    private var count = 0
    private let lock = NSLock()

    init(onFirst: @escaping @Sendable () -> Void) {
        for number in [SIGINT, SIGTERM] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [self] in
                lock.lock()
                count += 1
                let first = count == 1
                lock.unlock()
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
