import Foundation

/// Queue events as JSON objects, keys in a fixed order: what `--json` prints and
/// what the control API's event stream sends (the schema is in docs/watching.md, "JSON
/// events"). It folds the events into a `RunProgress` for the totals; progress
/// events closer than `interval` to the last one shown are left out.
package struct QueueEventEncoder: Sendable {
    package private(set) var progress: RunProgress
    private let interval: TimeInterval
    private var lastProgress = Date.distantPast

    package init(startedAt: Date, interval: TimeInterval) {
        self.progress = RunProgress(startedAt: startedAt)
        self.interval = interval
    }

    /// The event as JSON, or nil for a progress event not due yet.
    package mutating func encode(_ event: QueueEvent, at now: Date) -> JSONObject? {
        progress.apply(event, at: now)
        _ = progress.takeFinished()
        var object: JSONObject
        switch event {
        case .runStarted(let pending):
            object = header("run_started", now)
            object.add("pending", pending)
        case .ingested(let files, let jobs, let rejected):
            object = header("ingested", now)
            object.add("files", files)
            object.add("jobs", jobs)
            object.add("rejected", .array(rejected.map { file in
                var item = JSONObject()
                item.add("file", file.file)
                item.add("error", file.error)
                return .object(item)
            }))
        case .started(let start):
            object = header("started", now)
            object.add("id", start.id)
            object.add("kind", start.kind)
            object.add("name", start.name)
            object.add("url", start.url)
            object.add("destination", start.destination.map(JSONObject.Value.string) ?? .null)
            object.add("bytes_done", start.bytesDone)
            object.add("bytes_total", start.bytesTotal.map(JSONObject.Value.int) ?? .null)
            object.add("attempt", start.attempt)
        case .progress:
            guard now.timeIntervalSince(lastProgress) >= interval, progress.active > 0 else { return nil }
            lastProgress = now
            object = header("progress", now)
            object.add("jobs", .array(progress.running.map { job in
                var item = JSONObject()
                item.add("id", job.id)
                item.add("bytes_done", job.bytesDone)
                item.add("bytes_total", job.bytesTotal.map(JSONObject.Value.int) ?? .null)
                item.add("speed", .int(Int64(job.speed)))
                item.add("eta", job.eta.map { .number(($0 * 10).rounded() / 10) } ?? .null)
                return .object(item)
            }))
            object.add("totals", .object(totals()))
        case .retrying(let retry):
            object = header("retrying", now)
            object.add("id", retry.id)
            object.add("attempt", retry.attempt)
            object.add("delay", .number(retry.delay))
            object.add("reason", retry.reason)
        case .finished(let end):
            object = header("finished", now)
            object.add("id", end.id)
            object.add("state", end.state.rawValue)
            object.add("url", end.url)
            object.add("destination", end.destination.map(JSONObject.Value.string) ?? .null)
            object.add("bytes", end.bytes.map(JSONObject.Value.int) ?? .null)
            object.add("seconds", end.elapsed.map { .number(($0 * 1000).rounded() / 1000) } ?? .null)
            object.add("sha256", end.sha256.map(JSONObject.Value.string) ?? .null)
            object.add("skipped", .bool(end.skipped))
            object.add("error", end.error.map(JSONObject.Value.string) ?? .null)
            if !end.mirrors.isEmpty {
                object.add("mirrors", .array(end.mirrors.map { mirror in
                    var entry = JSONObject()
                    entry.add("url", mirror.url)
                    entry.add("bytes", mirror.bytes)
                    entry.add("kept", mirror.kept)
                    entry.add("dropped", mirror.dropped.map(JSONObject.Value.string) ?? .null)
                    return .object(entry)
                }))
            }
        case .paused(let ids):
            object = header("paused", now)
            object.add("ids", .array(ids.map(JSONObject.Value.string)))
        case .completing(let id, let bytes):
            object = header("completing", now)
            object.add("id", id)
            object.add("bytes", bytes)
        case .held(let ids):
            object = header("held", now)
            object.add("ids", .array(ids.map(JSONObject.Value.string)))
        }
        return object
    }

    /// The run's last event.
    package func summary(_ summary: RunSummary, at now: Date) -> JSONObject {
        var object = header("summary", now)
        object.add("done", summary.done)
        object.add("failed", summary.failed)
        object.add("cancelled", summary.cancelled)
        object.add("skipped", progress.skipped)
        object.add("paused", progress.paused)
        object.add("held", progress.held)
        object.add("held_in_queue", summary.heldInStore)
        object.add("queue_paused", .bool(summary.queuePaused))
        object.add("rejected_files", summary.rejectedFiles)
        object.add("failed_in_queue", summary.failedInStore)
        object.add("bytes", progress.bytesTransferred)
        let elapsed = progress.elapsed(at: now)
        object.add("speed", .int(elapsed > 0 ? Int64(Double(progress.bytesTransferred) / elapsed) : 0))
        object.add("interrupted", .bool(summary.interrupted))
        object.add("failures", .array(progress.failures.map { failure in
            var item = JSONObject()
            item.add("id", failure.id)
            item.add("url", failure.url)
            item.add("error", failure.error.map(JSONObject.Value.string) ?? .null)
            item.add("retry_command", "transferd retry \(failure.id)")
            return .object(item)
        }))
        return object
    }

    /// The run so far: bytes, speed, ETA and jobs by state.
    package func totals() -> JSONObject {
        var totals = JSONObject()
        totals.add("bytes_done", progress.bytesDone)
        totals.add("bytes_total", progress.bytesTotal.map { .int($0.bytes) } ?? .null)
        totals.add("bytes_total_exact", .bool(progress.bytesTotal?.exact ?? false))
        totals.add("speed", .int(Int64(progress.speed)))
        totals.add("eta", progress.eta.map { .number(($0 * 10).rounded() / 10) } ?? .null)
        totals.add("done", progress.done)
        totals.add("failed", progress.failed)
        totals.add("running", progress.running.count)
        totals.add("waiting", progress.waiting.count)
        totals.add("queued", progress.pending)
        return totals
    }

    private func header(_ name: String, _ now: Date) -> JSONObject {
        var object = JSONObject()
        object.add("event", name)
        object.add("time", JSONObject.timestamp(now))
        object.add("elapsed", .number((progress.elapsed(at: now) * 1000).rounded() / 1000))
        return object
    }
}
