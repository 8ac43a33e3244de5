import Foundation
import TransferCore

/// `transferd copy s3://SRC s3://DST`: a copy the S3 server makes, of one object or of
/// every object under a prefix, to another key or prefix on the same endpoint.
enum CopyCommand {
    static let specs: [OptionSpec] = [
        OptionSpec("--part-size", value: "SIZE", help: "part size of a copy in parts that are not the source's own (default 64M)"),
        OptionSpec("--parts", value: "N", help: "parts copied at once (default: 10)"),
        OptionSpec("-j", "--jobs", value: "N", help: "prefix copy: objects copied at once (default: 8)"),
        OptionSpec("--skip-unchanged", help: "copy nothing the destination already holds (same size and ETag)"),
        OptionSpec("--include", value: "GLOB", help: "prefix copy: only keys (below the prefix) matching GLOB (repeatable)"),
        OptionSpec("--exclude", value: "GLOB", help: "prefix copy: skip keys matching GLOB (repeatable)"),
        OptionSpec("--endpoint", value: "URL", help: "S3 endpoint of both sides (default: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, or AWS)"),
        OptionSpec("--region", value: "REGION", help: "region (default: AWS_REGION, the profile, or us-east-1)"),
        OptionSpec("--profile", value: "NAME", help: "credentials profile in ~/.aws/credentials (default: AWS_PROFILE or default)"),
        OptionSpec("-q", "--quiet", help: "print errors only"),
        OptionSpec("-h", "--help", help: "show this help"),
    ] + TransferFlags.specs.filter { !["--header", "--limit-rate", "--max-redirects", "--speed-limit", "--speed-time"].contains($0.key) }

    static let usage = "transferd copy s3://BUCKET/KEY s3://BUCKET/KEY [options]"

    static let help = CommandHelp(name: "copy", usage: usage, summary: """
        Copies an S3 object, or every object under a prefix (a source ending with /), to another
        key or prefix on the same endpoint. The server copies the bytes: none pass through this
        machine. A destination ending with / takes the source object's name. Metadata and
        Content-Type go with the copy; a copy in parts resumes after an interruption when the
        same command is run again.
        """, options: specs)

    static func run(_ argv: [String]) async -> ExitCode {
        let arguments: ParsedArguments
        let target: S3CopyTarget
        let client: S3Client
        do {
            arguments = try ParsedArguments.parse(argv, specs: specs, command: "copy")
            if arguments.has("--help") {
                Output.out(help.text)
                return .success
            }
            guard arguments.positionals.count == 2 else { throw UsageError("need a source and a destination; usage: \(usage)") }
            let (source, destination) = (arguments.positionals[0], arguments.positionals[1])
            for text in [source, destination] where !text.hasPrefix("s3://") {
                throw UsageError("'\(text)' is not an s3:// URL: copy works between S3 objects (get downloads, put uploads)")
            }
            guard let made = S3CopyTarget(source: source, destination: destination) else {
                throw UsageError("'\(source)' or '\(destination)' names no bucket: write s3://bucket/key or s3://bucket/prefix/")
            }
            if let problem = made.problem { throw UsageError(problem) }
            if case .object = made {
                for option in ["--include", "--exclude", "--jobs"] where arguments.has(option) {
                    throw UsageError("\(option) is for a prefix copy; \(source) names one object (end it with / for a prefix)")
                }
            }
            target = made
            let configuration = try S3Configuration.resolve(endpoint: arguments.value("--endpoint"),
                                                            region: arguments.value("--region"),
                                                            profile: arguments.value("--profile"))
            client = S3Client(configuration: configuration, transport: try TransferFlags.transport(arguments),
                              retry: try TransferFlags.retry(arguments), tls: try TransferFlags.tls(arguments))
        } catch {
            Output.err("transferd copy: \(error)\n")
            return .usage
        }
        let quiet = arguments.has("--quiet")
        let source = arguments.positionals[0]
        do {
            let partSize = try arguments.byteSize("--part-size") ?? 64 << 20
            guard partSize >= 5 << 20 else { throw UsageError("--part-size must be at least 5M (S3's smallest part)") }
            let parts = try arguments.integer("--parts", range: 1...64) ?? 10
            let started = Date()
            let line = UploadLine(name: source, quiet: quiet, verb: "copying")
            switch target {
            case .object(let from, let bucket, let key):
                var options = S3CopyOptions(source: from, bucket: bucket, key: key, partSize: partSize, partsInFlight: parts)
                options.skipUnchanged = arguments.has("--skip-unchanged")
                let copy = S3ObjectCopy(client: client, options: options,
                                        state: FileUploadStateStore(source: source, bucket: bucket, key: key)) { line.handle($0) }
                let result = try await SignalHandler.cancelling { try await copy.run() }
                line.clear()
                guard !quiet else { return .success }
                let shown = "s3://\(bucket)/\(key)"
                if result.unchanged {
                    Output.err("\(source): \(shown) already holds it (\(Format.bytes(result.size)), ETag \(result.etag)); nothing copied\n")
                } else {
                    let resumed = result.resumed ? ", resumed: \(result.partsCopied) of \(result.parts) parts copied now" : ""
                    let how = result.parts == 1 ? "with CopyObject" : "in \(result.parts) parts"
                    Output.err("\(source): \(shown) \(Format.bytes(result.size)) copied \(how) (\(String(format: "%.2f", result.elapsed)) s\(resumed)); "
                               + "\(describe(result.verdict, etag: result.etag))\n")
                }
            case .prefix(let from, let bucket, let prefix):
                let copy = S3PrefixCopy(
                    client: client, source: from, bucket: bucket, prefix: prefix, partSize: partSize, partsInFlight: parts,
                    objectsInFlight: try arguments.integer("--jobs", range: 1...256) ?? 8,
                    filter: S3PrefixPlan.Filter(include: arguments.all("--include"), exclude: arguments.all("--exclude")),
                    skipUnchanged: arguments.has("--skip-unchanged"),
                    // Other filters are another copy: never resumed from this one's record.
                    store: FileUploadStateStore(source: ([source] + arguments.all("--include").map { "+" + $0 }
                                                         + arguments.all("--exclude").map { "-" + $0 }).joined(separator: "\n"),
                                                bucket: bucket, key: prefix)) { line.handle($0) }
                let result = try await SignalHandler.cancelling { try await copy.run() }
                line.clear()
                guard !quiet else { return .success }
                let copied = result.objects - result.unchanged - result.skippedAsDone
                var text = "\(source): \(copied) object\(copied == 1 ? "" : "s") copied to s3://\(bucket)/\(prefix), "
                    + "\(Format.bytes(result.bytes)) in \(String(format: "%.2f", Date().timeIntervalSince(started))) s"
                if result.unchanged > 0 { text += ", \(result.unchanged) unchanged" }
                if result.skippedAsDone > 0 { text += ", \(result.skippedAsDone) done in an earlier run" }
                if result.checkedBySizeOnly > 0 {
                    text += "; \(result.checkedBySizeOnly) checked by size only (the server's ETags say nothing more)"
                }
                Output.err(text + "\n")
            }
            return .success
        } catch is CancellationError {
            Output.err("transferd copy: interrupted; copied parts are recorded — run the same command to continue\n")
            return .interrupted
        } catch let error as UsageError {
            Output.err("transferd copy: \(error)\n")
            return .usage
        } catch {
            Output.err("transferd copy: \(Redaction.message(String(describing: error)))\n")
            return ExitCode.of(error, otherwise: .transferFailed)
        }
    }

    /// What a finished copy was checked against, for its line.
    static func describe(_ verdict: S3CopyPlan.Verdict, etag: String) -> String {
        switch verdict {
        case .sameETag: return "ETag \(etag) verified, the source's own"
        case .sizeOnly(let why): return "size verified; \(why)"
        case .differs(let why): return "differs: \(why)"
        }
    }
}
