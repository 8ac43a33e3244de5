import Foundation
import TransferCore

/// `transferd get URL`: one resumable download with a progress line.
enum GetCommand {
    static let output = Flag.string("-o", "--output", value: "PATH", help: "where to save (a file, or an existing directory)")
    static let connections = Flag.integer("-c", "--connections", value: "N", range: 1...64,
                                          help: "parallel range connections for this file (default: 1)")
    static let mirror = Flag.repeated("--mirror", value: "URL",
                                      help: "another URL of the same file: ranges are spread over all by measured speed (repeatable)")
    static let metalink = Flag.string("--metalink", value: "FILE|URL",
                                      help: "a Metalink file (.meta4, .metalink), or its http(s) URL, of one file: its URLs as mirrors, its size, SHA-256 and piece hashes checked")
    static let connectionsPerMirror = Flag.integer("--connections-per-mirror", value: "N", range: 1...16,
                                                   help: "with --mirror: connections one mirror takes at once (default: 2)")
    static let sha256 = Flag.string("--sha256", value: "HEX", help: "expected SHA-256; the file appears only if it matches")
    static let checksums = Flag.string("--checksums", value: "URL", help: "a SHA256SUMS list whose line for the file gives its expected SHA-256")
    static let checksumsName = Flag.string("--checksums-name", value: "NAME", help: "the name the file has in --checksums (default: the URL's file name)")
    static let overwrite = Flag.presence("--overwrite", help: "replace an existing destination once the new file is verified")
    static let skipExisting = Flag.presence("--skip-existing", help: "keep an existing destination that matches the remote")
    static let skipUnchanged = Flag.presence("--skip-unchanged",
                                             help: "the same as --skip-existing; for a prefix: keep files whose size and ETag match the listing")
    static let include = Flag.repeated("--include", value: "GLOB", help: "s3:// prefixes: only keys (below the prefix) matching GLOB (repeatable)")
    static let exclude = Flag.repeated("--exclude", value: "GLOB", help: "s3:// prefixes: skip keys (below the prefix) matching GLOB (repeatable)")
    static let jobs = Flag.integer("-j", "--jobs", value: "N", range: 1...256, help: "s3:// prefixes: objects downloading at once (default: 8)")
    static let endpoint = Flag.string("--endpoint", value: "URL", help: "s3:// sources: endpoint (default: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, or AWS)")
    static let region = Flag.string("--region", value: "REGION", help: "s3:// sources: region (default: AWS_REGION, the profile, or us-east-1)")
    static let profile = Flag.string("--profile", value: "NAME", help: "s3:// sources: credentials profile (default: AWS_PROFILE or default)")
    static let quiet = Flag.presence("-q", "--quiet", help: "print errors only")

    static let specs: [OptionSpec] = [
        output.spec, connections.spec, mirror.spec, metalink.spec, connectionsPerMirror.spec, sha256.spec, checksums.spec,
        checksumsName.spec, overwrite.spec, skipExisting.spec, skipUnchanged.spec, include.spec, exclude.spec, jobs.spec,
        endpoint.spec, region.spec, profile.spec, quiet.spec, StandardFlags.help.spec,
    ] + SyncFlags.specs + TransferFlags.specs

    static let usage = "transferd get URL [-o PATH] [--transport curl|urlsession] [--connections N] [--sha256 HEX] [options]\n"
        + "       transferd get s3://BUCKET/PREFIX/ -o DIR [--include GLOB] [--exclude GLOB] [-j N] [--skip-unchanged] [options]"

    static let help = CommandHelp(name: "get", usage: usage,
                                  summary: "Download URL to a file, resumably: run the same command again after any failure.",
                                  options: specs)

    static func run(_ argv: [String]) async -> ExitCode {
        let flags: GetOptions
        let options: DownloadOptions
        let transport: Transport
        do {
            let arguments = try ParsedArguments.parse(argv, specs: specs, command: "get")
            if arguments.wantsHelp {
                Output.out(help.text)
                return .success
            }
            flags = GetOptions(arguments)
            if flags.positionals.count == 1, let prefix = S3Prefix(flags.positionals[0]) {
                return await GetPrefix.run(flags, prefix: prefix)
            }
            transport = try TransferFlags.transport(flags.transfer)
        } catch {
            Output.err("transferd get: \(error)\n")
            return .usage
        }
        // A metalink named by its URL is read first (at most `Metalink.maxSize`), with the TLS
        // options and timeouts of the download, and none of its headers.
        var metalinkDocument: Data?
        if let location = flags.metalink, let url = remoteMetalink(location) {
            do {
                metalinkDocument = try await fetchMetalink(url, flags: flags, transport: transport)
            } catch {
                Output.err("transferd get: --metalink \(Redaction.url(url)): \(CommandError.text(error))\n")
                return ExitCode.of(error, otherwise: .transferFailed)
            }
        }
        do {
            options = try downloadOptions(flags, metalinkDocument: metalinkDocument)
        } catch {
            Output.err("transferd get: \(error)\n")
            return .usage
        }

        let reporter = ProgressLine(name: (options.destination as NSString).lastPathComponent,
                                    quiet: flags.quiet)
        let engine = DownloadEngine(transport: transport, options: options) { reporter.handle($0) }
        do {
            let result = try await SignalHandler.cancelling { try await engine.run() }
            reporter.finish(result)
            return .success
        } catch {
            reporter.clear()
            return report(error, options: options)
        }
    }

    /// - Parameter name: the file's name when the URL's is not it (a metalink's).
    /// - Parameter metalinkDocument: the metalink `--metalink URL` named, read.
    static func downloadOptions(_ flags: GetOptions, name: String? = nil, metalinkDocument: Data? = nil) throws -> DownloadOptions {
        if name == nil, let path = flags.metalink { return try metalinkOptions(flags, path: path, document: metalinkDocument) }
        guard flags.positionals.count == 1 else {
            throw UsageError(flags.positionals.isEmpty ? "missing URL; usage: \(usage)"
                             : "one URL at a time (got \(flags.positionals.count)); use a queue for many")
        }
        let text = flags.positionals[0]
        var source: S3DownloadSource?
        var url: URL
        if text.hasPrefix("s3://"), let problem = S3Location.downloadProblem(text) {
            throw UsageError(problem)
        }
        if let location = S3Location(text) {
            let configuration = try S3Configuration.resolve(endpoint: flags.endpoint,
                                                            region: flags.region,
                                                            profile: flags.profile)
            let client = S3Client(configuration: configuration, transport: try TransferFlags.transport(flags.transfer))
            let object = try client.downloadSource(bucket: location.bucket, key: location.key)
            (source, url) = (object, object.url)
        } else {
            guard let parsed = URL(string: text), let scheme = parsed.scheme?.lowercased(), ["http", "https"].contains(scheme),
                  parsed.host != nil else {
                throw UsageError("'\(text)' is not an http://, https:// or s3:// URL")
            }
            url = parsed
        }
        if flags.overwrite && flags.skipExisting {
            throw UsageError("--overwrite and --skip-existing exclude each other")
        }
        if let digest = flags.sha256 {
            guard digest.count == 64, digest.allSatisfy(\.isHexDigit) else {
                throw UsageError("--sha256 needs 64 hex digits")
            }
        }
        let checksums = try flags.checksums.map { text -> URL in
            guard flags.sha256 == nil else { throw UsageError("give --sha256 or --checksums, not both") }
            guard let list = URL(string: text), ["http", "https"].contains(list.scheme?.lowercased() ?? ""), list.host != nil else {
                throw UsageError("--checksums needs an http:// or https:// URL of a SHA256SUMS list, not '\(Redaction.url(string: text))'")
            }
            return list
        }
        if flags.checksumsName != nil && checksums == nil { throw UsageError("--checksums-name goes with --checksums") }
        for spec in [include.spec, exclude.spec, jobs.spec] where flags.given(spec) {
            throw UsageError("\(spec.key) is for an s3:// prefix (a URL ending with /)")
        }
        try SyncFlags.refuseForOne(flags.sync, what: Redaction.url(string: flags.positionals.first ?? "URL"))
        if flags.overwrite && flags.skipUnchanged {
            throw UsageError("--overwrite and --skip-unchanged exclude each other")
        }
        let overwrite: OverwritePolicy = flags.overwrite ? .overwrite
            : flags.skipExisting || flags.skipUnchanged ? .skipIfIdentical : .refuse
        var options = DownloadOptions(
            url: url,
            destination: try destination(for: url, output: flags.output, name: name),
            headers: try TransferFlags.headers(flags.transfer),
            connections: try flags.connections ?? 1,
            sha256: flags.sha256,
            overwrite: overwrite,
            retry: try TransferFlags.retry(flags.transfer),
            tls: try TransferFlags.tls(flags.transfer),
            connectTimeout: try flags.transfer.connectTimeout ?? 15,
            idleTimeout: try flags.transfer.idleTimeout ?? 30,
            maxRedirects: try flags.transfer.maxRedirects ?? 10,
            maxRate: try flags.transfer.limitRate)
        options.lowSpeed = try TransferFlags.lowSpeed(flags.transfer)
        options.checksumsURL = checksums
        options.checksumsName = flags.checksumsName
        options.mirrors = try flags.mirror.map { text in
            guard source == nil else { throw UsageError("--mirror is for http:// and https:// URLs, not s3://") }
            guard let mirror = URL(string: text), ["http", "https"].contains(mirror.scheme?.lowercased() ?? ""), mirror.host != nil else {
                throw UsageError("--mirror needs an http:// or https:// URL, not '\(Redaction.url(string: text))'")
            }
            return mirror
        }
        if let perMirror = try flags.connectionsPerMirror {
            // A metalink's URLs are its mirrors (`metalinkOptions`).
            guard !options.mirrors.isEmpty || name != nil else { throw UsageError("--connections-per-mirror goes with --mirror") }
            options.connectionsPerMirror = perMirror
        }
        source?.configure(&options)
        return options
    }

    /// `get --metalink FILE`: the one file it describes, from its URLs (the first as the URL, the
    /// rest as mirrors), saved under its name, with its size, SHA-256 and piece hashes checked.
    static func metalinkOptions(_ flags: GetOptions, path: String, document: Data? = nil) throws -> DownloadOptions {
        guard flags.positionals.isEmpty else { throw UsageError("give a URL or --metalink, not both") }
        for spec in [mirror.spec, checksums.spec, include.spec, exclude.spec, jobs.spec] where flags.given(spec) {
            throw UsageError("\(spec.key) does not go with --metalink: the metalink lists the file's URLs and checksums")
        }
        let file = try readMetalink(path, document: document)
        var rebuilt = flags
        rebuilt.positionals = [file.urls[0].absoluteString]
        var options = try downloadOptions(rebuilt, name: (file.name as NSString).lastPathComponent)
        if let given = options.sha256, let listed = file.sha256, given != listed {
            throw UsageError("--sha256 \(given) is not the SHA-256 the metalink gives (\(listed)); leave --sha256 out")
        }
        options.sha256 = options.sha256 ?? file.sha256
        options.expectedSize = file.size
        options.pieces = file.pieces
        options.mirrors = Array(file.urls.dropFirst())
        if let perMirror = try flags.connectionsPerMirror { options.connectionsPerMirror = perMirror }
        return options
    }

    /// `location` as the http(s) URL of a metalink (nil: a local file's path).
    static func remoteMetalink(_ location: String) -> URL? {
        guard let url = URL(string: location), ["http", "https"].contains(url.scheme?.lowercased() ?? ""), url.host != nil else {
            return nil
        }
        return url
    }

    /// The metalink at `url`, read whole: a 2xx answer of at most `Metalink.maxSize` bytes.
    static func fetchMetalink(_ url: URL, flags: GetOptions, transport: Transport) async throws -> Data {
        let request = TransferRequest(method: "GET", url: url, headers: [:], connectTimeout: try flags.transfer.connectTimeout ?? 15,
                                      idleTimeout: try flags.transfer.idleTimeout ?? 30,
                                      maxRedirects: try flags.transfer.maxRedirects ?? 10, tls: try TransferFlags.tls(flags.transfer))
        let answer = try await BoundedRead.read(request, limit: Metalink.maxSize,
                                                advice: "a metalink of one file is a few KiB; check the URL", transport: transport)
        guard (200..<300).contains(answer.status) else { throw MetalinkNotFetched(status: answer.status) }
        return answer.body
    }

    /// The one file the metalink at `path` (or `document`, read from it) describes.
    static func readMetalink(_ path: String, document: Data? = nil) throws -> MetalinkFile {
        let data: Data
        if let document {
            data = document
        } else {
            guard let handle = FileHandle(forReadingAtPath: path) else {
                throw UsageError("--metalink \(path): cannot be read (\(String(cString: strerror(errno))))")
            }
            defer { try? handle.close() }
            data = (try? handle.read(upToCount: Metalink.maxSize + 1)) ?? Data()
        }
        // A URL is shown redacted (its query may hold a token).
        let shown = document == nil ? path : Redaction.url(string: path)
        let files = try Metalink.parse(data, origin: shown)
        guard files.count == 1, let file = files.first else {
            throw UsageError("--metalink \(shown) describes \(files.count) files; get fetches one — for all of them, put it in a "
                             + "queue folder and run it (" + (document == nil ? "cp \(path) queue.d/" : "save it into queue.d/ as NAME.meta4")
                             + " && transferd run)")
        }
        return file
    }

    /// `-o` as given, a file named after the URL inside `-o` when it is a directory, or in the current directory.
    static func destination(for url: URL, output: String?, name: String? = nil) throws -> String {
        let path = try chosenPath(name: name ?? URLFileName.of(url), output: output)
        // A name transferd keeps for partial files (or one too long to download under) is no destination.
        if let reason = PartialNames.refusal(of: path) {
            throw UsageError("cannot save to \(path): \(reason); " + (output == nil ? "name the file with -o" : "choose another name with -o"))
        }
        return path
    }

    private static func chosenPath(name: String, output: String?) throws -> String {
        guard let output else { return name }
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: output, isDirectory: &isDirectory), isDirectory.boolValue {
            return (output as NSString).appendingPathComponent(name)
        }
        let parent = PathText.parent(output)
        if !parent.isEmpty && !FileManager.default.fileExists(atPath: parent) {
            throw UsageError("-o \(output): the folder \(parent) does not exist")
        }
        return output
    }

    static func report(_ error: Error, options: DownloadOptions) -> ExitCode {
        switch error {
        case is CancellationError:
            Output.err("transferd get: interrupted; \(options.partPath) is kept — run the same command to resume\n")
            return .interrupted
        default:
            Output.err("transferd get: \(error)\n")
            return ExitCode.of(error, otherwise: .transferFailed)
        }
    }
}

/// `get`'s options, typed: each read through its `Flag` in `GetCommand`, a checked one where
/// the command uses it.
struct GetOptions: TypedOptions {
    private(set) var arguments: ParsedArguments

    init(_ arguments: ParsedArguments) { self.arguments = arguments }

    /// The URL (a metalink's first URL once `metalinkOptions` has set it).
    var positionals: [String] {
        get { arguments.positionals }
        set { arguments.positionals = newValue }
    }
    var output: String? { arguments[GetCommand.output] }
    var connections: Int? { get throws { try arguments.read(GetCommand.connections) } }
    var mirror: [String] { arguments[GetCommand.mirror] }
    var metalink: String? { arguments[GetCommand.metalink] }
    var connectionsPerMirror: Int? { get throws { try arguments.read(GetCommand.connectionsPerMirror) } }
    var sha256: String? { arguments[GetCommand.sha256] }
    var checksums: String? { arguments[GetCommand.checksums] }
    var checksumsName: String? { arguments[GetCommand.checksumsName] }
    var overwrite: Bool { arguments[GetCommand.overwrite] }
    var skipExisting: Bool { arguments[GetCommand.skipExisting] }
    var skipUnchanged: Bool { arguments[GetCommand.skipUnchanged] }
    var include: [String] { arguments[GetCommand.include] }
    var exclude: [String] { arguments[GetCommand.exclude] }
    var jobs: Int? { get throws { try arguments.read(GetCommand.jobs) } }
    var endpoint: String? { arguments[GetCommand.endpoint] }
    var region: String? { arguments[GetCommand.region] }
    var profile: String? { arguments[GetCommand.profile] }
    var quiet: Bool { arguments[GetCommand.quiet] }
    var transfer: TransferOptions { TransferOptions(arguments) }
    var sync: SyncFlagOptions { SyncFlagOptions(arguments) }
}

/// A metalink URL answered with a status other than 2xx.
struct MetalinkNotFetched: Error, CustomStringConvertible {
    let status: Int
    var description: String { "HTTP \(status); check the URL, or save the metalink and give its path" }
}
