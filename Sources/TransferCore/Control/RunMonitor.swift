import Foundation

/// What `/metrics` counts from a run's events: bytes by direction, retries and
/// finished jobs by state. A value, tested without I/O.
struct TransferTally: Sendable, Equatable {
    private(set) var downloaded: Int64 = 0
    private(set) var uploaded: Int64 = 0
    private(set) var retries = 0
    private(set) var finished: [JobState: Int] = [:]
    /// Running jobs: whether each uploads, and the bytes already counted.
    private var jobs: [String: Running] = [:]
    private struct Running: Sendable, Equatable {
        var upload: Bool
        var counted: Int64
    }

    static func isUpload(kind: String) -> Bool { kind != JobSpec.Kind.download.rawValue }

    mutating func apply(_ event: QueueEvent) {
        switch event {
        case .started(let start):
            // Bytes from earlier runs are not this run's.
            jobs[start.id] = Running(upload: Self.isUpload(kind: start.kind), counted: start.bytesDone)
        case .progress(let progress):
            for job in progress { count(job.id, upTo: job.bytesDone) }
        case .retrying(let retry):
            retries += 1
            jobs[retry.id] = nil
        case .finished(let end):
            if end.state == .done, !end.skipped, let bytes = end.bytes { count(end.id, upTo: bytes) }
            finished[end.state, default: 0] += 1
            jobs[end.id] = nil
        case .paused(let ids), .held(let ids):
            for id in ids { jobs[id] = nil }
        case .completing(let id, let bytes):
            count(id, upTo: bytes)
        case .runStarted, .ingested:
            break
        }
    }

    private mutating func count(_ id: String, upTo bytes: Int64) {
        guard let job = jobs[id], bytes > job.counted else { return }
        if job.upload { uploaded += bytes - job.counted } else { downloaded += bytes - job.counted }
        jobs[id]?.counted = bytes
    }
}

/// A host's connections in use and its limit now (lowered by 429s and 503s).
package struct HostUse: Sendable, Equatable {
    package var host: String
    package var connections: Int
    package var limit: Int
    package init(host: String, connections: Int, limit: Int) {
        self.host = host
        self.connections = connections
        self.limit = limit
    }
}

/// The run as the control API sees it: every event goes into the journal (as the
/// `--json` line it would print) and into the totals and counters the summary and
/// `/metrics` show. The run loop calls `handle`; API threads read.
package final class RunMonitor: Sendable {
    package let journal: EventJournal
    private let state: Locked<(encoder: QueueEventEncoder, tally: TransferTally)>

    package init(journal: EventJournal = EventJournal(), startedAt: Date = Date(), progressInterval: TimeInterval = 1) {
        self.journal = journal
        self.state = Locked((QueueEventEncoder(startedAt: startedAt, interval: progressInterval), TransferTally()))
    }

    package func handle(_ event: QueueEvent, at now: Date = Date()) {
        let object = state.withLock { state in
            state.tally.apply(event)
            return state.encoder.encode(event, at: now)
        }
        if let object { journal.append(object.serialized()) }
    }

    /// The run's summary event; the streams end after it.
    package func finish(_ summary: RunSummary, at now: Date = Date()) {
        let object = state.withLock { $0.encoder.summary(summary, at: now) }
        journal.append(object.serialized())
        journal.close()
    }

    var totals: JSONObject {
        state.withLock { $0.encoder.totals() }
    }

    var counters: TransferTally {
        state.current.tally
    }
}

/// `/metrics` in Prometheus's text format (version 0.0.4).
enum MetricsText {
    static func render(tally: TransferTally, jobs: [JobState: Int], hosts: [HostUse], eventStreams: Int = 0) -> String {
        var text = ""
        func family(_ name: String, _ type: String, _ help: String, _ samples: [(labels: String, value: String)]) {
            text += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
            for sample in samples { text += "\(name)\(sample.labels) \(sample.value)\n" }
        }
        family("transferd_bytes_total", "counter", "Bytes moved by this run, by direction.",
               [("{direction=\"download\"}", "\(tally.downloaded)"), ("{direction=\"upload\"}", "\(tally.uploaded)")])
        family("transferd_jobs", "gauge", "Jobs in the store, by state.",
               JobState.allCases.map { ("{state=\"\($0.rawValue)\"}", "\(jobs[$0] ?? 0)") })
        family("transferd_jobs_finished_total", "counter", "Jobs this run finished, by outcome.",
               [JobState.done, .failed, .cancelled].map { ("{state=\"\($0.rawValue)\"}", "\(tally.finished[$0] ?? 0)") })
        family("transferd_retries_total", "counter", "Attempts this run retried after a failure.", [("", "\(tally.retries)")])
        let sorted = hosts.sorted { $0.host < $1.host }
        family("transferd_host_connections", "gauge", "Connections in use to each host.",
               sorted.map { ("{host=\"\(label($0.host))\"}", "\($0.connections)") })
        family("transferd_host_connection_limit", "gauge", "Each host's connection limit now (lowered after 429 or 503).",
               sorted.map { ("{host=\"\(label($0.host))\"}", "\($0.limit)") })
        family("transferd_event_streams", "gauge", "Clients following GET /v1/events now.", [("", "\(eventStreams)")])
        return text
    }

    /// A label value with the format's escapes (backslash, quote, newline).
    static func label(_ value: String) -> String {
        value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\n", with: "\\n")
    }
}
