import Foundation

/// A task executor that runs every job on one thread of its own: for async code that calls
/// blocking APIs (SQLite, libpq and its reconnect backoff, waits for hooks), so those waits
/// hold this thread and never one of Swift's cooperative threads, which are as many as the
/// cores (two here) and carry every transfer.
///
/// Used with `withTaskExecutorPreference`: the code in the closure, and the child tasks it
/// makes, run here; unstructured tasks it starts do not (give them their own preference).
@available(macOS 15.0, *)
final class DedicatedThreadExecutor: TaskExecutor, Sendable {
    /// The jobs waiting to run, and whether the thread is to end once they have.
    private let queue = Conditioned((jobs: [UnownedJob](), stopped: false))

    init(name: String) {
        // The thread holds the executor until `stop()` lets it end. Named from inside: on Linux a
        // name set before `start()` never reaches the thread (it keeps its creator's).
        Thread {
            Thread.current.name = name
            Thread.current.threadDictionary[Self.nameKey] = name
            self.work()
        }.start()
    }

    private static let nameKey = "transferd.DedicatedThreadExecutor"

    /// The name of the executor whose thread runs this code; nil on any other thread.
    static var currentName: String? { Thread.current.threadDictionary[nameKey] as? String }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.change { $0.jobs.append(job) }
    }

    /// Ends the thread once the jobs already enqueued have run.
    func stop() {
        queue.change { $0.stopped = true }
    }

    private func work() {
        let executor = asUnownedTaskExecutor()
        // The next job, or nil once stopped with none left.
        while let job = queue.wait({ queue -> UnownedJob?? in
            if !queue.jobs.isEmpty { return .some(queue.jobs.removeFirst()) }
            return queue.stopped ? .some(nil) : nil
        }) ?? nil {
            job.runSynchronously(on: executor)
        }
    }
}
