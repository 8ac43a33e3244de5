import Foundation
import TransferCore

/// `transferd get URL`: one resumable download with a progress line.
enum GetCommand {
    static let specs: [OptionSpec] = [
        OptionSpec("-o", "--output", value: "PATH", help: "where to save (a file, or an existing directory)"),
        OptionSpec("-c", "--connections", value: "N", help: "parallel range connections for this file (default: 1)"),
        OptionSpec("--mirror", value: "URL", help: "another URL of the same file: ranges are spread over all by measured speed (repeatable)"),
        OptionSpec("--metalink", value: "FILE", help: "a Metalink file (.meta4, .metalink) of one file: its URLs as mirrors, its size, SHA-256 and piece hashes checked"),
        OptionSpec("--connections-per-mirror", value: "N", help: "with --mirror: connections one mirror takes at once (default: 2)"),
        OptionSpec("--sha256", value: "HEX", help: "expected SHA-256; the file appears only if it matches"),
        OptionSpec("--checksums", value: "URL", help: "a SHA256SUMS list whose line for the file gives its expected SHA-256"),
        OptionSpec("--checksums-name", value: "NAME", help: "the name the file has in --checksums (default: the URL's file name)"),
        OptionSpec("--overwrite", help: "replace an existing destination once the new file is verified"),
        OptionSpec("--skip-existing", help: "keep an existing destination that matches the remote"),
        OptionSpec("--skip-unchanged", help: "the same as --skip-existing; for a prefix: keep files whose size and ETag match the listing"),
        OptionSpec("--include", value: "GLOB", help: "s3:// prefixes: only keys (below the prefix) matching GLOB (repeatable)"),
        OptionSpec("--exclude", value: "GLOB", help: "s3:// prefixes: skip keys (below the prefix) matching GLOB (repeatable)"),
        OptionSpec("-j", "--jobs", value: "N", help: "s3:// prefixes: objects downloading at once (default: 8)"),
        OptionSpec("--endpoint", value: "URL", help: "s3:// sources: endpoint (default: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, or AWS)"),
        OptionSpec("--region", value: "REGION", help: "s3:// sources: region (default: AWS_REGION, the profile, or us-east-1)"),
        OptionSpec("--profile", value: "NAME", help: "s3:// sources: credentials profile (default: AWS_PROFILE or default)"),
        OptionSpec("-q", "--quiet", help: "print errors only"),
        OptionSpec("-h", "--help", help: "show this help"),
    ] + SyncFlags.specs + TransferFlags.specs

    static let usage = "transferd get URL [-o PATH] [--transport curl|urlsession] [--connections N] [--sha256 HEX] [options]\n"
        + "       transferd get s3://BUCKET/PREFIX/ -o DIR [--include GLOB] [--exclude GLOB] [-j N] [--skip-unchanged] [options]"

    static let help = CommandHelp(name: "get", usage: usage,
                                  summary: "Download URL to a file, resumably: run the same command again after any failure.",
                                  options: specs)

    static func run(_ argv: [String]) async -> ExitCode {
        let arguments: ParsedArguments
        let options: DownloadOptions
        let transport: Transport
        do {
            arguments = try ParsedArguments.parse(argv, specs: specs, command: "get")
            if arguments.has("--help") {
                Output.out(help.text)
                return .success
            }
            if arguments.positionals.count == 1, let prefix = S3Prefix(arguments.positionals[0]) {
                return await GetPrefix.run(arguments, prefix: prefix)
            }
            options = try downloadOptions(arguments)
            transport = try TransferFlags.transport(arguments)
        } catch {
            Output.err("transferd get: \(error)\n")
            return .usage
        }

        let reporter = ProgressLine(name: (options.destination as NSString).lastPathComponent,
                                    quiet: arguments.has("--quiet"))
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
    static func downloadOptions(_ arguments: ParsedArguments, name: String? = nil) throws -> DownloadOptions {
        if name == nil, let path = arguments.value("--metalink") { return try metalinkOptions(arguments, path: path) }
        guard arguments.positionals.count == 1 else {
            throw UsageError(arguments.positionals.isEmpty ? "missing URL; usage: \(usage)"
                             : "one URL at a time (got \(arguments.positionals.count)); use a queue for many")
        }
        let text = arguments.positionals[0]
        var source: S3DownloadSource?
        var url: URL
        if text.hasPrefix("s3://"), let problem = S3Location.downloadProblem(text) {
            throw UsageError(problem)
        }
        if let location = S3Location(text) {
            let configuration = try S3Configuration.resolve(endpoint: arguments.value("--endpoint"),
                                                            region: arguments.value("--region"),
                                                            profile: arguments.value("--profile"))
            let client = S3Client(configuration: configuration, transport: try TransferFlags.transport(arguments))
            let object = try client.downloadSource(bucket: location.bucket, key: location.key)
            (source, url) = (object, object.url)
        } else {
            guard let parsed = URL(string: text), let scheme = parsed.scheme?.lowercased(), ["http", "https"].contains(scheme),
                  parsed.host != nil else {
                throw UsageError("'\(text)' is not an http://, https:// or s3:// URL")
            }
            url = parsed
        }
        if arguments.has("--overwrite") && arguments.has("--skip-existing") {
            throw UsageError("--overwrite and --skip-existing exclude each other")
        }
        if let digest = arguments.value("--sha256") {
            guard digest.count == 64, digest.allSatisfy(\.isHexDigit) else {
                throw UsageError("--sha256 needs 64 hex digits")
            }
        }
        let checksums = try arguments.value("--checksums").map { text -> URL in
            guard arguments.value("--sha256") == nil else { throw UsageError("give --sha256 or --checksums, not both") }
            guard let list = URL(string: text), ["http", "https"].contains(list.scheme?.lowercased() ?? ""), list.host != nil else {
                throw UsageError("--checksums needs an http:// or https:// URL of a SHA256SUMS list, not '\(Redaction.url(string: text))'")
            }
            return list
        }
        if arguments.has("--checksums-name") && checksums == nil { throw UsageError("--checksums-name goes with --checksums") }
        for option in ["--include", "--exclude", "--jobs"] where arguments.has(option) {
            throw UsageError("\(option) is for an s3:// prefix (a URL ending with /)")
        }
        try SyncFlags.refuseForOne(arguments, what: Redaction.url(string: arguments.positionals.first ?? "URL"))
        if arguments.has("--overwrite") && arguments.has("--skip-unchanged") {
            throw UsageError("--overwrite and --skip-unchanged exclude each other")
        }
        let overwrite: OverwritePolicy = arguments.has("--overwrite") ? .overwrite
            : arguments.has("--skip-existing") || arguments.has("--skip-unchanged") ? .skipIfIdentical : .refuse
        var options = DownloadOptions(
            url: url,
            destination: try destination(for: url, output: arguments.value("--output"), name: name),
            headers: try TransferFlags.headers(arguments),
            connections: try arguments.integer("--connections", range: 1...64) ?? 1,
            sha256: arguments.value("--sha256"),
            overwrite: overwrite,
            retry: try TransferFlags.retry(arguments),
            tls: try TransferFlags.tls(arguments),
            connectTimeout: try arguments.seconds("--connect-timeout") ?? 15,
            idleTimeout: try arguments.seconds("--idle-timeout") ?? 30,
            maxRedirects: try arguments.integer("--max-redirects", range: 0...100) ?? 10,
            maxRate: try arguments.byteSize("--limit-rate"))
        options.lowSpeed = try TransferFlags.lowSpeed(arguments)
        options.checksumsURL = checksums
        options.checksumsName = arguments.value("--checksums-name")
        options.mirrors = try arguments.all("--mirror").map { text in
            guard source == nil else { throw UsageError("--mirror is for http:// and https:// URLs, not s3://") }
            guard let mirror = URL(string: text), ["http", "https"].contains(mirror.scheme?.lowercased() ?? ""), mirror.host != nil else {
                throw UsageError("--mirror needs an http:// or https:// URL, not '\(Redaction.url(string: text))'")
            }
            return mirror
        }
        if let perMirror = try arguments.integer("--connections-per-mirror", range: 1...16) {
            // A metalink's URLs are its mirrors (`metalinkOptions`).
            guard !options.mirrors.isEmpty || name != nil else { throw UsageError("--connections-per-mirror goes with --mirror") }
            options.connectionsPerMirror = perMirror
        }
        source?.configure(&options)
        return options
    }

    /// `get --metalink FILE`: the one file it describes, from its URLs (the first as the URL, the
    /// rest as mirrors), saved under its name, with its size, SHA-256 and piece hashes checked.
    static func metalinkOptions(_ arguments: ParsedArguments, path: String) throws -> DownloadOptions {
        guard arguments.positionals.isEmpty else { throw UsageError("give a URL or --metalink, not both") }
        for option in ["--mirror", "--checksums", "--include", "--exclude", "--jobs"] where arguments.has(option) {
            throw UsageError("\(option) does not go with --metalink: the metalink lists the file's URLs and checksums")
        }
        let file = try readMetalink(path)
        var rebuilt = arguments
        rebuilt.positionals = [file.urls[0].absoluteString]
        var options = try downloadOptions(rebuilt, name: (file.name as NSString).lastPathComponent)
        if let given = options.sha256, let listed = file.sha256, given != listed {
            throw UsageError("--sha256 \(given) is not the SHA-256 the metalink gives (\(listed)); leave --sha256 out")
        }
        options.sha256 = options.sha256 ?? file.sha256
        options.expectedSize = file.size
        options.pieces = file.pieces
        options.mirrors = Array(file.urls.dropFirst())
        if let perMirror = try arguments.integer("--connections-per-mirror", range: 1...16) { options.connectionsPerMirror = perMirror }
        return options
    }

    /// The one file the metalink at `path` describes.
    static func readMetalink(_ path: String) throws -> MetalinkFile {
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw UsageError("--metalink \(path): cannot be read (\(String(cString: strerror(errno))))")
        }
        defer { try? handle.close() }
        let data = (try? handle.read(upToCount: Metalink.maxSize + 1)) ?? Data()
        let files = try Metalink.parse(data, origin: path)
        guard files.count == 1, let file = files.first else {
            throw UsageError("--metalink \(path) describes \(files.count) files; get fetches one — for all of them, put it in a "
                             + "queue folder and run it (cp \(path) queue.d/ && transferd run)")
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
