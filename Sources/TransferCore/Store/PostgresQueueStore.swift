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
    private let connection: PostgresConnection
    /// The URL, for the change feed's own connection.
    private let url: String
    private let lock = NSLock()
    /// The jobs this worker holds, with the epoch of its claim.
    private var held: [String: Int64] = [:]
    /// When the claim or the last renewal of each held job was sent (`LeaseClock`): until half a
    /// lease after, no expiry sweep can have queued it again.
    private var heldSince: [String: Double] = [:]
    /// Jobs this worker held and lost to another, with when: nothing more is written for them,
    /// and they are not claimed again while this worker's stale transfer may still be stopping
    /// (a lease's length; it stops within a quarter second of learning). After that a lost job
    /// is like any other: one that comes back to the queue may be claimed here again.
    private var lost: [String: Date] = [:]
    /// When (system uptime) a claim last queued the jobs of expired leases again.
    private var lastExpirySweep = -Double.infinity

    /// Jobs one ingest statement inserts at most.
    static let ingestBatch = 1000
    /// Pages of candidates one claim reads at most.
    static let claimPages = 8
    /// The server's clock, in seconds since 1970 (leases never use a worker's clock).
    private static let serverNow = "extract(epoch from clock_timestamp())::float8"

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
    private func locked<R>(_ body: () throws -> R) throws -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }

    // MARK: Schema

    /// Each entry brings the schema from version `index` to `index + 1`.
    static let migrations: [String] = [
        """
        CREATE TABLE transferd_jobs (
            seq BIGSERIAL PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            kind TEXT NOT NULL,
            host TEXT NOT NULL,
            spec TEXT NOT NULL,
            source_file TEXT NOT NULL,
            priority INTEGER NOT NULL DEFAULT 0,
            connections INTEGER,
            state TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at DOUBLE PRECISION,
            last_error TEXT,
            bytes_done BIGINT NOT NULL DEFAULT 0,
            bytes_total BIGINT,
            speed DOUBLE PRECISION,
            sha256 TEXT,
            created_at DOUBLE PRECISION NOT NULL,
            started_at DOUBLE PRECISION,
            finished_at DOUBLE PRECISION,
            cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
            checkpoint TEXT,
            worker TEXT,
            epoch BIGINT NOT NULL DEFAULT 0,
            lease_expires DOUBLE PRECISION
        );
        CREATE INDEX transferd_jobs_runnable ON transferd_jobs (state, priority DESC, seq);
        CREATE INDEX transferd_jobs_source ON transferd_jobs (source_file, seq);
        CREATE INDEX transferd_jobs_worker ON transferd_jobs (worker) WHERE worker IS NOT NULL;
        CREATE TABLE transferd_files (
            content_sha256 TEXT PRIMARY KEY,
            file_name TEXT NOT NULL,
            jobs INTEGER NOT NULL,
            ingested_at DOUBLE PRECISION NOT NULL
        );
        CREATE TABLE transferd_workers (
            name TEXT PRIMARY KEY,
            host TEXT NOT NULL,
            pid INTEGER NOT NULL,
            started_at DOUBLE PRECISION NOT NULL,
            heartbeat_at DOUBLE PRECISION NOT NULL
        )
        """,
        // 2: the connections a running job uses (per-host limits count the fleet), and the
        // per-host limits each worker lowered after 429s and 503s, for `status`.
        """
        ALTER TABLE transferd_jobs ADD COLUMN held_connections INTEGER NOT NULL DEFAULT 0;
        CREATE TABLE transferd_host_limits (
            worker TEXT NOT NULL,
            host TEXT NOT NULL,
            connection_limit INTEGER NOT NULL,
            maximum INTEGER NOT NULL,
            PRIMARY KEY (worker, host)
        )
        """,
        // 3: what a finished job's hook did.
        """
        ALTER TABLE transferd_jobs ADD COLUMN hook TEXT
        """,
        // 4: the queue's own settings (whether it is paused as a whole).
        """
        CREATE TABLE transferd_settings (
            name TEXT PRIMARY KEY,
            value TEXT NOT NULL
        )
        """,
        // 5: ids in byte order, whatever the database's collation, for ids typed by a
        // prefix (`jobIDs(startingWith:limit:)`).
        """
        CREATE INDEX transferd_jobs_id_bytes ON transferd_jobs (id COLLATE "C")
        """,
    ]

    package static var schemaVersion: Int { migrations.count }

    /// The schema's version (0: none), and whether a `transferd_jobs` table exists without
    /// `transferd_schema` (someone else's table of that name). Reads only, so a role without
    /// CREATE can use a store another role made.
    private func foundSchemaVersion() throws -> Int {
        let tables = try connection.query("""
            SELECT to_regclass('transferd_schema') IS NOT NULL, to_regclass('transferd_jobs') IS NOT NULL
            """).first
        guard tables?.bool(0) == true else {
            if tables?.bool(1) == true {
                throw connection.problem(.foreignTable("table \"transferd_jobs\" exists, but not transferd_schema, which transferd makes with it"))
            }
            return 0
        }
        let version = Int(try connection.query("SELECT max(version) FROM transferd_schema").first?.int(0) ?? 0)
        guard version <= Self.migrations.count else {
            throw connection.problem(.schemaNewer(found: version, supported: Self.migrations.count))
        }
        if version == 0, tables?.bool(1) == true {
            throw connection.problem(.foreignTable("table \"transferd_jobs\" exists, but transferd_schema records no version"))
        }
        return version
    }

    /// For a read-only look: the schema as this transferd reads it, or why not.
    private func checkSchema() throws {
        let version = try foundSchemaVersion()
        if version == 0 { throw connection.problem(.noQueueYet) }
        if version < Self.migrations.count {
            throw connection.problem(.schemaOlder(found: version, supported: Self.migrations.count))
        }
    }

    private func migrate() throws {
        // Up to date: nothing to create (a role that may not create tables still works).
        if try foundSchemaVersion() == Self.migrations.count { return }
        try connection.transaction {
            // Workers starting together migrate one at a time.
            try connection.execute("SELECT pg_advisory_xact_lock(7372657)")
            try connection.execute("CREATE TABLE IF NOT EXISTS transferd_schema (version INTEGER NOT NULL)")
            // Again under the lock: another worker may have migrated meanwhile.
            let version = try foundSchemaVersion()
            for step in version..<Self.migrations.count {
                try connection.executeScript(Self.migrations[step])
                try connection.execute("INSERT INTO transferd_schema (version) VALUES ($1)", [String(step + 1)])
            }
        }
    }

    // MARK: Ingest

    public func ingest(_ files: [JobFileContent]) throws -> [IngestResult] {
        try locked {
            try connection.transaction {
                let results: [IngestResult] = try files.map { file in
                    try connection.execute("SAVEPOINT job_file")
                    do {
                        let outcome = try record(file)
                        try connection.execute("RELEASE SAVEPOINT job_file")
                        return .recorded(outcome)
                    } catch let conflict as IDConflict {
                        try connection.execute("ROLLBACK TO SAVEPOINT job_file")
                        try connection.execute("RELEASE SAVEPOINT job_file")
                        return .idTaken(conflict)
                    } catch let rejection as JobFileRejection {
                        try connection.execute("ROLLBACK TO SAVEPOINT job_file")
                        try connection.execute("RELEASE SAVEPOINT job_file")
                        return .invalid(rejection)
                    }
                }
                try notifyChange()
                return results
            }
        }
    }

    // MARK: Hearing of changes

    public func changeFeed(onChange: @escaping @Sendable () -> Void) throws -> StoreChangeFeed? {
        try PostgresChangeFeed(url: url, onChange: onChange)
    }

    /// Tells every worker's feed of a change (delivered when the caller's transaction commits).
    private func notifyChange() throws {
        _ = try connection.query("SELECT pg_notify($1, '')", [PostgresChangeFeed.channel])
    }

    /// Records one file's jobs (inside the caller's transaction). Two workers
    /// ingesting the same content at once both succeed; its jobs are recorded once.
    private func record(_ file: JobFileContent) throws -> IngestOutcome {
        if try !connection.query("SELECT 1 FROM transferd_files WHERE content_sha256 = $1", [file.contentHash]).isEmpty {
            return IngestOutcome(added: 0, alreadyKnown: file.jobCount, duplicateFile: true)
        }
        var outcome = IngestOutcome(added: 0, alreadyKnown: 0, duplicateFile: false)
        let now = String(Date().timeIntervalSince1970)
        // Rows go in by the thousand, one statement each (a statement per job made ingesting
        // 10,000 jobs take 3.3 s, against 0.29 s on SQLite); `seq` follows the file's order.
        try file.forEachBatch(of: Self.ingestBatch) { jobs in
            let added = try connection.query("""
                INSERT INTO transferd_jobs (id, kind, host, spec, source_file, priority, connections, state, created_at)
                SELECT n.id, n.kind, n.host, n.spec, $5, n.priority, n.connections, 'queued', $7
                FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $6::int[], $8::int[])
                    WITH ORDINALITY AS n(id, kind, host, spec, priority, connections, position)
                ORDER BY n.position
                ON CONFLICT (id) DO NOTHING
                RETURNING id
                """, [Self.array(jobs.map(\.id)), Self.array(jobs.map(\.kind.rawValue)), Self.array(jobs.map(\.host)),
                      Self.array(jobs.map(\.storedJSON)), file.fileName, Self.array(jobs.map { String($0.priority) }), now,
                      Self.array(jobs.map { $0.connections.map(String.init) })])
            let inserted = Set(added.compactMap { $0[0] })
            outcome.added += inserted.count
            let taken = jobs.filter { !inserted.contains($0.id) }
            guard !taken.isEmpty else { return }
            // The ids already taken: the same job again is fine, another one is refused.
            var stored: [String: (spec: String?, file: String?)] = [:]
            for row in try connection.query("SELECT id, spec, source_file FROM transferd_jobs WHERE id = ANY($1::text[])",
                                            [Self.array(taken.map(\.id))]) {
                stored[row[0] ?? ""] = (row[1], row[2])
            }
            for job in taken {
                let existing = stored[job.id]
                guard JobFileContent.isSameJob(job, storedSpec: existing?.spec) else {
                    throw IDConflict(jobID: job.id, storedFile: existing?.file ?? nil)
                }
                outcome.alreadyKnown += 1
            }
        }
        try connection.execute("""
            INSERT INTO transferd_files (content_sha256, file_name, jobs, ingested_at) VALUES ($1, $2, $3, $4)
            ON CONFLICT (content_sha256) DO NOTHING
            """, [file.contentHash, file.fileName, String(outcome.added + outcome.alreadyKnown), now])
        return outcome
    }

    // MARK: Scheduling

    /// Running jobs whose lease ran out, jobs this worker's name held before (a worker
    /// restarted under its name is the same worker, so it need not wait out its own lease),
    /// and jobs a stopping worker paused are queued again.
    public func recoverInterrupted() throws -> Int {
        try locked {
            try connection.execute("""
                UPDATE transferd_jobs SET state = 'queued', worker = NULL, lease_expires = NULL, speed = NULL
                WHERE (state = 'running' AND (lease_expires < \(Self.serverNow) OR worker = $1)) OR state = 'paused'
                """, [worker])
        }
    }

    public func claimRunnable(limit: Int, now: Date, excludingHosts: Set<String>,
                              accept: (ClaimCandidate) -> Int?) throws -> [JobRecord] {
        guard limit > 0 else { return [] }
        let sentAt = LeaseClock.now()
        return try locked {
            // Claims take turns, so each sees what the others hold on every host (per-host limits
            // are the fleet's); a claim is two round trips (BEGIN, the lock and the first page of
            // candidates with what others hold on their hosts; the update and COMMIT, pipelined),
            // so the wait is short.
            var opening = [PostgresStatement(sql: "SELECT pg_advisory_xact_lock(7372658)")]
            // Jobs of a worker that stopped renewing go back to the queue first (looked for at
            // most once a second: a lease is seconds long).
            if ProcessInfo.processInfo.systemUptime - lastExpirySweep >= 1 {
                lastExpirySweep = ProcessInfo.processInfo.systemUptime
                opening.append(PostgresStatement(sql: """
                    UPDATE transferd_jobs SET state = 'queued', worker = NULL, lease_expires = NULL, speed = NULL
                    WHERE state = 'running' AND lease_expires < \(Self.serverNow)
                    """))
            }
            // Pages of candidates, each passing over the hosts refused so far (a host with no
            // room does not hide the next host's jobs); the rows read are bounded all the same.
            // Each candidate comes with the connections other live workers hold on its host.
            // Rows locked per page: a few more than needed, to pass over hosts without room.
            let page = limit * 2 + 8
            let forgotten = Date().addingTimeInterval(-lease)
            lost = lost.filter { $0.value > forgotten }
            // Never claimed again here: jobs lost meanwhile, and held jobs an expiry sweep may
            // have queued again (only those not renewed for half a lease: the list stays short).
            let checkedAt = LeaseClock.now()
            let notAgain = Self.array(Array(lost.keys) + held.keys.filter {
                !LeaseClock.certainlyHeld(claimSentAt: heldSince[$0] ?? -.infinity, now: checkedAt, lease: lease)
            })
            func candidates(excluding excluded: Set<String>, passingOver chosen: [String]) -> PostgresStatement {
                PostgresStatement(sql: Self.candidatesQuery, parameters: [
                    String(now.timeIntervalSince1970), Self.array(excluded.sorted()), Self.array(chosen), String(page), notAgain, worker])
            }
            opening.append(candidates(excluding: excludingHosts, passingOver: []))
            return try connection.pipelinedTransaction(opening: opening) { opened in
                var excluded = excludingHosts
                var chosen: [String] = []
                var connections: [String] = []
                var rows = opened.last ?? []
                for pageNumber in 1...Self.claimPages {
                    for row in rows where chosen.count < limit {
                        var candidate = ClaimCandidate(id: row[0] ?? "", host: row[1] ?? "", connections: row.int(2).map(Int.init))
                        candidate.heldElsewhere = Int(row.int(3) ?? 0)
                        guard !excluded.contains(candidate.host) else { continue }
                        if let taken = accept(candidate) {
                            chosen.append(candidate.id)
                            connections.append(String(taken))
                        } else {
                            excluded.insert(candidate.host)
                        }
                    }
                    if chosen.count >= limit || rows.count < page || pageNumber == Self.claimPages { break }
                    let next = candidates(excluding: excluded, passingOver: chosen)
                    rows = try connection.query(next.sql, next.parameters)
                }
                guard !chosen.isEmpty else { return (closing: [], finish: { _ in [] }) }
                let update = PostgresStatement(sql: """
                    UPDATE transferd_jobs SET state = 'running', started_at = $1, worker = $2, epoch = epoch + 1,
                        lease_expires = \(Self.serverNow) + $3, held_connections = claim.connections
                    FROM unnest($4::text[], $5::int[]) AS claim(id, connections)
                    WHERE transferd_jobs.id = claim.id
                    RETURNING \(Self.qualifiedColumns), epoch
                    """, parameters: [String(now.timeIntervalSince1970), worker, String(lease), Self.array(chosen),
                                      Self.array(connections)])
                return (closing: [update], finish: { closed in
                    var byID: [String: JobRecord] = [:]
                    for row in closed.first ?? [] {
                        let record = try Self.record(row)
                        byID[record.id] = record
                        self.keepClaim(record.id, epoch: row.int(Self.columnCount) ?? 0, since: sentAt)
                    }
                    return chosen.compactMap { byID[$0] }
                })
            }
        }
    }

    /// One page of claim candidates: `$1` now, `$2` hosts passed over, `$3` ids chosen so far,
    /// `$4` the page's size, `$5` ids never claimed again here, `$6` this worker.
    private static let candidatesQuery = """
        WITH queued AS (
            SELECT id, host, connections, priority, seq FROM transferd_jobs
            WHERE state = 'queued'
                AND NOT (host = ANY($2::text[])) AND NOT (id = ANY($3::text[])) AND NOT (id = ANY($5::text[]))
            ORDER BY priority DESC, seq
            LIMIT $4
            FOR UPDATE SKIP LOCKED),
        due AS (
            SELECT id, host, connections, priority, seq FROM transferd_jobs
            WHERE state = 'waiting' AND next_attempt_at <= $1
                AND NOT (host = ANY($2::text[])) AND NOT (id = ANY($3::text[])) AND NOT (id = ANY($5::text[]))
            ORDER BY priority DESC, seq
            LIMIT $4
            FOR UPDATE SKIP LOCKED),
        -- Queued and due jobs read apart, each in the order of the runnable index:
        -- one condition with OR read and sorted the whole table on every claim
        -- (6.9 ms at 10,000 jobs, against 0.2 ms).
        candidates AS (
            SELECT * FROM queued UNION ALL SELECT * FROM due
            ORDER BY priority DESC, seq
            LIMIT $4),
        elsewhere AS (
            SELECT host, sum(held_connections) AS held FROM transferd_jobs
            WHERE state IN ('running', 'finishing') AND worker != $6 AND lease_expires >= \(serverNow)
                AND host IN (SELECT host FROM candidates)
            GROUP BY host)
        SELECT c.id, c.host, c.connections, COALESCE(e.held, 0)
        FROM candidates c LEFT JOIN elsewhere e ON e.host = c.host
        ORDER BY c.priority DESC, c.seq
        """

    /// The condition that makes a write apply only while this worker still holds the job
    /// it claimed (parameters `$next`, `$next + 1`). Nil for a job it does not hold (lost,
    /// released, or never claimed): nothing is written. The user's actions (cancel, retry)
    /// are other statements.
    private func fence(_ id: String, next: Int) -> (clause: String, parameters: [String?])? {
        guard let epoch = held[id] else { return nil }
        return (" AND worker = $\(next) AND epoch = $\(next + 1)", [worker, String(epoch)])
    }

    /// After a write that ends this worker's hold: a held job the write missed was lost.
    /// A job a person held in the half second before this worker's `steering` read saw it is
    /// counted lost too, so this worker leaves it to the others for a lease's length after it is
    /// resumed. That rare delay is the price of not asking the job's state here, inside the
    /// caller's transaction, where a failed statement would abort the caller's writes.
    private func release(_ id: String, changed: Int) {
        heldSince[id] = nil
        guard held.removeValue(forKey: id) != nil, changed == 0 else { return }
        lost[id] = Date()
    }

    /// Records a claim (or a take-over) of a job.
    private func keepClaim(_ id: String, epoch: Int64, since: Double) {
        held[id] = epoch
        heldSince[id] = since
        lost[id] = nil
    }

    @discardableResult
    public func finish(_ id: String, state: JobState, error: String?, bytes: Int64?, sha256: String?, at date: Date) throws -> Bool {
        try locked {
            guard let (clause, fenceParameters) = fence(id, next: 8) else { return false }
            let changed = try connection.execute("""
                UPDATE transferd_jobs SET state = $1, last_error = $2, bytes_done = COALESCE($3::bigint, bytes_done),
                    bytes_total = COALESCE($4::bigint, bytes_total), sha256 = $5, finished_at = $6, speed = NULL,
                    next_attempt_at = NULL, checkpoint = NULL, cancel_requested = FALSE, worker = NULL, lease_expires = NULL
                WHERE id = $7 AND state IN (\(JobTransition.ending(in: state).sqlStates))\(clause)
                """, [state.rawValue, error, bytes.map(String.init), state == .done ? bytes.map(String.init) : nil, sha256,
                      String(date.timeIntervalSince1970), id] + fenceParameters)
            release(id, changed: changed)
            return changed > 0
        }
    }

    @discardableResult
    public func finishDone(_ jobs: [(id: String, bytes: Int64, sha256: String?)], at date: Date) throws -> Set<String> {
        guard !jobs.isEmpty else { return [] }
        return try locked {
            // One statement for the batch; each row still names this worker and the epoch it claimed.
            let mine = jobs.filter { held[$0.id] != nil }
            guard !mine.isEmpty else { return Set(jobs.map(\.id)) }
            let updated = try connection.query("""
                UPDATE transferd_jobs AS j SET state = 'done', last_error = NULL, bytes_done = b.bytes, bytes_total = b.bytes,
                    sha256 = b.sha256, finished_at = $1, speed = NULL, next_attempt_at = NULL, checkpoint = NULL,
                    cancel_requested = FALSE, worker = NULL, lease_expires = NULL
                FROM unnest($2::text[], $3::bigint[], $4::text[], $5::bigint[]) AS b(id, bytes, sha256, epoch)
                WHERE j.id = b.id AND j.state IN (\(JobTransition.complete.sqlStates)) AND j.worker = $6 AND j.epoch = b.epoch
                RETURNING j.id
                """, [String(date.timeIntervalSince1970), Self.array(mine.map(\.id)), Self.array(mine.map { String($0.bytes) }),
                      Self.array(mine.map(\.sha256)), Self.array(mine.map { String(held[$0.id] ?? -1) }), worker])
            let done = Set(updated.compactMap { $0[0] })
            for job in mine { release(job.id, changed: done.contains(job.id) ? 1 : 0) }
            return Set(jobs.map(\.id)).subtracting(done)
        }
    }

    @discardableResult
    public func markFinishing(_ jobs: [(id: String, bytes: Int64, sha256: String?)]) throws -> Set<String> {
        guard !jobs.isEmpty else { return [] }
        return try locked {
            let mine = jobs.filter { held[$0.id] != nil }
            var lostNow = Set(jobs.map(\.id)).subtracting(mine.map(\.id))
            guard !mine.isEmpty else { return lostNow }
            let updated = try connection.query("""
                UPDATE transferd_jobs AS j SET state = 'finishing', bytes_done = b.bytes, bytes_total = b.bytes, sha256 = b.sha256
                FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[]) AS b(id, bytes, sha256, epoch)
                WHERE j.id = b.id AND j.state IN (\(JobTransition.markFinishing.sqlStates)) AND j.worker = $5 AND j.epoch = b.epoch
                RETURNING j.id
                """, [Self.array(mine.map(\.id)), Self.array(mine.map { String($0.bytes) }), Self.array(mine.map(\.sha256)),
                      Self.array(mine.map { String(held[$0.id] ?? -1) }), worker])
            let marked = Set(updated.compactMap { $0[0] })
            for job in mine where !marked.contains(job.id) {
                lostNow.insert(job.id)
                release(job.id, changed: 0)
            }
            return lostNow
        }
    }

    public func jobs(in state: JobState) throws -> [JobRecord] {
        try locked {
            try connection.query("SELECT \(Self.columns) FROM transferd_jobs WHERE state = $1 ORDER BY seq", [state.rawValue])
                .map(Self.record)
        }
    }

    public func jobs(in state: JobState, firstInClaimOrder limit: Int) throws -> [JobRecord] {
        try locked {
            try connection.query("SELECT \(Self.columns) FROM transferd_jobs WHERE state = $1 ORDER BY priority DESC, seq LIMIT $2",
                                 [state.rawValue, String(limit)]).map(Self.record)
        }
    }

    /// Finishing jobs whose worker is gone (lease run out): taken by this worker to complete.
    public func abandonedFinishing() throws -> [JobRecord] {
        let sentAt = LeaseClock.now()
        return try locked {
            let rows = try connection.query("""
                UPDATE transferd_jobs SET worker = $1, epoch = epoch + 1, lease_expires = \(Self.serverNow) + $2
                WHERE state = 'finishing' AND (lease_expires IS NULL OR lease_expires < \(Self.serverNow) OR worker = $1)
                    AND NOT (id = ANY($3::text[]))
                RETURNING \(Self.columns), epoch
                """, [worker, String(lease), Self.array(Array(held.keys))])
            return try rows.map { row in
                let record = try Self.record(row)
                keepClaim(record.id, epoch: row.int(Self.columnCount) ?? 0, since: sentAt)
                return record
            }.sorted { $0.seq < $1.seq }
        }
    }

    public func scheduleRetry(_ id: String, at date: Date, error: String, attempts: Int) throws {
        try locked {
            guard let (clause, fenceParameters) = fence(id, next: 5) else { return }
            let changed = try connection.execute("""
                UPDATE transferd_jobs SET state = 'waiting', next_attempt_at = $1, last_error = $2, attempts = $3, speed = NULL,
                    worker = NULL, lease_expires = NULL
                WHERE id = $4 AND state IN (\(JobTransition.scheduleRetry.sqlStates))\(clause)
                """, [String(date.timeIntervalSince1970), error, String(attempts), id] + fenceParameters)
            release(id, changed: changed)
        }
    }

    /// A stopping worker's jobs go straight back to the queue (with their checkpoints), for the
    /// other workers to take now rather than when some worker next starts.
    public func pause(_ ids: [String]) throws {
        try locked {
            try connection.transaction {
                for id in ids {
                    guard let (clause, fenceParameters) = fence(id, next: 2) else { continue }
                    let changed = try connection.execute("""
                        UPDATE transferd_jobs SET state = 'queued', speed = NULL, worker = NULL, lease_expires = NULL
                        WHERE id = $1 AND state IN (\(JobTransition.release.sqlStates))\(clause)
                        """, [id] + fenceParameters)
                    release(id, changed: changed)
                }
                if !ids.isEmpty { try notifyChange() }
            }
        }
    }

    public func saveProgress(_ snapshots: [String: ProgressSnapshot]) throws {
        try locked {
            let mine = snapshots.filter { held[$0.key] != nil }.sorted { $0.key < $1.key }
            guard !mine.isEmpty else { return }
            try connection.execute("""
                UPDATE transferd_jobs AS j SET bytes_done = p.done, bytes_total = p.total, speed = p.speed
                FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::float8[], $5::bigint[]) AS p(id, done, total, speed, epoch)
                WHERE j.id = p.id AND j.state = 'running' AND j.worker = $6 AND j.epoch = p.epoch
                """, [Self.array(mine.map(\.key)), Self.array(mine.map { String($0.value.bytesDone) }),
                      Self.array(mine.map { $0.value.bytesTotal.map(String.init) }), Self.array(mine.map { String($0.value.speed) }),
                      Self.array(mine.map { String(held[$0.key] ?? -1) }), worker])
        }
    }

    public func nextWakeup() throws -> Date? {
        try locked {
            // A job held by a worker that stops renewing becomes runnable when its lease runs out.
            try connection.query("""
                SELECT least(
                    (SELECT min(next_attempt_at) FROM transferd_jobs WHERE state = 'waiting'),
                    (SELECT min(lease_expires) - \(Self.serverNow) + $1 FROM transferd_jobs
                     WHERE state = 'running' AND worker != $2))
                """, [String(Date().timeIntervalSince1970), worker]).first?.date(0)
        }
    }

    /// Extends this worker's leases and records its heartbeat.
    /// - Returns: the jobs it no longer holds (their lease ran out and another worker took them,
    ///   or a user cancelled them while they were finishing): their tasks must stop.
    public func renewLeases() throws -> Set<String> {
        let sentAt = LeaseClock.now()
        return try locked {
            // What this process holds, by id: a job its name held before a restart is left to expire.
            let rows = try connection.query("""
                UPDATE transferd_jobs SET lease_expires = \(Self.serverNow) + $2
                WHERE worker = $1 AND state IN ('running', 'finishing') AND id = ANY($3::text[])
                RETURNING id, epoch
                """, [worker, String(lease), Self.array(Array(held.keys))])
            try connection.execute("UPDATE transferd_workers SET heartbeat_at = \(Self.serverNow) WHERE name = $1", [worker])
            var renewed: [String: Int64] = [:]
            for row in rows { renewed[row[0] ?? ""] = row.int(1) ?? -1 }
            var lostNow: Set<String> = []
            for (id, epoch) in held {
                if renewed[id] == epoch { heldSince[id] = sentAt } else { lostNow.insert(id) }
            }
            for id in lostNow { release(id, changed: 0) }
            // Jobs a person held stop through `steering`; they are not lost.
            return lostNow.filter { lost[$0] != nil }
        }
    }

    /// `rate` divided among the workers that renewed within three leases (this one included).
    public func rateShare(of rate: Int64) throws -> Int64 {
        try locked {
            let live = try connection.query("""
                SELECT count(*) FROM transferd_workers WHERE heartbeat_at >= \(Self.serverNow) - $1 OR name = $2
                """, [String(lease * 3), worker]).first?.int(0) ?? 1
            return max(1, rate / max(1, live))
        }
    }

    public func workers() throws -> [WorkerInfo] {
        try locked {
            try connection.query("""
                SELECT w.name, w.host, w.pid, w.heartbeat_at, \(Self.serverNow),
                    (SELECT count(*) FROM transferd_jobs j WHERE j.worker = w.name AND j.state IN ('running', 'finishing'))
                FROM transferd_workers w ORDER BY w.name
                """).map { row in
                WorkerInfo(name: row[0] ?? "", host: row[1] ?? "", pid: Int(row.int(2) ?? 0),
                           lastHeartbeat: row.date(3) ?? .distantPast,
                           secondsSinceHeartbeat: (row.double(4) ?? 0) - (row.double(3) ?? 0),
                           jobsHeld: Int(row.int(5) ?? 0))
            }
        }
    }

    /// Removes this worker from the worker list (at the end of its run), with its host limits.
    public func retire() throws {
        try locked {
            _ = try connection.execute("DELETE FROM transferd_workers WHERE name = $1", [worker])
            _ = try connection.execute("DELETE FROM transferd_host_limits WHERE worker = $1", [worker])
        }
    }

    public func saveHostLimits(_ limits: [String: Int], maximum: Int) throws {
        try locked {
            try connection.transaction {
                try connection.execute("DELETE FROM transferd_host_limits WHERE worker = $1", [worker])
                for (host, limit) in limits {
                    try connection.execute("""
                        INSERT INTO transferd_host_limits (worker, host, connection_limit, maximum) VALUES ($1, $2, $3, $4)
                        """, [worker, host, String(limit), String(maximum)])
                }
                // The other workers take each other's cuts (`QueueRunner.adoptFleetHostCuts`): told at once.
                if !limits.isEmpty { try notifyChange() }
            }
        }
    }

    public func hostLimits() throws -> [HostLimitInfo] {
        try locked {
            try connection.query("""
                SELECT host, connection_limit, maximum, worker FROM transferd_host_limits ORDER BY host, worker
                """).map { row in
                HostLimitInfo(host: row[0] ?? "", limit: Int(row.int(1) ?? 0), maximum: Int(row.int(2) ?? 0), worker: row[3])
            }
        }
    }

    // MARK: Reading

    private static let columns = """
        seq, spec, state, attempts, next_attempt_at, last_error, bytes_done, bytes_total, speed, sha256,
        source_file, created_at, started_at, finished_at, cancel_requested, checkpoint, worker, hook, priority
        """
    private static let columnCount = 19
    /// `columns` where another table's names could clash (an UPDATE … FROM).
    private static let qualifiedColumns = columns.split(separator: ",")
        .map { "transferd_jobs." + $0.trimmingCharacters(in: .whitespacesAndNewlines) }.joined(separator: ", ")

    private static func record(_ row: PostgresRow) throws -> JobRecord {
        var spec = try JobSpec(stored: row[1] ?? "")
        // The job file's priority, or the one a person set since (`setPriority`).
        spec.priority = row.int(18).map { Int(clamping: $0) } ?? spec.priority
        return JobRecord(seq: row.int(0) ?? 0, spec: spec, state: JobState(rawValue: row[2] ?? "") ?? .queued,
                         attempts: Int(row.int(3) ?? 0), nextAttemptAt: row.date(4), lastError: row[5],
                         bytesDone: row.int(6) ?? 0, bytesTotal: row.int(7), speed: row.double(8), sha256: row[9],
                         sourceFile: row[10] ?? "", createdAt: row.date(11) ?? Date(timeIntervalSince1970: 0),
                         startedAt: row.date(12), finishedAt: row.date(13), cancelRequested: row.bool(14),
                         checkpoint: row[15], worker: row[16], hook: row[17])
    }

    public func job(_ id: String) throws -> JobRecord? {
        try locked {
            try connection.query("SELECT \(Self.columns) FROM transferd_jobs WHERE id = $1", [id]).first.map(Self.record)
        }
    }

    public func jobs() throws -> [JobRecord] {
        try locked { try connection.query("SELECT \(Self.columns) FROM transferd_jobs ORDER BY seq").map(Self.record) }
    }

    public func jobIDs(startingWith prefix: String, limit: Int) throws -> [String] {
        // In byte order ("C"), the ids with a prefix follow one another from the prefix on.
        let rows = try locked {
            try connection.query("""
                SELECT id FROM transferd_jobs WHERE id COLLATE "C" >= $1 ORDER BY id COLLATE "C" LIMIT $2
                """, [prefix, String(limit)])
        }
        return Array(rows.compactMap { $0[0] }.prefix { $0.utf8.starts(with: prefix.utf8) })
    }

    public func jobs(in state: JobState?, after seq: Int64, limit: Int) throws -> [JobRecord] {
        try locked {
            try connection.query("""
                SELECT \(Self.columns) FROM transferd_jobs WHERE seq > $1 AND ($2::text IS NULL OR state = $2) ORDER BY seq LIMIT $3
                """, [String(seq), state?.rawValue, String(limit)]).map(Self.record)
        }
    }

    public func jobs(fromFile name: String) throws -> [JobRecord] {
        try locked {
            try connection.query("SELECT \(Self.columns) FROM transferd_jobs WHERE source_file = $1 ORDER BY seq", [name])
                .map(Self.record)
        }
    }

    public func results(fromFile name: String) throws -> [JobResult] {
        try locked {
            try connection.query("""
                SELECT id, state, spec::json->>'url', spec::json->>'destination', bytes_total, sha256,
                    attempts, last_error, started_at, finished_at
                FROM transferd_jobs WHERE source_file = $1 AND state IN ('done', 'failed', 'cancelled') ORDER BY seq
                """, [name]).map { row in
                JobResult(id: row[0] ?? "", state: JobState(rawValue: row[1] ?? "") ?? .failed,
                          url: row[2] ?? "", destination: row[3], bytes: row.int(4), sha256: row[5],
                          attempts: Int(row.int(6) ?? 0), lastError: row[7], startedAt: row.date(8), finishedAt: row.date(9))
            }
        }
    }

    public func counts() throws -> [JobState: Int] {
        try locked {
            var result: [JobState: Int] = [:]
            for row in try connection.query("SELECT state, count(*) FROM transferd_jobs GROUP BY state") {
                if let state = row[0].flatMap(JobState.init(rawValue:)) { result[state] = Int(row.int(1) ?? 0) }
            }
            return result
        }
    }

    // MARK: User actions

    public func purge(states: Set<JobState>, finishedBefore: Date?, excluding: Set<String>) throws -> Int {
        let ended = states.filter(\.isFinal)
        guard !ended.isEmpty else { return 0 }
        return try locked {
            try connection.transaction {
                let purged = try connection.execute("""
                    DELETE FROM transferd_jobs WHERE state = ANY($1::text[]) AND ($2::double precision IS NULL OR finished_at < $2)
                        AND NOT (id = ANY($3::text[]))
                    """, [Self.array(ended.map(\.rawValue).sorted()), finishedBefore.map { String($0.timeIntervalSince1970) },
                          Self.array(excluding.sorted())])
                // A forgotten job's own rate goes with it (a later job under its id starts without it).
                try connection.execute("""
                    DELETE FROM transferd_settings s WHERE left(s.name, 5) = 'rate:'
                        AND NOT EXISTS (SELECT 1 FROM transferd_jobs j WHERE j.id = substr(s.name, 6))
                    """)
                return purged
            }
        }
    }

    public func requeue(id: String?) throws -> Int {
        try locked {
            let reset = """
                UPDATE transferd_jobs SET state = 'queued', attempts = 0, last_error = NULL, next_attempt_at = NULL,
                    finished_at = NULL, cancel_requested = FALSE, worker = NULL, lease_expires = NULL
                """
            let queued = try id.map { try connection.execute(reset + " WHERE id = $1 AND state IN (\(JobTransition.requeue.sqlStates))", [$0]) }
                ?? connection.execute(reset + " WHERE state = 'failed'")
            if queued > 0 { try notifyChange() }
            return queued
        }
    }

    /// A user's action on one job: locks its row, reads its state and lets `change` write what
    /// the state allows, in one transaction. Returns the state it had, or nil for an unknown id.
    private func act(on id: String, _ change: (JobState) throws -> Void) throws -> JobState? {
        try locked {
            try connection.transaction {
                guard let state = try connection.query("SELECT state FROM transferd_jobs WHERE id = $1 FOR UPDATE", [id])
                    .first?[0].flatMap(JobState.init(rawValue:)) else { return nil }
                try change(state)
                try notifyChange()
                return state
            }
        }
    }

    public func cancel(_ id: String) throws -> JobState? {
        try act(on: id) { state in
            switch state.cancelEffect {
            case .endsNow:
                // A finishing job is complete but not yet renamed: the partial file stays, the job ends here.
                try connection.execute("""
                    UPDATE transferd_jobs SET state = 'cancelled', finished_at = $2, worker = NULL, lease_expires = NULL
                    WHERE id = $1
                    """, [id, String(Date().timeIntervalSince1970)])
            case .stopRequested:
                try connection.execute("UPDATE transferd_jobs SET cancel_requested = TRUE WHERE id = $1", [id])
            case .none:
                break
            }
        }
    }

    public func hold(_ id: String) throws -> JobState? {
        try act(on: id) { _ in
            // The worker and epoch stay, and its lease is no longer renewed (only running jobs'
            // are). The runner's worker learns of the hold at its next `steering` read, which drops
            // the job from what it holds: writes after that (the attempt's last checkpoint too)
            // are refused, and the checkpoint before serves when the job is resumed.
            try connection.execute("""
                UPDATE transferd_jobs SET state = 'held', speed = NULL
                WHERE id = $1 AND state IN (\(JobTransition.hold.sqlStates))
                """, [id])
        }
    }

    public func unhold(_ id: String) throws -> JobState? {
        try act(on: id) { _ in
            try connection.execute("""
                UPDATE transferd_jobs SET state = 'queued', next_attempt_at = NULL, worker = NULL, lease_expires = NULL
                WHERE id = $1 AND state IN (\(JobTransition.unhold.sqlStates))
                """, [id])
        }
    }

    /// One round trip: the queue's pause setting and the runner's jobs to stop.
    public func steering(among ids: [String]) throws -> RunSteering {
        try locked {
            var steering = RunSteering()
            var values: [String: String] = [:]
            for row in try connection.query("""
                SELECT 'setting', name, value FROM transferd_settings
                UNION ALL
                SELECT 'job', id, state FROM transferd_jobs WHERE id = ANY($1::text[])
                    AND (state = 'held' OR (state = 'running' AND cancel_requested))
                """, [Self.array(ids)]) {
                guard let name = row[1] else { continue }
                if row[0] == "setting" {
                    values[name] = row[2]
                } else if row[2] == JobState.held.rawValue {
                    // Given up at a person's request, not lost: no lease to renew, and once resumed
                    // this worker may claim it again at once. (The attempt's last checkpoint is
                    // then refused; the one before it serves, as after a kill.)
                    steering.stops[name] = .hold
                    held[name] = nil
                    heldSince[name] = nil
                } else {
                    steering.stops[name] = .cancel
                }
            }
            steering.settings = QueueSettings(values: values)
            return steering
        }
    }

    public func setPriority(_ id: String, to priority: Int) throws -> JobState? {
        try locked {
            let state = try connection.query("UPDATE transferd_jobs SET priority = $2 WHERE id = $1 RETURNING state",
                                             [id, String(priority)]).first?[0].flatMap(JobState.init(rawValue:))
            if state != nil { try notifyChange() }
            return state
        }
    }

    public func setJobRate(_ id: String, to bytesPerSecond: String?) throws -> JobState? {
        try act(on: id) { _ in try setSettingLocked(QueueSettings.jobRatePrefix + id, to: bytesPerSecond) }
    }

    public func settings() throws -> QueueSettings {
        try locked {
            var values: [String: String] = [:]
            for row in try connection.query("SELECT name, value FROM transferd_settings") {
                if let name = row[0], let value = row[1] { values[name] = value }
            }
            return QueueSettings(values: values)
        }
    }

    public func setSetting(_ key: QueueSettings.Key, to value: String?) throws {
        try locked {
            try setSettingLocked(key.rawValue, to: value)
            try notifyChange()
        }
    }

    /// Under the store's lock (its caller's transaction, if any).
    private func setSettingLocked(_ name: String, to value: String?) throws {
        if let value {
            try connection.execute("""
                INSERT INTO transferd_settings (name, value) VALUES ($1, $2)
                ON CONFLICT (name) DO UPDATE SET value = excluded.value
                """, [name, value])
        } else {
            try connection.execute("DELETE FROM transferd_settings WHERE name = $1", [name])
        }
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
