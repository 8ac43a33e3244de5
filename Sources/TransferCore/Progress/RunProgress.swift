import Foundation

/// The state of a whole run, folded from its events: every active job's bytes,
/// smoothed speed and ETA, and the totals of the queue. A value: the renderers
/// read it, `apply` is the only way it changes, and the clock is passed in so
/// tests can fix it.
package struct RunProgress: Sendable {
    /// A job that is transferring, or waiting for its next attempt.
    package struct Job: Sendable, Equatable {
        package var id: String
        package var name: String
        package var kind: String
        package var url: String
        package var bytesDone: Int64
        package var bytesTotal: Int64?
        /// Smoothed bytes per second (0 until two samples).
        package var speed: Double
        package var startedAt: Date
        /// Bytes already on disk when this run took the job up.
        package var resumedFrom: Int64 = 0
        /// Set while the job waits for a retry.
        package var retry: Retry?
        var lastSample: Date

        package struct Retry: Sendable, Equatable {
            package var until: Date
            package var attempt: Int
            package var reason: String
        }

        /// Seconds left at the current speed (nil when unknown).
        package var eta: TimeInterval? {
            guard let total = bytesTotal, speed > 0 else { return nil }
            return Double(max(0, total - bytesDone)) / speed
        }

        package var fraction: Double? {
            guard let total = bytesTotal, total > 0 else { return nil }
            return min(1, Double(bytesDone) / Double(total))
        }
    }

    /// How quickly the speeds follow a change (seconds): long enough to calm
    /// the jitter of 0.25 s samples, short enough to show a stall within seconds.
    package static let speedTimeConstant: TimeInterval = 2

    package let startedAt: Date
    /// Running jobs in the order they started.
    package private(set) var running: [Job] = []
    /// Jobs waiting for a retry, in the order they began waiting.
    package private(set) var waiting: [Job] = []
    /// Downloads whose bytes are all in, being made durable (`completing`): no longer running,
    /// not yet done.
    package private(set) var completing: [Job] = []
    /// Runnable jobs not started yet in this run.
    package private(set) var pending = 0
    package private(set) var done = 0
    package private(set) var failed = 0
    package private(set) var cancelled = 0
    /// Done jobs whose destination was already present and identical.
    package private(set) var skipped = 0
    package private(set) var paused = 0
    /// Running jobs a person paused (`transferd pause`) during the run.
    package private(set) var held = 0
    /// Finished jobs' sizes (this run).
    package private(set) var bytesFinished: Int64 = 0
    /// Bytes moved in this run and already in the speed.
    private var bytesSampled: Int64 = 0
    /// Bytes moved in this run.
    package var bytesTransferred: Int64 { bytesSampled + unsampled }
    /// Failed jobs of this run, in order.
    package private(set) var failures: [JobFinished] = []
    /// Jobs that finished (done or failed) since the last `takeFinished()`,
    /// for renderers that print a permanent line per job.
    package private(set) var recentlyFinished: [JobFinished] = []
    /// Smoothed bytes per second over all jobs.
    package private(set) var speed: Double = 0
    package private(set) var lastEvent: Date
    private var unsampled: Int64 = 0
    private var lastSample: Date
    /// Sizes of jobs seen with a known size, for estimating the ones not started.
    private var sizedJobs = 0
    private var sizedBytes: Int64 = 0

    package init(startedAt: Date, pending: Int = 0) {
        self.startedAt = startedAt
        self.pending = pending
        self.lastEvent = startedAt
        self.lastSample = startedAt
    }

    // MARK: Folding events

    package mutating func apply(_ event: QueueEvent, at now: Date) {
        lastEvent = now
        switch event {
        case .runStarted(let count):
            pending = count
        case .ingested(_, let jobs, _):
            pending += jobs
        case .started(let start):
            if let index = waiting.firstIndex(where: { $0.id == start.id }) {
                waiting.remove(at: index)
            } else if running.contains(where: { $0.id == start.id }) {
                return
            } else {
                pending = max(0, pending - 1)
                if let total = start.bytesTotal { noteSize(total) }
            }
            var job = Job(id: start.id, name: start.name, kind: start.kind, url: start.url,
                          bytesDone: start.bytesDone, bytesTotal: start.bytesTotal, speed: 0,
                          startedAt: now, retry: nil, lastSample: now)
            job.resumedFrom = start.bytesDone
            running.append(job)
        case .progress(let reports):
            for report in reports {
                // A job that retries inside its slot (an upload) is running again once it reports bytes.
                if let waitingIndex = waiting.firstIndex(where: { $0.id == report.id }) {
                    var job = waiting.remove(at: waitingIndex)
                    job.retry = nil
                    job.lastSample = now
                    running.append(job)
                }
                guard let index = running.firstIndex(where: { $0.id == report.id }) else { continue }
                updateRunning(at: index, done: report.bytesDone, total: report.bytesTotal, now: now)
            }
            sampleSpeed(at: now)
        case .retrying(let retry):
            guard let index = running.firstIndex(where: { $0.id == retry.id }) else { return }
            var job = running.remove(at: index)
            job.speed = 0
            job.retry = Job.Retry(until: now.addingTimeInterval(retry.delay), attempt: retry.attempt, reason: retry.reason)
            waiting.append(job)
        case .finished(var end):
            let job = remove(end.id)
            // Speed and "in N s" are of what this run moved, not of bytes an earlier run left.
            if let job { end.resumedFrom = min(job.resumedFrom, end.bytes ?? job.resumedFrom) }
            switch end.state {
            case .done:
                done += 1
                if end.skipped { skipped += 1 }
                let size = end.bytes ?? job?.bytesDone ?? 0
                bytesFinished += size
                if let job, !end.skipped {
                    unsampled += max(0, size - job.bytesDone)
                    if job.bytesTotal == nil { noteSize(size) }
                }
            case .failed:
                failed += 1
                failures.append(end)
            default:
                cancelled += 1
            }
            recentlyFinished.append(end)
        case .completing(let id, let bytes):
            guard let index = running.firstIndex(where: { $0.id == id }) else { return }
            updateRunning(at: index, done: bytes, total: running[index].bytesTotal ?? bytes, now: now)
            var job = running.remove(at: index)
            job.speed = 0
            completing.append(job)
        case .paused(let ids):
            for id in ids { _ = remove(id) }
            paused += ids.count
        case .held(let ids):
            for id in ids { _ = remove(id) }
            held += ids.count
        }
    }

    /// The finished jobs not yet taken, oldest first; clears the list.
    package mutating func takeFinished() -> [JobFinished] {
        defer { recentlyFinished = [] }
        return recentlyFinished
    }

    private mutating func remove(_ id: String) -> Job? {
        if let index = running.firstIndex(where: { $0.id == id }) { return running.remove(at: index) }
        if let index = waiting.firstIndex(where: { $0.id == id }) { return waiting.remove(at: index) }
        if let index = completing.firstIndex(where: { $0.id == id }) { return completing.remove(at: index) }
        return nil
    }

    private mutating func noteSize(_ size: Int64) {
        sizedJobs += 1
        sizedBytes += size
    }

    private mutating func updateRunning(at index: Int, done: Int64, total: Int64?, now: Date) {
        var job = running[index]
        let delta = max(0, done - job.bytesDone)
        unsampled += delta
        if job.bytesTotal == nil, let total { noteSize(total) }
        job.speed = Self.smooth(job.speed, delta: delta, interval: now.timeIntervalSince(job.lastSample))
        job.bytesDone = done
        job.bytesTotal = total ?? job.bytesTotal
        job.lastSample = now
        running[index] = job
    }

    private mutating func sampleSpeed(at now: Date) {
        let interval = now.timeIntervalSince(lastSample)
        guard interval > 0 else { return }
        speed = Self.smooth(speed, delta: unsampled, interval: interval)
        bytesSampled += unsampled
        unsampled = 0
        lastSample = now
    }

    /// An exponential moving average whose weight follows the sample's length,
    /// so irregular samples smooth the same way as regular ones.
    package static func smooth(_ previous: Double, delta: Int64, interval: TimeInterval) -> Double {
        guard interval > 0 else { return previous }
        let instant = Double(delta) / interval
        guard previous > 0 else { return instant }
        let weight = 1 - exp(-interval / speedTimeConstant)
        return previous + (instant - previous) * weight
    }

    // MARK: Totals

    package var active: Int { running.count + waiting.count + completing.count }

    /// Bytes of this run's finished jobs plus what active jobs have.
    package var bytesDone: Int64 {
        bytesFinished + (running + waiting + completing).reduce(0) { $0 + $1.bytesDone }
    }

    /// The size of the whole run: known sizes, plus the average known size for
    /// each job whose size is not known yet. `exact` is false when any part is estimated.
    package var bytesTotal: (bytes: Int64, exact: Bool)? {
        var known = bytesFinished
        var unknown = pending
        for job in running + waiting + completing {
            if let total = job.bytesTotal { known += total } else { unknown += 1 }
        }
        guard unknown > 0 else { return (known, true) }
        guard sizedJobs > 0 else { return nil }
        return (known + Int64(unknown) * (sizedBytes / Int64(sizedJobs)), false)
    }

    /// Seconds until the whole run is done at the current speed (nil when unknown).
    package var eta: TimeInterval? {
        guard speed > 0, let total = bytesTotal else { return nil }
        return Double(max(0, total.bytes - bytesDone)) / speed
    }

    package var fraction: Double? {
        guard let total = bytesTotal, total.bytes > 0 else { return nil }
        return min(1, Double(bytesDone) / Double(total.bytes))
    }

    package func elapsed(at now: Date) -> TimeInterval { now.timeIntervalSince(startedAt) }
}

extension RunProgress {
    /// A run's state rebuilt from the store (for `status --watch`, which looks
    /// at another process's run): the active jobs' rows with their last
    /// progress snapshot, and how many jobs are in every other state.
    package init(active records: [JobRecord], counts: [JobState: Int], at now: Date) {
        self.init(startedAt: records.compactMap(\.startedAt).min() ?? now)
        for record in records {
            var job = Job(id: record.id, name: record.spec.displayName, kind: record.spec.kind.rawValue,
                          url: record.spec.url, bytesDone: record.bytesDone, bytesTotal: record.bytesTotal,
                          speed: record.speed ?? 0, startedAt: record.startedAt ?? now, retry: nil, lastSample: now)
            if let total = record.bytesTotal { noteSize(total) }
            switch record.state {
            case .waiting:
                job.speed = 0
                job.retry = Job.Retry(until: record.nextAttemptAt ?? now, attempt: record.attempts, reason: record.lastError ?? "")
                waiting.append(job)
            default:
                running.append(job)
                speed += job.speed
            }
        }
        pending = (counts[.queued] ?? 0) + (counts[.paused] ?? 0)
        done = counts[.done] ?? 0
        failed = counts[.failed] ?? 0
        cancelled = counts[.cancelled] ?? 0
    }
}

extension JobSpec {
    /// A short name for the screen: the file the job writes or reads.
    package var displayName: String {
        if let destination, !destination.isEmpty { return Self.lastComponent(destination) }
        if let source, !source.isEmpty { return Self.lastComponent(source) }
        if kind == .form, let file = files?.first { return Self.lastComponent(file.path) }
        return URL(string: url)?.lastPathComponent ?? url
    }

    /// What NSString's `lastPathComponent` gives ("a/b/" is "b", "/" is "/"), without
    /// bridging: this runs as every job starts.
    static func lastComponent(_ path: String) -> String {
        let bytes = path.utf8
        guard let end = bytes.lastIndex(where: { $0 != UInt8(ascii: "/") }) else { return path.isEmpty ? "" : "/" }
        let head = bytes[...end]
        let start = head.lastIndex(of: UInt8(ascii: "/")).map { bytes.index(after: $0) } ?? bytes.startIndex
        return String(decoding: bytes[start...end], as: UTF8.self)
    }
}
