import Foundation

/// Runs one job to an outcome. Never throws: every failure becomes an outcome
/// the run loop records.
protocol JobExecutor: Sendable {
    func execute(_ job: QueueRunner.ActiveJob) async -> QueueRunner.JobOutcome
}

/// What every executor takes from its run.
struct ExecutionContext: Sendable {
    let layout: QueueLayout
    let store: QueueStore
    let options: RunOptions
    let transports: TransportPool
    /// The run's buckets (`RunBandwidth`): downloads take from `down`, uploads from `up`.
    let bandwidth: RunBandwidth
    /// Read once: building the environment dictionary is costly.
    let environment: [String: String]
    /// The run loop's mailbox, for events a job reports while it runs.
    let post: Mailbox<QueueRunner.Wake>

    /// The executor for a job of this kind.
    func executor(for spec: JobSpec) -> JobExecutor {
        if spec.kind == .s3Copy { return S3CopyExecutor(context: self) }
        guard spec.kind == .download else { return UploadExecutor(context: self) }
        if let prefix = S3Prefix(spec.url) { return S3PrefixExecutor(context: self, prefix: prefix) }
        return DownloadExecutor(context: self)
    }

    /// Creates a destination's folders inside the root, through no symbolic link
    /// (`ConfinedPath`), checked for every job: a folder swapped for a link
    /// during the run is caught by the next job that uses it.
    func ensureFolder(of destination: String) throws {
        try ConfinedPath.check(destination, root: layout.root, create: true)
    }

    /// A download job's speed floor: its own `speed_limit` and `speed_time` over the run's
    /// `--speed-limit` and `--speed-time` (`speed_limit: "0"`: none).
    func lowSpeed(_ spec: JobSpec) -> LowSpeedLimit? {
        if spec.speedLimit == 0 { return nil }
        guard spec.speedLimit != nil || spec.speedTime != nil else { return options.lowSpeed }
        var limit = options.lowSpeed ?? .default
        if let bytes = spec.speedLimit { limit.bytesPerSecond = bytes }
        if let seconds = spec.speedTime { limit.seconds = TimeInterval(seconds) }
        return limit
    }

    /// An upload job's speed: its own `limit_rate` and the run's upload bucket, held from the
    /// start so that a limit set later (`transferd limit`) reaches it too. A backend that cannot
    /// cap what it sends gets the bucket only while a limit applies, and then refuses the
    /// upload (`TransportError.unsupported`, which fails the job with its reason).
    func sendRate(_ spec: JobSpec, transport: Transport) -> SendRate {
        let limit = bandwidth.limit
        let attach = transport.capabilities.contains(.sendRateLimit) || limit.total != nil || limit.up != nil
        return SendRate(bytesPerSecond: spec.limitRate, shared: attach ? bandwidth.up : nil)
    }

    /// Keeps an upload's latest byte count where the progress tick reads it.
    /// and passes its retries on as events (it retries inside its slot).
    func progressRecorder(_ job: QueueRunner.ActiveJob) -> @Sendable (UploadEvent) -> Void {
        { [post] event in
            switch event {
            // A resumed S3 upload starts from its recorded parts (its first
            // report comes after ListParts); a plain upload starts over.
            case .started(let total):
                let resumable = [.s3Upload, .s3Copy, .tus, .resumable].contains(job.record.spec.kind)
                job.uploadProgress.withLock { $0 = (resumable ? min(job.record.bytesDone, total) : 0, total) }
            case .progress(let sent, let total): job.uploadProgress.withLock { $0 = (sent, total) }
            case .retrying(let attempt, let delay, let reason):
                post.yield(.event(.retrying(JobRetry(id: job.record.id, attempt: attempt, delay: delay, reason: reason))))
            }
        }
    }

    /// The job's headers with `${env:NAME}` references filled in (only now, as it runs).
    /// Throws when one breaks `JobHeaderRule` as filled in: a job recorded before the
    /// rule, or a variable holding a line break, fails with the reason instead of sending it.
    func expandedHeaders(_ spec: JobSpec) throws -> HTTPHeaders {
        var headers = HTTPHeaders()
        for (name, value) in spec.headers.sorted(by: { $0.key < $1.key }) {
            let expanded = try EnvironmentReference.expand(value, environment: environment)
            // What came from the environment is a secret wherever it shows up in a log.
            if expanded != value { Redaction.registerSecret(expanded) }
            if let refusal = JobHeaderRule.refusal(name: name, value: expanded) { throw RefusedHeader(refusal: refusal) }
            headers.add(name, expanded)
        }
        return headers
    }
}

/// A job's header that `JobHeaderRule` refuses, found as the job starts.
struct RefusedHeader: Error, CustomStringConvertible {
    let refusal: JobHeaderRule.Refusal
    var description: String { "refused to send the job's headers: \(refusal)" }
}

/// A job's resume state kept in its row. A save the store refuses (another worker
/// holds the job now) marks the job lost and stops the transfer there: a worker
/// that was frozen past its lease writes at most one checkpoint's worth more.
struct JobRowState: Sendable {
    let store: QueueStore
    let job: QueueRunner.ActiveJob

    func load() throws -> String? { try store.checkpoint(for: job.record.id) ?? job.record.checkpoint }

    func save(_ json: String?) throws {
        guard try store.saveCheckpoint(json, for: job.record.id) else {
            job.leaseLost.withLock { $0 = true }
            throw CancellationError()
        }
    }
}

/// An S3 upload's (or prefix download's) resume state kept in the job's row.
struct JobUploadStateStore: UploadStateStore {
    let row: JobRowState

    init(store: QueueStore, job: QueueRunner.ActiveJob) { row = JobRowState(store: store, job: job) }

    func load() throws -> String? { try row.load() }
    func save(_ json: String) throws { try row.save(json) }
    func remove() throws { try row.save(nil) }
}

/// A download's checkpoint kept in the job's row.
struct JobCheckpointStore: CheckpointStore {
    let row: JobRowState

    init(store: QueueStore, job: QueueRunner.ActiveJob) { row = JobRowState(store: store, job: job) }

    /// The checkpoint read with the job, saving a query when the job starts.
    func load() throws -> DownloadCheckpoint? {
        guard let json = row.job.record.checkpoint else { return nil }
        return try? JSONDecoder().decode(DownloadCheckpoint.self, from: Data(json.utf8))
    }

    func save(_ checkpoint: DownloadCheckpoint) throws {
        try row.save(String(decoding: try JSONEncoder().encode(checkpoint), as: UTF8.self))
    }

    func remove() throws {
        // Asked before a partial file is started over. A checkpoint the job's row still holds
        // (its partial file is gone: another machine's disk, or deleted) is cleared first: left
        // there, a run killed before its first checkpoint would resume from it into a new,
        // empty file. In a shared store the write is also fenced, so a worker that lost the
        // job (frozen past its lease) does not truncate the file the worker holding it now
        // writes; a fresh job claimed less than half a lease ago needs neither (no checkpoint,
        // and no other worker can have it yet), which spares one statement for nearly every job.
        let fenced = row.store.leaseSeconds.map { !row.job.certainlyHeld(lease: $0) } ?? false
        if row.job.record.checkpoint != nil || fenced { try row.save(nil) }
    }

    /// Always a write: the checkpoints saved since the job was claimed are not in its record.
    func removeBeforeStartingOver() throws { try row.save(nil) }
}
