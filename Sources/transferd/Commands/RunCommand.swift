import Foundation
import TransferCore

/// `transferd run [--queue QUEUE_DIR]`: works the queue until nothing is runnable.
enum RunCommand {
    static let watch = Flag.presence("--watch", help: "keep running and pick up new job files as they appear")
    static let jobs = Flag.integer("-j", "--jobs", value: "N", range: 1...1024, help: "jobs transferring at once (default: 8)")
    static let perHost = Flag.integer("--per-host", value: "N", range: 1...1024,
                                      help: "connections to one host at once, all jobs together (default: 16)")
    static let connections = Flag.integer("-c", "--connections", value: "N", range: 1...64,
                                          help: "range connections per download job unless the job says (default: 1)")
    static let lease = Flag.seconds("--lease", help: "how long a shared store's claim holds without renewal (default: 30)")
    static let storeOutage = Flag.seconds("--store-outage",
                                          help: "how long a worker keeps trying to reach a shared store that went away before it stops (default: 300)")
    static let listen = Flag.string("--listen", value: "ADDR:PORT",
                                    help: "serve the control API and dashboard while the run works (127.0.0.1:0: any free port)")
    static let apiTokenFile = Flag.string("--api-token-file", value: "FILE",
                                          help: "the API's bearer token (default: made once in QUEUE_DIR/.transferd/api.token)")
    static let onDone = Flag.string("--on-done", value: "COMMAND",
                                    help: "run COMMAND (words, or a JSON list; no shell) when a job without its own on_done is done")
    static let onFailed = Flag.string("--on-failed", value: "COMMAND", help: "run COMMAND when a job without its own on_failed fails")
    static let notify = Flag.string("--notify", value: "URL",
                                    help: "POST each finished job's outcome as JSON to URL (signed when TRANSFERD_NOTIFY_SECRET is set)")
    static let hookTimeout = Flag.seconds("--hook-timeout", help: "stop a hook command after this long (default: 60)")
    static let allowJobHooks = Flag.presence("--allow-job-hooks",
                                             help: "take on_done / on_failed commands from job files and the API (they run as you)")

    static let specs: [OptionSpec] = [
        watch.spec, jobs.spec, perHost.spec, connections.spec, QueueFlags.root.spec, QueueFlags.store.spec, QueueFlags.worker.spec,
        lease.spec, storeOutage.spec, listen.spec, apiTokenFile.spec, onDone.spec, onFailed.spec, notify.spec, hookTimeout.spec,
        allowJobHooks.spec,
    ] + OutputFlags.specs + [StandardFlags.help.spec] + TransferFlags.queueSpecs

    static let usage = "transferd run [--queue QUEUE_DIR] [--watch] [--jobs N] [--limit-rate RATE] [options]"

    static let help = CommandHelp(name: "run", usage: usage, summary: """
        Ingests the job files in QUEUE_DIR (default ./queue.d), runs every runnable job and exits:
        0 when every job is done, 1 when any failed, 2 for usage errors or rejected job files,
        130 when interrupted.
        """, options: specs)

    static func run(_ argv: [String]) async -> ExitCode {
        let flags: RunCommandOptions
        var options = RunOptions()
        let output: OutputFlags
        do {
            let arguments = try ParsedArguments.parse(argv, specs: specs, command: "run")
            if arguments.wantsHelp {
                Output.out(help.text)
                return .success
            }
            flags = RunCommandOptions(arguments)
            guard flags.positionals.count <= 1 else { throw UsageError("one queue folder at a time") }
            options.watch = flags.watch
            options.maxJobs = try flags.jobs ?? options.maxJobs
            options.maxConnectionsPerHost = try flags.perHost ?? options.maxConnectionsPerHost
            options.connections = try flags.connections ?? options.connections
            options.limitRate = try flags.transfer.limitRate
            options.lowSpeed = try TransferFlags.lowSpeed(flags.transfer)
            options.tls = try TransferFlags.tls(flags.transfer)
            options.retries = try flags.transfer.retries ?? options.retries
            options.connectTimeout = try flags.transfer.connectTimeout ?? options.connectTimeout
            options.idleTimeout = try flags.transfer.idleTimeout ?? options.idleTimeout
            options.maxRedirects = try flags.transfer.maxRedirects ?? options.maxRedirects
            output = try OutputFlags(flags.arguments)
            options.hooks = try hookFlags(flags)
            if let transport = flags.transfer.transport {
                guard ["curl", "urlsession"].contains(transport) else {
                    throw UsageError("--transport must be curl or urlsession, not '\(transport)'")
                }
                options.transport = transport
            }
        } catch {
            Output.err("transferd run: \(error)\n")
            return .usage
        }

        let layout: QueueLayout
        do {
            layout = try QueueFlags.layout(flags.queue, command: "run", allowsPositional: true)
        } catch {
            Output.err("transferd run: \(error)\n")
            return .usage
        }
        let lock: RunLock?
        let store: QueueStore
        var listen: ListenAddress?
        do {
            if let text = flags.listen {
                let address = try ListenAddress(parsing: text)
                guard address.isLoopback || flags.apiTokenFile != nil else {
                    throw UsageError("--listen \(text) would serve other machines: give --api-token-file FILE with a token"
                                     + " you keep secret (openssl rand -hex 32 > FILE; chmod 600 FILE), or listen on 127.0.0.1")
                }
                listen = address
            } else if flags.apiTokenFile != nil {
                throw UsageError("--api-token-file goes with --listen")
            }
            if try QueueFlags.storeURL(flags.queue) != nil {
                try QueueFlags.requireQueueFolder(layout, command: "run", uses: "reads job files from it and writes results into it")
            }
            try layout.prepare()
            let lease = try flags.lease ?? 30
            guard lease >= 1 else { throw UsageError("--lease must be at least 1 second") }
            // One run per queue folder with its own store; a shared store's workers may share a folder.
            lock = try QueueFlags.storeURL(flags.queue) == nil ? RunLock(path: layout.lockFile) : nil
            let outage = try flags.storeOutage ?? 300
            guard outage >= 1 else { throw UsageError("--store-outage must be at least 1 second") }
            store = try QueueFlags.openStore(layout, flags.queue, leaseSeconds: lease, outageSeconds: outage)
        } catch {
            Output.err("transferd run: \(CommandError.text(error))\n")
            return ExitCode.of(error, otherwise: .usage)
        }
        let renderer = output.renderer(failedFolder: layout.failed)
        options.requestLog = output.requestLog(renderer)
        let monitor = listen.map { _ in RunMonitor() }
        let runner = QueueRunner(layout: layout, store: store, options: options) { event in
            renderer.handle(event)
            monitor?.handle(event)
        }
        var server: ControlServer?
        if let listen, let monitor {
            do {
                let token = try flags.apiTokenFile.map(APIToken.read(from:)) ?? APIToken.queueToken(in: layout)
                let api = ControlAPI(store: store, layout: layout, token: token, monitor: monitor,
                                     allowsCommands: options.hooks.allowJobCommands,
                                     hosts: { runner.hostUse }, changed: { runner.storeChanged() })
                server = try ControlServer(address: listen, api: api)
                Output.err("transferd: control API and dashboard at \(server!.url)/ (token in \(token.path))\n")
            } catch {
                Output.err("transferd run: \(CommandError.text(error))\n")
                return .usage
            }
        }
        defer { server?.stop() }
        let signals = SignalHandler { runner.stop() }
        defer { signals.restore() }
        do {
            let summary = try await runner.run()
            withExtendedLifetime(lock) {}
            monitor?.finish(summary)
            renderer.finish(summary)
            TerminalRestore.deactivate()
            if summary.interrupted { return .interrupted }
            if summary.failedInStore > 0 { return .transferFailed }
            return summary.rejectedFiles > 0 ? .usage : .success
        } catch {
            renderer.abandon()
            TerminalRestore.deactivate()
            Output.err("transferd run: \(CommandError.text(error))\n")
            return ExitCode.of(error, otherwise: .localError)
        }
    }

    /// `--on-done`, `--on-failed`, `--notify`, `--hook-timeout`.
    static func hookFlags(_ flags: RunCommandOptions) throws -> RunHooks {
        var hooks = RunHooks()
        for (flag, text) in [(onDone, flags.onDone), (onFailed, flags.onFailed)] {
            guard let text else { continue }
            switch RunHooks.command(flag: text) {
            case .success(let argv): if flag.name == onDone.name { hooks.onDone = argv } else { hooks.onFailed = argv }
            case .failure(let problem): throw UsageError("\(flag.name): \(problem) (write it as words, or as a JSON list: '[\"/bin/x\", \"a b\"]')")
            }
        }
        if let url = flags.notify {
            if let problem = RunHooks.notifyProblem(url) { throw UsageError("--notify: \(problem)") }
            hooks.notify = url
        }
        hooks.timeout = try flags.hookTimeout ?? hooks.timeout
        hooks.allowJobCommands = flags.allowJobHooks
        guard hooks.timeout > 0 else { throw UsageError("--hook-timeout must be more than 0 seconds") }
        return hooks
    }
}

/// `run`'s options, typed (`RunOptions` is what the queue runner is given, made from these):
/// each read through its `Flag` in `RunCommand`, a checked one where the command uses it.
struct RunCommandOptions: TypedOptions {
    let arguments: ParsedArguments

    init(_ arguments: ParsedArguments) { self.arguments = arguments }

    var watch: Bool { arguments[RunCommand.watch] }
    var jobs: Int? { get throws { try arguments.read(RunCommand.jobs) } }
    var perHost: Int? { get throws { try arguments.read(RunCommand.perHost) } }
    var connections: Int? { get throws { try arguments.read(RunCommand.connections) } }
    var lease: Double? { get throws { try arguments.read(RunCommand.lease) } }
    var storeOutage: Double? { get throws { try arguments.read(RunCommand.storeOutage) } }
    var listen: String? { arguments[RunCommand.listen] }
    var apiTokenFile: String? { arguments[RunCommand.apiTokenFile] }
    var onDone: String? { arguments[RunCommand.onDone] }
    var onFailed: String? { arguments[RunCommand.onFailed] }
    var notify: String? { arguments[RunCommand.notify] }
    var hookTimeout: Double? { get throws { try arguments.read(RunCommand.hookTimeout) } }
    var allowJobHooks: Bool { arguments[RunCommand.allowJobHooks] }
    var queue: QueueOptions { QueueOptions(arguments) }
    var transfer: TransferOptions { TransferOptions(arguments) }
}
