import Foundation
import TransferCore

/// A queue store in memory, written from the `QueueStore` contract and TransferCore's public
/// API alone: that the contract suite passes on it shows the contract is enough to write a
/// third store. A store of one run (no leases, no workers), like the SQLite one; what it
/// holds is gone with the process.
// @unchecked: every mutable field is read and written under `lock` only.
package final class MemoryQueueStore: QueueStore, @unchecked Sendable {
    private let lock = NSLock()
    private var records: [String: JobRecord] = [:]
    /// Ids by `seq`: the order jobs were added.
    private var order: [String] = []
    private var nextSeq: Int64 = 1
    private var ingestedContent: Set<String> = []
    private var limits: [HostLimitInfo] = []
    private var settingValues: [String: String] = [:]
    /// Each job as its file gave it, for telling the same job from another when a file is read again.
    private var ingestedSpecs: [String: String] = [:]

    package init() {}

    private func locked<T>(_ body: () throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }

    /// Applies `transition` to job `id` where it applies, then `change`; false where it does not.
    private func apply(_ transition: JobTransition, to id: String, _ change: (inout JobRecord) -> Void = { _ in }) -> Bool {
        guard var record = records[id], let next = record.state.after(transition) else { return false }
        record.state = next
        change(&record)
        records[id] = record
        return true
    }

    private var inOrder: [JobRecord] { order.compactMap { records[$0] } }

    // MARK: Ingest

    package func ingest(_ files: [JobFileContent]) throws -> [IngestResult] {
        try locked {
            try files.map { file in
                if ingestedContent.contains(file.contentHash) {
                    return .recorded(IngestOutcome(added: 0, alreadyKnown: file.jobCount, duplicateFile: true))
                }
                // All or nothing: the file's jobs are gathered first and added only if it holds.
                var added: [JobSpec] = []
                var addedByID: [String: JobSpec] = [:]
                var outcome = IngestOutcome(added: 0, alreadyKnown: 0, duplicateFile: false)
                do {
                    try file.forEachBatch(of: 1000) { batch in
                        for job in batch {
                            let held: (spec: String, file: String)? = records[job.id].map { (ingestedSpecs[job.id] ?? "", $0.sourceFile) }
                                ?? addedByID[job.id].map { ($0.storedJSON, file.fileName) }
                            if let held {
                                guard JobFileContent.isSameJob(job, storedSpec: held.spec) else {
                                    throw IDConflict(jobID: job.id, storedFile: held.file)
                                }
                                outcome.alreadyKnown += 1
                            } else {
                                added.append(job)
                                addedByID[job.id] = job
                                outcome.added += 1
                            }
                        }
                    }
                } catch let conflict as IDConflict {
                    return .idTaken(conflict)
                } catch let rejection as JobFileRejection {
                    return .invalid(rejection)
                }
                let now = Date()
                for job in added {
                    records[job.id] = JobRecord(seq: nextSeq, spec: job, state: .queued, sourceFile: file.fileName, createdAt: now)
                    ingestedSpecs[job.id] = job.storedJSON
                    order.append(job.id)
                    nextSeq += 1
                }
                ingestedContent.insert(file.contentHash)
                return .recorded(outcome)
            }
        }
    }

    // MARK: Claiming and the run's writes

    package func recoverInterrupted() throws -> Int {
        locked {
            var recovered = 0
            for id in order where apply(.recover, to: id) { recovered += 1 }
            return recovered
        }
    }

    package func claimRunnable(limit: Int, now: Date, excludingHosts: Set<String>,
                              accept: (ClaimCandidate) -> Int?) throws -> [JobRecord] {
        guard limit > 0 else { return [] }
        return locked {
            let runnable = inOrder.filter { record in
                (record.state == .queued || (record.state == .waiting && (record.nextAttemptAt ?? now) <= now))
                    && !excludingHosts.contains(record.spec.host)
            }.sorted { $0.spec.priority != $1.spec.priority ? $0.spec.priority > $1.spec.priority : $0.seq < $1.seq }
            var refusedHosts: Set<String> = []
            var taken: [JobRecord] = []
            for record in runnable where taken.count < limit && !refusedHosts.contains(record.spec.host) {
                let candidate = ClaimCandidate(id: record.id, host: record.spec.host, connections: record.spec.connections)
                guard accept(candidate) != nil else {
                    refusedHosts.insert(record.spec.host)
                    continue
                }
                _ = apply(.claim, to: record.id) { $0.startedAt = now }
                taken.append(records[record.id]!)
            }
            return taken
        }
    }

    @discardableResult
    package func finish(_ id: String, state: JobState, error: String?, bytes: Int64?, sha256: String?, at date: Date) throws -> Bool {
        locked {
            apply(.ending(in: state), to: id) { record in
                record.lastError = error
                if let bytes { record.bytesDone = bytes }
                if state == .done, let bytes { record.bytesTotal = bytes }
                record.sha256 = sha256
                record.finishedAt = date
                record.speed = nil
                record.nextAttemptAt = nil
                record.checkpoint = nil
                record.cancelRequested = false
            }
        }
    }

    @discardableResult
    package func finishDone(_ jobs: [(id: String, bytes: Int64, sha256: String?)], at date: Date) throws -> Set<String> {
        locked {
            Set(jobs.filter { job in
                !apply(.complete, to: job.id) { record in
                    record.lastError = nil
                    record.bytesDone = job.bytes
                    record.bytesTotal = job.bytes
                    record.sha256 = job.sha256
                    record.finishedAt = date
                    record.speed = nil
                    record.nextAttemptAt = nil
                    record.checkpoint = nil
                    record.cancelRequested = false
                }
            }.map(\.id))
        }
    }

    @discardableResult
    package func markFinishing(_ jobs: [(id: String, bytes: Int64, sha256: String?)]) throws -> Set<String> {
        locked {
            Set(jobs.filter { job in
                !apply(.markFinishing, to: job.id) { record in
                    record.bytesDone = job.bytes
                    record.bytesTotal = job.bytes
                    record.sha256 = job.sha256
                }
            }.map(\.id))
        }
    }

    package func scheduleRetry(_ id: String, at date: Date, error: String, attempts: Int) throws {
        locked {
            _ = apply(.scheduleRetry, to: id) { record in
                record.nextAttemptAt = date
                record.lastError = error
                record.attempts = attempts
                record.speed = nil
            }
        }
    }

    package func pause(_ ids: [String]) throws {
        locked { for id in ids { _ = apply(.pause, to: id) { $0.speed = nil } } }
    }

    package func saveProgress(_ snapshots: [String: ProgressSnapshot]) throws {
        locked {
            for (id, snapshot) in snapshots where records[id]?.state == .running {
                records[id]?.bytesDone = snapshot.bytesDone
                records[id]?.bytesTotal = snapshot.bytesTotal
                records[id]?.speed = snapshot.speed
            }
        }
    }

    package func nextWakeup() throws -> Date? {
        locked { records.values.filter { $0.state == .waiting }.compactMap(\.nextAttemptAt).min() }
    }

    // MARK: Reading

    package func job(_ id: String) throws -> JobRecord? { locked { records[id] } }

    package func jobs() throws -> [JobRecord] { locked { inOrder } }

    package func jobIDs(startingWith prefix: String, limit: Int) throws -> [String] {
        locked {
            Array(records.keys.filter { $0.utf8.starts(with: prefix.utf8) }
                .sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }.prefix(limit))
        }
    }

    package func jobs(in state: JobState) throws -> [JobRecord] { locked { inOrder.filter { $0.state == state } } }

    package func jobs(in state: JobState?, after seq: Int64, limit: Int) throws -> [JobRecord] {
        locked { Array(inOrder.filter { $0.seq > seq && (state == nil || $0.state == state) }.prefix(limit)) }
    }

    package func jobs(in state: JobState, firstInClaimOrder limit: Int) throws -> [JobRecord] {
        locked {
            Array(inOrder.filter { $0.state == state }
                .sorted { $0.spec.priority != $1.spec.priority ? $0.spec.priority > $1.spec.priority : $0.seq < $1.seq }
                .prefix(limit))
        }
    }

    package func jobs(fromFile name: String) throws -> [JobRecord] { locked { inOrder.filter { $0.sourceFile == name } } }

    package func results(fromFile name: String) throws -> [JobResult] {
        locked {
            inOrder.filter { $0.sourceFile == name && $0.state.isFinal }.map { record in
                JobResult(id: record.id, state: record.state, url: record.spec.url, destination: record.spec.destination,
                          bytes: record.bytesTotal, sha256: record.sha256, attempts: record.attempts, lastError: record.lastError,
                          startedAt: record.startedAt, finishedAt: record.finishedAt)
            }
        }
    }

    package func counts() throws -> [JobState: Int] {
        locked { records.values.reduce(into: [:]) { $0[$1.state, default: 0] += 1 } }
    }

    // MARK: A user's actions

    package func purge(states: Set<JobState>, finishedBefore: Date?, excluding: Set<String>) throws -> Int {
        locked {
            let gone = order.filter { id in
                guard !excluding.contains(id), let record = records[id], states.filter(\.isFinal).contains(record.state) else {
                    return false
                }
                if let finishedBefore { return (record.finishedAt ?? .distantFuture) < finishedBefore }
                return true
            }
            for id in gone {
                records[id] = nil
                // A forgotten job's own rate goes with it.
                settingValues[QueueSettings.jobRatePrefix + id] = nil
            }
            order.removeAll { records[$0] == nil }
            return gone.count
        }
    }

    package func requeue(id: String?) throws -> Int {
        locked {
            let chosen = id.map { [$0] } ?? order.filter { records[$0]?.state == .failed }
            return chosen.filter { id in
                apply(.requeue, to: id) { record in
                    record.attempts = 0
                    record.lastError = nil
                    record.nextAttemptAt = nil
                    record.finishedAt = nil
                    record.cancelRequested = false
                }
            }.count
        }
    }

    package func cancel(_ id: String) throws -> JobState? {
        locked {
            guard let state = records[id]?.state else { return nil }
            switch state.cancelEffect {
            case .endsNow: _ = apply(.cancelAtOnce, to: id) { $0.finishedAt = Date() }
            case .stopRequested: records[id]?.cancelRequested = true
            case .none: break
            }
            return state
        }
    }

    package func hold(_ id: String) throws -> JobState? {
        locked {
            guard let state = records[id]?.state else { return nil }
            _ = apply(.hold, to: id) { $0.speed = nil }
            return state
        }
    }

    package func unhold(_ id: String) throws -> JobState? {
        locked {
            guard let state = records[id]?.state else { return nil }
            _ = apply(.unhold, to: id) { $0.nextAttemptAt = nil }
            return state
        }
    }

    package func steering(among ids: [String]) throws -> RunSteering {
        locked {
            var steering = RunSteering(settings: QueueSettings(values: settingValues))
            for id in ids {
                guard let record = records[id] else { continue }
                if record.state == .held { steering.stops[id] = .hold }
                if record.state == .running && record.cancelRequested { steering.stops[id] = .cancel }
            }
            return steering
        }
    }

    package func setPriority(_ id: String, to priority: Int) throws -> JobState? {
        locked {
            guard let state = records[id]?.state else { return nil }
            records[id]?.spec.priority = priority
            return state
        }
    }

    package func setJobRate(_ id: String, to bytesPerSecond: String?) throws -> JobState? {
        locked {
            guard let state = records[id]?.state else { return nil }
            settingValues[QueueSettings.jobRatePrefix + id] = bytesPerSecond
            return state
        }
    }

    package func settings() throws -> QueueSettings { locked { QueueSettings(values: settingValues) } }

    package func setSetting(_ key: QueueSettings.Key, to value: String?) throws { locked { settingValues[key.rawValue] = value } }

    // MARK: Checkpoints and hooks

    package func checkpoint(for id: String) throws -> String? { locked { records[id]?.checkpoint } }

    @discardableResult
    package func saveCheckpoint(_ json: String?, for id: String) throws -> Bool {
        locked { records[id]?.checkpoint = json }
        return true
    }

    package func recordHook(_ json: String, for id: String) throws { locked { records[id]?.hook = json } }

    // MARK: Workers, leases and limits: one run, no fleet

    package func abandonedFinishing() throws -> [JobRecord] { try jobs(in: .finishing) }
    package func renewLeases() throws -> Set<String> { [] }
    package var leaseSeconds: Double? { nil }
    package var claimsInGroups: Bool { false }
    package func workers() throws -> [WorkerInfo] { [] }
    package func enlist() throws {}
    package func retire() throws {}
    package func rateShare(of rate: Int64) throws -> Int64 { rate }

    package func saveHostLimits(_ limits: [String: Int], maximum: Int) throws {
        locked { self.limits = limits.map { HostLimitInfo(host: $0.key, limit: $0.value, maximum: maximum) }.sorted { $0.host < $1.host } }
    }

    package func hostLimits() throws -> [HostLimitInfo] { locked { limits } }

    /// None: one process holds this store, and its run reads it twice a second.
    package func changeFeed(onChange: @escaping @Sendable () -> Void) throws -> StoreChangeFeed? { nil }
}
