import Foundation

/// Reading jobs, and what a person asks of them: purge, retry, cancel, hold, priorities and settings.
extension PostgresQueueStore {
    // MARK: Reading

    static let columns = """
        seq, spec, state, attempts, next_attempt_at, last_error, bytes_done, bytes_total, speed, sha256,
        source_file, created_at, started_at, finished_at, cancel_requested, checkpoint, worker, hook, priority
        """
    static let columnCount = 19
    /// `columns` where another table's names could clash (an UPDATE … FROM).
    static let qualifiedColumns = columns.split(separator: ",")
        .map { "transferd_jobs." + $0.trimmingCharacters(in: .whitespacesAndNewlines) }.joined(separator: ", ")

    static func record(_ row: PostgresRow) throws -> JobRecord {
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
    func act(on id: String, _ change: (JobState) throws -> Void) throws -> JobState? {
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
    func setSettingLocked(_ name: String, to value: String?) throws {
        if let value {
            try connection.execute("""
                INSERT INTO transferd_settings (name, value) VALUES ($1, $2)
                ON CONFLICT (name) DO UPDATE SET value = excluded.value
                """, [name, value])
        } else {
            try connection.execute("DELETE FROM transferd_settings WHERE name = $1", [name])
        }
    }
}
