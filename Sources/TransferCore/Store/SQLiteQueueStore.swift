import Foundation

/// The queue in SQLite (WAL mode), at `queue.d/.transferd/state.db`.
///
/// WAL with `synchronous=NORMAL`: a commit is ordered and atomic, and survives
/// a killed process; only an OS crash can lose the last commits, never
/// corrupt the file. Partial files are synced before a checkpoint naming their
/// bytes is committed, so a checkpoint never claims data that is not there.
// @unchecked: the one SQLite connection (opened NOMUTEX) is used only inside `locked`, under `lock`.
public final class SQLiteQueueStore: QueueStore, @unchecked Sendable {
    package static var schemaVersion: Int { migrations.count }
    /// Rows a claim may pass over (jobs of hosts it cannot use now) before it stops looking.
    static let claimPassOverLimit = 4096
    private let database: SQLiteDatabase
    private let lock = NSLock()

    /// Opens the store at `path`, making it when the file is missing or empty.
    ///
    /// A file that is not a SQLite database, or one SQLite finds damaged (`PRAGMA
    /// quick_check`), is refused with `StoreError.damaged` before anything is written
    /// to it: it may be all that is left of the queue's jobs.
    public init(path: String) throws {
        if path != Self.inMemory {
            try Self.checkHeader(path)
            // Owner only: the store holds URLs and headers as the jobs wrote them (a token in a
            // query, say). SQLite gives its -wal and -shm files the database file's mode.
            let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            if fd >= 0 {
                fchmod(fd, 0o600)
                close(fd)
            }
            for companion in [path + "-wal", path + "-shm"] { chmod(companion, 0o600) }
        }
        database = try SQLiteDatabase(path: path)
        do {
            let check = try database.query("PRAGMA quick_check")
            guard check.first?.first?.string == "ok" else {
                let findings = check.compactMap { $0.first?.string }.prefix(3).joined(separator: "; ")
                throw StoreError.damaged(path: path, reason: "fails SQLite's integrity check (\(findings))")
            }
        } catch StoreError.sqlite(_, let message) {
            throw StoreError.damaged(path: path, reason: "cannot be read as a SQLite database (\(message))")
        }
        try database.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;")
        try migrate()
    }

    /// SQLite's name for a database in memory only.
    static let inMemory = ":memory:"

    /// An empty store in memory, touching no file: what a read-only look (`status`) reads for
    /// a queue folder that no run has worked yet.
    package static func empty() throws -> SQLiteQueueStore {
        try SQLiteQueueStore(path: inMemory)
    }

    /// Throws `StoreError.damaged` when the file at `path` holds bytes that do not
    /// start as a SQLite database does. A missing or empty file passes (a new store).
    private static func checkHeader(_ path: String) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        defer { close(fd) }
        let magic = Array("SQLite format 3\0".utf8)
        var header = [UInt8](repeating: 0, count: magic.count)
        let count = read(fd, &header, header.count)
        guard count != 0 else { return }
        guard count == magic.count, header == magic else {
            throw StoreError.damaged(path: path, reason: "is not a SQLite database (it does not start with SQLite's header)")
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
    private static let migrations: [String] = [
        """
        CREATE TABLE jobs (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            kind TEXT NOT NULL,
            host TEXT NOT NULL,
            spec TEXT NOT NULL,
            source_file TEXT NOT NULL,
            priority INTEGER NOT NULL DEFAULT 0,
            state TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at REAL,
            last_error TEXT,
            bytes_done INTEGER NOT NULL DEFAULT 0,
            bytes_total INTEGER,
            speed REAL,
            sha256 TEXT,
            created_at REAL NOT NULL,
            started_at REAL,
            finished_at REAL,
            cancel_requested INTEGER NOT NULL DEFAULT 0,
            checkpoint TEXT
        );
        CREATE INDEX jobs_runnable ON jobs(state, priority DESC, seq);
        CREATE INDEX jobs_source ON jobs(source_file);
        CREATE TABLE ingested_files (
            content_sha256 TEXT PRIMARY KEY,
            file_name TEXT NOT NULL,
            jobs INTEGER NOT NULL,
            ingested_at REAL NOT NULL
        );
        """,
        // 2: the host in the runnable index, so claims pass over full hosts without reading rows.
        """
        DROP INDEX jobs_runnable;
        CREATE INDEX jobs_runnable ON jobs(state, priority DESC, seq, host);
        """,
        // 3: per-host limits lowered by 429s and 503s, for `status`.
        """
        CREATE TABLE host_limits (
            host TEXT PRIMARY KEY,
            connection_limit INTEGER NOT NULL,
            maximum INTEGER NOT NULL
        );
        """,
        // 4: what a finished job's hook did.
        """
        ALTER TABLE jobs ADD COLUMN hook TEXT;
        """,
        // 5: the queue's own settings (whether it is paused as a whole).
        """
        CREATE TABLE settings (
            name TEXT PRIMARY KEY,
            value TEXT NOT NULL
        );
        """,
    ]

    /// One step per write transaction, the version read inside it: two processes opening a new
    /// store at once (a `run` and a `status`) take turns instead of both creating the tables.
    private func migrate() throws {
        while try database.transaction({ () -> Bool in
            let version = Int(try database.query("PRAGMA user_version").first?.first?.int ?? 0)
            guard version <= Self.migrations.count else {
                throw StoreError.schemaTooNew(path: database.path, found: version, supported: Self.migrations.count)
            }
            guard version < Self.migrations.count else { return false }
            try database.execute(Self.migrations[version])
            try database.execute("PRAGMA user_version = \(version + 1)")
            return true
        }) {}
    }

    // MARK: Ingest

    public func ingest(_ files: [JobFileContent]) throws -> [IngestResult] {
        try locked {
            // One transaction (one WAL commit) for the batch; each file in a savepoint
            // of its own, so a file the store refuses leaves no trace.
            try database.transaction {
                try files.map { file in
                    try database.execute("SAVEPOINT job_file")
                    do {
                        let outcome = try record(file)
                        try database.execute("RELEASE job_file")
                        return .recorded(outcome)
                    } catch let conflict as IDConflict {
                        try database.execute("ROLLBACK TO job_file; RELEASE job_file")
                        return .idTaken(conflict)
                    } catch let rejection as JobFileRejection {
                        try database.execute("ROLLBACK TO job_file; RELEASE job_file")
                        return .invalid(rejection)
                    }
                }
            }
        }
    }

    /// Records one file's jobs (inside the caller's transaction).
    private func record(_ file: JobFileContent) throws -> IngestOutcome {
        let (fileName, contentHash) = (file.fileName, file.contentHash)
        if try !database.query("SELECT 1 FROM ingested_files WHERE content_sha256 = ?", [.text(contentHash)]).isEmpty {
            return IngestOutcome(added: 0, alreadyKnown: file.jobCount, duplicateFile: true)
        }
        var outcome = IngestOutcome(added: 0, alreadyKnown: 0, duplicateFile: false)
        let now = Date().timeIntervalSince1970
        try file.forEachBatch(of: 1000) { jobs in try record(jobs, from: fileName, at: now, into: &outcome) }
        try database.query("INSERT INTO ingested_files (content_sha256, file_name, jobs, ingested_at) VALUES (?, ?, ?, ?)",
                           [.text(contentHash), .text(fileName), .integer(Int64(outcome.added + outcome.alreadyKnown)), .real(now)])
        return outcome
    }

    private func record(_ jobs: [JobSpec], from fileName: String, at now: Double, into outcome: inout IngestOutcome) throws {
        for job in jobs {
            let spec = job.storedJSON
            try database.query("""
                INSERT INTO jobs (id, kind, host, spec, source_file, priority, state, created_at)
                VALUES (?, ?, ?, ?, ?, ?, 'queued', ?) ON CONFLICT (id) DO NOTHING
                """, [.text(job.id), .text(job.kind.rawValue), .text(job.host), .text(spec), .text(fileName),
                      .integer(Int64(job.priority)), .real(now)])
            if database.changes == 1 {
                outcome.added += 1
                continue
            }
            // The id is taken: the same job again is fine, another one is refused.
            if let existing = try database.query("SELECT spec, source_file FROM jobs WHERE id = ?", [.text(job.id)]).first {
                guard JobFileContent.isSameJob(job, storedSpec: existing[0].string) else {
                    throw IDConflict(jobID: job.id, storedFile: existing[1].string)
                }
                outcome.alreadyKnown += 1
            }
        }
    }


    // MARK: Scheduling

    public func recoverInterrupted() throws -> Int {
        try locked {
            try database.query("UPDATE jobs SET state = 'queued' WHERE state IN (\(JobTransition.recover.sqlStates))")
            return database.changes
        }
    }

    public func claimRunnable(limit: Int, now: Date, excludingHosts: Set<String>,
                              accept: (ClaimCandidate) -> Int?) throws -> [JobRecord] {
        guard limit > 0 else { return [] }
        let excluded = JSONObject.serialized(excludingHosts.sorted().map { .string($0) })
        return try locked {
            try database.transaction {
                // Queued jobs stream in order from the (state, priority, seq, host) index, with no
                // sort: the cost follows the slots to fill, not the queue's length, and full hosts
                // are passed over inside the index. Waiting jobs whose time has come (few) are
                // read first and merged in by priority, then age.
                let columns = "seq, priority, id, host, json_extract(spec, '$.connections')"
                let due = try database.query("""
                    SELECT \(columns) FROM jobs
                    WHERE state = 'waiting' AND next_attempt_at <= ? AND host NOT IN (SELECT value FROM json_each(?))
                    ORDER BY priority DESC, seq LIMIT ?
                    """, [.real(now.timeIntervalSince1970), .text(excluded), .integer(Int64(limit * 4 + 16))])
                var nextDue = due.startIndex
                var candidates: [ClaimCandidate] = []
                // A host refused once (full, or too full for the job) is passed over for the
                // rest of this claim; the rows read are bounded all the same.
                var refusedHosts: Set<String> = []
                var passedOver = 0
                /// Weighs one row; false when the claim has what it needs.
                func consider(_ row: [SQLValue]) -> Bool {
                    let candidate = ClaimCandidate(id: row[2].string ?? "", host: row[3].string ?? "",
                                                   connections: row[4].int.map(Int.init))
                    if refusedHosts.contains(candidate.host) {
                        passedOver += 1
                    } else if accept(candidate) != nil {
                        candidates.append(candidate)
                    } else {
                        refusedHosts.insert(candidate.host)
                        passedOver += 1
                    }
                    return candidates.count < limit && passedOver < Self.claimPassOverLimit
                }
                func precedes(_ a: [SQLValue], _ b: [SQLValue]) -> Bool {
                    let (pa, pb) = (a[1].int ?? 0, b[1].int ?? 0)
                    return pa != pb ? pa > pb : (a[0].int ?? 0) < (b[0].int ?? 0)
                }
                var going = true
                try database.forEachRow("""
                    SELECT \(columns) FROM jobs
                    WHERE state = 'queued' AND host NOT IN (SELECT value FROM json_each(?))
                    ORDER BY priority DESC, seq
                    """, [.text(excluded)]) { row in
                    while going, nextDue < due.endIndex, precedes(due[nextDue], row) {
                        going = consider(due[nextDue])
                        nextDue += 1
                    }
                    if going { going = consider(row) }
                    return going
                }
                while going, nextDue < due.endIndex {
                    going = consider(due[nextDue])
                    nextDue += 1
                }
                guard !candidates.isEmpty else { return [] }
                // One statement for the whole claim (one per job was a third of its statements),
                // handed back in the order the candidates were weighed.
                let taken = try database.query("""
                    UPDATE jobs SET state = 'running', started_at = ? WHERE id IN (SELECT value FROM json_each(?))
                    RETURNING \(Self.columns)
                    """, [.real(now.timeIntervalSince1970), .text(JSONObject.serialized(candidates.map { .string($0.id) }))])
                var byID: [String: JobRecord] = [:]
                for row in taken {
                    let record = try Self.record(row)
                    byID[record.id] = record
                }
                return candidates.compactMap { byID[$0.id] }
            }
        }
    }

    @discardableResult
    public func finish(_ id: String, state: JobState, error: String?, bytes: Int64?, sha256: String?, at date: Date) throws -> Bool {
        try locked {
            try database.query("""
                UPDATE jobs SET state = ?, last_error = ?, bytes_done = COALESCE(?, bytes_done),
                    bytes_total = COALESCE(?, bytes_total), sha256 = ?, finished_at = ?, speed = NULL,
                    next_attempt_at = NULL, checkpoint = NULL, cancel_requested = 0
                WHERE id = ? AND state IN (\(JobTransition.ending(in: state).sqlStates))
                """, [.text(state.rawValue), SQLValue(error), SQLValue(bytes), SQLValue(state == .done ? bytes : nil),
                      SQLValue(sha256), .real(date.timeIntervalSince1970), .text(id)])
            return database.changes > 0
        }
    }

    @discardableResult
    public func finishDone(_ jobs: [(id: String, bytes: Int64, sha256: String?)], at date: Date) throws -> Set<String> {
        guard !jobs.isEmpty else { return [] }
        return try locked {
            try database.transaction {
                var missed: Set<String> = []
                for job in jobs {
                    try database.query("""
                        UPDATE jobs SET state = 'done', last_error = NULL, bytes_done = ?, bytes_total = ?, sha256 = ?,
                            finished_at = ?, speed = NULL, next_attempt_at = NULL, checkpoint = NULL, cancel_requested = 0
                        WHERE id = ? AND state IN (\(JobTransition.complete.sqlStates))
                        """, [.integer(job.bytes), .integer(job.bytes), SQLValue(job.sha256),
                              .real(date.timeIntervalSince1970), .text(job.id)])
                    if database.changes == 0 { missed.insert(job.id) }
                }
                return missed
            }
        }
    }

    @discardableResult
    public func markFinishing(_ jobs: [(id: String, bytes: Int64, sha256: String?)]) throws -> Set<String> {
        guard !jobs.isEmpty else { return [] }
        return try locked {
            try database.transaction {
                var missed: Set<String> = []
                for job in jobs {
                    try database.query("""
                        UPDATE jobs SET state = 'finishing', bytes_done = ?, bytes_total = ?, sha256 = ?
                        WHERE id = ? AND state IN (\(JobTransition.markFinishing.sqlStates))
                        """, [.integer(job.bytes), .integer(job.bytes), SQLValue(job.sha256), .text(job.id)])
                    if database.changes == 0 { missed.insert(job.id) }
                }
                return missed
            }
        }
    }

    public func jobs(in state: JobState) throws -> [JobRecord] {
        try locked {
            try database.query("SELECT \(Self.columns) FROM jobs WHERE state = ? ORDER BY seq", [.text(state.rawValue)]).map(Self.record)
        }
    }

    public func scheduleRetry(_ id: String, at date: Date, error: String, attempts: Int) throws {
        try locked {
            try database.query("""
                UPDATE jobs SET state = 'waiting', next_attempt_at = ?, last_error = ?, attempts = ?, speed = NULL
                WHERE id = ? AND state IN (\(JobTransition.scheduleRetry.sqlStates))
                """, [.real(date.timeIntervalSince1970), .text(error), .integer(Int64(attempts)), .text(id)])
        }
    }

    public func pause(_ ids: [String]) throws {
        try locked {
            try database.transaction {
                for id in ids {
                    try database.query("UPDATE jobs SET state = 'paused', speed = NULL WHERE id = ? AND state IN (\(JobTransition.pause.sqlStates))",
                                       [.text(id)])
                }
            }
        }
    }

    public func saveProgress(_ snapshots: [String: ProgressSnapshot]) throws {
        guard !snapshots.isEmpty else { return }
        try locked {
            try database.transaction {
                for (id, snapshot) in snapshots {
                    try database.query("UPDATE jobs SET bytes_done = ?, bytes_total = ?, speed = ? WHERE id = ? AND state = 'running'",
                                       [.integer(snapshot.bytesDone), SQLValue(snapshot.bytesTotal), .real(snapshot.speed), .text(id)])
                }
            }
        }
    }

    public func nextWakeup() throws -> Date? {
        try locked {
            try database.query("SELECT MIN(next_attempt_at) FROM jobs WHERE state = 'waiting'").first?.first?.double
                .map(Date.init(timeIntervalSince1970:))
        }
    }

    // MARK: Reading

    private static let columns = """
        seq, spec, state, attempts, next_attempt_at, last_error, bytes_done, bytes_total, speed, sha256,
        source_file, created_at, started_at, finished_at, cancel_requested, checkpoint, hook, priority
        """

    private static func record(_ row: [SQLValue]) throws -> JobRecord {
        var spec = try JobSpec(stored: row[1].string ?? "")
        // The job file's priority, or the one a person set since (`setPriority`).
        spec.priority = row[17].int.map { Int(clamping: $0) } ?? spec.priority
        return JobRecord(seq: row[0].int ?? 0, spec: spec, state: JobState(rawValue: row[2].string ?? "") ?? .queued,
                         attempts: Int(row[3].int ?? 0), nextAttemptAt: row[4].double.map(Date.init(timeIntervalSince1970:)),
                         lastError: row[5].string, bytesDone: row[6].int ?? 0, bytesTotal: row[7].int, speed: row[8].double,
                         sha256: row[9].string, sourceFile: row[10].string ?? "",
                         createdAt: Date(timeIntervalSince1970: row[11].double ?? 0),
                         startedAt: row[12].double.map(Date.init(timeIntervalSince1970:)),
                         finishedAt: row[13].double.map(Date.init(timeIntervalSince1970:)),
                         cancelRequested: (row[14].int ?? 0) != 0, checkpoint: row[15].string, hook: row[16].string)
    }

    public func job(_ id: String) throws -> JobRecord? {
        try locked {
            try database.query("SELECT \(Self.columns) FROM jobs WHERE id = ?", [.text(id)]).first.map(Self.record)
        }
    }

    public func jobs() throws -> [JobRecord] {
        try locked { try database.query("SELECT \(Self.columns) FROM jobs ORDER BY seq").map(Self.record) }
    }

    public func jobIDs(startingWith prefix: String, limit: Int) throws -> [String] {
        // In byte order (SQLite's BINARY collation, the id index's), the ids with a prefix
        // follow one another from the prefix on.
        let rows = try locked {
            try database.query("SELECT id FROM jobs WHERE id >= ? ORDER BY id LIMIT ?", [.text(prefix), .integer(Int64(limit))])
        }
        return Array(rows.compactMap { $0[0].string }.prefix { $0.utf8.starts(with: prefix.utf8) })
    }

    public func jobs(in state: JobState?, after seq: Int64, limit: Int) throws -> [JobRecord] {
        try locked {
            try database.query("SELECT \(Self.columns) FROM jobs WHERE seq > ? AND (? IS NULL OR state = ?) ORDER BY seq LIMIT ?",
                               [.integer(seq), state.map { .text($0.rawValue) } ?? .null, state.map { .text($0.rawValue) } ?? .null,
                                .integer(Int64(limit))]).map(Self.record)
        }
    }

    public func jobs(in state: JobState, firstInClaimOrder limit: Int) throws -> [JobRecord] {
        try locked {
            try database.query("SELECT \(Self.columns) FROM jobs WHERE state = ? ORDER BY priority DESC, seq LIMIT ?",
                               [.text(state.rawValue), .integer(Int64(limit))]).map(Self.record)
        }
    }

    public func jobs(fromFile name: String) throws -> [JobRecord] {
        try locked {
            try database.query("SELECT \(Self.columns) FROM jobs WHERE source_file = ? ORDER BY seq", [.text(name)]).map(Self.record)
        }
    }

    public func results(fromFile name: String) throws -> [JobResult] {
        try locked {
            try database.query("""
                SELECT id, state, json_extract(spec, '$.url'), json_extract(spec, '$.destination'), bytes_total, sha256,
                    attempts, last_error, started_at, finished_at
                FROM jobs WHERE source_file = ? AND state IN ('done', 'failed', 'cancelled') ORDER BY seq
                """, [.text(name)]).map { row in
                JobResult(id: row[0].string ?? "", state: JobState(rawValue: row[1].string ?? "") ?? .failed,
                          url: row[2].string ?? "", destination: row[3].string, bytes: row[4].int, sha256: row[5].string,
                          attempts: Int(row[6].int ?? 0), lastError: row[7].string,
                          startedAt: row[8].double.map(Date.init(timeIntervalSince1970:)),
                          finishedAt: row[9].double.map(Date.init(timeIntervalSince1970:)))
            }
        }
    }

    public func counts() throws -> [JobState: Int] {
        try locked {
            var result: [JobState: Int] = [:]
            for row in try database.query("SELECT state, COUNT(*) FROM jobs GROUP BY state") {
                if let state = row[0].string.flatMap(JobState.init(rawValue:)) { result[state] = Int(row[1].int ?? 0) }
            }
            return result
        }
    }

    // MARK: User actions

    public func purge(states: Set<JobState>, finishedBefore: Date?, excluding: Set<String>) throws -> Int {
        let ended = states.filter(\.isFinal)
        guard !ended.isEmpty else { return 0 }
        return try locked {
            let list = JSONObject.serialized(ended.map { .string($0.rawValue) })
            let kept = JSONObject.serialized(excluding.sorted().map { .string($0) })
            try database.query("""
                DELETE FROM jobs WHERE state IN (SELECT value FROM json_each(?)) AND (? IS NULL OR finished_at < ?)
                    AND id NOT IN (SELECT value FROM json_each(?))
                """, [.text(list), finishedBefore.map { .real($0.timeIntervalSince1970) } ?? .null,
                      finishedBefore.map { .real($0.timeIntervalSince1970) } ?? .null, .text(kept)])
            let purged = database.changes
            // A forgotten job's own rate goes with it (a later job under its id starts without it).
            try database.query("""
                DELETE FROM settings WHERE substr(name, 1, 5) = 'rate:' AND NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.id = substr(settings.name, 6))
                """)
            return purged
        }
    }

    public func requeue(id: String?) throws -> Int {
        try locked {
            let reset = """
                UPDATE jobs SET state = 'queued', attempts = 0, last_error = NULL, next_attempt_at = NULL,
                    finished_at = NULL, cancel_requested = 0
                """
            if let id {
                try database.query(reset + " WHERE id = ? AND state IN (\(JobTransition.requeue.sqlStates))", [.text(id)])
            } else {
                try database.query(reset + " WHERE state = 'failed'")
            }
            return database.changes
        }
    }

    /// A user's action on one job: reads its state and lets `change` write what the state
    /// allows, in one transaction. Returns the state it had, or nil for an unknown id.
    private func act(on id: String, _ change: (JobState) throws -> Void) throws -> JobState? {
        try locked {
            try database.transaction {
                guard let state = try database.query("SELECT state FROM jobs WHERE id = ?", [.text(id)]).first?.first?.string
                    .flatMap(JobState.init(rawValue:)) else { return nil }
                try change(state)
                return state
            }
        }
    }

    public func cancel(_ id: String) throws -> JobState? {
        try act(on: id) { state in
            switch state.cancelEffect {
            case .endsNow:
                // A finishing job is complete but not yet renamed: the partial file stays, the job ends here.
                try database.query("UPDATE jobs SET state = 'cancelled', finished_at = ? WHERE id = ?",
                                   [.real(Date().timeIntervalSince1970), .text(id)])
            case .stopRequested:
                try database.query("UPDATE jobs SET cancel_requested = 1 WHERE id = ?", [.text(id)])
            case .none:
                break
            }
        }
    }

    public func hold(_ id: String) throws -> JobState? {
        try act(on: id) { _ in
            try database.query("UPDATE jobs SET state = 'held', speed = NULL WHERE id = ? AND state IN (\(JobTransition.hold.sqlStates))",
                               [.text(id)])
        }
    }

    public func unhold(_ id: String) throws -> JobState? {
        try act(on: id) { _ in
            try database.query("""
                UPDATE jobs SET state = 'queued', next_attempt_at = NULL
                WHERE id = ? AND state IN (\(JobTransition.unhold.sqlStates))
                """, [.text(id)])
        }
    }

    public func steering(among ids: [String]) throws -> RunSteering {
        try locked {
            var steering = RunSteering(settings: try settingsLocked())
            guard !ids.isEmpty else { return steering }
            let list = JSONObject.serialized(ids.map { .string($0) })
            for row in try database.query("""
                SELECT id, state FROM jobs WHERE id IN (SELECT value FROM json_each(?))
                    AND (state = 'held' OR (state = 'running' AND cancel_requested = 1))
                """, [.text(list)]) {
                guard let id = row[0].string else { continue }
                steering.stops[id] = row[1].string == JobState.held.rawValue ? .hold : .cancel
            }
            return steering
        }
    }

    public func setPriority(_ id: String, to priority: Int) throws -> JobState? {
        try locked {
            try database.query("UPDATE jobs SET priority = ? WHERE id = ? RETURNING state", [.integer(Int64(priority)), .text(id)])
                .first?.first?.string.flatMap(JobState.init(rawValue:))
        }
    }

    public func setJobRate(_ id: String, to bytesPerSecond: String?) throws -> JobState? {
        try locked {
            try database.transaction {
                guard let state = try database.query("SELECT state FROM jobs WHERE id = ?", [.text(id)])
                    .first?.first?.string.flatMap(JobState.init(rawValue:)) else { return nil }
                try setSettingLocked(QueueSettings.jobRatePrefix + id, to: bytesPerSecond)
                return state
            }
        }
    }

    public func settings() throws -> QueueSettings {
        try locked { try settingsLocked() }
    }

    private func settingsLocked() throws -> QueueSettings {
        var values: [String: String] = [:]
        for row in try database.query("SELECT name, value FROM settings") {
            if let name = row[0].string, let value = row[1].string { values[name] = value }
        }
        return QueueSettings(values: values)
    }

    public func setSetting(_ key: QueueSettings.Key, to value: String?) throws {
        try locked { try setSettingLocked(key.rawValue, to: value) }
    }

    private func setSettingLocked(_ name: String, to value: String?) throws {
        if let value {
            try database.query("""
                INSERT INTO settings (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value
                """, [.text(name), .text(value)])
        } else {
            try database.query("DELETE FROM settings WHERE name = ?", [.text(name)])
        }
    }

    // MARK: One run, no fleet

    /// A store of one run (the run lock keeps it so): every finishing job is this run's to complete.
    public func abandonedFinishing() throws -> [JobRecord] { try jobs(in: .finishing) }
    /// What a run claims is its own until it ends: no leases to renew, none lost.
    public func renewLeases() throws -> Set<String> { [] }
    public var leaseSeconds: Double? { nil }
    /// A claim in the run's own file costs a fraction of a millisecond: each free slot is filled at once.
    public var claimsInGroups: Bool { false }
    public func workers() throws -> [WorkerInfo] { [] }
    public func enlist() throws {}
    public func retire() throws {}
    public func rateShare(of rate: Int64) throws -> Int64 { rate }

    // MARK: Host limits

    public func saveHostLimits(_ limits: [String: Int], maximum: Int) throws {
        try locked {
            try database.transaction {
                try database.query("DELETE FROM host_limits")
                for (host, limit) in limits {
                    try database.query("INSERT INTO host_limits (host, connection_limit, maximum) VALUES (?, ?, ?)",
                                       [.text(host), .integer(Int64(limit)), .integer(Int64(maximum))])
                }
            }
        }
    }

    /// None: a queue folder's store has one run at a time, and the commands that change it from
    /// other processes (`pause`, `limit`, …) are read by the run twice a second.
    public func changeFeed(onChange: @escaping @Sendable () -> Void) throws -> StoreChangeFeed? { nil }

    public func hostLimits() throws -> [HostLimitInfo] {
        try locked {
            try database.query("SELECT host, connection_limit, maximum FROM host_limits ORDER BY host").map { row in
                HostLimitInfo(host: row[0].string ?? "", limit: Int(row[1].int ?? 0), maximum: Int(row[2].int ?? 0), worker: nil)
            }
        }
    }

    // MARK: Checkpoints

    public func checkpoint(for id: String) throws -> String? {
        try locked { try database.query("SELECT checkpoint FROM jobs WHERE id = ?", [.text(id)]).first?.first?.string }
    }

    public func recordHook(_ json: String, for id: String) throws {
        try locked { _ = try database.query("UPDATE jobs SET hook = ? WHERE id = ?", [.text(json), .text(id)]) }
    }

    /// One run holds what it claimed until it ends: a save always applies.
    @discardableResult
    public func saveCheckpoint(_ json: String?, for id: String) throws -> Bool {
        try locked { try database.query("UPDATE jobs SET checkpoint = ? WHERE id = ?", [SQLValue(json), .text(id)]) }
        return true
    }
}
