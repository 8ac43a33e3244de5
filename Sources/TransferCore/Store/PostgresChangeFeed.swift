import Foundation

/// A worker's ear on a PostgreSQL store: a connection of its own that LISTENs on
/// `PostgresChangeFeed.channel`, on a thread of its own, and calls `onChange` when another
/// process (a `transferd add`, `pause`, `resume`, `limit`, `prioritize`, `cancel`, `retry`, or
/// the control API of another worker) NOTIFYs it. A run then claims and reads its steering at
/// once instead of at its next look (a claim is looked for twice a second while slots are
/// free, steering read every few seconds with a feed, twice a second without).
///
/// Notifications that arrive together call `onChange` once, and at most
/// `quietInterval` apart (a `pause --state queued` of a million jobs sends one per job). A
/// broken connection is connected again with a growing pause (0.1 s doubling to 5 s),
/// however long the outage; once back, `onChange` is called, since changes made meanwhile
/// were not heard.
final class PostgresChangeFeed: StoreChangeFeed, Sendable {
    /// The channel the store's changes are sent on (`pg_notify`).
    static let channel = "transferd_changes"
    /// The least time between two calls of `onChange`, in seconds.
    static let quietInterval: TimeInterval = 0.05

    /// Used by the feed's thread alone once `init` has returned; the lock costs nothing uncontended.
    private let connection: Locked<PostgresConnection>
    private let onChange: @Sendable () -> Void
    private let stopped = Locked(false)

    /// Nil when the URL leads through a pooler in transaction mode (PgBouncer's
    /// `pool_mode = transaction`), where a LISTEN holds only for the transaction's server
    /// session: runs there look at the store twice a second instead.
    init?(url: String, onChange: @escaping @Sendable () -> Void) throws {
        let opened = try PostgresConnection(url: url)
        guard !opened.pooled else { return nil }
        try opened.executeScript("LISTEN " + Self.channel)
        connection = Locked(opened)
        self.onChange = onChange
        let thread = Thread { [self] in listen() }
        thread.name = "transferd store feed"
        thread.start()
    }

    func stop() { stopped.withLock { $0 = true } }

    private var isStopped: Bool { stopped.withLock { $0 } }

    private func listen() {
        var pause = 0.1
        // Whether the connection LISTENs now: one renewed whose LISTEN failed (a standby it reached,
        // say) is broken for the feed, however well it answers.
        var listening = true
        while !isStopped {
            if listening {
                do {
                    if try connection.withLock({ try $0.awaitNotifications(timeout: 0.25) }) > 0, !isStopped {
                        onChange()
                        usleep(UInt32(Self.quietInterval * 1_000_000))
                    }
                    pause = 0.1
                    continue
                } catch {
                    listening = false
                }
            }
            // Waited in steps, so a stop is heard within a quarter second.
            var waited = 0.0
            while waited < pause && !isStopped {
                usleep(UInt32(min(0.25, pause - waited) * 1_000_000))
                waited += 0.25
            }
            // Spread over a second's fraction: a fleet back from a restart does not reconnect in step.
            pause = min(pause * 2, 5) * Double.random(in: 0.8...1.2)
            guard !isStopped else { return }
            listening = connection.withLock { connection in
                connection.renewAfterBreak() && (try? connection.executeScript("LISTEN " + Self.channel)) != nil
            }
            // Changes made while it was deaf were not heard.
            if listening && !isStopped { onChange() }
        }
    }
}
