import Foundation

/// Where a job is in its life:
/// `queued → running → (waiting → running)* → finishing → done | failed | cancelled`,
/// with `paused` for jobs stopped by a shutdown (resumed by the next run).
/// `finishing` is brief: the file is complete, verified and synced, and is
/// being renamed into place; a run that dies there completes it next time.
public enum JobState: String, Codable, Sendable, CaseIterable {
    case queued, running, waiting, paused, finishing, done, failed, cancelled

    public var isFinal: Bool { self == .done || self == .failed || self == .cancelled }
}

/// A job as the store holds it: the spec plus its state and progress.
public struct JobRecord: Sendable, Equatable {
    public var seq: Int64
    public var spec: JobSpec
    public var state: JobState
    public var attempts: Int
    public var nextAttemptAt: Date?
    public var lastError: String?
    public var bytesDone: Int64
    public var bytesTotal: Int64?
    public var speed: Double?
    public var sha256: String?
    public var sourceFile: String
    public var createdAt: Date
    public var startedAt: Date?
    public var finishedAt: Date?
    public var cancelRequested: Bool
    /// The resume checkpoint (JSON), read with the job so starting it costs no extra query.
    public var checkpoint: String?
    /// The worker holding the job (a shared store's fleet); nil in a store of one run.
    public var worker: String? = nil
    /// What the job's hook (`on_done`, `on_failed`, `notify`) did, as JSON; nil before it ran.
    public var hook: String? = nil

    public var id: String { spec.id }
}

/// Progress of a running job, as snapshotted into the store for `status`.
public struct ProgressSnapshot: Sendable, Equatable {
    public var bytesDone: Int64
    public var bytesTotal: Int64?
    public var speed: Double

    public init(bytesDone: Int64, bytesTotal: Int64?, speed: Double) {
        self.bytesDone = bytesDone
        self.bytesTotal = bytesTotal
        self.speed = speed
    }
}

/// A job file's jobs, ready for the store: a valid file's, held in memory, or a large URL
/// list's, parsed as the store takes them (`LargeURLList`).
public struct JobFileContent: Sendable {
    public var fileName: String
    /// SHA-256 of the file's bytes: the same content is recorded once.
    public var contentHash: String
    private let jobs: Jobs

    private enum Jobs: Sendable {
        case held([JobSpec])
        case large(LargeURLList)
    }

    public init(fileName: String, contentHash: String, jobs: [JobSpec]) {
        self.fileName = fileName
        self.contentHash = contentHash
        self.jobs = .held(jobs)
    }

    public init(_ list: LargeURLList) {
        fileName = list.name
        contentHash = list.contentHash
        jobs = .large(list)
    }

    /// Whether the jobs are a large list's, read as the store takes them.
    public var isLarge: Bool {
        if case .large = jobs { return true }
        return false
    }

    /// How many jobs the file holds (a large list: when valid).
    public var jobCount: Int {
        switch jobs {
        case .held(let jobs): return jobs.count
        case .large(let list): return list.jobCount
        }
    }

    /// The jobs, up to `size` at a time, in the file's order. A store calls it inside the
    /// file's savepoint: a large list with a mistake throws its `JobFileRejection` after the
    /// batches before the mistake, and the store drops what it recorded of the file.
    public func forEachBatch(of size: Int, _ body: ([JobSpec]) throws -> Void) throws {
        switch jobs {
        case .held(let jobs):
            for start in stride(from: 0, to: jobs.count, by: size) {
                try body(Array(jobs[start..<min(start + size, jobs.count)]))
            }
        case .large(let list):
            try list.forEachBatch(of: size, body)
        }
    }
}

extension JobFileContent {
    /// Whether `job` is the job a store holds under its id (as `storedSpec`): the same job
    /// dropped again is recorded once; a different one makes the store refuse its file.
    static func isSameJob(_ job: JobSpec, storedSpec: String?) -> Bool {
        storedSpec == job.storedJSON || storedSpec.flatMap({ try? JobSpec(stored: $0) }) == job
    }
}

/// What a store made of one job file: a value; the caller words it for people.
public enum IngestResult: Sendable, Equatable {
    case recorded(IngestOutcome)
    /// The whole file was left out: one of its ids belongs to a different job.
    case idTaken(IDConflict)
    /// The whole file was left out: a large list's mistake, found as the store read it.
    case invalid(JobFileRejection)
}

/// A job id a store already holds for a different job.
public struct IDConflict: Error, Sendable, Equatable {
    public var jobID: String
    /// The job file the id's job came from.
    public var storedFile: String?

    public init(jobID: String, storedFile: String?) {
        self.jobID = jobID
        self.storedFile = storedFile
    }
}

public struct IngestOutcome: Sendable, Equatable {
    /// Jobs recorded.
    public var added: Int
    /// Jobs already in the store with the same id and spec.
    public var alreadyKnown: Int
    /// The same content was ingested before; nothing was recorded.
    public var duplicateFile: Bool
    public init(added: Int, alreadyKnown: Int, duplicateFile: Bool) {
        self.added = added
        self.alreadyKnown = alreadyKnown
        self.duplicateFile = duplicateFile
    }
}

/// The persistent queue: the single source of truth for jobs, their states
/// and their resume checkpoints. SQLite is the embedded implementation; the
/// protocol keeps SQL and claiming logic behind it.
public protocol QueueStore: AnyObject, Sendable {
    /// Records several files in one transaction, each file all or nothing: a
    /// file the store refuses (an id taken by another job) is left out alone.
    /// Content seen before is recorded once. Validation and wording are the caller's.
    func ingest(_ files: [JobFileContent]) throws -> [IngestResult]
    /// Jobs left `running` or `paused` by an earlier process become `queued` again.
    func recoverInterrupted() throws -> Int
    /// Marks up to `limit` runnable jobs `running` (by priority, then age) and returns them.
    /// Jobs for `excludingHosts` are passed over; `accept` sees the other candidates
    /// in order and says which to take (per-host limits), with the connections each will
    /// use (nil: not taken). Only taken jobs are read whole.
    func claimRunnable(limit: Int, now: Date, excludingHosts: Set<String>,
                       accept: (ClaimCandidate) -> Int?) throws -> [JobRecord]
    /// Records a job's end.
    /// - Returns: false when it did not: a user cancelled it meanwhile or (a shared store)
    ///   another worker holds it now.
    @discardableResult
    func finish(_ id: String, state: JobState, error: String?, bytes: Int64?, sha256: String?, at: Date) throws -> Bool
    /// Marks many jobs done in one transaction.
    /// - Returns: the jobs it did not mark: a user cancelled them meanwhile, or (a shared
    ///   store) another worker holds them now.
    @discardableResult
    func finishDone(_ jobs: [(id: String, bytes: Int64, sha256: String?)], at: Date) throws -> Set<String>
    /// Marks many jobs `finishing` (complete and synced, about to be renamed into place).
    /// - Returns: the jobs it did not mark, which must not be renamed into place: a shared
    ///   store gave them to another worker (or a user cancelled them).
    @discardableResult
    func markFinishing(_ jobs: [(id: String, bytes: Int64, sha256: String?)]) throws -> Set<String>
    func jobs(in state: JobState) throws -> [JobRecord]
    func scheduleRetry(_ id: String, at: Date, error: String, attempts: Int) throws
    func pause(_ ids: [String]) throws
    func saveProgress(_ snapshots: [String: ProgressSnapshot]) throws
    func job(_ id: String) throws -> JobRecord?
    func jobs() throws -> [JobRecord]
    /// A page of jobs (all, or those in `state`) in the order they were added, after the one
    /// numbered `seq` (0: from the first): the control API's cursor pagination.
    func jobs(in state: JobState?, after seq: Int64, limit: Int) throws -> [JobRecord]
    /// The first `limit` jobs in `state` in the order a claim takes them (priority, then the
    /// order they were added): `status`'s view of a large queue, read through the claim index.
    func jobs(in state: JobState, firstInClaimOrder limit: Int) throws -> [JobRecord]
    func jobs(fromFile name: String) throws -> [JobRecord]
    /// The finished (done, failed, cancelled) jobs of one job file, in order: what its result files list.
    func results(fromFile name: String) throws -> [JobResult]
    func counts() throws -> [JobState: Int]
    /// When the earliest waiting job becomes runnable.
    func nextWakeup() throws -> Date?
    /// Failed or cancelled jobs (all, or those with `id`) go back to `queued`; returns how many.
    func requeue(id: String?) throws -> Int
    /// Cancels a job; a running one is flagged and stopped by its runner. Returns the state it had.
    func cancel(_ id: String) throws -> JobState?
    func cancelRequested(among ids: [String]) throws -> [String]
    func checkpoint(for id: String) throws -> String?
    /// - Returns: false when this worker no longer holds the job (a shared store gave it to
    ///   another): nothing was saved, and the transfer must stop.
    @discardableResult
    func saveCheckpoint(_ json: String?, for id: String) throws -> Bool
    /// Records what a finished job's hook did (JSON), whichever state the job is in now.
    func recordHook(_ json: String, for id: String) throws

    // A store shared by several workers (a fleet) leases what each one claims.

    /// Jobs left `finishing` by a worker that is gone, now held by this one to complete.
    func abandonedFinishing() throws -> [JobRecord]
    /// Extends this worker's leases; returns the jobs it no longer holds (their tasks must stop).
    func renewLeases() throws -> Set<String>
    /// How long a claim holds without renewal (nil: claims never expire, one run per store).
    var leaseSeconds: Double? { get }
    /// Whether the queue should gather free slots into groups before it claims: true when each
    /// claim costs round trips to a server (see `QueueScheduler.claimSize`).
    var claimsInGroups: Bool { get }
    /// The workers sharing the store.
    func workers() throws -> [WorkerInfo]
    /// Records this run's per-host limits that 429s and 503s brought below `maximum` (for `status`).
    func saveHostLimits(_ limits: [String: Int], maximum: Int) throws
    /// The recorded per-host limits below their maximum.
    func hostLimits() throws -> [HostLimitInfo]
    /// This worker's share of a `--limit-rate` of `rate` bytes per second.
    func rateShare(of rate: Int64) throws -> Int64
    /// Joins the worker list at the start of a run.
    func enlist() throws
    /// Leaves the worker list at the end of a run.
    func retire() throws
}

extension QueueStore {
    /// `claimRunnable` for callers that only say yes or no (each taken job counted as its own
    /// `connections`, or 1).
    public func claimRunnable(limit: Int, now: Date, excludingHosts: Set<String>,
                              accept: (ClaimCandidate) -> Bool) throws -> [JobRecord] {
        try claimRunnable(limit: limit, now: now, excludingHosts: excludingHosts) { (candidate: ClaimCandidate) -> Int? in
            accept(candidate) ? (candidate.connections ?? 1) : nil
        }
    }

    /// The configured `--limit-rate`'s share for this worker (a shared store divides it among
    /// the live workers); the whole rate for a store of one run.
    public func rateShare(of rate: Int64) throws -> Int64 { rate }
}

/// One run's store needs no leases: what a run holds is its own until it ends.
extension QueueStore {
    public func abandonedFinishing() throws -> [JobRecord] { try jobs(in: .finishing) }
    public func renewLeases() throws -> Set<String> { [] }
    public var leaseSeconds: Double? { nil }
    /// A claim in the run's own file costs a fraction of a millisecond: each free slot is filled at once.
    public var claimsInGroups: Bool { false }
    public func workers() throws -> [WorkerInfo] { [] }
    public func enlist() throws {}
    public func retire() throws {}
}

/// A host whose connection limit a run lowered after 429s or 503s, as `status` shows it.
public struct HostLimitInfo: Sendable, Equatable {
    public var host: String
    public var limit: Int
    public var maximum: Int
    /// The worker of a shared store that keeps this limit.
    public var worker: String?
}

/// A worker of a shared store, as `status` shows it.
public struct WorkerInfo: Sendable, Equatable {
    public var name: String
    public var host: String
    public var pid: Int
    public var lastHeartbeat: Date
    /// By the store's clock, so workers' clocks need not agree.
    public var secondsSinceHeartbeat: Double
    public var jobsHeld: Int
}

/// What a result file lists about one finished job (read without decoding its spec).
public struct JobResult: Sendable, Equatable {
    public var id: String
    public var state: JobState
    public var url: String
    public var destination: String?
    public var bytes: Int64?
    public var sha256: String?
    public var attempts: Int
    public var lastError: String?
    public var startedAt: Date?
    public var finishedAt: Date?
}

/// A runnable job as the scheduler weighs it, before its spec is read.
public struct ClaimCandidate: Sendable, Equatable {
    public var id: String
    public var host: String
    /// The job's own range connections, if it sets them.
    public var connections: Int?
    /// Connections other workers of a shared store hold on the host now.
    public var heldElsewhere = 0
}
