/// Messages for one reader that takes everything waiting at once.
///
/// The queue's loop reads its mailbox through this rather than an
/// `AsyncStream`, which hands over one message per wait: jobs that finish
/// together (or while the loop was busy) then cost one claim, one flush check
/// and one pass over the loop's bookkeeping instead of one each.
// The continuation is resumed outside `state`'s lock, once.
final class Mailbox<Message: Sendable>: Sendable {
    private struct State {
        var waiting: [Message] = []
        var reader: CheckedContinuation<[Message], Never>?
    }
    private let state = Locked(State())

    /// Leaves `message` for the reader (waking it when it waits). Never blocks.
    func yield(_ message: Message) {
        let reader = state.withLock { state -> CheckedContinuation<[Message], Never>? in
            guard let reader = state.reader else {
                state.waiting.append(message)
                return nil
            }
            state.reader = nil
            return reader
        }
        reader?.resume(returning: [message])
    }

    /// Everything left since the last call, in order; waits while there is nothing. One reader only.
    func next() async -> [Message] {
        await withCheckedContinuation { (reader: CheckedContinuation<[Message], Never>) in
            let ready = state.withLock { state -> [Message]? in
                guard !state.waiting.isEmpty else {
                    precondition(state.reader == nil, "a mailbox has one reader")
                    state.reader = reader
                    return nil
                }
                defer { state.waiting = [] }
                return state.waiting
            }
            if let ready { reader.resume(returning: ready) }
        }
    }
}
