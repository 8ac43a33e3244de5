import Foundation
import TransferCore

/// `transferd put PATH URL`: one upload — a streamed PUT (or POST), or a
/// multipart/form-data POST with `--form`.
enum PutCommand {
    static let method = Flag.string("-X", "--method", value: "PUT|POST", help: "request method for a plain upload (default: PUT; a form is always POST)")
    static let contentType = Flag.string("--content-type", value: "TYPE", help: "Content-Type of the file (default: from its extension)")
    static let checksum = Flag.string("--checksum", value: "md5|sha256", help: "send Content-MD5 or Content-Digest computed from the file")
    static let form = Flag.repeated("-F", "--form", value: "NAME=VALUE|NAME=@FILE",
                                    help: "send a multipart/form-data form: a text field, or another file (repeatable)")
    static let fileField = Flag.string("--file-field", value: "NAME", help: "form field name for PATH (default: file)")
    static let tus = Flag.presence("--tus", help: "resumable upload to a tus 1.0 server: URL is its creation URL; run again to continue")
    static let chunkSize = Flag.byteSize("--chunk-size", value: "SIZE", help: "tus: bytes per PATCH (default 8M; 64K to 1G)")
    static let resumable = Flag.presence("--resumable", help: "resumable upload by the IETF draft (interop version 8) to URL; run again to continue")
    static let partSize = Flag.byteSize("--part-size", value: "SIZE", help: "S3: part size (default 8M; at least 5M; grown to fit 10,000 parts)")
    static let parts = Flag.integer("--parts", value: "N", range: 1...64, help: "S3: parts in flight at once (default: 10)")
    static let jobs = Flag.integer("-j", "--jobs", value: "N", range: 1...256, help: "S3 folder upload: files uploading at once (default: 16)")
    static let skipUnchanged = Flag.presence("--skip-unchanged", help: "S3: send nothing when the object already holds the file (size and ETag)")
    static let include = Flag.repeated("--include", value: "GLOB",
                                       help: "S3 folder upload: only files (paths below the folder) matching GLOB (repeatable)")
    static let exclude = Flag.repeated("--exclude", value: "GLOB", help: "S3 folder upload: skip files matching GLOB (repeatable)")
    static let endpoint = Flag.string("--endpoint", value: "URL", help: "S3: endpoint (default: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, or AWS)")
    static let region = Flag.string("--region", value: "REGION", help: "S3: region (default: AWS_REGION, the profile, or us-east-1)")
    static let profile = Flag.string("--profile", value: "NAME",
                                     help: "S3: credentials profile in ~/.aws/credentials (default: AWS_PROFILE or default)")
    static let quiet = Flag.presence("-q", "--quiet", help: "print errors only")

    static let specs: [OptionSpec] = [
        method.spec, contentType.spec, checksum.spec, form.spec, fileField.spec, tus.spec, chunkSize.spec, resumable.spec,
        partSize.spec, parts.spec, jobs.spec, skipUnchanged.spec, include.spec, exclude.spec, endpoint.spec, region.spec,
        profile.spec, quiet.spec, StandardFlags.help.spec,
    ] + SyncFlags.specs + TransferFlags.specs

    static let usage = "transferd put PATH URL [--tus | --resumable | --form NAME=VALUE ...] [--checksum md5|sha256] [options]"

    static let help = CommandHelp(name: "put", usage: usage, summary: """
        Uploads PATH to URL: a streamed PUT with an exact Content-Length by default, or a
        multipart/form-data POST when --form is given (PATH is then the form's file), or a
        resumable tus 1.0 upload with --tus (URL is the server's creation URL), or a resumable
        upload by the IETF draft "Resumable Uploads for HTTP" with --resumable (URL takes the POST).
        """, options: specs)

    static func run(_ argv: [String]) async -> ExitCode {
        let flags: PutOptions
        let options: UploadOptions
        let transport: Transport
        do {
            let arguments = try ParsedArguments.parse(argv, specs: specs, command: "put")
            flags = PutOptions(arguments)
            if flags.resumable, !arguments.wantsHelp { return await runResumable(flags) }
            if flags.tus, !arguments.wantsHelp { return await runTus(flags) }
            if flags.positionals.count == 2, let location = S3Location(flags.positionals[1]), !arguments.wantsHelp {
                return await runS3(flags, location: location)
            }
            if arguments.wantsHelp {
                Output.out(help.text)
                return .success
            }
            try SyncFlags.refuseForOne(flags.sync, what: flags.positionals.first ?? "PATH")
            if flags.given(chunkSize) { throw UsageError("--chunk-size is for a tus upload (--tus)") }
            options = try uploadOptions(flags)
            transport = try TransferFlags.transport(flags.transfer)
        } catch {
            Output.err("transferd put: \(error)\n")
            return .usage
        }
        let quiet = flags.quiet
        let line = UploadLine(name: (flags.positionals[0] as NSString).lastPathComponent, quiet: quiet)
        let engine = UploadEngine(transport: transport, options: options) { line.handle($0) }
        do {
            let result = try await SignalHandler.cancelling { try await engine.run() }
            line.finish(result)
            return .success
        } catch is CancellationError {
            line.clear()
            Output.err("transferd put: interrupted; a plain upload starts over when run again\n")
            return .interrupted
        } catch {
            line.clear()
            Output.err("transferd put: \(error)\n")
            return ExitCode.of(error, otherwise: .transferFailed)
        }
    }

    /// `put --tus PATH URL`: a resumable tus 1.0 upload. The upload's URL and the offset the
    /// server confirmed are recorded under `$XDG_STATE_HOME/transferd/uploads/`, so running
    /// the same command again (after Ctrl-C or kill -9) continues from the server's offset.
    static func runTus(_ flags: PutOptions) async -> ExitCode {
        do {
            guard flags.positionals.count == 2 else { throw UsageError("need PATH and URL; usage: \(usage)") }
            for spec in [form.spec, fileField.spec, method.spec, checksum.spec, partSize.spec, parts.spec, jobs.spec,
                         skipUnchanged.spec, include.spec, exclude.spec, endpoint.spec, region.spec, profile.spec] where flags.given(spec) {
                throw UsageError("\(spec.key) does not apply to a tus upload (--tus)")
            }
            try SyncFlags.refuseForOne(flags.sync, what: flags.positionals[0])
            let path = flags.positionals[0]
            let text = flags.positionals[1]
            guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), ["http", "https"].contains(scheme),
                  url.host?.isEmpty == false else {
                throw UsageError("'\(Redaction.url(string: text))' is not an http:// or https:// URL (a tus creation URL)")
            }
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue else {
                throw UsageError("\(path): no such file")
            }
            let chunkSize = try flags.chunkSize ?? TusOptions.defaultChunkSize
            guard TusOptions.chunkSizes.contains(chunkSize) else { throw UsageError("--chunk-size must be from 64K to 1G") }
            let absolute = absolutePath(path)
            var options = TusOptions(endpoint: url, source: absolute, chunkSize: chunkSize,
                                     headers: try TransferFlags.headers(flags.transfer), contentType: flags.contentType,
                                     retry: try TransferFlags.retry(flags.transfer), tls: try TransferFlags.tls(flags.transfer),
                                     connectTimeout: try flags.transfer.connectTimeout ?? 15,
                                     idleTimeout: try flags.transfer.idleTimeout ?? 30)
            options.rate = try sendRate(flags)
            let quiet = flags.quiet
            let line = UploadLine(name: (path as NSString).lastPathComponent, quiet: quiet)
            let upload = TusUpload(transport: try TransferFlags.transport(flags.transfer), options: options,
                                   state: FileUploadStateStore(source: absolute, bucket: "tus", key: url.absoluteString)) {
                line.handle($0)
            }
            do {
                let result = try await SignalHandler.cancelling { try await upload.run() }
                line.clear()
                if !quiet {
                    var text = "\(path): \(Format.bytes(result.size)) sent with tus in \(String(format: "%.2f", result.elapsed)) s"
                    if let at = result.resumedAt { text += ", resumed at byte \(at) (\(Format.bytes(result.bytesSent)) sent now)" }
                    text += result.checksum.map { ", each chunk checked by the server (\($0))" } ?? ", the server offers no checksum"
                    Output.err(text + "; the server's offset is the file's length\n")
                }
                return .success
            } catch is CancellationError {
                line.clear()
                Output.err("transferd put: interrupted; the upload's address is recorded — run the same command to continue\n")
                return .interrupted
            } catch {
                line.clear()
                throw error
            }
        } catch let error as UsageError {
            Output.err("transferd put: \(error)\n")
            return .usage
        } catch {
            Output.err("transferd put: \(Redaction.message(String(describing: error)))\n")
            return ExitCode.of(error, otherwise: .transferFailed)
        }
    }

    /// `put --resumable PATH URL`: a resumable upload by the IETF draft (`ResumableHeaders.draft`).
    /// The upload resource's URL and the offset the server confirmed are recorded under
    /// `$XDG_STATE_HOME/transferd/uploads/`, so the same command again continues it.
    static func runResumable(_ flags: PutOptions) async -> ExitCode {
        do {
            if flags.tus { throw UsageError("--resumable and --tus are two protocols: give one") }
            guard flags.positionals.count == 2 else { throw UsageError("need PATH and URL; usage: \(usage)") }
            for spec in [form.spec, fileField.spec, method.spec, checksum.spec, chunkSize.spec, partSize.spec, parts.spec, jobs.spec,
                         skipUnchanged.spec, include.spec, exclude.spec, endpoint.spec, region.spec, profile.spec] where flags.given(spec) {
                throw UsageError("\(spec.key) does not apply to a resumable upload (--resumable)")
            }
            try SyncFlags.refuseForOne(flags.sync, what: flags.positionals[0])
            let path = flags.positionals[0]
            let text = flags.positionals[1]
            guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), ["http", "https"].contains(scheme),
                  url.host?.isEmpty == false else {
                throw UsageError("'\(Redaction.url(string: text))' is not an http:// or https:// URL (the resource that takes the upload)")
            }
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue else {
                throw UsageError("\(path): no such file")
            }
            let absolute = absolutePath(path)
            var options = ResumableOptions(endpoint: url, source: absolute, headers: try TransferFlags.headers(flags.transfer),
                                           contentType: flags.contentType, retry: try TransferFlags.retry(flags.transfer),
                                           tls: try TransferFlags.tls(flags.transfer),
                                           connectTimeout: try flags.transfer.connectTimeout ?? 15,
                                           idleTimeout: try flags.transfer.idleTimeout ?? 30)
            options.rate = try sendRate(flags)
            let quiet = flags.quiet
            let line = UploadLine(name: (path as NSString).lastPathComponent, quiet: quiet)
            let transport = try TransferFlags.transport(flags.transfer)
            let upload = ResumableUpload(transport: transport, options: options,
                                         state: FileUploadStateStore(source: absolute, bucket: "resumable", key: url.absoluteString)) {
                line.handle($0)
            }
            do {
                let result = try await SignalHandler.cancelling { try await upload.run() }
                line.clear()
                if !quiet {
                    var text = "\(path): \(Format.bytes(result.size)) sent in \(String(format: "%.2f", result.elapsed)) s, HTTP \(result.status)"
                    if let at = result.resumedAt { text += ", resumed at byte \(at) (\(Format.bytes(result.bytesSent)) sent now)" }
                    if result.plainUpload {
                        text += "; the server offered no resumption (no 104 answer): a plain upload"
                    } else if result.resumedAt != nil {
                        text += "; resumable (\(ResumableHeaders.draft)), continued from the server's offset"
                    } else if result.announcedByInterim {
                        text += "; resumable (\(ResumableHeaders.draft)), its address from the 104 answer"
                    } else {
                        text += "; resumable (\(ResumableHeaders.draft)), created empty first"
                            + (transport.capabilities.contains(.interimResponses) ? "" : " (the \(transport.name) backend cannot see 104 answers)")
                    }
                    Output.err(text + "\n")
                }
                return .success
            } catch is CancellationError {
                line.clear()
                Output.err("transferd put: interrupted; the upload's address is recorded — run the same command to continue\n")
                return .interrupted
            } catch {
                line.clear()
                throw error
            }
        } catch let error as UsageError {
            Output.err("transferd put: \(error)\n")
            return .usage
        } catch {
            Output.err("transferd put: \(Redaction.message(String(describing: error)))\n")
            return ExitCode.of(error, otherwise: .transferFailed)
        }
    }

    /// `put PATH s3://bucket/key`: a resumable multipart upload (one PUT for small files).
    static func runS3(_ flags: PutOptions, location: S3Location) async -> ExitCode {
        let path = flags.positionals[0]
        let upload: S3MultipartUpload
        do {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
                throw UsageError("\(path): no such file or folder")
            }
            if isDirectory.boolValue { return await runS3Folder(flags, location: location) }
            for spec in [include.spec, exclude.spec, jobs.spec] where flags.given(spec) {
                throw UsageError("\(spec.key) is for a folder upload; \(path) is a file")
            }
            try SyncFlags.refuseForOne(flags.sync, what: path)
            if flags.given(chunkSize) { throw UsageError("--chunk-size is for a tus upload (--tus); S3 takes --part-size") }
            let client = try s3Client(flags)
            let absolute = absolutePath(path)
            var options = S3UploadOptions(source: absolute, bucket: location.bucket, key: location.key,
                                          partSize: try flags.partSize ?? 8 << 20,
                                          partsInFlight: try flags.parts ?? 10,
                                          contentType: flags.contentType)
            options.rate = try sendRate(flags)
            options.skipUnchanged = flags.skipUnchanged
            let line = UploadLine(name: (path as NSString).lastPathComponent, quiet: flags.quiet)
            upload = S3MultipartUpload(client: client, options: options,
                                       state: FileUploadStateStore(source: absolute, bucket: location.bucket, key: location.key)) {
                line.handle($0)
            }
            do {
                let result = try await SignalHandler.cancelling { try await upload.run() }
                line.clear()
                if result.unchanged {
                    if !flags.quiet {
                        Output.err("\(path): s3://\(location.bucket)/\(location.key) already holds it (\(Format.bytes(result.size)), ETag \(result.etag)); nothing sent\n")
                    }
                } else if !flags.quiet {
                    let resumed = result.resumed ? ", resumed: \(result.partsSent) of \(result.parts) parts sent now" : ""
                    Output.err("\(path): s3://\(location.bucket)/\(location.key) \(Format.bytes(result.size)) in \(result.parts) part\(result.parts == 1 ? "" : "s")"
                               + " (\(String(format: "%.2f", result.elapsed)) s\(resumed)), ETag \(result.etag) verified\n")
                }
                return .success
            } catch is CancellationError {
                line.clear()
                Output.err("transferd put: interrupted; the finished parts are recorded — run the same command to continue\n")
                return .interrupted
            }
        } catch let error as UsageError {
            Output.err("transferd put: \(error)\n")
            return .usage
        } catch {
            Output.err("transferd put: \(error)\n")
            return ExitCode.of(error, otherwise: .transferFailed)
        }
    }

    /// `put FOLDER s3://bucket/prefix/`: one object per regular file below the
    /// folder (links are not followed), each resumable; `--skip-unchanged`
    /// lists the prefix once and sends only files it does not hold.
    static func runS3Folder(_ flags: PutOptions, location: S3Location) async -> ExitCode {
        let path = flags.positionals[0]
        let quiet = flags.quiet
        do {
            let client = try s3Client(flags)
            let absolute = absolutePath(path)
            let upload = S3DirectoryUpload(
                client: client, directory: absolute, bucket: location.bucket, prefix: location.key,
                partSize: try flags.partSize ?? 8 << 20,
                partsInFlight: try flags.parts ?? 10,
                filesInFlight: try flags.jobs ?? 16, rate: try sendRate(flags),
                filter: S3PrefixPlan.Filter(include: flags.include, exclude: flags.exclude),
                skipUnchanged: flags.skipUnchanged, sync: try SyncFlags.options(flags.sync),
                store: FileUploadStateStore(source: absolute, bucket: location.bucket, key: location.key))
            let started = Date()
            do {
                let result = try await SignalHandler.cancelling { try await upload.run() }
                if let preview = result.preview {
                    SyncFlags.print(preview)
                    return .success
                }
                if !quiet {
                    let sent = result.files - result.unchanged - result.skippedAsDone
                    var text = "\(path): s3://\(location.bucket)/\(location.key) \(sent) file\(sent == 1 ? "" : "s") sent, "
                        + "\(Format.bytes(result.bytes)) in \(String(format: "%.2f", Date().timeIntervalSince(started))) s"
                    if result.unchanged > 0 { text += ", \(result.unchanged) unchanged" }
                    if result.skippedAsDone > 0 { text += ", \(result.skippedAsDone) done in an earlier run" }
                    if !result.leftOut.isEmpty { text += ", \(result.leftOut.count) of transferd's own left out" }
                    if result.deleted > 0 { text += ", \(result.deleted) deleted" }
                    Output.err(text + "\n")
                }
                // Said even with --quiet: the copy is partial, and the exit code says so (1).
                guard result.leftOut.isEmpty else {
                    Output.err(leftOutText(result.leftOut, folder: path))
                    return .transferFailed
                }
                return .success
            } catch is CancellationError {
                Output.err("transferd put: interrupted; finished files and parts are recorded — run the same command to continue\n")
                return .interrupted
            }
        } catch let error as UsageError {
            Output.err("transferd put: \(error)\n")
            return .usage
        } catch let refusal as SyncRefusal {
            Output.err("transferd put: \(refusal); nothing was sent or deleted\n")
            return .usage
        } catch {
            Output.err("transferd put: \(error)\n")
            return ExitCode.of(error, otherwise: .transferFailed)
        }
    }

    /// The lines that name the files of transferd's own a folder upload left out (`OwnFiles`):
    /// the count, then each path below the folder with why, the first `shown` of them.
    static func leftOutText(_ leftOut: [S3DirectoryUpload.LeftOut], folder: String, shown: Int = 20) -> String {
        var text = "\(folder): left out \(leftOut.count) file\(leftOut.count == 1 ? "" : "s") transferd keeps for itself"
            + " (queue state, job files, API token, partial downloads); they are never uploaded, whatever --include says."
            + " The copy is partial (exit 1): leave them out with --exclude to upload the rest without this,"
            + " or copy one out of the folder under another name to upload it:\n"
        for item in leftOut.prefix(shown) { text += "  \(item.path)  (\(item.reason))\n" }
        if leftOut.count > shown { text += "  ... and \(leftOut.count - shown) more\n" }
        return text
    }

    /// The S3 client of `put … s3://`: endpoint, region and profile from the
    /// options, then the environment; the transfer flags' backend, retries and TLS.
    static func s3Client(_ flags: PutOptions) throws -> S3Client {
        let configuration = try S3Configuration.resolve(endpoint: flags.endpoint,
                                                        region: flags.region,
                                                        profile: flags.profile)
        return S3Client(configuration: configuration, transport: try TransferFlags.transport(flags.transfer),
                        retry: try TransferFlags.retry(flags.transfer), tls: try TransferFlags.tls(flags.transfer))
    }

    static func uploadOptions(_ flags: PutOptions) throws -> UploadOptions {
        guard flags.positionals.count == 2 else {
            throw UsageError("need PATH and URL; usage: \(usage)")
        }
        let path = flags.positionals[0]
        let text = flags.positionals[1]
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), url.host != nil else {
            throw UsageError("'\(text)' is not a URL")
        }
        guard ["http", "https"].contains(scheme) else {
            throw UsageError(scheme == "s3" ? "s3:// uploads are not supported by this transferd yet"
                                            : "'\(text)' is not an http:// or https:// URL")
        }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue else {
            throw UsageError("\(path): no such file")
        }
        let checksum = try flags.checksum.map { name -> UploadChecksum in
            guard let value = UploadChecksum(rawValue: name) else { throw UsageError("--checksum must be md5 or sha256") }
            return value
        }
        let body: UploadBody
        var method = (flags.method ?? "PUT").uppercased()
        guard ["PUT", "POST"].contains(method) else { throw UsageError("--method must be PUT or POST") }
        if !flags.form.isEmpty {
            var fields: [(name: String, value: String)] = []
            var files = [MultipartForm.File(field: flags.fileField ?? "file", path: path,
                                            contentType: flags.contentType)]
            for item in flags.form {
                guard let equals = item.firstIndex(of: "="), equals != item.startIndex else {
                    throw UsageError("--form needs NAME=VALUE or NAME=@FILE, not '\(item)'")
                }
                let name = String(item[..<equals])
                let value = String(item[item.index(after: equals)...])
                if value.hasPrefix("@") {
                    files.append(MultipartForm.File(field: name, path: String(value.dropFirst())))
                } else {
                    fields.append((name, value))
                }
            }
            body = .form(MultipartForm(fields: fields, files: files))
            method = "POST"
        } else {
            body = .file(path: path)
        }
        var options = UploadOptions(url: url, method: method, body: body, headers: try TransferFlags.headers(flags.transfer),
                                    contentType: flags.contentType, checksum: checksum,
                                    retry: try TransferFlags.retry(flags.transfer), tls: try TransferFlags.tls(flags.transfer),
                                    connectTimeout: try flags.transfer.connectTimeout ?? 15,
                                    idleTimeout: try flags.transfer.idleTimeout ?? 30)
        options.rate = try sendRate(flags)
        return options
    }

    /// `--limit-rate` for an upload; refused up front on a backend that cannot cap what it sends.
    static func sendRate(_ flags: PutOptions) throws -> SendRate {
        guard let rate = try flags.transfer.limitRate else { return SendRate() }
        let transport = try TransferFlags.transport(flags.transfer)
        guard transport.capabilities.contains(.sendRateLimit) else {
            throw UsageError("--limit-rate: the \(transport.name) backend cannot cap an upload's speed; use --transport curl")
        }
        return SendRate(bytesPerSecond: rate)
    }
}

/// `put`'s options, typed: each read through its `Flag` in `PutCommand`, a checked one where
/// the command uses it.
struct PutOptions: TypedOptions {
    let arguments: ParsedArguments

    init(_ arguments: ParsedArguments) { self.arguments = arguments }

    var method: String? { arguments[PutCommand.method] }
    var contentType: String? { arguments[PutCommand.contentType] }
    var checksum: String? { arguments[PutCommand.checksum] }
    var form: [String] { arguments[PutCommand.form] }
    var fileField: String? { arguments[PutCommand.fileField] }
    var tus: Bool { arguments[PutCommand.tus] }
    var chunkSize: Int64? { get throws { try arguments.read(PutCommand.chunkSize) } }
    var resumable: Bool { arguments[PutCommand.resumable] }
    var partSize: Int64? { get throws { try arguments.read(PutCommand.partSize) } }
    var parts: Int? { get throws { try arguments.read(PutCommand.parts) } }
    var jobs: Int? { get throws { try arguments.read(PutCommand.jobs) } }
    var skipUnchanged: Bool { arguments[PutCommand.skipUnchanged] }
    var include: [String] { arguments[PutCommand.include] }
    var exclude: [String] { arguments[PutCommand.exclude] }
    var endpoint: String? { arguments[PutCommand.endpoint] }
    var region: String? { arguments[PutCommand.region] }
    var profile: String? { arguments[PutCommand.profile] }
    var quiet: Bool { arguments[PutCommand.quiet] }
    var transfer: TransferOptions { TransferOptions(arguments) }
    var sync: SyncFlagOptions { SyncFlagOptions(arguments) }
}

/// Start, retry and finish lines for an upload (stderr).
final class UploadLine: Sendable {
    private let name: String
    private let quiet: Bool
    /// What the start line says is happening ("uploading", "copying").
    private let verb: String
    /// The line is drawn while it is held, so two threads' lines never interleave.
    private let state = Locked((lastDraw: Date.distantPast, live: LiveLine()))

    init(name: String, quiet: Bool, verb: String = "uploading") {
        self.name = name
        self.quiet = quiet
        self.verb = verb
    }

    func handle(_ event: UploadEvent) {
        guard !quiet else { return }
        state.withLock { state in
            switch event {
            case .started(let total):
                state.live.show("\(name): \(verb) \(Format.bytes(total))", permanent: true)
            case .progress(let sent, let total):
                guard state.live.interactive, Date().timeIntervalSince(state.lastDraw) >= 0.25, total > 0 else { return }
                state.lastDraw = Date()
                state.live.show("\(name)  \(Int(Double(sent) / Double(total) * 100))%  \(Format.bytes(sent)) / \(Format.bytes(total))",
                                permanent: false)
            case .retrying(_, 0, let reason) where reason.hasSuffix("again") || reason.hasSuffix("started") || reason.hasSuffix("follow"):
                // Said by a tus or resumable upload that goes on at once (a chunk resent, a new upload): the reason says what happens.
                state.live.show("\(name): \(reason)", permanent: true)
            case .retrying(let attempt, let delay, let reason):
                state.live.show("\(name): \(reason); sending again in \(String(format: "%.1f", delay)) s (attempt \(attempt + 1))",
                                permanent: true)
            }
        }
    }

    func clear() {
        state.withLock { $0.live.erase() }
    }

    func finish(_ result: UploadResult) {
        clear()
        guard !quiet else { return }
        let rate = Double(result.bytesSent) / max(result.elapsed, 0.001)
        Output.err("\(name): sent \(Format.bytes(result.bytesSent)) in \(String(format: "%.2f", result.elapsed)) s (\(Format.rate(rate))), HTTP \(result.status)\n")
    }
}

/// `path` from the current folder, `.` and `..` taken out: one file, one record of its upload,
/// however it was named (`f`, `./f`, `../here/f`).
private func absolutePath(_ path: String) -> String {
    PathNormalization.normalize(path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path)
}
