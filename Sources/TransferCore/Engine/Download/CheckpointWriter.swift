import Dispatch

/// What checkpoint saves are owed, as a value: requests made while one is owed
/// merge into it (the save takes its snapshot when it runs, so one save covers
/// them all), and a request that wants the file synced keeps that wish.
struct CheckpointRequests: Equatable {
    /// nil: nothing owed; otherwise whether the owed save syncs the file first.
    private(set) var owed: Bool?

    /// Records a request. Returns true when a save must be scheduled (none was owed).
    mutating func request(sync: Bool) -> Bool {
        defer { owed = (owed ?? false) || sync }
        return owed == nil
    }

    /// The save to run now (whether it syncs), and nothing owed after it.
    mutating func take() -> Bool? {
        defer { owed = nil }
        return owed
    }
}

/// Saves the checkpoints a download's written bytes make due on a queue of
/// their own instead of on the transport's thread, which also reads the
/// sockets. A checkpoint file is replaced by a rename, and ext4 starts the
/// writeback of a file renamed over another (`auto_da_alloc`), waiting for
/// room in the disk's queue that the download's own writeback fills: 4-5 ms
/// for every other rename (strace -T), 0.5 s per GiB on the loop thread at
/// one checkpoint per 4 MiB. A `fdatasync` due by bytes waits there too.
///
/// The save itself is the engine's, unchanged: it takes its snapshot when it
/// runs, under the download's `persistLock`, so it never claims bytes not yet
/// written nor lands across a reset of the file.
///
/// The queue is made by the first request: most downloads of a queue are small and
/// never ask for one (a queue made and drained per job was a measurable part of
/// a 1,000-job run's CPU).
final class CheckpointWriter: Sendable {
    private let owed = Locked<(requests: CheckpointRequests, queue: DispatchQueue?)>((CheckpointRequests(), nil))
    private let save: @Sendable (Bool) -> Void

    /// - Parameter save: saves a checkpoint (the argument: sync the file first).
    init(save: @escaping @Sendable (Bool) -> Void) {
        self.save = save
    }

    /// Asks for a save soon; returns at once.
    func request(sync: Bool) {
        let queue = owed.withLock { owed -> DispatchQueue? in
            guard owed.requests.request(sync: sync) else { return nil }
            if owed.queue == nil { owed.queue = DispatchQueue(label: "transferd.checkpoint", target: .global(qos: .utility)) }
            return owed.queue
        }
        queue?.async { [self] in
            guard let sync = owed.withLock({ $0.requests.take() }) else { return }
            save(sync)
        }
    }

    /// Waits until every save asked for so far has run (before the file is
    /// finalised or closed: a late save must not follow the final one or use a closed descriptor).
    func drain() {
        owed.withLock { $0.queue }?.sync {}
        if let sync = owed.withLock({ $0.requests.take() }) { save(sync) }
    }
}
