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
