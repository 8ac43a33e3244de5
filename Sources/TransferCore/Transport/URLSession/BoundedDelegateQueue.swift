import Foundation

/// The URLSession delegate queue, with backpressure.
///
/// FoundationNetworking hands every received buffer to the delegate queue with
/// `addOperation { … }` from its own work queue and never waits for it, so a
/// disk slower than the network piles buffers up without bound (an endless
/// body at loopback speed reached 430 MiB of RSS in 3 s, and cancelling it
/// took as long as draining that backlog). Here `addOperation` waits while
/// `limit` blocks are pending: FoundationNetworking's work queue stalls, the
/// libcurl handle under it stops reading, and TCP slows the server down.
///
/// A delegate block must never wait for FoundationNetworking's work queue, which
/// may be the one held here: the completion handlers it gives the delegate go
/// back with `async`, but `URLSessionTask.cancel()` (Swift 6.3) uses `sync`, so
/// `URLSessionExchange` cancels from another thread. A block added from the
/// delegate queue itself is never held.
// @unchecked: the semaphore is thread-safe; OperationQueue is @unchecked Sendable itself.
final class BoundedDelegateQueue: OperationQueue, @unchecked Sendable {
    private let slots: DispatchSemaphore

    /// `limit` pending blocks; a received buffer is at most 16 KiB (libcurl's
    /// CURL_MAX_WRITE_SIZE), so 512 bound the backlog near 8 MiB.
    init(limit: Int = 512) {
        slots = DispatchSemaphore(value: limit)
        super.init()
        maxConcurrentOperationCount = 1
    }

    override func addOperation(_ block: @Sendable @escaping () -> Void) {
        let held = OperationQueue.current !== self
        if held { slots.wait() }
        let slots = self.slots
        super.addOperation {
            block()
            if held { slots.signal() }
        }
    }
}
