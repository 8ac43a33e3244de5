import Foundation

/// Keeps the control API answerable while clients without the token hold connections:
/// a connection must send a request's headers within `headerTimeout` (from when it
/// opens, and again after each answered request), unless it has sent the token; and at
/// most `untrustedLimit` connections without the token are held at once: one more
/// closes the oldest of them. Every client may be 127.0.0.1 (behind a reverse proxy),
/// so nothing here goes by address. A connection is closed with `shutdown(2)`, which
/// wakes its thread in libmicrohttpd; libmicrohttpd still closes the descriptor, after
/// it has told `closed` (so a descriptor here is never one reused meanwhile).
final class ConnectionGuard: Sendable {
    let headerTimeout: TimeInterval
    let untrustedLimit: Int

    private struct Held {
        let socket: Int32
        let opened: UInt64
        /// Until when the next request's headers may take; nil while a request is answered.
        var headersDue: Date?
        /// A request on it bore the token.
        var trusted = false
        var shut = false
    }

    /// What libmicrohttpd's connection threads and the sweep share.
    private struct State {
        var held: [UnsafeMutableRawPointer: Held] = [:]
        var openedCount: UInt64 = 0
        var timer: DispatchSourceTimer?

        mutating func shutDown(_ connection: UnsafeMutableRawPointer) {
            guard let entry = held[connection], !entry.shut else { return }
            held[connection]?.shut = true
            if entry.socket >= 0 { _ = Foundation.shutdown(entry.socket, Int32(SHUT_RDWR)) }
        }
    }

    private let state = Locked(State())

    init(headerTimeout: TimeInterval, untrustedLimit: Int) {
        self.headerTimeout = headerTimeout
        self.untrustedLimit = untrustedLimit
    }

    /// Sweeps for connections past their header deadline a few times a second until `stop`.
    func start() {
        let timer = DispatchSource.makeTimerSource(queue: .global())
        timer.schedule(deadline: .now() + 0.25, repeating: min(0.25, headerTimeout / 4))
        timer.setEventHandler { [weak self] in self?.sweep(now: Date()) }
        state.withLock { $0.timer = timer }
        timer.resume()
    }

    func stop() {
        state.withLock { state in
            state.timer?.cancel()
            state.timer = nil
        }
    }

    /// A connection opened (`socket` is its descriptor): it owes its headers, and the oldest
    /// connection without the token goes if this one makes more than `untrustedLimit`.
    func opened(_ connection: UnsafeMutableRawPointer, socket: Int32) {
        state.withLock { state in
            state.openedCount += 1
            state.held[connection] = Held(socket: socket, opened: state.openedCount, headersDue: Date().addingTimeInterval(headerTimeout))
            let untrusted = state.held.filter { !$0.value.trusted && !$0.value.shut }
            guard untrusted.count > untrustedLimit,
                  let oldest = untrusted.min(by: { $0.value.opened < $1.value.opened })?.key else { return }
            state.shutDown(oldest)
        }
    }

    /// A request's headers are in; `trusted`: it bore the token.
    func headersIn(_ connection: UnsafeMutableRawPointer, trusted: Bool) {
        state.withLock { state in
            state.held[connection]?.headersDue = nil
            if trusted { state.held[connection]?.trusted = true }
        }
    }

    /// A request was answered: a connection without the token owes the next one's headers
    /// in time (one with it is left to libmicrohttpd's idle timeout).
    func answered(_ connection: UnsafeMutableRawPointer) {
        state.withLock { state in
            guard let entry = state.held[connection], !entry.trusted else { return }
            state.held[connection]?.headersDue = Date().addingTimeInterval(headerTimeout)
        }
    }

    func closed(_ connection: UnsafeMutableRawPointer) {
        state.withLock { _ = $0.held.removeValue(forKey: connection) }
    }

    /// Connections held now, and those without the token (for tests and metrics).
    var counts: (all: Int, untrusted: Int) {
        state.withLock { state in (state.held.count, state.held.values.filter { !$0.trusted }.count) }
    }

    func sweep(now: Date) {
        state.withLock { state in
            for (connection, entry) in state.held where !entry.shut {
                if let due = entry.headersDue, due <= now { state.shutDown(connection) }
            }
        }
    }
}
