import Foundation

/// The persistent queue: the one truth about jobs, their states, checkpoints and
/// results, for the run loop, the CLI and the control API. Two stores keep it: SQLite
/// (`SQLiteQueueStore`, the queue folder's own file, one run at a time) and PostgreSQL
/// (`PostgresQueueStore`, shared by a fleet of workers under leases).
///
/// Every requirement below says what it must guarantee; none has a default, so a store
/// states each choice. Every state change is one of `JobTransition` and applies only where
/// `JobState.after(_:)` says it does: a write that finds its job moved on (a retry for a job
/// a user cancelled a moment ago) changes nothing. A method either does all it says or
/// throws and changes nothing; errors are the store's own (`StoreFailure` words them).
///
/// A new store proves itself against the contract suite
/// (`Tests/ConformanceTests/QueueStoreContractTests.swift`): add a factory for it to
/// `TestStores.all()` (`Tests/TestSupport/TestStores.swift`) and every case runs on it.
/// `MemoryQueueStore` in the same folder is a complete store in memory, written from
/// this contract alone.
public protocol QueueStore: AnyObject, Sendable {
    // MARK: Ingest

    /// Records several job files in one transaction, each all or nothing, in order: a file
    /// whose content (`contentHash`) was recorded before adds nothing (`duplicateFile`,
    /// its jobs counted `alreadyKnown`); a job whose id the store holds for the same job
    /// (`JobFileContent.isSameJob`) is `alreadyKnown`; an id held for a different job
    /// leaves the whole file out (`.idTaken`, naming the file it came from); a large
    /// list's mistake (`forEachBatch` throws a `JobFileRejection`) leaves it out too
    /// (`.invalid`). New jobs are `queued`, numbered (`seq`) in the file's order after
    /// every job before them. One result per file, in order.
    func ingest(_ files: [JobFileContent]) throws -> [IngestResult]

    // MARK: Claiming and the run's writes

    /// At the start of a run: jobs an earlier process left (`JobTransition.recover`:
    /// `running`, `paused`; a shared store only those whose lease ran out or that its own
    /// worker name held) become `queued`. Returns how many.
    func recoverInterrupted() throws -> Int
    /// Marks up to `limit` runnable jobs `running` and returns them whole, in the order
    /// weighed: `queued` jobs and `waiting` ones whose `nextAttemptAt` is at or before
    /// `now`, by priority (higher first), then `seq`. Jobs of `excludingHosts` are never
    /// weighed; `accept` sees the others as `ClaimCandidate`s in that order and answers the
    /// connections the job will use, or nil to pass it over — a host passed over once is
    /// not offered again in the same claim, so one full host cannot hide the next host's
    /// jobs. A shared store leases what it hands out and counts other workers' connections
    /// into `heldElsewhere`.
    func claimRunnable(limit: Int, now: Date, excludingHosts: Set<String>,
                       accept: (ClaimCandidate) -> Int?) throws -> [JobRecord]
    /// Ends a job: `done`, `failed` or `cancelled` (`JobTransition.ending(in:)`), with its
    /// error, bytes (and for `done` its total) and SHA-256; clears its retry time,
    /// checkpoint, speed and cancel request.
    /// - Returns: false when nothing was recorded: the job had moved on (a user cancelled it
    ///   meanwhile) or, in a shared store, another worker holds it now.
    @discardableResult
    func finish(_ id: String, state: JobState, error: String?, bytes: Int64?, sha256: String?, at: Date) throws -> Bool
    /// Marks many jobs `done` in one transaction (`JobTransition.complete`), as `finish` does.
    /// - Returns: the jobs it did not mark.
    @discardableResult
    func finishDone(_ jobs: [(id: String, bytes: Int64, sha256: String?)], at: Date) throws -> Set<String>
    /// Marks many running jobs `finishing` (complete, verified and synced; about to be renamed
    /// into place), with their bytes and SHA-256, in one transaction.
    /// - Returns: the jobs it did not mark, which must not be renamed into place.
    @discardableResult
    func markFinishing(_ jobs: [(id: String, bytes: Int64, sha256: String?)]) throws -> Set<String>
    /// A running job waits until `at` for its next attempt (`waiting`), with the error that
    /// made it wait and its attempts so far; no speed.
    func scheduleRetry(_ id: String, at: Date, error: String, attempts: Int) throws
    /// A stopping run's running jobs wait for the next run (`paused`); a shared store puts
    /// them back in the queue for any worker (`JobTransition.release`).
    func pause(_ ids: [String]) throws
    /// Bytes done, total and speed of running jobs, for `status`; other jobs are left alone.
    func saveProgress(_ snapshots: [String: ProgressSnapshot]) throws
    /// When the earliest `waiting` job becomes runnable; nil when none waits.
    func nextWakeup() throws -> Date?

    // MARK: Reading

    /// One job, or nil.
    func job(_ id: String) throws -> JobRecord?
    /// The ids that start with `prefix` (compared as UTF-8 bytes), at most `limit`, in byte
    /// order: for ids typed by a prefix and shown by their shortest unique one (`JobIDs`).
    /// Answers from an index, whatever the queue's size.
    func jobIDs(startingWith prefix: String, limit: Int) throws -> [String]
    /// Every job, by `seq`. (For small queues and tests: the CLI pages large ones.)
    func jobs() throws -> [JobRecord]
    /// The jobs in `state`, by `seq`.
    func jobs(in state: JobState) throws -> [JobRecord]
    /// A page of jobs (all, or those in `state`) by `seq`, the first after `seq` (0: from the
    /// first), at most `limit`: the control API's and `status --all`'s cursor.
    func jobs(in state: JobState?, after seq: Int64, limit: Int) throws -> [JobRecord]
    /// The first `limit` jobs in `state` in claim order (priority, then `seq`), read without
    /// sorting the queue: `status`'s view of a large one.
    func jobs(in state: JobState, firstInClaimOrder limit: Int) throws -> [JobRecord]
    /// The jobs that came from job file `name`, by `seq`.
    func jobs(fromFile name: String) throws -> [JobRecord]
    /// The ended (`done`, `failed`, `cancelled`) jobs of job file `name`, by `seq`: what its
    /// result file lists.
    func results(fromFile name: String) throws -> [JobResult]
    /// How many jobs are in each state (states with none may be left out).
    func counts() throws -> [JobState: Int]

    // MARK: A user's actions

    /// Jobs go back to `queued` with no attempts, error, retry time or end: with an id, that
    /// job if `JobTransition.requeue` applies (failed, cancelled, waiting); without, every
    /// `failed` job. Returns how many.
    func requeue(id: String?) throws -> Int
    /// Forgets ended jobs: those in `states` that are `isFinal` (others are never purged), that
    /// finished before `finishedBefore` (nil: whenever), and that are not in `excluding` (the
    /// jobs a hook is still owed for). Their rows go, with their own rates (`setJobRate`: a later
    /// job under the same id starts without one); the job files' records stay, so the same
    /// file dropped again adds nothing. Returns how many.
    func purge(states: Set<JobState>, finishedBefore: Date?, excluding: Set<String>) throws -> Int
    /// Cancels a job: one no one transfers ends `cancelled` now; a running one is flagged
    /// (`cancelRequested`) for its runner to stop; an ended one is left alone. Returns the
    /// state it had, or nil for an unknown id.
    func cancel(_ id: String) throws -> JobState?
    /// Holds a job a person paused (`JobTransition.hold`: queued, waiting, paused or running
    /// become `held`), keeping its attempts and checkpoint; a running one's runner learns it from
    /// `steering` and stops it. A held job is never claimed or recovered, only resumed
    /// (`unhold`) or cancelled. Returns the state it had, or nil for an unknown id.
    func hold(_ id: String) throws -> JobState?
    /// A held job is queued again (`JobTransition.unhold`), its retry time cleared, to go on
    /// from its checkpoint. Returns the state it had, or nil for an unknown id.
    func unhold(_ id: String) throws -> JobState?
    /// What people asked of a run, in one read (a run asks twice a second): which of `ids` (the
    /// jobs it transfers) to stop, and how (a cancel requested of a running job, or the job
    /// held), and the queue's settings (as `settings()`).
    func steering(among ids: [String]) throws -> RunSteering
    /// Sets job `id`'s priority (claims take higher first, then older), whatever its state. The
    /// job as its file gave it (`isSameJob`'s comparison) is unchanged: the file read again is
    /// still the same job. Returns the state it had, or nil for an unknown id.
    func setPriority(_ id: String, to priority: Int) throws -> JobState?
    /// Sets job `id`'s own rate limit (`transferd limit --job`), whatever its state: bytes per
    /// second as text, "0" for none at all, nil to go back to its file's `limit_rate`. Kept
    /// among the settings (`QueueSettings.jobRates`, under `QueueSettings.jobRatePrefix` and the
    /// id), so a running job's run follows it at its next `steering` read; the job as its file
    /// gave it is unchanged. Returns the state it had, or nil for an unknown id (nothing set).
    func setJobRate(_ id: String, to bytesPerSecond: String?) throws -> JobState?
    /// The whole queue's settings: whether it is paused (while it is, no run claims a job; jobs
    /// under way go on) and the limits a person set (`transferd limit`). A new store's are the
    /// defaults.
    func settings() throws -> QueueSettings
    /// Sets one of the queue's settings (nil: back to its default), for every run and worker
    /// that shares the store.
    func setSetting(_ key: QueueSettings.Key, to value: String?) throws

    // MARK: Checkpoints and hooks

    /// A job's resume checkpoint (JSON), or nil.
    func checkpoint(for id: String) throws -> String?
    /// Saves (nil: clears) a job's checkpoint.
    /// - Returns: false when this worker no longer holds the job (a shared store gave it to
    ///   another): nothing was saved, and the transfer must stop.
    @discardableResult
    func saveCheckpoint(_ json: String?, for id: String) throws -> Bool
    /// Records what a finished job's hook did (JSON), whichever state the job is in now.
    func recordHook(_ json: String, for id: String) throws

    // MARK: Workers, leases and limits

    /// Jobs left `finishing` whose process is gone, now this one's to complete: in a store of
    /// one run every `finishing` job; in a shared store those whose lease ran out, taken over.
    func abandonedFinishing() throws -> [JobRecord]
    /// Extends this worker's leases; returns the jobs it no longer holds, whose tasks must
    /// stop. A store without leases returns none.
    func renewLeases() throws -> Set<String>
    /// How long a claim holds without renewal; nil when claims never expire (one run per
    /// store, kept by the run lock).
    var leaseSeconds: Double? { get }
    /// Whether the run should gather free slots into groups before it claims: true when each
    /// claim costs round trips to a server (see `QueueScheduler.claimSize`).
    var claimsInGroups: Bool { get }
    /// The workers sharing the store, for `status`; none for a store of one run.
    func workers() throws -> [WorkerInfo]
    /// Joins the worker list at the start of a run (nothing to join for a store of one run).
    func enlist() throws
    /// Leaves the worker list at the end of a run.
    func retire() throws
    /// This worker's share of a `--limit-rate` of `rate` bytes per second: the whole rate
    /// for a store of one run; a shared store divides it among the live workers.
    func rateShare(of rate: Int64) throws -> Int64
    /// Records this run's per-host limits that 429s and 503s brought below `maximum` (for
    /// `status`, and for the other workers of a shared store, which take each other's cuts),
    /// replacing this worker's earlier ones. A shared store tells its change feed when a
    /// host's limit is new or lower than this worker's earlier one (a cut).
    func saveHostLimits(_ limits: [String: Int], maximum: Int) throws
    /// The recorded per-host limits below their maximum, each with its worker in a shared store.
    func hostLimits() throws -> [HostLimitInfo]

    // MARK: Hearing of changes

    /// Calls `onChange` (on a thread of the store's) when another process changes what a run
    /// should see at once: jobs added, queued again, held, resumed, cancelled or given a new
    /// priority, the queue's settings (pause, limits), or a worker's host limits, until the feed is stopped. Nil when
    /// this store cannot tell: the run then looks twice a second. A store with a feed also
    /// sends: every such change made through it reaches every feed.
    func changeFeed(onChange: @escaping @Sendable () -> Void) throws -> StoreChangeFeed?
}

/// A store's feed of changes (`QueueStore.changeFeed`).
public protocol StoreChangeFeed: AnyObject, Sendable {
    /// No more calls after a moment (at most a quarter second).
    func stop()
}

extension QueueStore {
    /// Runs `body` for every job in `state` (nil: every job) in the order they were added, a page
    /// at a time: a queue of a million is never held in memory at once. `body` may change the
    /// job's state; the pages go on by sequence number.
    package func forEachJob(in state: JobState?, _ body: (JobRecord) throws -> Void) throws {
        var after: Int64 = 0
        while true {
            let page = try jobs(in: state, after: after, limit: 1_000)
            guard let last = page.last else { return }
            for job in page { try body(job) }
            after = last.seq
        }
    }

    /// Whether the whole queue is paused (`settings().paused`).
    package func isQueuePaused() throws -> Bool { try settings().paused }

    /// Pauses or resumes the whole queue.
    package func setQueuePaused(_ paused: Bool) throws { try setSetting(.paused, to: paused ? "1" : nil) }

    /// Pauses the whole queue: nothing new starts, and unless `finishRunning` the jobs under way
    /// are held too (their runners stop them within a second). Returns how many were held.
    /// What `transferd pause --all` and the control API's POST /v1/pause do.
    package func pauseQueue(finishRunning: Bool) throws -> Int {
        try setQueuePaused(true)
        guard !finishRunning else { return 0 }
        var stopping = 0
        try forEachJob(in: .running) { job in
            if try hold(job.id) == .running { stopping += 1 }
        }
        return stopping
    }

    /// The whole queue runs again and every held job is queued again. Returns whether the queue
    /// was paused and how many held jobs were queued. What `transferd resume --all` and POST
    /// /v1/resume do.
    package func resumeQueue() throws -> (wasPaused: Bool, resumed: Int) {
        let wasPaused = try isQueuePaused()
        try setQueuePaused(false)
        var resumed = 0
        try forEachJob(in: .held) { job in
            if try unhold(job.id) == .held { resumed += 1 }
        }
        return (wasPaused, resumed)
    }

    /// A priority ahead of every job a run would take now (queued and waiting ones): one above
    /// the highest of theirs, 0 when none waits. What "run it next" sets.
    package func priorityAheadOfWaitingJobs() throws -> Int {
        let first = try [JobState.queued, .waiting].compactMap { try jobs(in: $0, firstInClaimOrder: 1).first?.spec.priority }
        guard let highest = first.max() else { return 0 }
        return highest == .max ? highest : highest + 1
    }

    /// `claimRunnable` for callers that only say yes or no (each taken job counted as its own
    /// `connections`, or 1).
    package func claimRunnable(limit: Int, now: Date, excludingHosts: Set<String>,
                              accept: (ClaimCandidate) -> Bool) throws -> [JobRecord] {
        try claimRunnable(limit: limit, now: now, excludingHosts: excludingHosts) { (candidate: ClaimCandidate) -> Int? in
            accept(candidate) ? (candidate.connections ?? 1) : nil
        }
    }
}
