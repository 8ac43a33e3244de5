import Foundation
import TransferCore

/// `transferd run [QUEUE_DIR]`: works the queue until nothing is runnable.
enum RunCommand {
    static let specs: [OptionSpec] = [
        OptionSpec("--watch", help: "keep running and pick up new job files as they appear"),
        OptionSpec("-j", "--jobs", value: "N", help: "jobs transferring at once (default: 8)"),
        OptionSpec("--per-host", value: "N", help: "connections to one host at once, all jobs together (default: 16)"),
        OptionSpec("-c", "--connections", value: "N", help: "range connections per download job unless the job says (default: 1)"),
        QueueFlags.rootSpec,
        OptionSpec("-q", "--quiet", help: "print errors only"),
        OptionSpec("-h", "--help", help: "show this help"),
    ] + TransferFlags.specs.filter { !$0.names.contains("--header") }

    static let usage = "transferd run [QUEUE_DIR] [--watch] [--jobs N] [--limit-rate RATE] [options]"

    static func run(_ argv: [String]) async -> ExitCode {
        let arguments: ParsedArguments
        var options = RunOptions()
        do {
            arguments = try ParsedArguments.parse(argv, specs: specs, command: "run")
            if arguments.has("--help") {
                Output.out(helpText(usage: usage, summary: """
                    Ingests the job files in QUEUE_DIR (default ./queue.d), runs every runnable job and exits:
                    0 when every job is done, 1 when any failed, 2 for usage errors or rejected job files,
                    130 when interrupted.
                    """, specs: specs))
                return .success
            }
            guard arguments.positionals.count <= 1 else { throw UsageError("one queue folder at a time") }
            options.watch = arguments.has("--watch")
            options.maxJobs = try arguments.integer("--jobs", range: 1...1024) ?? options.maxJobs
            options.maxConnectionsPerHost = try arguments.integer("--per-host", range: 1...1024) ?? options.maxConnectionsPerHost
            options.connections = try arguments.integer("--connections", range: 1...64) ?? options.connections
            options.limitRate = try arguments.byteSize("--limit-rate")
            options.tls = try TransferFlags.tls(arguments)
            options.retries = try arguments.integer("--retries", range: 1...1000) ?? options.retries
            options.connectTimeout = try arguments.seconds("--connect-timeout") ?? options.connectTimeout
            options.idleTimeout = try arguments.seconds("--idle-timeout") ?? options.idleTimeout
            options.maxRedirects = try arguments.integer("--max-redirects", range: 0...100) ?? options.maxRedirects
            if let transport = arguments.value("--transport") {
                guard ["curl", "urlsession"].contains(transport) else {
                    throw UsageError("--transport must be curl or urlsession, not '\(transport)'")
                }
                options.transport = transport
            }
        } catch {
            Output.err("transferd run: \(error)\n")
            return .usage
        }

        let layout = QueueFlags.layout(arguments)
        let lock: RunLock
        let store: SQLiteQueueStore
        do {
            try layout.prepare()
            lock = try RunLock(path: layout.lockFile)
            store = try SQLiteQueueStore(path: layout.database)
        } catch {
            Output.err("transferd run: \(error)\n")
            return .usage
        }
        let printer = QueuePrinter(quiet: arguments.has("--quiet"))
        let runner = QueueRunner(layout: layout, store: store, options: options) { printer.handle($0) }
        let signals = SignalHandler { runner.stop() }
        defer { signals.restore() }
        do {
            let summary = try await runner.run()
            withExtendedLifetime(lock) {}
            printer.summary(summary, layout: layout)
            if summary.interrupted { return .interrupted }
            if summary.failedInStore > 0 { return .transferFailed }
            return summary.rejectedFiles > 0 ? .usage : .success
        } catch {
            Output.err("transferd run: \(error)\n")
            return .localError
        }
    }
}

/// Plain lines for queue events on stderr (the live view comes later).
final class QueuePrinter: @unchecked Sendable {
    private let quiet: Bool

    init(quiet: Bool) { self.quiet = quiet }

    func handle(_ event: QueueEvent) {
        switch event {
        case .ingested(let files, let jobs, let rejected):
            if !quiet { Output.err("ingested \(files) file\(files == 1 ? "" : "s"): \(jobs) new job\(jobs == 1 ? "" : "s")\n") }
            for errors in rejected { Output.err("rejected: \(errors)\n") }
        case .started(let id, let url, _):
            if !quiet { Output.err("start  \(id)  \(url)\n") }
        case .retrying(let id, let delay, let reason):
            if !quiet { Output.err("retry  \(id)  in \(String(format: "%.1f", delay)) s: \(reason)\n") }
        case .finished(let id, let state, let bytes, let elapsed, let error):
            switch state {
            case .done:
                if !quiet {
                    let size = bytes.map { " \($0) bytes" } ?? ""
                    let time = elapsed.map { String(format: " in %.2f s", $0) } ?? ""
                    Output.err("done   \(id)\(size)\(time)\n")
                }
            case .failed:
                Output.err("FAILED \(id): \(error ?? "unknown error") — `transferd retry \(id)` after fixing it\n")
            default:
                if !quiet { Output.err("\(state.rawValue) \(id)\n") }
            }
        case .paused(let count):
            if !quiet { Output.err("paused \(count) running job\(count == 1 ? "" : "s"); `transferd run` resumes\n") }
        }
    }

    func summary(_ summary: RunSummary, layout: QueueLayout) {
        if summary.interrupted {
            Output.err("interrupted: running jobs are paused with their progress saved; run the same command to resume\n")
        }
        guard !quiet || summary.failedInStore > 0 else { return }
        var text = "this run: \(summary.done) done, \(summary.failed) failed"
        if summary.cancelled > 0 { text += ", \(summary.cancelled) cancelled" }
        if summary.failedInStore > 0 {
            text += "; \(summary.failedInStore) failed job\(summary.failedInStore == 1 ? "" : "s") in the queue"
            text += " (see \(layout.failed), `transferd retry --failed`)"
        }
        Output.err(text + "\n")
    }
}
