import Foundation
import TransferCore

/// `transferd get s3://bucket/prefix/ -o DIR`: every object under the prefix
/// into DIR, keeping the key paths below the prefix.
enum GetPrefix {
    static func run(_ flags: GetOptions, prefix: S3Prefix) async -> ExitCode {
        let download: S3PrefixDownload
        // The files the download saved, by identity: --delete never removes one of them.
        let savedFiles = SavedFiles()
        let quiet = flags.quiet
        let line: PrefixLine
        do {
            guard let output = flags.output else {
                throw UsageError("s3://\(prefix.bucket)/\(prefix.prefix) is a prefix: name the folder its objects go into with -o DIR")
            }
            if flags.sha256 != nil { throw UsageError("--sha256 checks one file; a prefix holds many objects") }
            if flags.overwrite && (flags.skipExisting || flags.skipUnchanged) {
                throw UsageError("--overwrite and --skip-unchanged exclude each other")
            }
            let configuration = try S3Configuration.resolve(endpoint: flags.endpoint,
                                                            region: flags.region,
                                                            profile: flags.profile)
            let transport = try TransferFlags.transport(flags.transfer)
            let retry = try TransferFlags.retry(flags.transfer)
            let tls = try TransferFlags.tls(flags.transfer)
            let client = S3Client(configuration: configuration, transport: transport, retry: retry, tls: tls)
            let folder = URL(fileURLWithPath: output).standardized.path
            var options = S3PrefixDownloadOptions(bucket: prefix.bucket, prefix: prefix.prefix, destination: folder)
            options.filter = S3PrefixPlan.Filter(include: flags.include, exclude: flags.exclude)
            options.connections = try flags.connections ?? 1
            options.filesInFlight = try flags.jobs ?? 8
            options.overwrite = flags.overwrite ? .overwrite
                : flags.skipExisting || flags.skipUnchanged ? .skipIfIdentical : .refuse
            options.retry = retry
            options.tls = tls
            options.connectTimeout = try flags.transfer.connectTimeout ?? 15
            options.idleTimeout = try flags.transfer.idleTimeout ?? 30
            options.maxRate = try flags.transfer.limitRate
            options.lowSpeed = try TransferFlags.lowSpeed(flags.transfer)
            line = PrefixLine(name: "s3://\(prefix.bucket)/\(prefix.prefix)", quiet: quiet)
            download = S3PrefixDownload(client: client, transport: transport, options: options,
                                        store: FileUploadStateStore.prefixDownload(
                                            folder: folder, bucket: prefix.bucket,
                                            // Another endpoint or other filters are another listing: never resumed from this one.
                                            prefix: ([configuration.endpoint.absoluteString, prefix.prefix]
                                                     + options.filter.include.map { "+" + $0 } + options.filter.exclude.map { "-" + $0 })
                                                .joined(separator: "\n"))) {
                line.handle($0)
                savedFiles.note($0)
            }
        } catch {
            Output.err("transferd get: \(error)\n")
            return .usage
        }
        do {
            // --dry-run and --delete plan from one listing and one walk of the folder, before any byte moves.
            let sync = try SyncFlags.options(flags.sync)
            var plan: FolderSync?
            if sync.dryRun || sync.delete {
                let made = try await FolderSync.plan(client: download.client, options: download.options, sync: sync)
                if sync.dryRun {
                    SyncFlags.print(made.preview)
                    return .success
                }
                if let refusal = made.preview.refusal { throw SyncRefusal(reason: refusal) }
                plan = made
            }
            let result = try await SignalHandler.cancelling { try await download.run() }
            line.finish(result)
            if let partial = result.partialCopy {
                Output.err("transferd get: \(partial)\n")
                return .transferFailed
            }
            // Only after every key was saved: a failed or partial download deletes nothing.
            if let plan, !plan.preview.delete.isEmpty {
                let removed = try plan.deleteExtraneous(in: download.options.destination, saved: savedFiles.current)
                if !quiet { Output.err("\(line.name): \(removed) file\(removed == 1 ? "" : "s") deleted (--delete)\n") }
            }
            return .success
        } catch let error as UsageError {
            Output.err("transferd get: \(error)\n")
            return .usage
        } catch let refusal as SyncRefusal {
            Output.err("transferd get: \(refusal); nothing was downloaded or deleted\n")
            return .usage
        } catch is CancellationError {
            line.clear()
            Output.err("transferd get: interrupted; run the same command to continue where the listing stopped\n")
            return .interrupted
        } catch let error as S3PrefixError {
            line.clear()
            Output.err("transferd get: \(error); run the same command to retry them\n")
            return ExitCode.of(error, otherwise: .transferFailed)
        } catch {
            line.clear()
            Output.err("transferd get: \(error)\n")
            return ExitCode.of(error, otherwise: .transferFailed)
        }
    }
}

/// The progress of a prefix download on stderr: a live line on a terminal
/// (files saved, bytes, speed), a line per refused or failed key, a summary.
final class PrefixLine: Sendable {
    let name: String
    private let quiet: Bool
    /// The line is drawn while it is held, so two threads' lines never interleave.
    private let state: Locked<State>

    private struct State {
        var lastDraw = Date.distantPast
        var lastSample: (time: Date, bytes: Int64)?
        var speed: Double = 0
        var live = LiveLine()
    }

    init(name: String, quiet: Bool) {
        self.name = name
        self.quiet = quiet
        self.state = Locked(State())
    }

    func handle(_ event: S3PrefixEvent) {
        state.withLock { state in
            switch event {
            case .progress(let bytes, let files):
                let now = Date()
                if let sample = state.lastSample {
                    state.speed = RunProgress.smooth(state.speed, delta: max(0, bytes - sample.bytes),
                                                     interval: now.timeIntervalSince(sample.time))
                }
                state.lastSample = (now, bytes)
                guard state.live.interactive, !quiet, now.timeIntervalSince(state.lastDraw) >= 0.25 else { return }
                state.lastDraw = now
                let text = "\(name)  \(files) file\(files == 1 ? "" : "s")  \(Format.bytes(bytes))  \(Format.rate(state.speed))"
                draw(String(text.prefix(max(20, Output.terminalSize(fd: 2).columns - 1))), permanent: false, on: &state.live)
            case .refused(let key, let reason):
                draw("\(key): not saved: \(reason)", permanent: true, always: true, on: &state.live)
            case .failed(let key, let reason):
                draw("\(key): failed: \(reason)", permanent: true, always: true, on: &state.live)
            case .saved, .unchanged:
                break
            }
        }
    }

    /// Called with `state` held.
    private func draw(_ text: String, permanent: Bool, always: Bool = false, on live: inout LiveLine) {
        guard !quiet || always else { return }
        live.show(text, permanent: permanent)
    }

    func clear() {
        state.withLock { $0.live.erase() }
    }

    func finish(_ result: S3PrefixResult) {
        clear()
        guard !quiet else { return }
        let elapsed = max(result.elapsed, 0.001)
        var text = "\(name): \(result.files) file\(result.files == 1 ? "" : "s") saved, \(Format.bytes(result.bytes))"
            + " in \(String(format: "%.2f", elapsed)) s (\(Format.rate(Double(result.bytes) / elapsed)))"
        if result.unchanged > 0 { text += ", \(result.unchanged) unchanged" }
        if result.refused > 0 { text += ", \(result.refused) refused (named above)" }
        Output.err(text + "\n")
    }
}
