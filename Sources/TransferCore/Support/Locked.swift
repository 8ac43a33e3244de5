import Foundation

/// A value guarded by a lock, for state shared between transport threads and tasks.
///
/// The lock is a bare `pthread_mutex_t`: on Linux an `NSLock` allocates a mutex,
/// a condition and a second mutex besides itself, and a download makes several
/// of these per job.
// @unchecked: the value is read and written only while `mutex` is held.
package final class Locked<Value>: @unchecked Sendable {
    private var value: Value
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    package init(_ value: Value) {
        self.value = value
        mutex = PthreadMutex.make()
    }

    deinit {
        PthreadMutex.free(mutex)
    }

    @discardableResult
    package func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }

    package var current: Value { withLock { $0 } }
}

/// A lock without a value (`lock`/`unlock`, as `NSLock`), one allocation cheaper
/// than `NSLock` for the locks made per download.
final class PlainLock: Sendable {
    // nonisolated(unsafe): the pointer is set once in init; what it points to is only used through pthread calls, which synchronise.
    nonisolated(unsafe) private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    init() {
        mutex = PthreadMutex.make()
    }

    deinit {
        PthreadMutex.free(mutex)
    }

    func lock() { pthread_mutex_lock(mutex) }
    func unlock() { pthread_mutex_unlock(mutex) }
}

/// The one place a bare mutex is made and freed, for `Locked` and `PlainLock`.
private enum PthreadMutex {
    static func make() -> UnsafeMutablePointer<pthread_mutex_t> {
        let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        return mutex
    }

    static func free(_ mutex: UnsafeMutablePointer<pthread_mutex_t>) {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }
}

/// A value guarded by a lock with a condition, for a thread that waits until the value says
/// it may go on (a queue of work, a journal of events): `change` alters it and wakes the
/// waiters, `wait` tries under the lock and sleeps on the condition between tries.
// @unchecked: the value is read and written only while `condition` is held.
package final class Conditioned<Value>: @unchecked Sendable {
    private var value: Value
    private let condition = NSCondition()

    package init(_ value: Value) {
        self.value = value
    }

    /// Reads or changes the value without waking anyone.
    @discardableResult
    package func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        condition.lock()
        defer { condition.unlock() }
        return try body(&value)
    }

    /// Changes the value and wakes one waiter (`all`: every waiter).
    @discardableResult
    package func change<R>(wakingAll all: Bool = false, _ body: (inout Value) throws -> R) rethrows -> R {
        condition.lock()
        defer { condition.unlock() }
        let result = try body(&value)
        if all { condition.broadcast() } else { condition.signal() }
        return result
    }

    /// Runs `attempt` under the lock until it gives a result, sleeping on the condition between
    /// tries; nil once `deadline` has passed (nil: no deadline).
    package func wait<R>(deadline: Date? = nil, _ attempt: (inout Value) -> R?) -> R? {
        condition.lock()
        defer { condition.unlock() }
        while true {
            if let result = attempt(&value) { return result }
            if let deadline {
                if !condition.wait(until: deadline) { return attempt(&value) }
            } else {
                condition.wait()
            }
        }
    }
}
