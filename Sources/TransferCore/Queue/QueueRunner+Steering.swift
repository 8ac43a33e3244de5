import Foundation

/// Lease keeping and steering: leases renewed at a third of their length, progress saved twice
/// a second, and the queue's settings and a person's stops (pause, cancel, limits) followed.
extension QueueRunner {
    /// Writes the adapted host limits where `status` reads them, when they changed.
    func saveHostLimitsIfChanged() throws {
        // A cut taken from another worker stays that worker's to tell (`HostLimits.ownCuts`).
        let reduced = Self.sharesHostLimits ? scheduler.hostLimits.ownCuts : scheduler.hostLimits.reduced
        let maximum = scheduler.hostLimits.maximum
        guard reduced != savedHostLimits || (maximum != savedHostMaximum && !reduced.isEmpty) else { return }
        savedHostMaximum = maximum
        try store.saveHostLimits(reduced, maximum: scheduler.hostLimits.maximum)
        savedHostLimits = reduced
    }

    /// Whether a fleet's workers take each other's cuts (the default), or each keeps its own
    /// (`TRANSFERD_SHARED_HOST_LIMITS=0`, for bench/fleet-limits.sh, which measures both:
    /// shared, a host was answered fewer 429s for the same time; docs/benchmarks.md).
    static let sharesHostLimits = ProcessInfo.processInfo.environment["TRANSFERD_SHARED_HOST_LIMITS"] != "0"

    /// Takes as its own each cut another live worker of the fleet made since the last look: a
    /// limit of theirs that is new or lower than it was (a dead worker's rows, left by a kill,
    /// are passed over). Read with the steering: at once when the store's feed tells of a cut
    /// (`saveHostLimits`), and every few seconds besides.
    func adoptFleetHostCuts() throws {
        let now = ProcessInfo.processInfo.systemUptime
        let entries = try store.hostLimits()
        guard !entries.isEmpty, let lease = store.leaseSeconds else {
            fleetHostLimitsSeen = [:]
            return
        }
        let live = Set(try store.workers().filter { $0.secondsSinceHeartbeat < 3 * lease }.map(\.name))
        var seen: [String: Int] = [:]
        for entry in entries {
            guard let worker = entry.worker, live.contains(worker), worker != (store as? PostgresQueueStore)?.worker else { continue }
            let key = worker + "\u{0}" + entry.host
            seen[key] = entry.limit
            if let before = fleetHostLimitsSeen[key], before <= entry.limit { continue }
            scheduler.adoptHostLimit(entry.host, limit: entry.limit, now: now)
        }
        fleetHostLimitsSeen = seen
    }

    /// Keeps what the queue's settings (`transferd limit`) or this run's flags ask for now: the
    /// rate, the jobs at once and the connections per host.
    func applySettings(renewingShare: Bool = false) throws {
        try applyRateLimit(renewingShare: renewingShare)
        scheduler.setMaxJobs(settings.jobs ?? options.maxJobs)
        scheduler.setMaxConnectionsPerHost(settings.perHost ?? options.maxConnectionsPerHost)
    }

    /// Keeps the limit asked for now: the queue's `rate_limit` setting (a rate, `UP:DOWN` or a
    /// timetable, set by `transferd limit` for every run), else this run's `--limit-rate`. A
    /// shared store's worker keeps its share of each rate (`QueueStore.rateShare`), asked again
    /// when the limit changes and when `renewingShare` (the workers may have changed).
    func applyRateLimit(renewingShare: Bool = false) throws {
        let schedule = settings.rateLimit.flatMap { try? RateSchedule.parse($0) }
            ?? RateSchedule(options.limitRate.map { RateLimit(total: $0) } ?? .off)
        let wanted = schedule.limit(at: Date())
        guard wanted != wantedLimit || renewingShare else { return }
        wantedLimit = wanted
        bandwidth.apply(try wanted.map { try store.rateShare(of: $0) })
    }

    /// Renews this worker's leases at a third of their length; jobs it lost stop without a trace.
    func renewLeasesIfDue() throws {
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
            job.task.current?.cancel()
        }
    }

    func saveProgressAndHonourStops() throws {
        var snapshots: [String: ProgressSnapshot] = [:]
        let now = Date()
        var reports: [JobProgress] = []
        for (id, job) in active {
            // A checkpoint the shared store refused: another worker has the job; this one stops now.
            if job.leaseLost.current { job.task.current?.cancel() }
            guard let (written, total) = job.engine.current?.progress() ?? job.uploadProgress.current else { continue }
            reports.append(JobProgress(id: id, bytesDone: written, bytesTotal: total))
            snapshots[id] = job.progress.withLock { seen in
                seen.snapshot.speed = RunProgress.smooth(seen.snapshot.speed, delta: max(0, written - seen.snapshot.bytesDone),
                                                         interval: now.timeIntervalSince(seen.time))
                seen.snapshot.bytesDone = written
                seen.snapshot.bytesTotal = total
                seen.time = now
                return seen.snapshot
            }
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
    func readSteering() throws {
        lastSteeringRead = Date()
        let steering = try store.steering(among: Array(active.keys))
        if Self.sharesHostLimits, store.leaseSeconds != nil { try adoptFleetHostCuts() }
        settings = steering.settings
        try applySettings()
        // Jobs' own rates (`transferd limit --job`): a running download follows at once (an upload
        // from its next attempt, which reads it when it starts).
        for (id, job) in active {
            job.engine.current?.setRate(settings.rate(of: id, file: job.fileRate))
        }
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
            job.task.current?.cancel()
        }
    }
}
