import Foundation

/// Works a queue: ingests job files, claims runnable jobs under the limits,
/// runs them, records every outcome, and stops when nothing is left to run
/// (or keeps watching with `watch`).
///
/// One loop owns the decisions; jobs run as tasks and report back through a
/// mailbox (`Wake`). Its cost per step follows the active jobs: claiming asks
/// the store's index for as many jobs as there are free slots.
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
    // @unchecked: `task`, `progress` and `progressTime` are used by the run loop only; what job tasks share
    // with it (`engine`, `cancelledByUser`, `uploadProgress`) is in `Locked` boxes.
    final class ActiveJob: @unchecked Sendable {
        let record: JobRecord
        let connections: Int
        /// The per-host limit's key, worked out once.
        let host: String
        var task: Task<Void, Never>?
        let engine = Locked<DownloadEngine?>(nil)
        /// The last progress seen, for the speed.
        var progress = ProgressSnapshot(bytesDone: 0, bytesTotal: nil, speed: 0)
        var progressTime = Date()
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
        init(record: JobRecord, connections: Int, claimSentAt: Double) {
            self.record = record
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
    private var active: [String: ActiveJob] = [:]
    /// What the executors of the job kinds take from this run.
    private let context: ExecutionContext
    /// Finished downloads whose "done" is committed in the next batch, after one filesystem sync.
    private var pendingDone: [PendingDone] = []
    /// A batch being made durable off the loop (at most one at a time).
    private var flushing = false
    /// The batch the flusher holds.
    private var flushingBatch: [PendingDone] = []
    private let flusher = DispatchQueue(label: "transferd.queue.flush")
    private var lastFlush = Date()
    private var rejectedFiles = 0
    /// Job files whose result files are out of date.
    private var changedSources: Set<String> = []
    private var lastResultUpdate = Date()
    private var lastProgressSave = Date.distantPast
    /// When steering (settings, stops) was last read, and how often it is (seconds).
    private var lastSteeringRead = Date.distantPast
    private var steeringInterval: TimeInterval = 0.5
    /// The decisions: claims, per-host limits, busy destinations, what outcomes become.
    private var scheduler: QueueScheduler
    /// Jobs paused by this run's shutdown, reported together at the end.
    private var pausedIDs: [String] = []
    /// Whether the whole queue is paused (`transferd pause --all`): nothing is claimed. Read at
    /// the start and with each progress save (twice a second).
    private var queuePaused = false
    /// The queue's settings as last read (with the stops, twice a second).
    private var settings = QueueSettings()
    /// The limit the settings or `--limit-rate` ask for now, before a fleet's share.
    private var wantedLimit: RateLimit?
    /// When this worker's leases were last renewed (a shared store's).
    private var lastLeaseRenewal = Date()
    /// When finishing jobs of workers that died were last looked for (a shared store's).
    private var lastFinishingSweep = Date()
    /// Finishing jobs of a dead run whose partial file another process holds, by id: tried
    /// again every `busyFinishingRetry` seconds; the run does not end before they are.
    private var busyFinishing: [String: JobRecord] = [:]
    private var lastBusyFinishingTry = Date()
    static let busyFinishingRetry: TimeInterval = 5

    /// What a finishing job whose partial file another process writes reports (once).
    private static func busyFinishingReport(_ job: JobRecord) -> JobRetry {
        JobRetry(id: job.id, attempt: job.attempts, delay: busyFinishingRetry,
                 reason: "\(job.spec.destination.map(PartialNames.part(of:)) ?? job.id) is being written by another process; "
                     + "the job stays finishing until it is free, then puts its file in place")
    }

    /// The limits last written to the store (for `status`).
    private var savedHostLimits: [String: Int] = [:]
    /// The maximum they were saved against (`--per-host`, or the queue's setting).
    private var savedHostMaximum = 0
    /// Runs the hooks of jobs that ended (`on_done`, `on_failed`, `notify`).
    private let hooks: HookRunner

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
    public var hostUse: [HostUse] { publishedHostUse.current }
    private let publishedHostUse = Locked<[HostUse]>([])

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

    private func runLoop() async throws -> RunSummary {
        var summary = RunSummary()
        try store.enlist()
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
        let feed = try store.changeFeed { [post] in post.yield(.storeChanged) }
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
                            for job in active.values { job.task?.cancel() }
                        }
                    case .finished(let id, let outcome):
                        if let job = active.removeValue(forKey: id) {
                            // The job holds its task and engine, which hold the job (the task's closure,
                            // the engine's checkpoint store): without this every finished job stayed in
                            // memory (15 KiB each; 183 MiB of RSS after 10,000 jobs, by heaptrack the
                            // tasks' frames, the jobs and their engines).
                            job.task = nil
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
            for job in active.values { job.task?.cancel() }
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

    private func ingest() throws {
        let report = try QueueIngestor(layout: layout, store: store, allowsCommands: options.hooks.allowJobCommands).ingestAll()
        rejectedFiles += report.rejected.count
        if report.files > 0 {
            onEvent(.ingested(files: report.files, jobs: report.jobsAdded,
                              rejected: report.rejected.map { RejectedFile(file: $0.file, error: $0.errors) }))
        }
    }

    private func fillSlots() throws {
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

    private func start(_ record: JobRecord, claimSentAt: Double) {
        let job = ActiveJob(record: record, connections: scheduler.connections(jobSetting: record.spec.connections),
                            claimSentAt: claimSentAt)
        active[record.id] = job
        scheduler.started(record.id, .init(host: job.host, connections: job.connections,
                                           destination: record.spec.kind == .download ? record.spec.destination : nil))
        onEvent(.started(JobStarted(id: record.id, kind: record.spec.kind.rawValue, name: record.spec.displayName,
                                    url: Self.shownURL(record.spec), destination: record.spec.destination,
                                    bytesDone: Self.resumesFrom(record), bytesTotal: record.bytesTotal ?? Self.sourceSize(record.spec),
                                    attempt: record.attempts + 1)))
        let executor = context.executor(for: record.spec)
        // On the cooperative threads, not the loop's (an unstructured task does not take its preference).
        job.task = Task { [post] in
            let outcome = await executor.execute(job)
            post.yield(.finished(record.id, outcome))
        }
    }

    private func record(_ outcome: JobOutcome, for job: ActiveJob, into summary: inout RunSummary) throws {
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
            let due = try hooks.owe(hooks.due(record, .done, bytes: size).map { [$0] } ?? [])
            let missed = try store.finishDone([(record.id, size, nil)], at: Date())
            changedSources.insert(record.sourceFile)
            if missed.isEmpty {
                hooks.start(due)
                summary.done += 1
                onEvent(finished(.done, bytes: size))
                return
            }
            hooks.forget(due)
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
            let due = try hooks.owe(hooks.due(record, .failed, error: message).map { [$0] } ?? [])
            let recorded = try store.finish(record.id, state: .failed, error: message, bytes: nil, sha256: nil, at: Date())
            changedSources.insert(record.sourceFile)
            guard recorded else {
                // Not this worker's end to record (cancelled meanwhile, or another worker holds the
                // job now): no failed hook runs for it.
                hooks.forget(due)
                if try !cancelledMeanwhile([record.id]).isEmpty {
                    summary.cancelled += 1
                    onEvent(finished(.cancelled, error: "cancelled by the user"))
                } else {
                    onEvent(.paused(ids: [record.id]))
                }
                return
            }
            hooks.start(due)
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

    /// Hands the finished downloads to the flusher, which makes them durable
    /// while the loop goes on filling the slots they freed.
    private func startFlush() {
        let batch = pendingDone
        pendingDone = []
        lastFlush = Date()
        flushing = true
        flushingBatch = batch
        flusher.async { [self, post] in
            do {
                post.yield(.flushed(batch, try makeDurable(batch), nil))
            } catch {
                post.yield(.flushed(batch, Flushed(), error))
            }
        }
    }

    /// Makes the finished files durable with one `syncfs` of each filesystem
    /// they are on, then commits their "done" in one transaction.
    /// A job whose rename fails (the destination became a folder, a read-only
    /// folder) fails alone, with the reason: it never stops the run.
    /// - Returns: the reasons of the jobs whose rename failed, by job id, and the jobs lost to another worker.
    private func makeDurable(_ batch: [PendingDone]) throws -> Flushed {
        let unsyncedAll = Self.sync(batch, root: layout.root)
        let finished = batch.map { ($0.job.record.id, $0.result.size, $0.result.sha256) }
        // Owed before anything is recorded: a run that dies from here on runs them next time.
        let owed = try hooks.owe(batch.compactMap { hooks.due($0.job.record, .done, bytes: $0.result.size, sha256: $0.result.sha256) })
        // Recorded as finishing before the renames, so a run that dies among them completes them next time.
        // A job a shared store gave to another worker is that worker's to finish: not renamed here.
        let lost = try store.markFinishing(finished)
        // A file whose data did not reach the disk is removed, not renamed (Linux may have dropped
        // the pages it could not write, so its content is unknown and a retry fetches it whole) —
        // unless another worker holds the job now: the partial file is then that worker's.
        let unsynced = unsyncedAll.filter { !lost.contains($0.key) }
        for item in batch where unsynced[item.job.record.id] != nil {
            if let part = item.result.completedPartPath, Self.namesItsFile(item.result) { unlink(part) }
        }
        var failures = unsynced
        for item in batch where !lost.contains(item.job.record.id) && unsynced[item.job.record.id] == nil {
            guard let part = item.result.completedPartPath else { continue }
            // Renamed by its name: one that names another file now (a worker that took the job
            // over made a new one there, `PartFile.replaced`) is not this run's to put in place.
            guard Self.namesItsFile(item.result) else {
                failures[item.job.record.id] = "\(part) is no longer the file this run wrote (another worker took the job "
                    + "over and made a new one); left to it — `transferd retry \(item.job.record.id)` fetches it again if it fails"
                continue
            }
            if let reason = Self.moveIntoPlace(part: part, destination: item.result.path) {
                failures[item.job.record.id] = reason
            } else {
                // Recorded finishing: the job's checkpoint, and with it the file's tag, have served.
                item.result.partFile?.untag()
            }
        }
        let owedFailed = try hooks.owe(batch.compactMap { item in
            failures[item.job.record.id].flatMap { hooks.due(item.job.record, .failed, error: $0) }
        })
        var failedUnrecorded: Set<String> = []
        for (id, reason) in failures where try !store.finish(id, state: .failed, error: reason, bytes: nil, sha256: nil, at: Date()) {
            failedUnrecorded.insert(id)
        }
        let missed = try store.finishDone(finished.filter { failures[$0.0] == nil && !lost.contains($0.0) }, at: Date())
        // A done hook is started only for a job recorded done; a failed rename owes its failed hook instead.
        let recordedDone = { (hook: DueHook) in failures[hook.jobID] == nil && !lost.contains(hook.jobID) && !missed.contains(hook.jobID) }
        hooks.forget(owed.filter { !recordedDone($0) } + owedFailed.filter { failedUnrecorded.contains($0.jobID) })
        hooks.start(owed.filter(recordedDone) + owedFailed.filter { !failedUnrecorded.contains($0.jobID) })
        // Not recorded done: a user cancelled it while it was renamed, or another worker took it.
        let cancelled = try cancelledMeanwhile(missed)
        return Flushed(renameFailures: failures, lost: lost.union(missed.subtracting(cancelled)), cancelled: cancelled)
    }

    /// Makes a batch's files durable (see `syncFiles`). Nothing is removed here: the caller
    /// removes the failed ones it still holds.
    /// - Returns: the reasons, by job id.
    static func sync(_ batch: [PendingDone], root: String) -> [String: String] {
        syncFiles(batch.compactMap { item in
            item.result.completedPartPath.map { (item.job.record.id, $0, item.result.partFile?.fd) }
        }, root: root)
    }

    /// One `syncfs` for each filesystem the files and the root are on (a destination inside the
    /// root may sit on another mount, which the root's `syncfs` does not reach); on a filesystem
    /// whose `syncfs` reports an error (or that cannot be reached), each of its files alone, so
    /// only the files whose data did not reach the disk fail.
    ///
    /// A file still open (the queue holds each finished download's partial file until its rename)
    /// is looked at and synced through its descriptor: nothing is opened for it, so a process
    /// with as many files open as it may still syncs them.
    /// - Parameters:
    ///   - files: job id, file path, and the file's descriptor when it is open.
    ///   - syncfs: `syncfs(2)`; a test watches which filesystems it is given.
    /// - Returns: the reasons, by job id.
    static func syncFiles(_ files: [(id: String, path: String, fd: Int32?)], root: String,
                          syncfs: (Int32) -> Int32 = { linuxSyncfs($0) }) -> [String: String] {
        func device(_ path: String, _ fd: Int32?) -> dev_t? {
            var info = stat()
            let found = fd.map { fstat($0, &info) } ?? stat(path, &info)
            return found == 0 ? info.st_dev : nil
        }
        // Each file's filesystem, looked at once. Files that cannot be looked at are synced alone.
        let devices = files.map { device($0.path, $0.fd) }
        var seen: Set<dev_t> = []
        var synced: Set<dev_t> = []
        // The root's filesystem first, then the others in the order of their files.
        for (found, path) in zip([device(root, nil)] + devices, [root] + files.map(\.path)) {
            guard let found, seen.insert(found).inserted else { continue }
            // An open file of that filesystem serves; otherwise the path is opened.
            let held = zip(files, devices).first { $0.1 == found && $0.0.fd != nil }?.0.fd
            let fd = held ?? open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { continue }
            if syncfs(fd) == 0 { synced.insert(found) }
            if held == nil { close(fd) }
        }
        var failures: [String: String] = [:]
        for (file, found) in zip(files, devices) where !(found.map(synced.contains) ?? false) {
            let fd = file.fd ?? open(file.path, O_RDONLY | O_CLOEXEC)
            let ok = fd >= 0 && fsync(fd) == 0
            let reason = String(cString: strerror(errno))
            if fd >= 0 && file.fd == nil { close(fd) }
            guard !ok else { continue }
            failures[file.id] = "sync \(file.path): \(reason); the disk did not take the file's data, so the download was removed "
                + "(check the disk, then `transferd retry \(file.id)` fetches it again)"
        }
        return failures
    }

    /// Which of the jobs a store did not record done were cancelled by a user meanwhile (the rest
    /// moved to another worker).
    private func cancelledMeanwhile(_ ids: Set<String>) throws -> Set<String> {
        try Set(ids.filter { try store.job($0)?.state == .cancelled })
    }

    /// Whether `destination` is a regular file of `size` bytes.
    static func isInPlace(_ destination: String, size: Int64) -> Bool {
        var info = stat()
        return lstat(destination, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG && Int64(info.st_size) == size
    }

    /// Renames a finished partial file into place; the reason when that fails.
    /// Whether a finished download's partial path still names the file it wrote (true when the
    /// result holds no open file to compare: renamed by name, as before there were locks).
    static func namesItsFile(_ result: DownloadResult) -> Bool {
        guard let part = result.completedPartPath, let file = result.partFile else { return true }
        return PartFile.names(file.fd, part)
    }

    static func moveIntoPlace(part: String, destination: String) -> String? {
        guard rename(part, destination) != 0 else { return nil }
        let failure = POSIXFailure(operation: "rename \(part) to", path: destination)
        var info = stat()
        if lstat(destination, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR {
            return "the destination \(destination) is a folder; the download is kept in \(part). "
                + "Remove the folder or give the job another \"dest\", then `transferd retry`"
        }
        return "\(failure); the download is kept in \(part)"
    }

    private func recordDone(_ batch: [PendingDone], _ flushed: Flushed, into summary: inout RunSummary) {
        let lost = batch.map(\.job.record.id).filter(flushed.lost.contains)
        if !lost.isEmpty { onEvent(.paused(ids: lost)) }
        for item in batch where !flushed.lost.contains(item.job.record.id) {
            let record = item.job.record
            changedSources.insert(record.sourceFile)
            if let reason = flushed.renameFailures[record.id] {
                summary.failed += 1
                onEvent(Self.finishedEvent(record, state: .failed, bytes: nil, elapsed: item.elapsed, error: reason))
                continue
            }
            if flushed.cancelled.contains(record.id) {
                summary.cancelled += 1
                onEvent(Self.finishedEvent(record, state: .cancelled, bytes: nil, elapsed: item.elapsed,
                                           error: "cancelled by the user while its file was renamed into place (\(item.result.path))"))
                continue
            }
            summary.done += 1
            onEvent(Self.finishedEvent(record, state: .done, bytes: item.result.size, elapsed: item.elapsed,
                                       sha256: item.result.sha256, skipped: item.result.skipped))
        }
    }

    /// Jobs an earlier run (or a worker that died) left `finishing`: rename what is still at the
    /// partial path, then done.
    /// - Parameter reportingBusy: false before the run has reported its start: the caller reports them.
    private func completeFinishing(reportingBusy: Bool = true) throws {
        // A shared store hands this worker the jobs of dead ones, not those it holds already:
        // the busy ones it took earlier are tried again with them.
        try complete(try store.abandonedFinishing() + busyFinishing.values.map { $0 }, reportingBusy: reportingBusy)
    }

    /// Renames what is still at the partial path of each of `jobs` (finishing jobs no run of this
    /// store is finishing), then records them done. A job whose partial file another process
    /// writes stays finishing, reported once (`reportingBusy`).
    private func complete(_ given: [JobRecord], reportingBusy: Bool = true) throws {
        var seenIDs: Set<String> = []
        let jobs = given.filter { seenIDs.insert($0.id).inserted }
        let reported = Set(busyFinishing.keys)
        busyFinishing = [:]
        lastBusyFinishingTry = Date()
        guard !jobs.isEmpty else { return }
        var finished: [(id: String, bytes: Int64, sha256: String?)] = []
        var finishedJobs: [JobRecord] = []
        // Each end owes its hook here too (a done hook the dead run owed already is not owed twice).
        func fail(_ job: JobRecord, _ reason: String) throws {
            let due = try hooks.owe(hooks.due(job, .failed, error: reason).map { [$0] } ?? [])
            if try store.finish(job.id, state: .failed, error: reason, bytes: nil, sha256: nil, at: Date()) {
                hooks.start(due)
            } else {
                hooks.forget(due)
            }
        }
        for job in jobs {
            guard let destination = job.spec.destination else { continue }
            let part = PartialNames.finishingPart(of: destination)
            changedSources.insert(job.sourceFile)
            do {
                // Between runs a folder may have been swapped for a link: checked again before the rename.
                try ConfinedPath.check(destination, root: layout.root, create: false)
            } catch {
                try fail(job, String(describing: error))
                continue
            }
            let size = job.bytesTotal ?? job.bytesDone
            // Renamed under its lock: a `get` to the same destination may be writing a new
            // partial file since, and that file is not this job's to put in place. Left finishing
            // while another process holds it, and tried again (`busyFinishing`).
            let held: PartFile?
            do {
                held = try PartFile.lockExisting(part, takingOver: false)
            } catch DownloadError.partInUse {
                if reportingBusy && !reported.contains(job.id) { onEvent(.retrying(Self.busyFinishingReport(job))) }
                busyFinishing[job.id] = job
                continue
            } catch {
                try fail(job, String(describing: error))
                continue
            }
            defer { held?.close() }
            // A partial file that is there but could not be opened to lock (no permission, no
            // descriptor free) is renamed without its lock, as before there were locks: a rename
            // needs only the folder.
            if held != nil || DownloadEngine.exists(part), let reason = Self.moveIntoPlace(part: part, destination: destination),
               !Self.isInPlace(destination, size: size) {
                // Fails alone, with the reason: it must not stop this run or the next. (Another worker
                // may have renamed it a moment ago: then it is in place, and done.)
                try fail(job, reason)
                continue
            }
            guard Self.isInPlace(destination, size: size) else {
                try fail(job, "neither \(part) nor \(destination) is there (\(size) bytes) "
                         + "to complete the download; with a shared store, every worker must reach the destination "
                         + "at the same path. `transferd retry \(job.id)` fetches it again")
                continue
            }
            // This process never saw the tag (a dead run set it): taken off whether it is there or not.
            held?.untag(always: true)
            finished.append((job.id, size, job.sha256))
            finishedJobs.append(job)
        }
        let alreadyOwed = hooks.owedJobs(in: .done)
        let due = try hooks.owe(finishedJobs.filter { !alreadyOwed.contains($0.id) }.compactMap { job in
            hooks.due(job, .done, bytes: job.bytesTotal ?? job.bytesDone, sha256: job.sha256)
        })
        let missed = try store.finishDone(finished, at: Date())
        hooks.forget(due.filter { missed.contains($0.jobID) })
        hooks.start(due.filter { !missed.contains($0.jobID) })
    }

    private func updateResultFiles() throws {
        lastResultUpdate = Date()
        guard !changedSources.isEmpty else { return }
        try results.update(sourceFiles: changedSources)
        changedSources = []
    }

    /// Writes the adapted host limits where `status` reads them, when they changed.
    private func saveHostLimitsIfChanged() throws {
        let reduced = scheduler.hostLimits.reduced
        let maximum = scheduler.hostLimits.maximum
        guard reduced != savedHostLimits || (maximum != savedHostMaximum && !reduced.isEmpty) else { return }
        savedHostMaximum = maximum
        try store.saveHostLimits(reduced, maximum: scheduler.hostLimits.maximum)
        savedHostLimits = reduced
    }

    /// Keeps what the queue's settings (`transferd limit`) or this run's flags ask for now: the
    /// rate, the jobs at once and the connections per host.
    private func applySettings(renewingShare: Bool = false) throws {
        try applyRateLimit(renewingShare: renewingShare)
        scheduler.setMaxJobs(settings.jobs ?? options.maxJobs)
        scheduler.setMaxConnectionsPerHost(settings.perHost ?? options.maxConnectionsPerHost)
    }

    /// Keeps the limit asked for now: the queue's `rate_limit` setting (a rate, `UP:DOWN` or a
    /// timetable, set by `transferd limit` for every run), else this run's `--limit-rate`. A
    /// shared store's worker keeps its share of each rate (`QueueStore.rateShare`), asked again
    /// when the limit changes and when `renewingShare` (the workers may have changed).
    private func applyRateLimit(renewingShare: Bool = false) throws {
        let schedule = settings.rateLimit.flatMap { try? RateSchedule.parse($0) }
            ?? RateSchedule(options.limitRate.map { RateLimit(total: $0) } ?? .off)
        let wanted = schedule.limit(at: Date())
        guard wanted != wantedLimit || renewingShare else { return }
        wantedLimit = wanted
        bandwidth.apply(try wanted.map { try store.rateShare(of: $0) })
    }

    /// Renews this worker's leases at a third of their length; jobs it lost stop without a trace.
    private func renewLeasesIfDue() throws {
        guard let lease = store.leaseSeconds, Date().timeIntervalSince(lastLeaseRenewal) >= lease / 3 else { return }
        lastLeaseRenewal = Date()
        try applyRateLimit(renewingShare: true)
        if Date().timeIntervalSince(lastFinishingSweep) >= lease {
            // Downloads a dead worker left complete but not renamed: completed here.
            lastFinishingSweep = Date()
            try completeFinishing()
        }
        for id in try store.renewLeases() {
            busyFinishing[id] = nil
            guard let job = active[id] else { continue }
            job.leaseLost.withLock { $0 = true }
            job.task?.cancel()
        }
    }

    private func saveProgressAndHonourStops() throws {
        var snapshots: [String: ProgressSnapshot] = [:]
        let now = Date()
        var reports: [JobProgress] = []
        for (id, job) in active {
            // A checkpoint the shared store refused: another worker has the job; this one stops now.
            if job.leaseLost.current { job.task?.cancel() }
            guard let (written, total) = job.engine.current?.progress() ?? job.uploadProgress.current else { continue }
            reports.append(JobProgress(id: id, bytesDone: written, bytesTotal: total))
            job.progress.speed = RunProgress.smooth(job.progress.speed, delta: max(0, written - job.progress.bytesDone),
                                                    interval: now.timeIntervalSince(job.progressTime))
            job.progress.bytesDone = written
            job.progress.bytesTotal = total
            job.progressTime = now
            snapshots[id] = job.progress
        }
        // Sent even when empty: it is the renderers' clock (retry countdowns).
        onEvent(.progress(reports))
        // The store's snapshots (for `status`) twice a second.
        guard now.timeIntervalSince(lastProgressSave) >= 0.5 else { return }
        lastProgressSave = now
        try store.saveProgress(snapshots)
        try saveHostLimitsIfChanged()
        if now.timeIntervalSince(lastSteeringRead) >= steeringInterval { try readSteering() }
    }

    /// How often steering is read when the store's feed tells of changes (seconds): a change
    /// the feed missed (its connection was down) waits this long at most.
    static let steeringIntervalWithFeed: TimeInterval = 5

    /// Reads the queue's settings and the stops asked for this run's jobs, and follows them.
    private func readSteering() throws {
        lastSteeringRead = Date()
        let steering = try store.steering(among: Array(active.keys))
        settings = steering.settings
        try applySettings()
        let wasPaused = queuePaused
        queuePaused = settings.paused
        // Resumed: claim at once, not after the scheduler's next look.
        if wasPaused && !queuePaused { scheduler.somethingChanged() }
        for (id, stop) in steering.stops {
            guard let job = active[id] else { continue }
            switch stop {
            case .cancel: job.cancelledByUser.withLock { $0 = true }
            case .hold: job.heldByUser.withLock { $0 = true }
            }
            job.task?.cancel()
        }
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
    /// S3 uploads (they resume); none for a PUT or a form (sent again whole).
    static func resumesFrom(_ record: JobRecord) -> Int64 {
        record.spec.kind == .put || record.spec.kind == .form ? 0 : record.bytesDone
    }

    /// An upload's size, known before it starts (nil for downloads and directories).
    static func sourceSize(_ spec: JobSpec) -> Int64? {
        guard spec.kind == .put || spec.kind == .s3Upload, let source = spec.source else { return nil }
        var info = stat()
        guard stat(source, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
        return Int64(info.st_size)
    }
}

/// One instance of each backend for the whole run, made on first use.
final class TransportPool: Sendable {
    private let transports = Locked<[String: Transport]>([:])
    private let log: (@Sendable (String) -> Void)?

    init(log: (@Sendable (String) -> Void)? = nil) {
        self.log = log
    }

    func transport(named name: String) -> Transport {
        transports.withLock { pool in
            if let existing = pool[name] { return existing }
            var made: Transport = name == "urlsession" ? URLSessionTransport() : CurlTransport()
            if let log { made = LoggingTransport(made, write: log) }
            pool[name] = made
            return made
        }
    }
}

/// syncfs(2): flushes one filesystem (declared only under _GNU_SOURCE, which Swift's Glibc module lacks).
@_silgen_name("syncfs")
func linuxSyncfs(_ fd: Int32) -> Int32
