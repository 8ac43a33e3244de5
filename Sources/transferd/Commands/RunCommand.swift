import Foundation
import TransferCore

/// `transferd run [--queue QUEUE_DIR]`: works the queue until nothing is runnable.
enum RunCommand {
    static let specs: [OptionSpec] = [
        OptionSpec("--watch", help: "keep running and pick up new job files as they appear"),
        OptionSpec("-j", "--jobs", value: "N", help: "jobs transferring at once (default: 8)"),
        OptionSpec("--per-host", value: "N", help: "connections to one host at once, all jobs together (default: 16)"),
        OptionSpec("-c", "--connections", value: "N", help: "range connections per download job unless the job says (default: 1)"),
        QueueFlags.rootSpec,
        QueueFlags.storeSpec,
        OptionSpec("--worker", value: "NAME", help: "this worker's name in a shared store (default: HOST:PID)"),
        OptionSpec("--lease", value: "SECONDS", help: "how long a shared store's claim holds without renewal (default: 30)"),
        OptionSpec("--store-outage", value: "SECONDS",
                   help: "how long a worker keeps trying to reach a shared store that went away before it stops (default: 300)"),
        OptionSpec("--listen", value: "ADDR:PORT", help: "serve the control API and dashboard while the run works (127.0.0.1:0: any free port)"),
        OptionSpec("--api-token-file", value: "FILE", help: "the API's bearer token (default: made once in QUEUE_DIR/.transferd/api.token)"),
        OptionSpec("--on-done", value: "COMMAND", help: "run COMMAND (words, or a JSON list; no shell) when a job without its own on_done is done"),
        OptionSpec("--on-failed", value: "COMMAND", help: "run COMMAND when a job without its own on_failed fails"),
        OptionSpec("--notify", value: "URL", help: "POST each finished job's outcome as JSON to URL (signed when TRANSFERD_NOTIFY_SECRET is set)"),
        OptionSpec("--hook-timeout", value: "SECONDS", help: "stop a hook command after this long (default: 60)"),
        OptionSpec("--allow-job-hooks", help: "take on_done / on_failed commands from job files and the API (they run as you)"),
    ] + OutputFlags.specs + [
        OptionSpec("-h", "--help", help: "show this help"),
    ] + TransferFlags.queueSpecs

    static let usage = "transferd run [--queue QUEUE_DIR] [--watch] [--jobs N] [--limit-rate RATE] [options]"

    static let help = CommandHelp(name: "run", usage: usage, summary: """
        Ingests the job files in QUEUE_DIR (default ./queue.d), runs every runnable job and exits:
        0 when every job is done, 1 when any failed, 2 for usage errors or rejected job files,
        130 when interrupted.
        """, options: specs)

    static func run(_ argv: [String]) async -> ExitCode {
        let arguments: ParsedArguments
        var options = RunOptions()
        let output: OutputFlags
        do {
            arguments = try ParsedArguments.parse(argv, specs: specs, command: "run")
            if arguments.has("--help") {
                Output.out(help.text)
                return .success
            }
            guard arguments.positionals.count <= 1 else { throw UsageError("one queue folder at a time") }
            options.watch = arguments.has("--watch")
            options.maxJobs = try arguments.integer("--jobs", range: 1...1024) ?? options.maxJobs
            options.maxConnectionsPerHost = try arguments.integer("--per-host", range: 1...1024) ?? options.maxConnectionsPerHost
            options.connections = try arguments.integer("--connections", range: 1...64) ?? options.connections
            options.limitRate = try arguments.byteSize("--limit-rate")
            options.lowSpeed = try TransferFlags.lowSpeed(arguments)
            options.tls = try TransferFlags.tls(arguments)
            options.retries = try arguments.integer("--retries", range: 1...1000) ?? options.retries
            options.connectTimeout = try arguments.seconds("--connect-timeout") ?? options.connectTimeout
            options.idleTimeout = try arguments.seconds("--idle-timeout") ?? options.idleTimeout
            options.maxRedirects = try arguments.integer("--max-redirects", range: 0...100) ?? options.maxRedirects
            output = try OutputFlags(arguments)
            options.hooks = try hookFlags(arguments)
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

        let layout: QueueLayout
        do {
            layout = try QueueFlags.layout(arguments, command: "run", allowsPositional: true)
        } catch {
            Output.err("transferd run: \(error)\n")
            return .usage
        }
        let lock: RunLock?
        let store: QueueStore
        var listen: ListenAddress?
        do {
            if let text = arguments.value("--listen") {
                let address = try ListenAddress(parsing: text)
                guard address.isLoopback || arguments.has("--api-token-file") else {
                    throw UsageError("--listen \(text) would serve other machines: give --api-token-file FILE with a token"
                                     + " you keep secret (openssl rand -hex 32 > FILE; chmod 600 FILE), or listen on 127.0.0.1")
                }
                listen = address
            } else if arguments.has("--api-token-file") {
                throw UsageError("--api-token-file goes with --listen")
            }
            if try QueueFlags.storeURL(arguments) != nil {
                try QueueFlags.requireQueueFolder(layout, command: "run", uses: "reads job files from it and writes results into it")
            }
            try layout.prepare()
            let lease = try arguments.seconds("--lease") ?? 30
            guard lease >= 1 else { throw UsageError("--lease must be at least 1 second") }
            // One run per queue folder with its own store; a shared store's workers may share a folder.
            lock = try QueueFlags.storeURL(arguments) == nil ? RunLock(path: layout.lockFile) : nil
            let outage = try arguments.seconds("--store-outage") ?? 300
            guard outage >= 1 else { throw UsageError("--store-outage must be at least 1 second") }
            store = try QueueFlags.openStore(layout, arguments, leaseSeconds: lease, outageSeconds: outage)
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
                let token = try arguments.value("--api-token-file").map(APIToken.read(from:)) ?? APIToken.queueToken(in: layout)
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
    static func hookFlags(_ arguments: ParsedArguments) throws -> RunHooks {
        var hooks = RunHooks()
        for flag in ["--on-done", "--on-failed"] {
            guard let text = arguments.value(flag) else { continue }
            switch RunHooks.command(flag: text) {
            case .success(let argv): if flag == "--on-done" { hooks.onDone = argv } else { hooks.onFailed = argv }
            case .failure(let problem): throw UsageError("\(flag): \(problem) (write it as words, or as a JSON list: '[\"/bin/x\", \"a b\"]')")
            }
        }
        if let url = arguments.value("--notify") {
            if let problem = RunHooks.notifyProblem(url) { throw UsageError("--notify: \(problem)") }
            hooks.notify = url
        }
        hooks.timeout = try arguments.seconds("--hook-timeout") ?? hooks.timeout
        hooks.allowJobCommands = arguments.has("--allow-job-hooks")
        guard hooks.timeout > 0 else { throw UsageError("--hook-timeout must be more than 0 seconds") }
        return hooks
    }
}
