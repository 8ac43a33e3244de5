import Foundation
import TransferCore

/// `status`, `add`, `validate`, `retry` and `cancel`: the queue commands that do not transfer.
enum QueueCommands {
    static let help = StandardFlags.help.spec

    // MARK: status

    static let json = Flag.presence("--json", help: "one JSON object per job, streamed")
    static let all = Flag.presence("--all", help: "list every job, however many (a queue of over \(StatusTable.listedWhole) is summed up)")
    static let watch = Flag.presence("-w", "--watch", help: "a live view of the run working this queue, until Ctrl-C")
    static let interval = Flag.seconds("--interval", help: "seconds between refreshes of --watch (default: 0.5)")
    static let noColor = Flag.presence("--no-color", help: "no colour in the --watch view (also: NO_COLOR=1)")
    static let remote = Flag.string("--remote", value: "URL", help: "watch the run serving its control API at URL (transferd run --listen) instead")
    static let apiTokenFile = Flag.string("--api-token-file", value: "FILE", help: "the remote run's API token (also: TRANSFERD_API_TOKEN)")

    static let statusHelp = CommandHelp(name: "status", usage: "transferd status [--queue QUEUE_DIR] [--json | --watch] | --watch --remote URL",
                               summary: "Shows every job's state, progress and last error; works while `transferd run` is active.",
                               options: [QueueFlags.queue.spec, QueueFlags.root.spec, QueueFlags.store.spec, json.spec, all.spec, watch.spec,
                                         interval.spec, noColor.spec, remote.spec, apiTokenFile.spec, help])

    static func status(_ argv: [String]) -> ExitCode {
        return command(statusHelp, argv) { arguments in
            let flags = StatusOptions(arguments)
            if let remote = flags.remote {
                return try remoteWatch(remote, flags)
            }
            let layout = try QueueFlags.layout(flags.queue, command: "status", allowsPositional: true)
            let store = try QueueFlags.openStore(layout, flags.queue, forReading: true)
            if flags.watch {
                let interval = try flags.interval ?? 0.5
                var watch = StatusWatch(store: store, layout: layout, interval: interval,
                                        color: !flags.noColor && Output.colorAllowed())
                if try QueueFlags.storeURL(flags.queue) == nil, !StatusWatch.hasStore(layout) {
                    // No run has worked the queue yet: watched empty until one makes its store.
                    watch.reopen = { StatusWatch.hasStore(layout) ? try? layout.openStateStoreForReading() : nil }
                }
                return try watch.run()
            }
            if flags.json {
                try forEachPage(of: store) { page in Output.out(page.map { StatusTable.json($0) + "\n" }.joined()) }
                return .success
            }
            let width = Output.stdoutIsTerminal ? Output.terminalSize().columns : 200
            let counts = try store.counts()
            Output.out(StatusTable.countsLine(counts))
            if try QueueFlags.storeURL(flags.queue) == nil || QueueFlags.queueFolderExists(layout) {
                Output.out(StatusTable.waitingLines(QueueIngestor.waiting(in: layout), folder: layout.directory))
            }
            let settings = try store.settings()
            if settings.paused {
                Output.out("the queue is paused (transferd pause --all): nothing starts until `transferd resume --all`\n")
            }
            if settings.rateLimit != nil || settings.jobs != nil || settings.perHost != nil {
                Output.out(SteerCommands.limitLines(settings))
            }
            if flags.all {
                // Streamed, a page at a time, with whole ids (for scripts that read them).
                var idWidth: Int?
                try forEachPage(of: store) { page in
                    if idWidth == nil {
                        idWidth = StatusTable.idWidth(page)
                        Output.out(StatusTable.header(idWidth: idWidth!))
                    }
                    Output.out(StatusTable.rows(page, idWidth: idWidth!, width: width))
                }
            } else if counts.values.reduce(0, +) <= StatusTable.listedWhole {
                // Few enough to hold: ids shortened to what names each among them all.
                var jobs: [JobRecord] = []
                try forEachPage(of: store) { jobs += $0 }
                let shown = JobIDs.shortest(among: jobs.map(\.id))
                let idWidth = StatusTable.idWidth(jobs, shown: shown)
                if !jobs.isEmpty { Output.out(StatusTable.header(idWidth: idWidth) + StatusTable.rows(jobs, shown: shown, idWidth: idWidth, width: width)) }
            } else {
                // Running jobs are as many as the workers' slots: all of them (up to 500); of the rest, the first 20.
                let sections = try [("running", JobState.running, 500), ("finishing", .finishing, 500), ("failed", .failed, 20),
                                    ("waiting to retry", .waiting, 20), ("paused", .paused, 20), ("held", .held, 20),
                                    ("next queued", .queued, 20)].map { title, state, shown in
                    (title: title, state: state, jobs: try store.jobs(in: state, firstInClaimOrder: shown))
                }
                let shown = try JobIDs.shortest(of: sections.flatMap { $0.jobs.map(\.id) }, in: store)
                Output.out(StatusTable.summary(counts: counts, sections: sections, shown: shown, width: width))
            }
            let workers = try store.workers()
            if !workers.isEmpty { Output.out(StatusTable.renderWorkers(workers, width: width)) }
            let limits = try store.hostLimits()
            if !limits.isEmpty { Output.out(StatusTable.renderHostLimits(limits, width: width)) }
            return .success
        }
    }

    /// Every job of `store` in the order they were added, a page at a time: memory follows the
    /// page, not the queue (a million jobs held at once took 1.5 GiB).
    private static func forEachPage(of store: QueueStore, _ body: ([JobRecord]) throws -> Void) throws {
        var after: Int64 = 0
        while true {
            let page = try store.jobs(in: nil, after: after, limit: 1_000)
            guard let last = page.last else { return }
            try body(page)
            after = last.seq
        }
    }

    private static func remoteWatch(_ address: String, _ flags: StatusOptions) throws -> ExitCode {
        guard let base = URL(string: address), ["http", "https"].contains(base.scheme?.lowercased() ?? ""), base.host != nil else {
            throw UsageError("--remote takes the address `transferd run --listen` printed, e.g. http://10.0.0.5:8080, not '\(address)'")
        }
        guard flags.watch else { throw UsageError("--remote goes with --watch") }
        guard !flags.json, flags.positionals.isEmpty else {
            throw UsageError("--remote watches another machine's run: no QUEUE_DIR and no --json")
        }
        let token: String
        if let file = flags.apiTokenFile {
            token = try APIToken.read(from: file).value
        } else if let value = ProcessInfo.processInfo.environment["TRANSFERD_API_TOKEN"], !value.isEmpty {
            token = value
        } else {
            throw UsageError("--remote needs the run's API token: --api-token-file FILE (a copy of QUEUE_DIR/.transferd/api.token"
                             + " from that machine, mode 600) or TRANSFERD_API_TOKEN")
        }
        let interval = try flags.interval ?? 0.5
        do {
            return try RemoteWatch(base: base, token: token, interval: interval,
                                   color: !flags.noColor && Output.colorAllowed()).run()
        } catch let failure as RemoteWatch.Failure {
            Output.err("transferd status: \(failure)\n")
            return .transferFailed
        }
    }

    // MARK: ingest

    static let allowJobHooks = Flag.presence("--allow-job-hooks", help: "take on_done / on_failed commands from job files (they run as you)")

    static let ingestHelp = CommandHelp(name: "ingest", usage: "transferd ingest [--queue QUEUE_DIR] [--root DIR] [--store URL]",
                               summary: "Records the job files waiting in the queue without running them (run does this first).",
                               options: [QueueFlags.queue.spec, QueueFlags.root.spec, QueueFlags.store.spec, allowJobHooks.spec, help])

    static func ingest(_ argv: [String]) -> ExitCode {
        return command(ingestHelp, argv) { arguments in
            let flags = IngestOptions(arguments)
            let layout = try QueueFlags.layout(flags.queue, command: "ingest", allowsPositional: true)
            if try QueueFlags.storeURL(flags.queue) != nil {
                try QueueFlags.requireQueueFolder(layout, command: "ingest", uses: "reads the job files waiting there")
                // Its accepted/ and rejected/, as `run` makes them (a shared store opens no folder
                // of its own: without this a first ingest failed moving the file it had recorded).
                try layout.prepare()
            }
            let store = try QueueFlags.openStore(layout, flags.queue)
            let lock = try QueueFlags.storeURL(flags.queue) == nil ? RunLock(path: layout.lockFile) : nil
            defer { withExtendedLifetime(lock) {} }
            let report = try QueueIngestor(layout: layout, store: store, allowsCommands: flags.allowJobHooks).ingestAll()
            for rejected in report.rejected { Output.err("rejected: \(rejected.errors)\n") }
            Output.out("ingested \(report.files) file\(report.files == 1 ? "" : "s"): \(report.jobsAdded) new job\(report.jobsAdded == 1 ? "" : "s")\n")
            return report.rejected.isEmpty ? .success : .usage
        }
    }

    // MARK: add

    static let output = Flag.string("-o", "--output", value: "DIR", help: "folder (relative to the root) to download into")
    static let upload = Flag.string("--upload", value: "PATH", help: "an upload job instead: PATH to the URL (http(s): PUT; s3://: S3 upload)")

    static let addHelp = CommandHelp(name: "add", usage: "transferd add URL... [-o DIR] [--queue QUEUE_DIR] | transferd add --upload PATH URL",
                               summary: "Writes a job file into the queue: one download job per URL, or one upload job. "
                                   + "With --store, records the jobs in the shared store at once.",
                               options: [output.spec, upload.spec, QueueFlags.queue.spec, QueueFlags.root.spec, QueueFlags.store.spec, help])

    static func add(_ argv: [String]) -> ExitCode {
        return command(addHelp, argv) { arguments in
            let flags = AddOptions(arguments)
            guard !flags.positionals.isEmpty else { throw UsageError("give at least one URL") }
            let layout = try QueueFlags.layout(flags.queue, command: "add")
            // With --store the jobs go straight into the shared store: no queue folder needed.
            let shared = try QueueFlags.storeURL(flags.queue) != nil
            if !shared { try layout.prepare() }
            var jobs: [[String: String]] = []
            if let source = flags.upload {
                guard flags.positionals.count == 1 else { throw UsageError("--upload takes one destination URL") }
                let url = flags.positionals[0]
                let absolute = source.hasPrefix("/") ? source : FileManager.default.currentDirectoryPath + "/" + source
                jobs.append(["type": url.hasPrefix("s3://") ? "s3-upload" : "put", "url": url, "source": absolute])
            }
            for url in flags.positionals where flags.upload == nil {
                var job = ["url": url]
                if let folder = flags.output { job["dest"] = folder.hasSuffix("/") ? folder : folder + "/" }
                jobs.append(job)
            }
            let data = try JSONSerialization.data(withJSONObject: ["version": 1, "jobs": jobs], options: [.prettyPrinted, .sortedKeys])
            let name = "add-\(Int(Date().timeIntervalSince1970))-\(UUID().uuidString.prefix(8).lowercased()).json"
            let parsed: [JobSpec]
            switch JobFileParser(root: layout.root, queueDirectory: layout.directory).parse(name: name, data: data) {
            case .failure(let rejection): throw UsageError(rejection.description)
            case .success(let specs): parsed = specs
            }
            if shared {
                // Straight into the shared store: every worker sees the jobs at its next claim.
                let store = try QueueFlags.openStore(layout, flags.queue)
                let outcome: IngestOutcome
                switch try store.ingest([JobFileContent(fileName: name, contentHash: SHA256Hasher.hex(of: data), jobs: parsed)])[0] {
                case .recorded(let recorded): outcome = recorded
                case .idTaken(let conflict): throw UsageError(conflict.rejection(file: name).description)
                case .invalid(let rejection): throw UsageError(rejection.description)
                }
                Output.out("\(outcome.added) job\(outcome.added == 1 ? "" : "s") added to the shared store\n")
                return .success
            }
            // Write-then-rename, so a running `transferd run --watch` never reads half a file.
            let temporary = layout.path("." + name + ".tmp")
            try data.write(to: URL(fileURLWithPath: temporary))
            guard rename(temporary, layout.path(name)) == 0 else { throw POSIXFailure(operation: "rename", path: temporary) }
            Output.out("\(layout.path(name)): \(jobs.count) job\(jobs.count == 1 ? "" : "s")\n")
            return .success
        }
    }

    // MARK: validate

    static let validateHelp = CommandHelp(name: "validate", usage: "transferd validate FILE... [--root DIR] [--allow-job-hooks]",
                               summary: "Checks job files without running anything. Exit 0 when all are valid, 2 otherwise.",
                               options: [QueueFlags.root.spec, allowJobHooks.spec, help])

    static func validate(_ argv: [String]) -> ExitCode {
        return command(validateHelp, argv) { arguments in
            let flags = ValidateOptions(arguments)
            guard !flags.positionals.isEmpty else { throw UsageError("give at least one job file") }
            var allValid = true
            for path in flags.positionals {
                let root = flags.root
                    ?? PathText.parent(PathText.parent(path))
                let folder = PathText.parent(path)
                let parser = JobFileParser(root: root.isEmpty ? FileManager.default.currentDirectoryPath : root,
                                           queueDirectory: folder.isEmpty ? FileManager.default.currentDirectoryPath : folder,
                                           allowsCommands: flags.allowJobHooks)
                var info = stat()
                if path.hasSuffix(".urls"), lstat(path, &info) == 0, info.st_size > JobFileParser.largeListSize {
                    // A large list is parsed as ingest parses it: a piece at a time.
                    do {
                        let list = try parser.openLargeList(path, name: path)
                        try list.forEachBatch(of: 10_000) { _ in }
                        Output.out("\(path): ok, \(list.jobCount) job\(list.jobCount == 1 ? "" : "s")\n")
                    } catch {
                        Output.err("\(error)\n")
                        allValid = false
                    }
                    continue
                }
                let data: Data
                do {
                    // Never blocks on a FIFO, never follows a link: as ingest reads it.
                    data = try QueueIngestor.readRegularFile(path, limit: JobFileParser.maxFileSize)
                } catch {
                    Output.err("\(path): cannot read the file: \(error)\n")
                    allValid = false
                    continue
                }
                switch parser.parse(name: path, data: data) {
                case .success(let jobs):
                    Output.out("\(path): ok, \(jobs.count) job\(jobs.count == 1 ? "" : "s")\n")
                case .failure(let rejection):
                    Output.err(rejection.description + "\n")
                    allValid = false
                }
            }
            return allValid ? .success : .usage
        }
    }

    // MARK: retry, cancel

    static let failed = Flag.presence("--failed", help: "every failed job")

    static let retryHelp = CommandHelp(name: "retry", usage: "transferd retry ID|--failed [--queue QUEUE_DIR] [--store URL]",
                               summary: "Puts failed or cancelled jobs back in the queue; the next `transferd run` runs them.",
                               options: [failed.spec, QueueFlags.queue.spec, QueueFlags.store.spec, help])

    static func retry(_ argv: [String]) -> ExitCode {
        return command(retryHelp, argv) { arguments in
            let flags = RetryOptions(arguments)
            let layout = try QueueFlags.layout(flags.queue, command: "retry")
            if flags.failed, let given = flags.positionals.first {
                // It was ignored before: a folder meant as the queue retried ./queue.d's jobs.
                throw UsageError("--failed takes no argument ('\(given)'); to name the queue folder write --queue \(given)")
            }
            let store = try QueueFlags.openStore(layout, flags.queue)
            guard flags.failed || flags.positionals.count == 1 else {
                throw UsageError("give one job ID or --failed")
            }
            let id: String? = try flags.failed ? nil : JobIDs.resolve(flags.positionals[0], in: store)
            // Only the failed jobs are read (a queue of a million holds far fewer): their files' results change.
            let failed = try id.map { try store.job($0).map { [$0] } ?? [] } ?? store.jobs(in: .failed)
            let touched = Set(failed.filter { $0.state == .failed }.map(\.sourceFile))
            let count = try store.requeue(id: id)
            // A job named by a prefix is named whole: the person sees which one it was.
            let named = id.flatMap { $0 == flags.positionals.first ? nil : " (\($0))" } ?? ""
            Output.out("\(count) job\(count == 1 ? "" : "s") queued again\(named)\n")
            // The result files live in a queue folder: with --store, this one's if there is one
            // (each worker writes its own when it finishes a job).
            guard try QueueFlags.storeURL(flags.queue) == nil || QueueFlags.queueFolderExists(layout) else { return .success }
            do {
                try layout.prepare()
                try ResultFiles(layout: layout, store: store).update(sourceFiles: touched)
            } catch {
                throw ResultFilesNotUpdated(count: count, reason: CommandError.text(error))
            }
            return .success
        }
    }

    static let cancelHelp = CommandHelp(name: "cancel", usage: "transferd cancel ID [--queue QUEUE_DIR] [--store URL]",
                               summary: "Cancels a job; a running one is stopped by the `transferd run` working it.",
                               options: [QueueFlags.queue.spec, QueueFlags.store.spec, help])

    static func cancel(_ argv: [String]) -> ExitCode {
        return command(cancelHelp, argv) { arguments in
            // `cancel` takes the queue flags only.
            let queue = QueueOptions(arguments)
            guard queue.positionals.count == 1 else { throw UsageError("give one job ID") }
            let store = try QueueFlags.openStore(try QueueFlags.layout(queue, command: "cancel"), queue)
            let id = try JobIDs.resolve(queue.positionals[0], in: store)
            guard let previous = try store.cancel(id) else { throw QueueError.unknownJob(id) }
            switch previous {
            case .running: Output.out("\(id): the running transfer will stop within a second\n")
            case .done, .failed, .cancelled: Output.out("\(id) is already \(previous.rawValue)\n")
            default: Output.out("\(id): cancelled\n")
            }
            return .success
        }
    }

    /// Parses, handles --help, runs `body`, and maps errors to exit codes.
    static func command(_ help: CommandHelp, _ argv: [String],
                                _ body: (ParsedArguments) throws -> ExitCode) -> ExitCode {
        let name = help.name
        do {
            let arguments = try ParsedArguments.parse(argv, specs: help.options, command: name)
            if arguments.wantsHelp {
                Output.out(help.text)
                return .success
            }
            return try body(arguments)
        } catch {
            Output.err("transferd \(name): \(CommandError.text(error))\n")
            return ExitCode.of(error, otherwise: .localError)
        }
    }
}

/// `status`'s options, typed: each read through its `Flag` in `QueueCommands`.
struct StatusOptions: TypedOptions {
    let arguments: ParsedArguments

    init(_ arguments: ParsedArguments) { self.arguments = arguments }

    var json: Bool { arguments[QueueCommands.json] }
    var all: Bool { arguments[QueueCommands.all] }
    var watch: Bool { arguments[QueueCommands.watch] }
    var interval: Double? { get throws { try arguments.read(QueueCommands.interval) } }
    var noColor: Bool { arguments[QueueCommands.noColor] }
    var remote: String? { arguments[QueueCommands.remote] }
    var apiTokenFile: String? { arguments[QueueCommands.apiTokenFile] }
    var queue: QueueOptions { QueueOptions(arguments) }
}

/// `ingest`'s options, typed.
struct IngestOptions: TypedOptions {
    let arguments: ParsedArguments

    init(_ arguments: ParsedArguments) { self.arguments = arguments }

    var allowJobHooks: Bool { arguments[QueueCommands.allowJobHooks] }
    var queue: QueueOptions { QueueOptions(arguments) }
}

/// `add`'s options, typed.
struct AddOptions: TypedOptions {
    let arguments: ParsedArguments

    init(_ arguments: ParsedArguments) { self.arguments = arguments }

    var output: String? { arguments[QueueCommands.output] }
    var upload: String? { arguments[QueueCommands.upload] }
    var queue: QueueOptions { QueueOptions(arguments) }
}

/// `validate`'s options, typed.
struct ValidateOptions: TypedOptions {
    let arguments: ParsedArguments

    init(_ arguments: ParsedArguments) { self.arguments = arguments }

    var root: String? { arguments[QueueFlags.root] }
    var allowJobHooks: Bool { arguments[QueueCommands.allowJobHooks] }
}

/// `retry`'s options, typed.
struct RetryOptions: TypedOptions {
    let arguments: ParsedArguments

    init(_ arguments: ParsedArguments) { self.arguments = arguments }

    var failed: Bool { arguments[QueueCommands.failed] }
    var queue: QueueOptions { QueueOptions(arguments) }
}

/// `retry` queued the jobs again, and then could not rewrite the queue folder's result files.
struct ResultFilesNotUpdated: Error, CustomStringConvertible {
    let count: Int
    let reason: String
    var description: String {
        "the \(count == 1 ? "job is" : "jobs are") queued again, but the queue folder's result files were not updated: \(reason)"
    }
}
