import Foundation

/// Where a job is in its life:
/// `queued → running → (waiting → running)* → finishing → done | failed | cancelled`,
/// with `paused` for jobs stopped by a shutdown (resumed by the next run) and `held` for
/// jobs a person paused (`transferd pause`: nothing starts them until `transferd resume`).
/// `finishing` is brief: the file is complete, verified and synced, and is
/// being renamed into place; a run that dies there completes it next time.
public enum JobState: String, Codable, Sendable, CaseIterable {
    case queued, running, waiting, paused, held, finishing, done, failed, cancelled

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

    public init(seq: Int64, spec: JobSpec, state: JobState, attempts: Int = 0, nextAttemptAt: Date? = nil,
                lastError: String? = nil, bytesDone: Int64 = 0, bytesTotal: Int64? = nil, speed: Double? = nil,
                sha256: String? = nil, sourceFile: String, createdAt: Date, startedAt: Date? = nil, finishedAt: Date? = nil,
                cancelRequested: Bool = false, checkpoint: String? = nil, worker: String? = nil, hook: String? = nil) {
        self.seq = seq
        self.spec = spec
        self.state = state
        self.attempts = attempts
        self.nextAttemptAt = nextAttemptAt
        self.lastError = lastError
        self.bytesDone = bytesDone
        self.bytesTotal = bytesTotal
        self.speed = speed
        self.sha256 = sha256
        self.sourceFile = sourceFile
        self.createdAt = createdAt
        self.startedAt = startedAt
        self.finishedAt = finishedAt
        self.cancelRequested = cancelRequested
        self.checkpoint = checkpoint
        self.worker = worker
        self.hook = hook
    }
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

    package init(_ list: LargeURLList) {
        fileName = list.name
        contentHash = list.contentHash
        jobs = .large(list)
    }

    /// Whether the jobs are a large list's, read as the store takes them.
    package var isLarge: Bool {
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
    public static func isSameJob(_ job: JobSpec, storedSpec: String?) -> Bool {
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

/// A host whose connection limit a run lowered after 429s or 503s, as `status` shows it.
public struct HostLimitInfo: Sendable, Equatable {
    public var host: String
    public var limit: Int
    public var maximum: Int
    /// The worker of a shared store that keeps this limit.
    public var worker: String?

    public init(host: String, limit: Int, maximum: Int, worker: String? = nil) {
        self.host = host
        self.limit = limit
        self.maximum = maximum
        self.worker = worker
    }
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

    public init(name: String, host: String, pid: Int, lastHeartbeat: Date, secondsSinceHeartbeat: Double, jobsHeld: Int) {
        self.name = name
        self.host = host
        self.pid = pid
        self.lastHeartbeat = lastHeartbeat
        self.secondsSinceHeartbeat = secondsSinceHeartbeat
        self.jobsHeld = jobsHeld
    }
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

    public init(id: String, state: JobState, url: String, destination: String?, bytes: Int64?, sha256: String?,
                attempts: Int, lastError: String?, startedAt: Date?, finishedAt: Date?) {
        self.id = id
        self.state = state
        self.url = url
        self.destination = destination
        self.bytes = bytes
        self.sha256 = sha256
        self.attempts = attempts
        self.lastError = lastError
        self.startedAt = startedAt
        self.finishedAt = finishedAt
    }
}

/// A runnable job as the scheduler weighs it, before its spec is read.
public struct ClaimCandidate: Sendable, Equatable {
    public var id: String
    public var host: String
    /// The job's own range connections, if it sets them.
    public var connections: Int?
    /// Connections other workers of a shared store hold on the host now.
    public var heldElsewhere = 0

    public init(id: String, host: String, connections: Int? = nil, heldElsewhere: Int = 0) {
        self.id = id
        self.host = host
        self.connections = connections
        self.heldElsewhere = heldElsewhere
    }
}
