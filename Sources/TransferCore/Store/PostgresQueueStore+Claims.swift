import Foundation

/// Ingest and the life of a claimed job: claims under the fleet's advisory lock, fencing by
/// epoch, finishing, retries and the stops a stopping worker hands back.
extension PostgresQueueStore {
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


    /// Records one file's jobs (inside the caller's transaction). Two workers
    /// ingesting the same content at once both succeed; its jobs are recorded once.
    func record(_ file: JobFileContent) throws -> IngestOutcome {
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
    static let candidatesQuery = """
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
    func fence(_ id: String, next: Int) -> (clause: String, parameters: [String?])? {
        guard let epoch = held[id] else { return nil }
        return (" AND worker = $\(next) AND epoch = $\(next + 1)", [worker, String(epoch)])
    }

    /// After a write that ends this worker's hold: a held job the write missed was lost.
    /// A job a person held in the half second before this worker's `steering` read saw it is
    /// counted lost too, so this worker leaves it to the others for a lease's length after it is
    /// resumed. That rare delay is the price of not asking the job's state here, inside the
    /// caller's transaction, where a failed statement would abort the caller's writes.
    func release(_ id: String, changed: Int) {
        heldSince[id] = nil
        guard held.removeValue(forKey: id) != nil, changed == 0 else { return }
        lost[id] = Date()
    }

    /// Records a claim (or a take-over) of a job.
    func keepClaim(_ id: String, epoch: Int64, since: Double) {
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
}
