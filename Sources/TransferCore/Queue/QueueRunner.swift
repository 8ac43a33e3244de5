import Foundation

/// Works a queue: ingests job files, claims runnable jobs under the limits,
/// runs them, records every outcome, and stops when nothing is left to run
/// (or keeps watching with `watch`).
///
/// One loop owns the decisions; jobs run as tasks and report back through a
/// mailbox (`Wake`). Its cost per step follows the active jobs: claiming asks
/// the store's index for as many jobs as there are free slots.
///
/// By concern: this file holds the loop, claiming and what each job's outcome
/// records; `QueueRunner+DurableBatch` makes finished downloads durable and
/// puts them in place; `QueueRunner+Recovery` completes what a dead run left
/// finishing; `QueueRunner+Steering` keeps leases, saves progress and follows
/// the queue's settings and a person's stops. What a job's end owes its hooks
/// is settled in one way everywhere (`OwedHooks`); how it runs is its
/// executor's (`Executors/`).
// @unchecked: its mutable state (active jobs, pending batches, counters) is touched only by the run loop
// (`run()`, one task reading the mailbox); job tasks and the flusher reach it only through `post`.
public final class QueueRunner: @unchecked Sendable {
    enum Wake: Sendable {
        case tick
        case files
        /// Jobs were added or re-queued in the store directly (the control API).
        case storeChanged
        case stop
        case finished(String, JobOutcome)
        /// An event from a job's task (an upload's own retry), passed on in order.
        case event(QueueEvent)
        /// A batch of finished downloads was made durable, renamed and recorded done (or that failed);
        /// the jobs whose rename failed are listed with the reason, and were recorded failed; the
        /// jobs a shared store gave to another worker were left alone.
        case flushed([PendingDone], Flushed, Error?)
    }

    /// A finished download waiting for the next durable batch.
    // Holds an ActiveJob (see there) and a DownloadResult value; it is handed from the loop to the
    // flusher and back, never used by both at once.
    struct PendingDone: Sendable {
        let job: ActiveJob
        let result: DownloadResult
        let elapsed: TimeInterval?
    }

    /// What a durable batch came to, besides the jobs recorded done.
    struct Flushed: Sendable {
        /// Jobs whose rename failed, with the reason (recorded failed).
        var renameFailures: [String: String] = [:]
        /// Jobs this worker no longer held: neither renamed nor recorded.
        var lost: Set<String> = []
        /// Jobs a user cancelled while they were being renamed: in place, but recorded cancelled.
        var cancelled: Set<String> = []
    }

    enum JobOutcome: Sendable {
        case done(DownloadResult)
        /// A job that made its own results durable finished: an upload (nothing
        /// local to sync), or a prefix download (each file synced as it was saved).
        case completed(size: Int64)
        /// `throttled`: the server refused with 429 or 503 (the host's limit adapts).
        case retry(delay: TimeInterval, reason: String, failures: Int, throttled: Bool)
        case failed(String)
        case interrupted
        case cancelled

        /// A job that waits `deferred.delay` before its next attempt.
        static func waiting(_ deferred: DownloadDeferred) -> JobOutcome {
            .retry(delay: deferred.delay, reason: deferred.reason, failures: deferred.failures, throttled: deferred.throttled)
        }
    }

    /// A job being transferred.
    // What job tasks share with the run loop (`engine`, `cancelledByUser`, `uploadProgress`) and what
    // the loop alone uses (`task`, `progress`) is each in a `Locked` box.
    final class ActiveJob: Sendable {
        let record: JobRecord
        let connections: Int
        /// The per-host limit's key, worked out once.
        let host: String
        /// The job's task, held to cancel it (the run loop's only).
        let task = Locked<Task<Void, Never>?>(nil)
        let engine = Locked<DownloadEngine?>(nil)
        /// The last progress seen and when, for the speed (the run loop's only).
        let progress = Locked((snapshot: ProgressSnapshot(bytesDone: 0, bytesTotal: nil, speed: 0), time: Date()))
        let cancelledByUser = Locked(false)
        /// A person paused it (`transferd pause`): stopped, its checkpoint and partial file kept.
        let heldByUser = Locked(false)
        /// A shared store gave the job to another worker: nothing more is recorded for it.
        let leaseLost = Locked(false)
        /// When it started (system uptime), to tell refusals of old requests from new ones.
        let startedUptime = ProcessInfo.processInfo.systemUptime
        /// Bytes sent and total of an upload, as its engine reports them.
        let uploadProgress = Locked<(sent: Int64, total: Int64?)?>(nil)
        /// When the claim that took it was sent (`LeaseClock`).
        let claimSentAt: Double
        /// The rate limit its job file gave (`record` holds the one it runs under).
        let fileRate: Int64?
        init(record: JobRecord, connections: Int, claimSentAt: Double, fileRate: Int64? = nil) {
            self.record = record
            self.fileRate = fileRate
            self.connections = connections
            self.host = record.spec.host
            self.claimSentAt = claimSentAt
        }

        /// Whether no other worker can hold it yet (see `LeaseClock`); always false without a lease.
        func certainlyHeld(lease: Double?) -> Bool {
            guard let lease else { return false }
            return LeaseClock.certainlyHeld(claimSentAt: claimSentAt, now: LeaseClock.now(), lease: lease)
        }
    }

    let layout: QueueLayout
    let store: QueueStore
    let options: RunOptions
    let onEvent: @Sendable (QueueEvent) -> Void
    let transports: TransportPool
    /// The run's buckets, downloads' and uploads': their rates follow `--limit-rate` or the
    /// queue's `rate_limit` setting (`transferd limit`), changed while the run goes on.
    let bandwidth = RunBandwidth()
    let results: ResultFiles
    /// The loop's mailbox: job tasks, the flusher, the ticker and the watcher post here.
    let post = Mailbox<Wake>()
    var active: [String: ActiveJob] = [:]
    /// What the executors of the job kinds take from this run.
    let context: ExecutionContext
    /// Finished downloads whose "done" is committed in the next batch, after one filesystem sync.
    var pendingDone: [PendingDone] = []
    /// A batch being made durable off the loop (at most one at a time).
    var flushing = false
    /// The batch the flusher holds.
    var flushingBatch: [PendingDone] = []
    let flusher = DispatchQueue(label: "transferd.queue.flush")
    var lastFlush = Date()
    var rejectedFiles = 0
    /// Job files whose result files are out of date.
    var changedSources: Set<String> = []
    var lastResultUpdate = Date()
    var lastProgressSave = Date.distantPast
    /// When steering (settings, stops) was last read, and how often it is (seconds).
    var lastSteeringRead = Date.distantPast
    var steeringInterval: TimeInterval = 0.5
    /// The decisions: claims, per-host limits, busy destinations, what outcomes become.
    var scheduler: QueueScheduler
    /// Jobs paused by this run's shutdown, reported together at the end.
    var pausedIDs: [String] = []
    /// Whether the whole queue is paused (`transferd pause --all`): nothing is claimed. Read at
    /// the start and with each progress save (twice a second).
    var queuePaused = false
    /// The queue's settings as last read (with the stops, twice a second).
    var settings = QueueSettings()
    /// The limit the settings or `--limit-rate` ask for now, before a fleet's share.
    var wantedLimit: RateLimit?
    /// When this worker's leases were last renewed (a shared store's).
    var lastLeaseRenewal = Date()
    /// When finishing jobs of workers that died were last looked for (a shared store's).
    var lastFinishingSweep = Date()
    /// Finishing jobs of a dead run whose partial file another process holds, by id: tried
    /// again every `busyFinishingRetry` seconds; the run does not end before they are.
    var busyFinishing: [String: JobRecord] = [:]
    var lastBusyFinishingTry = Date()
    static let busyFinishingRetry: TimeInterval = 5

    /// The limits last written to the store (for `status`).
    var savedHostLimits: [String: Int] = [:]
    /// The maximum they were saved against (`--per-host`, or the queue's setting).
    var savedHostMaximum = 0
    /// Other workers' host limits at the last look (`adoptFleetHostCuts`), by worker and host.
    var fleetHostLimitsSeen: [String: Int] = [:]
    /// Runs the hooks of jobs that ended (`on_done`, `on_failed`, `notify`).
    let hooks: HookRunner

    public init(layout: QueueLayout, store: QueueStore, options: RunOptions,
                onEvent: @escaping @Sendable (QueueEvent) -> Void = { _ in }) {
        self.layout = layout
        self.store = store
        self.options = options
        self.onEvent = onEvent
        self.transports = TransportPool(log: options.requestLog)
        self.results = ResultFiles(layout: layout, store: store)
        self.scheduler = QueueScheduler(maxJobs: options.maxJobs, defaultConnections: options.connections,
                                        maxConnectionsPerHost: options.maxConnectionsPerHost, claimsInGroups: store.claimsInGroups,
                                        heldFilesLimit: Self.heldFilesLimit())
        self.hooks = HookRunner(store: store, layout: layout, hooks: options.hooks, notifyBaseDelay: options.notifyBaseDelay)
        self.context = ExecutionContext(layout: layout, store: store, options: options, transports: transports, bandwidth: bandwidth,
                                        environment: ProcessInfo.processInfo.environment, post: post)
    }

    /// A quarter of the files this process may open: what running and finished downloads may
    /// hold open at once (`QueueScheduler.heldFilesLimit`), the rest left for sockets, the store
    /// and the files a job reads.
    static func heldFilesLimit() -> Int {
        var files = rlimit()
        #if canImport(Glibc)
        let found = getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &files) == 0
        #else
        let found = getrlimit(RLIMIT_NOFILE, &files) == 0
        #endif
        guard found, files.rlim_cur != rlim_t.max else { return .max } // RLIM_INFINITY
        return max(2, Int(clamping: files.rlim_cur / 4))
    }

    /// Asks the run to stop: no new jobs; running ones checkpoint and pause.
    public func stop() { post.yield(.stop) }

    /// Tells the run that jobs were added to the store or re-queued, so it claims now.
    public func storeChanged() { post.yield(.storeChanged) }

    /// Each host's connections in use and its limit now (refreshed four times a second).
    package var hostUse: [HostUse] { publishedHostUse.current }
    let publishedHostUse = Locked<[HostUse]>([])

    /// Runs the queue. The loop, and with it every store call (SQLite, libpq, a reconnect's
    /// backoff), runs on a thread of its own, never on a cooperative thread: the jobs' tasks,
    /// which move the bytes, have those to themselves.
    public func run() async throws -> RunSummary {
        #if os(Linux)
        let loopThread = DedicatedThreadExecutor(name: "transferd.run-loop")
        defer { loopThread.stop() }
        return try await withTaskExecutorPreference(loopThread) { try await runLoop() }
        #else
        guard #available(macOS 15, *) else { return try await runLoop() }
        let loopThread = DedicatedThreadExecutor(name: "transferd.run-loop")
        defer { loopThread.stop() }
        return try await withTaskExecutorPreference(loopThread) { try await runLoop() }
        #endif
    }

    func runLoop() async throws -> RunSummary {
        var summary = RunSummary()
        try store.enlist()
        // Limits an earlier process under this name left (killed before it could clear them).
        try store.saveHostLimits([:], maximum: scheduler.hostLimits.maximum)
        settings = try store.settings()
        try applySettings(renewingShare: true)
        try completeFinishing(reportingBusy: false)
        _ = try store.recoverInterrupted()
        // Hooks an earlier process owed and did not run (it was killed): at least once.
        try hooks.startLeftovers()
        let counts = try store.counts()
        queuePaused = settings.paused
        onEvent(.runStarted(pending: [JobState.queued, .waiting, .paused].reduce(0) { $0 + (counts[$1] ?? 0) }))
        // Finishing jobs found above whose partial file another process writes, now that the run has started.
        for job in busyFinishing.values { onEvent(.retrying(Self.busyFinishingReport(job))) }
        try ingest()
        let ticker = Task { [post] in
            while !Task.isCancelled {
                try? await Task.sleep(nanoseconds: 250_000_000)
                post.yield(.tick)
            }
        }
        defer { ticker.cancel() }
        let watcher = options.watch ? DirectoryWatcher(path: layout.directory) { [post] in post.yield(.files) } : nil
        defer { watcher?.stop() }
        // Another process's change (jobs added, a pause, a limit) is heard at once where the store
        // can tell; its steering is then read only now and then besides.
        // Only faster: a feed that cannot be had (no connection left for it) leaves the looks.
        let feed: StoreChangeFeed?
        do {
            feed = try store.changeFeed { [post] in post.yield(.storeChanged) }
        } catch {
            feed = nil
            options.requestLog?("no change feed from the store (\(error)); steering is read twice a second instead")
        }
        defer { feed?.stop() }
        steeringInterval = feed == nil ? 0.5 : Self.steeringIntervalWithFeed

        var stopping = false
        post.yield(.tick)
        do {
            reading: while true {
                // Cancelling the task that runs the loop stops the run as a signal does (once: a
                // cancelled task's handler runs at once, and a .stop in every pass would spin).
                let wakes = stopping ? await post.next()
                    : await withTaskCancellationHandler { await post.next() } onCancel: { [post] in post.yield(.stop) }
                for wake in wakes {
                    switch wake {
                    case .tick:
                        try renewLeasesIfDue()
                        scheduler.timePassed(now: ProcessInfo.processInfo.systemUptime)
                        if !busyFinishing.isEmpty && Date().timeIntervalSince(lastBusyFinishingTry) >= Self.busyFinishingRetry {
                            try complete(Array(busyFinishing.values))
                        }
                        try saveProgressAndHonourStops()
                        if Date().timeIntervalSince(lastResultUpdate) >= 2 { try updateResultFiles() }
                        let use = scheduler.hostUse
                        publishedHostUse.withLock { $0 = use }
                    case .storeChanged:
                        scheduler.somethingChanged()
                        try readSteering()
                    case .files:
                        scheduler.somethingChanged()
                        if !stopping { try ingest() }
                    case .stop:
                        if !stopping {
                            stopping = true
                            summary.interrupted = true
                            for job in active.values { job.task.current?.cancel() }
                        }
                    case .finished(let id, let outcome):
                        if let job = active.removeValue(forKey: id) {
                            // The job holds its task and engine, which hold the job (the task's closure,
                            // the engine's checkpoint store): without this every finished job stayed in
                            // memory (15 KiB each; 183 MiB of RSS after 10,000 jobs, by heaptrack the
                            // tasks' frames, the jobs and their engines).
                            job.task.withLock { $0 = nil }
                            job.engine.withLock { $0 = nil }
                            try record(outcome, for: job, into: &summary)
                        }
                    case .event(let event):
                        onEvent(event)
                    case .flushed(let batch, let flushed, let error):
                        flushing = false
                        flushingBatch = []
                        scheduler.renamed(Set(batch.map(\.job.record.id)))
                        if let error { throw error }
                        recordDone(batch, flushed, into: &summary)
                    }
                }
                // Once for everything read: finished jobs that arrived together make one claim.
                if !stopping { try fillSlots() }
                if !pendingDone.isEmpty && !flushing && (active.isEmpty || stopping || Date().timeIntervalSince(lastFlush) >= 0.05) {
                    startFlush()
                }
                if active.isEmpty && pendingDone.isEmpty && !flushing {
                    if stopping {
                        if !pausedIDs.isEmpty { onEvent(.paused(ids: pausedIDs)) }
                        break reading
                    }
                    // A paused queue runs nothing more until it is resumed: without --watch the run ends.
                    if !options.watch, busyFinishing.isEmpty, try queuePaused || store.nextWakeup() == nil { break reading }
                }
            }
        } catch {
            // The loop failed (the store went away past --store-outage, say): no job task may
            // outlive it, and the user learns what this run did before it stopped.
            for job in active.values { job.task.current?.cancel() }
            throw RunAbandoned(summary: summary, running: active.count, cause: error)
        }
        try updateResultFiles()
        let endCounts = try store.counts()
        summary.failedInStore = endCounts[.failed] ?? 0
        summary.heldInStore = endCounts[.held] ?? 0
        summary.queuePaused = try store.isQueuePaused()
        summary.runnableLeft = [JobState.queued, .waiting, .paused].reduce(0) { $0 + (endCounts[$1] ?? 0) }
        summary.rejectedFiles = rejectedFiles
        // A limit is this run's lesson; the next run starts from the configured maximum.
        try store.saveHostLimits([:], maximum: scheduler.hostLimits.maximum)
        try store.retire()
        // Hooks under way finish (each within its timeout); a second Ctrl-C leaves them owed to the next run.
        hooks.wait(timeout: options.hooks.timeout + 5 + Double(HookRunner.notifyAttempts) * 30)
        return summary
    }

    // MARK: Steps

    func ingest() throws {
        let report = try QueueIngestor(layout: layout, store: store, allowsCommands: options.hooks.allowJobCommands).ingestAll()
        rejectedFiles += report.rejected.count
        if report.files > 0 {
            onEvent(.ingested(files: report.files, jobs: report.jobsAdded,
                              rejected: report.rejected.map { RejectedFile(file: $0.file, error: $0.errors) }))
        }
    }

    func fillSlots() throws {
        // A worker that was frozen learns what it lost before it claims anything.
        try renewLeasesIfDue()
        guard !queuePaused else { return }
        let now = ProcessInfo.processInfo.systemUptime
        guard let free = scheduler.claimSize(now: now) else { return }
        var round = scheduler.claimRound()
        let claimSentAt = LeaseClock.now()
        let claimed = try store.claimRunnable(limit: free, now: Date(), excludingHosts: round.fullHosts) { candidate in
            round.accept(candidate)
        }
        scheduler.claimed(found: claimed.count, asked: free, in: round, now: now)
        for record in claimed {
            // Already running here (a shared store's expiry sweep queued a job this worker still
            // runs, which only a database clock that stepped by half a lease can do): its task
            // goes on, under the new claim's epoch; a second task would write the same file.
            if let earlier = active[record.id] {
                // Resumed while the attempt a person paused is still stopping: it starts once that
                // one has ended, a second later.
                if earlier.heldByUser.current {
                    try store.scheduleRetry(record.id, at: Date().addingTimeInterval(1),
                                            error: "resumed while its paused attempt was still stopping", attempts: record.attempts)
                }
                continue
            }
            // Two jobs writing one file would share its partial file: the later one waits its turn.
            if record.spec.kind == .download, let destination = record.spec.destination,
               let holder = scheduler.writer(of: destination) {
                try store.scheduleRetry(record.id, at: Date().addingTimeInterval(1),
                                        error: "waits for job \(holder), which writes the same destination \(destination)",
                                        attempts: record.attempts)
                continue
            }
            start(record, claimSentAt: claimSentAt)
        }
    }

    func start(_ claimed: JobRecord, claimSentAt: Double) {
        // A rate a person set for this job (`transferd limit --job`) is its limit for this attempt.
        var record = claimed
        record.spec.limitRate = settings.rate(of: record.id, file: claimed.spec.limitRate)
        let job = ActiveJob(record: record, connections: scheduler.connections(jobSetting: record.spec.connections),
                            claimSentAt: claimSentAt, fileRate: claimed.spec.limitRate)
        active[record.id] = job
        scheduler.started(record.id, .init(host: job.host, connections: job.connections,
                                           destination: record.spec.kind == .download ? record.spec.destination : nil))
        onEvent(.started(JobStarted(id: record.id, kind: record.spec.kind.rawValue, name: record.spec.displayName,
                                    url: Self.shownURL(record.spec), destination: record.spec.destination,
                                    bytesDone: Self.resumesFrom(record), bytesTotal: record.bytesTotal ?? Self.sourceSize(record.spec),
                                    attempt: record.attempts + 1)))
        let executor = context.executor(for: record.spec)
        // On the cooperative threads, not the loop's (an unstructured task does not take its preference).
        let id = record.id
        let task = Task { [post] in
            let outcome = await executor.execute(job)
            post.yield(.finished(id, outcome))
        }
        job.task.withLock { $0 = task }
    }

    func record(_ outcome: JobOutcome, for job: ActiveJob, into summary: inout RunSummary) throws {
        let record = job.record
        if job.heldByUser.current {
            // A person paused it: the store holds it (`held`) with its checkpoint, and its partial
            // file stays; whatever the attempt came to is not recorded (the store would refuse it).
            scheduler.forget(record.id)
            summary.held += 1
            onEvent(.held(ids: [record.id]))
            return
        }
        if job.leaseLost.current {
            // Another worker holds the job now; whatever this one would record is fenced off anyway.
            scheduler.forget(record.id)
            onEvent(.paused(ids: [record.id]))
            return
        }
        let elapsed = record.startedAt.map { Date().timeIntervalSince($0) }
        func finished(_ state: JobState, bytes: Int64? = nil, error: String? = nil) -> QueueEvent {
            Self.finishedEvent(record, state: state, bytes: bytes, elapsed: elapsed, error: error)
        }
        var serving = 0
        if case .retry(_, _, _, true) = outcome {
            // What the refusing host was seen serving: the connections receiving data.
            serving = active.values.filter { other in
                other.host == job.host && (other.engine.current?.bytesReceived ?? 0) > 0
            }.reduce(0) { $0 + $1.connections }
        }
        switch scheduler.settle(record.id, outcome: outcome, attempts: record.attempts, sent: job.startedUptime,
                                now: ProcessInfo.processInfo.systemUptime, serving: serving) {
        case .awaitBatch:
            guard case .done(let result) = outcome else { return }
            pendingDone.append(PendingDone(job: job, result: result, elapsed: elapsed))
            onEvent(.completing(id: record.id, bytes: result.size))
        case .done(let size):
            let owed = try hooks.owing(hooks.due(record, .done, bytes: size).map { [$0] } ?? [])
            let missed = try store.finishDone([(record.id, size, nil)], at: Date())
            changedSources.insert(record.sourceFile)
            owed.settle { !missed.contains($0) }
            if missed.isEmpty {
                summary.done += 1
                onEvent(finished(.done, bytes: size))
                return
            }
            if try !cancelledMeanwhile(missed).isEmpty {
                summary.cancelled += 1
                onEvent(finished(.cancelled, error: "cancelled by the user"))
            } else {
                onEvent(.paused(ids: [record.id]))
            }
        case .retry(let delay, let reason, let attempts):
            // A server may echo a secret back in its message: scrubbed before it is stored or shown.
            let reason = Redaction.message(reason)
            try store.scheduleRetry(record.id, at: Date().addingTimeInterval(delay), error: reason, attempts: attempts)
            if case .retry(_, _, let failures, _) = outcome {
                onEvent(.retrying(JobRetry(id: record.id, attempt: failures, delay: delay, reason: reason)))
            }
        case .fail(let message):
            let message = Redaction.message(message)
            let owed = try hooks.owing(hooks.due(record, .failed, error: message).map { [$0] } ?? [])
            let recorded = try store.finish(record.id, state: .failed, error: message, bytes: nil, sha256: nil, at: Date())
            changedSources.insert(record.sourceFile)
            // Not this worker's end to record (cancelled meanwhile, or another worker holds the
            // job now): no failed hook runs for it.
            owed.settle { _ in recorded }
            guard recorded else {
                if try !cancelledMeanwhile([record.id]).isEmpty {
                    summary.cancelled += 1
                    onEvent(finished(.cancelled, error: "cancelled by the user"))
                } else {
                    onEvent(.paused(ids: [record.id]))
                }
                return
            }
            summary.failed += 1
            onEvent(finished(.failed, error: message))
        case .cancelled:
            try store.finish(record.id, state: .cancelled, error: "cancelled by the user", bytes: nil, sha256: nil, at: Date())
            changedSources.insert(record.sourceFile)
            summary.cancelled += 1
            onEvent(finished(.cancelled, error: "cancelled by the user"))
        case .pause:
            try store.pause([record.id])
            pausedIDs.append(record.id)
        }
    }

    func updateResultFiles() throws {
        lastResultUpdate = Date()
        guard !changedSources.isEmpty else { return }
        try results.update(sourceFiles: changedSources)
        changedSources = []
    }

}

extension QueueRunner {
    /// The URL as events show it: secrets in the query or user info redacted.
    static func shownURL(_ spec: JobSpec) -> String {
        Redaction.url(string: spec.url)
    }

    /// The event for a job that ended.
    static func finishedEvent(_ record: JobRecord, state: JobState, bytes: Int64?, elapsed: TimeInterval?, error: String? = nil,
                              sha256: String? = nil, skipped: Bool = false) -> QueueEvent {
        .finished(JobFinished(id: record.id, state: state, name: record.spec.displayName, url: shownURL(record.spec),
                              destination: record.spec.destination, bytes: bytes, elapsed: elapsed,
                              sha256: sha256, skipped: skipped, error: error))
    }

    /// Bytes an attempt starts with: what earlier runs left for downloads and
    /// S3 and tus uploads (they resume); none for a PUT or a form (sent again whole).
    static func resumesFrom(_ record: JobRecord) -> Int64 {
        record.spec.kind == .put || record.spec.kind == .form ? 0 : record.bytesDone
    }

    /// An upload's size, known before it starts (nil for downloads and directories).
    static func sourceSize(_ spec: JobSpec) -> Int64? {
        guard spec.kind == .put || spec.kind == .s3Upload || spec.kind == .tus || spec.kind == .resumable, let source = spec.source else { return nil }
        var info = stat()
        guard stat(source, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
        return Int64(info.st_size)
    }
}

