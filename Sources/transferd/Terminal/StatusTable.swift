import Foundation
import TransferCore

/// The job table of `transferd status`.
enum StatusTable {
    static func render(_ jobs: [JobRecord], width: Int) -> String {
        var counts: [JobState: Int] = [:]
        for job in jobs { counts[job.state, default: 0] += 1 }
        var lines: [String] = []
        let summary = JobState.allCases.compactMap { state in counts[state].map { "\($0) \(state.rawValue)" } }
        lines.append("\(jobs.count) job\(jobs.count == 1 ? "" : "s"): " + (summary.isEmpty ? "none" : summary.joined(separator: ", ")))
        guard !jobs.isEmpty else { return lines.joined(separator: "\n") + "\n" }
        let idWidth = min(40, max(2, jobs.map(\.id.count).max() ?? 2))
        lines.append(pad("ID", idWidth) + "  " + pad("STATE", 9) + "  " + pad("PROGRESS", 22) + "  " + pad("SPEED", 11) + "  DETAIL")
        for job in jobs {
            let progress = progressText(job)
            let speed = job.state == .running && (job.speed ?? 0) > 0 ? rate(job.speed!) : ""
            var detail = job.spec.destination ?? Redaction.url(string: job.spec.url)
            if let worker = job.worker, job.state == .running || job.state == .finishing { detail += " (worker \(worker))" }
            if let error = job.lastError, job.state != .done {
                detail = job.state == .waiting && job.nextAttemptAt != nil
                    ? "retry in \(max(0, Int(job.nextAttemptAt!.timeIntervalSinceNow.rounded(.up)))) s: \(error)" : error
            }
            let line = pad(job.id, idWidth) + "  " + pad(job.state.rawValue, 9) + "  " + pad(progress, 22) + "  "
                + pad(speed, 11) + "  " + detail
            // File names, URLs and server messages may hold escape sequences: escaped (`\u{1B}`).
            lines.append(String(Text.sanitized(line).prefix(max(40, width))))
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// The workers of a shared store, after the job table.
    static func renderWorkers(_ workers: [WorkerInfo], width: Int) -> String {
        let nameWidth = min(40, max(6, workers.map(\.name.count).max() ?? 6))
        var lines = ["", "\(workers.count) worker\(workers.count == 1 ? "" : "s"):",
                     pad("WORKER", nameWidth) + "  " + pad("HOST", 16) + "  " + pad("PID", 8) + "  " + pad("HEARTBEAT", 10) + "  JOBS"]
        for worker in workers {
            let line = pad(worker.name, nameWidth) + "  " + pad(worker.host, 16) + "  " + pad(String(worker.pid), 8) + "  "
                + pad("\(Int(max(0, worker.secondsSinceHeartbeat).rounded())) s ago", 10) + "  \(worker.jobsHeld)"
            lines.append(String(Text.sanitized(line).prefix(max(40, width))))
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// Hosts whose connection limit the run lowered after 429s and 503s.
    static func renderHostLimits(_ limits: [HostLimitInfo], width: Int) -> String {
        var lines = ["", "hosts refusing requests (429/503), limit lowered:"]
        for entry in limits {
            let line = "  \(entry.host): \(entry.limit) of \(entry.maximum) connections"
                + (entry.worker.map { " (worker \($0))" } ?? "")
            lines.append(String(Text.sanitized(line).prefix(max(40, width))))
        }
        return lines.joined(separator: "\n") + "\n"
    }

    static func progressText(_ job: JobRecord) -> String {
        guard let total = job.bytesTotal, total > 0 else {
            return job.bytesDone > 0 ? bytes(job.bytesDone) : ""
        }
        let percent = Int(Double(job.bytesDone) / Double(total) * 100)
        return "\(percent)% of \(bytes(total))"
    }

    static func json(_ job: JobRecord) -> String {
        // Redacted as in every other view: user info and secret query values.
        var object: [String: Any] = ["id": job.id, "state": job.state.rawValue, "url": Redaction.url(string: job.spec.url),
                                     "bytes_done": job.bytesDone, "attempts": job.attempts, "priority": job.spec.priority]
        object["destination"] = job.spec.destination
        object["bytes_total"] = job.bytesTotal
        object["last_error"] = job.lastError.map(Redaction.message)
        object["sha256"] = job.sha256
        object["speed"] = job.speed
        object["next_attempt_at"] = job.nextAttemptAt.map { ISO8601DateFormatter().string(from: $0) }
        object["worker"] = job.worker
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }

    private static func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? String(text.prefix(width)) : text + String(repeating: " ", count: width - text.count)
    }

    private static func bytes(_ value: Int64) -> String { Format.bytes(value) }
    private static func rate(_ value: Double) -> String { Format.rate(value) }
}
