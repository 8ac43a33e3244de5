import Foundation

/// A source that does not take ranges, or does not say its length, read once from start to
/// end and cut into parts as its bytes arrive: each full part goes to an UploadPart while
/// the next fills, at most `inFlight` parts held at once. When all are in flight, the sink
/// waits (a semaphore) on the transport's own thread, so the reading stops and TCP slows
/// the server: the source must come through a transport of its own, whose thread nothing
/// else needs (the uploads go through another).
// The parts in the making and the failure are in `Locked` boxes; the semaphore bounds memory.
final class SequentialPartSink: ResponseSink, Sendable {
    struct Stopped: Error {}

    private let partSize: @Sendable (Int) -> Int64
    private let slots: DispatchSemaphore
    private let continuation: AsyncStream<(number: Int, data: Data)>.Continuation
    private let state = Locked<(head: ResponseHead?, buffer: Data, number: Int, received: Int64, failed: Bool)>((nil, Data(), 1, 0, false))

    /// `partSize(n)`: the size of part `n` (1-based).
    init(inFlight: Int, partSize: @escaping @Sendable (Int) -> Int64,
         continuation: AsyncStream<(number: Int, data: Data)>.Continuation) {
        self.partSize = partSize
        slots = DispatchSemaphore(value: max(1, inFlight))
        self.continuation = continuation
    }

    var head: ResponseHead? { state.current.head }
    var received: Int64 { state.current.received }

    func receive(head: ResponseHead) throws {
        state.withLock { $0.head = head }
        guard (200..<300).contains(head.status) else { throw Stopped() }
    }

    func receive(body chunk: UnsafeRawBufferPointer) throws {
        var rest = UnsafeRawBufferPointer(rebasing: chunk[...])
        while !rest.isEmpty {
            let full = try state.withLock { state -> (number: Int, data: Data)? in
                if state.failed { throw Stopped() }
                let size = Int(partSize(state.number))
                let take = min(rest.count, size - state.buffer.count)
                state.buffer.append(contentsOf: UnsafeRawBufferPointer(rebasing: rest[..<take]))
                state.received += Int64(take)
                rest = UnsafeRawBufferPointer(rebasing: rest[take...])
                guard state.buffer.count == size else { return nil }
                defer {
                    state.buffer = Data()
                    state.number += 1
                }
                return (state.number, state.buffer)
            }
            if let full { hand(full) }
        }
    }

    func willWait(seconds: TimeInterval) {}

    /// Hands a part on once a slot is free (waiting here holds the reading back).
    private func hand(_ part: (number: Int, data: Data)) {
        slots.wait()
        continuation.yield(part)
    }

    /// The last part (what is left, if anything), then the end of the parts.
    func finish() {
        let last = state.withLock { state -> (number: Int, data: Data)? in
            guard !state.buffer.isEmpty || state.number == 1 else { return nil }
            defer { state.buffer = Data() }
            return (state.number, state.buffer)
        }
        if let last { hand(last) }
        continuation.finish()
    }

    /// An upload finished: its slot is free.
    func release() { slots.signal() }

    /// An upload failed: the reading stops at its next piece, and a sink waiting for a slot goes on.
    func fail() {
        state.withLock { $0.failed = true }
        for _ in 0..<64 { slots.signal() }
        continuation.finish()
    }

    /// The part size for a source of unknown length: `base` for the first thousand parts, then
    /// doubling every thousand (at most 5 GiB), so 10,000 parts hold S3's largest object, 5 TiB.
    static func growing(base: Int64) -> @Sendable (Int) -> Int64 {
        { number in min(base << Int64(min((number - 1) / 1000, 20)), 5 << 30) }
    }
}
