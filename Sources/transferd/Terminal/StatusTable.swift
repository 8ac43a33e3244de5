import Foundation
import TransferCore

/// The job table of `transferd status`.
enum StatusTable {
    /// A queue of up to this many jobs is listed whole; a larger one is summed up (`summary`).
    static let listedWhole = 1_000

    /// `N jobs: 3 running, 10 queued, ...`.
    static func countsLine(_ counts: [JobState: Int]) -> String {
        let total = counts.values.reduce(0, +)
        let summary = JobState.allCases.compactMap { state in counts[state].flatMap { $0 > 0 ? "\($0) \(state.rawValue)" : nil } }
        return "\(total) job\(total == 1 ? "" : "s"): " + (summary.isEmpty ? "none" : summary.joined(separator: ", ")) + "\n"
    }

    /// The queue folder's files no run has read yet: how many job files wait, and the files a
    /// run will never read, with why (the first ten).
    static func waitingLines(_ waiting: (jobFiles: [String], neverRead: [(name: String, reason: String)]), folder: String) -> String {
        var text = ""
        let count = waiting.jobFiles.count
        if count > 0 {
            text += "\(count) job file\(count == 1 ? "" : "s") wait\(count == 1 ? "s" : "") in \(folder) to be read "
                + "(\(waiting.jobFiles.prefix(3).joined(separator: ", "))\(count > 3 ? ", …" : "")): "
                + "the next run reads \(count == 1 ? "it" : "them") first; `transferd ingest` records \(count == 1 ? "it" : "them") now\n"
        }
        if !waiting.neverRead.isEmpty {
            text += "never read in \(folder):\n"
            for item in waiting.neverRead.prefix(10) { text += "  \(Text.sanitized(item.name))  (\(item.reason))\n" }
            if waiting.neverRead.count > 10 { text += "  … and \(waiting.neverRead.count - 10) more\n" }
        }
        return text
    }

    /// The width of the ID column for these jobs, their ids shown as in `shown`.
    static func idWidth(_ jobs: [JobRecord], shown: [String: String] = [:]) -> Int {
        min(40, max(2, jobs.map { (shown[$0.id] ?? $0.id).count }.max() ?? 2))
    }

    static func header(idWidth: Int) -> String {
        pad("ID", idWidth) + "  " + pad("STATE", 9) + "  " + pad("PROGRESS", 22) + "  " + pad("SPEED", 11) + "  DETAIL\n"
    }

    /// One line per job, each cut to `width`; ids as in `shown` (shortened, `JobIDs.shortest`), else whole.
    static func rows(_ jobs: [JobRecord], shown: [String: String] = [:], idWidth: Int, width: Int) -> String {
        var text = ""
        for job in jobs {
            let progress = progressText(job)
            let speed = job.state == .running && (job.speed ?? 0) > 0 ? rate(job.speed!) : ""
            var detail = job.spec.destination ?? Redaction.url(string: job.spec.url)
            if let worker = job.worker, job.state == .running || job.state == .finishing { detail += " (worker \(worker))" }
            if let error = job.lastError, job.state != .done {
                detail = job.state == .waiting && job.nextAttemptAt != nil
                    ? "retry in \(max(0, Int(job.nextAttemptAt!.timeIntervalSinceNow.rounded(.up)))) s: \(error)" : error
            }
            // The id is never cut: what is shown must name the job when typed back.
            let id = shown[job.id] ?? job.id
            let line = (id.count >= idWidth ? id : pad(id, idWidth)) + "  " + pad(job.state.rawValue, 9) + "  " + pad(progress, 22) + "  "
                + pad(speed, 11) + "  " + detail
            // File names, URLs and server messages may hold escape sequences: escaped (`\u{1B}`).
            text += String(Text.sanitized(line).prefix(max(40, width))) + "\n"
        }
        return text
    }

    /// What `status` shows of a large queue, in the order they matter: the jobs running now, the
    /// failed ones, those waiting to retry, and the next queued ones, each section with how
    /// many more there are.
    static func summary(counts: [JobState: Int], sections: [(title: String, state: JobState, jobs: [JobRecord])],
                        shown: [String: String] = [:], width: Int) -> String {
        let all = sections.flatMap(\.jobs)
        let idWidth = idWidth(all, shown: shown)
        var text = ""
        for section in sections where !section.jobs.isEmpty {
            let count = counts[section.state] ?? section.jobs.count
            let more = count > section.jobs.count ? " (first \(section.jobs.count) of \(count))" : " (\(count))"
            text += "\n\(section.title)\(more):\n" + header(idWidth: idWidth) + rows(section.jobs, shown: shown, idWidth: idWidth, width: width)
        }
        let total = counts.values.reduce(0, +)
        text += "\n\(total) jobs are too many to list here: `transferd status --all` lists every job, `--json` gives one JSON "
            + "object per job (both streamed)\n"
        return text
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

    /// One job as `status --json` prints it (keys sorted; absent values left out).
    private struct JobJSON: Encodable {
        /// Failed attempts in a row without progress: the retry budget used (0 for a job done at
        /// its first try).
        var failed_attempts: Int
        var bytes_done: Int64
        var bytes_total: Int64?
        var destination: String?
        var id: String
        var last_error: String?
        var next_attempt_at: String?
        var priority: Int
        var sha256: String?
        var speed: Double?
        var state: String
        var url: String
        var worker: String?
    }

    /// JSONEncoder, not JSONSerialization: a million jobs took 119 s through JSONSerialization
    /// (its dictionaries of `Any`), most of `status --json`'s time.
    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    static func json(_ job: JobRecord) -> String {
        // Redacted as in every other view: user info and secret query values.
        let object = JobJSON(failed_attempts: job.attempts, bytes_done: job.bytesDone, bytes_total: job.bytesTotal,
                             destination: job.spec.destination, id: job.id, last_error: job.lastError.map(Redaction.message),
                             next_attempt_at: job.nextAttemptAt.map { ISO8601DateFormatter().string(from: $0) },
                             priority: job.spec.priority, sha256: job.sha256, speed: job.speed, state: job.state.rawValue,
                             url: Redaction.url(string: job.spec.url), worker: job.worker)
        return (try? encoder.encode(object)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }

    static func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? String(text.prefix(width)) : text + String(repeating: " ", count: width - text.count)
    }

    private static func bytes(_ value: Int64) -> String { Format.bytes(value) }
    private static func rate(_ value: Double) -> String { Format.rate(value) }
}
