import Foundation

/// The queue in PostgreSQL, shared by every `transferd run` pointed at the
/// same database: a fleet of workers that behaves as one queue.
///
/// - **Claims** take rows with `FOR UPDATE SKIP LOCKED`, so two workers never
///   take one job and never wait for each other's claims.
/// - **Leases**: a claimed job carries its worker's name and an expiry on the
///   server's clock (so workers' clocks need not agree). `renewLeases` extends
///   them; a worker that dies stops renewing, and after the lease its running
///   jobs are queued again and resume from their checkpoints, which live in the
///   row.
/// - **Fencing**: each claim raises the job's `epoch`. Every write this store
///   makes for a job it holds names the worker and the epoch it claimed, so a
///   worker presumed dead (stopped past its lease, then continued) changes
///   nothing for a job that moved on: its writes match no row, and
///   `markFinishing` and `renewLeases` tell it which jobs it lost.
///
/// All statements go through one connection under a lock; the run loop's
/// calls are few and batched (a claim per group of free slots, progress twice
/// a second).
// @unchecked: the connection and `held` are used only under `lock`.
public final class PostgresQueueStore: QueueStore, @unchecked Sendable {
    /// This worker's name in the store: `host:pid` unless given.
    package let worker: String
    /// How long a claim holds without a renewal.
    package let lease: Double
    public var leaseSeconds: Double? { lease }
    /// Each claim is several round trips and an advisory lock: free slots are gathered first.
    public var claimsInGroups: Bool { true }
    let connection: PostgresConnection
    /// The URL, for the change feed's own connection.
    let url: String
    let lock = NSLock()
    /// The jobs this worker holds, with the epoch of its claim.
    var held: [String: Int64] = [:]
    /// When the claim or the last renewal of each held job was sent (`LeaseClock`): until half a
    /// lease after, no expiry sweep can have queued it again.
    var heldSince: [String: Double] = [:]
    /// Jobs this worker held and lost to another, with when: nothing more is written for them,
    /// and they are not claimed again while this worker's stale transfer may still be stopping
    /// (a lease's length; it stops within a quarter second of learning). After that a lost job
    /// is like any other: one that comes back to the queue may be claimed here again.
    var lost: [String: Date] = [:]
    /// When (system uptime) a claim last queued the jobs of expired leases again.
    var lastExpirySweep = -Double.infinity

    /// Jobs one ingest statement inserts at most.
    static let ingestBatch = 1000
    /// Pages of candidates one claim reads at most.
    static let claimPages = 8
    /// The server's clock, in seconds since 1970 (leases never use a worker's clock).
    static let serverNow = "extract(epoch from clock_timestamp())::float8"

    package static func isStoreURL(_ text: String) -> Bool {
        text.hasPrefix("postgres://") || text.hasPrefix("postgresql://")
    }

    /// - Parameter readOnly: only to look (`status`): the session is read-only, and the schema is
    ///   neither created nor upgraded. No schema is `StoreFailure.noQueueYet`; an older one
    ///   `.schemaOlder`, with what to run.
    /// - Parameter outageSeconds: how long a lost connection is tried again before a call
    ///   throws (`PostgresConnection.outageLimit`).
    public init(url: String, worker: String? = nil, leaseSeconds: Double = 30, readOnly: Bool = false,
                outageSeconds: Double = 300) throws {
        self.worker = worker ?? "\(ProcessInfo.processInfo.hostName):\(getpid())"
        self.lease = leaseSeconds
        self.url = url
        connection = try PostgresConnection(url: url)
        connection.outageLimit = outageSeconds
        if readOnly {
            // Behind a pooler the setting would stay on a server session other clients then get:
            // there the read-only store only reads, as it does anyway.
            if !connection.pooled { try connection.executeScript("SET default_transaction_read_only = on") }
            try checkSchema()
        } else {
            try migrate()
        }
    }

    /// Joins the worker list (at the start of a run). A name another live worker uses is
    /// refused: two processes under one name would renew each other's leases. A worker
    /// restarted under its name takes it over (on this host: the old pid is gone; elsewhere:
    /// its heartbeat is older than a lease).
    public func enlist() throws {
        try locked {
            let host = ProcessInfo.processInfo.hostName
            if let row = try connection.query("""
                SELECT host, pid, \(Self.serverNow) - heartbeat_at FROM transferd_workers WHERE name = $1
                """, [worker]).first {
                let pid = Int32(row.int(1) ?? 0)
                let sameHost = row[0] == host
                let alive = sameHost ? (pid != getpid() && pid > 0 && kill(pid, 0) == 0) : (row.double(2) ?? .infinity) < lease
                if alive {
                    throw StoreError.postgres(target: connection.shownTarget,
                                              message: "another worker named \(worker) is running (pid \(pid) on \(row[0] ?? "?"))",
                                              fix: "give each worker its own --worker name")
                }
            }
            try connection.execute("""
                INSERT INTO transferd_workers (name, host, pid, started_at, heartbeat_at)
                VALUES ($1, $2, $3, \(Self.serverNow), \(Self.serverNow))
                ON CONFLICT (name) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid,
                    started_at = EXCLUDED.started_at, heartbeat_at = EXCLUDED.heartbeat_at
                """, [worker, host, String(getpid())])
        }
    }

    @discardableResult
    func locked<R>(_ body: () throws -> R) throws -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }

    // MARK: Hearing of changes

    public func changeFeed(onChange: @escaping @Sendable () -> Void) throws -> StoreChangeFeed? {
        try PostgresChangeFeed(url: url, onChange: onChange)
    }

    /// Tells every worker's feed of a change (delivered when the caller's transaction commits).
    func notifyChange() throws {
        _ = try connection.query("SELECT pg_notify($1, '')", [PostgresChangeFeed.channel])
    }


    // MARK: Checkpoints

    public func checkpoint(for id: String) throws -> String? {
        try locked { try connection.query("SELECT checkpoint FROM transferd_jobs WHERE id = $1", [id]).first?[0] }
    }

    /// Not fenced: a hook runs after the job ended, when no lease is held.
    public func recordHook(_ json: String, for id: String) throws {
        try locked { _ = try connection.execute("UPDATE transferd_jobs SET hook = $1 WHERE id = $2", [json, id]) }
    }

    /// Fenced like every write: a worker that lost the job (its lease ran out while it was
    /// frozen, say) learns it here, at its next checkpoint, rather than at its next renewal.
    @discardableResult
    public func saveCheckpoint(_ json: String?, for id: String) throws -> Bool {
        try locked {
            guard let (clause, fenceParameters) = fence(id, next: 3) else { return false }
            let changed = try connection.execute("UPDATE transferd_jobs SET checkpoint = $1 WHERE id = $2\(clause)",
                                                 [json, id] + fenceParameters)
            if changed == 0 { release(id, changed: 0) }
            return changed > 0
        }
    }

    // MARK: Values

    /// An array literal: every element quoted, `"` and `\` escaped; nil is NULL.
    /// A PostgreSQL array literal: each element quoted, `\` and `"` escaped. Byte by byte
    /// (Foundation's replacingOccurrences cost 13% of a worker's CPU in claims of 70 ids).
    static func array(_ values: [String?]) -> String {
        var out: [UInt8] = [UInt8(ascii: "{")]
        for (index, value) in values.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            guard let value else {
                out += Array("NULL".utf8)
                continue
            }
            out.append(UInt8(ascii: "\""))
            for byte in value.utf8 {
                if byte == UInt8(ascii: "\\") || byte == UInt8(ascii: "\"") { out.append(UInt8(ascii: "\\")) }
                out.append(byte)
            }
            out.append(UInt8(ascii: "\""))
        }
        out.append(UInt8(ascii: "}"))
        return String(decoding: out, as: UTF8.self)
    }

    static func array(_ values: [String]) -> String { array(values.map(Optional.some)) }
}
