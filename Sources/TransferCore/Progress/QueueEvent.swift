import Foundation

/// What a queue run reports, in order, to the sink it is given. TransferCore
/// never draws: the CLI turns these into a live view, plain lines or JSON.
public enum QueueEvent: Sendable, Equatable {
    /// The run began with this many runnable jobs already in the store.
    case runStarted(pending: Int)
    /// Job files were read: `jobs` new jobs, and the files that were refused.
    case ingested(files: Int, jobs: Int, rejected: [RejectedFile])
    case started(JobStarted)
    /// The bytes of every running job (sent about four times a second).
    case progress([JobProgress])
    /// A job's attempt failed and it waits `delay` seconds (it holds no slot meanwhile).
    case retrying(JobRetry)
    /// A download's bytes are all in and its slot is free: its file is made durable (synced,
    /// renamed into place, recorded) with the next batch, and `finished` follows. Until then it
    /// is neither running nor done.
    case completing(id: String, bytes: Int64)
    case finished(JobFinished)
    /// Running jobs stopped by Ctrl-C/SIGTERM, resumable by the next run.
    case paused(ids: [String])
    /// Running jobs a person paused (`transferd pause`): stopped with their progress saved, held
    /// until resumed (`transferd resume`).
    case held(ids: [String])
}

public struct RejectedFile: Sendable, Equatable {
    public var file: String
    public var error: String
    package init(file: String, error: String) {
        self.file = file
        self.error = error
    }
}

public struct JobStarted: Sendable, Equatable {
    public var id: String
    /// `download`, `put`, `form` or `s3-upload`.
    public var kind: String
    /// A short name for the screen: the destination's file name, or the source's.
    public var name: String
    /// The source (downloads) or target (uploads) URL, secrets redacted.
    public var url: String
    public var destination: String?
    /// Bytes already on disk or sent in earlier runs.
    public var bytesDone: Int64
    public var bytesTotal: Int64?
    public var attempt: Int

    package init(id: String, kind: String, name: String, url: String, destination: String?,
                bytesDone: Int64 = 0, bytesTotal: Int64? = nil, attempt: Int = 1) {
        self.id = id
        self.kind = kind
        self.name = name
        self.url = url
        self.destination = destination
        self.bytesDone = bytesDone
        self.bytesTotal = bytesTotal
        self.attempt = attempt
    }
}

public struct JobProgress: Sendable, Equatable {
    public var id: String
    public var bytesDone: Int64
    public var bytesTotal: Int64?
    package init(id: String, bytesDone: Int64, bytesTotal: Int64?) {
        self.id = id
        self.bytesDone = bytesDone
        self.bytesTotal = bytesTotal
    }
}

public struct JobRetry: Sendable, Equatable {
    public var id: String
    /// Failed attempts so far (without progress between them).
    public var attempt: Int
    public var delay: TimeInterval
    public var reason: String
    package init(id: String, attempt: Int, delay: TimeInterval, reason: String) {
        self.id = id
        self.attempt = attempt
        self.delay = delay
        self.reason = reason
    }
}

public struct JobFinished: Sendable, Equatable {
    public var id: String
    /// `.done`, `.failed` or `.cancelled`.
    public var state: JobState
    public var name: String
    public var url: String
    public var destination: String?
    public var bytes: Int64?
    public var elapsed: TimeInterval?
    public var sha256: String?
    /// The destination was already present and identical; nothing was transferred.
    public var skipped: Bool
    public var error: String?
    /// Bytes that were already on disk when this run took the job up (a resumed download):
    /// `bytes` less these is what this run moved. Filled by `RunProgress`, which saw the start.
    public var resumedFrom: Int64 = 0
    /// A download from several mirrors: what each served, and why any was dropped.
    public var mirrors: [MirrorShare] = []

    /// What this run moved of `bytes`.
    public var transferred: Int64? { bytes.map { max(0, $0 - resumedFrom) } }

    package init(id: String, state: JobState, name: String, url: String, destination: String?, bytes: Int64? = nil,
                elapsed: TimeInterval? = nil, sha256: String? = nil, skipped: Bool = false, error: String? = nil) {
        self.id = id
        self.state = state
        self.name = name
        self.url = url
        self.destination = destination
        self.bytes = bytes
        self.elapsed = elapsed
        self.sha256 = sha256
        self.skipped = skipped
        self.error = error
    }
}
